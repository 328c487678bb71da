"""SQLite as the ledger and the index state use it: how long a writer waits for another's lock, every failure as
one LedgerError naming the file, and one write transaction taken at once. Apart from the ledger's rows (ledger.py)
so that a run that only reads the index state imports no more than this."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from builder.core.errors import LedgerError
from builder.core.settings import setting_number


def lock_timeout() -> float:
    """How long to wait for another process's write transaction before saying so (WHEELWRIGHT_LEDGER_TIMEOUT)."""
    return setting_number("WHEELWRIGHT_LEDGER_TIMEOUT", at_least=0)


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Every SQLite failure on ``path`` as a LedgerError that says what is wrong with the file."""
    try:
        yield
    except sqlite3.OperationalError as error:
        text = str(error)
        if "locked" in text or "busy" in text:
            raise LedgerError(
                f"{path}: locked by another process for more than {lock_timeout():g} s",
                tip="wait for the other wheelwright run to finish (or raise WHEELWRIGHT_LEDGER_TIMEOUT)",
            ) from None
        raise LedgerError(f"{path}: cannot use the ledger: {text}", tip=TIP) from None
    except sqlite3.DatabaseError as error:  # corrupt, truncated, or not SQLite at all
        raise LedgerError(f"{path}: not a usable ledger: {error}", tip=TIP) from None


TIP = "move the file aside; `wheelwright build` records a new ledger (built wheels in dist/ are kept)"


@contextmanager
def write_transaction(
    db: sqlite3.Connection, path: Path, errors: Callable[[Path], AbstractContextManager[None]] = sqlite_errors
) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``db`` (the file ``path``), taken at once (BEGIN IMMEDIATE: a writer waits here, not
    halfway), committed at the end of the block and rolled back on any exception; SQLite's errors as ``errors`` says
    (the ledger's by default; the index state maps damage to a cold run)."""
    with errors(path):
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
