"""Files a registry sdist left out, taken from upstream's release commit: the sdists of causal-conv1d < 1.5.1 and
mamba-ssm 1.x hold setup.py and the Python package but not csrc/, so they cannot compile anything.

matrix.yaml pins the commit and a digest of the added files' contents (``tree_digest``), not of a tarball: the same
files checked the same way whether the archive came from the forge, from ``git archive`` of a local clone, or from
the cache. The release's setup.py must equal the sdist's, which shows the commit is the release the sdist is.

A machine that reaches the package registries but not the forge (CI) builds such a job only once the archive is in
the source cache; until then the job is reported unbuildable here, with the command that puts it there.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

from builder.core.errors import FetchError, NotBuildableHere
from builder.core.hashing import sha256_of
from builder.plan.job import Job, UpstreamFiles
from builder.steps.fetch import _download_unchecked, cache_dir_for_sdists

log = logging.getLogger(__name__)


def archive_name(upstream: UpstreamFiles) -> str:
    return f"{upstream.repo.replace('/', '+')}-{upstream.commit}.tar.gz"


def archive_url(upstream: UpstreamFiles) -> str:
    return f"https://github.com/{upstream.repo}/archive/{upstream.commit}.tar.gz"


def tree_digest(root: Path, paths: Iterable[str]) -> str:
    """sha256 over (path, executable bit, content sha256) of every file under ``paths``, sorted: independent of
    the archive format, compression and timestamps."""
    lines = []
    for top in paths:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() or p.is_symlink())
        if not base.exists():
            raise FetchError(f"{root.name}: upstream archive has no {top}")
        for path in files:
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                lines.append(f"{relative}\0link\0{path.readlink()}\n")
                continue
            mode = "x" if path.stat().st_mode & 0o111 else "-"
            lines.append(f"{relative}\0{mode}\0{sha256_of(path)}\n")
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


class UpstreamUnavailable(NotBuildableHere):
    """The commit archive is neither in the source cache nor downloadable from here."""


def fetch_archive(upstream: UpstreamFiles, who: str, cache_dir: Path | None = None) -> Path:
    """The cached archive of the commit (downloaded from the forge when absent); checked after unpacking."""
    path = cache_dir_for_sdists(cache_dir) / archive_name(upstream)
    if not path.is_file():
        try:
            _download_unchecked(archive_url(upstream), path, who)
        except FetchError as error:
            raise UpstreamUnavailable(
                f"{who}: {', '.join(upstream.paths)} of {upstream.repo}@{upstream.commit[:12]} (the sdist lacks them) "
                f"is not in the source cache as {path} and cannot be downloaded here: "
                f"{str(error).removeprefix(who + ': ')}",
                tip="build once where the forge is reachable, or put it there from a clone: `python -m "
                f"scripts.cache_upstream CLONE {upstream.repo} {upstream.commit} {' '.join(upstream.paths)}`",
            ) from None
    return path


def _unpack(archive: Path, into: Path, who: str) -> Path:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as error:
        raise FetchError(f"{who}: cannot unpack {archive}: {error}") from None
    tops = list(into.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise FetchError(f"{who}: {archive.name} should hold one top-level directory")
    return tops[0]


def overlay_upstream(job: Job, source_root: Path, *, cache_dir: Path | None = None) -> list[str]:
    """Copy the pinned upstream files into the unpacked sdist; returns what was added, for the job log."""
    upstream = job.sdist.upstream
    if upstream is None:
        return []
    who = job.identifier
    archive = fetch_archive(upstream, who, cache_dir)
    with tempfile.TemporaryDirectory(prefix="wheelwright-upstream-") as tmp:
        tree = _unpack(archive, Path(tmp), who)
        digest = tree_digest(tree, upstream.paths)
        if digest != upstream.tree_digest:
            archive.unlink()  # a wrong archive is never reused; the next run downloads again
            raise FetchError(
                f"{who}: {', '.join(upstream.paths)} of {upstream.repo}@{upstream.commit[:12]} have tree "
                f"digest {digest}, matrix.yaml pins {upstream.tree_digest}"
            )
        if (tree / "setup.py").read_bytes() != (source_root / "setup.py").read_bytes():
            raise FetchError(
                f"{who}: setup.py of {upstream.repo}@{upstream.commit[:12]} differs from the sdist's; "
                "the commit is not the release the sdist was made from"
            )
        added = []
        for path in upstream.paths:
            if (source_root / path).exists():
                raise FetchError(f"{who}: the sdist already holds {path}; drop the upstream pin for {job.version}")
            shutil.copytree(tree / path, source_root / path) if (tree / path).is_dir() else shutil.copy2(
                tree / path, source_root / path
            )
            added.append(f"upstream: {path} from {upstream.repo}@{upstream.commit[:12]} (tree digest checked)")
    for line in added:
        log.info("%s: %s", who, line)
    return added
