"""A checker for a site folder, used after every injected fault: it walks every page of the site on disk (not only
the pages reachable from the entry points) and reports each link that does not resolve to a regular file inside the
site, each file whose bytes do not have the sha256 the page states, each file the manifest records with a digest
its bytes do not have, and anything in the managed tree that is not a regular file or folder."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from index_site import layout
from tests.index_checks import _html_links, _json_links

_BASE = "http://site.invalid/"


def check_site(site: Path) -> list[str]:
    """Every problem found in ``site``; an empty list means every link on every page resolves to stated bytes."""
    problems: list[str] = []
    files = _tree(site, problems)
    digests: dict[str, str] = {}
    for relative in sorted(files):
        # a twin's .provenance.json is a file served beside it, not a page: it links nothing
        if relative.endswith((".html", ".json")) and not relative.endswith(".provenance.json"):
            for target, digest in _links(site, relative):
                problems.extend(_check_link(site, relative, target, digest, files, digests))
    problems.extend(_check_manifest(site, files, digests))
    return problems


def _tree(site: Path, problems: list[str]) -> set[str]:
    """The regular files under the managed names; anything else there is a problem."""
    found = set()
    for top in layout.MANAGED:
        root = site / top
        if not os.path.lexists(root):
            continue
        walk = os.walk(root) if root.is_dir() and not root.is_symlink() else [(str(site), [], [top])]
        for directory, folders, names in walk:
            for name in folders + names:
                path = os.path.join(directory, name)
                mode = os.lstat(path).st_mode
                relative = Path(path).relative_to(site).as_posix()
                if stat.S_ISREG(mode):
                    if name.startswith("."):
                        problems.append(f"{relative}: a leftover hidden file")
                    found.add(relative)
                elif not stat.S_ISDIR(mode):
                    problems.append(f"{relative}: not a regular file or folder")
    return found


def _links(site: Path, relative: str) -> list[tuple[str, str | None]]:
    body = (site / relative).read_bytes()
    page = _BASE + relative
    links = _json_links(page, body) if relative.endswith(".json") else _html_links(page, body)
    return [(target, digest) for target, digest in links if target.startswith(_BASE)]


def _check_link(
    site: Path, page: str, target: str, digest: str | None, files: set[str], digests: dict[str, str]
) -> list[str]:
    relative = unquote(urlsplit(target).path).lstrip("/")
    if relative.endswith("/") or not relative:
        relative = next((relative + i for i in ("index.html", "index.json") if relative + i in files), relative)
    if relative not in files:
        return [f"{page}: links {relative or '/'}, which is not a file of the site"]
    if digest is None:
        return []
    if relative not in digests:
        digests[relative] = hashlib.sha256((site / relative).read_bytes()).hexdigest()
    if digests[relative] != digest:
        return [f"{page}: states sha256 {digest} for {relative}, whose bytes have {digests[relative]}"]
    return []


def _check_manifest(site: Path, files: set[str], digests: dict[str, str]) -> list[str]:
    marker = site / layout.SITE_MARKER
    if not marker.is_file():
        return [f"{layout.SITE_MARKER}: missing"]
    problems = []
    recorded = _recorded(marker)
    for relative, record in recorded.items():
        if relative not in files:
            problems.append(f"{layout.SITE_MARKER}: records {relative}, which is not in the site")
            continue
        actual = digests.get(relative) or hashlib.sha256((site / relative).read_bytes()).hexdigest()
        if actual != record[0]:
            problems.append(f"{layout.SITE_MARKER}: records sha256 {record[0]} for {relative}, bytes have {actual}")
    problems.extend(f"{relative}: in the site but not in its manifest" for relative in sorted(files - set(recorded)))
    return problems


def _recorded(marker: Path) -> dict[str, list]:
    """The manifest's records: its document's, then each complete change line's in order (null: gone); a torn last
    line (a run killed while appending) is not part of it. The files in no block, and those of every block (a block
    is [digest, count, {path: record}], replaced whole by a change line)."""
    head, *changes = marker.read_bytes().split(b"\n")
    document = json.loads(head)
    files, blocks = document.get("files", {}), document.get("blocks", {})
    for line in changes[:-1]:  # the last piece follows the last newline: empty, or torn
        change = json.loads(line)
        for target, part in ((files, change.get("files", {})), (blocks, change.get("blocks", {}))):
            for key, value in part.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
    for _, count, records in blocks.values():
        assert count == len(records), f"a block of {len(records)} files says {count}"
        files.update(records)
    return files
