"""Publish decisions against an in-memory object store: what is uploaded, in which order, what is refused, and
how the lock behaves. The real S3 API (moto's server over HTTP) is exercised in tests/integration."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from builder.core.errors import ConfigError, PublishError
from index_site import layout
from index_site.publish import (
    LOCK_EXPIRY_SECONDS,
    STATE_DIR,
    AlreadyExists,
    RemoteObject,
    _process_start,
    normalise_prefix,
    publish,
)
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel


class MemoryStore:
    """Just enough of an S3 bucket: ETags change on every write, create-only writes fail on existing keys, and an
    object put through the store keeps the SHA-256 checksum of its bytes (S3 with ChecksumAlgorithm=SHA256)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.puts: list[str] = []
        self.heads: list[str] = []
        self.gets: list[str] = []
        self._lock = threading.Lock()
        self._writes = 0

    def list(self, prefix: str) -> dict[str, RemoteObject]:
        return {
            k: RemoteObject(key=k, etag=o["etag"], size=len(o["body"]))
            for k, o in self.objects.items()
            if k.startswith(prefix)
        }

    def head(self, key: str) -> RemoteObject | None:
        self.heads.append(key)
        o = self.objects.get(key)
        if o is None:
            return None
        return RemoteObject(key=key, etag=o["etag"], size=len(o["body"]), checksum_sha256=o["checksum"], md5=o["md5"])

    def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        o = self.objects.get(key)
        return None if o is None else o["body"]

    def put(
        self, key: str, body, *, content_type: str, cache_control: str, sha256: str, create_only: bool = False
    ) -> str:
        data = body.read_bytes() if isinstance(body, Path) else body
        with self._lock:
            if create_only and key in self.objects:
                raise AlreadyExists(key)
            self._writes += 1
            etag = f'"{hashlib.md5(data).hexdigest()}-{self._writes}"'
            self.objects[key] = {
                "body": data,
                "content_type": content_type,
                "cache_control": cache_control,
                "sha256": sha256,
                "etag": etag,
                "checksum": hashlib.sha256(data).hexdigest(),
                "md5": None,
            }
            self.puts.append(key)
        return etag

    def plant(self, key: str, data: bytes, *, md5: bool = False) -> None:
        """An object another tool stored: no checksum; its ETag is the MD5 of its bytes only with ``md5``."""
        digest = hashlib.md5(data).hexdigest()
        etag = f'"{digest}"' if md5 else f'"{digest}-1"'
        self.objects[key] = {"body": data, "etag": etag, "checksum": None, "md5": digest if md5 else None, "sha256": ""}

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    for label in ("pt214cu130", "pt213cu130", "pt212cu126"):
        make_wheel(tmp_path / "dist", WheelSpec(label=label))
    build_site(tmp_path, tmp_path / "site", base_url="https://w.example")
    return tmp_path / "site"


def test_first_publish_uploads_everything_files_before_pages_before_lists(site: Path) -> None:
    store = MemoryStore()
    report = publish(site, store, prefix="idx", jobs=1)
    files = [p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert {f"idx/{f}" for f in files} <= set(report.uploaded)
    tiers = [
        layout.kind_of(_site_path(site, key.removeprefix("idx/"))).tier for key in store.puts if STATE_DIR not in key
    ]
    assert tiers == sorted(tiers) and tiers[0] == layout.Tier.FILE and tiers[-1] == layout.Tier.LANDING
    wheel = store.objects["idx/whl/pt213cu130/causal_conv1d-1.7.0+pt213cu130-cp311-cp311-linux_x86_64.whl"]
    assert (wheel["content_type"], wheel["cache_control"]) == (
        "application/octet-stream",
        "public, max-age=31536000, immutable",
    )
    assert wheel["sha256"] == hashlib.sha256(wheel["body"]).hexdigest()
    # Directory URLs exist as keys of their own, with the page's type (JSON under a JSON root).
    assert store.objects["idx/simple/causal-conv1d/"]["body"] == (site / "simple/causal-conv1d/index.html").read_bytes()
    assert store.objects["idx/json/causal-conv1d/"]["content_type"] == "application/vnd.pypi.simple.v1+json"
    assert store.objects["idx/"]["content_type"] == "text/html; charset=utf-8"
    assert f"idx/{STATE_DIR}lock" not in store.objects  # released


def _site_path(site: Path, key: str) -> str:
    """The site file a key holds: a directory key holds its index page."""
    if key == "" or key.endswith("/"):
        return next(key + name for name in ("index.html", "index.json") if (site / key / name).exists())
    return key


def test_republish_uploads_nothing_and_compares_by_the_stores_checksums(site: Path) -> None:
    store = MemoryStore()
    publish(site, store)
    store.puts.clear()
    store.heads.clear()
    store.gets.clear()
    report = publish(site, store)
    assert report.uploaded == ()
    assert set(store.heads) == {key for key in store.objects if STATE_DIR not in key}  # the checksums, not bodies
    assert [key for key in store.gets if STATE_DIR not in key] == []
    assert store.puts == [f"{STATE_DIR}lock"]


def test_an_object_changed_behind_our_back_is_looked_up_and_replaced(site: Path) -> None:
    store = MemoryStore()
    publish(site, store)
    store.put("simple/index.html", b"vandalised", content_type="text/html", cache_control="", sha256="x")
    store.heads.clear()
    report = publish(site, store)
    assert "simple/index.html" not in store.heads  # its size already says it differs
    assert report.uploaded == ("simple/index.html",)
    assert store.objects["simple/index.html"]["body"] == (site / "simple/index.html").read_bytes()


def test_only_changed_objects_after_a_new_wheel(site: Path, tmp_path: Path) -> None:
    store = MemoryStore()
    publish(site, store)
    new = make_wheel(tmp_path / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    build_site(tmp_path, site, base_url="https://w.example")
    report = publish(site, store)
    assert set(report.uploaded) == {
        f"whl/pt213cu130/{new.name}",
        f"whl/pt213cu130/{new.name}.metadata",
        "whl/pt213cu130.html",
        "whl/pt213cu130/simple/causal-conv1d/index.html",
        "whl/pt213cu130/simple/causal-conv1d/",
        "whl/pt213cu130/json/causal-conv1d/index.json",
        "whl/pt213cu130/json/causal-conv1d/",
        "simple/causal-conv1d/index.html",
        "simple/causal-conv1d/",
        "json/causal-conv1d/index.json",
        "json/causal-conv1d/",
        "select/pt213cu130-cp312.html",  # the setup page of the new wheel
        "wheels/causal-conv1d/1.7.0.json",
        "wheels.json",
        "index.html",
    }


def test_a_published_wheel_is_never_overwritten_with_other_bytes(site: Path, tmp_path: Path) -> None:
    store = MemoryStore()
    publish(site, store)
    make_wheel(tmp_path / "dist", WheelSpec(label="pt212cu126", salt="rebuilt"))
    build_site(tmp_path, site, base_url="https://w.example")
    before = {k: o["etag"] for k, o in store.objects.items()}
    with pytest.raises(PublishError, match="refusing to overwrite 1 published file"):
        publish(site, store)
    after = {k: o["etag"] for k, o in store.objects.items()}
    assert after == before  # nothing at all was written, the lock came and went


def test_wheels_missing_locally_are_not_silently_delisted(site: Path, tmp_path: Path) -> None:
    store = MemoryStore()
    publish(site, store)
    for wheel in (tmp_path / "dist").glob("*pt212cu126*"):
        wheel.unlink()
    build_site(tmp_path, site, base_url="https://w.example")
    with pytest.raises(PublishError, match="1 published wheel"):
        publish(site, store)
    report = publish(site, store, allow_delist=True)
    assert "whl/pt212cu126.html" not in report.uploaded
    assert any(key.startswith("whl/pt212cu126/") for key in store.objects)  # delisted, never deleted


def test_a_held_lock_stops_a_second_publisher_until_broken(site: Path) -> None:
    store = MemoryStore()
    holder = {"owner": "ci@runner-7 pid 42", "since": "2026-01-01T00:00:00Z", "token": "t"}
    store.put(
        f"{STATE_DIR}lock", json.dumps(holder).encode(), content_type="application/json", cache_control="", sha256=""
    )
    with pytest.raises(PublishError, match="ci@runner-7 pid 42 since 2026-01-01"):
        publish(site, store)
    assert not any(key.endswith(".whl") for key in store.objects)
    publish(site, store, break_lock=True)
    assert any(key.endswith(".whl") for key in store.objects)
    assert f"{STATE_DIR}lock" not in store.objects


def test_a_failed_publish_releases_its_lock(site: Path) -> None:
    store = MemoryStore()
    original = store.put

    def failing_put(key: str, body, **options) -> str:
        if key.endswith(".html"):
            raise PublishError("S3 put: InternalError")
        return original(key, body, **options)

    store.put = failing_put  # type: ignore[method-assign]
    with pytest.raises(PublishError, match="InternalError"):
        publish(site, store)
    assert f"{STATE_DIR}lock" not in store.objects
    assert store.objects  # the wheels went up ...
    assert not {"simple/", "simple/index.html", "json/", "index.html"} & set(store.objects)  # ... no list of pages did


def test_a_racing_publisher_with_the_same_bytes_is_fine_with_other_bytes_refused(site: Path) -> None:
    store = MemoryStore()
    wheel = next(site.glob("whl/pt214cu130/*.whl"))
    key = f"whl/pt214cu130/{wheel.name}"
    original_list = store.list

    def list_then_race(prefix: str) -> dict[str, RemoteObject]:
        listing = original_list(prefix)  # the plan sees an empty bucket; then someone else stores the wheel
        store.put(key, b"other bytes", content_type="", cache_control="", sha256="f" * 64)
        return listing

    store.list = list_then_race  # type: ignore[method-assign]
    with pytest.raises(PublishError, match="appeared in the bucket with different bytes"):
        publish(site, store)
    assert store.objects[key]["body"] == b"other bytes"


def test_a_wheel_published_by_another_tool_is_compared_by_its_bytes(site: Path) -> None:
    wheel = next(site.glob("whl/pt214cu130/*.whl"))
    key = f"whl/pt214cu130/{wheel.name}"
    store = MemoryStore()
    store.plant(key, wheel.read_bytes())  # no checksum, an ETag that is no MD5
    assert key not in publish(site, store).uploaded  # same bytes: left alone
    assert key in store.gets
    other = MemoryStore()
    other.plant(key, b"not the same wheel")
    with pytest.raises(PublishError, match="refusing to overwrite 1"):
        publish(site, other)


def test_a_single_part_etag_is_compared_as_the_md5_without_a_download(site: Path) -> None:
    wheel = next(site.glob("whl/pt214cu130/*.whl"))
    key = f"whl/pt214cu130/{wheel.name}"
    store = MemoryStore()
    store.plant(key, wheel.read_bytes(), md5=True)
    assert key not in publish(site, store).uploaded
    assert key not in store.gets
    other = MemoryStore()
    other.plant(key, bytes(reversed(wheel.read_bytes())), md5=True)  # same size, other bytes
    with pytest.raises(PublishError, match="refusing to overwrite 1"):
        publish(site, other)


def test_dry_run_writes_nothing(site: Path) -> None:
    store = MemoryStore()
    report = publish(site, store, dry_run=True)
    assert report.dry_run and report.uploaded == () and len(report.plan.uploads) > 10
    assert store.objects == {}


def test_prefix_is_normalised_and_checked(site: Path) -> None:
    assert normalise_prefix("/a//b/") == "a/b/"
    assert normalise_prefix("") == ""
    with pytest.raises(ConfigError, match="not allowed"):
        normalise_prefix("a/../b")
    with pytest.raises(ConfigError, match="not a wheelwright site"):
        publish(site.parent / "dist", MemoryStore())


def test_a_site_copied_without_its_dot_files_says_so(site: Path) -> None:
    (site / layout.SITE_MARKER).unlink()  # what upload-artifact does to it unless told include-hidden-files
    with pytest.raises(ConfigError, match="not a wheelwright site") as refused:
        publish(site, MemoryStore(), dry_run=True)
    assert refused.value.tip and "include-hidden-files: true" in refused.value.tip


def _lock(store: MemoryStore, **holder: object) -> None:
    document = {"owner": "someone", "since": "2026-01-01T00:00:00Z", "token": "t", **holder}
    store.put(f"{STATE_DIR}lock", json.dumps(document).encode(), content_type="", cache_control="", sha256="")


def _live_process() -> tuple[int, int | None]:
    import os

    return os.getppid(), _process_start(os.getppid())


def test_break_lock_refuses_a_live_publisher_on_this_machine(site: Path) -> None:
    pid, started = _live_process()
    store = MemoryStore()
    _lock(store, host=socket.gethostname(), pid=pid, process_start=started, since_epoch=time.time() - 2.5)
    with pytest.raises(PublishError, match="its process is still running"):
        publish(site, store, break_lock=True)
    assert not any(key.endswith(".whl") for key in store.objects)


def test_a_lock_whose_process_is_gone_is_taken_over_without_a_flag(site: Path) -> None:
    store = MemoryStore()
    _lock(store, host=socket.gethostname(), pid=2**22 + 12345, process_start=1, since_epoch=time.time())
    publish(site, store)
    assert any(key.endswith(".whl") for key in store.objects) and f"{STATE_DIR}lock" not in store.objects


def test_a_reused_pid_is_not_mistaken_for_the_holder(site: Path) -> None:
    pid, started = _live_process()
    store = MemoryStore()
    _lock(store, host=socket.gethostname(), pid=pid, process_start=(started or 0) + 1, since_epoch=time.time())
    publish(site, store)
    assert any(key.endswith(".whl") for key in store.objects)


def test_break_lock_takes_a_lock_from_another_machine_only_once_it_is_old(site: Path) -> None:
    store = MemoryStore()
    _lock(store, host="elsewhere", pid=1, since_epoch=time.time() - 60)
    with pytest.raises(PublishError, match="not on this machine"):
        publish(site, store, break_lock=True)
    _lock(store, host="elsewhere", pid=1, since_epoch=time.time() - LOCK_EXPIRY_SECONDS - 1)
    with pytest.raises(PublishError, match="not on this machine"):
        publish(site, store)  # old, but breaking it is the operator's decision
    publish(site, store, break_lock=True)
    assert any(key.endswith(".whl") for key in store.objects)


def test_publish_uploads_only_what_the_index_recorded(site: Path) -> None:
    (site / "whl" / "stray.html").write_text("not the index's")
    (site / "simple" / "passwd").symlink_to("/etc/passwd")
    store = MemoryStore()
    publish(site, store)
    assert "whl/stray.html" not in store.objects and "simple/passwd" not in store.objects
    assert "index.html" in store.objects


def test_publish_refuses_a_site_file_whose_bytes_moved(site: Path) -> None:
    page = site / "whl" / "pt214cu130.html"
    page.write_text(page.read_text().replace("sha256=", "sha256=0"))
    with pytest.raises(PublishError, match="bytes changed since the index recorded them"):
        publish(site, MemoryStore())
