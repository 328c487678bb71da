"""The publish stage: mirror the site into an object store so that readers always see a consistent index.

Plan first, then apply. The plan compares each file with its published object by what the store computed itself:
the SHA-256 checksum it kept at upload, else a single-part ETag (the MD5 of the bytes); only an object with neither
is downloaded and hashed. What the bucket says about itself (an object's metadata, a manifest object) is never
trusted: anyone who could write the objects could write that too. A published wheel is never replaced with
different bytes. Applying uploads tier by tier (wheels, then the pages that link them, then the lists of pages),
under a lock object created with a conditional write, so a publish that dies midway leaves every link resolving."""

from __future__ import annotations

import calendar
import dataclasses
import getpass
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from builder.core.errors import ConfigError, PublishError, one_line
from builder.core.hashing import FileIdentity, sha256_stream
from index_site import layout
from index_site.records import FileRecord, load_manifest
from index_site.tree import open_site_file, site_files

log = logging.getLogger(__name__)

STATE_DIR = ".wheelwright/"  # under the prefix: the lock and the manifest of published objects


class AlreadyExists(Exception):
    """A create-only write found the key taken."""


@dataclass(frozen=True, kw_only=True)
class RemoteObject:
    key: str
    etag: str
    size: int
    checksum_sha256: str | None = None  # hex: the SHA-256 the store computed over the whole object at upload
    md5: str | None = None  # hex: the ETag, where the store says it is the MD5 of the bytes (single part, no KMS)
    sha256: str | None = None  # hex: what publish established the bytes hash to (None: unknown, or not ours)


class ObjectStore(Protocol):
    """The few operations publish needs; S3Store is the real one, tests may wrap it."""

    def list(self, prefix: str) -> dict[str, RemoteObject]: ...
    def head(self, key: str) -> RemoteObject | None: ...
    def get(self, key: str) -> bytes | None: ...
    def put(
        self,
        key: str,
        body: bytes | Path,
        *,
        content_type: str,
        cache_control: str,
        sha256: str,
        create_only: bool = False,
    ) -> str: ...
    def delete(self, key: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LocalObject:
    key: str
    path: Path
    sha256: str
    size: int
    kind: layout.Kind


@dataclass(frozen=True, kw_only=True)
class Conflict:
    key: str
    local_sha256: str
    remote_sha256: str | None


@dataclass(frozen=True, kw_only=True)
class PublishPlan:
    uploads: tuple[LocalObject, ...]  # in publish order
    unchanged: tuple[LocalObject, ...]
    conflicts: tuple[Conflict, ...]  # published immutable objects whose bytes differ: never overwritten
    delisted: tuple[str, ...]  # published wheels the new pages would stop linking


@dataclass(frozen=True, kw_only=True)
class PublishReport:
    plan: PublishPlan
    uploaded: tuple[str, ...]
    dry_run: bool


def normalise_prefix(prefix: str) -> str:
    parts = [part for part in prefix.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise ConfigError(f"--prefix {prefix!r}: '.' and '..' are not allowed in a key prefix")
    return "/".join(parts) + "/" if parts else ""


def local_objects(site: Path, prefix: str) -> list[LocalObject]:
    """Every file the index wrote into the site (its manifest) as the object it becomes, directory index pages also
    under their directory key. Anything else in the folder (a ledger, dist/, a stray file) is never uploaded, and a
    file whose identity moved since the index recorded it is hashed again and must still have the recorded bytes."""
    if not (site / layout.SITE_MARKER).is_file():
        copied = (site / "index.html").is_file()  # pages without their manifest: a copy that left out dot-files
        raise ConfigError(
            f"{site}: not a wheelwright site (no {layout.SITE_MARKER})",
            tip="copy the site with its dot-files (upload-artifact: include-hidden-files: true)"
            if copied
            else "run `wheelwright index` first",
        )
    manifest = load_manifest(site)
    present = set(site_files(site))
    if present and not manifest:
        raise ConfigError(
            f"{site}: its manifest records no file (indexed by an older wheelwright?)",
            tip="run `wheelwright index` again before publishing",
        )
    missing = sorted(set(manifest) - present)
    if missing:
        raise ConfigError(
            f"{site}: {len(missing)} file(s) the index wrote are gone or not regular files: {', '.join(missing[:5])}",
            tip="run `wheelwright index` again before publishing",
        )
    for stray in sorted(present - set(manifest))[:20]:
        log.warning("%s: not written by the index; not published", stray)
    objects = []
    for relative in sorted(manifest):
        path, record = site / relative, manifest[relative]
        _verify(site, relative, record)
        kind = layout.kind_of(relative)
        objects.append(LocalObject(key=prefix + relative, path=path, sha256=record.sha256, size=record.size, kind=kind))
        directory = layout.directory_index(relative)
        if directory is not None and (directory or prefix):
            # Object stores resolve no directory URLs; store the page under the directory's own key too.
            objects.append(
                LocalObject(key=prefix + directory, path=path, sha256=record.sha256, size=record.size, kind=kind)
            )
    return objects


def _verify(site: Path, relative: str, record: FileRecord) -> None:
    """Raise unless the site file still holds the bytes the index recorded (re-hashed when its identity moved:
    a wheel hard-linked into dist/ changes whenever its twin there is rewritten in place)."""
    with os.fdopen(open_site_file(site, relative), "rb") as file:
        if FileIdentity.of(os.fstat(file.fileno())) == record.identity:
            return
        if sha256_stream(file) == record.sha256:
            return
    raise PublishError(
        f"{site / relative}: its bytes changed since the index recorded them "
        f"(sha256 no longer {record.sha256[:16]}...)",
        tip="run `wheelwright index` again: its pages must state the hash of what is uploaded",
    )


def remote_state(
    store: ObjectStore, prefix: str, local: Sequence[LocalObject], *, jobs: int = 8
) -> dict[str, RemoteObject]:
    """What is published under ``prefix``; each object a local one would replace carries the sha256 its bytes were
    established to have (see :func:`established`), or None where they are known to differ (another size)."""
    listing = store.list(prefix)
    wanted = {item.key: item for item in local}
    state = dict(listing)
    same_size = [wanted[key] for key, remote in listing.items() if key in wanted and remote.size == wanted[key].size]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for item, remote in zip(same_size, pool.map(lambda item: _look_up(store, item), same_size), strict=True):
            if remote is not None:
                state[item.key] = remote
    log.info("remote %s: %d objects, %d looked up", prefix or "(bucket root)", len(listing), len(same_size))
    return state


def _look_up(store: ObjectStore, item: LocalObject) -> RemoteObject | None:
    head = store.head(item.key)
    return None if head is None else established(store, head, item)


def established(store: ObjectStore, remote: RemoteObject, local: LocalObject) -> RemoteObject:
    """``remote`` with the sha256 of its bytes, as far as the store's own checksums show it: its SHA-256 checksum;
    else its MD5 ETag, which names the local bytes' sha256 when it is their MD5; else its bytes, downloaded and
    hashed. None where they differ from the local file's and nothing says what they are."""
    if remote.size != local.size:
        return dataclasses.replace(remote, sha256=None)
    if remote.checksum_sha256 is not None:
        return dataclasses.replace(remote, sha256=remote.checksum_sha256)
    if remote.md5 is not None:
        same = _md5_of(local.path) == remote.md5
        return dataclasses.replace(remote, sha256=local.sha256 if same else None)
    return _hashed(store, remote)


def _md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def plan_publish(local: Sequence[LocalObject], remote: Mapping[str, RemoteObject], prefix: str) -> PublishPlan:
    uploads, unchanged, conflicts = [], [], []
    for item in local:
        published = remote.get(item.key)
        if published is None:
            uploads.append(item)
        elif published.sha256 == item.sha256:
            unchanged.append(item)
        elif item.kind.immutable:
            conflicts.append(Conflict(key=item.key, local_sha256=item.sha256, remote_sha256=published.sha256))
        else:
            uploads.append(item)
    local_keys = {item.key for item in local}
    delisted = sorted(
        key for key in remote if key.endswith(".whl") and key.startswith(prefix + "whl/") and key not in local_keys
    )
    uploads.sort(key=lambda item: (item.kind.tier, item.key))
    return PublishPlan(
        uploads=tuple(uploads), unchanged=tuple(unchanged), conflicts=tuple(conflicts), delisted=tuple(delisted)
    )


def check_plan(plan: PublishPlan, *, allow_delist: bool) -> None:
    """Raise PublishError if applying ``plan`` would overwrite a published file or silently drop wheels."""
    if plan.conflicts:
        lines = [
            one_line(f"{c.key}: published sha256 {c.remote_sha256 or 'unknown'}, local {c.local_sha256}")
            for c in plan.conflicts
        ]
        raise PublishError(
            f"refusing to overwrite {len(plan.conflicts)} published file(s) with different bytes:\n" + "\n".join(lines),
            tip="installers cache wheels by filename; publish a new version (or build number) instead",
        )
    if plan.delisted and not allow_delist:
        # the bucket's keys, as it lists them: one line each, whatever they hold
        shown = "\n".join(map(one_line, plan.delisted[:10])) + ("\n..." if len(plan.delisted) > 10 else "")
        raise PublishError(
            f"{len(plan.delisted)} published wheel(s) are not in the local site; "
            f"the new pages would stop listing them:\n{shown}",
            tip="put those wheels in dist/ and index again, or pass --allow-delist to drop them from the pages",
        )


def publish(
    site: Path,
    store: ObjectStore,
    *,
    prefix: str = "",
    dry_run: bool = False,
    break_lock: bool = False,
    allow_delist: bool = False,
    jobs: int = 8,
    on_upload: Callable[[LocalObject], None] | None = None,
) -> PublishReport:
    """Publish ``site`` under ``prefix``: plan, check, then upload only what changed, in tier order."""
    prefix = normalise_prefix(prefix)
    local = local_objects(site, prefix)
    if dry_run:
        plan = plan_publish(local, remote_state(store, prefix, local, jobs=jobs), prefix)
        return PublishReport(plan=plan, uploaded=(), dry_run=True)
    with publish_lock(store, prefix + STATE_DIR + "lock", break_lock=break_lock):
        remote = remote_state(store, prefix, local, jobs=jobs)
        plan = plan_publish(local, remote, prefix)
        check_plan(plan, allow_delist=allow_delist)
        _upload(store, plan.uploads, jobs=jobs, on_upload=on_upload)
    return PublishReport(plan=plan, uploaded=tuple(item.key for item in plan.uploads), dry_run=False)


@contextmanager
def publish_lock(store: ObjectStore, key: str, *, break_lock: bool) -> Iterator[None]:
    """Hold the lock object ``key`` (created only if absent) for the duration of the block.

    A lock left by a publish that provably died (same host, its process gone) is taken over with a warning. Any
    other lock is broken only with ``break_lock`` and only once it is older than LOCK_EXPIRY_SECONDS: a publish on
    another machine cannot be seen to have died, and one that is alive must not lose its lock."""
    token = uuid.uuid4().hex
    holder = {
        "owner": f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": _process_start(os.getpid()),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "since_epoch": time.time(),
        "token": token,
    }
    _HELD.add(token)
    try:
        _acquire(store, key, holder, break_lock=break_lock)
        try:
            yield
        finally:
            _release_lock(store, key, token)
    finally:
        _HELD.discard(token)


LOCK_EXPIRY_SECONDS = 3600  # --break-lock takes a lock this old even when its holder cannot be seen to be gone
_HELD: set[str] = set()  # tokens of the locks this process holds now (threads may publish concurrently)


def _acquire(store: ObjectStore, key: str, holder: dict[str, Any], *, break_lock: bool) -> None:
    for _attempt in range(3):
        try:
            _put_json(store, key, holder, create_only=True)
            return
        except AlreadyExists:
            pass
        current = _read_lock(store, key)
        if current is None:
            continue  # released meanwhile: try again
        gone, why = _holder_gone(current)
        expired = _lock_age(current) > LOCK_EXPIRY_SECONDS
        if not (gone or (break_lock and expired)):
            raise PublishError(
                f"another publish holds the lock {key} ({_describe(current)}){why}",
                tip=_lock_tip(current, break_lock),
            )
        reason = why.strip(" ;") or "expired"
        log.warning("taking over the publish lock %s from %s: %s", key, _describe(current), reason)
        _delete_if_unchanged(store, key, current)
    raise PublishError(f"could not take the publish lock {key}: it keeps changing hands", tip="try again later")


def _holder_gone(holder: dict[str, Any]) -> tuple[bool, str]:
    """Whether the holder is provably no longer running, and why (or why that cannot be known)."""
    host, pid = holder.get("host"), holder.get("pid")
    if host != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return False, "; it is not on this machine, so whether it still runs cannot be checked"
    if pid == os.getpid():
        alive = holder.get("token") in _HELD
    else:
        alive = _pid_alive(pid) and _process_start(pid) == holder.get("process_start")
    return (False, "; its process is still running") if alive else (True, f"; process {pid} is gone")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_start(pid: int) -> int | None:
    """When the process started (clock ticks since boot), so a reused pid is not mistaken for the holder."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _lock_age(holder: dict[str, Any]) -> float:
    since = holder.get("since_epoch")
    if not isinstance(since, (int, float)):
        try:
            since = calendar.timegm(time.strptime(str(holder.get("since")), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return float("inf")  # an unreadable lock says nothing about a live holder
    return time.time() - since


def _lock_tip(holder: dict[str, Any], break_lock: bool) -> str:
    age = _lock_age(holder)
    limit = f"{LOCK_EXPIRY_SECONDS // 60} minutes"
    if break_lock:
        return (
            f"the lock is {age / 60:.0f} minutes old; --break-lock takes it only after {limit}, "
            "or once its process is gone"
        )
    return f"wait for it to finish; if it died on another machine, rerun with --break-lock once the lock is {limit} old"


def _read_lock(store: ObjectStore, key: str) -> dict[str, Any] | None:
    raw = store.get(key)
    if raw is None:
        return None
    try:
        holder = json.loads(raw)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if "owner" in holder and "since" in holder:
        return f"{holder['owner']} since {holder['since']}"
    return "an unreadable lock object"


def _delete_if_unchanged(store: ObjectStore, key: str, holder: dict[str, Any]) -> None:
    if _read_lock(store, key) == holder:  # another publisher may have broken and taken it meanwhile
        store.delete(key)


def _upload(
    store: ObjectStore, uploads: Iterable[LocalObject], *, jobs: int, on_upload: Callable[[LocalObject], None] | None
) -> dict[str, str]:
    """Upload tier by tier: nothing of a tier starts before everything of the tier below is stored."""
    etags: dict[str, str] = {}
    by_tier: dict[layout.Tier, list[LocalObject]] = {}
    for item in uploads:
        by_tier.setdefault(item.kind.tier, []).append(item)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for tier in sorted(by_tier):
            for item, etag in zip(by_tier[tier], pool.map(lambda item: _put(store, item), by_tier[tier]), strict=True):
                etags[item.key] = etag
                if on_upload is not None:
                    on_upload(item)
    return etags


def _put(store: ObjectStore, item: LocalObject) -> str:
    options = {"content_type": item.kind.content_type, "cache_control": item.kind.cache_control, "sha256": item.sha256}
    try:
        return store.put(item.key, item.path, create_only=item.kind.immutable, **options)
    except AlreadyExists:
        # Another publisher stored this name since we looked: fine if the bytes are the same, refused otherwise.
        published = store.head(item.key)
        if published is not None and established(store, published, item).sha256 == item.sha256:
            return published.etag
        raise PublishError(
            f"{item.key} appeared in the bucket with different bytes while publishing",
            tip="another publisher uploaded a different build under this name; rebuild with a new version",
        ) from None


def _hashed(store: ObjectStore, remote: RemoteObject) -> RemoteObject:
    """An object the store keeps no checksum of (put there by another tool, or in parts): hash its bytes."""
    body = store.get(remote.key) or b""
    return dataclasses.replace(remote, sha256=hashlib.sha256(body).hexdigest())


def _put_json(store: ObjectStore, key: str, document: object, *, create_only: bool = False) -> str:
    body = json.dumps(document, separators=(",", ":")).encode()
    sha256 = hashlib.sha256(body).hexdigest()
    return store.put(
        key, body, content_type="application/json", cache_control="no-store", sha256=sha256, create_only=create_only
    )


def _release_lock(store: ObjectStore, key: str, token: str) -> None:
    try:
        raw = store.get(key)
        if raw is not None and json.loads(raw).get("token") == token:
            store.delete(key)
    except (PublishError, ValueError) as error:  # the publish's own error, if any, matters more
        log.warning("could not release the publish lock %s: %s", key, error)
