"""The container backend for real: a Docker daemon (started here when none answers), a builder image built from a
locally bootstrapped Debian bullseye (glibc 2.31), one real causal-conv1d job (sm_90, torch 2.14.1+cu130, cp311)
compiled inside it; the wheel passes the same verify gate on the host as a local build and installs into a fresh
venv on the host. Skipped, with the reason, only where no Docker daemon can run.

Slow when cold: debootstrap, CPython 3.11 built from Debian's source package, then one real compile. The base and
the image are kept under ~/.cache/wheelwright between runs (bases/, images/), so a warm run loads them instead.

The cuda12.4 image carries Debian's 12.4 (images.toml `carries`): built after the cuda13.0 one, it shares its layers
but the toolkit's, and a container with nothing mounted compiles with that toolkit alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from packaging.utils import parse_wheel_filename

from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.environment import runtime_env
from builder.steps.verify import verify_wheel
from tests.build_helpers import import_in_a_fresh_venv, ledger_row

ROOT = Path(__file__).resolve().parents[2]
CAUSAL = "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"
CUDA_HOME = Path("/usr/local/cuda-13.0")
pytestmark = [pytest.mark.docker, pytest.mark.nvcc, pytest.mark.slow, pytest.mark.timeout(5400)]


def _answers(docker: str) -> bool:
    return subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="session")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Docker daemon that answers: the running one, else a dockerd started here (and stopped afterwards)."""
    docker = shutil.which("docker")
    if docker and _answers(docker):
        yield docker
        return
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").is_file() else None)
    if not docker or not dockerd or os.geteuid() != 0:
        pytest.skip(
            "Docker cannot run here: needs the docker client, dockerd (Debian's docker.io, which "
            "scripts/install-system-deps.sh installs) and root to start it"
        )
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with log.open("w") as handle:
        daemon = subprocess.Popen([dockerd], stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while not _answers(docker):
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            pytest.skip(f"Docker cannot run here: dockerd did not start: {log.read_text()[-600:]}")
        time.sleep(1)
    yield docker
    daemon.terminate()
    daemon.wait(timeout=60)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("container")
    matrix = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    matrix["profiles"]["container"] = {
        "torch": ["2.14.1"],
        "accelerators": ["cu130"],
        "python": ["3.11"],
        "archs": {"cu130": ["9.0"]},
        "packages": ["causal-conv1d"],
    }
    matrix["profiles"]["carried"] = {
        "torch": ["2.6.0"],
        "accelerators": ["cu124"],
        "python": ["3.11"],
        "archs": {"cu124": ["9.0"]},
        "packages": ["causal-conv1d"],
    }
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    return work


def _wheelwright(work: Path, *args: str, profile: str = "container") -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "builder.cli.main",
        *args,
        "--matrix",
        str(work / "matrix.yaml"),
        "--profile",
        profile,
    ]
    return subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def builder_image(docker_daemon: str, workdir: Path) -> None:
    """The cuda13.0 image (CUDA 13.0 is the host's, mounted when a job runs)."""
    start = time.monotonic()
    images = _wheelwright(workdir, "images", "build", "--output", str(workdir / "images"))
    assert images.returncode == 0, images.stdout + images.stderr
    print(f"images build: {time.monotonic() - start:.0f} s\n{images.stdout}")


@pytest.fixture(scope="module")
def container_build(builder_image: None, workdir: Path) -> Path:
    if not (CUDA_HOME / "bin" / "nvcc").is_file():
        pytest.skip(f"no CUDA 13.0 toolkit at {CUDA_HOME} to mount into the builder image")
    output = workdir / "out"
    # --objcache off: the container's object cache persists between runs; this compile must be real every time
    build = _wheelwright(workdir, "build", "--backend", "container", "--output", str(output), "--objcache", "off")
    assert build.returncode == 0, build.stdout + build.stderr + _logs(output)
    return output


def _logs(output: Path) -> str:
    return "".join(path.read_text(errors="replace")[-3000:] for path in sorted((output / "logs").glob("*.log")))


def test_the_container_wheel_is_built_verified_and_tagged_for_the_image_glibc(container_build: Path) -> None:
    row = ledger_row(container_build, CAUSAL)
    assert row["status"] == "built", row
    wheel = container_build / "dist" / row["wheel"]
    tags = parse_wheel_filename(wheel.name)[3]
    platform = next(iter(tags)).platform
    match = re.fullmatch(r"manylinux_2_(\d+)_x86_64", platform)
    assert match and int(match[1]) <= 31, f"{platform}: a bullseye-built wheel must not need more than glibc 2.31"
    print(f"container wheel tag: {platform}")


def test_the_container_wheel_passes_the_host_verify_gate(container_build: Path) -> None:
    row = ledger_row(container_build, CAUSAL)
    wheel = container_build / "dist" / row["wheel"]
    job = load_plan(container_build.parent / "matrix.yaml", "container").select(CAUSAL).jobs[0]
    report = verify_wheel(wheel, job, runtime=runtime_env(job, load_facts()))
    assert report.ok, report.describe()


def test_the_container_wheel_installs_into_a_fresh_host_venv_and_imports(container_build: Path, tmp_path: Path) -> None:
    wheel = container_build / "dist" / ledger_row(container_build, CAUSAL)["wheel"]
    job = load_plan(container_build.parent / "matrix.yaml", "container").select(CAUSAL).jobs[0]
    extension, site = import_in_a_fresh_venv(wheel, job, tmp_path)
    assert extension.is_relative_to(site)


# -- an image that carries its toolkit -------------------------------------------------------------------------------

KERNEL = "__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\nvoid launch(float* x) { twice<<<1, 32>>>(x); }\n"
# what a torch extension's build asks of the toolkit, in little: nvcc for sm_90, linked to the shared CUDA runtime
INSIDE = f"""set -euo pipefail
nvcc --version
printf '%s' '{KERNEL}' > /tmp/k.cu
nvcc -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC -shared -cudart shared -o /tmp/k.so /tmp/k.cu
readelf -d /tmp/k.so | grep NEEDED
cuobjdump --list-elf /tmp/k.so
"""


@pytest.fixture(scope="module")
def carried_image(builder_image: None, workdir: Path) -> str:
    """The cuda12.4 image, built after the cuda13.0 one (whose layers it shares), as `wheelwright images build` does."""
    from builder.farm import images

    start = time.monotonic()
    built = _wheelwright(workdir, "images", "build", "--output", str(workdir / "images"), profile="carried")
    assert built.returncode == 0, built.stdout + built.stderr
    print(f"carried image: {time.monotonic() - start:.0f} s\n{built.stdout}")
    (spec,) = images.images_for(load_plan(workdir / "matrix.yaml", "carried", host="3.11").jobs)
    assert spec.carried is not None and spec.carried.name == "debian-12.4"
    return spec.tag(images.docker_dir())


def test_the_carried_toolkit_compiles_with_nothing_mounted(docker_daemon: str, carried_image: str) -> None:
    labels = [docker_daemon, "image", "inspect", "--format", '{{index .Config.Labels "org.wheelwright.carries"}}']
    label = subprocess.run([*labels, carried_image], capture_output=True, text=True, check=True).stdout
    assert label.startswith("debian-12.4: nvidia-cuda-toolkit=12.4.131~12.4.1-2 "), label
    # no --mount, no --volume: the toolkit, its headers and its libcudart are the image's own
    run = [docker_daemon, "run", "--rm", carried_image, "bash", "-c", INSIDE]
    inside = subprocess.run(run, capture_output=True, text=True, check=False)
    assert inside.returncode == 0, inside.stdout + inside.stderr
    assert "release 12.4, V12.4.131" in inside.stdout
    assert re.findall(r"NEEDED.*\[(libcudart[^]]*)\]", inside.stdout) == ["libcudart.so.12"]
    assert set(re.findall(r"\.(sm_\d+)\.cubin", inside.stdout)) == {"sm_90"}  # the kernel's cubins, all sm_90
