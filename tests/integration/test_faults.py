"""Faults injected into the real CLI (tests/faults.py): SIGKILL at several points of `index` and of `publish` (against
moto's S3 server on loopback), a ledger held by another process, a full and a read-only disk (a small tmpfs where
this machine may mount one, else an injected ENOSPC / EROFS), and a wheel rewritten in place under a live site.
After each, what readers see must stay consistent, and the next plain run must converge: every link on every page
resolves to bytes with the hash the page states (tests/sitecheck.py for a folder, tests/index_checks.crawl for a
bucket)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from builder.core.ledger import Ledger
from builder.plan.accelerator import Accelerator
from builder.steps.variant import make_twin
from builder.steps.wheelzip import Member, read_members, write_wheel
from index_site.state import STATE_FILE, IndexState
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.index_checks import crawl
from tests.integration.conftest import S3Endpoint
from tests.integration.test_hostile import Run, assert_one_error, wheelwright
from tests.jobs import local_job
from tests.sitecheck import check_site

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
FIRST = [WheelSpec(label=label, python=py) for label in ("pt214cu130", "pt213cu130") for py in ("cp311", "cp312")]
LATER = [WheelSpec(version="1.7.1", label="pt214cu130"), WheelSpec(label="pt212cu126")]


def faulty(fault: str, target: str, call: int, *args: str | Path, cwd: Path, env: dict | None = None) -> Run:
    """The CLI with ``fault`` injected at the ``call``-th call of ``target``."""
    command = [sys.executable, "-m", "tests.faults", fault, target, str(call), "--", *map(str, args)]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False)
    return Run(code=result.returncode, output=result.stdout + result.stderr)


def link_problems(site: Path) -> list[str]:
    """What a reader of the site would trip over: links to nothing, or to bytes other than the stated ones."""
    return [p for p in check_site(site) if "links" in p or "states sha256" in p]


def wheelhouse(tmp: Path, specs: list[WheelSpec]) -> Path:
    out = tmp / "out"
    for spec in specs:
        make_wheel(out / "dist", spec)
    return out


# -- kill -9 during index ---------------------------------------------------------------------------------------

# (case, target, call in a cold run, call in an incremental run): where the process dies; None: not a point there
INDEX_KILLS = [
    ("while-hashing", "index_site.catalog:sha256_stream", 2, 2),
    ("before-the-index-state-is-written", "index_site.state:IndexState.write", 1, 1),
    ("placing-the-first-wheel", "os:link", 1, 1),
    ("placing-a-later-wheel", "os:link", 3, 2),
    ("writing-metadata", "index_site.site:_write_atomic", 2, 2),
    ("writing-pages", "index_site.site:_write_atomic", 8, 8),
    ("before-the-manifest", "index_site.records:write_manifest", 2, 1),
    ("before-identities-are-refreshed", "index_site.state:IndexState.refresh", 1, 1),
    ("pruning", "index_site.site:_remove_empty_parents", None, 1),
]
KILL_POINTS = [
    pytest.param(mode == "incremental", target, call, id=f"{mode}-{case}")
    for case, target, *calls in INDEX_KILLS
    for mode, call in zip(("cold", "incremental"), calls, strict=True)
    if call is not None
]


@pytest.mark.parametrize(("incremental", "target", "call"), KILL_POINTS)
def test_a_killed_index_leaves_no_broken_link_and_the_next_run_finishes(
    tmp_path: Path, target: str, call: int, incremental: bool
) -> None:
    out = wheelhouse(tmp_path, FIRST)
    if incremental:
        assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
        for spec in LATER:
            make_wheel(out / "dist", spec)
        next((out / "dist").glob("*pt213cu130-cp312*")).unlink()  # a variant loses a wheel: pages and a prune
    killed = faulty("kill", target, call, "index", "--output", out, cwd=tmp_path)
    assert killed.code == -signal.SIGKILL, killed.output  # the point was reached
    assert link_problems(out / "site") == []
    again = wheelwright("index", "--output", out, cwd=tmp_path)
    assert again.code == 0 and "Traceback" not in again.output, again.output
    assert check_site(out / "site") == []
    listed = sorted(path.name for path in (out / "site").rglob("*.whl"))
    assert listed == sorted(path.name for path in (out / "dist").iterdir())


# -- kill -9 in the twin step ------------------------------------------------------------------------------------


def verified_wheelhouse(tmp: Path, accelerators: tuple[str, ...]) -> Path:
    """dist/ as the build leaves it: wheels with provenance, whose twins the index makes and checks."""
    out = tmp / "out"
    (out / "dist").mkdir(parents=True, exist_ok=True)
    for accelerator in accelerators:
        job = local_job(accelerator=Accelerator.parse(accelerator))
        with_provenance(job_wheel(out / "dist", job, {"causal_conv1d/__init__.py": b"x = 1\n"}), job)
    return out


# (case, target, call in a cold run of two wheels, whether the build made their twins first): where it dies
TWIN_KILLS = [
    ("before-a-twin-is-made", "builder.steps.variant:make_twin", 1, False),
    ("deriving-a-twin", "builder.steps.variant:derive_open", 1, False),
    ("writing-a-twin", "builder.steps.variant:atomic_file", 1, False),  # the derived bytes, as make_twin writes them
    ("writing-the-second-twin", "builder.steps.variant:atomic_file", 2, False),
    ("checking-a-twin-as-it-is-made", "builder.steps.variant:twin_problems", 1, False),
    ("reading-a-made-twin", "index_site.twins:read_derived", 1, False),
    ("hashing-a-twin-the-build-made", "index_site.twins:read_derived", 1, True),
    ("hashing-the-second-twin", "index_site.twins:read_derived", 2, True),
    ("before-the-twins-state-is-written", "index_site.state:IndexState.write", 2, False),
    ("placing-a-twin", "os:link", 3, False),
]


@pytest.mark.parametrize(("target", "call", "premade"), [c[1:] for c in TWIN_KILLS], ids=[c[0] for c in TWIN_KILLS])
def test_a_kill_in_the_twin_step_leaves_the_site_whole_and_the_next_run_converges(
    tmp_path: Path, target: str, call: int, premade: bool
) -> None:
    out = verified_wheelhouse(tmp_path, ("cu130", "cu126"))
    for wheel in (out / "dist").iterdir() if premade else ():
        make_twin(wheel, out / "variant")  # as the build does after the verify gate
    killed = faulty("kill", target, call, "index", "--output", out, cwd=tmp_path)
    assert killed.code == -signal.SIGKILL, killed.output  # the point was reached
    assert link_problems(out / "site") == []
    again = wheelwright("index", "--output", out, cwd=tmp_path)
    assert again.code == 0 and "Traceback" not in again.output and "WARN" not in again.output, again.output
    assert check_site(out / "site") == []
    # the channel's files, as an index run nothing killed publishes from the same wheels (the two twins, and the
    # fallback and provider files beside them)
    reference = verified_wheelhouse(tmp_path / "reference", ("cu130", "cu126"))
    assert wheelwright("index", "--output", reference, cwd=tmp_path).code == 0
    twins = sorted(path.name for path in (out / "site/variant/files").glob("*.whl"))
    assert twins == sorted(path.name for path in (reference / "site/variant/files").glob("*.whl"))
    made = sorted(path.name for path in (out / "variant").glob("*.whl"))
    assert len(made) == 2 and set(made) <= set(twins)


def test_a_kill_while_a_tampered_twin_is_made_again_converges(tmp_path: Path) -> None:
    out = verified_wheelhouse(tmp_path, ("cu130",))
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    (twin,) = (out / "variant").glob("*.whl")
    members = read_members(twin)
    members["causal_conv1d/__init__.py"] = Member(data=b"x = 666\n")
    write_wheel(twin, members)
    killed = faulty("kill", "builder.steps.variant:make_twin", 1, "index", "--output", out, cwd=tmp_path)
    assert killed.code == -signal.SIGKILL, killed.output  # after the tampered twin was taken out, before the new one
    assert link_problems(out / "site") == []
    again = wheelwright("index", "--output", out, cwd=tmp_path)
    assert again.code == 0 and "Traceback" not in again.output, again.output
    assert check_site(out / "site") == []
    assert b"x = 1" in zipfile.ZipFile(out / "site/variant/files" / twin.name).read("causal_conv1d/__init__.py")


# -- kill -9 during publish, against a real S3 API ---------------------------------------------------------------

# (case, call of S3Store.put that dies): the lock, the first file, files midway, the first page, the manifest
PUBLISH_KILLS = [
    ("before-the-lock", 1),
    ("first-file", 2),
    ("files-midway", 4),
    ("after-the-files", 9),
    ("pages-midway", 14),
]


@pytest.mark.parametrize("call", [c[1] for c in PUBLISH_KILLS], ids=[c[0] for c in PUBLISH_KILLS])
def test_a_killed_publish_keeps_the_bucket_consistent_and_the_next_run_completes_it(
    tmp_path: Path, s3_endpoint: S3Endpoint, call: int
) -> None:
    out = wheelhouse(tmp_path, FIRST)
    bucket = s3_endpoint.new_bucket()
    url = f"{s3_endpoint.url}/{bucket}/idx"
    publish = ["publish", "--output", out, "--bucket", bucket, "--prefix", "idx", "--endpoint-url", s3_endpoint.url]
    publish += ["--region", "us-east-1", "--jobs", "1"]
    assert wheelwright("index", "--output", out, "--base-url", url, cwd=tmp_path).code == 0
    assert wheelwright(*publish, cwd=tmp_path).code == 0
    for spec in LATER:
        make_wheel(out / "dist", spec)
    assert wheelwright("index", "--output", out, "--base-url", url, cwd=tmp_path).code == 0

    killed = faulty("kill", "index_site.s3:S3Store.put", call, *publish, cwd=tmp_path)
    assert killed.code == -signal.SIGKILL, killed.output
    assert crawl(url + "/").problems == []  # readers see the old index, or the old with some new files: whole
    again = wheelwright(*publish, cwd=tmp_path)  # no --break-lock: the holder is provably gone (same host, dead pid)
    assert again.code == 0 and "Traceback" not in again.output, again.output
    final = crawl(url + "/")
    assert final.problems == []
    fetched = {u.rsplit("/", 1)[1].replace("%2B", "+") for u in final.files if u.endswith(".whl")}
    assert fetched == {path.name for path in (out / "dist").iterdir()}


def test_publish_uploads_nothing_but_the_site_even_when_the_site_is_the_output(
    tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert wheelwright("index", "--output", out, "--site", out, cwd=tmp_path).code == 0
    wheelhouse(tmp_path, FIRST)
    with Ledger(out / "ledger.sqlite"):
        pass
    (out / "notes.txt").write_text("private\n")
    assert wheelwright("index", "--output", out, "--site", out, cwd=tmp_path).code == 0
    bucket = s3_endpoint.new_bucket()
    run = wheelwright(
        "publish", "--site", out, "--bucket", bucket, "--endpoint-url", s3_endpoint.url, "--region", "us-east-1",
        cwd=tmp_path,
    )
    assert run.code == 0, run.output
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint.url, region_name="us-east-1")
    keys = {item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert not {k for k in keys if k.startswith(("dist/", "ledger", "notes", "logs/"))}
    assert any(k.endswith(".whl") for k in keys) and "index.html" in keys


# -- a ledger held by another process ----------------------------------------------------------------------------

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


def hold_database(path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding a write transaction on the SQLite file at ``path`` for ``seconds``."""
    if path.name == "ledger.sqlite":
        with Ledger(path):
            pass
    else:
        with IndexState(path):
            pass
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_an_index_state_locked_longer_than_the_timeout_is_one_error_line(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, FIRST)
    holder = hold_database(out / STATE_FILE, 30)
    try:
        run = wheelwright("index", "--output", out, cwd=tmp_path, env={"WHEELWRIGHT_LEDGER_TIMEOUT": "1"})
    finally:
        holder.kill()
        holder.communicate()
    assert_one_error(run, 9, rf"{STATE_FILE}: locked by another process for more than 1 s")
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    assert check_site(out / "site") == []


@pytest.mark.parametrize("held", ["ledger.sqlite", STATE_FILE])
def test_a_database_released_within_the_timeout_is_waited_for(tmp_path: Path, held: str) -> None:
    """The ledger the index only reads, even while a build writes it; its own state it waits for."""
    out = wheelhouse(tmp_path, FIRST)
    holder = hold_database(out / held, 2)
    run = wheelwright("index", "--output", out, cwd=tmp_path, env={"WHEELWRIGHT_LEDGER_TIMEOUT": "30"})
    holder.communicate()
    assert run.code == 0, run.output
    assert check_site(out / "site") == []


# -- a full disk, a read-only disk --------------------------------------------------------------------------------


def mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", path]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


@pytest.fixture
def mounts():
    mounted: list[Path] = []
    yield mounted
    for path in reversed(mounted):
        subprocess.run(["umount", path], capture_output=True, check=False)


def test_a_full_disk_is_one_error_line_and_the_next_run_converges(tmp_path: Path, mounts: list[Path]) -> None:
    out = wheelhouse(tmp_path, [WheelSpec(label=s.label, python=s.python, payload_bytes=200_000) for s in FIRST])
    site = tmp_path / "small-disk"
    if mount_tmpfs(site, "size=512k"):
        mounts.append(site)
        run = wheelwright("index", "--output", out, "--site", site, cwd=tmp_path)
        freed = subprocess.run(["mount", "-o", "remount,size=16m", site], capture_output=True, check=False)
        assert freed.returncode == 0
    else:  # no mount here: the same error, injected where the wheel is copied
        arguments = ("index", "--output", out, "--site", site)
        run = faulty("enospc", "index_site.site:_link_or_copy", 2, *arguments, cwd=tmp_path)
    assert_one_error(run, 11, r"No space left on device")
    assert "TIP free space" in run.output
    assert link_problems(site) == []
    assert not [p for p in site.rglob(".*") if p.name != ".wheelwright-site.json"]  # no half-written file left
    again = wheelwright("index", "--output", out, "--site", site, cwd=tmp_path)
    assert again.code == 0, again.output
    assert check_site(site) == []


def test_a_read_only_disk_is_one_error_line(tmp_path: Path, mounts: list[Path]) -> None:
    out = wheelhouse(tmp_path, FIRST)
    site = tmp_path / "read-only"
    if mount_tmpfs(site, "ro,size=64k"):
        mounts.append(site)
        run = wheelwright("index", "--output", out, "--site", site, cwd=tmp_path)
    else:
        arguments = ("index", "--output", out, "--site", site)
        run = faulty("erofs", "index_site.records:write_manifest", 1, *arguments, cwd=tmp_path)
    assert_one_error(run, 11, r"Read-only file system")


def test_an_output_that_cannot_be_written_is_one_error_line(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, FIRST)
    run = faulty("erofs", "index_site.site:_write_atomic", 1, "index", "--output", out, cwd=tmp_path)
    assert_one_error(run, 11, r"Read-only file system")
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    assert check_site(out / "site") == []


# -- a wheel rewritten in place under a live, hard-linked site ----------------------------------------------------


def test_a_wheel_rewritten_in_place_is_never_served_or_published_under_its_old_hash(
    tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    from index_site.serve import serving

    out = wheelhouse(tmp_path, FIRST)
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    wheel = min((out / "dist").iterdir())
    served = out / "site/whl" / wheel.name.split("+")[1].split("-")[0] / wheel.name
    assert os.path.samefile(wheel, served)  # the site shares the inode: it must re-verify
    status = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[-30] ^= 0xFF  # same size, other bytes, old mtime restored
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(status.st_atime_ns, status.st_mtime_ns))

    url = "/" + served.relative_to(out / "site").as_posix().replace("+", "%2B")
    with serving(out / "site") as server, pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + url, timeout=10)
    refused.value.close()  # its socket, else closed by the collector whenever it runs (a warning, an error here)
    assert refused.value.code == 503
    bucket = s3_endpoint.new_bucket()
    publish = ["publish", "--output", out, "--bucket", bucket, "--endpoint-url", s3_endpoint.url]
    publish += ["--region", "us-east-1"]
    assert_one_error(wheelwright(*publish, cwd=tmp_path), 7, r"bytes changed since the index recorded them")

    again = wheelwright("index", "--output", out, cwd=tmp_path)
    assert again.code == 0 and "hashed 1" in again.output, again.output
    assert check_site(out / "site") == []
    with serving(out / "site") as server, urllib.request.urlopen(server.url + url, timeout=10) as response:
        assert response.read() == bytes(data)
    assert wheelwright(*publish, cwd=tmp_path).code == 0


def test_a_wheel_swapped_for_other_bytes_between_runs_is_hashed_again(tmp_path: Path) -> None:
    out = wheelhouse(tmp_path, FIRST)
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    wheel = out / "dist" / WheelSpec(label="pt213cu130", python="cp312").wheel_filename
    status = wheel.stat()
    replacement = make_wheel(tmp_path / "other", WheelSpec(label="pt213cu130", python="cp312", salt="other"))
    os.replace(replacement, wheel)  # another inode under the old name, with the old mtime
    os.utime(wheel, ns=(status.st_atime_ns, status.st_mtime_ns))
    again = wheelwright("index", "--output", out, cwd=tmp_path)
    assert again.code == 0 and "hashed 1" in again.output, again.output
    assert check_site(out / "site") == []
