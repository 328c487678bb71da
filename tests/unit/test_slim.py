"""Slim wheels' own logic (builder/steps/slim.py): which fatbin entries a slim wheel keeps, the link command found
in a build's log, labels and arch lists. The relink itself runs with real nvcc, objcopy and g++ in
tests/integration/test_slim_relink.py."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from builder.core.errors import WheelError
from builder.core.fatbin import parse_fatbin, select_entries
from builder.plan.accelerator import Accelerator
from builder.steps import slim
from builder.steps.slim import Link, cuttable, find_links, keeper, slim_archs, slim_label, slim_ptx
from builder.steps.twins import VariantTwins
from tests.jobs import local_job
from tests.synth import PTX, SASS, fatbin_container, fatbin_entry

LINK = (
    "g++ -Wsign-compare -DNDEBUG -g -fwrapv -O3 -Wall -shared /w/src/build/temp/csrc/a.o /w/src/build/temp/csrc/b.o "
    "-L/w/torch-site/torch/lib -lc10 -ltorch -o build/lib.linux-x86_64-cpython-311/ext_cuda.cpython-311-x86_64-linux-"
    "gnu.so"
)


def four_arch_job():  # type: ignore[no-untyped-def]
    return dataclasses.replace(local_job(), archs=("8.0", "9.0", "10.0", "12.0+PTX"))


def test_a_slim_fatbin_keeps_one_sass_and_the_jobs_ptx_in_every_container() -> None:
    one = fatbin_container(fatbin_entry(SASS, 80), fatbin_entry(SASS, 90), fatbin_entry(SASS, 120),
                           fatbin_entry(PTX, 120))
    data = one + b"\0" * (-len(one) % 8) + one
    slim = select_entries(data, keeper("9.0", ["12.0"]), where="test")
    assert [(e.kind, e.arch) for e in parse_fatbin(slim, where="test")] == [("sass", "9.0"), ("ptx", "12.0")] * 2
    assert len(slim) < len(data)


def test_a_container_left_without_entries_is_an_error_not_an_empty_fatbin() -> None:
    data = fatbin_container(fatbin_entry(SASS, 80))
    with pytest.raises(WheelError, match="would keep no entry"):
        select_entries(data, keeper("9.0", []), where="test")


@pytest.mark.parametrize(
    ("arch", "ptx", "kept"),
    [
        ("9.0", ["12.0"], ()),  # PTX of a later arch: never JIT-ed on a GPU given the sm_90 wheel
        ("12.0", ["12.0"], ("12.0",)),
        ("12.1", ["12.0"], ("12.0",)),
        ("9.0", ["8.0", "12.0"], ("8.0",)),
        ("9.0a", ["9.0"], ("9.0",)),  # an arch-specific SASS keeps its own family's PTX
        ("10.0", [], ()),
    ],
)
def test_a_slim_wheel_keeps_the_ptx_that_can_run_beside_its_sass(arch: str, ptx: list[str],
                                                                   kept: tuple[str, ...]) -> None:
    assert slim_ptx(arch, ptx) == kept


def test_the_link_command_is_found_by_the_shared_objects_name() -> None:
    log = f"[3/4] g++ -MMD -c x.cpp -o x.o\n{LINK}\ncopying build/lib/ext_cuda.so -> .\n"
    links = find_links(log, {"ext_cuda.cpython-311-x86_64-linux-gnu.so"})
    link = links["ext_cuda.cpython-311-x86_64-linux-gnu.so"]
    assert link.objects == ("/w/src/build/temp/csrc/a.o", "/w/src/build/temp/csrc/b.o")
    argv = link.with_inputs({"/w/src/build/temp/csrc/a.o": Path("/slim/a.o")}, Path("/slim/ext.so"))
    assert argv[7:10] == ["-shared", "/slim/a.o", "/w/src/build/temp/csrc/b.o"]
    assert argv[argv.index("-o") + 1] == "/slim/ext.so"


@pytest.mark.parametrize(
    "line",
    [
        "g++ -shared a.o -o other.so",  # another library
        "g++ -shared a.o -o",  # -o with nothing after it
        "g++ -shared 'a.o -o ext.so",  # unbalanced quote
        "g++ -c a.cpp -o ext.so",  # not a link
    ],
)
def test_lines_that_are_not_the_link_are_not_taken_for_it(line: str) -> None:
    assert find_links(line, {"ext.so"}) == {}


def test_labels_and_arch_lists_of_slim_wheels() -> None:
    job = four_arch_job()
    assert cuttable(job) == ("8.0", "9.0", "10.0", "12.0")
    assert slim_label("pt214cu130", "10.0") == "pt214cu130sm100"
    assert tuple(map(str, slim_archs(job, "9.0"))) == ("9.0",)  # compute_120 never runs on a 9.x GPU
    assert tuple(map(str, slim_archs(job, "12.0"))) == ("12.0", "compute_120")
    assert cuttable(dataclasses.replace(job, archs=("9.0",))) == ()  # one arch: the fat wheel is that arch's
    rocm = dataclasses.replace(job, accelerator=Accelerator.parse("rocm6.4"), archs=("gfx90a", "gfx942"))
    assert cuttable(rocm) == ()


def test_link_reads_its_parts_from_the_command() -> None:
    link = Link(argv=tuple(LINK.split()))
    assert link.output.endswith("ext_cuda.cpython-311-x86_64-linux-gnu.so")


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_one_maker_reads_a_fat_wheel_once_for_its_slim_checks_while_it_is_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fat = _zip(tmp_path / "p-1.0+pt214cu130-cp311-cp311-linux_x86_64.whl", {"p/__init__.py": b"x = 1\n"})
    reads: list[Path] = []
    real = slim.read_members
    monkeypatch.setattr(slim, "read_members", lambda path, **kw: reads.append(Path(path)) or real(path, **kw))
    maker = VariantTwins()
    for arch in ("sm80", "sm90", "sm120"):
        cut = _zip(tmp_path / f"p-1.0-cp311-cp311-linux_x86_64-pt214cu130{arch}.whl", {"p/__init__.py": b"x = 1\n"})
        assert maker.problems(fat, cut)  # no provenance in it: refused, after the fat wheel was read
    assert reads.count(fat) == 1
    _zip(fat, {"p/__init__.py": b"x = 2\n"})  # the same name, another file: read again
    assert maker.problems(fat, cut)
    assert reads.count(fat) == 2
    assert VariantTwins().problems(fat, cut) and reads.count(fat) == 3  # another maker (another run) reads it anew
