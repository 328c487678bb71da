"""A project's pages joined from per-version parts (index_site/joined.py): a part is taken from the pages the last
run wrote only while its digest, those pages and its other pages hold, and the pages are always the bytes a join
of nothing kept gives."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from index_site import joined
from index_site.records import load_groups
from index_site.stage import build_site
from index_site.wheels import WheelFile
from scripts.bench.wheels import WheelSpec, make_wheel


class _Store:
    """A Reuse over what one join wrote: its pages and its entry, with the other pages it may keep."""

    def __init__(self, made: joined.Joined, key: str, kept: Sequence[str] = ()) -> None:
        self.pages = dict(made.pages)
        self.entries = {key: made.entry}
        self.other = set(kept)

    def entry(self, key: str) -> tuple[str, tuple[str, ...]] | None:
        return self.entries.get(key)

    def page(self, path: str, sha256: str) -> bytes | None:
        content = self.pages.get(path)
        return content if content is not None and hashlib.sha256(content).hexdigest() == sha256 else None

    def keep(self, paths: Sequence[str]) -> bool:
        return set(paths) <= self.other


def _pair(digests: dict[str, str], rendered: list[str], pages: bool = False) -> joined.Pair:
    def render(key: str) -> joined.Rendered:
        rendered.append(key)
        other = {f"x/{key}.json": f"{key}:{digests[key]}".encode()} if pages else {}
        anchor = f'    <a href="{key}.whl#sha256={digests[key]}">{key}</a><br>\n'
        return joined.Rendered(anchor, f'{{"filename":"{key}.whl"}},{{"v":"{digests[key]}"}}', (key, f"{key}+x"), other)

    parts = [
        joined.Part(key, digest, lambda key=key: render(key), (f"x/{key}.json",) if pages else ())  # type: ignore[misc]
        for key, digest in digests.items()
    ]
    return joined.Pair("simple/p/index.html", "json/p/index.json", "p", parts)


def test_only_the_parts_whose_digest_moved_are_rendered_and_the_pages_are_a_full_join_s() -> None:
    rendered: list[str] = []
    before = joined.join(_pair({"1.0": "a", "1.1": "b", "2.0": "c"}, rendered), joined.Nothing(), "k")
    assert rendered == ["1.0", "1.1", "2.0"]
    rendered.clear()
    digests = {"1.0": "a", "1.1": "B", "2.0": "c", "3.0": "d"}
    after = joined.join(_pair(digests, rendered), _Store(before, "k"), "k")
    assert rendered == ["1.1", "3.0"]
    assert after == joined.join(_pair(digests, []), joined.Nothing(), "k")


@pytest.mark.parametrize(
    "damage",
    [
        "page-changed",
        "no-entry",
        "offsets-past-the-end",
        "offsets-swapped",
        "offsets-shifted",
        "versions-changed",
        "fields-missing",
        "digests-missing",
        "other-pages-gone",
    ],
)
def test_parts_are_rendered_again_when_what_the_last_run_left_does_not_hold(damage: str) -> None:
    rendered: list[str] = []
    digests = {"1.0": "a", "1.1": "b"}
    store = _Store(joined.join(_pair(digests, rendered, pages=True), joined.Nothing(), "k"), "k", ["x/1.0.json"])
    store.other.add("x/1.1.json")
    digest_text, parts = store.entries["k"]
    if damage == "page-changed":
        store.pages["json/p/index.json"] += b" "
    elif damage == "no-entry":
        store.entries.clear()
    elif damage == "offsets-past-the-end":
        store.entries["k"] = (digest_text, tuple(_field(part, 3, "999999") for part in parts))
    elif damage == "offsets-swapped":  # each part's offsets given to the other: still inside the pages
        first, second = parts
        fields = first.split("\t"), second.split("\t")
        swapped = ("\t".join(fields[0][:2] + fields[1][2:]), "\t".join(fields[1][:2] + fields[0][2:]))
        store.entries["k"] = (digest_text, swapped)
    elif damage == "offsets-shifted":  # the second part's lines one byte earlier in the simple page
        store.entries["k"] = (digest_text, (parts[0], _field(parts[1], 2, str(int(parts[1].split("\t")[2]) - 1))))
    elif damage == "versions-changed":
        store.entries["k"] = (digest_text, (parts[0], _field(parts[1], 6, "9.9")))
    elif damage == "fields-missing":
        store.entries["k"] = (digest_text, tuple(part.rsplit("\t", 2)[0] for part in parts))
    elif damage == "digests-missing":
        store.entries["k"] = ("", parts)
    else:
        store.other.clear()
    rendered.clear()
    after = joined.join(_pair(digests, rendered, pages=True), store, "k")
    assert rendered == ["1.0", "1.1"]
    assert after == joined.join(_pair(digests, [], pages=True), joined.Nothing(), "k")


def _field(part: str, index: int, value: str) -> str:
    fields = part.split("\t")
    fields[index] = value
    return "\t".join(fields)


def test_a_kept_part_keeps_its_other_pages_and_says_so() -> None:
    digests = {"1.0": "a", "1.1": "b"}
    store = _Store(joined.join(_pair(digests, [], pages=True), joined.Nothing(), "k"), "k", ["x/1.0.json"])
    after = joined.join(_pair({"1.0": "a", "1.1": "B"}, [], pages=True), store, "k")
    assert after.kept == ("x/1.0.json",)
    assert "x/1.0.json" not in after.pages and "x/1.1.json" in after.pages


def test_one_new_wheel_formats_the_lines_of_its_own_version_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The all-variants project page lists every version; a wheel added to one formats that version's lines."""
    from index_site import render

    for version in ("1.6.0", "1.7.0", "1.7", "1.8.0"):
        make_wheel(tmp_path / "dist", WheelSpec(version=version))
    build_site(tmp_path, tmp_path / "site", base_url="https://w.example")
    assert "project:causal-conv1d/parts" in load_groups(tmp_path / "site")
    formatted: list[list[str]] = []
    version_lines = render._version_lines

    def counted(page: str, wheels: list[WheelFile]) -> joined.Rendered:
        if page == "simple/causal-conv1d/index.html":
            formatted.append(sorted({w.name.public_version for w in wheels}))
        return version_lines(page, wheels)

    monkeypatch.setattr(render, "_version_lines", counted)
    make_wheel(tmp_path / "dist", WheelSpec(version="1.7", python="cp312"))
    build_site(tmp_path, tmp_path / "site", base_url="https://w.example")
    assert formatted == [["1.7", "1.7.0"]]  # equal versions interleave: one part
