"""The stage cache's own logic (builder/steps/programs/stagecache.py): what a device step is keyed on, what a hit
restores, what verify mode says; fake programs and files, no compiler (tests/integration/test_stagecache_nvcc.py
runs nvcc)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.steps import compilation, nvcc_time
from builder.steps.programs import stagecache


@pytest.fixture
def toolkit(tmp_path: Path) -> dict[str, str]:
    """The dryrun's variables of a fake toolkit: cicc and libdevice files whose bytes stand for the programs."""
    (tmp_path / "nvvm" / "bin").mkdir(parents=True)
    (tmp_path / "nvvm" / "libdevice").mkdir()
    (tmp_path / "nvvm" / "bin" / "cicc").write_bytes(b"cicc 13.0")
    (tmp_path / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"libdevice")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ptxas").write_bytes(b"ptxas 13.0")
    (tmp_path / "bin" / "ptxas").chmod(0o755)
    return {"CICC_PATH": str(tmp_path / "nvvm" / "bin"), "NVVMIR_LIBRARY_DIR": str(tmp_path / "nvvm" / "libdevice"),
            "PATH": str(tmp_path / "bin")}


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    (folder / "k.cpp1.ii").write_text("device source")
    (folder / "k.module_id").write_text("_id_1")
    return folder


def cicc(scratch: Path) -> str:
    return (f'"$CICC_PATH/cicc" -arch compute_90 --module_id_file_name "{scratch}/k.module_id" '
            f'--stub_file_name "{scratch}/k.stub.c" "{scratch}/k.cpp1.ii" -o "{scratch}/k.ptx"')


def key(scratch: Path, toolkit: dict[str, str], command: str | None = None) -> str:
    programs = stagecache.ProgramDigests(None)
    return stagecache.step_of("cicc", command or cicc(scratch), toolkit, scratch, programs).key


def test_a_step_reads_the_files_it_names_and_writes_the_ones_its_output_options_name(
    scratch: Path, toolkit: dict[str, str]
) -> None:
    step = stagecache.step_of("cicc", cicc(scratch), toolkit, scratch, stagecache.ProgramDigests(None))
    assert set(step.inputs) == {f"{scratch}/k.cpp1.ii", f"{scratch}/k.module_id"}
    assert step.outputs == {"--stub_file_name": f"{scratch}/k.stub.c", "-o": f"{scratch}/k.ptx"}


def test_an_output_left_by_an_earlier_run_is_not_read_as_an_input(scratch: Path, toolkit: dict[str, str]) -> None:
    before = key(scratch, toolkit)
    (scratch / "k.ptx").write_text("an earlier build's PTX")
    assert key(scratch, toolkit) == before


@pytest.mark.parametrize(
    "change",
    [
        "the-device-source",
        "the-module-id",
        "the-command",
        "the-program",
        "libdevice",
    ],
)
def test_the_key_changes_with_everything_the_step_reads(
    scratch: Path, toolkit: dict[str, str], change: str
) -> None:
    before = key(scratch, toolkit)
    command = None
    if change == "the-device-source":
        (scratch / "k.cpp1.ii").write_text("other device source")
    elif change == "the-module-id":
        (scratch / "k.module_id").write_text("_id_2")
    elif change == "the-command":
        command = cicc(scratch).replace("compute_90", "compute_80")
    elif change == "the-program":
        (Path(toolkit["CICC_PATH"]) / "cicc").write_bytes(b"cicc 13.1")
    else:
        (Path(toolkit["NVVMIR_LIBRARY_DIR"]) / "libdevice.10.bc").write_bytes(b"libdevice 2")
    assert key(scratch, toolkit, command) != before


def test_ptxas_is_found_on_the_dryruns_path(scratch: Path, toolkit: dict[str, str]) -> None:
    (scratch / "k.ptx").write_text("ptx")
    command = f'ptxas -arch=sm_90 -m64 "{scratch}/k.ptx" -o "{scratch}/k.cubin"'
    programs = stagecache.ProgramDigests(None)
    step = stagecache.step_of("ptxas", command, toolkit, scratch, programs)
    (Path(toolkit["PATH"]) / "ptxas").write_bytes(b"ptxas 13.1")
    assert stagecache.step_of("ptxas", command, toolkit, scratch, stagecache.ProgramDigests(None)).key != step.key


def fake_cicc(scratch: Path, ptx: str = "PTX") -> tuple[list[str], Callable[[], int]]:
    ran: list[str] = []

    def run() -> int:
        ran.append("cicc")
        (scratch / "k.ptx").write_text(ptx)
        (scratch / "k.stub.c").write_text("stub")
        return 0

    return ran, run


def test_a_miss_runs_and_stores_a_hit_restores_every_output(
    tmp_path: Path, scratch: Path, toolkit: dict[str, str]
) -> None:
    cache = stagecache.StageCache(tmp_path / "cache", "use", {stagecache.JOB_ENV: "job-a"})
    step = stagecache.step_of("cicc", cicc(scratch), toolkit, scratch, cache.programs)
    ran, run = fake_cicc(scratch)
    assert cache.run(step, run, unit="k.cu", arch="9.0") == (0, "miss")
    (scratch / "k.ptx").unlink()
    (scratch / "k.stub.c").unlink()
    other = stagecache.StageCache(tmp_path / "cache", "use", {stagecache.JOB_ENV: "job-b"})
    assert other.run(step, run, unit="k.cu", arch="9.0") == (0, "hit")
    assert ran == ["cicc"]
    assert (scratch / "k.ptx").read_text() == "PTX" and (scratch / "k.stub.c").read_text() == "stub"
    events = [json.loads(line) for line in (tmp_path / "cache" / "events.jsonl").read_text().splitlines()]
    assert [(e["result"], e["job"], e["from"]) for e in events] == [("miss", "job-a", "job-a"),
                                                                    ("hit", "job-b", "job-a")]


@pytest.mark.parametrize(("fresh", "expected"), [("PTX", (0, "verified")), ("other PTX", (3, "mismatch"))])
def test_verify_runs_anyway_and_compares_every_output(
    tmp_path: Path, scratch: Path, toolkit: dict[str, str], fresh: str, expected: tuple[int, str]
) -> None:
    cache = stagecache.StageCache(tmp_path / "cache", "use", {})
    step = stagecache.step_of("cicc", cicc(scratch), toolkit, scratch, cache.programs)
    _, run = fake_cicc(scratch)
    cache.run(step, run)
    verifying = stagecache.StageCache(tmp_path / "cache", "verify", {})
    ran, run_again = fake_cicc(scratch, fresh)
    assert verifying.run(step, run_again) == expected
    assert ran == ["cicc"]
    digest = stagecache.digest_bytes(fresh.encode())
    assert verifying.blob(digest).read_text() == fresh  # kept for the per-kernel comparison


@pytest.mark.parametrize("entry", ["not json", "[]", '{"outputs": "x"}', '{"outputs": {"-o": "0000"}}'])
def test_an_unreadable_or_incomplete_entry_is_a_miss(
    tmp_path: Path, scratch: Path, toolkit: dict[str, str], entry: str
) -> None:
    cache = stagecache.StageCache(tmp_path / "cache", "use", {})
    step = stagecache.step_of("cicc", cicc(scratch), toolkit, scratch, cache.programs)
    cache.entry_path(step.key).parent.mkdir(parents=True)
    cache.entry_path(step.key).write_text(entry)
    ran, run = fake_cicc(scratch)
    assert cache.run(step, run) == (0, "miss")
    assert ran == ["cicc"]


def test_a_failed_step_stores_nothing(tmp_path: Path, scratch: Path, toolkit: dict[str, str]) -> None:
    cache = stagecache.StageCache(tmp_path / "cache", "use", {})
    step = stagecache.step_of("cicc", cicc(scratch), toolkit, scratch, cache.programs)
    assert cache.run(step, lambda: 2) == (2, "failed")
    assert cache.lookup(step.key) is None


def test_program_digests_are_remembered_by_file_version(tmp_path: Path) -> None:
    program = tmp_path / "cicc"
    program.write_bytes(b"one")
    memo = tmp_path / "programs.json"
    first = stagecache.ProgramDigests(memo).file(str(program))
    assert json.loads(memo.read_text()) and first == stagecache.digest_bytes(b"one")
    program.write_bytes(b"two!")  # another size: another version
    assert stagecache.ProgramDigests(memo).file(str(program)) == stagecache.digest_bytes(b"two!")


def test_only_cicc_and_ptxas_are_cached_stages() -> None:
    assert [stagecache.stage_of(p) for p in ("cicc", "ptxas", "gcc", "cudafe++", "fatbinary")] == [
        "cicc", "ptxas", None, None, None]
    assert shlex.split(cicc(Path("/s")))[0] == "$CICC_PATH/cicc"


def timeline_rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "torn {\n")
    return path


def test_stage_times_sum_each_compiled_stage_and_leave_reused_steps_out(tmp_path: Path) -> None:
    def row(phase: str, arch: str, step: str, cpu: float, **more: object) -> dict[str, object]:
        return {"unit": "k.cu", "arch": arch, "phase": phase, "step": step, "start": 0.0, "end": cpu + 1, "cpu": cpu,
                **more}

    path = timeline_rows(tmp_path / "timeline.jsonl", [
        row("front", "", "gcc (preprocessing)", 2.0), row("front", "", "cudafe++", 3.0),
        row("chain", "9.0", "gcc (preprocessing)", 1.0), row("chain", "9.0", "cicc", 50.0, result="miss"),
        row("chain", "9.0", "ptxas", 9.0, result="hit"),
        row("back", "", "fatbinary", 0.5), row("back", "", "gcc", 6.0),
        {"unit": "k.cu", "arch": "9.0", "phase": "wait", "start": 0, "end": 3, "part": "chain"},
    ])
    found = {(r["arch"], r["stage"]): r["cpu"] for r in nvcc_time.stage_times(path)}
    assert found == {("", "front"): 5.0, ("9.0", "preprocess"): 1.0, ("9.0", "cicc"): 50.0, ("", "host"): 6.5}


def test_the_ledger_record_counts_reuse_by_stage_and_names_where_it_came_from(tmp_path: Path) -> None:
    space = compilation.Workspace(root=tmp_path)
    space.events.write_text("".join(json.dumps(e) + "\n" for e in [
        {"source": "/w/k.cu", "result": "miss"},
        {"stage": "cicc", "result": "hit", "unit": "k.cu", "arch": "9.0", "from": "job-212", "key": "a"},
        {"stage": "ptxas", "result": "miss", "unit": "k.cu", "arch": "9.0", "from": "job-213", "key": "b"},
    ]))
    record = compilation.reuse_record(space)
    assert record["counts"] == {"object": {"miss": 1}, "cicc": {"hit": 1}, "ptxas": {"miss": 1}}
    assert record["reused"] == [{"unit": "k.cu", "arch": "9.0", "stage": "cicc", "from": "job-212", "result": "hit"}]


def test_a_cubin_is_keyed_on_the_size_and_mtime_of_every_source_its_ptx_names(
    tmp_path: Path, scratch: Path, toolkit: dict[str, str]
) -> None:
    header = tmp_path / "Half.h"
    header.write_text("// torch's header\n")
    (scratch / "k.ptx").write_text(f'.version 9.0\n\t.file\t1 "{header}"\n\t.file\t2 "{tmp_path}/gone.h"\n')
    command = f'ptxas -arch=sm_90 -m64 "{scratch}/k.ptx" -o "{scratch}/k.cubin"'

    def key() -> str:
        return stagecache.step_of("ptxas", command, toolkit, scratch, stagecache.ProgramDigests(None)).key

    assert stagecache.named_sources(str(scratch / "k.ptx")) == {
        str(header): [header.stat().st_size, int(header.stat().st_mtime)], f"{tmp_path}/gone.h": None}
    first = key()
    os.utime(header, (1, 1))  # ptxas writes the mtime into the cubin's line table: another cubin
    touched = key()
    header.write_text("// torch's header, one byte longer\n")
    os.utime(header, (1, 1))
    assert len({first, touched, key()}) == 3


def test_torch_headers_get_the_source_epoch_as_their_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    include = tmp_path / "torch" / "include" / "c10" / "util"
    include.mkdir(parents=True)
    (include / "Half.h").write_text("x")
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert compilation.fixed_header_times(tmp_path / "torch" / "include") == 1
    assert int((include / "Half.h").stat().st_mtime) == compilation.SOURCE_EPOCH
    assert compilation.fixed_header_times(tmp_path / "torch" / "include") == 0


def test_a_cicc_that_writes_the_module_id_restores_it_on_a_hit(scratch: Path, toolkit: dict[str, str]) -> None:
    # CUDA 11's first cicc: --gen_module_id_file makes --module_id_file_name a file it writes, not one it reads
    (scratch / "k.module_id").unlink()
    command = cicc(scratch).replace("--module_id_file_name", "--gen_module_id_file --module_id_file_name")
    step = stagecache.step_of("cicc", command, toolkit, scratch, stagecache.ProgramDigests(None))
    assert step.outputs["--module_id_file_name"] == f"{scratch}/k.module_id"
    assert f"{scratch}/k.module_id" not in step.inputs
