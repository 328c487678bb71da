"""The index renders again only the pages whose inputs moved (render.PageGroup, site.render_changed), and what it
leaves alone is still exactly what a full render would write: after every kind of change, the site's pages equal
render_site's bytes for the same catalog. The digests behind that must be the same in every process."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from builder.core.hashing import regular_identity
from builder.core.ledger import Ledger, LedgerEntry
from index_site import pages as pages_module
from index_site import records as records_module
from index_site import render as render_module
from index_site.catalog import scan
from index_site.layout import SITE_MARKER
from index_site.pages import people, setup_fingerprints
from index_site.records import load_groups, load_manifest
from index_site.render import render_site
from index_site.stage import build_site
from index_site.state import STATE_FILE
from index_site.wheels import GpuArchs
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import site_files

BASE = "https://wheels.example.org"
SPECS = [
    WheelSpec(label="pt214cu130", python="cp311"),
    WheelSpec(label="pt214cu130", python="cp312"),
    WheelSpec(label="pt213cu130", python="cp311"),
    WheelSpec(version="1.6.0", label="pt213cu130", python="cp311"),
    WheelSpec(project="mamba-ssm", version="2.3.2.post1", label="pt214cu130", python="cp311"),
]


@pytest.fixture
def output(tmp_path: Path) -> Path:
    for spec in SPECS:
        make_wheel(tmp_path / "dist", spec)
    build_site(tmp_path, tmp_path / "site", base_url=BASE)
    return tmp_path


def _failure(output: Path) -> None:
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(
            LedgerEntry(
                job_id="causal-conv1d-1.7.0-pt212cu126-py3.11",
                package="causal-conv1d",
                version="1.7.0",
                label="pt212cu126",
                torch="2.12",
                accelerator="cu126",
                python="3.11",
                input_hash="h",
                status="failed",
                phase="compile",
                reason="nvcc: out of memory",
            )
        )


def _archs(output: Path, sass: str = '["9.0"]') -> None:
    """The ledger records a wheel's GPU archs (its row in the index state does not move: the archs are the ledger's)."""
    wheel = next((output / "dist").glob("causal_conv1d-1.7.0+pt213cu130-cp311*"))
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(job_id="causal-conv1d-1.7.0-pt213cu130-py3.11", package="causal-conv1d",
                               version="1.7.0", label="pt213cu130", torch="2.13", accelerator="cu130", python="3.11",
                               input_hash="h", status="built", wheel=Path(wheel).name,
                               report=f'{{"sass": {sass}, "ptx": []}}'))


CHANGES: dict[str, Callable[[Path], object]] = {
    "new-release": lambda out: make_wheel(out / "dist", WheelSpec(version="1.8.0", label="pt214cu130")),
    "new-python": lambda out: make_wheel(out / "dist", WheelSpec(label="pt213cu130", python="cp312")),
    "new-variant": lambda out: make_wheel(out / "dist", WheelSpec(label="pt212cu126", python="cp311")),
    # 1.7 and 1.7.0 compare equal: their wheels interleave on a project's pages, one part of them (joined.py)
    "equal-version": lambda out: make_wheel(out / "dist", WheelSpec(version="1.7", python="cp313")),
    "wheel-removed": lambda out: next((out / "dist").glob("*1.6.0*")).unlink(),
    "wheel-rebuilt": lambda out: make_wheel(out / "dist", WheelSpec(label="pt214cu130", payload_bytes=4321)),
    "failure-recorded": _failure,
    "archs-recorded": _archs,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_any_change_the_pages_equal_a_full_render(output: Path, change: str) -> None:
    CHANGES[change](output)
    build_site(output, output / "site", base_url=BASE)
    catalog = scan(output / "dist", output / "ledger.sqlite")
    expected = render_site(catalog, base_url=BASE)
    site = output / "site"
    assert {path: (site / path).read_bytes() for path in expected} == expected


def test_archs_the_ledger_records_anew_render_their_wheels_pages_again(output: Path) -> None:
    """A wheel's archs are in the ledger, not in its row: what the index keeps of its release (summaries.py) for
    the next run holds for those archs only."""
    _archs(output)
    build_site(output, output / "site", base_url=BASE)
    build_site(output, output / "site", base_url=BASE)  # the release's parts kept, with these archs
    _archs(output, sass='["8.0", "9.0"]')
    build_site(output, output / "site", base_url=BASE)
    expected = render_site(scan(output / "dist", output / "ledger.sqlite"), base_url=BASE)
    site = output / "site"
    assert [path for path, content in expected.items() if (site / path).read_bytes() != content] == []
    assert any(b"8.0" in content for content in expected.values())


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_any_change_the_site_equals_a_cold_index_of_the_same_dist(output: Path, change: str) -> None:
    CHANGES[change](output)
    build_site(output, output / "site", base_url=BASE)
    build_site(output, output / "cold", base_url=BASE)
    incremental, cold = site_files(output / "site"), site_files(output / "cold")
    assert incremental.keys() == cold.keys()
    assert [path for path in cold if incremental[path] != cold[path]] == []


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_any_change_the_pages_equal_a_render_without_the_index_state(output: Path, change: str) -> None:
    """What the index state keeps from the last run (each file's identity, digest, metadata and verdict) is only a
    shortcut: a catalog made without it, every file judged again, renders the same bytes."""
    build_site(output, output / "site", base_url=BASE)
    CHANGES[change](output)
    build_site(output, output / "site", base_url=BASE)
    (output / STATE_FILE).unlink()
    catalog = scan(output / "dist", output / "ledger.sqlite")
    assert catalog.stats.cached == 0
    expected = render_site(catalog, base_url=BASE)
    site = output / "site"
    assert [path for path, content in expected.items() if (site / path).read_bytes() != content] == []


@pytest.mark.parametrize("appended", [False, True], ids=["whole", "appended"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_after_any_change_the_manifest_states_every_file_as_it_is(
    output: Path, change: str, appended: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest's entries are kept as text from the last write while their records are equal, and a change is
    appended as a line of what moved: after a change it still names every file of the site with its own digest and
    identity, each line in the bytes json.dumps gives."""
    if appended:  # five wheels: a change line is a good part of the manifest, more than its usual eighth
        monkeypatch.setattr(records_module, "_CHANGES_FRACTION", 1)
    CHANGES[change](output)
    build_site(output, output / "site", base_url=BASE)
    site = output / "site"
    lines = (site / SITE_MARKER).read_bytes().splitlines(keepends=True)  # the document, then its change lines
    assert len(lines) == (2 if appended else 1)
    assert [
        line for line in lines if line != (json.dumps(json.loads(line), separators=(",", ":")) + "\n").encode()
    ] == []
    records, files = load_manifest(site), site_files(site)
    assert records.keys() == files.keys()
    wrong = [
        path
        for path, record in records.items()
        if record.sha256 != hashlib.sha256(files[path]).hexdigest() or record.identity != regular_identity(site / path)
    ]
    assert wrong == []




def test_one_new_wheel_renders_its_own_setup_page_and_no_other(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered: list[str] = []
    real = pages_module._page

    def spy(render, template, page, coverage, **context):
        rendered.append(page)
        return real(render, template, page, coverage, **context)

    monkeypatch.setattr(pages_module, "_page", spy)
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    report = build_site(output, output / "site", base_url=BASE)
    setups = sorted(page for page in rendered if page.startswith("select/"))
    assert setups == ["select/pt213cu130-cp312.html"]
    assert "select/pt213cu130-cp312.html" in report.written
    assert sum(1 for key in load_groups(output / "site") if key.startswith("pages/select/")) >= 10


def test_nothing_changed_builds_no_model_of_the_pages_for_people(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the pages for people were arranged although nothing changed")

    monkeypatch.setattr(render_module, "people", fail)
    report = build_site(output, output / "site", base_url=BASE)
    assert report.written == ()


def test_a_setup_page_deleted_from_the_site_is_written_again(output: Path) -> None:
    page = output / "site/select/pt214cu130-cp311.html"
    content = page.read_bytes()
    page.unlink()
    report = build_site(output, output / "site", base_url=BASE)
    assert report.written == ("select/pt214cu130-cp311.html",)
    assert page.read_bytes() == content


def test_setup_fingerprints_hold_only_values_printed_the_same_in_every_process(output: Path) -> None:
    """A digest that differed between processes (a set's repr follows string hashes, which each process seeds
    anew) would render every setup page on every run."""

    def plain(value: object) -> bool:
        if isinstance(value, tuple):
            return all(plain(item) for item in value)
        if isinstance(value, GpuArchs):
            return plain(value.sass) and plain(value.ptx)
        return value is None or isinstance(value, str | int | float)

    _failure(output)
    model = people(scan(output / "dist", output / "ledger.sqlite"), base_url=BASE)
    fingerprints = [pages_module._fingerprint(setup, model.coverage.archs) for setup in model.setups.values()]
    assert len(fingerprints) >= 10 and all(plain(fingerprint) for fingerprint in fingerprints)
    assert list(setup_fingerprints(model).values()) == [repr(fingerprint) for fingerprint in fingerprints]


def test_pages_list_wheels_in_version_order_with_equal_versions_by_filename(tmp_path: Path) -> None:
    """render._ordered ranks each distinct version once; versions that compare equal (1.0, 1.0.0) share a rank."""
    for version in ("1.10", "1.0.0", "1.9", "1.0", "1.0rc1", "1.0.post1", "1.2"):
        make_wheel(tmp_path / "dist", WheelSpec(version=version, label="pt214cu130"))
    wheels = scan(tmp_path / "dist", tmp_path / "ledger.sqlite").wheels
    expected = sorted(wheels, key=lambda w: (w.name.project, Version(w.name.version), w.filename))
    assert [w.filename for w in render_module._ordered(reversed(wheels))] == [w.filename for w in expected]
    for given in (wheels[1::2], wheels, wheels[:3], wheels[::-1]):
        ordered = render_module._ordered(given)
        assert [w.filename for w in ordered] == [w.filename for w in expected if w in given]


@pytest.mark.parametrize("kept", [
    "",  # none kept yet
    '{"digest": "0000", "facts": "{}"}',  # kept for another facts file
    '{"digest": "DIGEST", "facts": "{\\"releases\\": 3}"}',  # damaged
    "[not json",
])
def test_the_index_reads_the_torch_facts_from_its_state_only_while_kept_for_today_s_file(
    output: Path, kept: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the state keeps of the torch facts serves while its digest is the facts file's; anything else (none,
    another file's, damaged) is read from the file again and kept anew, and the site is the same."""
    from builder.core import resources
    from index_site.catalog import RecordedFacts
    from index_site.state import IndexState

    digest = hashlib.sha256(resources.TORCH_FACTS.read_bytes()).hexdigest()
    with IndexState(output / STATE_FILE) as state:
        state.write(meta={"torch facts": kept.replace("DIGEST", digest)})
        assert RecordedFacts(state).facts().releases  # read from the file, and kept
        monkeypatch.setattr("builder.plan.facts.load_facts", _no_facts_file)
        assert RecordedFacts(state).facts() == RecordedFacts(state).facts()  # now from the state alone
        assert "2.14 cu130" in RecordedFacts(state).variants()


def _no_facts_file() -> None:
    raise AssertionError("the facts file was read although the state keeps its facts")
