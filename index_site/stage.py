"""The index stage's entry, build_site: a run that finds nothing moved since the last complete run into the site
answers from quiet.py alone; any other imports the judging, the rendering and the planner (site.py), which a
fresh process takes a tenth of a CPU-second to import (docs/performance.md). test_cli_startup.py holds the quiet run
to the modules it needs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from builder.core.collector import collection_paused
from builder.core.errors import ConfigError
from builder.core.wheelhouse import Layout
from index_site import layout
from index_site.quiet import quiet_run
from index_site.state import DamagedState, IndexState, set_aside, state_path

if TYPE_CHECKING:
    from index_site.report import IndexReport
    from index_site.twins import TwinMaker

log = logging.getLogger(__name__)


def build_site(output: Path, site: Path, *, base_url: str, twins: TwinMaker | None = None) -> IndexReport:
    """Index ``output``/dist with ``output``/ledger.sqlite into ``site``; ``twins`` makes and checks the variant
    twins of ``output``/variant (without it none is published)."""
    with collection_paused():
        try:
            return _build_site(output, site, base_url=base_url, twins=twins)
        except DamagedState as error:  # it holds only what a cold run learns again: set aside, and index cold
            log.warning("%s; set aside, this run indexes cold", error)
            set_aside(state_path(Layout(root=output).ledger))
            return _build_site(output, site, base_url=base_url, twins=twins)


def _build_site(output: Path, site: Path, *, base_url: str, twins: TwinMaker | None) -> IndexReport:
    _check_site(site, base_url)
    wheelhouse = Layout(root=output)
    with IndexState(state_path(wheelhouse.ledger)) as state:
        quiet, found = quiet_run(state, wheelhouse, site, base_url, twins is not None)
        if quiet is not None:  # nothing moved since the last complete run, not even a file of dist/: no row read
            return quiet
        from index_site.site import index_changed

        return index_changed(state, wheelhouse, site, base_url, twins, found)


def _check_site(site: Path, base_url: str) -> None:
    """Refuse to write into (and prune) a folder the index did not create. A new or empty folder gets the marker
    before anything else is written, so that a run killed part-way is finished by the next, not refused."""
    if site.exists() and not site.is_dir():
        raise ConfigError(f"{site}: not a folder", tip="pass --site with an empty or new folder")
    marker = site / layout.SITE_MARKER
    if site.exists() and not (marker.exists() or marker.is_symlink()) and any(site.iterdir()):
        raise ConfigError(
            f"{site}: not empty and not a wheelwright site (no {layout.SITE_MARKER})",
            tip="pass --site with an empty or new folder",
        )
    site.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        from index_site.records import write_manifest  # a new site's first run

        write_manifest(site, {}, base_url)
