"""Provenance inside the wheel: embedded after repair, checked against the payload, the metadata and the fatbins;
a wheel changed afterwards (tampered) is refused by the verify gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.core.errors import WheelError
from builder.core.fatbin import FatbinContents
from builder.steps import provenance
from builder.steps.elf import ElfFacts
from builder.steps.verify import verify_wheel
from builder.steps.wheelzip import Member, read_members, write_wheel
from scripts.bench.wheels import job_wheel
from tests.jobs import local_job
from tests.synth import PTX, SASS, elf_with_sections, fatbin_container, fatbin_entry

JOB = local_job()
EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
# what Toolchain.as_dict() gives the build (and the ledger): the record takes its toolkit and compiler from it
TOOLCHAIN = {
    "source": "host-13.0",
    "cuda": "13.0",
    "root": "/usr/local/cuda-13.0",
    "cc": "/usr/bin/gcc-12",
    "cxx": "/usr/bin/g++-12",
}
KERNELS = elf_with_sections({".text": b"\xc3" * 8, ".nv_fatbin": fatbin_container(fatbin_entry(SASS, 90))})


@pytest.fixture(autouse=True)
def _no_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "_first_line", lambda command, log_path: f"{Path(command[0]).name} 1.0")
    monkeypatch.setenv("WHEELWRIGHT_COMMIT", "0123abc")


def built(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    wheel = job_wheel(tmp_path, JOB, {"causal_conv1d/__init__.py": b"x = 1\n", EXTENSION: KERNELS})
    provenance.embed(wheel, provenance.build_record(JOB, toolchain=TOOLCHAIN))
    return wheel


def rewrite(wheel: Path, name: str, data: bytes) -> None:
    members = read_members(wheel)
    members[name] = Member(data=data)
    write_wheel(wheel, members)  # a consistent RECORD: only provenance can tell


def test_record_says_how_the_wheel_was_made(tmp_path: Path) -> None:
    record = provenance.read_wheel(built(tmp_path)).record
    assert record["sdist"] == {"filename": JOB.sdist.filename, "sha256": JOB.sdist.sha256}
    assert record["torch"] == {"version": "2.14.1", "requirement": "torch==2.14.*", "cxx11_abi": JOB.cxx11_abi}
    assert record["archs"] == {"sass": ["9.0"], "ptx": []}
    assert record["toolkit"] == {"kind": "cuda", "version": JOB.accelerator.version, **TOOLCHAIN, "nvcc": "nvcc 1.0"}
    assert record["host_compiler"] == "g++-12 1.0"  # the toolchain's own compiler was asked, not $CXX
    assert record["wheelwright"]["commit"] == "0123abc"
    assert set(record["files"]) == {"causal_conv1d/__init__.py", EXTENSION}
    assert [p["name"] for p in record["recipe"]["patches"]] == [p.name for p in JOB.recipe.patches]


def test_untouched_wheel_agrees(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    elves = (ElfFacts(path=EXTENSION, gpu=FatbinContents(sass=frozenset({"9.0"}))),)
    assert provenance.disagreements(read_members(wheel), wheel.name, elves) == []


def test_embedding_is_reproducible(tmp_path: Path) -> None:
    first, second = built(tmp_path / "a"), built(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_tampered_payload_is_named(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    rewrite(wheel, EXTENSION, KERNELS + b"evil")
    (problem,) = provenance.disagreements(read_members(wheel), wheel.name)
    assert problem.startswith(f"{EXTENSION}: sha256") and "provenance records" in problem


def test_added_file_and_changed_pin_are_named(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    rewrite(wheel, "causal_conv1d/extra.py", b"")
    dist_info = f"{JOB.dist_name}-{JOB.local_version}.dist-info"
    metadata = read_members(wheel)[f"{dist_info}/METADATA"].data.replace(b"torch==2.14.*", b"torch>=2")
    rewrite(wheel, f"{dist_info}/METADATA", metadata)
    problems = provenance.disagreements(read_members(wheel), wheel.name)
    assert "in the wheel but not recorded: causal_conv1d/extra.py" in problems
    assert any("pins ['torch>=2'] but provenance records torch==2.14.*" in p for p in problems)


def test_arch_mismatch_is_named(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    elves = (ElfFacts(path=EXTENSION, gpu=FatbinContents(sass=frozenset({"8.0"}))),)
    (problem,) = provenance.disagreements(read_members(wheel), wheel.name, elves)
    assert "SASS ['8.0']" in problem and "records SASS ['9.0']" in problem


def test_missing_or_broken_record(tmp_path: Path) -> None:
    plain = job_wheel(tmp_path, JOB, {"causal_conv1d/__init__.py": b""})
    (problem,) = provenance.disagreements(read_members(plain), plain.name)
    assert "no causal_conv1d-1.7.0+pt214cu130.dist-info/wheelwright.json" in problem
    rewrite(plain, f"{JOB.dist_name}-{JOB.local_version}.dist-info/wheelwright.json", b"{not json")
    with pytest.raises(WheelError, match="is not JSON"):
        provenance.read_wheel(plain)


def test_verify_gate_refuses_tampered_wheel(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    before = {c.name: c for c in verify_wheel(wheel, JOB, runtime=None).checks}
    assert before["provenance"].ok
    rewrite(wheel, "causal_conv1d/__init__.py", b"import os; os.system('evil')\n")
    report = verify_wheel(wheel, JOB, runtime=None)
    check = {c.name: c for c in report.checks}["provenance"]
    assert not check.ok and "causal_conv1d/__init__.py: sha256" in check.detail
    assert not report.ok and any(r.startswith("provenance: ") for r in report.reasons)


def test_record_is_json_with_sorted_keys(tmp_path: Path) -> None:
    wheel = built(tmp_path)
    raw = read_members(wheel)[f"{JOB.dist_name}-{JOB.local_version}.dist-info/wheelwright.json"].data
    assert raw == provenance.encode(json.loads(raw))


@pytest.mark.parametrize(
    ("archs", "sass", "ptx"),
    [
        (("9.0",), ["9.0"], []),
        (("10.0+PTX", "8.0", "9.0"), ["8.0", "9.0", "10.0"], ["10.0"]),
        (("compute_80",), [], ["8.0"]),  # PTX alone: the spelling the PTX-only wheel of the GPU proof uses
        (("compute_90", "8.0"), ["8.0"], ["9.0"]),
    ],
)
def test_record_archs_follow_every_plan_spelling(archs, sass, ptx) -> None:
    assert provenance.job_archs(local_job(archs=archs)) == {"sass": sass, "ptx": ptx}


def test_a_ptx_only_wheel_agrees_with_its_record(tmp_path: Path) -> None:
    job = local_job(archs=("compute_80",))
    ptx_only = elf_with_sections({".text": b"\xc3" * 8, ".nv_fatbin": fatbin_container(fatbin_entry(PTX, 80))})
    wheel = job_wheel(tmp_path, job, {"causal_conv1d/__init__.py": b"x = 1\n", EXTENSION: ptx_only})
    provenance.embed(wheel, provenance.build_record(job, toolchain=TOOLCHAIN))
    elves = (ElfFacts(path=EXTENSION, gpu=FatbinContents(ptx=frozenset({"8.0"}))),)
    assert provenance.disagreements(read_members(wheel), wheel.name, elves) == []



def test_the_checkout_commit_is_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build records the commit of the code it loaded: a checkout that moves on during the build (a merge while
    an hour-long matrix runs) does not change what later wheels of that build say."""
    import subprocess

    head = {"commit": "1111111"}
    calls: list[list[str]] = []

    def git(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        out = head["commit"] + "\n" if "rev-parse" in command else ""
        return subprocess.CompletedProcess(command, 0, stdout=out, stderr="")

    monkeypatch.delenv("WHEELWRIGHT_COMMIT")
    monkeypatch.setattr(subprocess, "run", git)  # provenance imports it where it asks git
    provenance._checkout_commit.cache_clear()
    try:
        assert provenance.wheelwright_commit() == "1111111"
        head["commit"] = "2222222"  # the checkout moves on
        assert provenance.wheelwright_commit() == "1111111"
        assert len(calls) == 2  # rev-parse and status, once
        monkeypatch.setenv("WHEELWRIGHT_COMMIT", "0123abc")  # the override still wins
        assert provenance.wheelwright_commit() == "0123abc"
    finally:
        provenance._checkout_commit.cache_clear()


def test_a_build_in_a_builder_image_names_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container backend sets WHEELWRIGHT_BUILDER_IMAGE; the record read another variable and said
    "none (host build)" for every wheel built in a container."""
    monkeypatch.setenv("WHEELWRIGHT_BUILDER_IMAGE", "wheelwright/builder:cuda12.4-bullseye-0123456789ab")
    assert provenance._host()["image"] == "wheelwright/builder:cuda12.4-bullseye-0123456789ab"
    monkeypatch.delenv("WHEELWRIGHT_BUILDER_IMAGE")
    assert provenance._host()["image"] == "none (host build)"
