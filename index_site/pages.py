"""The pages for people: the landing page (the selector, then the coverage matrices of each project's newest
version), one page per setup (``select/pt214cu130-cp311.html``), one page per project for its older versions, and
``wheels.json`` beside them. Pure: catalog in, {site path: bytes} out."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import markupsafe

from builder.core.ledger import LedgerEntry
from builder.plan.releases import PLATFORMS
from index_site import layout, variants
from index_site.catalog import Catalog
from index_site.landing import (
    BUILT,
    FAILED,
    NOT_PLANNED,
    NOT_SHIPPED,
    Cell,
    Coverage,
    Release,
    Row,
    Variant,
    build_coverage,
    entry_platform,
)
from index_site.manifest import manifest
from index_site.setups import Setup, build_setups, default_setup
from index_site.wheels import GpuArchs, WheelFile

Render = Callable[..., bytes]
SYMBOLS = {BUILT: "✓", FAILED: "✗", NOT_SHIPPED: "n/a"}  # anything else: "–" (not in the plan)
# Older versions a project's coverage page details, newest first: a farm's long history would make one page of
# hundreds of matrices (wheels.json lists every release, each find-links page every wheel).
OLDER_SHOWN = 24


@dataclass(frozen=True)
class People:
    """What the pages for people show, arranged once per run before any of them is rendered."""

    coverage: Coverage
    setups: Mapping[str, Setup]  # by site path


def people(catalog: Catalog, *, base_url: str) -> People:
    coverage = build_coverage(catalog, catalog.facts)
    return People(coverage=coverage, setups=build_setups(coverage, base_url=base_url))


def render_pages(
    catalog: Catalog,
    *,
    base_url: str,
    render: Render,
    model: People | None = None,
    only: Collection[str] | None = None,
) -> dict[str, bytes]:
    """``render(template, **context)`` is the site's template renderer (render.py owns the environment); ``only``
    names the site paths to render (default: every page for people)."""
    model = model or people(catalog, base_url=base_url)
    coverage, setups = model.coverage, model.setups

    def wanted(path: str) -> bool:
        return only is None or path in only

    base_url = base_url.rstrip("/")
    render = functools.partial(render, base_url=base_url)
    pages = {path: _setup_page(render, s, coverage) for path, s in setups.items() if wanted(path)}
    older = {project: coverage.older(project)[:OLDER_SHOWN] for project in coverage.projects}
    for project, releases in older.items():
        path = layout.coverage_path(project)
        if releases and wanted(path):
            hidden = len(coverage.older(project)) - len(releases)
            pages[path] = _page(
                render, "coverage.html", path, coverage, project=project, releases=releases, hidden=hidden
            )
    if wanted(layout.LANDING):
        setup = default_setup(coverage, setups)
        pages[layout.LANDING] = _page(
            render,
            "landing.html",
            layout.LANDING,
            coverage,
            setup=setup,
            releases=coverage.newest(),
            older=older,
            **variants.landing_context(coverage.variants),
            channel_sizes=catalog.channel,
        )
    if wanted(layout.MANIFEST):  # its release files are page groups of their own (render.page_groups)
        built = [(r.project, r.version, r.built) for r in coverage.releases if r.built]
        pages[layout.MANIFEST] = manifest(built, base_url=base_url)
    return pages


def setup_fingerprints(model: People) -> dict[str, str]:
    """{setup page path: text that changes whenever what the page shows does}, the same in every process: a
    re-index after one new wheel renders the few setup pages whose text moved, not all of them."""
    archs = model.coverage.archs
    return {path: repr(_fingerprint(setup, archs)) for path, setup in model.setups.items()}


def coverage_pages(model: People) -> dict[str, str]:
    """The older versions' page of each project that has older versions, by project."""
    coverage = model.coverage
    return {p: layout.coverage_path(p) for p in coverage.projects if coverage.older(p)}


def columns_fingerprint(model: People) -> str:
    """What every matrix takes from the whole site rather than from its project: the variants (its rows, in order)
    and the Pythons (its columns), as plain values, the same in every process."""
    coverage = model.coverage
    return repr((tuple(_variant_fingerprint(v) for v in coverage.variants.values()), coverage.pythons))


def _page(render: Render, template: str, page: str, coverage: Coverage, **context: object) -> bytes:
    links: dict[str, str] = {}  # every matrix of a page links the same few hundred setup pages

    def link(target: str) -> str:
        found = links.get(target)
        if found is None:
            found = links[target] = layout.href(page, target)
        return found

    def matrix(release: Release) -> markupsafe.Markup:
        return _matrix(page, release, link, coverage.archs)

    return render(
        template,
        page=page,
        link=link,
        matrix=matrix,
        coverage=coverage,
        describe_archs=lambda wheel: describe_archs(coverage.archs.get(wheel.filename)),
        abi_window=lambda wheel: getattr(coverage.archs.get(wheel.filename), "abi_window", None),
        failure_text=failure_text,
        setup_path=layout.setup_path,
        coverage_path=layout.coverage_path,
        findlinks_path=layout.findlinks_path,
        simple_root=layout.simple_root,
        wheel_path=layout.wheel_path,
        symbols=SYMBOLS,
        cpu_platforms=PLATFORMS,
        **context,
    )


def _setup_page(render: Render, setup: Setup, coverage: Coverage) -> bytes:
    return _page(render, "setup.html", setup.path, coverage, setup=setup)


def _fingerprint(setup: Setup, archs: Mapping[str, GpuArchs]) -> tuple[object, ...]:
    """Everything a setup page shows, as plain values."""
    choices = tuple(
        (c.text, c.path, c.current) for axis in (setup.torches, setup.accelerators, setup.pythons) for c in axis
    )
    offers = tuple(
        (
            o.project,
            o.pip,
            o.uv,
            o.note,
            o.more,
            o.wheel.name.version if o.wheel else "",
            tuple(
                (
                    r.version,
                    r.state,
                    tuple(_failure_key(f) for f in r.failures),
                    tuple(
                        (w.filename, w.sha256, w.size, w.metadata.requires_python, archs.get(w.filename))
                        for w in r.wheels
                    ),
                )
                for r in o.records
            ),
        )
        for o in setup.offers
    )
    return (setup.path, _variant_fingerprint(setup.variant), choices, offers)


def _variant_fingerprint(variant: Variant) -> tuple[object, ...]:
    """The variant as plain values in a stable order (a frozenset's repr is not the same in every process)."""
    shipped = None if variant.shipped is None else tuple(sorted(variant.shipped))
    return (variant.label, variant.torch, variant.accelerator, variant.accelerator_text, variant.pythons, shipped)


def _failure_key(failure: LedgerEntry | None) -> tuple[object, ...]:
    return () if failure is None else (failure.job_id, failure.status, failure.phase, failure.reason)




# The matrices are most of the landing page's bytes and most of its rendering time, so they are built here,
# terse (no indentation, optional end tags left out) and cell by cell from a cache, rather than in a template.


def _matrix(
    page: str, release: Release, link: Callable[[str], str], archs: Mapping[str, GpuArchs]
) -> markupsafe.Markup:
    return matrix_html(release, link, archs)


def matrix_html(release: Release, link: Callable[[str], str], archs: Mapping[str, GpuArchs]) -> markupsafe.Markup:
    """One release's table: a row group per torch, a row per accelerator, a cell per Python."""
    anchor = f"{release.project}-{release.version}"
    head = "".join(f"<th scope=col>{markupsafe.escape(py)}" for py in release.pythons)
    table = f'<table class=cov aria-labelledby="h-{markupsafe.escape(anchor)}">'
    parts = [f"{table}<thead><tr><th scope=col>torch<th scope=col>build{head}</thead>"]
    failures = 0
    for group in _by_torch(release.rows):
        parts.append("<tbody>")
        for index, row in enumerate(group):
            shared = _shared_title(row, archs)
            torch = f"<th scope=rowgroup rowspan={len(group)}{_NO_TITLE if shared else ''}>{row.variant.torch}" if (
                index == 0) else ""
            opened = f'<tr title="{markupsafe.escape(shared)}">' if shared else "<tr>"
            parts.append(f"{opened}{torch}<th scope=row>{markupsafe.escape(row.variant.accelerator_text)}")
            for cell in row.cells:
                target = layout.setup_path(row.variant.label, cell.python)
                if cell.state == FAILED and cell.failure is not None:
                    failures += 1
                    parts.append(_failed_cell(link(target), f"{anchor}-f{failures}", cell_failure_text(cell)))
                elif cell.state == BUILT:
                    parts.append(_built_cell(link(target), "" if shared else _built_title(cell.wheels, archs)))
                elif shared:  # the row's title describes its wheels, not a cell without one
                    parts.append(_untitled(_empty_or_unplanned(cell, row, link(target))))
                else:
                    parts.append(_empty_or_unplanned(cell, row, link(target)))
    parts.append("</table>")
    return markupsafe.Markup("".join(parts))


_NO_TITLE = ' title=""'  # stops a row's title from reaching a cell it does not describe


def _shared_title(row: Row, archs: Mapping[str, GpuArchs]) -> str:
    """The one title of every built cell of ``row``, said once on the row (tooltips are inherited): 607 built cells
    of the release plan's landing page carried 7 distinct titles, 40 KB of its 110 KB; "" where they differ."""
    titles = {_built_title(cell.wheels, archs) for cell in row.cells if cell.state == BUILT}
    return titles.pop() if len(titles) == 1 else ""


def _empty_or_unplanned(cell: Cell, row: Row, href: str) -> str:
    if cell.state == NOT_PLANNED and cell.python in row.variant.pythons:  # its setup page exists
        return _unplanned_cell(href)
    return _empty_cell(cell.state)


def _untitled(html: str) -> str:
    return html.replace("<td", "<td" + _NO_TITLE, 1)


def _by_torch(rows: Iterable[Row]) -> list[list[Row]]:
    groups: list[list[Row]] = []
    for row in rows:
        if groups and groups[-1][0].variant.torch == row.variant.torch:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


@functools.lru_cache(maxsize=4096)  # a pure function of a few hundred (setup page, archs) pairs
def _built_cell(href: str, title: str) -> str:
    titled = f' title="{markupsafe.escape(title)}"' if title else ""
    return f'<td><a class=b href="{markupsafe.escape(href)}"{titled}>{SYMBOLS[BUILT]}</a>'


def _failed_cell(href: str, tip: str, reason: str) -> str:
    return (
        f'<td{_NO_TITLE}><a class=f href="{markupsafe.escape(href)}" aria-describedby="{markupsafe.escape(tip)}">'
        f'{SYMBOLS[FAILED]}</a><span class=tip id="{markupsafe.escape(tip)}" role=tooltip>'
        f"{markupsafe.escape(reason)}</span>"
    )


@functools.lru_cache(maxsize=4096)
def _unplanned_cell(href: str) -> str:
    return f'<td><a class=u href="{markupsafe.escape(href)}">–</a>'


@functools.cache
def _empty_cell(state: str) -> str:
    if state == NOT_SHIPPED:
        return f"<td class=n>{SYMBOLS[NOT_SHIPPED]}"
    return "<td class=u>–"


def _built_title(wheels: tuple[WheelFile, ...], archs: Mapping[str, GpuArchs]) -> str:
    return " | ".join(f"{w.name.platform_tag}; {describe_archs(archs.get(w.filename))}" for w in wheels)


@functools.lru_cache(maxsize=4096)
def describe_archs(archs: GpuArchs | None) -> str:
    if archs is None:
        return "GPU archs not recorded"
    return f"SASS {' '.join(archs.sass) or 'none'}; PTX {' '.join(archs.ptx) or 'none'}"


def cell_failure_text(cell: Cell) -> str:
    """Why a failed cell has no wheel; per platform when another platform built or failed too."""
    if len(cell.failures) == 1 and not cell.wheels:
        return failure_text(cell.failures[0])
    return "; ".join(f"{entry_platform(f)}: {failure_text(f)}" for f in cell.failures)


def failure_text(failure: LedgerEntry) -> str:
    phase = f" in {failure.phase}" if failure.phase else ""
    return f"{failure.status}{phase}: {failure.reason or 'no reason recorded'}"
