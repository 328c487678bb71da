"""What a run works out of each release is kept for the next (index_site/summaries.py) and used only while the
release's rows are the ones it was worked out from, and the code the same: anything else works it out again."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from index_site.state import IndexState, TwinRow, WheelRow
from index_site.summaries import Summaries, text_map
from tests.index_checks import site_files

RELEASE, OTHER = "causal_conv1d-1.7.0", "causal_conv1d-1.8.0"


def _row(filename: str, inode: int, ctime: int = 3) -> WheelRow:
    return WheelRow(filename, inode, 1, 2, ctime, "content", "", "0" * 64, "1" * 64, 10, None, None, 0.0, None, "")


ROWS = [_row(f"{RELEASE}+pt214cu130-cp311-cp311-linux_x86_64.whl", 1),
        _row(f"{OTHER}+pt214cu130-cp311-cp311-linux_x86_64.whl", 2),
        _row(f"{RELEASE}+pt214cu130-cp312-cp312-linux_x86_64.whl", 3)]


class _Work:
    """A part's work, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, str]:
        self.calls += 1
        return {"pt214cu130": f"digest {self.calls}"}


def _part(path: Path, code: str = "code", release: str = RELEASE) -> tuple[dict[str, str], int]:
    """The part of ``release`` as a new run takes it, and whether it was worked out (1) or kept (0); then saved."""
    work = _Work()
    with IndexState(path) as state:
        summaries = Summaries(state, code)
        value = summaries.part(release, "cells", summaries.key("wheels", release), work, text_map)
        summaries.save()
    return value, work.calls


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "index.sqlite"
    with IndexState(path) as opened:
        opened.write(wheels=ROWS)
    assert _part(path)[1] == 1  # worked out, and kept
    return path


def _damage(path: Path, value: bytes) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE summaries SET parts = ? WHERE release = ?", (value, RELEASE))


MOVES: dict[str, Callable[[Path], object]] = {
    "row-rewritten": lambda path: _write(path, wheels=[ROWS[0]._replace(sha256="2" * 64)]),
    "row-added": lambda path: _write(path, wheels=[_row(f"{RELEASE}+pt214cu130-cp313-cp313-linux_x86_64.whl", 5)]),
    "row-gone": lambda path: _write(path, wheels_gone=[ROWS[0].filename]),
    "ctime-moved-by-a-link": lambda path: _refresh(path),
    "state-forgotten": lambda path: _forget(path),
    "damaged": lambda path: _damage(path, b"\xc1\xff not msgpack"),
    "another-kind": lambda path: _retyped(path),  # its key as kept, its value not a {text: text} map
}


def _retyped(path: Path) -> None:
    with sqlite3.connect(path) as db:
        stored = db.execute("SELECT parts FROM summaries WHERE release = ?", (RELEASE,)).fetchone()[0]
    parts = msgspec.msgpack.decode(stored)
    parts["cells"][1] = {"pt214cu130": 7}
    _damage(path, msgspec.msgpack.encode(parts))


def _write(path: Path, **changes: list[WheelRow] | list[str]) -> None:
    with IndexState(path) as state:
        state.write(**changes)  # type: ignore[arg-type]


def _refresh(path: Path) -> None:
    with IndexState(path) as state:
        state.refresh({ROWS[0].filename: (ROWS[0].identity, (*ROWS[0].identity[:3], 99))})


def _forget(path: Path) -> None:
    with IndexState(path) as state:
        state.forget_all({})
        state.write(wheels=ROWS)


def test_a_part_is_kept_while_its_release_rows_and_the_code_hold(state: Path) -> None:
    assert _part(state) == ({"pt214cu130": "digest 1"}, 0)
    _write(state, wheels=[ROWS[1]._replace(sha256="3" * 64)])  # another release's rows moved: not this one's
    assert _part(state)[1] == 0
    assert _part(state, code="new code")[1] == 1


@pytest.mark.parametrize("move", list(MOVES))
def test_anything_that_moves_the_rows_works_the_part_out_again(state: Path, move: str) -> None:
    MOVES[move](state)
    assert _part(state)[1] == 1
    assert _part(state)[1] == 0  # and keeps it for the next run


def test_a_release_with_rows_not_read_as_stored_is_worked_out_and_not_kept(state: Path) -> None:
    with sqlite3.connect(state) as db:  # its rows stored under another release's key (misfiled)
        value = db.execute("SELECT rows FROM wheels WHERE release = ?", (RELEASE,)).fetchone()[0]
        db.execute("DELETE FROM wheels WHERE release = ?", (RELEASE,))
        db.execute("INSERT INTO wheels VALUES ('causal_conv1d', ?, 's')", (value,))
    work = _Work()
    with IndexState(state) as opened:
        summaries = Summaries(opened, "code")
        assert summaries.key("wheels", RELEASE) is None
        summaries.part(RELEASE, "cells", summaries.key("wheels", RELEASE), work, text_map)
        summaries.save()
    assert work.calls == 1


def test_the_parts_of_a_release_without_rows_go_with_the_next_save(state: Path) -> None:
    assert _part(state, release=OTHER)[1] == 1
    _write(state, wheels_gone=[ROWS[0].filename, ROWS[2].filename])
    _part(state, release=OTHER)  # nothing of OTHER moved: kept, nothing saved
    with IndexState(state) as opened:
        assert set(opened.summaries()) == {RELEASE, OTHER}
    _write(state, wheels=[ROWS[1]._replace(sha256="4" * 64)])
    _part(state, release=OTHER)  # worked out again: saved, and RELEASE, without rows now, dropped
    with IndexState(state) as opened:
        assert set(opened.summaries()) == {OTHER}


def test_the_parts_of_a_release_with_twin_rows_alone_stay(state: Path) -> None:
    """A release whose wheel rows are gone but whose twin rows are not still holds rows: its parts stay."""
    _write(state, twins=[TWIN])
    with IndexState(state) as opened:
        summaries = Summaries(opened, "code")
        summaries.part(RELEASE, "twins", summaries.key("twins", RELEASE), _Work(), text_map)
        summaries.save()
    _write(state, wheels_gone=[ROWS[0].filename, ROWS[2].filename])
    _write(state, wheels=[ROWS[1]._replace(sha256="4" * 64)])
    assert _part(state, release=OTHER)[1] == 1  # saved: the releases without rows dropped, RELEASE not among them
    with IndexState(state) as opened:
        assert set(opened.summaries()) == {RELEASE, OTHER}
    _write(state, twins_gone=[TWIN.filename])
    _write(state, wheels=[ROWS[1]._replace(sha256="6" * 64)])
    _part(state, release=OTHER)
    with IndexState(state) as opened:
        assert set(opened.summaries()) == {OTHER}


def _agreement(path: Path) -> int:
    """Whether a new run worked out again (1) or kept (0) a part of both the release's wheel and twin rows."""
    work = _Work()
    with IndexState(path) as state:
        summaries = Summaries(state, "code")
        summaries.part(RELEASE, "twins agree", summaries.key_of_both(RELEASE), work, text_map)
        summaries.save()
    return work.calls


TWIN = TwinRow(f"{RELEASE}-cp311-cp311-linux_x86_64-pt214cu130.whl", 9, 1, 2, 3, ROWS[0].filename, "1:1:2:3", "",
               "0" * 64, "1" * 64, 10, None, "", 0, "{}")


@pytest.mark.parametrize("table", ["wheels", "twins"])
def test_a_part_of_both_tables_is_worked_out_again_when_either_moves(state: Path, table: str) -> None:
    assert _agreement(state) == 1  # no twin rows yet: no key, nothing kept
    _write(state, twins=[TWIN])
    assert (_agreement(state), _agreement(state)) == (1, 0)
    if table == "wheels":
        _write(state, wheels=[ROWS[2]._replace(sha256="5" * 64)])
    else:
        _write(state, twins=[TWIN._replace(wheel_identity="1:1:2:4")])
    assert (_agreement(state), _agreement(state)) == (1, 0)




@pytest.mark.parametrize("value", [{"pt214cu130": 7}, "maybe", [1, 2], 3.5], ids=["numbers", "text", "list", "float"])
def test_kept_parts_of_another_shape_are_worked_out_again(tmp_path: Path, value: object) -> None:
    """A state whose kept parts hold their keys but values of another shape (damaged, or written by other code):
    each is worked out again, and the site ends as a cold index of the same files leaves it. (A value of the same
    shape is taken as a row is: the state is the index's own file, trusted while the stamps hold.)"""
    from builder.steps.twins import VariantTwins
    from index_site.stage import build_site
    from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
    from tests.jobs import local_job

    job = local_job()
    (tmp_path / "dist").mkdir()
    with_provenance(job_wheel(tmp_path / "dist", job, {"causal_conv1d/__init__.py": b"x = 1\n"}), job)
    make_wheel(tmp_path / "dist", WheelSpec(version="1.6.0", label="pt213cu130"))

    def index(root: Path) -> None:
        build_site(root, root / "site", base_url="https://wheels.example.org", twins=VariantTwins())

    index(tmp_path)
    make_wheel(tmp_path / "dist", WheelSpec(version="1.8.0"))
    index(tmp_path)  # the releases' parts kept, with the stamps their rows have now
    with sqlite3.connect(tmp_path / "index.sqlite") as db:
        kept = db.execute("SELECT release, parts FROM summaries").fetchall()
        assert kept
        for release, stored in kept:
            parts = {name: [key, value] for name, (key, _) in msgspec.msgpack.decode(stored).items()}
            db.execute("UPDATE summaries SET parts = ? WHERE release = ?", (msgspec.msgpack.encode(parts), release))
    make_wheel(tmp_path / "dist", WheelSpec(version="1.9.0"))
    index(tmp_path)
    cold = tmp_path / "cold"
    shutil.copytree(tmp_path / "dist", cold / "dist")
    index(cold)
    assert site_files(tmp_path / "site") == site_files(cold / "site")
