"""Day-0 wheels (builder/steps/day0.py, builder/farm/day0.py): which built wheel is carried to a torch minor no build
has reached, or why none is; the rewrite (METADATA pinned, .dist-info renamed, provenance saying where the binary
comes from, the payload's bytes untouched); the build tag a later real build takes; the stage's ledger rows."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.errors import WheelError
from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.symbols import TorchAbi, encode_entry, entry_path, window
from builder.core.wheelname import WheelFilename
from builder.farm.build import Layout
from builder.farm.day0 import KEPT, PUBLISHED, REFUSED, run_day0
from builder.plan.job import Job
from builder.steps import day0, provenance
from builder.steps.verify import VerifyReport, failed, passed
from builder.steps.wheelzip import Member, read_members, write_wheel
from tests.jobs import local_job

NEW = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"
COW = "_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE"
COW_213 = "_ZN3c104impl3cow15materialize_cowEPNS_11StorageImplE"
CAPTURE = "_ZN3c104cuda19CUDAErrorLogCaptureC1Ev"
BUILT_212 = local_job(torch="2.12.1")
BUILT_214 = local_job(torch="2.14.1")
TO_211, TO_213 = local_job(torch="2.11.0"), local_job(torch="2.13.0")
INDEX = [TorchAbi(torch=t, variant="cu130", platform="x86_64", cxx11_abi=True, libraries={"libc10.so": frozenset(s)})
         for t, s in (("2.11.0", {NEW, COW}), ("2.12.1", {NEW, COW}), ("2.13.0", {NEW, COW_213}),
                      ("2.14.1", {COW_213, CAPTURE}))]
EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
METADATA = ("Metadata-Version: 2.4\nName: causal_conv1d\nVersion: 1.7.0+pt212cu130\nRequires-Python: >=3.9\n"
            "Requires-Dist: torch==2.12.*\nRequires-Dist: packaging\n\n"
            "# Causal conv1d\nVersion: not a header here\nRequires-Dist: torch==9.9 neither\n")


def _row(job: Job, wheel: str | None = None, **fields: object) -> LedgerEntry:
    values: dict[str, object] = dict(job_id=job.identifier, package=job.package, version=job.version,
                                     label=job.label, torch=job.torch, accelerator=job.accelerator.name,
                                     python=job.python, input_hash="0" * 64, status=Status.BUILT, wheel=wheel)
    return LedgerEntry(**{**values, **fields})  # type: ignore[arg-type]


def _source(job: Job, imports: set[str]) -> day0.Source:
    found = window(frozenset(imports), INDEX, built_for=job.torch, platform="x86_64", cuda_major=13, cxx11_abi=True)
    return day0.Source(entry=_row(job, "w.whl"), wheel=Path("w.whl"), record={"window": found.as_dict()})


SOURCES = [_source(BUILT_212, {NEW, COW}), _source(BUILT_214, {COW_213, CAPTURE})]


def test_the_newest_wheel_whose_window_holds_the_torch_is_carried() -> None:
    choice = day0.choose(TO_211, SOURCES, INDEX)
    assert choice.source is SOURCES[0]
    assert choice.reason == ("day-0: binary built against torch 2.12.1 (pt212cu130), proven to load on torch 2.11.0 "
                             "(pt211cu130) by symbols and import")
    both = [*SOURCES, _source(local_job(torch="2.12.0"), {NEW, COW})]
    assert day0.choose(TO_211, both, INDEX).source is SOURCES[0]  # 2.12.1 over 2.12.0


def test_a_torch_outside_every_window_gets_no_wheel_and_the_reason_names_each_missing_symbol() -> None:
    choice = day0.choose(TO_213, SOURCES, INDEX)
    assert choice.source is None
    assert choice.reason == (
        "day-0: no built wheel's ABI window holds torch 2.13.0 (cu130): pt212cu130 (built against torch 2.12.1) "
        "misses `c10::impl::cow::materialize_cow_storage(c10::StorageImpl&)`; pt214cu130 (built against torch "
        "2.14.1) misses `c10::cuda::CUDAErrorLogCapture::CUDAErrorLogCapture()`")


@pytest.mark.parametrize(("job", "sources", "index", "reason"), [
    (local_job(torch="2.10.0"), SOURCES, INDEX, "the symbol index holds no torch 2.10.0 cu130 x86_64"),
    (TO_211, [], INDEX, "no built wheel of causal-conv1d 1.7.0 for Python 3.11 x86_64"),
    (local_job(torch="2.11.0", python="3.12"), SOURCES, INDEX, "no built wheel of causal-conv1d 1.7.0 for Python"),
    (local_job(torch="2.11.0", platform="aarch64"), SOURCES, INDEX, "the symbol index holds no torch 2.11.0 cu130"),
    (TO_211, [dataclasses.replace(SOURCES[0], entry=_row(BUILT_212, job_id="day0.x-x86_64"))], INDEX, "no built"),
])
def test_nothing_is_carried_without_a_proof(job: Job, sources: list[day0.Source], index: list[TorchAbi],
                                            reason: str) -> None:
    choice = day0.choose(job, sources, index)
    assert choice.source is None and reason in choice.reason


def test_metadata_is_pinned_to_the_new_minor_and_nothing_else_changes() -> None:
    text = day0.pinned_metadata(METADATA, TO_211, "w.whl")
    assert text == METADATA.replace("Version: 1.7.0+pt212cu130", "Version: 1.7.0+pt211cu130").replace(
        "Requires-Dist: torch==2.12.*", "Requires-Dist: torch==2.11.*")
    marked = METADATA.replace("torch==2.12.*", 'torch==2.12.*; sys_platform == "linux"')
    assert 'Requires-Dist: torch==2.11.*; sys_platform == "linux"\n' in day0.pinned_metadata(marked, TO_211, "w")


@pytest.mark.parametrize(("metadata", "problem"), [
    (METADATA.replace("Requires-Dist: torch==2.12.*\n", ""), "0 torch Requires-Dist"),
    (METADATA.replace("Version: 1.7.0+pt212cu130\n", ""), "0 Version"),
    (METADATA.replace("Name:", "Version: 1.7.0\nName:", 1), "2 Version"),
    (METADATA.replace("packaging", "torch>=2"), "2 torch Requires-Dist"),
    (METADATA.replace("packaging", "not a (requirement"), "is not a requirement"),
])
def test_metadata_day0_cannot_pin_is_refused(metadata: str, problem: str) -> None:
    with pytest.raises(WheelError, match=problem.replace("(", r"\(")):
        day0.pinned_metadata(metadata, TO_211, "w.whl")


@pytest.mark.parametrize(("source", "expected"), [
    ("causal_conv1d-1.7.0+pt212cu130-cp311-cp311-manylinux_2_34_x86_64.whl",
     "causal_conv1d-1.7.0+pt211cu130-cp311-cp311-manylinux_2_34_x86_64.whl"),
    ("causal_conv1d-1.7.0+pt212cu130-1-cp311-cp311-manylinux_2_34_x86_64.whl",
     "causal_conv1d-1.7.0+pt211cu130-cp311-cp311-manylinux_2_34_x86_64.whl"),
])
def test_the_carried_name_has_the_new_label_and_no_build_tag(source: str, expected: str) -> None:
    assert day0.carried_filename(source, TO_211) == expected


def test_a_wheel_of_another_version_is_not_carried() -> None:
    with pytest.raises(WheelError, match="version 1.6.1, not causal-conv1d 1.7.0"):
        day0.carried_filename("causal_conv1d-1.6.1+pt212cu130-cp311-cp311-linux_x86_64.whl", TO_211)


def _built_wheel(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(provenance, "_first_line", lambda command, log_path: "c++ (test) 12")
    monkeypatch.setattr(provenance, "wheelwright_commit", lambda: "0" * 40)
    monkeypatch.setattr(provenance, "_host", dict)
    info = "causal_conv1d-1.7.0+pt212cu130.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = write_wheel(folder / "causal_conv1d-1.7.0+pt212cu130-cp311-cp311-manylinux_2_34_x86_64.whl", {
        EXTENSION: Member(data=b"\x7fELF not really" * 100, executable=True),
        "causal_conv1d/__init__.py": Member(data=b""),
        f"{info}/METADATA": Member(data=METADATA.encode()),
        f"{info}/WHEEL": Member(data=b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nBuild: 7\n"
                                     b"Tag: cp311-cp311-manylinux_2_34_x86_64\n"),
    })
    provenance.embed(wheel, provenance.build_record(BUILT_212, toolchain=None))
    return wheel


def test_the_carried_wheel_holds_the_same_payload_and_provenance_that_agrees(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _built_wheel(tmp_path / "dist", monkeypatch)
    entry = _row(BUILT_212, source.name, wheel_sha256="ab" * 32)
    abi = day0.day0_record({"window": {"text": "loads on torch 2.11-2.12"}}, entry, TO_211)
    carried = day0.carry(source, entry, TO_211, tmp_path / "out", abi)
    assert carried.name == "causal_conv1d-1.7.0+pt211cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
    before, after = read_members(source), read_members(carried)
    assert after[EXTENSION] == before[EXTENSION]
    assert provenance.disagreements(after, carried.name) == []
    info = "causal_conv1d-1.7.0+pt211cu130.dist-info"
    assert b"Build:" not in after[f"{info}/WHEEL"].data
    record = provenance.read(after, carried.name).record
    assert (record["label"], record["torch"]["version"], record["torch"]["requirement"]) == (
        "pt211cu130", "2.12.1", "torch==2.11.*")
    assert record["day0"]["built_against"] == {"torch": "2.12.1", "label": "pt212cu130", "wheel": source.name,
                                               "sha256": "ab" * 32}
    assert record["abi"]["window"]["text"].startswith("day-0: binary built against torch 2.12.1 (pt212cu130), "
                                                      "proven to load on torch 2.11.0 (pt211cu130)")


def test_a_real_build_beside_a_day0_wheel_takes_a_build_tag_installers_prefer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _built_wheel(tmp_path, monkeypatch)
    tagged = day0.with_build_tag(wheel, "1")
    assert not wheel.exists()
    assert tagged.name == "causal_conv1d-1.7.0+pt212cu130-1-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert WheelFilename.parse(tagged.name).build == (1, "")
    members = read_members(tagged)
    assert members["causal_conv1d-1.7.0+pt212cu130.dist-info/WHEEL"].data.decode().count("Build: ") == 1
    assert "Build: 1\n" in members["causal_conv1d-1.7.0+pt212cu130.dist-info/WHEEL"].data.decode()
    assert provenance.disagreements(members, tagged.name) == []


def test_the_estimate_names_labels_only_a_day0_wheel_serves() -> None:
    rows = [_row(TO_211, "a.whl", job_id=day0.row_id(TO_211)), _row(TO_213, None, job_id=day0.row_id(TO_213),
                                                                    status=Status.UNBUILDABLE),
            _row(local_job(torch="2.10.0"), "b.whl", job_id=day0.row_id(local_job(torch="2.10.0"))),
            _row(local_job(torch="2.10.0"), "c.whl")]
    assert day0.labels(rows) == ["pt211cu130"]


# -- the stage, with its verify gate replaced ------------------------------------------------------------------------


def _wheelhouse(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Layout, Path]:
    layout = Layout(root=root)
    wheel = _built_wheel(layout.dist, monkeypatch)
    index = root / "symbols"
    index.mkdir()
    for entry in INDEX:
        entry_path(index, entry).write_bytes(encode_entry(entry))
    abi = {"torch": "2.12.1", "accelerator": "cu130", "platform": "x86_64", "cxx11_abi": True, "cuda_major": 13,
           "extensions": {EXTENSION: {"libc10.so": [NEW, COW]}}}
    with Ledger(layout.ledger) as ledger:
        ledger.put(_row(BUILT_212, wheel.name, wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                        wheel_identity=str(FileIdentity.of(wheel.stat())), abi=json.dumps(abi)))
    return layout, index


def _verifier(ok: bool) -> Callable[[Path, Job], VerifyReport]:
    def verify(wheel: Path, job: Job) -> VerifyReport:
        check = passed("import", "imported") if ok else failed("import", "undefined symbol: _ZN3c10x")
        return VerifyReport(wheel=wheel.name, job=job.identifier, checks=(check,))
    return verify


def test_the_stage_publishes_refuses_and_then_keeps_what_it_published(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, index = _wheelhouse(tmp_path, monkeypatch)
    jobs = [TO_211, BUILT_212, TO_213]
    outcomes = run_day0(jobs, layout, _verifier(True), index_dir=index)
    assert [o.state for o in outcomes] == [PUBLISHED, "built", REFUSED]
    with Ledger(layout.ledger) as ledger:
        published, refused = ledger.get(day0.row_id(TO_211)), ledger.get(day0.row_id(TO_213))
    assert published is not None and published.status == Status.BUILT and published.label == "pt211cu130"
    assert (layout.dist / str(published.wheel)).is_file() and published.compile_times is None
    assert published.wheel_sha256 == hashlib.sha256((layout.dist / str(published.wheel)).read_bytes()).hexdigest()
    assert json.loads(str(published.abi))["window"]["text"].startswith("day-0: binary built against torch 2.12.1")
    assert refused is not None and refused.status == Status.UNBUILDABLE
    assert "misses `c10::impl::cow::materialize_cow_storage(c10::StorageImpl&)`" in str(refused.reason)
    again = run_day0(jobs, layout, _verifier(True), index_dir=index)
    assert [o.state for o in again] == [KEPT, "built", REFUSED]


def test_a_carried_wheel_that_fails_verify_is_not_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, index = _wheelhouse(tmp_path, monkeypatch)
    (outcome,) = run_day0([TO_211], layout, _verifier(False), index_dir=index)
    assert outcome.state == REFUSED and "failed verify against torch 2.11.0: import: undefined symbol" in outcome.text
    assert sorted(p.name for p in layout.dist.iterdir()) == [
        "causal_conv1d-1.7.0+pt212cu130-cp311-cp311-manylinux_2_34_x86_64.whl"]


def test_the_build_stage_tags_a_real_wheel_whose_name_a_day0_wheel_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.farm.build import Builder, BuildOptions
    from builder.plan.facts import load_facts

    layout = Layout(root=tmp_path / "out")
    served = _built_wheel(layout.dist, monkeypatch)
    builder = Builder(layout, load_facts(), BuildOptions())
    with Ledger(layout.ledger) as ledger:
        assert builder._beside_day0(_built_wheel(tmp_path / "a", monkeypatch), ledger).name == served.name
        ledger.put(_row(BUILT_212, served.name, job_id=day0.row_id(BUILT_212)))
        tagged = builder._beside_day0(_built_wheel(tmp_path / "b", monkeypatch), ledger)
    assert tagged.name == "causal_conv1d-1.7.0+pt212cu130-1-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert served.is_file()


TAGS = "cp311-cp311-manylinux_2_34_x86_64"


@pytest.mark.parametrize(("wheel", "twin"), [
    (f"causal_conv1d-1.7.0+pt211cu130-{TAGS}.whl", f"causal_conv1d-1.7.0-{TAGS}-pt211cu130.whl"),
    (f"causal_conv1d-1.7.0+pt211cu130-1-{TAGS}.whl", f"causal_conv1d-1.7.0-1-{TAGS}-pt211cu130.whl"),
])
def test_the_twin_of_a_build_tagged_wheel_is_named_and_read_back_to_it(wheel: str, twin: str) -> None:
    from builder.steps.variant import variant_filename
    from index_site.inputs import TWIN_NAME

    assert variant_filename(wheel, "pt211cu130") == twin
    match = TWIN_NAME.match(twin)
    assert match is not None
    assert f"{match['dist']}-{match['version']}+{match['label']}{match['build'] or ''}-{match['tag']}.whl" == wheel


@pytest.mark.parametrize("name", [
    f"causal_conv1d-1.7.0-x1-{TAGS}-pt211cu130.whl",  # a build tag starts with a digit
    f"causal_conv1d-1.7.0-1-2-{TAGS}-pt211cu130.whl",  # one build tag at most
    f"causal_conv1d-1.7.0-1/x-{TAGS}-pt211cu130.whl",  # no path in a build tag
])
def test_a_twin_name_with_a_malformed_build_tag_is_not_a_twin(name: str) -> None:
    from index_site.inputs import TWIN_NAME

    assert TWIN_NAME.match(name) is None


def test_a_source_whose_metadata_cannot_be_pinned_costs_its_label_not_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(day0, "pinned_metadata", lambda text, job, where: (_ for _ in ()).throw(
        WheelError(f"{where}: METADATA has 0 Version and 1 torch Requires-Dist headers, expected one of each")))
    layout, index = _wheelhouse(tmp_path, monkeypatch)
    (outcome,) = run_day0([TO_211], layout, _verifier(True), index_dir=index)
    assert outcome.state == REFUSED and "cannot be carried to torch 2.11.0" in outcome.text
    assert "METADATA has 0 Version" in outcome.text


def test_plan_estimate_counts_a_day0_label_as_not_compiled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from builder.cli.main import main

    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(_row(TO_211, "a.whl", job_id=day0.row_id(TO_211)))
    matrix = str(Path(__file__).resolve().parents[2] / "matrix.yaml")
    assert main(["plan", "--matrix", matrix, "--profile", "day0", "--estimate", "--ledger",
                 str(tmp_path / "ledger.sqlite")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "4 jobs in 4 groups" in shown
    assert "day-0: pt211cu130 served by carried wheels, counted as not compiled" in shown


def test_a_job_whose_torch_cannot_be_had_here_is_refused_in_its_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.core.errors import NotBuildableHere

    def no_torch(wheel: Path, job: Job) -> VerifyReport:
        raise NotBuildableHere("no torch 2.11.0 for cp311 aarch64 on this machine")

    layout, index = _wheelhouse(tmp_path, monkeypatch)
    (outcome,) = run_day0([TO_211], layout, no_torch, index_dir=index)
    assert outcome.state == REFUSED and "could not be verified against torch 2.11.0: no torch 2.11.0" in outcome.text


def test_recomputing_windows_keeps_a_day0_wheels_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.steps.abi import rewindow

    layout, index = _wheelhouse(tmp_path, monkeypatch)
    run_day0([TO_211], layout, _verifier(True), index_dir=index)
    shown = dict(rewindow(layout.root, directory=index))
    assert shown[day0.row_id(TO_211)].startswith("day-0: binary built against torch 2.12.1 (pt212cu130), proven to "
                                                 "load on torch 2.11.0 (pt211cu130) by symbols and import; loads on")
    assert shown[BUILT_212.identifier].startswith("loads on torch 2.11-2.12")


def test_a_refusal_goes_once_a_real_build_has_the_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, index = _wheelhouse(tmp_path, monkeypatch)
    run_day0([TO_213], layout, _verifier(True), index_dir=index)
    built = _built_wheel(tmp_path / "real", monkeypatch)
    real = layout.dist / "causal_conv1d-1.7.0+pt213cu130-cp311-cp311-manylinux_2_34_x86_64.whl"
    built.rename(real)
    with Ledger(layout.ledger) as ledger:
        assert ledger.get(day0.row_id(TO_213)) is not None
        ledger.put(_row(TO_213, real.name))
    (outcome,) = run_day0([TO_213], layout, _verifier(True), index_dir=index)
    assert outcome.state == "built"
    with Ledger(layout.ledger) as ledger:
        assert ledger.get(day0.row_id(TO_213)) is None and ledger.get(TO_213.identifier) is not None
