"""Session-wide real things for integration tests: nvcc from the CUDA toolkit and cuobjdump from its PyPI wheel;
a wheelhouse of labelled wheels indexed and served over loopback HTTP, an S3 API server (moto's server mode) on
loopback, and clean environments for real pip and uv."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry
from builder.core.runner import run
from index_site.serve import Served, serving
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.build_helpers import ledger_row, wait_for_nvcc, wheelwright
from tests.index_checks import installer_environment
from tests.jobs import ledger_entry

if TYPE_CHECKING:
    from builder.steps.environment import RuntimeEnv

DATA = Path(__file__).parent / "data"
TOY_KERNEL = DATA / "scale_kernel.cu"

CompileCu = Callable[..., Path]


@pytest.fixture(scope="session")
def cuda_home() -> Path:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0"))
    if not (home / "bin" / "nvcc").is_file():
        pytest.skip(f"no nvcc under {home}: set CUDA_HOME to a CUDA toolkit")
    return home


@pytest.fixture(scope="session")
def compile_cu(cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> CompileCu:
    """``compile_cu(name, gencodes, *extra)`` -> a shared object built from the toy kernel, cached per session."""
    out_dir = tmp_path_factory.mktemp("nvcc")
    built: dict[tuple[str, ...], Path] = {}

    def compile_(name: str, gencodes: Sequence[str], *extra: str) -> Path:
        key = (*gencodes, *extra)
        if key not in built:
            output = out_dir / f"{name}.so"
            flags = [f"-gencode={g}" for g in gencodes]
            env = {**os.environ, "CUDA_HOME": str(cuda_home)}
            command = [cuda_home / "bin" / "nvcc", "-shared", "-Xcompiler", "-fPIC", *flags, *extra, TOY_KERNEL]
            run([*command, "-o", output], step=f"nvcc {name}", env=env, log_path=out_dir / "nvcc.log")
            built[key] = output
        return built[key]

    return compile_


@pytest.fixture(scope="session")
def cuobjdump() -> Path:
    """The cuobjdump binary of the pinned ``nvidia-cuda-cuobjdump`` test dependency."""
    try:
        dist = metadata.distribution("nvidia-cuda-cuobjdump")
    except metadata.PackageNotFoundError:
        pytest.fail("nvidia-cuda-cuobjdump is a test dependency: run `make venv`")
    binaries = [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name == "cuobjdump"]
    if not binaries:
        pytest.fail(f"nvidia-cuda-cuobjdump {dist.version} ships no cuobjdump binary")
    return binaries[0]


PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
OTHER_TAG = "cp312" if PYTHON_TAG != "cp312" else "cp313"

# Three variants of causal-conv1d 1.7.0 for this interpreter (and one other Python), an older version in one
# variant, and a second project: enough for an installer to pick the wrong file if the index let it.
INDEX_WHEELS = (
    WheelSpec(label="pt214cu130", python=PYTHON_TAG),
    WheelSpec(label="pt214cu130", python=OTHER_TAG),
    WheelSpec(label="pt213cu130", python=PYTHON_TAG),
    WheelSpec(label="pt213cu130", python=OTHER_TAG),
    WheelSpec(label="pt212cu126", python=PYTHON_TAG),
    WheelSpec(version="1.6.1", label="pt213cu130", python=PYTHON_TAG),
    WheelSpec(
        project="mamba-ssm",
        version="2.3.2.post1",
        label="pt214cu130",
        python=PYTHON_TAG,
        payload_bytes=400_000,
        summary="Mamba state space model",
    ),
)
# The failed combos use Pythons older than any interpreter that runs the tests (no fixture wheel is built for them).
FAILED_REASON = "nvcc fatal   : Unsupported gpu architecture 'compute_120'"


@dataclass(frozen=True, kw_only=True)
class ServedIndex:
    output: Path
    site: Path
    url: str
    requests: list[Served]

    def wheel(
        self, label: str, *, project: str = "causal-conv1d", version: str = "1.7.0", python: str = PYTHON_TAG
    ) -> str:
        spec = WheelSpec(project=project, version=version, label=label, python=python)
        return spec.wheel_filename


def write_wheelhouse(output: Path) -> None:
    """The index fixture: wheels in dist/, a ledger that built some of them and failed on two more combos."""
    paths = [make_wheel(output / "dist", spec) for spec in INDEX_WHEELS]
    with Ledger(output / "ledger.sqlite") as ledger:
        for path in paths[:2]:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            ledger.put(
                _ledger_entry(
                    path.name.split("-")[-3],
                    "built",
                    wheel=path.name,
                    wheel_sha256=digest,
                    wheel_size=path.stat().st_size,
                    wheel_identity=str(FileIdentity.of(path.stat())),
                )
            )
        ledger.put(_ledger_entry("cp39", "failed", phase="compile", reason=FAILED_REASON))
        ledger.put(
            _ledger_entry(
                "cp38",
                "unbuildable",
                label="pt212cu126",
                reason="torch 2.12 + CUDA 12.6 published no wheel for Python 3.8",
            )
        )


def _ledger_entry(python_tag: str, status: str, *, label: str = "pt214cu130", **fields: object) -> LedgerEntry:
    return ledger_entry(python=f"{python_tag[2]}.{python_tag[3:]}", label=label, torch="2." + label[3:5] + ".0",
                        accelerator=label[5:], status=status, **fields)


@pytest.fixture(scope="session")
def served_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIndex]:
    output = tmp_path_factory.mktemp("wheelhouse")
    write_wheelhouse(output)
    requests: list[Served] = []
    lock = threading.Lock()

    def record(served: Served) -> None:
        with lock:
            requests.append(served)

    with serving(output / "site", on_request=record) as server:
        build_site(output, output / "site", base_url=server.url)
        yield ServedIndex(output=output, site=output / "site", url=server.url, requests=requests)


@pytest.fixture
def installer_env(tmp_path: Path) -> dict[str, str]:
    return installer_environment(tmp_path / "uv-cache")


@pytest.fixture
def fresh_venv(tmp_path: Path, installer_env: dict[str, str]) -> Path:
    """A new, empty virtual environment of this interpreter; returns its python."""
    run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], step="create venv", env=installer_env)
    return tmp_path / "venv" / "bin" / "python"


def installed_wheel(python: Path, env: dict[str, str]) -> str:
    """The filename of the causal-conv1d wheel installed in ``python``'s environment, as the wheel itself says."""
    probe = "import causal_conv1d; print(causal_conv1d.WHEEL_FILENAME)"
    return run([python, "-c", probe], step="probe installed wheel", env=env, capture=True).output.strip()


@dataclass(frozen=True, kw_only=True)
class S3Endpoint:
    url: str

    def new_bucket(self) -> str:
        """A fresh bucket whose objects anyone may read, like a public index's."""
        import boto3

        name = f"wheels-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.url, region_name="us-east-1")
        client.create_bucket(Bucket=name)
        statement = {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{name}/*",
        }
        client.put_bucket_policy(Bucket=name, Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
        return name


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "wheelwright-test-key",
            "AWS_SECRET_ACCESS_KEY": "wheelwright-test-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield S3Endpoint(url=f"http://{host}:{port}")
        finally:
            server.stop()


# -- a real torch and the reference sources, shared -------------------------------------------------------------


@pytest.fixture(scope="session")
def torch_runtime() -> RuntimeEnv:
    """torch 2.14.1 (a CUDA build) for cp311, installed once under ~/.cache/wheelwright/runtime/ (minutes and 5 GiB
    the first time, hence the slow mark on its users) and reused by every later run: a real torch that finds no
    device here."""
    from builder.plan.facts import load_facts
    from builder.steps.environment import runtime_env
    from tests.jobs import local_job

    return runtime_env(local_job(), load_facts())


@pytest.fixture(scope="session")
def reference_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The gpu-box profile's sdists, through the fetch stage's hash-checked cache, unpacked."""
    from builder.plan.expand import load_plan
    from builder.steps.fetch import fetch_sdist, unpack_sdist

    into = tmp_path_factory.mktemp("sdists")
    return {job.package: unpack_sdist(fetch_sdist(job), into) for job in load_plan(E2E_ROOT / "matrix.yaml",
                                                                                    "gpu-box").jobs}


# -- the real build, shared ------------------------------------------------------------------------------------

E2E_ROOT = Path(__file__).resolve().parents[2]
E2E_CUDA_HOME = Path("/usr/local/cuda-13.0")
E2E_CAUSAL = "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"


@pytest.fixture(scope="session")
def e2e_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """matrix.yaml plus two test profiles; a private object cache so every session compiles for real."""
    work = tmp_path_factory.mktemp("e2e")
    matrix = yaml.safe_load((E2E_ROOT / "matrix.yaml").read_text())
    axes = {"torch": ["2.14.1"], "accelerators": ["cu130"], "python": ["3.11"], "archs": {"cu130": ["9.0"]}}
    matrix["profiles"]["e2e"] = {**axes, "packages": ["causal-conv1d"]}
    # mamba-ssm without its C++20 patch: torch 2.14's headers reject -std=c++17, so this job cannot compile
    broken = next(p for p in matrix["packages"] if p["name"] == "mamba-ssm")
    broken["recipe"]["patches"] = []
    matrix["profiles"]["broken"] = axes
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    return work


@pytest.fixture(scope="session")
def real_build(e2e_workdir: Path) -> Path:
    """The real build of causal-conv1d (sm_90, torch 2.14.1), once per session: killed mid-compile (SIGKILL to its
    whole process group), checked that nothing leaked, then resumed. The e2e and the index tests use its output."""
    if not (E2E_CUDA_HOME / "bin" / "nvcc").is_file():
        pytest.skip(f"no CUDA 13.0 toolkit at {E2E_CUDA_HOME}")
    workdir = e2e_workdir
    output = workdir / "out"
    first = wheelwright(workdir, "build", "--profile", "e2e", "--output", str(output), start_new_session=True)
    wait_for_nvcc(output, E2E_CAUSAL)
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()

    assert list((output / "dist").iterdir()) == []
    interrupted = ledger_row(output, E2E_CAUSAL)
    assert (interrupted["status"], interrupted["phase"], interrupted["wheel"]) == ("running", "compile", None)

    second = wheelwright(workdir, "build", "--profile", "e2e", "--output", str(output))
    assert second.stdout is not None
    with second.stdout:
        stamped = [f"{time.monotonic():.3f} {line}" for line in second.stdout]  # a pipe, read as a CI log is
    second.wait()
    (workdir / "resumed-build.stamped").write_text("".join(stamped))  # for the progress test in test_build_e2e
    if second.returncode != 0:
        pytest.fail(_why_the_build_failed(output, E2E_CAUSAL, second.returncode, stamped), pytrace=False)
    return output


def _why_the_build_failed(output: Path, job: str, code: int, stamped: list[str]) -> str:
    """What a failed real build's test prints, short and reason first: the ledger's reason and the end of the job's
    log (a disk that ran full says so there), then the last of the build's own lines, without its summary table
    (wider than CI's excerpt of a failure)."""
    log = output / "logs" / f"{job}.log"
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else [f"(no log at {log})"]
    texts = [line.split(" ", 1)[-1].rstrip("\n") for line in stamped]
    lines = [text for text in texts if text != "build summary" and text[:1] not in "┏┃┡│├└"]
    return "\n".join([f"the resumed build exited {code}: {ledger_row(output, job).get('reason')}",
                      f"-- the end of {log.name}:", *tail, "-- the end of its output:", *lines[-30:]])
