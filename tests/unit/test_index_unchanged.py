"""The unchanged re-index: when the index state's catalogue, the ledger's failures and archs, the base URL and the
code are those of the last complete run into a site, and the site is as that run left it (its manifest the file it
wrote, no entry of any of its folders added, taken out or renamed), the run reads no manifest and plans nothing.
Anything else plans the site again, which then equals a cold index of the same folder, file for file."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.ledger import Ledger, LedgerEntry
from index_site import site as site_module
from index_site import stage
from index_site.layout import SITE_MARKER
from index_site.stage import build_site
from index_site.state import STATE_FILE, IndexState
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import site_files

BASE = "https://wheels.example.org"


@pytest.fixture
def output(tmp_path: Path) -> Path:
    for spec in (WheelSpec(python="cp311"), WheelSpec(python="cp312"), WheelSpec(label="pt213cu130")):
        make_wheel(tmp_path / "dist", spec)
    build_site(tmp_path, tmp_path / "site", base_url=BASE)
    return tmp_path


def test_an_unchanged_run_reads_no_manifest_and_plans_nothing(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise AssertionError("the site was planned although nothing moved")

    monkeypatch.setattr(site_module, "recorded_manifest", fail)
    report = build_site(output, output / "site", base_url=BASE)
    assert report.written == () and report.deleted == () and report.unchanged == len(site_files(output / "site"))


def _failure(output: Path) -> None:
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(job_id="causal-conv1d-1.7.0-pt212cu126-py3.11", package="causal-conv1d",
                               version="1.7.0", label="pt212cu126", torch="2.12", accelerator="cu126", python="3.11",
                               input_hash="h", status="failed", phase="compile", reason="nvcc: out of memory"))


def _marker(output: Path) -> None:
    marker = output / "site" / SITE_MARKER
    document = json.loads(marker.read_bytes().split(b"\n")[0])
    marker.write_text(json.dumps({**document, "files": {}}))


# (case, what moves, whether the next run must write something)
MOVES: list[tuple[str, Callable[[Path], object], bool]] = [
    ("page-deleted", lambda out: (out / "site/select/pt214cu130-cp311.html").unlink(), True),
    ("stray-file-added", lambda out: (out / "site/whl/pt214cu130/stray.html").write_text("x"), True),
    ("folder-removed", lambda out: shutil.rmtree(out / "site/whl/pt213cu130"), True),
    ("managed-name-added", lambda out: (out / "site/coverage").mkdir(), False),
    ("manifest-rewritten", _marker, False),
    ("failure-recorded", _failure, True),
    ("state-deleted", lambda out: (out / STATE_FILE).unlink(), False),
    ("wheel-added", lambda out: make_wheel(out / "dist", WheelSpec(version="1.8.0")), True),
    ("wheel-removed", lambda out: next((out / "dist").glob("*pt213cu130*")).unlink(), True),
]


@pytest.mark.parametrize(("move", "writes"), [m[1:] for m in MOVES], ids=[m[0] for m in MOVES])
def test_anything_that_moved_plans_the_site_again_and_it_ends_as_a_cold_index(
    output: Path, move: Callable[[Path], object], writes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[Path] = []
    real = site_module.recorded_manifest
    monkeypatch.setattr(site_module, "recorded_manifest", lambda site: planned.append(site) or real(site))
    move(output)
    report = build_site(output, output / "site", base_url=BASE)
    assert planned == [output / "site"]
    assert bool(report.written or report.deleted) or not writes
    build_site(output, output / "cold", base_url=BASE)
    assert site_files(output / "site") == site_files(output / "cold")
    planned.clear()
    build_site(output, output / "site", base_url=BASE)  # and the run after that is an unchanged one again
    assert planned == []


def test_another_base_url_plans_the_site_again(output: Path) -> None:
    report = build_site(output, output / "site", base_url="https://elsewhere.example.org")
    assert "index.html" in report.written




def test_one_added_wheel_stats_no_file_of_a_folder_nothing_moved_in(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folders the last complete run recorded, still with their identities, are taken as it left them: their
    files' records are not checked one by one (a wheel in whl/pt214cu130 leaves whl/pt213cu130 alone)."""
    checked: list[str] = []
    real = site_module.holds_identity
    monkeypatch.setattr(site_module, "holds_identity", lambda path, known: checked.append(path) or real(path, known))
    make_wheel(output / "dist", WheelSpec(python="cp313"))
    report = build_site(output, output / "site", base_url=BASE)
    assert any("pt214cu130" in path for path in report.written)
    assert checked == []  # every folder was as recorded when the plan was made
    build_site(output, output / "cold", base_url=BASE)
    assert site_files(output / "site") == site_files(output / "cold")
    monkeypatch.setattr(site_module, "settled_folders", lambda *_: site_module.Settled())  # no record of the folders
    make_wheel(output / "dist", WheelSpec(python="cp310"))
    build_site(output, output / "site", base_url=BASE)
    assert [path for path in checked if "pt213cu130" in path]  # then each file's record is held to it


def _rewritten(output: Path) -> None:
    """A wheel rewritten in place under its name: its folder's entries do not change, only the file's identity."""
    wheel = next((output / "dist").glob("*pt213cu130*"))
    wheel.write_bytes(wheel.read_bytes())


def _stray(output: Path) -> None:
    (output / "dist" / "not-a-wheel.whl").mkdir()


# (case, what moves): each must make the next run judge every file by its row again
QUIET_BREAKERS: list[tuple[str, Callable[[Path], object]]] = [
    *((case, move) for case, move, _ in MOVES),
    ("wheel-rewritten-in-place", _rewritten),
    ("stray-folder-in-dist", _stray),
    ("ledger-archs-recorded", lambda out: _archs(out)),
]


def _archs(output: Path) -> None:
    wheel = next((output / "dist").glob("*pt213cu130*")).name
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(job_id="causal-conv1d-1.7.0-pt213cu130-py3.11", package="causal-conv1d",
                               version="1.7.0", label="pt213cu130", torch="2.13", accelerator="cu130", python="3.11",
                               input_hash="h", status="built", wheel=wheel, report='{"sass": ["9.0"], "ptx": []}'))


def test_a_quiet_run_reads_no_row_and_reports_what_the_full_run_reports(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing moved, not even a file of dist/, the run takes the last complete run's summary: one stat per
    file, no row of the state read, and the very report a run that judges every file by its row makes."""
    monkeypatch.setattr(stage, "quiet_run", lambda *_: (None, None))
    full = build_site(output, output / "site", base_url=BASE)
    monkeypatch.undo()
    build_site(output, output / "site", base_url=BASE)  # keeps the summary the quiet run takes
    monkeypatch.setattr(IndexState, "wheels", _no_rows)
    monkeypatch.setattr(IndexState, "twins", _no_rows)
    quiet = build_site(output, output / "site", base_url=BASE)
    assert dataclasses.replace(quiet, twins=full.twins, twins_published=full.twins_published) == full
    assert (quiet.twins.refused, quiet.twins.without, quiet.twins_published) == (
        full.twins.refused, full.twins.without, full.twins_published)


@pytest.mark.parametrize("move", [m[1] for m in QUIET_BREAKERS], ids=[m[0] for m in QUIET_BREAKERS])
def test_anything_that_moved_ends_the_quiet_runs(output: Path, move: Callable[[Path], object],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    build_site(output, output / "site", base_url=BASE)  # the summary is kept
    quiet: list[object] = []
    real = stage.quiet_run
    monkeypatch.setattr(stage, "quiet_run", lambda *args: quiet.append(real(*args)) or quiet[-1])
    build_site(output, output / "site", base_url=BASE)
    move(output)
    build_site(output, output / "site", base_url=BASE)
    assert quiet[0][0] is not None and quiet[1][0] is None  # quiet before the move, judged by the rows after it
    build_site(output, output / "cold", base_url=BASE)
    assert site_files(output / "site") == site_files(output / "cold")


def _no_rows(state: IndexState) -> None:
    raise AssertionError("a row was read although nothing moved")


@pytest.mark.parametrize("damage", [
    lambda kept: {**kept, "report": {"wheels": "many"}},  # a summary without its fields
    lambda kept: {**kept, "report": None},
    lambda kept: {**kept, "count": "x"},
], ids=["fields-missing", "no-summary", "bad-count"])
def test_a_damaged_summary_is_not_taken(output: Path, damage: Callable[[dict], dict]) -> None:
    """What the state keeps for the quiet run is only a shortcut: damaged, the run judges every row and reports
    what a full run reports."""
    full = build_site(output, output / "site", base_url=BASE)
    key = f"site:{(output / 'site').resolve()}"
    with IndexState(output / STATE_FILE) as state:
        record = json.loads(state.meta()[key])
        state.write(meta={key: json.dumps({**record, "quiet": damage(record["quiet"])})})
    again = build_site(output, output / "site", base_url=BASE)
    assert (again.wheels, again.variants, again.rejected, again.written) == (full.wheels, full.variants,
                                                                           full.rejected, ())
