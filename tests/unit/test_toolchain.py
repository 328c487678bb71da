"""The toolchain provider's decisions on toolkits.toml: which source serves a job's CUDA version and archs, with
which host compiler, which host toolkit a folder holds, and what preflight and readiness say is missing (no
download, no compiler run: paths are looked up and host toolkits' versions are stubbed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.errors import ConfigError
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.steps import toolchain
from builder.steps.environment import NotBuildableHere, find_toolkit
from builder.steps.toolchain import (
    ToolkitReadiness,
    ToolkitSource,
    ToolkitUnavailable,
    candidates,
    load_sources,
    parse_sources,
    preflight,
    readiness,
)

HOST_VERSION = toolchain.host_version  # before the autouse fixture stubs it

HOST = {"name": "h", "kind": "host", "cuda": "13.0", "serves": "==13.0", "roots": ["/x"], "archs": ["9.0"],
        "host_compiler": "gcc"}


@pytest.fixture(autouse=True)
def _host_versions(monkeypatch: pytest.MonkeyPatch) -> dict[Path, str]:
    """No host toolkit unless a test puts one here: this machine's own /usr/local/cuda-* stay out of the tests."""
    versions: dict[Path, str] = {}
    monkeypatch.setattr(toolchain, "host_version", lambda source, root: versions.get(root))
    return versions


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``on_path("gcc", "g++")``: only those tools are found on PATH (at /usr/bin/NAME)."""

    def found(*tools: str) -> None:
        monkeypatch.setattr(toolchain.shutil, "which", lambda name: f"/usr/bin/{name}" if name in tools else None)

    return found


def names(accelerator: str, archs: tuple[str, ...] = ()) -> list[str]:
    return [s.name for s in candidates(Accelerator.parse(accelerator), tuple(map(Arch.parse, archs)))]


def source(name: str) -> ToolkitSource:
    return {s.name: s for s in load_sources()}[name]


def test_each_cuda_version_has_its_sources_host_first() -> None:
    assert names("cu117") == ["host-11.8", "debian-11.8"]  # torch 2.0's CUDA, built with nvcc 11.8 (same major)
    assert names("cu118") == ["host-11.8", "debian-11.8"]
    assert names("cu124") == names("cu128") == names("cu121") == ["host-12.4", "debian-12.4"]
    assert names("cu130") == ["host-13"]
    assert names("cu132") == ["host-13", "wheels-13"]  # a 13.2 mounted into a builder image before a download
    assert names("cu100") == []
    assert names("rocm6.1") == ["host-rocm"]
    assert names("rocm7.14") == ["host-rocm", "wheels-rocm"]


def test_debian_12_4_is_trixies_with_its_runtime_pinned_apart_and_the_system_gcc() -> None:
    debian = source("debian-12.4")
    assert (debian.suite, debian.version, debian.host_compiler) == ("trixie", "12.4.131~12.4.1-2", "gcc")
    assert "nvidia-cuda-dev=12.4.127~12.4.1-2" in debian.packages and "libcub-dev" in debian.packages
    assert debian.package_names[:2] == ("nvidia-cuda-toolkit", "nvidia-cuda-dev")
    assert source("debian-11.8").host_compiler == "gcc-11"
    assert source("wheels-13").toolkit_version(Accelerator.parse("cu132")) == "13.2"


def test_a_job_past_a_toolkits_archs_skips_it_and_hears_why() -> None:
    assert names("cu128", ("8.0", "9.0+PTX")) == ["host-12.4", "debian-12.4"]
    assert names("cu128", ("9.0a", "compute_90")) == ["host-12.4", "debian-12.4"]
    assert names("cu128", ("9.0", "10.0")) == []
    assert names("cu130", ("10.0f", "12.1a")) == ["host-13"]
    assert names("cu130", ("7.0",)) == []  # CUDA 13 dropped Volta
    assert names("cu118", ("9.0a",)) == []  # arch-specific code came with CUDA 12
    with pytest.raises(ToolkitUnavailable) as raised:
        toolchain.provide(Accelerator.parse("cu128"), (Arch.parse("9.0"), Arch.parse("10.0"), Arch.parse("12.0+PTX")))
    assert str(raised.value) == (
        "no toolkit for cu128 here: CUDA 12.4 emits up to sm_90, the job needs sm_100 and sm_120"
    )
    problem = readiness(Accelerator.parse("cu130"), (Arch.parse("5.0"),)).problem
    assert problem == "no toolkit for cu130 here: CUDA 13.0 emits from sm_75 on, the job needs sm_50"


def test_host_toolkits_are_found_by_their_version_not_their_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _host_versions: dict[Path, str], on_path: Callable[..., None]
) -> None:
    """A builder image mounts Debian's 11.8 at /usr/local/cuda-11.7 for a cu117 job: that folder is CUDA 11.8."""
    on_path("gcc-11", "g++-11", "gcc", "g++")
    for name, version in (("cuda-11.7", "11.8"), ("cuda-12.8", "12.4"), ("cuda-13.0", "13.0")):
        (tmp_path / name).mkdir()
        _host_versions[tmp_path / name] = version
    sources = tuple(
        ToolkitSource(**{**s.__dict__, "roots": (f"{tmp_path}/cuda-*",)})
        for s in load_sources()
        if s.kind == "host"
    )
    monkeypatch.delenv("WHEELWRIGHT_CUDA_HOME", raising=False)
    cu117 = toolchain.provide(Accelerator.parse("cu117"), (Arch.parse("8.0"),), sources=sources)
    assert (cu117.source, cu117.cuda, cu117.cxx.name) == ("host-11.8", "11.8", "g++-11")
    assert cu117.root == tmp_path / "cuda-11.7"
    assert toolchain.provide(Accelerator.parse("cu128"), sources=sources).root == tmp_path / "cuda-12.8"
    assert readiness(Accelerator.parse("cu130"), (Arch.parse("9.0"),), sources) == ToolkitReadiness(
        source="host-13", cuda="13.0", problem=None
    )
    (line,) = preflight(Accelerator.parse("cu132"), sources)
    assert line.startswith("CUDA 13.2 via host-13: missing: host-13: no nvcc 13.2 in ")
    assert f"(found CUDA 13.0 at {tmp_path / 'cuda-13.0'}, CUDA 12.4 at {tmp_path / 'cuda-12.8'}, " in line


def test_the_cuda_home_variable_comes_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _host_versions: dict[Path, str], on_path: Callable[..., None]
) -> None:
    on_path("gcc", "g++")
    for name in ("mounted", "cuda-13.0"):
        (tmp_path / name).mkdir()
        _host_versions[tmp_path / name] = "13.0"
    monkeypatch.setenv("WHEELWRIGHT_CUDA_HOME", str(tmp_path / "mounted"))
    host = ToolkitSource(**{**source("host-13").__dict__, "roots": ("$WHEELWRIGHT_CUDA_HOME", f"{tmp_path}/cuda-*")})
    assert toolchain.host_roots(host) == [tmp_path / "mounted", tmp_path / "cuda-13.0"]
    assert toolchain.provide(Accelerator.parse("cu130"), sources=(host,)).root == tmp_path / "mounted"
    monkeypatch.delenv("WHEELWRIGHT_CUDA_HOME")
    assert toolchain.host_roots(host) == [tmp_path / "cuda-13.0"]  # an unset variable drops its root


def test_a_link_to_a_toolkit_is_that_toolkit_once(tmp_path: Path) -> None:
    (tmp_path / "cuda-13.0").mkdir()
    (tmp_path / "cuda").symlink_to("cuda-13.0")
    host = ToolkitSource(**{**source("host-13").__dict__, "roots": (f"{tmp_path}/cuda", f"{tmp_path}/cuda-*")})
    assert toolchain.host_roots(host) == [tmp_path / "cuda"]


def test_rocm_jobs_hear_exactly_why_not_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _host_versions: dict[Path, str]
) -> None:
    monkeypatch.delenv("WHEELWRIGHT_ROCM_INDEX", raising=False)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    problem = readiness(Accelerator.parse("rocm7.14"), ()).problem
    assert problem == (
        "no toolkit for rocm7.14 here: host-rocm: no ROCm 7.14 (.info/version) in $ROCM_PATH, /opt/rocm; "
        "wheels-rocm: ROCm 7.14's rocm[devel] wheels come from AMD's index, which $WHEELWRIGHT_ROCM_INDEX names and "
        "this machine has not configured (none reachable from here)"
    )
    monkeypatch.setenv("WHEELWRIGHT_ROCM_INDEX", "http://127.0.0.1:9/rocm")
    assert source("wheels-rocm").wheels == ("rocm[devel]=={rocm}.*",)
    assert toolchain.wheel_requirements(source("wheels-rocm"), "7.14") == [
        "--index-url=http://127.0.0.1:9/rocm",
        "rocm[devel]==7.14.*",
    ]
    assert readiness(Accelerator.parse("rocm7.14"), ()) == ToolkitReadiness(
        source="wheels-rocm", cuda="7.14", problem="wheels-rocm has ROCm here, but wheelwright's build compiles with "
        "nvcc only, so it cannot build a ROCm job with it yet"
    )
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    _host_versions[tmp_path] = "6.2.4"
    assert readiness(Accelerator.parse("rocm6.2"), ()).source == "host-rocm"
    with pytest.raises(ToolkitUnavailable, match="host-rocm has ROCm here, but wheelwright's build compiles"):
        toolchain.provide(Accelerator.parse("rocm6.2"))
    with pytest.raises(ToolkitUnavailable, match=r"no ROCm 6.1 \(.info/version\) in .*\(found ROCm 6.2.4 at "):
        toolchain.provide(Accelerator.parse("rocm6.1"))


def test_host_toolkits_say_their_own_version(tmp_path: Path) -> None:
    """The real host_version (the autouse fixture stubs it): ROCm's .info/version, CUDA's version.json, and no
    toolkit where there is no nvcc; asking an nvcc without version.json is the one process (not run here)."""
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text("6.2.4-120\n")
    assert HOST_VERSION(source("host-rocm"), tmp_path) == "6.2.4"
    assert HOST_VERSION(source("host-13"), tmp_path) is None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").touch()
    (tmp_path / "version.json").write_text('{"cuda_nvcc": {"version": "11.8.89"}}')
    assert HOST_VERSION(source("host-13"), tmp_path) == "11.8"


def test_readiness_starts_nothing_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _host_versions: dict[Path, str], on_path: Callable[..., None]
) -> None:
    """The autouse fixtures refuse any process (tests/unit/conftest.py) and stub the host toolkits' versions."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(cache))
    on_path("gcc", "g++", "gcc-11", "g++-11", "apt-get", "dpkg-deb")
    assert readiness(Accelerator.parse("cu128"), (Arch.parse("8.0"), Arch.parse("9.0"))) == ToolkitReadiness(
        source="debian-12.4", cuda="12.4", problem=None  # to be unpacked at build time
    )
    assert readiness(Accelerator.parse("cu117"), (Arch.parse("8.0"),)).source == "debian-11.8"
    assert readiness(Accelerator.parse("cu132"), (Arch.parse("10.0"),)).source == "wheels-13"
    assert list(tmp_path.iterdir()) == []


def test_readiness_names_the_missing_tools_and_compiler(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, on_path: Callable[..., None]
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    on_path("gcc", "g++")
    found = readiness(Accelerator.parse("cu124"), (Arch.parse("8.0"),))
    assert found.source is None and found.problem is not None
    assert "CUDA 12.4 (debian-12.4) is unpacked from Debian packages, but apt-get and dpkg-deb are not" in found.problem
    on_path("apt-get", "dpkg-deb")
    assert readiness(Accelerator.parse("cu117"), (Arch.parse("8.0"),)).problem == (
        "no toolkit for cu117 here: host-11.8: no nvcc 11.8 in $WHEELWRIGHT_CUDA_HOME, /usr/local/cuda-*, "
        "/usr/local/cuda; CUDA 11.8 (debian-11.8) needs the host compiler gcc-11 and g++-11, which is not on PATH"
    )
    unpacked = tmp_path / "toolkits" / "debian-12.4"
    unpacked.mkdir(parents=True)
    (unpacked / ".complete").write_text(toolchain._marker(source("debian-12.4")))
    on_path("gcc", "g++")
    # unpacked: no apt-get needed
    assert readiness(Accelerator.parse("cu126"), (Arch.parse("8.0"),)).source == "debian-12.4"


def test_preflight_names_what_is_missing_and_how_it_would_be_had(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, on_path: Callable[..., None]
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    on_path("apt-get", "dpkg-deb")
    host, debian = preflight(Accelerator.parse("cu117"))
    assert host.startswith("CUDA 11.8 via host-11.8: missing: host-11.8: no nvcc 11.8 in $WHEELWRIGHT_CUDA_HOME")
    assert "not yet unpacked: apt-get download nvidia-cuda-toolkit, nvidia-cuda-dev" in debian
    assert "missing host compiler" in debian and "gcc-11 and g++-11" in debian
    _, wheels = preflight(Accelerator.parse("cu132"))
    assert "pip install 'nvidia-cuda-nvcc==13.2.*'" in wheels  # quoted: the shell globs *, zsh refuses it
    assert preflight(Accelerator.parse("cu100")) == ["no source in builder/data/toolkits.toml serves cu100"]
    _, blackwell = preflight(Accelerator.parse("cu128"), archs=(Arch.parse("10.0"),))
    assert blackwell == "CUDA 12.4 via debian-12.4: CUDA 12.4 emits up to sm_90, the job needs sm_100"


def test_a_missing_host_compiler_makes_the_job_unbuildable_not_failed(
    monkeypatch: pytest.MonkeyPatch, on_path: Callable[..., None]
) -> None:
    on_path()
    with pytest.raises(NotBuildableHere, match="needs the host compiler gcc-11 and g\\+\\+-11"):
        find_toolkit(Accelerator.parse("cu117"), (Arch.parse("8.0"),))
    with pytest.raises(ToolkitUnavailable, match="no source in builder/data/toolkits.toml serves CUDA 10.0"):
        toolchain.provide(Accelerator.parse("cu100"))


def test_sources_are_checked_on_load() -> None:
    assert parse_sources({"source": [HOST]})[0].roots == ("/x",)
    with pytest.raises(ConfigError, match="kind must be one of host, debian, wheels"):
        parse_sources({"source": [{**HOST, "kind": "conda"}]})
    with pytest.raises(ConfigError, match="needs exactly the keys"):
        parse_sources({"source": [{**HOST, "packages": []}]})
    with pytest.raises(ConfigError, match="needs exactly the keys"):
        parse_sources({"source": [{k: v for k, v in HOST.items() if k != "archs"}]})
    with pytest.raises(ConfigError, match="one of cuda = or rocm ="):
        parse_sources({"source": [{**HOST, "rocm": "6.x"}]})
    with pytest.raises(ConfigError, match="is not a version specifier"):
        parse_sources({"source": [{**HOST, "serves": "thirteen"}]})
    with pytest.raises(ConfigError, match="archs: 'sm90' is not a GPU architecture"):
        parse_sources({"source": [{**HOST, "archs": ["sm90"]}]})
    with pytest.raises(ConfigError, match="archs lists what nvcc emits"):
        parse_sources({"source": [{**HOST, "archs": ["9.0+PTX"]}]})
    with pytest.raises(ConfigError, match="names must be unique"):
        parse_sources({"source": [HOST, HOST]})
    debian = {**HOST, "kind": "debian", "suite": "trixie", "components": ["non-free"], "version": "12.4.131-2",
              "packages": ["nvidia-cuda-toolkit"]}
    del debian["roots"]
    with pytest.raises(ConfigError, match="must pin nvidia-cuda-toolkit=12.4.131-2"):
        parse_sources({"source": [debian]})


def test_the_toolkits_command_is_the_preflight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from builder.cli.main import main

    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert main(["toolkits", "--profile", "seed"]) == 0
    host, debian = capsys.readouterr().out.splitlines()
    assert host.startswith("cu117: CUDA 11.8 via host-11.8: missing: ")
    assert (
        debian.startswith("cu117: CUDA 11.8 via debian-11.8: not yet unpacked")
        and "host compiler /usr/bin/g++-11" in debian
    )
