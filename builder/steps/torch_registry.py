"""`wheelwright facts check`: compare builder/data/torch.toml with the torch releases on the registry — versions and
Python tags from the wheel filenames, the CUDA X.Y of the default wheel from its Requires-Dist pins — and write the
stanza a missing minor needs, ready to paste. A farm that lags torch by months is what users complain about.

The registry is read through the PEP 691 JSON API; a wheel's METADATA through PEP 658 when the index offers it,
else with HTTP range requests on the wheel itself (its zip directory and one member: a few hundred kilobytes of a
500 MB file)."""

from __future__ import annotations

import email.parser
import io
import re
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from builder.core.archive import FOREIGN, open_stream
from builder.core.errors import FetchError, WheelError
from builder.core.http import BoundedResponse, open_bounded
from builder.plan.accelerator import python_key
from builder.plan.releases import TorchFacts, TorchRelease
from builder.steps.fetch import METADATA, _project_files, index_url, open_url

# Requires-Dist pins that name the CUDA runtime the wheel was built with.
_CUDA_PINS = (
    re.compile(r"^nvidia-cuda-runtime-cu\d+\s*\(?==\s*(?P<major>\d+)\.(?P<minor>\d+)"),  # CUDA 11 and 12 wheels
    re.compile(r"^cuda-toolkit\[[^\]]*\]\s*==\s*(?P<major>\d+)\.(?P<minor>\d+)"),  # CUDA 13: cuda-toolkit[...]==13.0.3
)


class Registry(Protocol):
    def files(self, project: str) -> list[dict[str, Any]]: ...

    def metadata(self, file: Mapping[str, Any]) -> str: ...


@dataclass(frozen=True, kw_only=True)
class RegistryRelease:
    """What the registry shows of one torch minor: its patch releases, the Pythons of the newest, its CUDA."""

    minor: str
    patches: tuple[str, ...]
    python: tuple[str, ...]
    pypi_cuda: str | None  # None: the default wheel pins no CUDA runtime (or could not be read)
    # the CUDA the newest patch's aarch64 wheel pins for aarch64 (its markers evaluated there); None: a CPU build
    aarch64_cuda: str | None = None
    aarch64_python: tuple[str, ...] = ()  # the Pythons of the newest patch's aarch64 wheels


@dataclass(frozen=True, kw_only=True)
class Finding:
    minor: str
    problem: str
    stanza: str | None = None  # the [[release]] table to paste, for a minor the facts lack


def _python(tag: Tag) -> str | None:
    """cp311-cp311 -> 3.11, cp313-cp313t -> 3.13t (free-threaded, by its ABI tag); other interpreters -> None."""
    interpreter = re.fullmatch(r"cp3(\d+)", tag.interpreter)
    if interpreter is None:
        return None
    free_threaded = tag.abi == f"{tag.interpreter}t"
    return f"3.{interpreter[1]}{'t' if free_threaded else ''}"


# The fields of a PEP 691 file entry this check reads, and the types it reads them as.
_ENTRY_TYPES: dict[str, tuple[type, ...]] = {"filename": (str,), "url": (str,), "size": (int,),
                                             "yanked": (bool, str), "core-metadata": (bool, dict),
                                             "dist-info-metadata": (bool, dict)}


def checked_entries(files: object, where: str) -> list[Mapping[str, Any]]:
    """The registry's file entries, each a table whose fields this check reads have the types PEP 691 gives them;
    the first that does not is one FetchError naming it."""
    if not isinstance(files, list):
        raise FetchError(f"facts check: {where}: 'files' is a {type(files).__name__}, not a list")
    for number, entry in enumerate(files):
        if not isinstance(entry, dict):
            raise FetchError(f"facts check: {where}: file entry {number} is a {type(entry).__name__}, not a table")
        if entry.get("filename") is None:
            raise FetchError(f"facts check: {where}: file entry {number} has no 'filename'")
        for field, types in _ENTRY_TYPES.items():
            value = entry.get(field)
            if value is not None and not _typed(value, types):
                raise FetchError(f"facts check: {where}: file entry {number} ({str(entry.get('filename'))[:200]!r}):"
                                 f" '{field}' is {_shown(value)}, not {' or '.join(t.__name__ for t in types)}")
    return files


def _typed(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # a bool is an int to isinstance, not to PEP 691
        return False
    return isinstance(value, types) and not (isinstance(value, int) and value < 0)


def _shown(value: object) -> str:
    text = repr(value)
    return f"the {type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _linux_wheels(
    files: Iterable[Mapping[str, Any]], machine: str = "x86_64"
) -> dict[Version, dict[str, Mapping[str, Any]]]:
    """{version: {python: file}} of the manylinux ``machine`` wheels that are not yanked, pre-releases or local
    builds."""
    wheels: dict[Version, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for file in files:
        try:
            _, version, _, tags = parse_wheel_filename(file["filename"])
        except InvalidWheelFilename:
            continue
        if file.get("yanked") or version.is_prerelease or version.local:
            continue
        for tag in tags:
            python = _python(tag)
            if python and "linux" in tag.platform and tag.platform.endswith(f"_{machine}"):
                wheels[version][python] = file
    return wheels


def cuda_of(metadata: str, *, machine: str | None = None, python: str = "3.11") -> str | None:
    """The CUDA X.Y a torch wheel's METADATA pins (nvidia-cuda-runtime-cu12==12.8.90, cuda-toolkit[...]==13.0.3).

    With ``machine``, only a pin whose marker holds on a Linux ``machine`` under ``python`` counts: torch's aarch64
    wheels up to 2.10 carry the x86_64 pins marked ``platform_machine == "x86_64"``, and are CPU builds there."""
    parsed = email.parser.Parser().parsestr(metadata, headersonly=True)
    for requirement in parsed.get_all("Requires-Dist") or []:
        if machine is not None and not _applies(requirement, machine, python):
            continue
        for pattern in _CUDA_PINS:
            if match := pattern.match(requirement.strip()):
                return f"{match['major']}.{match['minor']}"
    return None


def _applies(requirement: str, machine: str, python: str) -> bool:
    try:
        marker: Marker | None = Requirement(requirement).marker
    except InvalidRequirement:
        return False
    environment = {"platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux",
                   "python_version": python.removesuffix("t"), "python_full_version": python.removesuffix("t") + ".0"}
    return marker is None or marker.evaluate(environment)


def _default_wheel(by_python: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """The wheel whose metadata is read: the oldest Python's (every Python's wheel pins the same CUDA)."""
    return by_python[min(by_python, key=python_key)]


def registry_releases(registry: Registry, *, since: str = "1.13") -> list[RegistryRelease]:
    """Every torch minor from ``since`` on, as the registry shows it."""
    files = checked_entries(registry.files("torch"), "the torch page")
    by_minor: dict[str, dict[Version, dict[str, Mapping[str, Any]]]] = defaultdict(dict)
    for version, by_python in _linux_wheels(files).items():
        if version >= Version(since):
            by_minor[f"{version.major}.{version.minor}"][version] = by_python
    arm = _linux_wheels(files, "aarch64")
    releases = []
    for minor, versions in sorted(by_minor.items(), key=lambda item: Version(item[0])):
        newest = max(versions)
        python = tuple(sorted(versions[newest], key=python_key))
        releases.append(
            RegistryRelease(
                minor=minor,
                patches=tuple(str(v) for v in sorted(versions)),
                python=python,
                pypi_cuda=cuda_of(registry.metadata(_default_wheel(versions[newest]))),
                **_aarch64(registry, arm.get(newest, {})),
            )
        )
    return releases


def _aarch64(registry: Registry, by_python: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the newest patch's aarch64 wheels show: their Pythons, and the CUDA they pin for aarch64."""
    if not by_python:
        return {}
    oldest = min(by_python, key=python_key)
    cuda = cuda_of(registry.metadata(by_python[oldest]), machine="aarch64", python=oldest)
    return {"aarch64_cuda": cuda, "aarch64_python": tuple(sorted(by_python, key=python_key))}


def _quoted(values: Sequence[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def stanza(release: RegistryRelease, like: TorchRelease | None) -> str:
    """A [[release]] table for torch.toml; what the registry cannot tell (variants, ROCm, ABI) comes from the newest
    known release and is marked for review."""
    cuda = release.pypi_cuda or "?"
    lines = [
        "[[release]]",
        f'torch = "{release.minor}"',
        f"patches = {_quoted(release.patches)}",
        f"python = {_quoted(release.python)}",
        f'cuda = ["{cuda}"]  # review: the registry shows only its default variant',
        f'pypi_cuda = "{cuda}"',
        "rocm = []  # review: ROCm variants live on PyTorch's own index",
        (
            f"cxx11_abi = {'true' if like is None or like.cxx11_abi else 'false'}"
            f"  # review: as torch {like.minor if like else '?'}"
        ),
        f'manylinux = "{like.manylinux if like else "manylinux_2_28"}"',
        (
            f'sources = ["the registry\'s torch {release.minor} wheels (wheelwright facts check)"]'
            "  # review: cite RELEASE.md or the release's CUDA RFC for every variant you add"
        ),
    ]
    return "\n".join(lines) + "\n"


def compare(facts: TorchFacts, releases: Sequence[RegistryRelease]) -> list[Finding]:
    """What the facts lack or get wrong against the registry; empty when they are current."""
    known = {release.minor: release for release in facts.releases}
    findings = []
    for release in releases:
        mine = known.get(release.minor)
        if mine is None:
            newest = facts.releases[-1] if Version(release.minor) > Version(facts.releases[-1].minor) else None
            findings.append(
                Finding(
                    minor=release.minor,
                    problem=f"torch {release.minor} ({', '.join(release.patches)}) "
                    "is on the registry but not in the facts",
                    stanza=stanza(release, newest),
                )
            )
            continue
        findings += _differences(mine, release)
    return findings


def _differences(mine: TorchRelease, release: RegistryRelease) -> list[Finding]:
    problems = []
    missing = [p for p in release.patches if p not in mine.patches]
    if missing:
        merged = sorted({*mine.patches, *release.patches}, key=Version)
        problems.append(f"patches lack {', '.join(missing)}: patches = {_quoted(merged)}")
    if set(release.python) != set(mine.python):
        problems.append(
            f"python is {list(mine.python)}, the registry's {release.patches[-1]} wheels are for {list(release.python)}"
        )
    if release.pypi_cuda and release.pypi_cuda != mine.pypi_cuda:
        problems.append(f"pypi_cuda is {mine.pypi_cuda}, the registry's default wheel pins CUDA {release.pypi_cuda}")
    problems += _aarch64_differences(mine, release)
    return [Finding(minor=mine.minor, problem=f"torch {mine.minor}: {p}") for p in problems]


def _aarch64_differences(mine: TorchRelease, release: RegistryRelease) -> list[str]:
    """The registry's aarch64 wheel against ``pypi_aarch64``: the CUDA it pins once its markers are evaluated for
    aarch64 (a CPU build pins none there), and its Pythons."""
    claimed, shown = mine.pypi_aarch64, release.aarch64_cuda
    newest = release.patches[-1]
    if claimed is not None and shown != claimed:
        built = f"pins CUDA {shown}" if shown else "is a CPU build (no CUDA pin holds on aarch64)"
        if not release.aarch64_python:
            built = "does not exist"
        return [f"pypi_aarch64 is {claimed}, but the registry's {newest} aarch64 wheel {built}"]
    if claimed is None and shown is not None:
        return [f"the registry's {newest} aarch64 wheel is a CUDA {shown} build: pypi_aarch64 = \"{shown}\""]
    if claimed is not None and set(release.aarch64_python) != set(mine.python):
        return [(f"python is {list(mine.python)}, the registry's {newest} aarch64 wheels are for "
                 f"{list(release.aarch64_python)}")]
    return []


# -- the real registry --------------------------------------------------------------------------------------------


class _RangeReader(io.RawIOBase):
    """A remote file read with HTTP range requests, enough for zipfile to find one member."""

    def __init__(
        self,
        url: str,
        size: int,
        opener: Callable[[urllib.request.Request], AbstractContextManager[BoundedResponse]],
    ) -> None:
        self.url, self.size, self.opener, self.position = url, size, opener, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.size - self.position)
        if count <= 0:
            return 0
        request = urllib.request.Request(
            self.url, headers={"Range": f"bytes={self.position}-{self.position + count - 1}"}
        )
        with self.opener(request) as response:
            data = response.read()
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


class PyPIRegistry:
    """The configured index (WHEELWRIGHT_INDEX_URL, default the public registry) through PEP 691 and PEP 658."""

    def __init__(self, index: str | None = None) -> None:
        self.index = index or index_url()

    def files(self, project: str) -> list[dict[str, Any]]:
        page = urljoin(self.index if self.index.endswith("/") else self.index + "/", f"{project}/")
        self._page = page
        return _project_files(page, "facts check")

    def metadata(self, file: Mapping[str, Any]) -> str:
        url = urljoin(self._page, file["url"])
        try:
            if file.get("core-metadata") or file.get("dist-info-metadata"):
                with open_url(url + ".metadata", limits=METADATA) as response:
                    return response.read().decode("utf-8", errors="replace")
            return self._metadata_by_range(url, int(file["size"]), file["filename"])
        except (urllib.error.URLError, OSError, WheelError, KeyError, TypeError, ValueError) as error:
            raise FetchError(f"facts check: cannot read the METADATA of {file['filename']}: {error}") from None

    def _metadata_by_range(self, url: str, size: int, filename: str) -> str:
        opener = lambda request: open_bounded(request, METADATA)  # noqa: E731
        stream = io.BufferedReader(_RangeReader(url, size, opener), 1 << 16)
        with open_stream(stream, size, filename, FOREIGN) as wheel:
            (name,) = [n for n in wheel.names() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            return wheel.read(name).decode("utf-8", errors="replace")


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Which facts the registry confirmed and which rest on a release's sources alone."""

    verified: tuple[str, ...]  # "2.14 cu130": its patches, Pythons and the default wheel's CUDA agree
    cited: tuple[tuple[str, tuple[str, ...]], ...]  # ("2.14 cu126, cu132, rocm7.2", its sources)


def provenance(facts: TorchFacts, releases: Sequence[RegistryRelease], findings: Sequence[Finding]) -> Provenance:
    """The registry shows one variant per minor, the plain wheel; every other variant is only as good as its
    citation. A minor with a finding is verified in nothing."""
    seen = {release.minor: release for release in releases}
    behind = {finding.minor for finding in findings}
    verified, cited = [], []
    for mine in facts.releases:
        shown = seen.get(mine.minor)
        confirmed = shown is not None and shown.pypi_cuda is not None and mine.minor not in behind
        if confirmed:
            arm = " (x86_64 and aarch64)" if mine.pypi_aarch64 == mine.pypi_cuda else ""
            verified.append(f"{mine.minor} {mine.registry_variant}{arm}")
        rest = mine.cited_variants if confirmed else mine.accelerators
        what = ", ".join(a.name for a in rest) if shown is not None else "every fact (not on the registry)"
        if rest or shown is None:
            cited.append((f"{mine.minor} {what}", mine.sources))
    return Provenance(verified=tuple(verified), cited=tuple(cited))


def survey(facts: TorchFacts, registry: Registry | None = None) -> tuple[list[Finding], Provenance]:
    """The findings of :func:`check` and, beside them, what the registry could confirm at all."""
    releases = registry_releases(registry or PyPIRegistry(), since=facts.releases[0].minor)
    findings = compare(facts, releases)
    return findings, provenance(facts, releases, findings)


def check(facts: TorchFacts, registry: Registry | None = None) -> list[Finding]:
    return survey(facts, registry)[0]
