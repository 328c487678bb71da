"""kill -9 at each point of `wheelwright merge` (tests/faults.py injects it into the real CLI): while a log or a wheel
is copied, as a file is renamed into place, as a row is recorded, and while a retried job's wheel is copied over the
one an indexed site hard-links. After each, nothing in the output is half-written or lost (every file there is
whole, the site still serves what its pages state), and the next plain merge converges: every wheel and log of
the shards, every row, and an index whose every link resolves to bytes with the stated hash."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from builder.core.ledger import Ledger
from tests.integration.test_faults import faulty, link_problems
from tests.integration.test_hostile import SHARD_JOBS, shard, wheelwright

pytestmark = pytest.mark.timeout(180)

# (case, target, call): calls of a merge of shards a and b into a new output. Each copy is two os.sendfile calls
# (the bytes, then the end); per shard: its log, its wheel, then its row.
MERGE_KILLS = [
    ("copying-the-first-log", "os:sendfile", 1),
    ("copying-the-first-wheel", "os:sendfile", 3),
    ("ending-the-first-wheels-copy", "os:sendfile", 4),
    ("copying-the-second-log", "os:sendfile", 5),
    ("copying-the-second-wheel", "os:sendfile", 7),
    ("renaming-the-first-wheel-into-place", "os:replace", 2),
    ("renaming-the-second-log-into-place", "os:replace", 3),
    ("recording-the-first-row", "builder.core.ledger:Ledger.put", 1),
    ("recording-the-second-row", "builder.core.ledger:Ledger.put", 2),
]


def merge(tmp: Path) -> list[str]:
    return ["merge", "a", "b", "--output", tmp / "all"]


def whole(tmp: Path) -> list[str]:
    """Files of the merged output that are not byte for byte their shard's file."""
    broken = []
    for kind in ("dist", "logs"):
        folder = tmp / "all" / kind
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            sources = [tmp / name / kind / path.name for name in SHARD_JOBS]
            if not any(s.is_file() and s.read_bytes() == path.read_bytes() for s in sources):
                broken.append(f"{kind}/{path.name}")
    return broken


def assert_converged(tmp: Path) -> None:
    again = wheelwright(*merge(tmp), cwd=tmp)
    assert again.code == 0 and "Traceback" not in again.output, again.output
    assert whole(tmp) == []
    for name in SHARD_JOBS:
        for kind in ("dist", "logs"):
            for path in (tmp / name / kind).iterdir():
                assert (tmp / "all" / kind / path.name).read_bytes() == path.read_bytes()
    with Ledger(tmp / "all/ledger.sqlite") as ledger:
        assert sorted(e.job_id for e in ledger.entries()) == sorted(
            f"causal-conv1d-1.7.0+pt214cu130-{tag}-x86_64" for _, tag in SHARD_JOBS.values()
        )
    assert not list((tmp / "all").rglob("*.part")) and not (tmp / "all/tmp/merge").exists()
    assert wheelwright("index", "--output", tmp / "all", cwd=tmp).code == 0
    assert link_problems(tmp / "all/site") == []


@pytest.mark.parametrize(("target", "call"), [c[1:] for c in MERGE_KILLS], ids=[c[0] for c in MERGE_KILLS])
def test_a_killed_merge_leaves_no_half_file_and_the_next_converges(tmp_path: Path, target: str, call: int) -> None:
    for name in SHARD_JOBS:
        shard(tmp_path, name)
    killed = faulty("kill", target, call, *merge(tmp_path), cwd=tmp_path)
    assert killed.code == -signal.SIGKILL, killed.output
    assert whole(tmp_path) == []
    assert_converged(tmp_path)


def test_a_merge_killed_copying_over_an_indexed_wheel_loses_nothing(tmp_path: Path) -> None:
    """A retried job's row (newer, the same wheel) is taken again; the copy dies halfway through the wheel, which
    the site built from the first merge hard-links."""
    for name in SHARD_JOBS:
        shard(tmp_path, name)
    assert wheelwright(*merge(tmp_path), cwd=tmp_path).code == 0
    assert wheelwright("index", "--output", tmp_path / "all", cwd=tmp_path).code == 0
    with sqlite3.connect(tmp_path / "a/ledger.sqlite") as db:
        db.execute("UPDATE jobs SET updated_at = ?", (time.time() + 60,))  # the retry, newer than the merged row
    db.close()
    killed = faulty("kill", "os:sendfile", 3, *merge(tmp_path), cwd=tmp_path)  # a's log is calls 1 and 2
    assert killed.code == -signal.SIGKILL, killed.output
    assert whole(tmp_path) == []
    assert link_problems(tmp_path / "all/site") == []  # the served site kept its bytes
    assert_converged(tmp_path)
