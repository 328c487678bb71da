"""causal-conv1d's own tests/test_causal_conv1d.py, from its sdist (--sdist-dir), against the installed wheel: no
failure or error, and upstream's counts ([upstream.expected] in the data file) of passed and skipped tests."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from scripts.gpu.data import AcceptanceData
from tests.gpu.options import Given
from tests.gpu.report import Recorded
from tests.gpu.suite import SuiteRun, imported_from, judge, parse_counts, run_suite, sdist_filename, unpack_tests

pytestmark = pytest.mark.gpu


@pytest.fixture
def scratch() -> Iterator[Path]:
    """Outside the checkout: no pytest configuration of ours above the tests."""
    folder = Path(tempfile.mkdtemp(prefix="ww-upstream-tests-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def check_suite(suite: SuiteRun, acceptance: AcceptanceData, version: str, *, quick: bool, imported: str,
                record: Recorded) -> None:
    """Stopped at its limit, failed, other counts than upstream's, or the tests saw the source: each fails."""
    counts = parse_counts(suite.output_tail)
    expected = acceptance.upstream.expected.get(version)
    ok, detail = (False, f"stopped at the time limit after {suite.seconds:.0f}s") if suite.returncode is None else (
        judge(counts, expected, quick=quick))
    if "site-packages" not in imported:
        ok, detail = False, f"{detail}; but causal_conv1d was imported from {imported}, not an installed wheel"
    record.detail = detail
    record.data.update(counts=counts, expected=expected.model_dump() if expected else None, quick=quick,
                       returncode=suite.returncode, seconds=round(suite.seconds, 1), imported_from=imported,
                       command=suite.command)
    assert ok, detail


def test_causal_conv1d_tests_from_its_sdist(
    acceptance: AcceptanceData, given: Given, record: Recorded, scratch: Path
) -> None:
    upstream = acceptance.upstream
    version = metadata.version(upstream.package).split("+")[0]  # the installed wheel picks the sdist and its counts
    root = unpack_tests(given.need("sdist_dir") / sdist_filename(upstream.package, version), upstream.tests, scratch)
    imported = imported_from(sys.executable, "causal_conv1d", root)
    suite = run_suite(sys.executable, root, upstream.tests, workers=given.workers,
                      select=upstream.quick_select if given.quick else None, timeout=given.suite_timeout,
                      log=given.suite_log or scratch / "pytest.log")
    print(suite.output_tail)
    check_suite(suite, acceptance, version, quick=given.quick, imported=imported, record=record)
