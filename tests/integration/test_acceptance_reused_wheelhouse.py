"""The acceptance run with --skip-build on a wheelhouse that holds causal-conv1d only (what bench_build's full-arch
`ours` run leaves, issue 16): for real but for the GPU, its wheel (a toy kernel for sm_90 and sm_103, as the
full-arch build's fatbin has them) is indexed, served, pip-installed and read by both doctors; install and doctor
check causal-conv1d alone, and the stages that test mamba-ssm are skipped saying it is not there, not failed."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.integration.acceptance_wheelhouse import built_causal_conv1d, drive, stand_in, standing_in
from tests.integration.conftest import CompileCu


def test_a_causal_conv1d_only_wheelhouse_is_checked_and_mambas_stages_say_why_they_are_skipped(
    tmp_path: Path, compile_cu: CompileCu, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reused, work, out = tmp_path / "bench-full" / "ours" / "out", tmp_path / "work", tmp_path / "out"
    extension = compile_cu("full-arch", ["arch=compute_90,code=sm_90", "arch=compute_103,code=sm_103"])
    wheel = built_causal_conv1d(reused, extension.read_bytes(), phase="install", compile_seconds=201.0)
    stand_in(monkeypatch, {name: standing_in(name) for name in ("preflight", "carry")})
    code = drive(out, work, "--skip-build", str(reused), "--stages", "build,install,doctor,upstream,checklist,"
                 "mamba,bench")
    log, stages = capsys.readouterr().out, json.loads((out / "summary.json").read_text())["stages"]
    assert "holds causal-conv1d (not causal-conv1d, mamba-ssm)" in log, log
    assert stages["build"]["status"] == "reused" and wheel.name in stages["build"]["detail"], log
    install = {check["name"]: check for check in stages["install"]["checks"]}
    assert stages["install"]["status"] == "passed", log
    assert set(install) == {"test_installed_from_the_index[causal-conv1d]",
                            "test_seen_by_this_interpreter[causal-conv1d]"}
    assert install["test_installed_from_the_index[causal-conv1d]"]["data"]["wheel"] == wheel.name
    # without a GPU the doctor's verdicts are skipped, after both doctors read the installed wheel
    assert [check["name"] for check in stages["doctor"]["checks"]] == [
        "test_doctor_reads_the_gpu", "test_doctor_says_ok[causal-conv1d]", "test_the_two_doctors_agree"]
    (package,) = [p for p in json.loads((out / "doctor.json").read_text())["environment"]["packages"]
                  if p["name"] == "causal-conv1d"]
    assert package["extensions"][0]["sass"] == ["9.0", "10.3"], package
    assert stages["upstream"]["status"] == "skipped" and stages["upstream"]["detail"].startswith("no CUDA device")
    for stage in ("checklist", "mamba", "bench"):
        assert stages[stage] == {**stages[stage], "status": "skipped",
                                 "detail": f"skipped: mamba-ssm not in {reused} (it holds causal-conv1d)"}, stage
    assert code == 4, log  # incomplete: not every stage passed (no GPU here), none failed
    with pytest.raises(OSError):  # refused or reset: the index server ended with the command
        urllib.request.urlopen(stages["install"]["data"]["index_url"], timeout=5)
