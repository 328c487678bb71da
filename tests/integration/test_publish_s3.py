"""Publish against a real S3 API server on loopback (moto's server mode, over HTTP): content types and cache
headers, re-publishing only what changed, refusing to overwrite a wheel, a publish killed midway leaving the
previous index consistent, concurrent publishers, and the CLI never logging credentials."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import boto3
import pytest

from builder.core.errors import PublishError
from builder.core.runner import run
from index_site import layout
from index_site.publish import STATE_DIR, AlreadyExists, RemoteObject, publish
from index_site.s3 import S3Store
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import crawl, fetch, pip_install
from tests.integration.conftest import PYTHON_TAG, S3Endpoint, installed_wheel, write_wheelhouse

PREFIX = "idx"


class Bucket:
    """A fresh public bucket and a wheelhouse indexed for it."""

    def __init__(self, endpoint: S3Endpoint, output: Path) -> None:
        self.name = endpoint.new_bucket()
        self.endpoint = endpoint
        self.output = output
        self.url = f"{endpoint.url}/{self.name}/{PREFIX}"
        self.client = boto3.client("s3", endpoint_url=endpoint.url, region_name="us-east-1")
        write_wheelhouse(output)
        self.reindex()

    @property
    def site(self) -> Path:
        return self.output / "site"

    def store(self) -> S3Store:
        return S3Store(self.name, endpoint_url=self.endpoint.url, region="us-east-1")

    def reindex(self) -> None:
        build_site(self.output, self.site, base_url=self.url)

    def head(self, key: str) -> dict:
        return self.client.head_object(Bucket=self.name, Key=f"{PREFIX}/{key}")


@pytest.fixture
def bucket(s3_endpoint: S3Endpoint, tmp_path: Path) -> Bucket:
    return Bucket(s3_endpoint, tmp_path / "wheelhouse")


def test_objects_carry_content_type_cache_control_and_digest(bucket: Bucket) -> None:
    publish(bucket.site, bucket.store(), prefix=PREFIX)
    wheel = f"whl/pt213cu130/causal_conv1d-1.7.0+pt213cu130-{PYTHON_TAG}-{PYTHON_TAG}-linux_x86_64.whl"
    expected = {
        wheel: ("application/octet-stream", "public, max-age=31536000, immutable"),
        wheel + ".metadata": ("text/plain; charset=utf-8", "public, max-age=31536000, immutable"),
        "whl/pt213cu130.html": ("text/html; charset=utf-8", "public, max-age=300"),
        "whl/pt213cu130/simple/causal-conv1d/": ("text/html; charset=utf-8", "public, max-age=300"),
        "json/causal-conv1d/index.json": ("application/vnd.pypi.simple.v1+json", "public, max-age=300"),
        "json/": ("application/vnd.pypi.simple.v1+json", "public, max-age=300"),
        "index.html": ("text/html; charset=utf-8", "public, max-age=300"),
    }
    for key, (content_type, cache_control) in expected.items():
        head = bucket.head(key)
        assert (head["ContentType"], head["CacheControl"]) == (content_type, cache_control), key
        local = bucket.site / (
            key
            + (
                "index.json"
                if key.startswith("json") and key.endswith("/")
                else "index.html"
                if key.endswith("/")
                else ""
            )
        )
        assert head["Metadata"]["sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()
    status, content_type, _ = fetch(f"{bucket.url}/{wheel.replace('+', '%2B')}")
    assert (status, content_type) == (200, "application/octet-stream")


def test_the_published_bucket_is_an_index_pip_installs_from(
    bucket: Bucket, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    publish(bucket.site, bucket.store(), prefix=PREFIX)
    assert crawl(bucket.url + "/").problems == []
    pip_install(fresh_venv, installer_env, "--no-index", "-f", f"{bucket.url}/whl/pt212cu126.html", "causal-conv1d")
    assert installed_wheel(fresh_venv, installer_env) == WheelSpec(label="pt212cu126", python=PYTHON_TAG).wheel_filename


def test_republish_uploads_only_changed_objects(bucket: Bucket) -> None:
    # With versioning on, every PUT leaves a version behind: the bucket itself counts what was written.
    bucket.client.put_bucket_versioning(Bucket=bucket.name, VersioningConfiguration={"Status": "Enabled"})
    first = publish(bucket.site, bucket.store(), prefix=PREFIX)
    assert publish(bucket.site, bucket.store(), prefix=PREFIX).uploaded == ()
    new = make_wheel(bucket.output / "dist", WheelSpec(label="pt212cu126", python="cp39"))
    people = ("select", "coverage")  # pages for people that may change with it: those whose bytes did
    before = {p: p.read_bytes() for top in people for p in (bucket.site / top).rglob("*.html")}
    bucket.reindex()
    changed = {
        p.relative_to(bucket.site).as_posix()
        for top in people
        for p in (bucket.site / top).rglob("*.html")
        if before.get(p) != p.read_bytes()
    }
    created = {path for path in changed if bucket.site / path not in before}
    assert created == {"select/pt212cu126-cp39.html"}  # the new Python's setup page
    report = publish(bucket.site, bucket.store(), prefix=PREFIX)
    pages = (
        "whl/pt212cu126/simple/causal-conv1d/",
        "whl/pt212cu126/json/causal-conv1d/",
        "simple/causal-conv1d/",
        "json/causal-conv1d/",
    )
    expected = {
        f"whl/pt212cu126/{new.name}",
        f"whl/pt212cu126/{new.name}.metadata",
        "whl/pt212cu126.html",
        f"wheels/causal-conv1d/{WheelSpec().version}.json",  # the wheels of its release
        "wheels.json",
        *changed,
        "index.html",
        "",  # the landing page under the prefix's own key
        *pages,
        *(page + ("index.json" if "/json/" in f"/{page}" else "index.html") for page in pages),
    }
    assert set(report.uploaded) == {f"{PREFIX}/{key}" for key in expected}
    versions: dict[str, int] = {}
    for page in bucket.client.get_paginator("list_object_versions").paginate(Bucket=bucket.name, Prefix=f"{PREFIX}/"):
        for version in page.get("Versions", ()):
            versions[version["Key"]] = versions.get(version["Key"], 0) + 1
    site_keys = {key: count for key, count in versions.items() if STATE_DIR not in key}
    assert {key for key, count in site_keys.items() if count > 1} == set(report.uploaded) - {
        f"{PREFIX}/whl/pt212cu126/{new.name}",
        f"{PREFIX}/whl/pt212cu126/{new.name}.metadata",
        *(f"{PREFIX}/{path}" for path in created),
    }
    assert set(site_keys) == set(first.uploaded) | set(report.uploaded)


def test_refuses_to_overwrite_a_published_wheel_with_different_bytes(bucket: Bucket) -> None:
    publish(bucket.site, bucket.store(), prefix=PREFIX)
    key = f"whl/pt212cu126/{WheelSpec(label='pt212cu126', python=PYTHON_TAG).wheel_filename}"
    published = fetch(f"{bucket.url}/{key.replace('+', '%2B')}")[2]
    make_wheel(bucket.output / "dist", WheelSpec(label="pt212cu126", python=PYTHON_TAG, salt="rebuilt"))
    bucket.reindex()
    with pytest.raises(PublishError, match="refusing to overwrite 1 published file") as refused:
        publish(bucket.site, bucket.store(), prefix=PREFIX)
    assert key in str(refused.value)
    assert fetch(f"{bucket.url}/{key.replace('+', '%2B')}")[2] == published
    assert crawl(bucket.url + "/").problems == []


class Killed(Exception):
    """The publishing process died: nothing it does after this point reaches the bucket."""


class DyingStore:
    """An S3Store whose process is killed after ``uploads`` successful uploads of site objects."""

    def __init__(self, store: S3Store, uploads: int) -> None:
        self._store, self._left, self.dead, self.uploaded = store, uploads, False, []
        self._lock = threading.Lock()

    def _alive(self) -> None:
        if self.dead:
            raise Killed

    def list(self, prefix: str) -> dict[str, RemoteObject]:
        self._alive()
        return self._store.list(prefix)

    def head(self, key: str) -> RemoteObject | None:
        self._alive()
        return self._store.head(key)

    def get(self, key: str) -> bytes | None:
        self._alive()
        return self._store.get(key)

    def put(self, key: str, body, **options) -> str:
        with self._lock:
            self._alive()
            if STATE_DIR not in key:
                if self._left == 0:
                    self.dead = True
                    raise Killed
                self._left -= 1
            etag = self._store.put(key, body, **options)
            if STATE_DIR not in key:
                self.uploaded.append(key)
            return etag

    def delete(self, key: str) -> None:
        self._alive()
        self._store.delete(key)


def test_a_publish_killed_midway_leaves_the_previous_index_consistent_and_the_next_completes_it(
    bucket: Bucket, fresh_venv: Path, installer_env: dict
) -> None:
    publish(bucket.site, bucket.store(), prefix=PREFIX)
    landing_before = fetch(bucket.url + "/")[2]
    added = [
        make_wheel(bucket.output / "dist", spec)
        for spec in (
            WheelSpec(label="pt211cu128", python=PYTHON_TAG),
            WheelSpec(version="1.7.1", label="pt214cu130", python=PYTHON_TAG),
        )
    ]
    bucket.reindex()
    plan = publish(bucket.site, bucket.store(), prefix=PREFIX, dry_run=True).plan
    files = sum(1 for item in plan.uploads if item.kind.tier == layout.Tier.FILE)
    dying = DyingStore(bucket.store(), uploads=files + 3)  # all wheels and metadata, then three pages
    with pytest.raises(Killed):
        publish(bucket.site, dying, prefix=PREFIX, jobs=1)
    assert len(dying.uploaded) == files + 3

    crawled = crawl(bucket.url + "/")
    assert crawled.problems == []  # every link of what readers see resolves, with the right bytes
    assert fetch(bucket.url + "/")[2] == landing_before
    # The dead publish's lock is its own process's and no longer held: provably gone, so taken over without a flag.
    report = publish(bucket.site, bucket.store(), prefix=PREFIX)
    assert set(report.uploaded).isdisjoint(dying.uploaded)
    assert crawl(bucket.url + "/").problems == []
    assert b"pt211cu128" in fetch(bucket.url + "/")[2] and b"1.7.1" in fetch(bucket.url + "/")[2]
    pip_install(fresh_venv, installer_env, "--no-index", "-f", f"{bucket.url}/whl/pt214cu130.html", "causal-conv1d")
    assert installed_wheel(fresh_venv, installer_env) == added[1].name


def test_concurrent_publishers_are_serialised_by_a_conditional_write(bucket: Bucket) -> None:
    store = bucket.store()
    assert store.put(
        f"{PREFIX}/probe", b"1", content_type="text/plain", cache_control="no-store", sha256="x", create_only=True
    )
    with pytest.raises(AlreadyExists):
        store.put(
            f"{PREFIX}/probe", b"2", content_type="text/plain", cache_control="no-store", sha256="y", create_only=True
        )
    store.delete(f"{PREFIX}/probe")

    first_is_uploading, release_first = threading.Event(), threading.Event()
    real_put = store.put

    def slow_put(key: str, body, **options) -> str:
        if key.endswith(".whl"):
            first_is_uploading.set()
            release_first.wait(timeout=30)
        return real_put(key, body, **options)

    store.put = slow_put  # type: ignore[method-assign]
    outcome: dict[str, object] = {}
    first = threading.Thread(
        target=lambda: outcome.setdefault("first", publish(bucket.site, store, prefix=PREFIX, jobs=1))
    )
    first.start()
    assert first_is_uploading.wait(timeout=30)
    with pytest.raises(PublishError, match="another publish holds the lock"):
        publish(bucket.site, bucket.store(), prefix=PREFIX)
    release_first.set()
    first.join(timeout=60)
    assert outcome["first"].uploaded  # type: ignore[union-attr]
    assert publish(bucket.site, bucket.store(), prefix=PREFIX).uploaded == ()


def test_cli_publish_shows_a_plan_and_never_logs_credentials(bucket: Bucket) -> None:
    wheelwright = Path(sys.executable).parent / "wheelwright"
    common = [
        "--output",
        bucket.output,
        "--bucket",
        bucket.name,
        "--prefix",
        PREFIX,
        "--endpoint-url",
        bucket.endpoint.url,
    ]
    dry = run(
        [wheelwright, "--debug", "publish", *common, "--dry-run"],
        step="publish --dry-run",
        env=dict(os.environ),
        capture=True,
    ).output
    assert "would upload" in dry and "index.html" in dry
    assert bucket.client.list_objects_v2(Bucket=bucket.name).get("KeyCount") == 0
    real = run([wheelwright, "--debug", "publish", *common], step="publish", env=dict(os.environ), capture=True).output
    assert "0 unchanged" in real
    for secret in (os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]):
        assert secret not in dry and secret not in real
