"""Fetch stage: a job's sdist from the package registry into a hash-checked cache, and its unpacking.

The registry is read through the PEP 691 JSON simple API only; nothing here runs the sdist's own code (the way
``pip download`` would, by calling setup.py, which imports torch).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tarfile
import tempfile
import urllib.error
from collections.abc import Iterator
from contextlib import AbstractContextManager
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from builder.core.errors import FetchError
from builder.core.files import atomic_file
from builder.core.hashing import sha256_of
from builder.core.http import BoundedResponse, Limits, PeerTooLarge, open_bounded
from builder.core.settings import cache_root, setting
from builder.plan.job import Job, Sdist

log = logging.getLogger(__name__)

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
PEP691_JSON = "application/vnd.pypi.simple.v1+json"
PAGE_CAP_BYTES = 64 << 20  # an index page larger than this is refused (the registry's torch page is ~4 MB)
_CHUNK = 1 << 16

# What each kind of read may take; docs/hostile-input.md ("Deadlines and caps") says why these numbers.
INDEX_PAGE = Limits(connect=10, idle=30, total=120, cap=PAGE_CAP_BYTES)
SDIST = Limits(connect=10, idle=30, total=300, cap=64 << 20)
TORCH_WHEEL = Limits(connect=10, idle=60, total=3600, cap=8 << 30)
METADATA = Limits(connect=10, idle=30, total=60, cap=16 << 20)  # one wheel's METADATA, or a range of the wheel


def cache_dir_for_sdists(cache_dir: Path | None = None) -> Path:
    """``cache_dir`` if given, else ``$WHEELWRIGHT_CACHE/sdists``, else ``~/.cache/wheelwright/sdists``."""
    if cache_dir is not None:
        return Path(cache_dir)
    return cache_root() / "sdists"


def index_url() -> str:
    return setting("WHEELWRIGHT_INDEX_URL") or DEFAULT_INDEX_URL


def open_url(
    url: str, *, accept: str | None = None, limits: Limits = INDEX_PAGE
) -> AbstractContextManager[BoundedResponse]:
    """The one place this module touches the network (tests replace it to prove a cache hit stays offline); every
    read keeps to ``limits``."""
    headers = {"User-Agent": "wheelwright", **({"Accept": accept} if accept else {})}
    return open_bounded(url, limits, headers)


def fetch_sdist(
    job_or_sdist: Job | Sdist,
    package: str | None = None,
    *,
    cache_dir: Path | None = None,
    index: str | None = None,
) -> Path:
    """The cached, hash-checked sdist of a job (or of an Sdist of ``package``); downloads it only when needed."""
    sdist, package, who = _target(job_or_sdist, package)
    path = cache_dir_for_sdists(cache_dir) / sdist.filename
    if path.is_file():
        actual = sha256_of(path)
        if actual == sdist.sha256:
            log.debug("%s: cache hit %s", who, path)
            return path
        log.warning(
            "%s: cached %s has sha256 %s, not the pinned %s; downloading again", who, path, actual, sdist.sha256
        )
    url = sdist.url or find_file_url(sdist, package, index=index, who=who)
    _download(url, path, sdist.sha256, who)
    log.info("%s: fetched %s", who, path)
    return path


def _target(job_or_sdist: Job | Sdist, package: str | None) -> tuple[Sdist, str, str]:
    """The sdist, its project name, and how errors name the job."""
    if isinstance(job_or_sdist, Job):
        job = job_or_sdist
        return job.sdist, job.package, f"{job.identifier} ({job.package} {job.version})"
    if package is None:
        raise TypeError("fetch_sdist(Sdist, package): the package name is needed to look the file up")
    return job_or_sdist, package, package


def find_file_url(sdist: Sdist, package: str, *, index: str | None = None, who: str | None = None) -> str:
    """The download URL of ``sdist.filename`` from the project's PEP 691 JSON page on the index."""
    who = who or package
    page_url = urljoin(with_slash(index or index_url()), canonicalize_name(package) + "/")
    files = _project_files(page_url, who)
    for entry in files:
        if entry.get("filename") == sdist.filename:
            listed = (entry.get("hashes") or {}).get("sha256")
            if listed and listed != sdist.sha256:
                raise FetchError(
                    f"{who}: the index lists {sdist.filename} with sha256 {listed}, "
                    f"but matrix.yaml pins {sdist.sha256}",
                    tip="check the sha256 pin in matrix.yaml against the registry",
                )
            return urljoin(page_url, str(entry["url"]))
    sdists = sorted(e.get("filename", "") for e in files if str(e.get("filename", "")).endswith((".tar.gz", ".zip")))
    raise FetchError(
        f"{who}: {sdist.filename} is not listed on {page_url} (sdists there: {', '.join(sdists[-5:]) or 'none'})",
        tip="check the version in matrix.yaml, or give the sdist's url explicitly",
    )


def with_slash(url: str) -> str:
    """An index root as urljoin needs it: ending in a slash."""
    return url if url.endswith("/") else url + "/"


def _project_files(page_url: str, who: str) -> list[dict[str, Any]]:
    try:
        with open_url(page_url, accept=PEP691_JSON) as response:
            content_type = response.headers.get_content_type()
            body = response.read()
    except (urllib.error.URLError, OSError) as error:
        raise FetchError(f"{who}: cannot read the index page {page_url}: {error}") from None
    if content_type != PEP691_JSON:
        raise FetchError(f"{who}: {page_url} answered {content_type}, not the PEP 691 JSON simple API ({PEP691_JSON})")
    try:
        files = json.loads(body)["files"]
    except (ValueError, KeyError, TypeError) as error:
        raise FetchError(f"{who}: {page_url} is not a PEP 691 project page: {error!r}") from None
    if not isinstance(files, list):
        raise FetchError(f"{who}: {page_url}: 'files' is not a list")
    return files


class IndexUnreachable(FetchError):
    """The index's host did not answer at all (no name, no route, refused, timed out)."""


def index_files(page_url: str, who: str) -> list[dict[str, Any]]:
    """The files a project page lists, as PEP 691 entries (filename, url, hashes), from a PEP 691 JSON page or a
    PEP 503 HTML one: PyTorch's own index and most mirrors of it serve HTML only."""
    accept = f"{PEP691_JSON}, text/html;q=0.1"
    try:
        with open_url(page_url, accept=accept) as response:
            content_type = response.headers.get_content_type()
            body = response.read(PAGE_CAP_BYTES + 1)
    except urllib.error.HTTPError as error:
        if error.code == 404:  # the index answered: it has no such project, so it lists no file of it
            return []
        raise FetchError(f"{who}: cannot read the index page {page_url}: {error}") from None
    except PeerTooLarge as error:  # it answered, too much: no reason to ask another index instead
        raise FetchError(f"{who}: cannot read the index page {page_url}: {error}") from None
    except (urllib.error.URLError, OSError) as error:
        raise IndexUnreachable(f"{who}: cannot read the index page {page_url}: {error}") from None
    if len(body) > PAGE_CAP_BYTES:
        raise FetchError(f"{who}: {page_url} is larger than {PAGE_CAP_BYTES >> 20} MiB; refusing to read it")
    if content_type == PEP691_JSON:
        try:
            files = json.loads(body)["files"]
        except (ValueError, KeyError, TypeError) as error:
            raise FetchError(f"{who}: {page_url} is not a PEP 691 project page: {error!r}") from None
        if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
            raise FetchError(f"{who}: {page_url}: 'files' is not a list of tables")
        return [{**f, "url": urljoin(page_url, str(f.get("url", "")))} for f in files]
    if content_type != "text/html":
        raise FetchError(f"{who}: {page_url} answered {content_type}, not a PEP 503 or PEP 691 project page")
    return _Anchors.files(body.decode("utf-8", errors="replace"), page_url)


class _Anchors(HTMLParser):
    """A PEP 503 page's anchors: the text is the filename, the URL's fragment may carry ``sha256=<hex>``."""

    def __init__(self, page_url: str) -> None:
        super().__init__()
        self.page_url = page_url
        self.found: list[dict[str, Any]] = []
        self._href: str | None = None

    @classmethod
    def files(cls, text: str, page_url: str) -> list[dict[str, Any]]:
        parser = cls(page_url)
        parser.feed(text)
        parser.close()
        return parser.found

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._href = None

    def handle_data(self, data: str) -> None:
        if self._href is None or not data.strip():
            return
        url = urljoin(self.page_url, self._href)
        parts = urlsplit(url)
        name, _, value = parts.fragment.partition("=")
        hashes = {name: value} if name == "sha256" and value else {}
        url = parts._replace(fragment="").geturl()
        self.found.append({"filename": unquote(data.strip()), "url": url, "hashes": hashes})


def download_checked(url: str, path: Path, expected: str | None, who: str, limits: Limits = TORCH_WHEEL) -> str:
    """Download ``url`` to ``path`` (atomically); the sha256 must be ``expected`` when one is given. Returns it."""
    with atomic_file(path) as out:
        actual = _stream(url, out, who, limits)
        if expected is not None and actual != expected:
            raise FetchError(f"{who}: {path.name} from {url} has sha256 {actual}, but its index lists {expected}")
    return actual


def _download(url: str, path: Path, expected: str | None, who: str) -> None:
    """Stream ``url`` into a temporary file beside ``path``, check its hash, then rename it into place."""
    with atomic_file(path) as out:
        actual = _stream(url, out, who, SDIST)
        if expected is not None and actual != expected:
            raise FetchError(
                f"{who}: {path.name} from {url} has sha256 {actual}, expected {expected}",
                tip="the upload changed or the pin in matrix.yaml is wrong; check it against the registry",
            )


def _download_unchecked(url: str, path: Path, who: str) -> None:
    """For archives checked by their contents after unpacking (builder/steps/upstream.py), not by their bytes."""
    _download(url, path, None, who)


def _stream(url: str, out: IO[bytes], who: str, limits: Limits) -> str:
    digest = hashlib.sha256()
    try:
        with open_url(url, limits=limits) as response:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as error:
        raise FetchError(f"{who}: download of {url} failed: {error}") from None
    return digest.hexdigest()


def unpack_sdist(sdist_path: Path, dest: Path) -> Path:
    """Unpack into ``dest`` and return the source root (the sdist's one top-level directory).

    Each call gives a pristine tree: a previous unpacking of the same sdist in ``dest`` is replaced, because
    recipes edit the tree in place and must start from upstream's files.
    """
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".unpack-"))
    try:
        _extract(sdist_path, staging)
        top = [entry for entry in staging.iterdir()]
        if len(top) != 1 or not top[0].is_dir():
            raise FetchError(
                f"{sdist_path.name}: expected one top-level directory, found {sorted(p.name for p in top)}"
            )
        root = dest / top[0].name
        if root.exists():
            shutil.rmtree(root)
        top[0].rename(root)
        return root
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(sdist_path: Path, into: Path) -> None:
    try:
        with tarfile.open(sdist_path) as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(into, filter="data")
            else:
                archive.extractall(into, members=_plain_members(archive))
    except (tarfile.TarError, OSError) as error:
        raise FetchError(f"{sdist_path}: cannot unpack: {error}") from None


def _plain_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members of an sdist for a Python whose tarfile has no 'data' filter (3.11.2, which a builder image
    built from Debian bookworm's source runs on): stricter than that filter, since an sdist needs no links or
    special files. Each is a regular file or directory with a relative name that stays inside the destination;
    modes lose setuid, setgid, sticky and group/other write bits, and owners are not restored."""
    for member in archive:
        parts = PurePosixPath(member.name).parts
        if member.name.startswith("/") or ".." in parts:
            raise tarfile.TarError(f"member {member.name!r} would land outside the destination")
        if not (member.isfile() or member.isdir()):
            raise tarfile.TarError(f"member {member.name!r} is a link or special file, which an sdist needs not")
        member.mode &= 0o755
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        yield member
