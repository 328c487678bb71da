"""Where a job's torch comes from: the torch index of its accelerator (PyTorch's own by default, a mirror through
``WHEELWRIGHT_TORCH_INDEX``), else, for the registry's default variant only, the registry. A look-up reads one
index page and downloads nothing; the wheel it names is then downloaded into the cache by its sha256."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from builder.core.context import log_note
from builder.core.errors import ConfigError, FetchError, NotBuildableHere, ToolchainError
from builder.core.settings import setting
from builder.plan.job import Job
from builder.plan.matrix import DEFAULT_TORCH_INDEX, check_torch_index
from builder.plan.releases import TorchFacts
from builder.steps.fetch import IndexUnreachable, download_checked, index_files, index_url, with_slash

log = logging.getLogger(__name__)

TORCH_INDEX_ENV = "WHEELWRIGHT_TORCH_INDEX"
TORCH_INDEX = "torch-index"  # TorchWheel.origin: the accelerator's torch index (PyTorch's or a mirror of it)
REGISTRY = "registry"  # the package registry, which holds one CUDA variant per torch release


class TorchUnavailable(NotBuildableHere):
    """No index the job may use serves its torch: reported as not buildable here, never attempted."""


class TorchIndexUnreachable(TorchUnavailable):
    """The job's variant lives only on its torch index, which cannot be reached from here."""


class TorchNotListed(TorchUnavailable):
    """The index was read, and it lists no wheel of the job's torch for its interpreter and platform."""


class TorchMismatch(ToolchainError):
    """The index served a torch that is not the job's (another CUDA, ABI or version)."""


@dataclass(frozen=True, kw_only=True)
class TorchWheel:
    """The torch wheel a job installs: where it was listed and what its bytes are."""

    filename: str
    url: str
    sha256: str | None  # as the index lists it (PEP 503 makes the hash optional; the download then records it)
    index: str  # the index root the job's torch and its dependencies come from
    origin: str  # TORCH_INDEX or REGISTRY

    def as_dict(self) -> dict[str, str | None]:
        return {"filename": self.filename, "url": self.url, "sha256": self.sha256, "index": self.index,
                "origin": self.origin}


def torch_index_template(configured: str = DEFAULT_TORCH_INDEX) -> str:
    """The template in force: ``WHEELWRIGHT_TORCH_INDEX`` (a mirror, an artifact proxy) over matrix.yaml's."""
    override = setting(TORCH_INDEX_ENV)
    if not override:
        return configured
    try:
        return check_torch_index(override)
    except ValueError as error:
        raise ConfigError(f"{TORCH_INDEX_ENV}: {error}") from None


def index_for(job: Job, template: str) -> str:
    return with_slash(template.replace("{accelerator}", job.accelerator.name))


def is_registry_variant(job: Job, facts: TorchFacts) -> bool:
    """The registry's plain wheel for the job's platform is the job's variant (an aarch64 one may be a CPU build)."""
    return facts.release(job.torch).registry_variant_for(job.platform) == job.accelerator


class IndexPages:
    """The index pages one run has read, by URL (a preflight of 612 jobs reads each page once), and the hosts that
    did not answer (a blackholed index costs one timeout per run, not one per accelerator). Made per run: a new
    process, or a later run, reads the index afresh."""

    def __init__(self) -> None:
        self._read: dict[str, list[dict[str, object]] | FetchError] = {}
        self._down: dict[str, IndexUnreachable] = {}  # by host: one that did not answer is not asked again

    def files(self, page: str, who: str) -> list[dict[str, object]]:
        host = urlsplit(page).netloc
        if host in self._down:
            raise self._down[host]
        if page not in self._read:
            try:
                self._read[page] = index_files(page, who)
            except IndexUnreachable as error:
                self._down[host] = error
                raise
            except FetchError as error:
                self._read[page] = error
        found = self._read[page]
        if isinstance(found, FetchError):
            raise found
        return found


def find_torch_wheel(job: Job, facts: TorchFacts, template: str, pages: IndexPages | None = None) -> TorchWheel:
    """The wheel the job's torch installs from, by one look-up of an index page (nothing is downloaded)."""
    torch_index = index_for(job, template)
    pages = pages or IndexPages()
    try:
        return _pick(job, pages, torch_index, TORCH_INDEX, f"{job.torch}+{job.accelerator.name}")
    except _Unreachable as error:
        if not is_registry_variant(job, facts):
            raise TorchIndexUnreachable(
                f"torch {job.torch} for {job.accelerator} is published only on PyTorch's index, and {torch_index} "
                f"cannot be reached here ({error})",
                tip=f"set {TORCH_INDEX_ENV} to a mirror of it, e.g. 'https://mirror.example/whl/{{accelerator}}/'",
            ) from None
        _say(f"torch index {torch_index} cannot be reached ({error}); torch {job.torch} {job.accelerator} is the "
             "registry's own variant: taking it from the registry")
        return _pick(job, pages, with_slash(index_url()), REGISTRY, job.torch)


class _Unreachable(Exception):
    pass


def _pick(job: Job, pages: IndexPages, index: str, origin: str, version: str) -> TorchWheel:
    page = urljoin(index, "torch/")
    try:
        files = pages.files(page, job.identifier)
    except FetchError as error:
        raise _Unreachable(str(error).split(": ", 1)[-1]) from None
    wanted = Version(version)
    ranked = {tag: rank for rank, tag in enumerate(_tags(job))}
    best: tuple[int, dict[str, object]] | None = None  # (rank, entry)
    for entry in files:
        rank = _rank(str(entry.get("filename", "")), wanted, ranked)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, entry)
    if best is None:
        raise TorchNotListed(
            f"{page} lists no torch {version} wheel for {job.python_tag} on {job.platform}",
            tip="check the job's torch and accelerator against that index, or point "
            f"{TORCH_INDEX_ENV} at an index that has it",
        )
    entry = best[1]
    filename, url = str(entry["filename"]), str(entry["url"])
    hashes = entry.get("hashes")
    sha256 = hashes.get("sha256") if isinstance(hashes, dict) else None
    _check_entry(page, filename, url, sha256)
    return TorchWheel(filename=filename, url=url, sha256=sha256, index=index, origin=origin)


def _check_entry(page: str, filename: str, url: str, sha256: object) -> None:
    """What the page says of the wheel it picked, checked before any of it names a file or a host: the sha256
    becomes a folder of the cache, the URL is fetched (a page on the web may not send us to a local file)."""
    if sha256 is not None and not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
        raise FetchError(f"{page} lists {filename} with sha256 {str(sha256)[:80]!r}, not 64 hexadecimal digits",
                         tip="fix that index page, or point WHEELWRIGHT_TORCH_INDEX at one that lists true hashes")
    schemes = {"http", "https"} | ({"file"} if urlsplit(page).scheme == "file" else set())
    if urlsplit(url).scheme not in schemes:
        raise FetchError(f"{page} sends {filename} to {url[:200]!r}: only {' or '.join(sorted(schemes))} URLs are "
                         "followed from it")


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _rank(filename: str, wanted: Version, ranked: dict[tags.Tag, int]) -> int | None:
    """The wheel's best rank among the job's interpreter tags, if it is torch ``wanted`` (the exact version: a
    plain 2.13.0 asks for no +cpu build) and installable there."""
    try:
        _, version, _, wheel_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if str(version) != str(wanted):
        return None
    ranks = [ranked[tag] for tag in wheel_tags if tag in ranked]
    return min(ranks) if ranks else None


def _tags(job: Job) -> list[tags.Tag]:
    """The tags an interpreter of the job's Python on this machine accepts, best first (pip's order)."""
    major, minor = (int(part) for part in job.python.rstrip("t").split("."))
    abi = job.python_tag
    # another platform's tags where this machine has none of its own (a cross build): manylinux_2_28 to 2_17
    platforms = [p for p in tags.platform_tags() if p.endswith(job.platform)] or [
        f"manylinux_2_{minor}_{job.platform}" for minor in range(28, 16, -1)
    ] + [f"manylinux2014_{job.platform}"]
    return [*tags.cpython_tags((major, minor), abis=[abi], platforms=platforms),
            *tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)]


def _say(text: str) -> None:
    """Into the job's log (where a maintainer reads where its torch came from) and the process's."""
    log.info("%s", text)
    log_note(text)


def download_torch(wheel: TorchWheel, who: str, cache: Path) -> tuple[Path, str]:
    """The wheel's bytes in ``cache/<sha256>/``, downloaded once; (path, sha256)."""
    if wheel.sha256:
        cached = cache / wheel.sha256 / wheel.filename
        if not cached.is_file():
            _say(f"downloading torch from {wheel.url}")
            download_checked(wheel.url, cached, wheel.sha256, who)
        return cached, wheel.sha256
    _say(f"downloading torch from {wheel.url} (its index lists no sha256)")
    staging = cache / "incoming" / f"{os.getpid()}-{wheel.filename}"  # one per process: no clash
    sha256 = download_checked(wheel.url, staging, None, who)
    final = cache / sha256 / wheel.filename
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, final)
    return final, sha256
