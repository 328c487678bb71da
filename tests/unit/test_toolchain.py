"""The toolchain provider's decisions on toolkits.toml: which source serves a job's CUDA version, with which host
compiler, and what preflight says is missing (no download, no compiler run: paths are looked up only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import ConfigError
from builder.plan.facts import Accelerator
from builder.steps import toolchain
from builder.steps.environment import NotBuildableHere, find_toolkit
from builder.steps.toolchain import ToolkitUnavailable, candidates, load_sources, parse_sources, preflight


def names(accelerator: str) -> list[str]:
    return [s.name for s in candidates(Accelerator.parse(accelerator))]


def test_each_cuda_version_has_its_source() -> None:
    assert names("cu117") == ["debian-11.8"]  # torch 2.0's CUDA, built with nvcc 11.8 (same major)
    assert names("cu118") == ["debian-11.8"]
    assert names("cu130") == ["host-13.0"]
    assert names("cu132") == ["wheels-13"]
    assert names("cu126") == []  # the container path (README)
    assert names("rocm6.1") == []


def test_debian_uses_gcc_11_and_the_wheels_follow_the_jobs_cuda() -> None:
    sources = {s.name: s for s in load_sources()}
    assert sources["debian-11.8"].host_compiler == "gcc-11"
    assert sources["wheels-13"].toolkit_version(Accelerator.parse("cu132")) == "13.2"


def test_preflight_names_what_is_missing_and_how_it_would_be_had(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    (line,) = preflight(Accelerator.parse("cu117"))
    assert "not yet unpacked: apt-get download nvidia-cuda-toolkit" in line
    assert "missing host compiler" in line and "gcc-11 and g++-11" in line
    (wheels,) = preflight(Accelerator.parse("cu132"))
    assert "pip install nvidia-cuda-nvcc==13.2.*" in wheels
    assert preflight(Accelerator.parse("cu126")) == ["no source in builder/data/toolkits.toml serves cu126"]


def test_a_missing_host_compiler_makes_the_job_unbuildable_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(NotBuildableHere, match="needs the host compiler gcc-11 and g\\+\\+-11"):
        find_toolkit(Accelerator.parse("cu117"))
    with pytest.raises(ToolkitUnavailable, match="no source in builder/data/toolkits.toml serves CUDA 12.6"):
        toolchain.provide(Accelerator.parse("cu126"))


def test_sources_are_checked_on_load() -> None:
    good = {"name": "h", "kind": "host", "cuda": "13.0", "serves": "==13.0", "roots": ["/x"], "host_compiler": "gcc"}
    assert parse_sources({"source": [good]})[0].roots == ("/x",)
    with pytest.raises(ConfigError, match="kind must be one of host, debian, wheels"):
        parse_sources({"source": [{**good, "kind": "conda"}]})
    with pytest.raises(ConfigError, match="needs exactly the keys"):
        parse_sources({"source": [{**good, "packages": []}]})
    with pytest.raises(ConfigError, match="is not a version specifier"):
        parse_sources({"source": [{**good, "serves": "thirteen"}]})
    with pytest.raises(ConfigError, match="names must be unique"):
        parse_sources({"source": [good, good]})


def test_the_toolkits_command_is_the_preflight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from builder.cli.main import main

    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert main(["toolkits", "--profile", "seed"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert (
        line.startswith("cu117: CUDA 11.8 via debian-11.8: not yet unpacked")
        and "host compiler /usr/bin/g++-11" in line
    )
