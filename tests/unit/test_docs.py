"""The docs hold together offline: every relative link and #anchor in README.md and docs/*.md resolves (anchors as
GitHub spells them), every docs page is linked from the README, and the README stays a page for users: short, with
no dated measurement (those belong in docs/runs.md)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "README.md"  # the folder's guide (what GitHub shows for docs/), not a topic page
PAGES = sorted([README, *(ROOT / "docs").glob("*.md")])
README_MAX_LINES = 300

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
GITHUB_LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")

# What a measurement looks like in a run log: a date, a duration, a rate, a speed-up, a machine's load.
DATED_MEASUREMENT = [
    re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:s|ms|min|minutes|seconds|h|hours|CPU-s|CPU-seconds|CPU-hours)\b"),
    re.compile(r"\b\d+(?:\.\d+)?\s?(?:tok/s|requests/s|MB/s)"),
    re.compile(r"\b\d+\.\d+x\b"),
    re.compile(r"\bload(?: average)? \d"),
]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with code spans blanked: what GitHub renders as links and headings."""
    lines, fence = [], ""
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif opened:
            fence = opened.group(1)
            lines.append("")
        else:
            lines.append(line)
    blanked = CODE_SPAN.sub(lambda m: m.group(2).replace("]", " ").replace("(", " ").replace(")", " "),
                            "\n".join(lines))
    return blanked.split("\n")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text in lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link or image shows its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags render as nothing
    parts = re.split(r"(`+[^`]*`+)", text)  # code spans render as written, less their backticks
    text = "".join(
        part.strip("`") if part.startswith("`") else re.sub(r"(?<!\w)_+|_+(?!\w)", "", part.replace("*", ""))
        for part in parts
    )  # outside code: *emphasis* and _emphasis_ render as their text, snake_case stays
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page has: its headings' slugs (repeats get -1, -2, ...) and its explicit HTML anchors."""
    seen: Counter[str] = Counter()
    found = set(HTML_ANCHOR.findall(page.read_text(encoding="utf-8")))
    for line in prose_lines(page.read_text(encoding="utf-8")):
        heading = ATX_HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image in the page's prose."""
    found = []
    for number, line in enumerate(prose_lines(page.read_text(encoding="utf-8")), start=1):
        found += [(number, target) for target in INLINE_LINK.findall(line)]
        found += [(number, target) for target in REFERENCE_DEFINITION.findall(line)]
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """One line per link of the page that names no file or folder of the checkout, or no anchor of its page."""
    problems = []
    for number, target in links(page):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # another site: an offline check cannot say
        path_part, _, anchor = target.partition("#")
        where = f"{page.relative_to(root)}:{number}: {target}"
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if root not in (destination, *destination.parents) or not destination.exists():
            problems.append(f"{where}: no such file or folder")
        elif anchor and destination.suffix == ".md":
            if unquote(anchor) not in anchors(destination):
                problems.append(f"{where}: no heading of {destination.relative_to(root)} has this anchor")
        elif anchor and not GITHUB_LINE_ANCHOR.match(anchor):
            problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


def measurements(text: str) -> list[str]:
    """The lines that read like a run log's: a date or a measured figure."""
    return [
        f"README.md:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if any(pattern.search(line) for pattern in DATED_MEASUREMENT)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    unlinked = [str(page.relative_to(ROOT)) for page in PAGES if page not in (README, GUIDE) and page not in linked]
    assert unlinked == [], "add each page to the README's table under 'Documentation'"


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= README_MAX_LINES


def test_the_readme_holds_no_dated_measurement() -> None:
    assert measurements(README.read_text(encoding="utf-8")) == [], "measured runs go into docs/runs.md"


@pytest.mark.parametrize(("heading", "slug"), [
    ("The code's layers", "the-codes-layers"),
    ("(TU, arch) pairs on a core pool", "tu-arch-pairs-on-a-core-pool"),
    ("The old stacks: `seed` and `seed-pt21`", "the-old-stacks-seed-and-seed-pt21"),
    ("The pool in strict cost order: 1.23x the cores-bound, 2026-12-02",
     "the-pool-in-strict-cost-order-123x-the-cores-bound-2026-12-02"),
    ("Where a job's torch comes from", "where-a-jobs-torch-comes-from"),
    ("A [linked](other.md) heading", "a-linked-heading"),
    ("Variant × torch", "variant--torch"),
    ("snake_case and _emphasis_", "snake_case-and-emphasis"),
    ("`__init__` and **bold**", "__init__-and-bold"),
])
def test_slugs_are_githubs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Results\n\n## Results\n\n```\n# Results\n```\n\n## Results\n", encoding="utf-8")
    assert anchors(page) == {"results", "results-1", "results-2"}


@pytest.mark.parametrize(("text", "problem"), [
    ("[gone](missing.md)", "no such file or folder"),
    ("[gone](../../outside.md)", "no such file or folder"),
    ("[anchor](other.md#nowhere)", "no heading of other.md has this anchor"),
    ("[here](#nowhere)", "no heading of page.md has this anchor"),
    ("[code](other.txt#section)", "an anchor into a file that is not Markdown"),
    ("[ref]: missing.md", "no such file or folder"),
])
def test_a_broken_link_is_reported(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "other.md").write_text("# Somewhere\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("text\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\n{text}\n", encoding="utf-8")
    assert [line.split(": ", 2)[-1] for line in broken_links(page, root=tmp_path)] == [problem]


@pytest.mark.parametrize("text", [
    "[fine](other.md#somewhere)",
    "[here](#page)",
    "`[not a link](missing.md)`",
    "```\n[not a link](missing.md)\n```",
    "[away](https://example.org/missing.md)",
    "[line](other.txt#L3-L5)",
])
def test_a_sound_link_is_not_reported(tmp_path: Path, text: str) -> None:
    (tmp_path / "other.md").write_text("# Somewhere\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("text\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\n{text}\n", encoding="utf-8")
    assert broken_links(page, root=tmp_path) == []


@pytest.mark.parametrize("line", [
    "## 2026-12-02: the seed profile",
    "built 12 of 12 in 1863 s",
    "about 95 min on 2 shared cores",
    "one wheel added 0.289 s wall",
    "wall 1.02x the critical path",
    "637 requests/s",
    "at load 5.4",
])
def test_a_run_log_line_counts_as_a_measurement(line: str) -> None:
    assert measurements(line) != []


@pytest.mark.parametrize("line", [
    "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64",
    "torch 2.14.1+cu130 for sm_90, Python 3.9+",
    "| 12 | `wheelwright facts check`: the torch facts are behind |",
])
def test_a_users_line_is_not_a_measurement(line: str) -> None:
    assert measurements(line) == []
