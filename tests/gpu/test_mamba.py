"""mamba-ssm's kernels against its own reference implementations, forward and every input's gradient, in each dtype
and at the data file's shapes ([mamba] in scripts/data/gpu_acceptance.toml): the output and last state with
upstream's elementwise tolerances, every gradient within a normwise bound."""

from __future__ import annotations

import pytest

from scripts.gpu.data import AcceptanceData, load_acceptance
from tests.gpu.numerics import (
    InnerCase,
    ScanCase,
    inner_cases,
    recorded_verdict,
    run_inner_case,
    run_scan_case,
    scan_cases,
)
from tests.gpu.report import Recorded

pytestmark = pytest.mark.gpu
CASES = load_acceptance().mamba


@pytest.mark.parametrize("case", scan_cases(CASES.selective_scan), ids=lambda case: case.name)
def test_selective_scan_fn(case: ScanCase, acceptance: AcceptanceData, record: Recorded) -> None:
    mamba = acceptance.mamba
    failures = recorded_verdict(
        run_scan_case(case, mamba.selective_scan, mamba.tolerance, mamba.gradient_relative_error), record)
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("case", inner_cases(CASES.inner), ids=lambda case: case.name)
def test_mamba_inner_fn(case: InnerCase, acceptance: AcceptanceData, record: Recorded) -> None:
    mamba = acceptance.mamba
    failures = recorded_verdict(
        run_inner_case(case, mamba.inner, mamba.tolerance, mamba.gradient_relative_error), record)
    assert not failures, "; ".join(failures)
