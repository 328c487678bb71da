"""Subcommands of the index stages: index, serve, publish. Parses arguments, calls the stage, owns the output."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit

from builder.cli.arguments import site_url, whole_number
from builder.core.collector import collection_paused
from builder.core.errors import ConfigError, one_line
from builder.core.settings import setting
from builder.core.wheelhouse import Layout

if TYPE_CHECKING:
    from builder.core.archive import Archive
    from builder.steps.twins import VariantTwins
    from builder.steps.variant import DerivedTwin
    from index_site.publish import PublishReport
    from index_site.report import IndexReport



def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    index = commands.add_parser("index", help="write the static package index from dist/ and the ledger")
    _add_site_arguments(index)
    index.add_argument(
        "--base-url",
        type=site_url,  # also checks the environment's value: argparse converts a default given as text
        default=setting("WHEELWRIGHT_BASE_URL"),
        help="public URL of the site, for the landing page's install commands "
        "(env WHEELWRIGHT_BASE_URL; default: %(default)s)",
    )
    index.set_defaults(func=cmd_index)

    serve = commands.add_parser("serve", help="serve the site over HTTP on this machine")
    _add_site_arguments(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=whole_number(0, 65535, rule="a TCP port is 0-65535"), default=8000,
                       help="port, 0 for any free one (default: %(default)s)")
    serve.set_defaults(func=cmd_serve)

    publish_parser = commands.add_parser("publish", help="upload the site to an S3 bucket, changed objects only")
    _add_site_arguments(publish_parser)
    publish_parser.add_argument(
        "--bucket", default=setting("WHEELWRIGHT_BUCKET"), help="bucket name (env WHEELWRIGHT_BUCKET)"
    )
    publish_parser.add_argument(
        "--prefix",
        default=setting("WHEELWRIGHT_PREFIX"),
        help="key prefix inside the bucket (env WHEELWRIGHT_PREFIX)",
    )
    publish_parser.add_argument("--endpoint-url", help="S3 API endpoint (default: AWS, or AWS_ENDPOINT_URL)")
    publish_parser.add_argument("--region", help="region (default: the AWS configuration's)")
    publish_parser.add_argument("--dry-run", action="store_true", help="show what would be uploaded and stop")
    publish_parser.add_argument(
        "--break-lock", action="store_true", help="take the publish lock from a publish that died"
    )
    publish_parser.add_argument(
        "--allow-delist", action="store_true", help="publish even if published wheels are missing locally"
    )
    publish_parser.add_argument("--jobs", type=whole_number(1, 256), default=8,
                                help="parallel uploads (1-256; default: %(default)s)")
    publish_parser.set_defaults(func=cmd_publish)


def _add_site_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", type=Path, default=Path("wheelhouse"), help="build output folder (default: %(default)s)"
    )
    parser.add_argument("--site", type=Path, help="site folder (default: OUTPUT/site)")


def _site(args: argparse.Namespace) -> Path:
    site: Path = args.site if args.site is not None else Layout(root=args.output).site
    return site


def cmd_index(args: argparse.Namespace) -> int:
    with collection_paused():  # the index's imports too: their objects live until the process ends
        from index_site.stage import build_site

        report = build_site(args.output, _site(args), base_url=args.base_url, twins=_Twins())
    lines, warnings = _index_lines(report, args.base_url)
    twin_lines, twin_warnings = _twin_lines(report)
    _emit(lines + twin_lines, warnings + twin_warnings)
    _step_summary(report)
    return 0


class _Twins:
    """builder.steps.twins's VariantTwins, imported on the first twin to make or check (a re-index that has none
    does without the build steps' imports): it makes and checks twins, the index decides which it publishes. One
    maker for the run: it keeps the fat wheel its last slim check read."""

    def __init__(self) -> None:
        self._maker: VariantTwins | None = None

    def _twins(self) -> VariantTwins:
        if self._maker is None:
            from builder.steps.twins import VariantTwins

            self._maker = VariantTwins()
        return self._maker

    def make(self, wheel: Path, folder: Path) -> Path:
        return self._twins().make(wheel, folder)

    def problems(self, wheel: Path, twin: Path) -> list[str]:
        return self._twins().problems(wheel, twin)

    def derive(self, file: BinaryIO, archive: Archive, twin: BinaryIO | None = None) -> DerivedTwin | None:
        return self._twins().derive(file, archive, twin)


def _twin_lines(report: IndexReport) -> tuple[list[str], list[str]]:
    """One line for the variant channel; a WARN per twin refused or made again, and one per reason some wheels
    have none, however many they are."""
    twins = report.twins
    again = f" ({len(twins.remade)} made again)" if twins.remade else ""
    lines = [f"  variant twins: {report.twins_published} published, {len(twins.made)} made{again}"]
    warnings = [f"variant twin not its wheel's, made again: {remade.reason}" for remade in twins.remade]
    warnings += [f"variant twin not published: {refused.reason}" for refused in twins.refused]
    for why, wheels in twins.without.items():
        warnings.append(f"no variant twin for {len(wheels):,} wheel{'s' if len(wheels) != 1 else ''}: {why} "
                        f"(e.g. {wheels[0]})")
    return lines, warnings


def _emit(lines: list[str], warnings: list[str]) -> None:
    """``lines`` on stdout and a WARN line per warning on stderr, shown as they are (a reason may hold brackets
    rich would read as markup). Through rich on a terminal; plain text elsewhere (a CI log, a pipe), where
    rendering thousands of lines one by one would cost more than the index."""
    warnings = [one_line(text) for text in warnings]  # a file's name may hold a line end or an escape sequence
    if not (sys.stdout.isatty() or sys.stderr.isatty()):
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()
        sys.stderr.write("".join(f"WARN {text}\n" for text in warnings))
        return
    from rich.markup import escape

    from builder.cli.console import console, out

    out.print("\n".join(lines), markup=False, highlight=False)
    for text in warnings:
        console.print(f"[yellow]WARN[/yellow] {escape(text)}", soft_wrap=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from builder.cli.console import out
    from index_site import layout
    from index_site.serve import make_server

    site = _site(args)
    if not (site / layout.SITE_MARKER).is_file():
        raise ConfigError(f"{site}: no site to serve", tip="run `wheelwright index` (or `make index`) first")
    try:
        server = make_server(site, host=args.host, port=args.port)
    except (OSError, OverflowError, UnicodeError) as error:
        raise ConfigError(
            f"cannot listen on {args.host}:{args.port}: {getattr(error, 'strerror', None) or error}",
            tip="pick another --port (0 = any free one) or --host",
        ) from None
    out.print(f"Serving [bold]{site}[/bold] at [bold]{server.url}/[/bold] (Ctrl-C stops)")
    for page in sorted(site.glob("whl/*.html"))[:3]:
        out.print(f"  pip install PACKAGE -f {shlex.quote(f'{server.url}/whl/{page.name}')}", markup=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.print("stopped")
    finally:
        server.server_close()
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from builder.cli.console import console
    from index_site.publish import check_plan, publish
    from index_site.s3 import S3Store  # boto3 is slow to import; only publish needs it

    _warn_if_indexed_for_loopback(_site(args))
    store = S3Store(args.bucket, endpoint_url=args.endpoint_url, region=args.region, connections=args.jobs + 2)
    where = f"s3://{args.bucket}/{args.prefix.strip('/')}"
    if args.dry_run:
        report = publish(_site(args), store, prefix=args.prefix, dry_run=True, jobs=args.jobs)
        _print_plan(report, where)
        check_plan(report.plan, allow_delist=args.allow_delist)
        return 0
    with Progress(
        TextColumn("uploading"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None)
        report = publish(
            _site(args),
            store,
            prefix=args.prefix,
            break_lock=args.break_lock,
            allow_delist=args.allow_delist,
            jobs=args.jobs,
            on_upload=lambda item: progress.update(task, advance=1, description=item.key),
        )
    _print_plan(report, where)
    return 0


def _index_lines(report: IndexReport, base_url: str) -> tuple[list[str], list[str]]:
    """What the index did, its install command per variant, and a WARN per file it did not index."""
    from index_site import layout

    stats = report.stats
    lines = [
        f"Indexed {report.wheels} wheels in {len(report.variants)} variants -> {report.site}",
        (f"  hashed {stats.hashed}, from ledger {stats.from_ledger}, cached {stats.cached}; "
        f"{len(report.written)} files written, {report.unchanged} unchanged, {len(report.deleted)} deleted; "
        f"{report.failures} failed builds shown"),
    ]
    for label in report.variants:
        links = shlex.quote(f"{base_url.rstrip('/')}/{layout.findlinks_path(label)}")
        lines.append(f"  {label}  pip install PACKAGE -f {links}")
    if (report.site / layout.VARIANTS / "simple" / "index.html").is_file():
        lines.append(f"  variant channel  {layout.variant_command(base_url.rstrip('/'))}")
    return lines, [f"not indexed: {rejection.reason}" for rejection in report.rejected]


def _print_plan(report: PublishReport, where: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from builder.cli.console import console, out, print_table

    plan = report.plan
    verb = "would upload" if report.dry_run else "uploaded"
    if plan.uploads:
        table = Table(title=f"{where}: {verb} {len(plan.uploads)}", title_justify="left")
        for column in ("key", "type", "bytes"):
            table.add_column(column, no_wrap=column == "key")
        for item in plan.uploads:
            table.add_row(item.key, item.kind.content_type, str(item.size))
        print_table(table)
    out.print(f"{where}: {len(plan.uploads)} {verb}, {len(plan.unchanged)} unchanged")
    for conflict in plan.conflicts:  # the bucket's keys and digests, as it lists them: one line each, no markup
        said = escape(one_line(f"{conflict.key}: published bytes differ (sha256 {conflict.remote_sha256})"))
        console.print(f"[red]CONFLICT[/red] {said}")
    for key in plan.delisted:
        console.print(f"[yellow]WARN[/yellow] published wheel not in the local site: {escape(one_line(key))}")


def _warn_if_indexed_for_loopback(site: Path) -> None:
    from builder.cli.console import console
    from index_site import layout
    from index_site.records import site_base_url

    base_url = site_base_url(site) if (site / layout.SITE_MARKER).is_file() else None
    if base_url and urlsplit(base_url).hostname in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"[yellow]WARN[/yellow] the site was indexed for {base_url}, so its landing page's install commands "
            "point there; run `wheelwright index --base-url <public URL>` before publishing",
            soft_wrap=True,
        )


def _step_summary(report: IndexReport) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    lines = [f"### Index: {report.wheels} wheels in {len(report.variants)} variants", ""]
    lines += [f"- `{label}`" for label in report.variants]
    refused = [("not indexed", r) for r in report.rejected]
    refused += [("variant twin not published", r) for r in report.twins.refused]
    lines += [f"- {what}: `{one_line(r.filename)}`: {one_line(r.reason)}" for what, r in refused]  # names from disk
    with open(path, "a", encoding="utf-8") as summary:
        summary.write("\n".join(lines) + "\n")
