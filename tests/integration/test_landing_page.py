"""The landing page in real headless Chromium, on a site of the release plan's shape (scripts/bench/release.py: a
wheel for every job of `plan --profile release`, three injected failures, two jobs left out of the plan): the
selector gives the right command with JavaScript on and off, the matrices tell built, failed, n/a and not planned
apart, nothing scrolls sideways at 1400 or 390 px, axe-core finds no serious violation, and screenshots are kept
(under the test's tmp dir and build/test-artefacts/landing, or $WHEELWRIGHT_ARTEFACTS)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from builder.plan.accelerator import python_key
from builder.plan.facts import load_facts
from builder.plan.job import Job
from index_site.serve import serving
from index_site.stage import build_site
from tests.index_checks import fetch
from tests.release_site import BASE_URL, FAILURES, NOT_PLANNED, release_jobs, write_release_wheelhouse

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("WHEELWRIGHT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTEFACTS = Path(os.environ.get("WHEELWRIGHT_ARTEFACTS", ROOT / "build" / "test-artefacts")) / "landing"
WIDTHS = (1400, 390)
LANDING_BUDGET = 100_000  # bytes, HTML + CSS + JS, uncompressed


@dataclass(frozen=True, kw_only=True)
class ReleaseSite:
    site: Path
    url: str


@pytest.fixture(scope="module")
def release_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReleaseSite]:
    output = tmp_path_factory.mktemp("release-wheelhouse")
    write_release_wheelhouse(output)
    build_site(output, output / "site", base_url=BASE_URL)
    with serving(output / "site") as server:
        yield ReleaseSite(site=output / "site", url=server.url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: run scripts/install-system-deps.sh")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def axe_script() -> Path:
    """axe-core's axe.min.js, installed (once, pinned) by the project's own script."""
    result = subprocess.run(
        ["bash", ROOT / "scripts" / "install-axe.sh"], capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/install-axe.sh failed: {result.stderr.strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


def _page(browser: Browser, url: str, *, width: int = 1400, javascript: bool = True) -> Page:
    context = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=javascript)
    page = context.new_page()
    page.goto(url)
    return page


def _overflow(page: Page) -> int:
    """How far the document is wider than the window (0: no sideways scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def _command(page: Page) -> str:
    """The one command the selector shows (exactly one is visible)."""
    shown = page.locator("#selector .cmd:visible code")
    expect(shown).to_have_count(1)
    return " ".join(shown.inner_text().split())


def _expect_command(page: Page, command: str) -> None:
    """Wait for the selector to show ``command`` (the script swaps setups in asynchronously)."""
    expect(page.locator("#selector .cmd:visible code")).to_have_text(command)


def _note(page: Page) -> str:
    return " ".join(page.locator("#selector .note:visible").inner_text().split())


def _choose(page: Page, axis: str, text: str) -> None:
    """Pick a choice with the keyboard, as a keyboard user would."""
    link = page.locator(f'#selector .axis[aria-labelledby="ax-{axis}"]').get_by_role("link", name=text, exact=True)
    link.focus()
    page.keyboard.press("Enter")
    expect(page.locator(f'#selector .axis[aria-labelledby="ax-{axis}"] [aria-current]')).to_have_text(text)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scrolling_and_screenshots_kept(
    browser: Browser, release_site: ReleaseSite, width: int, tmp_path: Path
) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    for name, path in (("landing", ""), ("setup", "select/pt214cu130-cp313.html")):
        page = _page(browser, f"{release_site.url}/{path}", width=width)
        assert _overflow(page) == 0, f"{name} page scrolls sideways at {width} px"
        shot = tmp_path / f"{name}-{width}.png"
        page.screenshot(path=shot, full_page=True)
        assert shot.stat().st_size > 20_000
        shutil.copy(shot, ARTEFACTS / shot.name)
        if name == "landing":  # a failure's reason shown on focus must not widen the page either
            failed = page.locator("table.cov a.f").last
            failed.focus()
            expect(page.locator(f'[id="{failed.get_attribute("aria-describedby")}"]')).to_be_visible()
            assert _overflow(page) == 0
        page.context.close()


def test_landing_page_weighs_at_most_100_kb(release_site: ReleaseSite) -> None:
    size = (release_site.site / "index.html").stat().st_size
    assert size <= LANDING_BUDGET, f"landing page {size} bytes"


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
def test_selector_gives_one_command_per_setup(browser: Browser, release_site: ReleaseSite, javascript: bool) -> None:
    page = _page(browser, release_site.url + "/", javascript=javascript)
    # 1. The landing page starts at the newest torch and its variant.
    assert _command(page) == f"pip install causal-conv1d==1.7.0+pt215cu132 -f {BASE_URL}/whl/pt215cu132.html"
    # 2. Torch 2.12, ROCm 7.2, Python 3.10, chosen with the keyboard.
    _choose(page, "torch", "2.12")
    _choose(page, "accel", "ROCm 7.2")
    _choose(page, "python", "3.10")
    assert _command(page) == f"pip install causal-conv1d==1.7.0+pt212rocm72 -f {BASE_URL}/whl/pt212rocm72.html"
    if javascript:  # swapped in place: still the landing page, coverage and all, the choice in the fragment
        assert page.url == release_site.url + "/#pt212rocm72-cp310" and page.locator("table.cov").count() >= 2
        page.goto(release_site.url + "/#pt26cu118-cp311")
        _expect_command(page, f"pip install causal-conv1d==1.7.0+pt26cu118 -f {BASE_URL}/whl/pt26cu118.html")
        page.reload()  # a fresh load opens on the setup its fragment names, too
        _expect_command(page, f"pip install causal-conv1d==1.7.0+pt26cu118 -f {BASE_URL}/whl/pt26cu118.html")
    else:  # followed to the static page of that setup
        assert page.url == f"{release_site.url}/select/pt212rocm72-cp310.html"
    # 3. A setup page opened directly (what the doctor prints), then mamba-ssm with uv.
    page.goto(f"{release_site.url}/select/pt26cu124-cp39.html")
    page.locator("#selector label", has_text="mamba-ssm").click()
    page.locator("#inst-pip").focus()
    page.keyboard.press("ArrowRight")  # radio group: to uv
    assert _command(page) == f"uv pip install mamba-ssm==2.3.2.post1+pt26cu124 -f {BASE_URL}/whl/pt26cu124.html"
    # A failed setup says why instead of giving a command.
    page.goto(f"{release_site.url}/select/pt214cu130-cp313.html")
    expect(page.locator("#selector .cmd:visible")).to_have_count(0)
    assert "causal-conv1d 1.7.0 failed in compile: nvcc fatal : Unsupported gpu architecture" in _note(page)
    # ... on x86_64, where its job failed; its aarch64 twin built, and that platform's choice gives the command.
    page.locator("#selector label", has_text="aarch64").click()
    assert _command(page) == f"pip install causal-conv1d==1.7.0+pt214cu130 -f {BASE_URL}/whl/pt214cu130.html"
    assert _note(page).endswith("installs causal_conv1d-1.7.0+pt214cu130-cp313-cp313-manylinux_2_28_aarch64.whl")
    page.context.close()


def _expected_states() -> dict[tuple[str, str, str, str], str]:
    """(release anchor, torch, accelerator text, Python) -> state, from the plan, the injections and the facts: a
    cell is failed when the job of any of its CPU platforms failed (that platform's users have no wheel there)."""
    facts = load_facts()
    jobs = release_jobs()
    pythons = sorted({job.python for job in jobs}, key=python_key)
    failed = {f.job_id for f in FAILURES}
    states = {}
    for release in {(job.package, job.version) for job in jobs}:
        planned: dict[tuple[str, str], list[Job]] = {}
        for job in jobs:
            if (job.package, job.version) == release and job.identifier not in NOT_PLANNED:
                planned.setdefault((job.label, job.python), []).append(job)
        for label in {job.label for job in jobs if (job.package, job.version) == release}:
            job = next(j for j in jobs if (j.package, j.version, j.label) == (*release, label))
            kind = "CUDA" if job.accelerator.kind == "cuda" else "ROCm"
            for python in pythons:
                here = planned.get((label, python), [])
                if not here:
                    state = "n/a" if python not in facts.release(job.torch).python else "not planned"
                else:
                    state = "failed" if any(j.identifier in failed for j in here) else "built"
                key = (f"{release[0]}-{release[1]}", job.torch_minor, f"{kind} {job.accelerator.version}", python)
                states[key] = state
    return states


def _contrast(ink: str, background: str) -> float:
    """WCAG contrast ratio of two computed CSS colours (``rgb(r, g, b)``)."""

    def luminance(colour: str) -> float:
        channels = [int(part) / 255 for part in colour[colour.index("(") + 1 : -1].split(",")[:3]]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(ink), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


READ_MATRICES = """() => {
  const state = {b: "built", f: "failed", n: "n/a", u: "not planned"};
  const cells = {};
  for (const table of document.querySelectorAll("table.cov")) {
    const release = table.closest("section.release").id;
    const pythons = [...table.tHead.rows[0].cells].slice(2).map((th) => th.textContent);
    for (const body of table.tBodies) {
      const torch = body.rows[0].cells[0].textContent;
      for (const row of body.rows) {
        const headers = row.querySelectorAll("th");
        const accelerator = headers[headers.length - 1].textContent;
        [...row.querySelectorAll("td")].forEach((td, i) => {
          const mark = td.querySelector("a") || td;
          cells[[release, torch, accelerator, pythons[i]].join("|")] = {
            state: state[mark.className], text: mark.textContent,
            title: mark.closest("[title]")?.title || "",  // what a pointer over it shows: its own, else its row's
            href: mark.getAttribute("href") || "", tip: td.querySelector(".tip")?.textContent || "",
            color: getComputedStyle(mark).backgroundColor, ink: getComputedStyle(mark).color,
          };
        });
      }
    }
  }
  return cells;
}"""


def test_matrices_tell_built_failed_not_shipped_and_not_planned_apart(
    browser: Browser, release_site: ReleaseSite
) -> None:
    page = _page(browser, release_site.url + "/")
    cells = page.evaluate(READ_MATRICES)
    expected = _expected_states()
    assert {key: cell["state"] for key, cell in cells.items()} == {"|".join(k): v for k, v in expected.items()}
    by_state: dict[str, list[dict]] = {}
    for cell in cells.values():
        by_state.setdefault(cell["state"], []).append(cell)
    assert {s: len(c) for s, c in by_state.items()}["failed"] == len(FAILURES)
    assert len(by_state["not planned"]) >= len({job_id.rsplit("-", 1)[0] for job_id in NOT_PLANNED})
    # Each state has its own symbol and colour.
    assert {s: {c["text"] for c in cs} for s, cs in by_state.items()} == {
        "built": {"✓"},
        "failed": {"✗"},
        "n/a": {"n/a"},
        "not planned": {"–"},
    }
    assert len({cs[0]["color"] for cs in by_state.values()}) == 4
    # axe skips symbols ("non-text characters"), so check their contrast here: WCAG AA for text, 4.5:1.
    assert {s: _contrast(cs[0]["ink"], cs[0]["color"]) >= 4.5 for s, cs in by_state.items()} == dict.fromkeys(
        by_state, True
    )
    built = cells["causal-conv1d-1.7.0|2.14|CUDA 13.0|3.11"]
    assert built["href"] == "select/pt214cu130-cp311.html"
    # sm_103 is not there: the arch facts drop it for causal-conv1d <= 1.7.0 under nvcc 13.x (upstream #105)
    sass = "SASS 7.5 8.0 8.7 9.0 10.0 11.0 12.0 12.1; PTX none"  # each platform's wheel, x86_64 first
    assert built["title"] == f"manylinux_2_28_x86_64; {sass} | manylinux_2_28_aarch64; {sass}"
    assert cells["causal-conv1d-1.7.0|2.1|CUDA 11.8|3.9"]["title"].startswith("manylinux2014_x86_64; SASS 7.5")
    failed = cells["mamba-ssm-2.3.2.post1|2.6|ROCm 6.2.4|3.12"]
    assert failed["tip"] == "quarantined in verify: gpu-archs: no kernel image for gfx942"
    # The reason on hover and on focus, and in the list under the matrix.
    link = page.locator('section[id="mamba-ssm-2.3.2.post1"] a.f')
    tip = page.locator(f'[id="{link.get_attribute("aria-describedby")}"]')
    expect(tip).to_be_hidden()
    link.hover()
    expect(tip).to_be_visible()
    page.mouse.move(0, 0)
    link.focus()
    expect(tip).to_be_visible()
    listed = page.locator('section[id="mamba-ssm-2.3.2.post1"] .failures li').inner_text()
    assert "mamba-ssm-2.3.2.post1+pt26rocm624-cp312-x86_64" in listed and "no kernel image for gfx942" in listed
    # A cell opens its setup page, which names the wheel's platform tag and GPU code.
    page.locator('section[id="causal-conv1d-1.7.0"] a[href="select/pt214cu130-cp311.html"]').click()
    wheel = page.locator('dl[id="causal-conv1d-1.7.0"]')
    assert "manylinux_2_28_x86_64" in wheel.inner_text() and "SASS 7.5 8.0 8.7 9.0 10.0" in wheel.inner_text()
    page.context.close()


@pytest.mark.parametrize("path", ["", "select/pt214cu130-cp313.html"], ids=["landing", "setup"])
def test_axe_finds_no_serious_accessibility_violation(
    browser: Browser, release_site: ReleaseSite, axe_script: Path, path: str
) -> None:
    page = _page(browser, f"{release_site.url}/{path}")
    page.add_script_tag(path=axe_script)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    serious = [
        f"{v['id']} ({v['impact']}): {v['help']}: {[n['target'] for n in v['nodes'][:3]]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []
    assert result["passes"], "axe ran no check"
    page.context.close()


def test_every_link_on_the_landing_page_resolves(browser: Browser, release_site: ReleaseSite) -> None:
    page = _page(browser, release_site.url + "/")
    hrefs = set(page.locator("a").evaluate_all("(links) => links.map((a) => a.href.split('#')[0])"))
    assert f"{release_site.url}/select/pt212rocm72-cp310.html" in hrefs
    assert {href: fetch(href)[0] for href in hrefs} == dict.fromkeys(hrefs, 200)
    page.context.close()
