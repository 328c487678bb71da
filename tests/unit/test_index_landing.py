"""The coverage model and the selector's setups: rows per variant (newest torch first, CUDA before ROCm), a column
per Python, each cell built, failed with the ledger's reason, n/a by the torch facts or not in the plan; one setup
per variant and Python torch shipped, with one exact command per project and choices that keep the other axes."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from builder.core.ledger import LedgerEntry
from index_site import layout
from index_site.catalog import Catalog
from index_site.landing import BUILT, FAILED, NOT_PLANNED, NOT_SHIPPED, build_coverage
from index_site.manifest import manifest, release_manifest
from index_site.pages import render_pages
from index_site.render import _render_page
from index_site.report import ScanStats
from index_site.setups import build_setups, default_setup
from index_site.wheels import GpuArchs
from scripts.bench.wheels import indexed_wheel


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
    indexed_wheel("causal_conv1d-1.7.0+pt213cu126-cp311-cp311-linux_x86_64.whl", "3"),
    indexed_wheel("causal_conv1d-1.7.0+pt214cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "4"),
    indexed_wheel("causal_conv1d-1.6.1+pt214cu130-cp311-cp311-linux_x86_64.whl", "5"),
)
ARCHS = {WHEELS[3].filename: GpuArchs(sass=("9.0", "12.0"), ptx=("12.0",))}


def _catalog(*failures: LedgerEntry) -> Catalog:
    return Catalog(wheels=WHEELS, rejected=(), failures=failures, stats=ScanStats(), archs=ARCHS)


def _cells(release) -> dict[tuple[str, str], object]:
    return {(row.variant.label, cell.python): cell for row in release.rows for cell in row.cells}


def test_rows_newest_torch_first_cuda_before_rocm_and_releases_newest_first() -> None:
    coverage = build_coverage(_catalog())
    assert [(r.project, r.version) for r in coverage.releases] == [
        ("causal-conv1d", "1.7.0"),
        ("causal-conv1d", "1.6.1"),
    ]
    assert [row.variant.label for row in coverage.releases[0].rows] == [
        "pt214cu130",
        "pt213cu130",
        "pt213cu126",
        "pt24rocm61",
    ]
    assert [(r.project, r.version) for r in coverage.newest()] == [("causal-conv1d", "1.7.0")]
    assert coverage.variants["pt24rocm61"].pythons == ("3.8", "3.9", "3.10", "3.11", "3.12")  # from the facts


def test_cells_distinguish_built_failed_not_shipped_and_not_planned() -> None:
    release = build_coverage(_catalog(_failure("pt214cu130", "3.13", reason="nvcc fatal: sm_121"))).releases[0]
    assert release.pythons == ("3.11", "3.12", "3.13")
    cells = _cells(release)
    assert cells[("pt214cu130", "3.12")].state == BUILT
    failed = cells[("pt214cu130", "3.13")]
    assert (failed.state, failed.failure.reason) == (FAILED, "nvcc fatal: sm_121")
    assert cells[("pt214cu130", "3.11")].state == NOT_PLANNED  # torch 2.14 shipped 3.11; the plan built only 1.6.1
    assert cells[("pt24rocm61", "3.13")].state == NOT_SHIPPED  # torch 2.4 never shipped Python 3.13
    assert [e.python for e in release.failures] == ["3.13"]


def test_a_built_wheel_wins_over_an_old_failure_and_a_ledger_row_over_the_facts() -> None:
    release = build_coverage(
        _catalog(_failure("pt214cu130", "3.12", reason="since rebuilt"), _failure("pt214cu130", "3.9"))
    ).releases[0]
    cells = _cells(release)
    assert cells[("pt214cu130", "3.12")].state == BUILT
    assert cells[("pt214cu130", "3.9")].state == FAILED  # torch 2.14 has no 3.9, but the ledger says it was tried
    assert [e.python for e in release.failures] == ["3.9"]


def test_ledger_rows_that_cannot_name_a_page_are_left_out() -> None:
    hostile = [
        _failure('pt214cu130"><script>', "3.11"),
        _failure("pt214cu130", "3.11/../../x"),
        LedgerEntry(**{**_failure("pt214cu130", "3.11").__dict__, "package": "../evil"}),
        LedgerEntry(**{**_failure("pt214cu130", "3.11").__dict__, "version": "not a version"}),
    ]
    coverage = build_coverage(_catalog(*hostile))
    assert all(not release.failures for release in coverage.releases)
    assert set(coverage.projects) == {"causal-conv1d"}


def test_setups_cover_every_python_torch_shipped_with_exact_commands() -> None:
    coverage = build_coverage(_catalog(_failure("pt214cu130", "3.13")))
    setups = build_setups(coverage, base_url="https://w.example/")
    assert layout.setup_path("pt214cu130", "3.12") == "select/pt214cu130-cp312.html"
    assert {p for p in setups if p.startswith("select/pt214cu130-")} == {
        *(f"select/pt214cu130-cp3{minor}.html" for minor in range(10, 15)),
        "select/pt214cu130-cp314t.html",  # torch 2.14 ships the free-threaded 3.14 too: a setup of its own
    }
    offer = setups["select/pt214cu130-cp312.html"].offers[0]
    findlinks = "https://w.example/whl/pt214cu130.html"
    assert offer.pip == f"pip install causal-conv1d==1.7.0+pt214cu130 -f {findlinks}"
    assert offer.uv == f"uv pip install causal-conv1d==1.7.0+pt214cu130 -f {findlinks}"
    older = setups["select/pt214cu130-cp311.html"].offers[0]
    assert older.pip.startswith("pip install causal-conv1d==1.6.1+pt214cu130 ")  # the newest built for 3.11
    failed = setups["select/pt214cu130-cp313.html"].offers[0]
    assert failed.pip == "" and "1.7.0 failed in compile: nvcc exploded" in failed.note
    nothing = setups["select/pt214cu130-cp310.html"].offers[0]
    assert nothing.wheel is None and "not in the build plan" in nothing.note


def test_choices_change_one_axis_and_keep_the_others_where_they_exist() -> None:
    setups = build_setups(build_coverage(_catalog()), base_url="https://w.example")
    setup = setups["select/pt213cu126-cp311.html"]
    torches = {c.text: c.path for c in setup.torches}
    assert torches == {
        "2.14": "select/pt214cu130-cp311.html",  # no cu126 for torch 2.14: its main variant
        "2.13": "select/pt213cu126-cp311.html",
        "2.4": "select/pt24rocm61-cp311.html",
    }
    assert [c.text for c in setup.torches if c.current] == ["2.13"]
    assert [(c.text, c.path) for c in setup.accelerators] == [
        ("CUDA 13.0", "select/pt213cu130-cp311.html"),
        ("CUDA 12.6", "select/pt213cu126-cp311.html"),
    ]
    on_38 = setups["select/pt24rocm61-cp38.html"]
    assert {c.text: c.path for c in on_38.torches}["2.14"] == "select/pt214cu130-cp310.html"  # nearest Python


def test_the_landing_page_starts_at_the_newest_torch_and_its_most_built_python() -> None:
    coverage = build_coverage(_catalog())
    setup = default_setup(coverage, build_setups(coverage, base_url="https://w.example"))
    assert setup is not None and setup.path == "select/pt214cu130-cp312.html"


def test_manifest_lists_each_release_with_its_wheel_count_and_the_url_of_its_file() -> None:
    document = json.loads(manifest([("causal-conv1d", "1.7.0", 3), ("mamba-ssm", "1!2.0", 1)], base_url="https://w.e/"))
    assert document["schema"] == 2 and document["base_url"] == "https://w.e"
    assert document["releases"] == [
        {
            "package": "causal-conv1d",
            "version": "1.7.0",
            "wheels": 3,
            "url": "https://w.e/wheels/causal-conv1d/1.7.0.json",
        },
        {"package": "mamba-ssm", "version": "1!2.0", "wheels": 1, "url": "https://w.e/wheels/mamba-ssm/1%212.0.json"},
    ]


def test_a_release_file_lists_every_wheel_with_its_variant_archs_digest_and_url() -> None:
    release = [w for w in WHEELS if (w.name.project, w.name.public_version) == ("causal-conv1d", "1.7.0")]
    document = json.loads(release_manifest("causal-conv1d", "1.7.0", release, ARCHS, base_url="https://w.example/"))
    assert (document["schema"], document["package"], document["version"]) == (2, "causal-conv1d", "1.7.0")
    assert [e["filename"] for e in document["wheels"]] == sorted(w.filename for w in release)
    entry = next(e for e in document["wheels"] if e["filename"] == WHEELS[3].filename)
    assert entry == {
        "filename": WHEELS[3].filename,
        "package": "causal-conv1d",
        "version": "1.7.0",
        "local_version": "1.7.0+pt214cu130",
        "label": "pt214cu130",
        "torch": "2.14",
        "accelerator": "cu130",
        "python": "3.12",
        "pythons": ["3.12"],
        "python_tag": "cp312",
        "abi_tag": "cp312",
        "platform_tag": "manylinux_2_28_x86_64",
        "requires_python": ">=3.9",
        "archs": {"sass": ["9.0", "12.0"], "ptx": ["12.0"]},
        "sha256": "4" * 64,
        "size": 12_345_678,
        "url": "https://w.example/whl/pt214cu130/causal_conv1d-1.7.0%2Bpt214cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "find_links": "https://w.example/whl/pt214cu130.html",
        "setup": "https://w.example/select/pt214cu130-cp312.html",
    }
    assert next(e for e in document["wheels"] if e["filename"] == WHEELS[0].filename)["archs"] is None


def _landing(catalog: Catalog) -> str:
    pages = render_pages(catalog, base_url="https://wheels.test", render=_render_page, only={layout.LANDING})
    return pages[layout.LANDING].decode()


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_the_landing_page_shows_the_uv_variant_channel_per_torch_minor_and_one_command_for_any_torch() -> None:
    page = _landing(_catalog())
    start = page.index('<section class="variant-channel"')
    block = _text(page[start : page.index("</section>", start)])
    command = next(line for line in block.splitlines() if line.startswith("uv pip install") and "$(" in line)
    assert command.startswith(
        'uv pip install --preview-features wheel-variants causal-conv1d --index-url "https://wheels.test/variant/$('
    )
    assert '{"pt214", "pt213"}' in command  # the site's CUDA channels, no ROCm-only torch
    per_torch = [line for line in block.splitlines() if line.startswith("torch 2.")]
    assert per_torch == [  # CUDA builds only (no installer picks ROCm twins), newest torch first; 2.4 is ROCm only
        f"torch 2.{minor}: uv pip install --preview-features wheel-variants causal-conv1d --index-url "
        f"https://wheels.test/variant/pt2{minor}/simple/"
        for minor in (14, 13)
    ]
    assert "serves torch 2.14" in block


def test_a_site_without_cuda_builds_shows_no_uv_block() -> None:
    rocm_only = Catalog(wheels=WHEELS[:1], rejected=(), failures=(), stats=ScanStats(), archs={})
    assert 'class="variant-channel"' not in _landing(rocm_only)
    assert 'class="variant-channel"' in _landing(_catalog())


def test_a_megabyte_summary_and_a_long_history_stay_out_of_the_pages_for_people(tmp_path: Path) -> None:
    """A Summary is cut to what a release's block shows, and a project's coverage page details its newest older
    versions only, naming how many more there are: neither page grows with what one METADATA or the farm's
    history holds (a 1 MB Summary made a 29 MB coverage page)."""
    from index_site.landing import SUMMARY_SHOWN
    from index_site.pages import OLDER_SHOWN
    from index_site.stage import build_site
    from scripts.bench.wheels import WheelSpec, make_wheel

    for minor in range(OLDER_SHOWN + 6):
        make_wheel(tmp_path / "dist", WheelSpec(version=f"1.{minor}.0", summary="x" * 1_000_000))
    build_site(tmp_path, tmp_path / "site", base_url="https://wheels.example.org")
    landing = (tmp_path / "site/index.html").read_text()
    coverage = (tmp_path / "site/coverage/causal-conv1d.html").read_text()
    assert "x" * SUMMARY_SHOWN not in landing and "x" * (SUMMARY_SHOWN - 1) + "…" in landing
    assert len(coverage) < 1_000_000 and coverage.count('<table class=cov') == OLDER_SHOWN
    assert "5 older versions not shown here" in coverage


def _platform_failure(label: str, python: str, platform: str) -> LedgerEntry:
    entry = _failure(label, python)
    return LedgerEntry(**{**entry.__dict__, "job_id": entry.job_id.removesuffix("-x86_64") + f"-{platform}"})


def test_a_cell_fails_when_any_platform_lacks_its_wheel_and_the_setup_says_which() -> None:
    aarch64 = indexed_wheel("causal_conv1d-1.7.0+pt214cu130-cp312-cp312-manylinux_2_28_aarch64.whl", "6")
    x86_failed = _platform_failure("pt214cu130", "3.12", "x86_64")
    aarch64_failed = _platform_failure("pt214cu130", "3.12", "aarch64")
    cases = {  # (wheels added, failures) -> state, platforms that failed
        "x86 wheel wins over its own failure": ((), (x86_failed,), BUILT, ()),
        "aarch64 failed, x86 built": ((), (aarch64_failed,), FAILED, ("aarch64",)),
        "both built, an aarch64 failure is older": ((aarch64,), (aarch64_failed,), BUILT, ()),
    }
    for name, (extra, failures, state, failed) in cases.items():
        catalog = Catalog(wheels=(*WHEELS, *extra), rejected=(), failures=failures, stats=ScanStats(), archs=ARCHS)
        coverage = build_coverage(catalog)
        cell = _cells(coverage.releases[0])[("pt214cu130", "3.12")]
        assert (cell.state, tuple(f.job_id.rsplit("-", 1)[1] for f in cell.failures)) == (state, failed), name
        assert len(cell.wheels) == 1 + len(extra), name  # a failed cell keeps the wheels of the platforms that built
    # x86's job failed, aarch64's built: the setup offers aarch64's command and says why x86 has none.
    wheels_without_x86 = tuple(w for w in (*WHEELS, aarch64) if w is not WHEELS[3])
    catalog = Catalog(wheels=wheels_without_x86, rejected=(), failures=(x86_failed,), stats=ScanStats(), archs=ARCHS)
    setup = build_setups(build_coverage(catalog), base_url="https://w.example")[layout.setup_path("pt214cu130", "3.12")]
    assert setup.platforms == ("x86_64", "aarch64")
    offer = setup.offers[0]
    assert offer.built_platforms == ("aarch64",)
    text, warn = offer.platform_note("x86_64")
    assert warn and text == "causal-conv1d 1.7.0 failed in compile: nvcc exploded on x86_64"
    assert offer.platform_note("aarch64") == (f"on aarch64 the command installs {aarch64.filename}", False)
