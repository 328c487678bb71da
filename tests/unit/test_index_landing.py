"""The landing grid: rows per variant (newest torch first, CUDA before ROCm), a column per Python, and each cell
built with its install command, failed with the ledger's reason, or absent."""

from __future__ import annotations

from builder.core.ledger import LedgerEntry
from index_site.catalog import Catalog, ScanStats
from index_site.landing import build_landing
from tests.wheelfactory import indexed_wheel


def _failure(label: str, python: str, *, status: str = "failed", reason: str | None = "nvcc exploded") -> LedgerEntry:
    return LedgerEntry(
        job_id=f"causal-conv1d-1.7.0+{label}-cp{python.replace('.', '')}-x86_64",
        package="causal-conv1d",
        version="1.7.0",
        label=label,
        torch="2.14.1",
        accelerator="cu130",
        python=python,
        input_hash="0" * 64,
        status=status,
        phase="compile",
        reason=reason,
    )


WHEELS = (
    indexed_wheel("causal_conv1d-1.7.0+pt24rocm61-cp311-cp311-linux_x86_64.whl", "1"),
    indexed_wheel("causal_conv1d-1.7.0+pt213cu130-cp311-cp311-linux_x86_64.whl", "2"),
    indexed_wheel("causal_conv1d-1.7.0+pt214cu126-cp311-cp311-linux_x86_64.whl", "3"),
    indexed_wheel("causal_conv1d-1.7.0+pt214cu130-cp312-cp312-linux_x86_64.whl", "4"),
    indexed_wheel("causal_conv1d-1.6.1+pt214cu130-cp311-cp311-linux_x86_64.whl", "5"),
)


def _landing(*failures: LedgerEntry):
    return build_landing(
        Catalog(wheels=WHEELS, rejected=(), failures=failures, stats=ScanStats()), base_url="https://w.example/"
    )


def test_rows_newest_torch_first_cuda_before_rocm_and_releases_newest_first() -> None:
    landing = _landing()
    assert [(r.project, r.version) for r in landing.releases] == [
        ("causal-conv1d", "1.7.0"),
        ("causal-conv1d", "1.6.1"),
    ]
    labels = [row.variant.label for row in landing.releases[0].rows]
    assert labels == ["pt214cu130", "pt214cu126", "pt213cu130", "pt24rocm61"]
    assert landing.torches == ("2.14", "2.13", "2.4")
    assert landing.accelerators == ("cu130", "cu126", "rocm6.1")


def test_cells_are_built_with_command_or_absent() -> None:
    release = _landing().releases[0]
    assert release.pythons == ("3.11", "3.12")
    row = release.rows[0]  # pt214cu130
    absent, built = row.cells
    assert absent.state == "absent"
    assert built.state == "built"
    only_binary = "pip install --only-binary causal-conv1d causal-conv1d==1.7.0"
    assert built.command == f"{only_binary} -f https://w.example/whl/pt214cu130.html"
    assert built.wheels[0].href == "whl/pt214cu130.html"  # the variant page: the landing page links no wheel


def test_failed_cells_carry_the_ledger_reason_and_a_built_wheel_wins() -> None:
    release = _landing(
        _failure("pt214cu130", "3.13", reason="nvcc fatal: sm_120"),
        _failure("pt214cu130", "3.12", reason="an old failure, since rebuilt"),
        _failure("pt212cu118", "3.11", status="unbuildable", reason=None),
    ).releases[0]
    assert release.pythons == ("3.11", "3.12", "3.13")
    cells = {(row.variant.label, cell.python): cell for row in release.rows for cell in row.cells}
    failed = cells[("pt214cu130", "3.13")]
    assert (failed.state, failed.status, failed.phase, failed.reason) == (
        "failed",
        "failed",
        "compile",
        "nvcc fatal: sm_120",
    )
    assert cells[("pt214cu130", "3.12")].state == "built"
    assert cells[("pt212cu118", "3.11")].reason == "no reason recorded"
    assert [e.python for e in release.failures] == ["3.11", "3.13"]
    no_wheels = next(row.variant for row in release.rows if row.variant.label == "pt212cu118")
    assert no_wheels.findlinks == ""  # no page to link for a variant that only failed


def test_a_ledger_row_with_a_hostile_label_is_left_out() -> None:
    landing = _landing(_failure('pt214cu130"><script>', "3.11"))
    assert all('"' not in row.variant.label for release in landing.releases for row in release.rows)
