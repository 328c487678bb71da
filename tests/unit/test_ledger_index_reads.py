"""What the index reads of the ledger on every run, chosen by SQLite so that a built job's row (its report and ABI
record, kilobytes each) is read only where asked for: the failures (the jobs that finished without a wheel, by job
id), the recorded digests of the few wheels a re-index finds new, and every built wheel's GPU code and ABI window
(both from the index of built jobs, where SQLite took them out of the JSON when the row was written)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from builder.core import ledger as ledger_module
from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger

ROW = {"package": "causal-conv1d", "version": "1.7.0", "label": "pt214cu130", "torch": "2.14.1",
       "accelerator": "cu130", "python": "3.11", "input_hash": "h", "timings": "{}", "updated_at": 1.0}


def _ledger(path: Path, rows: list[dict[str, object]]) -> None:
    Ledger(path).close()
    with sqlite3.connect(path) as db:
        for row in rows:
            values = {**ROW, **row}
            db.execute(f"INSERT INTO jobs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                       tuple(values.values()))


def test_failures_are_the_jobs_without_a_wheel_in_job_order(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    statuses = {"e": "failed", "b": "built", "d": "unbuildable", "a": "quarantined", "c": "running", "f": "failed"}
    _ledger(path, [{"job_id": job, "status": status} for job, status in statuses.items()])
    with Ledger(path) as ledger:
        failures = ledger.failures()
        everything = ledger.entries()
    assert [(entry.job_id, entry.status) for entry in failures] == [
        ("a", "quarantined"), ("d", "unbuildable"), ("e", "failed"), ("f", "failed")
    ]
    assert failures == [entry for entry in everything if entry.job_id in {"a", "d", "e", "f"}]


def test_a_built_job_is_not_read_for_the_failures(tmp_path: Path) -> None:
    """A built row whose timings could not be read (entries() refuses it) leaves the failures as they are."""
    path = tmp_path / "ledger.sqlite"
    _ledger(path, [{"job_id": "built", "status": "built", "timings": "[" * 100_000},
                   {"job_id": "failed", "status": "failed", "reason": "nvcc exploded"}])
    with Ledger(path) as ledger:
        assert [(entry.job_id, entry.reason) for entry in ledger.failures()] == [("failed", "nvcc exploded")]


def test_wheel_hashes_are_those_of_the_named_built_wheels_with_an_identity(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    identity = "1:2:3:4"
    rows: list[dict[str, object]] = [
        {"job_id": f"j{n}", "status": "built", "wheel": f"w{n}.whl", "wheel_sha256": f"{n:064x}",
         "wheel_identity": identity} for n in range(1200)  # more names than one query binds
    ]
    rows += [
        {"job_id": "no-identity", "status": "built", "wheel": "x.whl", "wheel_sha256": "0" * 64},
        {"job_id": "quarantined", "status": "quarantined", "wheel": "q.whl", "wheel_sha256": "0" * 64,
         "wheel_identity": identity},
    ]
    _ledger(path, rows)
    asked = [f"w{n}.whl" for n in range(0, 1200, 2)] + ["x.whl", "q.whl", "absent.whl"]
    with Ledger(path) as ledger:
        found = ledger.wheel_hashes(asked)
        query = "SELECT wheel FROM jobs WHERE status = 'built' AND wheel IN ('a', 'b')"
        plan = ledger._db.execute(f"EXPLAIN QUERY PLAN {query}").fetchall()
    assert found == {f"w{n}.whl": (f"{n:064x}", FileIdentity(1, 2, 3, 4)) for n in range(0, 1200, 2)}
    assert any("jobs_built" in str(tuple(step)) for step in plan)  # looked up, not a scan of every row


ARCHS = [  # (report, abi, what wheel_archs gives)
    ('{"sass": ["9.0"], "ptx": ["9.0"]}', '{"window": {"text": "loads on torch 2.14-2.14"}}',
     ('["9.0"]', '["9.0"]', "loads on torch 2.14-2.14")),
    ('{"sass": ["8.0", "9.0"]}', None, ('["8.0","9.0"]', None, None)),
    ('{"sass": []}', "not json", ("[]", None, None)),
    ('{"sass": ["9.0"]}', '{"window": "a text, not a record"}', ('["9.0"]', None, None)),
    ('{"ptx": ["9.0"]}', None, None),  # no SASS recorded: none
    ("not json", None, None),
    ("[1, 2]", None, None),
    (b"\x00\xff", b"\x00", None),  # BLOBs
    (None, None, None),
]


def test_wheel_archs_come_from_the_index_of_built_jobs(tmp_path: Path) -> None:
    """Each row's GPU code and window as the JSON holds them, NULL where it is damaged; the built jobs' index is
    what SQLite reads (one created in a ledger from before it, too), not the rows' JSON."""
    path = tmp_path / "ledger.sqlite"
    rows: list[dict[str, object]] = [
        {"job_id": f"j{n}", "status": "built", "wheel": f"w{n}.whl", "report": report, "abi": abi}
        for n, (report, abi, _) in enumerate(ARCHS)
    ]
    rows.append({"job_id": "failed", "status": "failed", "wheel": "f.whl", "report": ARCHS[0][0]})
    _ledger(path, rows)
    with sqlite3.connect(path) as db:  # a ledger written before the index was
        db.execute("DROP INDEX jobs_built")
    with Ledger(path) as ledger:
        found = ledger.wheel_archs()
        columns = ", ".join(ledger_module._BUILT_FACTS.values())
        plan = ledger._db.execute(f"EXPLAIN QUERY PLAN SELECT wheel, {columns} FROM jobs WHERE status = 'built'")
        steps = " ".join(str(tuple(step)) for step in plan.fetchall())
    assert found == {f"w{n}.whl": expected for n, (_, _, expected) in enumerate(ARCHS) if expected is not None}
    assert "jobs_built" in steps and "SCAN jobs" not in steps
