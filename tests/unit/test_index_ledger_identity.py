"""The ledger's digest the index keys its runs on (inputs.read_ledger): taken from the index state while the
ledger's files keep the identities they had when it was read, read again after any commit to them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from builder.core import ledger as ledger_module
from builder.core.ledger import Ledger, LedgerEntry, Status
from index_site import catalog, inputs
from index_site.state import IndexState


def _put(path: Path, job: str, status: Status, reason: str | None = None) -> None:
    with Ledger(path) as ledger:
        ledger.put(LedgerEntry(job_id=job, package="causal-conv1d", version="1.7.0", label="pt214cu130",
                               torch="2.14.1", accelerator="cu130", python="3.11", input_hash="h", status=status,
                               reason=reason))


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    _put(path, "built", Status.BUILT)
    return path


def _digest(path: Path) -> str:
    with Ledger(path) as ledger:
        return inputs.ledger_digest(tuple(ledger.failures()), ledger.wheel_archs())


def test_the_recorded_digest_is_used_while_the_ledger_keeps_its_identity(
    ledger: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with IndexState(tmp_path / "index.sqlite") as state:
        first = inputs.read_ledger(ledger, state)
        assert first == _digest(ledger)
        assert inputs.read_ledger(ledger, state) == first  # settled: our own reads leave the files as they were
        monkeypatch.setattr(ledger_module, "Ledger", None)  # not opened again
        assert inputs.read_ledger(ledger, state) == first


@pytest.mark.parametrize("commit", ["a failure recorded", "a row removed", "the ledger replaced"])
def test_a_commit_to_the_ledger_is_read_again(ledger: Path, tmp_path: Path, commit: str) -> None:
    with IndexState(tmp_path / "index.sqlite") as state:
        before = inputs.read_ledger(ledger, state)
        if commit == "a failure recorded":
            _put(ledger, "failed", Status.FAILED, reason="nvcc exploded")
        elif commit == "a row removed":
            _put(ledger, "failed", Status.FAILED, reason="nvcc exploded")
            before = inputs.read_ledger(ledger, state)
            with Ledger(ledger) as open_ledger:
                open_ledger.remove("failed")
        else:
            other = tmp_path / "other.sqlite"
            _put(other, "failed", Status.FAILED, reason="out of memory")
            other.replace(ledger)
        after = inputs.read_ledger(ledger, state)
        assert after != before and after == _digest(ledger)


@pytest.mark.parametrize("recorded", ["not json", "[1, 2, 3]", "{}", '[[null, null], 5]', "null"])
def test_a_damaged_record_costs_a_read(ledger: Path, tmp_path: Path, recorded: str) -> None:
    with IndexState(tmp_path / "index.sqlite") as state:
        state.write(meta={inputs.LEDGER_KEY: recorded})
        assert inputs.read_ledger(ledger, state) == _digest(ledger)


def test_the_judge_records_the_identity_it_read_at(ledger: Path, tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    with IndexState(tmp_path / "index.sqlite") as state:
        judged = catalog.judge(tmp_path / "dist", ledger, state)
        with sqlite3.connect(tmp_path / "index.sqlite") as db:
            (recorded,) = db.execute("SELECT value FROM meta WHERE key = ?", (inputs.LEDGER_KEY,)).fetchone()
        assert json.loads(recorded) == [inputs.ledger_identity(ledger), judged.ledger]
