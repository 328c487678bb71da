"""One device-code cache for the farm: the stage cache's entries (stagecache.py) shared through an S3 bucket under
their toolkit and content, never under a group, so every group of one toolkit reuses what any of them compiled.

Before a compile the job pulls the entries of its package version and archs under its toolkit; after a compile on
the main branch it pushes the ones it used or made that the bucket lacks, each one object written only if absent
(two runners writing one key leave the first's, and both wrote the same bytes), then keeps the bucket under its
size bound, least recently used first. An entry is a zip of its record and its blobs, each blob named by its
sha256: a reader checks every one and drops an entry that does not match. A run not on main never writes: a
poisoned object would land in every wheel.
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.errors import ConfigError
from builder.core.settings import setting
from builder.steps.bucket import Bucket  # the store it speaks to
from builder.steps.programs import stagecache

log = logging.getLogger(__name__)

REMOTE_ENV = "WHEELWRIGHT_OBJCACHE_REMOTE"  # s3://bucket/prefix
ENDPOINT_ENV = "WHEELWRIGHT_OBJCACHE_S3_ENDPOINT"  # another S3 API endpoint (a loopback server in tests)
MAX_GB_ENV = "WHEELWRIGHT_OBJCACHE_MAX_GB"  # the bucket prefix's size bound
WRITE_ENV = "WHEELWRIGHT_OBJCACHE_WRITE"  # "1": a run outside GitHub Actions may write (a maintainer's machine)
MAIN = "refs/heads/main"
_WRITING_EVENTS = {"push", "schedule", "workflow_dispatch"}


class SharedCacheError(ConfigError):
    """The shared cache's settings are wrong (a bucket's failures are only logged: a cache never fails a build)."""


def may_write(environ: Mapping[str, str] = os.environ) -> bool:
    """Only runs on main write: on GitHub Actions (its variables in ``environ``) a push, schedule or manual run of
    refs/heads/main; elsewhere only where WHEELWRIGHT_OBJCACHE_WRITE=1 says so."""
    if environ.get("GITHUB_ACTIONS") == "true":
        return environ.get("GITHUB_REF") == MAIN and environ.get("GITHUB_EVENT_NAME") in _WRITING_EVENTS
    return setting(WRITE_ENV) == "1"


@dataclass(frozen=True, kw_only=True)
class Scope:
    """What one job's compile can use: its toolkit (the digests of cicc and ptxas), package version and archs."""

    toolkit: str
    package: str
    version: str
    archs: tuple[str, ...]

    def folder(self, arch: str) -> str:
        return f"{self.toolkit}/{self.package}-{self.version}/{arch}/"


def toolkit_id(cuda: str, root: Path, programs: stagecache.ProgramDigests) -> str:
    """``cuda-13.0-<12 hex>``: the version for people, the programs' bytes for the cache (two builds of one CUDA
    version with other cicc bytes never share)."""
    files = [root / "nvvm" / "bin" / "cicc", root / "bin" / "ptxas"]
    joined = ":".join(programs.file(str(path)) for path in files if path.is_file())
    return f"cuda-{cuda}-{stagecache.digest_bytes(joined.encode())[:12]}"


def pack(cache: stagecache.StageCache, key: str) -> bytes | None:
    """An entry and its blobs as one zip, or None when the local cache lacks it."""
    entry = cache.lookup(key)
    if entry is None:
        return None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("entry.json", json.dumps({"key": key, **entry}, sort_keys=True))
        for digest in sorted(set(entry["outputs"].values())):
            archive.write(cache.blob(digest), f"objects/{digest}")
    return buffer.getvalue()


def unpack(cache: stagecache.StageCache, key: str, data: bytes) -> bool:
    """Store a pulled entry locally if it is whole and every blob has the bytes its name says; False otherwise."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entry: dict[str, Any] = json.loads(archive.read("entry.json"))
            outputs = entry.get("outputs")
            if entry.get("key") != key or not isinstance(outputs, dict):
                return False
            blobs = {digest: archive.read(f"objects/{digest}") for digest in set(outputs.values())}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError):
        return False
    if any(stagecache.digest_bytes(data) != digest for digest, data in blobs.items()):
        return False
    for digest, blob in blobs.items():
        _write_atomic(cache.blob(digest), blob)
    del entry["key"]
    _write_atomic(cache.entry_path(key), json.dumps(entry, sort_keys=True).encode())
    return True


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


@dataclass(kw_only=True)
class Report:
    """What one pull or push did, for the job's log."""

    pulled: int = 0
    rejected: list[str] = field(default_factory=list)
    pushed: int = 0
    present: int = 0
    touched: int = 0
    evicted: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{self.pulled} pulled"] if self.pulled or not self.pushed else []
        parts += [f"{self.pushed} pushed ({self.present} already there)"] if self.pushed or self.present else []
        parts += [f"{self.touched} touched"] if self.touched else []
        parts += [f"{len(self.rejected)} rejected (bytes not as named)"] if self.rejected else []
        parts += [f"{len(self.evicted)} evicted to stay under the bound"] if self.evicted else []
        return "shared object cache: " + ", ".join(parts or ["nothing to do"])


class SharedCache:
    """The bucket's ``prefix`` as the farm's stage cache; ``local`` is the job's own (stagecache.StageCache)."""

    def __init__(self, bucket: Bucket, prefix: str, local: stagecache.StageCache, *, writable: bool,
                 max_bytes: int) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.local = local
        self.writable = writable
        self.max_bytes = max_bytes

    def _name(self, scope: Scope, arch: str, key: str) -> str:
        return f"{self.prefix}{scope.folder(arch)}{key}.zip"

    def pull(self, scope: Scope) -> Report:
        """Every entry of the scope's archs the local cache lacks, checked before it is stored."""
        report = Report()
        for arch in scope.archs:
            for stored in self.bucket.list(self.prefix + scope.folder(arch)):
                key = Path(stored.key).name.removesuffix(".zip")
                if self.local.lookup(key) is not None:
                    continue
                data = self.bucket.get(stored.key)
                if data is not None and unpack(self.local, key, data):
                    report.pulled += 1
                else:
                    report.rejected.append(stored.key)
        return report

    def push(self, scope: Scope, events: Iterable[Mapping[str, Any]]) -> Report:
        """After a compile: each device step the build used or made, written if the bucket lacks it (a hit on one
        it has is touched: recently used), then the bound kept. Nothing at all unless this run may write."""
        report = Report()
        if not self.writable:
            return report
        used = {(str(e["arch"]), str(e["key"])) for e in events if "stage" in e and e.get("result") != "failed"}
        for arch, key in sorted(used):
            name = self._name(scope, arch, key)
            data = pack(self.local, key)
            if data is None:
                continue
            if self.bucket.put_new(name, data):
                report.pushed += 1
            else:
                report.present += 1
                self.bucket.touch(name)
                report.touched += 1
        report.evicted = self.evict()
        return report

    def evict(self) -> list[str]:
        """Delete the least recently written or touched objects until the prefix is within its bound."""
        stored = sorted(self.bucket.list(self.prefix), key=lambda o: (o.modified, o.key))
        total = sum(o.size for o in stored)
        evicted = []
        for item in stored:
            if total <= self.max_bytes:
                break
            self.bucket.delete(item.key)
            total -= item.size
            evicted.append(item.key)
        return evicted


def split_remote(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix)."""
    if not url.startswith("s3://") or not url[5:].split("/", 1)[0]:
        raise SharedCacheError(f"{REMOTE_ENV}={url!r}: not an s3://bucket/prefix URL",
                               tip="set it to s3://BUCKET/PREFIX, or unset it to use the local cache alone")
    bucket, _, prefix = url[5:].partition("/")
    return bucket, prefix


def max_bytes() -> int:
    text = setting(MAX_GB_ENV) or ""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise SharedCacheError(f"{MAX_GB_ENV}={text!r}: not a positive number of GB")
    return int(value * 2**30)


def from_settings(local: stagecache.StageCache) -> SharedCache | None:
    """The shared cache WHEELWRIGHT_OBJCACHE_REMOTE names, or None when it names none."""
    url = setting(REMOTE_ENV)
    if not url:
        return None
    from builder.steps.s3bucket import S3Bucket  # boto3, only where a bucket is configured

    name, prefix = split_remote(url)
    bucket = S3Bucket(name, endpoint_url=setting(ENDPOINT_ENV))
    return SharedCache(bucket, prefix, local, writable=may_write(), max_bytes=max_bytes())


def events_of(path: Path) -> list[dict[str, Any]]:
    """A build's own object-cache events (compilation.py's Workspace.events), skipping a torn last line."""
    if not path.is_file():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


def archs_of(events: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted({str(e["arch"]) for e in events if "stage" in e}))
