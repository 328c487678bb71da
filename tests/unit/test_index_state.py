"""The index state's rows (index_site/state.py): kept by release, each read back under its own release, whatever
release key its stored value sits under."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from index_site.state import IndexState, WheelRow

WHEELS = ["causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl",
          "causal_conv1d-1.7.0+pt214cu130-cp312-cp312-linux_x86_64.whl",
          "causal_conv1d-1.8.0+pt214cu130-cp311-cp311-linux_x86_64.whl",
          "causal_conv1d-1.8.0-cp311-cp311-linux_x86_64.whl"]  # refused (no label), kept under its release too


def _row(filename: str, inode: int) -> WheelRow:
    return WheelRow(filename, inode, 1, 2, 3, "content", "", "0" * 64, "1" * 64, 10, None, None, 0.0, None, "")


@pytest.mark.parametrize("stored_under", [
    None,  # as written
    "causal_conv1d-1.7.0",  # another release's key: its rows are of 1.7.0 and 1.8.0
    "causal_conv1d",  # not a release key of one name and one version
    "causal_conv1d-1.8.0+pt214cu130",
])
def test_each_row_is_read_back_under_its_own_release(tmp_path: Path, stored_under: str | None) -> None:
    path = tmp_path / "index.sqlite"
    with IndexState(path) as state:
        state.write(wheels=[_row(name, inode) for inode, name in enumerate(WHEELS)])
    if stored_under is not None:
        with sqlite3.connect(path) as db:
            value = db.execute("SELECT rows FROM wheels WHERE release = 'causal_conv1d-1.8.0'").fetchone()[0]
            db.execute("DELETE FROM wheels WHERE release = 'causal_conv1d-1.8.0'")
            db.execute("INSERT OR REPLACE INTO wheels VALUES (?, ?, 's')", (stored_under, value))
            if stored_under == "causal_conv1d-1.7.0":  # both releases' rows under one key
                db.execute("DELETE FROM wheels WHERE release = ?", (stored_under,))
                rows = [_row(name, inode) for inode, name in enumerate(WHEELS)]
                import msgspec

                db.execute("INSERT INTO wheels VALUES (?, ?, 's')", (stored_under, msgspec.msgpack.encode(rows)))
    with IndexState(path) as state:
        assert {name: row.inode for name, row in state.wheels().items()} == {n: i for i, n in enumerate(WHEELS)}
        # a release holding rows stored under another key has no stamp: nothing is kept of it (summaries.py)
        assert ("causal_conv1d-1.8.0" in state.stamps("wheels")) == (stored_under is None)
        state.write(wheels_gone=[WHEELS[2]])  # its release's rows are written again, without it
        assert "causal_conv1d-1.8.0" in state.stamps("wheels")
    with IndexState(path) as state:
        assert sorted(state.wheels()) == sorted(WHEELS[:2] + WHEELS[3:])
        assert "causal_conv1d-1.8.0" in state.stamps("wheels")


def test_the_shared_column_getters_take_the_same_fields_of_either_row() -> None:
    from index_site.state import FILENAME, ROW_IDENTITY, TwinRow

    wheel = _row(WHEELS[0], 7)
    twin = TwinRow("t.whl", 8, 9, 10, 11, WHEELS[0], "7:1:2:3", "", "", "", 0, None, "", 0, "{}")
    assert (FILENAME(wheel), ROW_IDENTITY(wheel)) == (wheel.filename, wheel.identity)
    assert (FILENAME(twin), ROW_IDENTITY(twin)) == (twin.filename, twin.identity)


def _pages_damaged(state: Path) -> None:
    """Bytes of every page but the first (the header) overwritten: the file opens, its tables do not read."""
    data = bytearray(state.read_bytes())
    for page in range(4096, len(data), 4096):
        data[page + 50 : page + 300] = bytes(range(250))
    state.write_bytes(bytes(data))


def _meta_of_another_schema(state: Path) -> None:
    with sqlite3.connect(state) as db:
        db.execute("DROP TABLE meta")
        db.execute("CREATE TABLE meta (key TEXT, value INTEGER, extra)")
        db.execute("INSERT INTO meta VALUES ('checks', x'ff00', 1)")


@pytest.mark.parametrize("damage", [_pages_damaged, _meta_of_another_schema], ids=["pages", "meta-of-another-schema"])
def test_a_state_found_damaged_once_open_costs_a_cold_run(
    tmp_path: Path, damage: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    """A state that opens but does not read (damaged pages, a table not of its schema) is set aside and the run
    indexes cold, as one that does not open is: it holds only what a cold run learns again. It used to end every
    run with an ERROR line naming the ledger."""
    from index_site.stage import build_site
    from index_site.state import STATE_FILE
    from scripts.bench.wheels import WheelSpec, make_wheel

    for python in ("cp311", "cp312"):
        make_wheel(tmp_path / "dist", WheelSpec(label="pt214cu130", python=python))
    for _ in range(2):
        build_site(tmp_path, tmp_path / "site", base_url="https://wheels.example.org")
    damage(tmp_path / STATE_FILE)
    report = build_site(tmp_path, tmp_path / "site", base_url="https://wheels.example.org")
    assert report.wheels == 2 and report.stats.cached == 0  # every wheel judged again: a cold run
    assert any("the index state is damaged" in record.getMessage() for record in caplog.records)
    again = build_site(tmp_path, tmp_path / "site", base_url="https://wheels.example.org")
    assert again.stats.cached == 2 and again.written == ()
