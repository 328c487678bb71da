"""Every process a job starts writes to the job's log: here the torch install of the env phase, run by real pip
through the build stage (a small wheel named torch on a local find-links folder stands in for the registry's)."""

from __future__ import annotations

import functools
import http.server
from pathlib import Path

import pytest

from builder.core.context import current, job_context
from builder.core.runner import run
from builder.farm import build as build_stage
from builder.steps import environment
from scripts.bench.wheels import wheel_of_files
from tests import peers
from tests.unit.test_build import FakeStages, local_jobs, run_build


def test_the_torch_install_is_in_the_job_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real env phase against a torch index on loopback holding a stand-in torch (version, CUDA and ABI as the
    job's): where it came from, pip's command and pip's own output land in the job's log."""
    index = tmp_path / "index"
    (index / "whl" / "cu130" / "torch").mkdir(parents=True)
    files = {"torch/__init__.py": b"from torch import _C, version\n__version__ = version.__version__\n",
             "torch/_C.py": b"_GLIBCXX_USE_CXX11_ABI = True\n",
             "torch/version.py": b"__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n"}
    wheel = wheel_of_files(index / "whl" / "cu130" / "torch", name="torch", version="2.14.1+cu130", files=files,
                       python_tag="py3", platform="any", requires=(), pure=True)
    (wheel.parent / "index.html").write_text(f'<a href="{wheel.name.replace("+", "%2B")}">{wheel.name}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    monkeypatch.setenv("WHEELWRIGHT_TORCH_INDEX", f"http://127.0.0.1:{server.server_address[1]}/whl/{{accelerator}}/")
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    FakeStages(monkeypatch, tmp_path)
    monkeypatch.setattr(build_stage, "runtime_env", environment.runtime_env)  # the real env phase
    with peers.serving(server):
        outcomes = run_build(tmp_path)

    assert [o.entry.status for o in outcomes] == ["built", "built"]
    first = local_jobs()[0]
    log = (tmp_path / "out" / "logs" / f"{first.identifier}.log").read_text()
    assert f"downloading torch from http://127.0.0.1:{server.server_address[1]}/whl/cu130/torch/" in log
    assert "pip install" in log and wheel.name in log  # the command, as the runner writes it
    assert "Successfully installed torch-2.14.1+cu130" in log  # pip's own output
    assert "checked torch 2.14.1+cu130 (CUDA 13.0, cxx11 ABI)" in log
    (runtime,) = (tmp_path / "cache" / "runtime").glob("torch-2.14.1-cp311-*/")
    assert (runtime / "torch" / "__init__.py").is_file()


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
