"""A builder image that carries its CUDA toolkit (images.toml `carries`): which images do, the build context that
holds the host's unpacked tree, the tag that follows the toolkit's pins, and the container that then mounts no
toolkit. Fakes stand in for the engine and the provider; tests/integration/test_container_build.py builds for real.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytest

from builder.core.errors import ConfigError
from builder.core.wheelhouse import Layout
from builder.farm import images
from builder.farm.build import BuildOptions
from builder.farm.container import ContainerBackend, Invocation
from builder.farm.engine import RunSpec
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import toolchain

ROOT = Path(__file__).resolve().parents[2]
CU124 = "causal-conv1d-1.6.1+pt26cu124-cp311-*"
PIN = "nvidia-cuda-toolkit=12.4.131~12.4.1-2"


def spec_for(select: str, profile: str = "rehearsal") -> images.ImageSpec:
    (spec,) = images.images_for(load_plan(ROOT / "matrix.yaml", profile, host="3.11").select(select).jobs)
    return spec


@pytest.fixture
def toolkit_home(tmp_path: Path) -> Path:
    """A folder laid out as the provider unpacks Debian's toolkit: root/ whose links reach the tree/ beside it."""
    home = tmp_path / "toolkits" / "debian-12.4"
    (home / "tree" / "usr" / "include").mkdir(parents=True)
    (home / "tree" / "usr" / "include" / "cuda.h").write_text("#define CUDA_VERSION 12040\n")
    (home / "root" / "bin").mkdir(parents=True)
    (home / "root" / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "root" / "include").symlink_to(Path("..", "tree", "usr", "include"))
    return home


# -- which images carry a toolkit ----------------------------------------------------------------------------------


def test_a_cuda_12_image_on_bullseye_carries_debians_12_4_at_its_own_release() -> None:
    spec = spec_for(CU124)
    assert spec.carried is not None and spec.carried.name == "debian-12.4"
    assert not spec.mounts_toolkit and spec.toolkit_origin == "carries debian-12.4"
    assert spec.build_args["CUDA_HOME"] == "/usr/local/cuda-12.4"
    assert spec.build_args["TOOLKIT"].startswith(f"debian-12.4: {PIN} ")


def test_a_cu128_image_carries_12_4_under_12_4s_name_not_torchs() -> None:
    spec = spec_for("mamba-ssm-2.2.6.post3+pt28cu128-cp311-*")
    assert (spec.name, spec.carried and spec.carried.name) == ("cuda12.8", "debian-12.4")
    assert spec.build_args["CUDA_VERSION"] == "12.8" and spec.build_args["CUDA_HOME"] == "/usr/local/cuda-12.4"


@pytest.mark.parametrize(
    ("select", "cuda_home"),
    [
        ("causal-conv1d-1.7.0+pt214cu130-cp311-*", "/usr/local/cuda-13.0"),  # the host's 13.0, mounted
        ("causal-conv1d-1.7.0+pt215cu132-cp311-*", "/usr/local/cuda-13.2"),  # the 13.2 wheels, mounted
        ("causal-conv1d-1.1.1+pt20cu117-cp310-*", "/usr/local/cuda-11.7"),  # 11.8 is not carried: gcc-11
    ],
)
def test_an_image_without_a_carried_toolkit_mounts_the_hosts(select: str, cuda_home: str) -> None:
    spec = spec_for(select)
    assert spec.carried is None and spec.mounts_toolkit and spec.toolkit_origin == "the host's, mounted"
    assert (spec.build_args["CUDA_HOME"], spec.build_args["TOOLKIT"]) == (cuda_home, "")


def test_a_base_that_ships_its_toolkit_neither_carries_nor_mounts_one() -> None:
    spec = images.images_for(load_plan(ROOT / "matrix.yaml", "rehearsal", host="3.11").jobs, "manylinux_2_28")[0]
    assert spec.carried is None and not spec.mounts_toolkit and spec.toolkit_origin == "the base's"


def test_the_tag_follows_the_carried_toolkits_pins() -> None:
    spec = spec_for(CU124)
    assert spec.carried is not None
    repinned = dataclasses.replace(
        spec.carried, packages=tuple(p.replace("12.4.1-2", "12.4.1-3") for p in spec.carried.packages)
    )
    folder = images.docker_dir()
    assert spec.tag(folder) != dataclasses.replace(spec, carried=repinned).tag(folder)
    assert spec.tag(folder) == spec_for(CU124).tag(folder)  # and stays put while they do


# -- images.toml's carries, refused where it cannot hold --------------------------------------------------------------

BASE = """
[bases.b]
description = "d"
kind = "debootstrap"
suite = "bullseye"
image = "wheelwright/base:b"
glibc = "2.31"
families = ["cuda"]
pythons = ["3.11"]
runner_python = "3.11"
"""


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param('toolkit = "mounted"\ncarries = ["debian-12.5"]', "'debian-12.5' is not a Debian", id="unknown"),
        pytest.param('toolkit = "mounted"\ncarries = ["host-12.4"]', "'host-12.4' is not a Debian", id="host"),
        pytest.param('toolkit = "mounted"\ncarries = ["wheels-13"]', "'wheels-13' is not a Debian", id="wheels"),
        pytest.param('toolkit = "image"\ncarries = ["debian-12.4"]', "ships its own toolkit", id="base-ships-one"),
    ],
)
def test_carries_names_a_debian_source_on_a_base_that_mounts(lines: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"images\.toml: \[bases\.b\] carries: ") as raised:
        images.load_bases(BASE + lines + "\n")
    assert message in str(raised.value)


# -- the build context ------------------------------------------------------------------------------------------------


def test_the_context_holds_the_toolkit_as_links_into_the_cache(tmp_path: Path, toolkit_home: Path) -> None:
    target = images.render(spec_for(CU124), tmp_path / "contexts", toolkit=toolkit_home)
    nvcc = target / images.TOOLKIT_CONTEXT / "root" / "bin" / "nvcc"
    assert nvcc.stat().st_ino == (toolkit_home / "root" / "bin" / "nvcc").stat().st_ino  # linked, not copied
    include = target / images.TOOLKIT_CONTEXT / "root" / "include"
    assert include.is_symlink() and (include / "cuda.h").is_file()  # the link still reaches the tree beside it
    assert f"--build-arg TOOLKIT='debian-12.4: {PIN}" in (target / "build.sh").read_text()


def test_a_context_without_a_carried_toolkit_has_an_empty_toolkit_folder(tmp_path: Path) -> None:
    target = images.render(spec_for("causal-conv1d-1.7.0+pt214cu130-cp311-*"), tmp_path)
    assert list((target / images.TOOLKIT_CONTEXT).iterdir()) == []
    assert "--build-arg TOOLKIT='' " in (target / "build.sh").read_text()


def test_rendering_provides_the_toolkit_when_none_is_given(
    tmp_path: Path, toolkit_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provided = []
    monkeypatch.setattr(toolchain, "provide_debian", lambda source: provided.append(source.name))
    monkeypatch.setattr(toolchain, "debian_root", lambda source: toolkit_home)
    target = images.render(spec_for(CU124), tmp_path / "contexts")
    assert provided == ["debian-12.4"] and (target / images.TOOLKIT_CONTEXT / "root" / "bin" / "nvcc").is_file()


def test_the_dockerfile_copies_the_contexts_toolkit_folder_and_links_it_at_cuda_home() -> None:
    dockerfile = (ROOT / "docker" / "cuda.Dockerfile").read_text()
    assert f"COPY {images.TOOLKIT_CONTEXT}/ {images.CARRIED_AT}/\n" in dockerfile
    assert f'ln -s {images.CARRIED_AT}/root "${{CUDA_HOME}}"' in dockerfile
    assert {"ARG CUDA_HOME", "ARG TOOLKIT"} <= {line.split("=")[0] for line in dockerfile.splitlines()}


class BuildingEngine:
    """An engine with only the base image: it records what each build's context held."""

    name = "fake"

    def __init__(self) -> None:
        self.contexts: list[dict[str, object]] = []

    def image_id(self, tag: str) -> str | None:
        return "sha256:base" if tag.startswith("wheelwright/base:") else None

    def build(self, context: Path, dockerfile: Path, tag: str, build_args: Mapping[str, str], **kwargs: object) -> None:
        held = sorted(str(p.relative_to(context)) for p in context.rglob("*"))
        self.contexts.append({"dockerfile": dockerfile.parent == context, "held": held, "args": dict(build_args)})

    def save(self, tag: str, tarball: Path, **kwargs: object) -> None:
        tarball.write_bytes(b"image")


def test_building_an_image_sends_a_context_with_the_toolkit_and_leaves_none_behind(
    tmp_path: Path, toolkit_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(toolchain, "provide_debian", lambda source: None)
    monkeypatch.setattr(toolchain, "debian_root", lambda source: toolkit_home)
    engine = BuildingEngine()
    built = images.ensure_image(engine, spec_for(CU124))
    (context,) = engine.contexts
    assert built.how == "built" and context["dockerfile"]
    assert {"toolkit/root/bin/nvcc", "toolkit/tree/usr/include/cuda.h", "install-python.sh"} <= set(context["held"])
    assert context["args"]["TOOLKIT"].startswith("debian-12.4: ")
    assert [p.name for p in (tmp_path / "cache" / "images").iterdir()] == [images.saved_image(built.tag).name]


# -- the container ----------------------------------------------------------------------------------------------------


class RunningEngine:
    name = "fake"

    def __init__(self) -> None:
        self.runs: list[RunSpec] = []

    def image_id(self, tag: str) -> str:
        return "sha256:present"

    def run(self, spec: RunSpec, **kwargs: object) -> None:
        self.runs.append(spec)


def test_a_container_whose_image_carries_the_toolkit_mounts_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ContainerBackend, "_prefill_torch", lambda self, group, log_path: None)

    def no_host_toolkit(self: ContainerBackend, job: object) -> Path:
        raise AssertionError("the host's toolkit was looked up for an image that carries one")

    monkeypatch.setattr(ContainerBackend, "_host_toolkit", no_host_toolkit)
    jobs = load_plan(ROOT / "matrix.yaml", "rehearsal", host="3.11").select(CU124).jobs
    engine = RunningEngine()
    invocation = Invocation(matrix=ROOT / "matrix.yaml", profile="rehearsal")
    backend = ContainerBackend(
        engine, Layout(root=tmp_path / "out"), load_facts(), BuildOptions(), invocation, base="bullseye"
    )
    backend.run(jobs)
    (spec,) = engine.runs
    assert not [m for m in spec.mounts if str(m.target).startswith("/usr/local/cuda")]
    assert "WHEELWRIGHT_CUDA_HOME" not in spec.env
