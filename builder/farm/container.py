"""The container backend: the same build stage (builder.farm.build), run inside the job's builder image.

Jobs of one (package version, torch, toolkit) share one container, so the CUDA objects of the first Python are
reused by the others exactly as on the host. The container runs `wheelwright build --backend local --only ID ...`
from this checkout (mounted read-only) against the same output folder (mounted at the same path, so the ledger's
paths stay true on the host). The host's caches are mounted rather than refilled per run: the sdists, the torch
installs (interpreter-independent `pip --target` trees, installed by the host's pip when the host has that
Python), pip's cache, and the host's CUDA toolkit, read-only, where the image neither ships nor carries one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from builder.core.errors import NotBuildableHere, WheelwrightError
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.settings import cache_root, given_settings, setting
from builder.core.wheelhouse import Layout
from builder.farm.build import BuildOptions, Outcome, Progress, _base_entry, input_hash
from builder.farm.engine import Engine, Mount, RunSpec
from builder.farm.images import ImageSpec, ensure_image, image_for, images_for
from builder.plan.expand import host_python
from builder.plan.job import Job
from builder.plan.releases import TorchFacts
from builder.steps import sharedcache

log = logging.getLogger(__name__)

SOURCE = Path("/opt/wheelwright/src")
HOST_CA = Path("/etc/wheelwright/host-ca.crt")
# How the host reaches package registries; the container must reach them the same way (a proxy, a mirror).
NETWORK_SETTINGS = ("WHEELWRIGHT_TORCH_INDEX",)  # a mirror of PyTorch's index (builder/steps/torch_index.py)
NETWORK_ENV = (
    "PIP_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
# The farm's shared device-step cache (builder/steps/sharedcache.py): its settings and what decides whether this run
# may write it (only main's) go in by value, the bucket's credentials by name only (never on the engine's command line)
SHARED_CACHE_SETTINGS = (sharedcache.REMOTE_ENV, sharedcache.ENDPOINT_ENV, sharedcache.MAX_GB_ENV,
                         sharedcache.WRITE_ENV)
SHARED_CACHE_ENV = ("GITHUB_ACTIONS", "GITHUB_REF", "GITHUB_EVENT_NAME")
CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION")
CACHE = Path("/var/cache/wheelwright")
PIP_CACHE = Path("/root/.cache/pip")


@dataclass(frozen=True, kw_only=True)
class Invocation:
    """What the inner `wheelwright build` is asked to do."""

    matrix: Path
    profile: str | None


def group_jobs(jobs: Sequence[Job]) -> list[list[Job]]:
    """One container per (package, version, label): the unit that compiles once and links per Python."""
    groups: dict[tuple[str, str, str], list[Job]] = defaultdict(list)
    for job in jobs:
        groups[(job.package, job.version, job.label)].append(job)
    return list(groups.values())


def runner_requirements() -> list[str]:
    """wheelwright's own runtime requirements, as installed here (the same pins inside the image)."""
    requires = metadata.requires("wheelwright") or []
    return sorted(r for r in requires if "extra ==" not in r)


def inner_script(
    jobs: Sequence[Job], spec: ImageSpec, invocation: Invocation, layout: Layout, options: BuildOptions
) -> str:
    """The shell the container runs: a cached venv for wheelwright's requirements, then the local build stage."""
    python = f"python{spec.base.runner_python}"  # the image's RUNNER_PYTHON
    requirements = runner_requirements()
    venv = CACHE / f"runner-{python}-{hashlib.sha256(repr(requirements).encode()).hexdigest()[:12]}"
    build = [
        f"{venv}/bin/python",
        "-m",
        "builder.cli.main",
        "build",
        "--backend",
        "local",
        "--matrix",
        str(invocation.matrix),
        "--output",
        str(layout.root),
        "--objcache",
        options.objcache,
    ]
    build += ["--profile", invocation.profile] if invocation.profile else []
    build += ["--retry-failed"] if options.retry_failed else []
    for job in jobs:
        build += ["--only", job.identifier]
    return "\n".join(
        [
            "set -euo pipefail",
            f"if [ ! -f {venv}/.complete ]; then",
            f"  rm -rf {venv} && {python} -m venv {venv}",
            f"  {venv}/bin/python -m pip install --quiet --disable-pip-version-check {shlex.join(requirements)}",
            f"  touch {venv}/.complete",
            "fi",
            f"exec {shlex.join(build)}",
        ]
    )


def host_network(environ: Mapping[str, str] = os.environ) -> tuple[list[Mount], dict[str, str]]:
    """The host's CA bundle (a TLS-inspecting proxy's CA is in it, the image's own bundle lacks it) and its
    registry and proxy settings, for the container's pip."""
    candidates = (environ.get("PIP_CERT"), environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt")
    bundle = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    env = {key: environ[key] for key in NETWORK_ENV if environ.get(key)} | given_settings(*NETWORK_SETTINGS)
    if bundle is None:
        return [], env
    env.update(PIP_CERT=str(HOST_CA), SSL_CERT_FILE=str(HOST_CA), REQUESTS_CA_BUNDLE=str(HOST_CA))
    return [Mount(source=bundle.resolve(), target=HOST_CA, read_only=True)], env


def shared_cache_env(environ: Mapping[str, str] = os.environ) -> tuple[dict[str, str], tuple[str, ...]]:
    """The shared cache's settings (by value) and the bucket's credentials (by name) that are set here, for the
    container's build; nothing where no shared cache is named."""
    if not setting(sharedcache.REMOTE_ENV):
        return {}, ()
    github = {key: environ[key] for key in SHARED_CACHE_ENV if environ.get(key)}  # whether this run may write
    values = given_settings(*SHARED_CACHE_SETTINGS) | github
    return values, tuple(key for key in CREDENTIAL_ENV if environ.get(key))


def toolkit_home(root: Path) -> Path:
    """The smallest folder that holds a toolkit's ``root`` and everything its links reach, which is what a container
    must mount: Debian's toolkits link include/, lib64/ and nvvm/libdevice into the tree/ beside root/, so a mount
    of root/ alone left those links dangling inside the container. At most root's parent (Debian's layout)."""
    links = [Path(folder) / name for folder, dirs, files in os.walk(root) for name in (*dirs, *files)
             if os.path.islink(Path(folder) / name)]
    home = Path(os.path.commonpath([root, *(Path(os.path.realpath(link)) for link in links)]))
    # never more than the toolkit's own folder: a link to /etc would otherwise mount the host's / in the container
    return home if home in (root, root.parent) else root


class ContainerBackend:
    """Runs the build stage inside builder images; the ledger and dist/ are the same as the local backend's."""

    def __init__(
        self,
        engine: Engine,
        layout: Layout,
        facts: TorchFacts,
        options: BuildOptions,
        invocation: Invocation,
        *,
        base: str,
        progress: Progress | None = None,
    ) -> None:
        self.engine, self.layout, self.facts, self.options = engine, layout, facts, options
        self.invocation, self.base = invocation, base
        self.progress = progress or Progress()

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        for folder in (self.layout.dist, self.layout.quarantine, self.layout.logs):
            folder.mkdir(parents=True, exist_ok=True)
        specs = images_for(jobs, self.base)
        groups = group_jobs(jobs)
        with ThreadPoolExecutor(max_workers=max(1, min(self.options.parallel, len(groups)))) as pool:
            list(pool.map(lambda group: self._group(group, image_for(group[0], specs)), groups))
        with Ledger(self.layout.ledger) as ledger:
            return [Outcome(job=job, entry=ledger.get(job.identifier) or self._missing(job)) for job in jobs]

    def _group(self, group: Sequence[Job], spec: ImageSpec) -> None:
        log_path = self.layout.logs / f"container-{group[0].package}-{group[0].local_version}.log"
        log_path.write_text("")
        for job in group:
            self.progress.on_phase(job, "container")
        reason = spec.not_buildable()
        if reason:
            self._fail(group, f"image {spec.name} cannot be built here: {reason}", log_path, status=Status.UNBUILDABLE)
            return
        try:
            built = ensure_image(self.engine, spec, log_path=log_path)
            self._prefill_torch(group, log_path)
            self.engine.run(
                self._run_spec(group, spec, built.tag),
                log_path=log_path,
                on_line=lambda line: self.progress.on_line(group[0], line),
            )
        except WheelwrightError as error:
            # exit 6 is the inner build's "some job failed": its ledger rows say which; anything else failed them all
            if getattr(error, "returncode", None) != 6:
                self._fail(group, f"container: {error}", log_path)

    def _run_spec(self, group: Sequence[Job], spec: ImageSpec, tag: str) -> RunSpec:
        host_cache = cache_root()
        own = host_cache / "containers" / f"{spec.name}-{spec.base.name}"
        shared = [host_cache / name for name in ("sdists", "runtime", "torch-wheels")]
        for folder in (own, *shared, Path.home() / ".cache" / "pip"):
            folder.mkdir(parents=True, exist_ok=True)
        mounts = [
            Mount(source=Path(__file__).resolve().parents[2], target=SOURCE, read_only=True),
            Mount(source=self.invocation.matrix, target=self.invocation.matrix, read_only=True),
            Mount(source=self.layout.root, target=self.layout.root),
            Mount(source=own, target=CACHE),
            *(Mount(source=folder, target=CACHE / folder.name) for folder in shared),
            Mount(source=Path.home() / ".cache" / "pip", target=PIP_CACHE),
        ]
        env = {
            "WHEELWRIGHT_CACHE": str(CACHE),
            "WHEELWRIGHT_BUILDER_IMAGE": tag,
            "WHEELWRIGHT_HOST_PYTHON": host_python(),
            "PYTHONPATH": str(SOURCE),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if spec.base.cc:
            env.update(CC=spec.base.cc, CXX=spec.base.cxx)  # torch's extension build passes CC to nvcc as -ccbin
        network_mounts, network_env = host_network()
        mounts += network_mounts
        env.update(network_env)
        cache_env, credentials = shared_cache_env()
        env.update(cache_env)
        toolkit = self._host_toolkit(group[0]) if spec.mounts_toolkit else None
        if toolkit:
            home = toolkit_home(toolkit)
            mounts.append(Mount(source=home, target=spec.cuda_home, read_only=True))
            env["WHEELWRIGHT_CUDA_HOME"] = str(spec.cuda_home / toolkit.relative_to(home))
        script = inner_script(group, spec, self.invocation, self.layout, self.options)
        return RunSpec(image=tag, command=("bash", "-c", script), mounts=tuple(mounts), env=env, inherit=credentials)

    def _host_toolkit(self, job: Job) -> Path | None:
        from builder.steps.environment import find_toolkit

        try:
            return find_toolkit(job.accelerator, job.archs).root.resolve()
        except NotBuildableHere:
            return None  # the inner build records the job as unbuildable, with the reason

    def _prefill_torch(self, group: Sequence[Job], log_path: Path) -> None:
        """Install each job's torch into the shared runtime cache with the host's pip (its configuration, its
        cache), where the host has that Python; the container then finds it installed."""
        from builder.steps.environment import runtime_env

        for job in group:
            try:
                runtime = runtime_env(job, self.facts, self.options.torch_index)
            except NotBuildableHere as reason:
                log.info("%s: torch not prefilled on the host (%s); the container installs it", job.identifier, reason)
                continue
            if runtime.system:
                log.info("%s: the host's interpreter has its own torch; the container installs one", job.identifier)

    def _fail(self, group: Sequence[Job], reason: str, log_path: Path, *, status: Status = Status.FAILED) -> None:
        with log_path.open("a") as handle:
            handle.write(f"{status}: {reason}\n")
        with Ledger(self.layout.ledger) as ledger:
            for job in group:
                entry = _base_entry(job, input_hash(job), self.layout, status=status, phase="container", reason=reason)
                ledger.put(entry)

    def _missing(self, job: Job) -> LedgerEntry:
        return _base_entry(
            job,
            input_hash(job),
            self.layout,
            status=Status.FAILED,
            phase="container",
            reason="the container recorded no result for this job",
        )
