"""builder.core.archive: the bounded zip reader every archive read goes through. Names, caps and malformed
archives, one case a line, each on a crafted archive (tests/zipcraft.py), with small limits so a cap is reached in
kilobytes; and the readers that use it refuse what it refuses."""

from __future__ import annotations

import io
import os
import re
import struct
import zipfile
from pathlib import Path

import pytest

from builder.core import archive as archive_module
from builder.core.archive import FOREIGN, WHEEL, Archive, ArchiveError, Limits, check_names, open_archive, open_stream
from tests.zipcraft import Blob, Entry, craft, module, zeros

SMALL = Limits(members=8, directory_bytes=4096, member_bytes=4 << 20, total_bytes=6 << 20, ratio=50)


def files(*names: str) -> list[Entry]:
    return [module(name) for name in names]


# -- names -------------------------------------------------------------------------------------------------------------

REFUSED_NAMES = [
    ("empty", [""], r"'' has an empty name"),
    ("absolute", ["/etc/passwd"], r"'/etc/passwd' is an absolute path"),
    ("drive", ["C:/Windows/x.dll"], r"'C:/Windows/x\.dll' is an absolute path"),
    ("drive-relative", ["c:x.py"], r"'c:x\.py' is an absolute path"),
    ("climbing", ["pkg/../../x.py"], r"'pkg/\.\./\.\./x\.py' climbs out of the archive"),
    ("climbing-bare", [".."], r"'\.\.' climbs out"),
    ("climbing-folder-entry", ["../"], r"'\.\./' climbs out"),
    ("backslash-climbing", ["pkg\\..\\..\\x.py"], r"holds a backslash"),
    ("newline", ["pkg/a\nb.py"], r"holds a control character"),
    ("delete-char", ["pkg/a\x7fb.py"], r"holds a control character"),
    ("empty-part", ["pkg//x.py"], r"has an empty or '\.' part"),
    ("dot-part", ["pkg/./x.py"], r"has an empty or '\.' part"),
    ("duplicate", ["pkg/x.py", "pkg/x.py"], r"'pkg/x\.py' appears twice"),
    ("duplicate-folder", ["pkg/", "pkg/"], r"'pkg/' appears twice"),
    ("case-twin", ["pkg/Ops.py", "pkg/ops.py"], r"'pkg/ops\.py' differs from 'pkg/Ops\.py' only by case"),
    ("file-and-folder", ["pkg/a", "pkg/a/b.py"], r"'pkg/a' is both a file and a folder"),
    ("folder-entry-and-file", ["pkg/a/", "pkg/a"], r"'pkg/a' appears twice"),
]


@pytest.mark.parametrize(("names", "pattern"), [c[1:] for c in REFUSED_NAMES], ids=[c[0] for c in REFUSED_NAMES])
def test_a_name_that_leaves_repeats_or_collides_is_refused_naming_the_member(names: list[str], pattern: str) -> None:
    with pytest.raises(ArchiveError, match=pattern):
        check_names(names, "w.whl")


@pytest.mark.parametrize(("names", "pattern"), [c[1:] for c in REFUSED_NAMES if "" not in c[1] and "/" != c[1][0][-1:]],
                         ids=[c[0] for c in REFUSED_NAMES if "" not in c[1] and "/" != c[1][0][-1:]])
def test_the_same_names_in_an_archive_are_refused_when_it_is_opened(tmp_path: Path, names: list[str],
                                                                    pattern: str) -> None:
    path = craft(tmp_path / "w.whl", files(*names))
    with pytest.raises(ArchiveError, match=pattern), open_archive(path, SMALL):
        pass


def test_ordinary_names_pass_and_folders_are_not_files(tmp_path: Path) -> None:
    names = ["pkg/", "pkg/__init__.py", "pkg/ops/kernels.cpython-311-x86_64-linux-gnu.so", "pkg-1.0.dist-info/RECORD",
             "pkg/données.py"]
    path = craft(tmp_path / "w.whl", files(*names))
    with open_archive(path, SMALL) as opened:
        assert opened.names() == names[1:]
        assert opened.read("pkg/données.py") == b"VALUE = 1\n"


def test_case_twins_pass_where_case_folding_is_off(tmp_path: Path) -> None:
    """torch's wheel is read for one file, not unpacked: its names are not ours to judge by case."""
    path = craft(tmp_path / "torch.whl", files("torch/A.h", "torch/a.h"))
    with open_archive(path, FOREIGN) as opened:
        assert opened.names() == ["torch/A.h", "torch/a.h"]


# -- caps --------------------------------------------------------------------------------------------------------------


def many(count: int, blob: Blob | None = None) -> list[Entry]:
    return [Entry(name=f"pkg/m{k}.bin", blob=blob or Blob.of(b"x")) for k in range(count)]


CAPS = [
    ("members", lambda: many(9), r"9 members; at most 8 are read"),
    ("central-directory", lambda: [module("pkg/" + "n" * 4100)], r"4,\d+-byte central directory; at most 4,096"),
    ("member-declared", lambda: [Entry(name="pkg/w.bin", blob=Blob.of(os.urandom(5 << 20), deflate=False))],
     r"'pkg/w\.bin' declares more than 4,194,304 bytes, the cap for one member"),
    ("member-ratio", lambda: [Entry(name="pkg/w.bin", blob=zeros(2 << 20))],
     r"'pkg/w\.bin' declares 2,097,152 bytes from [\d,]+ compressed: more than 50:1"),
    ("total-declared", lambda: many(2, Blob.of(os.urandom(7 << 19), deflate=False)),
     r"inflate to more than 6,291,456 bytes together \(at member 'pkg/m1\.bin'\)"),
    ("total-ratio", lambda: many(8, zeros(1 << 20)),
     r"inflate to [\d,]+ bytes from a [\d,]+-byte archive: more than 50:1"),
]


@pytest.mark.parametrize(("entries", "pattern"), [c[1:] for c in CAPS], ids=[c[0] for c in CAPS])
def test_each_cap_refuses_before_a_byte_past_it_is_held(tmp_path: Path, entries, pattern: str) -> None:
    path = craft(tmp_path / "w.whl", entries())
    with pytest.raises(ArchiveError, match=pattern), open_archive(path, SMALL) as opened:
        for info in opened.files:
            opened.read(info)


def test_the_member_count_is_refused_from_the_end_record_before_zipfile_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = craft(tmp_path / "w.whl", many(9))
    monkeypatch.setattr(archive_module.zipfile, "ZipFile", lambda *a, **k: pytest.fail("zipfile parsed it"))
    with pytest.raises(ArchiveError, match="9 members"), open_archive(path, SMALL):
        pass


@pytest.mark.parametrize("bomb", [2 << 20, 64 << 20], ids=["2-mib", "64-mib"])
def test_counting_stops_a_bomb_whose_header_is_not_consulted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bomb: int
) -> None:
    """The header check off: the bytes counted as they inflate stop the member at its first chunk past a cap."""
    path = craft(tmp_path / "w.whl", [Entry(name="pkg/w.bin", blob=zeros(bomb))])
    monkeypatch.setattr(Archive, "_check_declared", lambda self, info: None)
    seen = 0
    with pytest.raises(ArchiveError, match=r"'pkg/w\.bin' inflates to"), open_archive(path, SMALL) as opened:
        for chunk in opened.chunks("pkg/w.bin"):
            seen += len(chunk)
    allowed = max(archive_module.RATIO_FLOOR, SMALL.ratio * len(zeros(bomb).raw))
    assert seen <= allowed + archive_module._CHUNK  # what was yielded before the chunk that crossed


# -- malformed archives ------------------------------------------------------------------------------------------------


def lying_small(tmp: Path) -> Path:
    return craft(tmp / "w.whl", [Entry(name="pkg/w.bin", blob=Blob.of(b"a" * 5000), declared_size=100)])


def overlapping(tmp: Path) -> Path:
    """Fifield's bomb: two entries over one compressed stream (it inflates once per entry)."""
    return craft(tmp / "w.whl", [module("pkg/a.py"), Entry(name="pkg/b.py", blob=Blob.of(b"VALUE = 1\n"),
                                                            same_data_as=0)])


def method(number: int) -> Blob:
    return Blob(raw=b"BZh9", crc=0, size=4, method=number)


def corrupt_deflate(tmp: Path) -> Path:
    return craft(tmp / "w.whl", [Entry(name="pkg/w.bin", blob=Blob(raw=b"\xff" * 64, crc=0, size=100))])


def encrypted(tmp: Path) -> Path:
    return craft(tmp / "w.whl", [Entry(name="pkg/w.py", blob=Blob.of(b"x"), flags=0x801)])


def truncated(tmp: Path) -> Path:
    path = craft(tmp / "w.whl", files("pkg/a.py", "pkg/b.py"))
    path.write_bytes(path.read_bytes()[:-30])
    return path


def written(content: bytes) -> object:
    def write(tmp: Path) -> Path:
        (tmp / "w.whl").write_bytes(content)
        return tmp / "w.whl"

    return write


def fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "w.whl")
    return tmp / "w.whl"


def folder(tmp: Path) -> Path:
    (tmp / "w.whl").mkdir()
    return tmp / "w.whl"


MALFORMED = [
    ("header-says-smaller", lying_small, r"'pkg/w\.bin' cannot be read \(Bad CRC-32"),
    ("overlapping-entries", overlapping, r"'pkg/a\.py' overlaps member 'pkg/b\.py'"),
    ("bzip2", lambda tmp: craft(tmp / "w.whl", [Entry(name="pkg/w", blob=method(12))]), r"compression method 12"),
    ("lzma", lambda tmp: craft(tmp / "w.whl", [Entry(name="pkg/w", blob=method(14))]), r"compression method 14"),
    ("corrupt-deflate", corrupt_deflate, r"'pkg/w\.bin' cannot be read"),
    ("encrypted", encrypted, r"'pkg/w\.py' cannot be read \(File .* is encrypted"),
    ("truncated", truncated, r"not a zip archive \(no end of central directory\)"),
    ("empty-file", written(b""), r"not a zip archive"),
    ("random-bytes", written(os.urandom(4096).replace(b"PK", b"pk")), r"not a zip archive"),
    ("fifo", fifo, r"not a regular file"),
    ("folder", folder, r"not a regular file"),
    ("missing", lambda tmp: tmp / "w.whl", r"cannot open \(No such file"),
]


@pytest.mark.parametrize(("setup", "pattern"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_archive_is_one_archive_error(tmp_path: Path, setup, pattern: str) -> None:
    path = setup(tmp_path)
    with pytest.raises(ArchiveError, match=pattern), open_archive(path, SMALL) as opened:
        for info in opened.files:
            opened.read(info)


def test_a_missing_member_is_named(tmp_path: Path) -> None:
    path = craft(tmp_path / "w.whl", files("pkg/a.py"))
    with pytest.raises(ArchiveError, match=r"no member 'torch/version\.py'"), open_archive(path) as opened:
        opened.read("torch/version.py")


@pytest.mark.parametrize(("comment", "readable"), [(b"built by us", True), (b"PK\x05\x06" + b"\xff" * 18, False)],
                         ids=["plain-comment", "comment-holding-an-end-record"])
def test_the_end_record_is_the_one_zipfile_goes_by(tmp_path: Path, comment: bytes, readable: bool) -> None:
    """A signature in the comment is the end record zipfile takes (its last); the counts checked are its."""
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/a.py", "x")
        archive.comment = comment
    if readable:
        with open_archive(path, SMALL) as opened:
            assert opened.names() == ["pkg/a.py"]
    else:
        with pytest.raises(ArchiveError, match="65,535 members; at most 8"), open_archive(path, SMALL):
            pass


def test_a_zip64_end_record_gives_the_counts(tmp_path: Path) -> None:
    """zipfile goes by the zip64 record where there is one; so does the count check."""
    zip64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 70_000, 70_000, 100, 0)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, 0, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    data = zip64 + locator + end
    with pytest.raises(ArchiveError, match="70,000 members; at most 8"), open_stream(io.BytesIO(data), len(data),
                                                                                     "w.whl", SMALL):
        pass


def test_extract_writes_every_member_under_its_folder_and_nothing_else(tmp_path: Path) -> None:
    path = craft(tmp_path / "w.whl", [*files("pkg/a.py", "pkg/sub/b.py"), Entry(name="pkg/empty/", blob=Blob.of(b""))])
    into = tmp_path / "into"
    into.mkdir()
    with open_archive(path) as opened:
        opened.extract(into)
    assert sorted(p.relative_to(into).as_posix() for p in into.rglob("*")) == [
        "pkg", "pkg/a.py", "pkg/empty", "pkg/sub", "pkg/sub/b.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["into", "w.whl"]


# -- the readers that use it -------------------------------------------------------------------------------------------


def test_read_members_refuses_a_bomb_naming_the_member(tmp_path: Path) -> None:
    from builder.steps.wheelzip import read_members

    path = craft(tmp_path / "w.whl", [module("pkg/a.py"), Entry(name="pkg/w.bin", blob=zeros(64 << 20))])
    with pytest.raises(ArchiveError, match=r"'pkg/w\.bin' declares 67,108,864 bytes .* more than 50:1"):
        read_members(path)


def test_unpacked_refuses_a_climbing_member_and_writes_nothing(tmp_path: Path) -> None:
    from builder.steps.elf import unpacked

    path = craft(tmp_path / "in/w.whl", files("pkg/a.py", "pkg/../../../owned.py"))
    with pytest.raises(ArchiveError, match="climbs out"), unpacked(path):
        pass
    assert not (tmp_path / "owned.py").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_the_torch_wheels_version_file_is_read_within_the_caps(tmp_path: Path) -> None:
    from builder.steps.environment import check_torch_wheel
    from builder.steps.torch_index import TorchMismatch, TorchWheel
    from tests.jobs import local_job

    wheel = TorchWheel(filename="torch.whl", url="http://mirror/torch.whl", sha256=None, index="http://mirror/",
                       origin="torch-index")
    path = craft(tmp_path / "torch.whl", [Entry(name="torch/version.py", blob=zeros(64 << 20))])
    with pytest.raises(TorchMismatch, match=r"served no readable torch wheel: .*'torch/version\.py' declares more "
                                            r"than 16,777,216 bytes"):
        check_torch_wheel(local_job(), path, wheel)


def test_the_standing_limits_are_the_documented_ones() -> None:
    """docs/hostile-input.md states these figures and why; change both together."""
    assert WHEEL == Limits(members=10_000, directory_bytes=16 << 20, member_bytes=2 << 30, total_bytes=2 << 30,
                           ratio=50)
    assert (FOREIGN.members, FOREIGN.member_bytes, FOREIGN.case_folding) == (200_000, 16 << 20, False)


@pytest.mark.parametrize(("entries", "pattern"), [
    ([module("causal_conv1d/__init__.py"), Entry(name="causal_conv1d/w.bin", blob=zeros(64 << 20))],
     r"'causal_conv1d/w\.bin' declares 67,108,864 bytes .* more than 50:1"),
    ([module("causal_conv1d/__init__.py"), module("causal_conv1d/__init__.py")],
     r"'causal_conv1d/__init__\.py' appears twice"),
    ([module("causal_conv1d/__init__.py"), module("../../owned.py")], r"'\.\./\.\./owned\.py' climbs out"),
], ids=["bomb", "duplicate", "climbing"])
def test_the_verify_gate_fails_a_hostile_wheel_as_unreadable(
    tmp_path: Path, entries: list[Entry], pattern: str
) -> None:
    from builder.steps.verify import verify_wheel
    from tests.jobs import local_job

    path = craft(tmp_path / "in/causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl", entries)
    report = verify_wheel(path, local_job(), runtime=None)
    assert not report.ok and [c.name for c in report.checks] == ["readable"]
    assert re.search(pattern, report.reasons[0]), report.reasons
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
