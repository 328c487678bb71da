"""`wheelwright images list|render|build|pin`: exactly the builder images a plan needs. Console output lives here."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from builder.core.errors import WheelwrightError

if TYPE_CHECKING:
    from builder.farm.engine import CliEngine
    from builder.farm.images import ImageSpec


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    images = commands.add_parser("images", help="list, render or build the builder images a plan needs")
    images.add_argument(
        "action",
        choices=("list", "render", "build", "pin"),
        help="list: the images and their state; render: write their build contexts; "
        "build: build (or load) the buildable ones; pin: record registry digests",
    )
    add_plan_arguments(images)
    images.add_argument("--base", default="bullseye", help="the base (builder/data/images.toml; default: %(default)s)")
    images.add_argument("--engine", choices=("docker", "podman"), help="the engine (default: docker, else podman)")
    images.add_argument(
        "--output", type=Path, default=Path("wheelhouse/images"), help="render: where (default: %(default)s)"
    )
    images.set_defaults(func=cmd_images)


def cmd_images(args: argparse.Namespace) -> int:
    from rich.table import Table

    from builder.cli.console import out, print_table
    from builder.farm import images
    from builder.plan.expand import load_plan

    plan = load_plan(args.matrix, args.profile).select(args.select)
    specs = images.images_for(plan.jobs, args.base)
    folder = images.docker_dir()
    if args.action == "render":
        for spec in specs:
            target = images.render(spec, args.output, folder)
            out.print(f"{spec.name}: {target}/build.sh ({spec.not_buildable() or 'buildable'})")
        return 0
    if args.action == "pin":
        return _pin(args, specs)
    engine = _engine(args) if args.action == "build" else None
    table = Table(title=f"profile {plan.profile}: {len(specs)} builder images", title_justify="left")
    for column in ("image", "base", "pythons", "toolkit", "jobs", "tag", "state"):
        table.add_column(column, overflow="fold")
    failures = 0
    for spec in specs:
        jobs = sum(1 for job in plan.jobs if job.accelerator == spec.accelerator)
        state = spec.not_buildable()
        if state is None and engine is not None:
            try:
                built = images.ensure_image(engine, spec, log_path=_log(args, spec))
                state = f"{built.how} in {built.seconds:.0f}s"
            except WheelwrightError as error:
                state, failures = f"[red]failed[/red]: {error}", failures + 1
        table.add_row(
            spec.name,
            spec.base.name,
            " ".join(spec.pythons),
            spec.toolkit_origin,
            str(jobs),
            spec.tag(folder),
            state or ("saved" if images.saved_image(spec.tag(folder)).is_file() else "buildable"),
        )
    print_table(table)
    return 1 if failures else 0


def _engine(args: argparse.Namespace) -> CliEngine:
    from builder.farm.engine import find_engine

    return find_engine(args.engine)


def _log(args: argparse.Namespace, spec: ImageSpec) -> Path:
    from builder.cli.console import console

    output = Path(args.output)
    folder = output.parent / "logs" if output.name == "images" else output / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"image-{spec.name}.log"
    console.print(f"building {spec.name}; log: {path}")
    return path


def _pin(args: argparse.Namespace, specs: Sequence[ImageSpec]) -> int:
    from builder.cli.console import out

    engine = _engine(args)
    registry = [spec for spec in specs if spec.base.kind == "registry"]
    if not registry:
        out.print(f"base {args.base} is bootstrapped locally; nothing to pin")
        return 0
    out.print(f"# under [bases.{registry[0].base.name}.digests] in builder/data/images.toml:")
    for spec in registry:
        tag = f"{spec.family}{spec.accelerator.version}"
        out.print(f'"{tag}" = "{engine.pull_digest(f"{spec.base.repository}:{tag}")}"')
    return 0
