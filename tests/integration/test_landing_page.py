"""The landing page in real headless Chromium: the grid shows every built combination with its install command and
the failed ones with the ledger's reason, reads and filters with JavaScript off, fits the window, and a
screenshot is kept under the test's tmp dir."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.index_checks import fetch
from tests.integration.conftest import FAILED_REASON, INDEX_WHEELS, PYTHON_TAG, ServedIndex

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PYTHON = f"{PYTHON_TAG[2]}.{PYTHON_TAG[3:]}"


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


@pytest.fixture(params=[True, False], ids=["js", "no-js"])
def page(request: pytest.FixtureRequest, browser: Browser, served_index: ServedIndex) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, java_script_enabled=request.param)
    page = context.new_page()
    page.goto(served_index.url + "/")
    yield page
    context.close()


def _cell(page: Page, label: str, python: str, release: str = "causal-conv1d-1.7.0"):
    return page.locator(f'section[id="{release}"] tr[data-label="{label}"] td[data-python="{python}"]')


def _text(locator) -> str:
    return " ".join(locator.inner_text().split())


def test_grid_shows_built_combos_with_commands_and_failures_with_reasons(
    page: Page, served_index: ServedIndex, tmp_path: Path
) -> None:
    shot = tmp_path / "landing.png"
    page.screenshot(path=shot, full_page=True)
    assert shot.stat().st_size > 20_000
    for spec in INDEX_WHEELS:
        python = f"{spec.python[2]}.{spec.python[3:]}"
        cell = _cell(page, spec.label, python, release=f"{spec.project}-{spec.version}")
        assert cell.is_visible() and "built" in (cell.get_attribute("class") or "")
        pinned = f"pip install --only-binary {spec.project} {spec.project}=={spec.version}"
        command = f"{pinned} -f {served_index.url}/whl/{spec.label}.html"
        assert command in _text(cell)
    failed = _cell(page, "pt214cu130", "3.9")
    assert failed.is_visible() and "failed" in (failed.get_attribute("class") or "")
    assert " ".join(FAILED_REASON.split()) in _text(failed)
    unbuildable = _cell(page, "pt212cu126", "3.8")
    assert "torch 2.12 + CUDA 12.6 published no wheel for Python 3.8" in _text(unbuildable)
    assert "not built" in _text(_cell(page, "pt212cu126", "3.9"))
    failures = _text(page.locator('section[id="causal-conv1d-1.7.0"] ul.failures'))
    assert "causal-conv1d-1.7.0+pt214cu130-cp39-x86_64" in failures


def test_filters_work_without_javascript(page: Page) -> None:
    page.locator("fieldset", has_text="Python").get_by_text(re.compile(rf"^{re.escape(PYTHON)}$")).click()
    assert _cell(page, "pt214cu130", PYTHON).is_visible()
    assert _cell(page, "pt214cu130", "3.9").is_hidden()
    page.locator("fieldset", has_text="Torch").get_by_text(re.compile(r"^2\.13$")).click()
    assert _cell(page, "pt213cu130", PYTHON).is_visible()
    assert _cell(page, "pt214cu130", PYTHON).is_hidden()
    page.locator("fieldset", has_text="CUDA").get_by_text(re.compile(r"^cu126$")).click()
    assert _cell(page, "pt213cu130", PYTHON).is_hidden()
    page.locator("fieldset", has_text="Torch").get_by_text(re.compile(r"^all$")).click()
    assert _cell(page, "pt212cu126", PYTHON).is_visible()
    assert _cell(page, "pt214cu130", PYTHON).is_hidden()


def test_page_fits_the_window_and_every_link_on_it_resolves(page: Page, served_index: ServedIndex) -> None:
    box = page.locator("main").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1400
    hrefs = set(page.locator("a").evaluate_all("(links) => links.map((a) => a.href)"))
    assert f"{served_index.url}/whl/pt213cu130.html" in hrefs
    assert {href: fetch(href)[0] for href in hrefs} == dict.fromkeys(hrefs, 200)
