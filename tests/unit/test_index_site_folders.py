"""A folder of the site replaced by something else between two runs (a symlink to a copy of it, moved to another
disk and linked back; a symlink to another folder of the site): the next run removes what stands there, as its
prune would, before it checks a file in place, and leaves the site a cold index of the same folders writes. Found
by a hunt for differences from a cold index (docs/runs.md, 2026-12-07): the files reached through the symlink were
kept as recorded, then the prune took the link away, and no later run put them back."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.steps.twins import VariantTwins
from index_site.stage import build_site
from index_site.state import STATE_FILE
from tests import variant_channel
from tests.index_checks import site_files

BASE = "https://wheels.example.org"


def _index(root: Path) -> None:
    build_site(root, root / "site", base_url=BASE, twins=VariantTwins())




def _moved_and_linked(site: Path, folder: str, away: Path) -> None:
    os.rename(site / folder, away)
    os.symlink(away, site / folder)


CHANGES: dict[str, Callable[[Path, Path], object]] = {
    "a-label-moved-and-linked-back": lambda site, away: _moved_and_linked(site, "whl/pt214cu130", away),
    "a-top-folder-moved-and-linked-back": lambda site, away: _moved_and_linked(site, "whl", away),
    "the-channel-moved-and-linked-back": lambda site, away: _moved_and_linked(site, "variant/files", away),
    "a-label-linked-to-another": lambda site, away: (
        shutil.rmtree(site / "whl/pt214cu130"), os.symlink("pt213cu130", site / "whl/pt214cu130")
    ),
}


@pytest.mark.parametrize("state", ["kept", "forgotten"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_folder_replaced_by_a_symlink_is_placed_again(tmp_path: Path, change: str, state: str) -> None:
    out, away = tmp_path / "out", tmp_path / "away"
    variant_channel.write_channel(out)
    shutil.rmtree(out / "torch")
    for _ in range(3):
        _index(out)
    CHANGES[change](out / "site", away)
    if state == "forgotten":  # no record of the site's folders: every folder a record is in is looked at
        (out / STATE_FILE).unlink()
    outside = {path: path.stat().st_mtime_ns for path in away.rglob("*")} if away.exists() else {}
    cold = tmp_path / "cold"
    for name in ("dist", "variant"):
        shutil.copytree(out / name, cold / name)
    _index(cold)
    for _ in range(2):  # and the run after it: nothing recorded of files that are not there
        _index(out)
        assert site_files(out / "site") == site_files(cold / "site")
    assert {path: path.stat().st_mtime_ns for path in away.rglob("*")} == outside  # nothing outside touched
