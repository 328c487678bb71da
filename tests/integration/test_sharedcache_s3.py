"""The farm's shared device-step cache against a real S3 API (moto's server on loopback) and the real nvcc: a second
group of the same toolkit, with an empty local cache and another torch, gets its cicc and ptxas steps from the
bucket and the same per-kernel SASS as a fresh compile (verify mode proves it); two writers of one key leave one
valid object; the size bound evicts; a run not on main writes nothing."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from builder.farm import container
from builder.steps import compilation, sharedcache
from builder.steps.programs import nvcc_plan, stagecache
from builder.steps.s3bucket import S3Bucket
from builder.steps.sass import kernel_sass
from tests.integration.conftest import S3Endpoint

CUDA_HOME = Path("/usr/local/cuda-13.0")
NVCC = CUDA_HOME / "bin" / "nvcc"
WRAPPER = Path(nvcc_plan.__file__).with_name("objcache.py")
SCOPE = sharedcache.Scope(toolkit="cuda-13.0-test", package="k", version="1.0", archs=("9.0",))
# the device code, and a header standing in for torch's: its host-only part differs between "torch" versions
KERNELS = """#include "torchish.h"
template <int N> __global__ void poly(float* x) {
  float v = x[threadIdx.x];
#pragma unroll
  for (int i = 0; i < N; ++i) v = v * v * 0.5f + i;
  x[threadIdx.x] = v;
}
template __global__ void poly<16>(float*);
template __global__ void poly<64>(float*);
void launch(float* x) { poly<16><<<1, 32>>>(x); }
"""
TORCHISH = "#ifndef __CUDA_ARCH__\ninline int torch_minor() {{ return {minor}; }}\n#endif\n"


def remote(endpoint: S3Endpoint, environ: dict[str, str], local: stagecache.StageCache) -> sharedcache.SharedCache:
    """The shared cache as a run whose environment holds ``environ`` (and nothing else of the cache's) sees it."""
    with pytest.MonkeyPatch.context() as patch:
        for name in (*container.SHARED_CACHE_SETTINGS, *container.SHARED_CACHE_ENV):
            patch.delenv(name, raising=False)
        for name, value in {sharedcache.ENDPOINT_ENV: endpoint.url, **environ}.items():
            patch.setenv(name, value)
        shared = sharedcache.from_settings(local)
    assert shared is not None
    return shared


@pytest.fixture
def bucket_url(s3_endpoint: S3Endpoint) -> str:
    return f"s3://{s3_endpoint.new_bucket()}/objects"


ON_MAIN = {"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_NAME": "push"}


def compile_group(root: Path, group: str, minor: int, cache: Path, mode: str = "use") -> Path:
    """One group's compile of the TU, the way a build runs it (the wrapper as PYTORCH_NVCC, the core pool): the same
    workspace path for every group, as the farm's fixed paths give; its own local cache and "torch"."""
    source = root / "src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "k.cu").write_text(KERNELS)
    (source / "torchish.h").write_text(TORCHISH.format(minor=minor))
    out = root / "out" / group
    out.mkdir(parents=True, exist_ok=True)
    pool = root / "core-pool"
    env = {"PATH": "/usr/bin:/bin", nvcc_plan.POOL_ENV: str(pool), nvcc_plan.SLOTS_ENV: "2",
           stagecache.JOB_ENV: f"job-{group}", stagecache.EVENTS_ENV: str(out / "events.jsonl"),
           "WHEELWRIGHT_OBJCACHE_SCOPE": f"torch 2.{minor}"}
    command = [sys.executable, str(WRAPPER), str(cache), mode, str(NVCC), "-MD", "-MF", str(out / "k.o.d"),
               f"-I{source}", "-O3", "-c", str(source / "k.cu"), "-o", str(out / "k.o"),
               "-gencode", "arch=compute_90,code=sm_90"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return out


def results(out: Path) -> dict[str, str]:
    return {str(e["stage"]): str(e["result"]) for e in sharedcache.events_of(out / "events.jsonl") if "stage" in e}


@pytest.mark.nvcc
@pytest.mark.skipif(not NVCC.is_file(), reason=f"no CUDA toolkit at {CUDA_HOME}")
def test_a_second_group_of_the_toolkit_gets_the_firsts_device_steps(
    tmp_path: Path, s3_endpoint: S3Endpoint, bucket_url: str, cuobjdump: Path
) -> None:
    environ = {sharedcache.REMOTE_ENV: bucket_url, **ON_MAIN}
    first_cache = tmp_path / "runner-1" / "objects"
    first = compile_group(tmp_path / "ws", "a", 12, first_cache)
    local = stagecache.StageCache(first_cache, "use", {})
    pushed = remote(s3_endpoint, environ, local).push(SCOPE, sharedcache.events_of(first / "events.jsonl"))
    assert pushed.pushed == 2  # cicc's entry and ptxas's

    second_cache = tmp_path / "runner-2" / "objects"  # another runner: nothing local
    pulled = remote(s3_endpoint, environ, stagecache.StageCache(second_cache, "use", {})).pull(SCOPE)
    assert (pulled.pulled, pulled.rejected) == (2, [])
    second = compile_group(tmp_path / "ws", "b", 13, second_cache)
    assert results(second) == {"cicc": "hit", "ptxas": "hit"}
    fresh = tmp_path / "fresh.o"
    subprocess.run([str(NVCC), "-O3", f"-I{tmp_path / 'ws' / 'src'}", "-c", str(tmp_path / "ws" / "src" / "k.cu"),
                    "-o", str(fresh), "-gencode", "arch=compute_90,code=sm_90"], check=True)
    sass = kernel_sass(cuobjdump, second / "k.o")
    assert len(sass) == 2 and sass == kernel_sass(cuobjdump, fresh)

    proof = compile_group(tmp_path / "ws", "c", 13, second_cache, mode="verify")
    assert results(proof) == {"cicc": "verified", "ptxas": "verified"}
    kernels = compilation.verify_kernels(sharedcache.events_of(proof / "events.jsonl"),
                                           stagecache.StageCache(second_cache, "verify", {}), cuobjdump)
    assert kernels == {"compared": 2, "equal": 2, "differing": 0}


def local_entry(root: Path, content: bytes) -> tuple[stagecache.StageCache, str]:
    cache = stagecache.StageCache(root, "use", {stagecache.JOB_ENV: root.name})
    output = root.parent / f"{root.name}.cubin"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(content)
    step = stagecache.Step(stage="ptxas", key=stagecache.digest_bytes(content), inputs={}, outputs={"-o": str(output)})
    cache.store(step, unit="k.cu", arch="9.0")
    return cache, step.key


def test_two_writers_of_one_key_at_once_leave_one_valid_object(
    tmp_path: Path, s3_endpoint: S3Endpoint, bucket_url: str
) -> None:
    environ = {sharedcache.REMOTE_ENV: bucket_url, **ON_MAIN}
    content = b"\x7fELF the same cubin, compiled on two runners" * 1000
    writers = [local_entry(tmp_path / name, content) for name in ("runner-1", "runner-2")]
    start = threading.Barrier(2)
    reports: list[sharedcache.Report] = []

    def push(shared: sharedcache.SharedCache, key: str) -> None:
        start.wait()
        reports.append(shared.push(SCOPE, [{"stage": "ptxas", "key": key, "arch": "9.0", "result": "miss"}]))

    # each runner's cache is made before the threads start: the settings come from this process's environment
    threads = [threading.Thread(target=push, args=(remote(s3_endpoint, environ, cache), key)) for cache, key in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bucket, prefix = sharedcache.split_remote(bucket_url)
    stored = S3Bucket(bucket, endpoint_url=s3_endpoint.url).list(prefix)
    assert len(stored) == 1
    assert sorted(r.pushed for r in reports) == [0, 1]  # one wrote it; the other found it there
    reader = stagecache.StageCache(tmp_path / "reader", "use", {})
    assert remote(s3_endpoint, {sharedcache.REMOTE_ENV: bucket_url}, reader).pull(SCOPE).pulled == 1
    entry = reader.lookup(writers[0][1])
    assert entry is not None and reader.blob(entry["outputs"]["-o"]).read_bytes() == content


def test_the_size_bound_evicts(tmp_path: Path, s3_endpoint: S3Endpoint, bucket_url: str) -> None:
    sizes = []
    for index in range(3):
        incompressible = random.Random(index).randbytes(300_000)
        cache, key = local_entry(tmp_path / f"runner-{index}", incompressible)
        shared = remote(s3_endpoint, {sharedcache.REMOTE_ENV: bucket_url, sharedcache.MAX_GB_ENV: str(0.0005),
                                      **ON_MAIN}, cache)
        report = shared.push(SCOPE, [{"stage": "ptxas", "key": key, "arch": "9.0", "result": "miss"}])
        sizes.append(len(report.evicted))
    bucket, prefix = sharedcache.split_remote(bucket_url)
    stored = S3Bucket(bucket, endpoint_url=s3_endpoint.url).list(prefix)
    assert sum(o.size for o in stored) <= 0.0005 * 2**30 < 3 * 300_000
    assert sizes[-1] >= 1 and len(stored) < 3


@pytest.mark.parametrize(
    "environ",
    [
        {"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/heads/feature", "GITHUB_EVENT_NAME": "push"},
        {"GITHUB_ACTIONS": "true", "GITHUB_REF": "refs/pull/3/merge", "GITHUB_EVENT_NAME": "pull_request"},
        {},
    ],
)
def test_a_run_not_on_main_does_not_write(
    tmp_path: Path, s3_endpoint: S3Endpoint, bucket_url: str, environ: dict[str, str]
) -> None:
    cache, key = local_entry(tmp_path / "runner", b"cubin")
    shared = remote(s3_endpoint, {sharedcache.REMOTE_ENV: bucket_url, **environ}, cache)
    assert shared.push(SCOPE, [{"stage": "ptxas", "key": key, "arch": "9.0", "result": "miss"}]).pushed == 0
    bucket, prefix = sharedcache.split_remote(bucket_url)
    assert S3Bucket(bucket, endpoint_url=s3_endpoint.url).list(prefix) == []
