"""Every process a job starts writes to the job's log: here the torch install of the env phase, run by real pip
through the build stage (a small wheel named torch on a local find-links folder stands in for the registry's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.context import current, job_context
from builder.core.runner import run
from builder.farm import build as build_stage
from builder.steps import environment
from tests.unit.test_build import FakeStages, local_jobs, run_build
from tests.wheels import make_wheel


def test_the_torch_install_is_in_the_job_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(links, name="torch", version="2.14.1", files={"torch/__init__.py": b"__version__ = '2.14.1'\n"},
               python_tag="py3", platform="any", requires=(), pure=True)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    FakeStages(monkeypatch, tmp_path)
    monkeypatch.setattr(build_stage, "runtime_env", environment.runtime_env)  # the real env phase

    outcomes = run_build(tmp_path)

    assert [o.entry.status for o in outcomes] == ["built", "built"]
    first = local_jobs()[0]
    log = (tmp_path / "out" / "logs" / f"{first.identifier}.log").read_text()
    assert "pip install" in log and "torch==2.14.1" in log  # the command, as the runner writes it
    assert "Successfully installed torch-2.14.1" in log  # pip's own output
    assert (tmp_path / "cache" / "runtime" / "torch-2.14.1-cp311" / "torch" / "__init__.py").is_file()


def test_outside_a_job_there_is_no_context_and_inside_one_the_runner_uses_it(tmp_path: Path) -> None:
    assert current() is None
    seen: list[str] = []
    job = local_jobs()[0]
    with job_context(job, tmp_path / "job.log", seen.append):
        assert current() is not None
        run(["echo", "from the job"], step="echo")
    run(["echo", "after the job"], step="echo")
    assert (tmp_path / "job.log").read_text() == "$ echo 'from the job'\nfrom the job\n"
    assert seen == ["from the job"]
