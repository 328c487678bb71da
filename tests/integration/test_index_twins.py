"""Variant twins follow their wheel, and one bad input is one bad row, through the real `wheelwright index` in a
subprocess (bounded in time and memory, tests/integration/test_hostile.py's runner): a twin is published only while
its wheel is in dist/ and the index accepted it, and only if it matches that wheel by content, checked again
whenever either file's identity moved; a wheel or twin that fails any check is left out with its reason and the
rest is written; nothing unchecked is published by a later run. After each case the site checker passes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.plan.accelerator import Accelerator
from builder.steps.variant import make_twin
from builder.steps.wheelzip import Member, read_members, write_wheel
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.integration.test_hostile import Run, wheelwright
from tests.jobs import local_job
from tests.sitecheck import check_site

pytestmark = pytest.mark.timeout(180)
CU126 = {"accelerator": Accelerator.parse("cu126")}


def verified(out: Path, payload: bytes = b"x = 1\n", **changes: object) -> Path:
    """A wheel of dist/ as the build leaves it: provenance embedded, the verify gate passed."""
    job = local_job(**changes)
    files = {"causal_conv1d/__init__.py": payload}
    (out / "dist").mkdir(parents=True, exist_ok=True)
    return with_provenance(job_wheel(out / "dist", job, files, platform="manylinux_2_28_x86_64"), job)


def index(out: Path) -> Run:
    run = wheelwright("index", "--output", out, cwd=out.parent, timeout=120)
    assert run.code == 0 and "Traceback" not in run.output, run.output
    assert check_site(out / "site") == []
    return run


def published(out: Path) -> list[str]:
    """The twins of the site's variant channel, and those its pages list (the nulls and guards beside them,
    index_site/fallback.py, aside)."""
    twin = re.compile(r"-pt\d+cu\d+\.whl$")
    files = sorted(path.name for path in (out / "site/variant/files").glob("*.whl") if twin.search(path.name))
    root = out / "site/variant/simple/causal-conv1d/index.html"
    listed = sorted(set(re.findall(r"[\w.+-]+-pt\d+cu\d+\.whl", root.read_text()))) if root.exists() else []
    assert listed == files
    return files


def twin_of(wheel: Path) -> str:
    name, version, rest = wheel.name.removesuffix(".whl").split("-", 2)
    public, label = version.split("+")
    return f"{name}-{public}-{rest}-{label}.whl"


def warnings_about(run: Run, name: str) -> list[str]:
    return [line for line in run.output.splitlines() if line.startswith("WARN") and name in line]


# -- twins follow their wheel ----------------------------------------------------------------------------------


def test_a_verified_wheel_gets_its_twin_published_and_an_unchanged_run_checks_nothing_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = verified(out)
    first = index(out)
    assert published(out) == [twin_of(wheel)]
    assert "variant twins: 1 published, 1 made" in first.output
    again = index(out)
    assert "variant twins: 1 published, 0 made" in again.output and not warnings_about(again, "twin")


def test_a_withdrawn_wheel_withdraws_its_twin_from_the_site_and_the_channel(tmp_path: Path) -> None:
    out = tmp_path / "out"
    kept, withdrawn = verified(out), verified(out, **CU126)
    index(out)
    assert published(out) == sorted([twin_of(kept), twin_of(withdrawn)])
    withdrawn.unlink()
    run = index(out)
    assert published(out) == [twin_of(kept)]
    assert "pt214cu126" not in (out / "site/variant/simple/index.html").read_text() + "".join(
        path.read_text() for path in (out / "site/variant").rglob("*.html")
    )
    assert any("no wheel" in line and "withdrawn" in line for line in warnings_about(run, twin_of(withdrawn)))


def _rewrite_payload(twin: Path) -> None:
    members = read_members(twin)
    members["causal_conv1d/__init__.py"] = Member(data=b"x = 666\n")
    write_wheel(twin, members)


def _same_size_in_place(twin: Path) -> None:
    """Other bytes of the same size written into the same inode (the zip's comment), the mtime set back."""
    data = bytearray(twin.read_bytes())
    data[-1:] = b"!" if data[-1:] != b"!" else b"?"
    status = twin.stat()
    with open(twin, "r+b") as file:
        file.write(bytes(data))
    os.utime(twin, ns=(status.st_atime_ns, status.st_mtime_ns))


def _replace_member(name: str, data: bytes) -> Callable[[Path], None]:
    def replace(twin: Path) -> None:
        members = read_members(twin)
        (member,) = [m for m in members if m.endswith(f".dist-info/{name}")]
        members[member] = Member(data=data)
        status = twin.stat()
        write_wheel(twin, members)
        os.utime(twin, ns=(status.st_atime_ns, status.st_mtime_ns))

    return replace


def _drop_member(name: str) -> Callable[[Path], None]:
    def drop(twin: Path) -> None:
        members = {m: data for m, data in read_members(twin).items() if not m.endswith(f".dist-info/{name}")}
        write_wheel(twin, members)

    return drop


# (case, what is done to the twin in OUTPUT/variant after it was published)
TAMPERED = [
    ("payload-changed", _rewrite_payload),
    ("variant-json-wrong-typed", _replace_member("variant.json", b'{"variants": {"pt214cu130": "sm_90"}}')),
    ("variant-json-not-json", _replace_member("variant.json", b"{not json")),
    ("variant-json-other-label", _replace_member("variant.json", b'{"variants": {"pt213cu130": {}}}')),
    ("provenance-wrong-typed", _replace_member("wheelwright.json", b'{"archs": "9.0", "files": []}')),
    ("provenance-removed", _drop_member("wheelwright.json")),
    ("metadata-changed", _replace_member("METADATA", b"Metadata-Version: 2.1\nName: causal-conv1d\nVersion: 1.7.0\n")),
]


@pytest.mark.parametrize("tamper", [case[1] for case in TAMPERED], ids=[case[0] for case in TAMPERED])
def test_a_twin_that_no_longer_matches_its_wheel_is_named_and_made_again(tmp_path: Path, tamper) -> None:
    out = tmp_path / "out"
    wheel = verified(out)
    index(out)
    twin = out / "variant" / twin_of(wheel)
    good = twin.read_bytes()
    tamper(twin)
    run = index(out)
    assert any("made again" in line for line in warnings_about(run, twin.name)), run.output
    assert published(out) == [twin.name]
    assert (out / "site/variant/files" / twin.name).read_bytes() == good  # made again: the same bytes


def test_a_twin_rewritten_in_place_with_its_mtime_restored_never_keeps_its_old_sha256(tmp_path: Path) -> None:
    """Same size, same inode, mtime set back: only the ctime moved. The pages state the new bytes' digest."""
    out = tmp_path / "out"
    wheel = verified(out)
    index(out)
    twin = out / "variant" / twin_of(wheel)
    before = hashlib.sha256(twin.read_bytes()).hexdigest()
    _same_size_in_place(twin)
    index(out)  # the site checker compares every stated digest with the bytes
    after = hashlib.sha256((out / "site/variant/files" / twin.name).read_bytes()).hexdigest()
    page = (out / "site/variant/simple/causal-conv1d/index.html").read_text()
    assert before not in page and after in page


def test_a_rebuilt_wheel_has_its_stale_twin_made_again(tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = verified(out)
    index(out)
    verified(out, payload=b"x = 2\n")  # the same name, other bytes
    run = index(out)
    twin = out / "site/variant/files" / twin_of(wheel)
    assert b"x = 2" in zipfile.ZipFile(twin).read("causal_conv1d/__init__.py")
    assert any("payload differs" in line for line in warnings_about(run, twin.name)), run.output


def test_an_orphan_twin_is_refused_and_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    elsewhere = verified(tmp_path / "elsewhere")
    make_twin(elsewhere, out / "variant")  # a twin whose wheel never reached dist/
    verified(out, **CU126)
    run = index(out)
    assert published(out) == [twin_of(verified(tmp_path / "again", **CU126))]
    assert any("no wheel" in line for line in warnings_about(run, twin_of(elsewhere))), run.output


def _no_twin_name(variant: Path) -> str:
    (variant / "notes-1.0-py3-none-any.whl").write_bytes(b"zip?")
    return "notes-1.0-py3-none-any.whl: not a variant twin's name"


def _link_out(variant: Path) -> str:
    os.symlink("/etc/passwd", variant / "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu126.whl")
    return "pt214cu126.whl: not a regular file"


def _name_not_utf8(variant: Path) -> str:
    """A byte no UTF-8 text holds: os.scandir hands it over as a lone surrogate, which no page, log line or SQLite
    row takes as it is."""
    (variant / os.fsdecode(b"causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu126\xff.whl")).write_bytes(b"zip?")
    return "pt214cu126\\xff.whl: a name not in UTF-8"


@pytest.mark.parametrize(
    "plant", [_no_twin_name, _link_out, _name_not_utf8], ids=["no-twin-name", "link-out", "not-utf8"]
)
def test_a_file_of_variant_that_is_no_twin_is_refused_and_named(tmp_path: Path, plant: Callable[[Path], str]) -> None:
    out = tmp_path / "out"
    verified(out)
    (out / "variant").mkdir(parents=True, exist_ok=True)
    shown = plant(out / "variant")
    for _ in range(2):  # and the next run, which finds the state the first left
        run = index(out)
        assert warnings_about(run, shown), run.output
        assert len(published(out)) == 1


def test_the_twin_of_a_wheel_the_index_refuses_is_not_published(tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = verified(out)
    index(out)
    members = read_members(wheel)
    (record,) = [m for m in members if m.endswith("wheelwright.json")]
    members[record] = Member(data=b"{not json")
    write_wheel(wheel, members)
    for _ in range(2):  # and a later run publishes nothing unchecked either
        run = index(out)
        assert published(out) == []
        assert any("its wheel was refused" in line for line in warnings_about(run, twin_of(wheel))), run.output
        assert not (out / "site/whl/pt214cu130" / wheel.name).exists()


def test_wheels_without_provenance_are_summarised_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for python in ("cp310", "cp311", "cp312"):
        make_wheel(out / "dist", WheelSpec(python=python))
    run = index(out)
    lines = warnings_about(run, "no variant twin")
    assert len(lines) == 1 and "for 3 wheels: no wheelwright.json" in lines[0], run.output


# -- one bad input, one bad row -------------------------------------------------------------------------------


def _zip(path: Path, members: list[tuple[str, bytes]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate names these cases write on purpose
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members:
                info = zipfile.ZipInfo(name)
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)


def _crafted(extra: list[tuple[str, bytes]]) -> Callable[[Path], str]:
    """A wheel of a good name and METADATA around ``extra`` members."""

    def write(dist: Path) -> str:
        spec = WheelSpec(label="pt213cu130")
        dist_info = f"causal_conv1d-{spec.version}+{spec.label}.dist-info"
        metadata = f"Metadata-Version: 2.1\nName: causal-conv1d\nVersion: {spec.version}+{spec.label}\n".encode()
        _zip(dist / spec.wheel_filename, [(f"{dist_info}/METADATA", metadata), *extra])
        return spec.wheel_filename

    return write


def _with_record(data: bytes) -> Callable[[Path], str]:
    def write(dist: Path) -> str:
        wheel = verified(dist.parent, **CU126)
        members = read_members(wheel)
        (record,) = [m for m in members if m.endswith("wheelwright.json")]
        members[record] = Member(data=data)
        write_wheel(wheel, members)
        return wheel.name

    return write


def _long_name(dist: Path) -> str:
    """A legal wheel filename of 245 characters (a project name of 199)."""
    spec = WheelSpec(project="c" * 199, label="pt213cu130")
    assert len(spec.wheel_filename) == 245
    make_wheel(dist, spec)
    return spec.wheel_filename


GOOD_RECORD = {"label": "pt214cu126", "version": "1.7.0", "archs": {"sass": ["9.0"], "ptx": []}, "files": {}}
# (case, writes the bad file into dist/ and returns its name, pattern of its WARN line)
BAD_ROWS = [
    ("provenance-not-json", _with_record(b"{not json"), r"wheelwright\.json is not JSON"),
    ("provenance-a-list", _with_record(b"[1, 2]"), r"wheelwright\.json is not a JSON object"),
    ("provenance-archs-a-string", _with_record(json.dumps({**GOOD_RECORD, "archs": "9.0"}).encode()), r"'archs'"),
    ("provenance-files-a-list", _with_record(json.dumps({**GOOD_RECORD, "files": []}).encode()), r"'files'"),
    ("provenance-torch-a-string", _with_record(json.dumps({**GOOD_RECORD, "torch": "2.14"}).encode()), r"'torch'"),
    ("provenance-other-label", _with_record(json.dumps({**GOOD_RECORD, "label": "pt213cu130"}).encode()),
     r"records 'pt213cu130'"),
    ("provenance-deeply-nested", _with_record(b"[" * 100_000 + b"]" * 100_000), r"wheelwright\.json is not JSON"),
    ("name-245-characters", _long_name, r"a name of 245 characters; the index takes at most 200"),
    ("member-bomb", _crafted([("causal_conv1d/zeros.so", bytes(64 << 20))]), r"zeros\.so.*zip bomb"),
    ("member-climbs", _crafted([("../../evil.py", b"x")]), r"'\.\./\.\./evil\.py'.*climbs"),
    ("member-absolute", _crafted([("/etc/evil.py", b"x")]), r"'/etc/evil\.py'.*absolute"),
    ("member-twice", _crafted([("causal_conv1d/a.py", b"1"), ("causal_conv1d/a.py", b"2")]), r"appears twice"),
    ("member-case-collides", _crafted([("causal_conv1d/A.py", b"1"), ("causal_conv1d/a.py", b"2")]), r"only by case"),
]


@pytest.mark.parametrize(("write", "pattern"), [c[1:] for c in BAD_ROWS], ids=[c[0] for c in BAD_ROWS])
def test_one_bad_wheel_is_one_bad_row_and_the_rest_is_indexed(tmp_path: Path, write, pattern: str) -> None:
    out = tmp_path / "out"
    good = verified(out)
    (out / "dist").mkdir(parents=True, exist_ok=True)
    bad = write(out / "dist")
    for _ in range(2):  # a later run refuses it again, from its row: nothing unchecked is published
        run = index(out)
        lines = warnings_about(run, bad[:40])
        assert lines and re.search(pattern, lines[0]), run.output
        assert sorted(path.name for path in (out / "site/whl").rglob("*.whl")) == [good.name]
        assert published(out) == [twin_of(good)]
