"""The pages for people: the landing page (the selector, then the coverage matrices of each project's newest
version), one page per setup (``select/pt214cu130-cp311.html``), one page per project for its older versions, and
``wheels.json`` beside them. Pure: catalog in, {site path: bytes} out."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping

import markupsafe

from builder.core.ledger import LedgerEntry
from index_site import layout
from index_site.catalog import Catalog
from index_site.landing import BUILT, FAILED, NOT_SHIPPED, Coverage, Release, Row, build_coverage
from index_site.manifest import manifest
from index_site.setups import Setup, build_setups, default_setup
from index_site.wheels import GpuArchs, WheelFile

Render = Callable[..., bytes]
SYMBOLS = {BUILT: "✓", FAILED: "✗", NOT_SHIPPED: "n/a"}  # anything else: "–" (not in the plan)


def render_pages(catalog: Catalog, *, base_url: str, render: Render) -> dict[str, bytes]:
    """``render(template, **context)`` is the site's template renderer (render.py owns the environment)."""
    coverage = build_coverage(catalog)
    setups = build_setups(coverage, base_url=base_url)
    render = functools.partial(render, base_url=base_url.rstrip("/"))
    pages = {path: _page(render, "setup.html", path, coverage, setup=setup) for path, setup in setups.items()}
    newest = coverage.newest()
    for project in coverage.projects:
        older = tuple(r for r in coverage.releases if r.project == project and r not in newest)
        if older:
            path = layout.coverage_path(project)
            pages[path] = _page(render, "coverage.html", path, coverage, project=project, releases=older)
    pages[layout.LANDING] = _page(
        render, "landing.html", layout.LANDING, coverage, setup=default_setup(coverage, setups), releases=newest,
        older={p: [r for r in coverage.releases if r.project == p and r not in newest] for p in coverage.projects},
    )
    pages[layout.MANIFEST] = manifest(catalog.wheels, catalog.archs, base_url=base_url)
    return pages


def _page(render: Render, template: str, page: str, coverage: Coverage, **context: object) -> bytes:
    def link(target: str) -> str:
        return layout.href(page, target)

    def matrix(release: Release) -> markupsafe.Markup:
        return matrix_html(release, link, coverage.archs)

    return render(
        template,
        page=page,
        link=link,
        matrix=matrix,
        coverage=coverage,
        describe_archs=lambda wheel: describe_archs(coverage.archs.get(wheel.filename)),
        failure_text=failure_text,
        setup_path=layout.setup_path,
        coverage_path=layout.coverage_path,
        findlinks_path=layout.findlinks_path,
        simple_root=layout.simple_root,
        wheel_path=layout.wheel_path,
        symbols=SYMBOLS,
        **context,
    )


# The matrices are most of the landing page's bytes and most of its rendering time, so they are built here,
# terse (no indentation, optional end tags left out) and cell by cell from a cache, rather than in a template.


def matrix_html(release: Release, link: Callable[[str], str], archs: Mapping[str, GpuArchs]) -> markupsafe.Markup:
    """One release's table: a row group per torch, a row per accelerator, a cell per Python."""
    anchor = f"{release.project}-{release.version}"
    head = "".join(f"<th scope=col>{markupsafe.escape(py)}" for py in release.pythons)
    parts = [f'<table class=cov aria-labelledby="h-{markupsafe.escape(anchor)}"><thead><tr>'
             f"<th scope=col>torch<th scope=col>build{head}</thead>"]
    failures = 0
    for group in _by_torch(release.rows):
        parts.append("<tbody>")
        for index, row in enumerate(group):
            torch = f"<th scope=rowgroup rowspan={len(group)}>{row.variant.torch}" if index == 0 else ""
            parts.append(f"<tr>{torch}<th scope=row>{markupsafe.escape(row.variant.accelerator_text)}")
            for cell in row.cells:
                target = layout.setup_path(row.variant.label, cell.python)
                if cell.state == FAILED and cell.failure is not None:
                    failures += 1
                    parts.append(_failed_cell(link(target), f"{anchor}-f{failures}", failure_text(cell.failure)))
                elif cell.state == BUILT:
                    parts.append(_built_cell(link(target), _built_title(cell.wheels, archs)))
                else:
                    parts.append(_empty_cell(cell.state))
    parts.append("</table>")
    return markupsafe.Markup("".join(parts))


def _by_torch(rows: Iterable[Row]) -> list[list[Row]]:
    groups: list[list[Row]] = []
    for row in rows:
        if groups and groups[-1][0].variant.torch == row.variant.torch:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


@functools.lru_cache(maxsize=65536)
def _built_cell(href: str, title: str) -> str:
    return f'<td><a class=b href="{markupsafe.escape(href)}" title="{markupsafe.escape(title)}">{SYMBOLS[BUILT]}</a>'


def _failed_cell(href: str, tip: str, reason: str) -> str:
    return (f'<td><a class=f href="{markupsafe.escape(href)}" aria-describedby="{markupsafe.escape(tip)}">'
            f'{SYMBOLS[FAILED]}</a><span class=tip id="{markupsafe.escape(tip)}" role=tooltip>'
            f"{markupsafe.escape(reason)}</span>")


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


def failure_text(failure: LedgerEntry) -> str:
    phase = f" in {failure.phase}" if failure.phase else ""
    return f"{failure.status}{phase}: {failure.reason or 'no reason recorded'}"
