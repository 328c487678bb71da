"""The farm's shared device-step cache (builder/steps/sharedcache.py) against an in-memory bucket: who may write,
what an entry looks like on the wire, what a reader refuses, which objects the size bound evicts.
tests/integration/test_sharedcache_s3.py runs it against a real S3 API (moto's server) and real nvcc."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from builder.steps import sharedcache
from builder.steps.bucket import StoredObject
from builder.steps.programs import stagecache


class MemoryBucket:
    """A bucket in a dict; ``clock`` is the time the next write or touch gets (one tick each)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, float]] = {}
        self.clock = 0.0

    def _tick(self) -> float:
        self.clock += 1
        return self.clock

    def list(self, prefix: str) -> list[StoredObject]:
        return [StoredObject(key=k, size=len(d), modified=m) for k, (d, m) in sorted(self.objects.items())
                if k.startswith(prefix)]

    def get(self, key: str) -> bytes | None:
        found = self.objects.get(key)
        return found[0] if found else None

    def put_new(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.objects[key] = (data, self._tick())
        return True

    def touch(self, key: str) -> None:
        self.objects[key] = (self.objects[key][0], self._tick())

    def delete(self, key: str) -> None:
        del self.objects[key]


SCOPE = sharedcache.Scope(toolkit="cuda-13.0-0123456789ab", package="causal-conv1d", version="1.7.0", archs=("9.0",))


def stored_step(cache: stagecache.StageCache, tmp_path: Path, name: str, content: bytes) -> str:
    """A stage entry in ``cache`` whose one output holds ``content``; its key."""
    output = tmp_path / f"{name}.out"
    output.write_bytes(content)
    step = stagecache.Step(stage="ptxas", key=stagecache.digest_bytes(name.encode()), inputs={},
                           outputs={"-o": str(output)})
    cache.store(step, unit="k.cu", arch="9.0")
    return step.key


def event(key: str, result: str = "miss") -> dict[str, str]:
    return {"stage": "ptxas", "key": key, "arch": "9.0", "result": result}


@pytest.mark.parametrize(
    ("environ", "writes"),
    [
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "push"}, True),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "schedule"}, True),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "pull_request"}, False),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/pull/7/merge", "GITHUB_EVENT_NAME": "pull_request"}, False),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/feature", "GITHUB_EVENT_NAME": "push"}, False),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main-copy", "GITHUB_EVENT_NAME": "push"}, False),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/tags/main", "GITHUB_EVENT_NAME": "push"}, False),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "push",
          sharedcache.WRITE_ENV: "0"}, True),
        ({"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/feature", "GITHUB_EVENT_NAME": "push",
          sharedcache.WRITE_ENV: "1"}, False),
        ({}, False),
        ({sharedcache.WRITE_ENV: "1"}, True),
        ({sharedcache.WRITE_ENV: "yes"}, False),
    ],
)
def test_only_runs_on_main_write(environ: dict[str, str], writes: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sharedcache.WRITE_ENV, raising=False)
    if sharedcache.WRITE_ENV in environ:
        monkeypatch.setenv(sharedcache.WRITE_ENV, environ[sharedcache.WRITE_ENV])
    assert sharedcache.may_write(environ) is writes


def test_a_pushed_entry_is_pulled_whole_into_an_empty_cache(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    first = stagecache.StageCache(tmp_path / "a", "use", {stagecache.JOB_ENV: "job-a"})
    key = stored_step(first, tmp_path, "one", b"cubin bytes")
    sharedcache.SharedCache(bucket, "objects", first, writable=True, max_bytes=1 << 30).push(SCOPE, [event(key)])
    assert list(bucket.objects) == [f"objects/{SCOPE.folder('9.0')}{key}.zip"]
    second = stagecache.StageCache(tmp_path / "b", "use", {})
    report = sharedcache.SharedCache(bucket, "objects", second, writable=False, max_bytes=1).pull(SCOPE)
    assert (report.pulled, report.rejected) == (1, [])
    entry = second.lookup(key)
    assert entry is not None and entry["from"] == "job-a"
    assert second.blob(entry["outputs"]["-o"]).read_bytes() == b"cubin bytes"


def tampered(data: bytes, how: str) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in source.namelist():
            content = source.read(name)
            if how == "blob" and name.startswith("objects/"):
                content = b"evil" + content
            if how == "key" and name == "entry.json":
                content = json.dumps({**json.loads(content), "key": "0" * 64}).encode()
            if how == "missing-blob" and name.startswith("objects/"):
                continue
            archive.writestr(name, content)
    return buffer.getvalue()


@pytest.mark.parametrize("how", ["blob", "key", "missing-blob", "not-a-zip"])
def test_a_pulled_entry_whose_bytes_are_not_what_it_names_is_refused(tmp_path: Path, how: str) -> None:
    bucket = MemoryBucket()
    first = stagecache.StageCache(tmp_path / "a", "use", {})
    key = stored_step(first, tmp_path, "one", b"cubin bytes")
    sharedcache.SharedCache(bucket, "", first, writable=True, max_bytes=1 << 30).push(SCOPE, [event(key)])
    (name, (data, when)), = bucket.objects.items()
    bucket.objects[name] = (b"PK not a zip" if how == "not-a-zip" else tampered(data, how), when)
    second = stagecache.StageCache(tmp_path / "b", "use", {})
    report = sharedcache.SharedCache(bucket, "", second, writable=False, max_bytes=1).pull(SCOPE)
    assert (report.pulled, report.rejected) == (0, [name])
    assert second.lookup(key) is None


def test_a_run_that_may_not_write_pushes_nothing(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    local = stagecache.StageCache(tmp_path / "a", "use", {})
    key = stored_step(local, tmp_path, "one", b"x")
    report = sharedcache.SharedCache(bucket, "", local, writable=False, max_bytes=1).push(SCOPE, [event(key)])
    assert bucket.objects == {} and report.pushed == 0 and report.evicted == []


def test_a_second_writer_of_one_key_leaves_the_first_object_and_touches_it(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    for folder in ("a", "b"):
        local = stagecache.StageCache(tmp_path / folder, "use", {stagecache.JOB_ENV: f"job-{folder}"})
        key = stored_step(local, tmp_path, "same", b"same bytes")
        report = sharedcache.SharedCache(bucket, "", local, writable=True, max_bytes=1 << 30).push(SCOPE, [event(key)])
    assert (report.pushed, report.present, report.touched) == (0, 1, 1)
    (data, _), = bucket.objects.values()
    assert json.loads(zipfile.ZipFile(io.BytesIO(data)).read("entry.json"))["from"] == "job-a"


def test_the_size_bound_evicts_the_least_recently_used_first(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    local = stagecache.StageCache(tmp_path / "a", "use", {})
    keys = [stored_step(local, tmp_path, name, name.encode() * 2000) for name in ("old", "used", "new")]
    unbounded = sharedcache.SharedCache(bucket, "", local, writable=True, max_bytes=1 << 30)
    unbounded.push(SCOPE, [event(keys[0])])
    unbounded.push(SCOPE, [event(keys[1])])
    unbounded.push(SCOPE, [event(keys[1], "hit")])  # used again: touched, now the most recent
    one = max(len(d) for d, _ in bucket.objects.values())
    bounded = sharedcache.SharedCache(bucket, "", local, writable=True, max_bytes=2 * one)
    report = bounded.push(SCOPE, [event(keys[2])])
    assert report.evicted == [f"{SCOPE.folder('9.0')}{keys[0]}.zip"]
    assert sum(len(d) for d, _ in bucket.objects.values()) <= 2 * one


@pytest.mark.parametrize(
    "url",
    [
        "bucket/prefix",
        "s3://",
        "s3:///prefix",
        "gs://bucket/prefix",
        "https://bucket.example/prefix",
    ],
)
def test_a_remote_that_is_not_an_s3_url_is_one_config_error(url: str) -> None:
    with pytest.raises(sharedcache.SharedCacheError, match=sharedcache.REMOTE_ENV):
        sharedcache.split_remote(url)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "ten", "inf-"])
def test_a_size_bound_that_is_not_a_positive_number_is_one_config_error(value: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sharedcache.MAX_GB_ENV, value)
    with pytest.raises(sharedcache.SharedCacheError, match=sharedcache.MAX_GB_ENV):
        sharedcache.max_bytes()


@pytest.mark.parametrize(("value", "gib"), [("", 20), ("2.5", 2.5)])  # empty: unset, as every setting
def test_the_size_bound_is_a_setting(value: str, gib: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sharedcache.MAX_GB_ENV, value)
    assert sharedcache.max_bytes() == int(gib * 2**30)


def test_no_remote_means_no_shared_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sharedcache.REMOTE_ENV, raising=False)
    assert sharedcache.from_settings(stagecache.StageCache(tmp_path, "use", {})) is None


def test_the_toolkit_id_follows_the_programs_bytes(tmp_path: Path) -> None:
    (tmp_path / "nvvm" / "bin").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "nvvm" / "bin" / "cicc").write_bytes(b"cicc")
    (tmp_path / "bin" / "ptxas").write_bytes(b"ptxas")
    first = sharedcache.toolkit_id("13.0", tmp_path, stagecache.ProgramDigests(None))
    (tmp_path / "bin" / "ptxas").write_bytes(b"ptxas 2")
    second = sharedcache.toolkit_id("13.0", tmp_path, stagecache.ProgramDigests(None))
    assert first.startswith("cuda-13.0-") and second.startswith("cuda-13.0-") and first != second
