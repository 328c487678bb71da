"""The GPU acceptance run's driver (docs/gpu-acceptance.md), one command on the lent GPU machine: the stages of the
registry this command runs (--stages, --resume), each recorded in the summary as it ends, none started past the
deadline or with fewer seconds left than it needs (it stays pending for the next command's --resume). Started by
scripts/gpu_acceptance.sh through scripts/gpu/bootstrap.py, which puts the carried wheels on its path."""

from __future__ import annotations

import shutil
import sys
import tarfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace

from builder.core.errors import ConfigError
from builder.core.wheelhouse import Layout
from scripts.gpu import arch_stages, builds, plan, stages, summary, tables
from scripts.gpu.arguments import Usage, parse
from scripts.gpu.box import Box, Console, Options, StageFailed, detect_cuda_home, free_port
from scripts.gpu.data import AcceptanceData, load_acceptance
from scripts.gpu.summary import FAILED, PASSED, PENDING, RUNNING, SKIPPED, StageResult

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU, EXIT_PENDING = 0, 1, 2, 3, 4
OUT_FILES = ("summary.json", "build-status.txt", "upstream-pytest.log", "pip-report.json", "doctor.json",
             "details.tar.gz")


class Stop(Exception):
    """The rest of the command is skipped (or left pending) for a reason; the verdict follows."""

    def __init__(self, reason: str, status: str = SKIPPED) -> None:
        super().__init__(reason)
        self.reason, self.status = reason, status


def open_box(options: Options, data: AcceptanceData, started: float) -> Box:
    """The command's folders and console; OUTDIR's files of an earlier command go, and, unless resuming, the
    summary the work folder kept."""
    for folder in (options.outdir, options.work):
        folder.mkdir(parents=True, exist_ok=True)
    for stale in [*map(options.outdir.joinpath, OUT_FILES), *options.outdir.glob("build-*.log")]:
        stale.unlink(missing_ok=True)
    if not options.resume:
        (options.work / "summary.json").unlink(missing_ok=True)
    (options.outdir / "acceptance.log").write_text("")
    box = Box(options=options, data=data, console=Console(options.outdir / "acceptance.log", started),
              started=started, packages=data.packages, cuda_home=detect_cuda_home())
    box.url = f"http://127.0.0.1:{options.port or free_port()}"
    return box


def held_packages(box: Box) -> None:
    """A reused wheelhouse (--skip-build) may hold fewer of the packages (bench_build's full-arch output holds one):
    install and doctor then check those, and the stages testing another are skipped, saying which."""
    if box.options.skip_build is None:
        return
    held = builds.held_packages(box.wheelhouse, box.data)
    if not held:
        raise Usage(f"{box.wheelhouse}: no {box.data.label} wheel of {', '.join(box.data.packages)} built there")
    if held != box.data.packages:
        box.console.say(f"the reused wheelhouse {box.wheelhouse} holds {', '.join(held)} (not "
                        f"{', '.join(box.data.packages)}): only these are installed and checked")
        box.packages = held


def planned(box: Box) -> list[plan.Stage]:
    registry, options = plan.registry(box.data), box.options
    try:
        selected = plan.parse_selection(options.stages, registry) if options.stages else None
    except plan.SelectionError as error:
        raise Usage(str(error)) from None
    if options.resume and not box.summary.is_file():
        raise Usage(f"--resume: no earlier run's summary at {box.summary} (was the machine given back?); run "
                    "without --resume to start afresh")
    earlier = summary.load(box.summary)["stages"] if options.resume else {}
    chosen = plan.plan(registry, selected=selected, results={k: v.get("status") for k, v in earlier.items()},
                       resume=options.resume)
    summary.begin_command(box.summary, command=" ".join(("scripts/gpu_acceptance.sh", *options.argv)),
                          planned=[stage.name for stage in chosen], resume=options.resume)
    summary.update(box.summary, label=box.data.label, mode="quick" if options.quick else "full")
    return chosen


def run_stage(box: Box, stage: plan.Stage, run: Callable[[Box], StageResult]) -> StageResult:
    """One stage, timed and recorded: a step that fails is the stage's failure, not the command's."""
    lacking = [p for p in stage.packages if p not in box.packages]
    if lacking:
        result = StageResult(status=SKIPPED, detail=f"skipped: {', '.join(lacking)} not in {box.wheelhouse} (it "
                                                     f"holds {', '.join(box.packages)})")
    elif box.remaining() < stage.seconds:
        left = f"{box.remaining():.0f}s"
        result = StageResult(status=PENDING, detail=f"pending: {left} were left of the {box.options.deadline}s "
                                                    f"deadline and it needs {stage.seconds}s; --resume runs it")
    else:
        box.console.say(f"=== stage {stage.name}")
        started = time.monotonic()
        try:
            result = run(box)
        except StageFailed as failure:
            result = StageResult(status=FAILED, detail=str(failure))
        except Exception as error:  # noqa: BLE001 (the stage fails, not the run: the box's time is too dear)
            box.console.echo(traceback.format_exc())
            result = StageResult(status=FAILED, detail=f"{type(error).__name__}: {error}".splitlines()[0])
        result = replace(result, seconds=result.seconds or time.monotonic() - started)
    summary.record(box.summary, stage.name, result)
    publish(box)
    if result.data and stage.name == "preflight":  # the machine's facts, kept beside the stages
        summary.update(box.summary, environment=result.data)
    box.console.say(f"=== stage {stage.name}: {result.status}" + (f" ({result.detail})" if result.detail else ""))
    return result


def after(stage: plan.Stage, result: StageResult, box: Box) -> None:
    """What a stage's end means for the rest of this command (an arch stage's pending build holds up only itself)."""
    if stage.name == "build" and result.status == RUNNING:
        raise Stop("pending: the build is still running; --resume collects it", PENDING)
    if stage.name == "build" and not any(Layout(root=box.wheelhouse).dist.glob("*.whl")):
        raise Stop("skipped: no wheels were built")
    if stage.name == "preflight" and result.data.get("cuda_available") is False:
        raise Stop(result.detail)  # no CUDA device: every stage says so
    if stage.setup and result.status not in (PASSED, SKIPPED):
        raise Stop(f"skipped: the {stage.name} stage failed")


def publish(box: Box) -> None:
    """The summary, as it stands, into OUTDIR (what comes back from the machine)."""
    if box.summary.is_file():
        shutil.copyfile(box.summary, box.options.outdir / "summary.json")


def collect(box: Box) -> None:
    """Beside the summary: the ledger's table, the build logs, and the rest in one archive (8 files come back)."""
    out = box.options.outdir
    if Layout(root=box.wheelhouse).ledger.is_file():
        box.run(box.ww("status", "--output", box.wheelhouse), env=box.environ(COLUMNS="200"),
                stdout=out / "build-status.txt")
    for log in Layout(root=box.wheelhouse).logs.glob("*.log"):
        shutil.copyfile(log, out / f"build-{log.name.replace('+', '_')}")
    work = box.work  # reports and logs only: never a wheel, a site or a ledger
    details = [path for path in (work / "pip-report.json", work / "doctor-cli.json", work / "reports",
                                 work / "arch" / "ptx-speed",
                                 *(folder / item for folder in sorted((work / "arch").glob("*"))
                                   for item in ("build-console.log", "logs", "pip-report.json", "doctor.json",
                                                "doctor-cli.json", "upstream-pytest.log", "build-run")))
               if path.exists()]
    if details:
        with tarfile.open(out / "details.tar.gz", "w:gz") as archive:
            for path in details:
                archive.add(path, arcname=str(path.relative_to(work)))
    if (work / "serve.log").is_file():
        box.console.echo("--- wheelwright serve's log\n" + "".join(
            (work / "serve.log").read_text(errors="replace").splitlines(keepends=True)[-40:]))


def finish(box: Box) -> int:
    box.console.say("=== results")
    collect(box)
    ended = summary.finish(box.summary, box.data.stages)
    publish(box)
    data = {name: entry.get("data", {}) for name, entry in ended["stages"].items()}
    lines = [*summary.render(ended, box.data.stages), *tables.checklist_lines(data.get("checklist", {})),
             *tables.ptx_table(data.get("ptx_speed", {})), *tables.closing_lines(ended)]
    if ended["outcome"] == "incomplete":
        lines.append("stages are pending: run the same command again with --resume (while the machine is still warm)")
    box.console.echo("".join(f"{line}\n" for line in lines))
    return {"passed": EXIT_PASSED, "no-gpu": EXIT_NO_GPU, "incomplete": EXIT_PENDING}.get(ended["outcome"],
                                                                                          EXIT_FAILED)


def run(options: Options, *, started: float | None = None) -> int:
    """One command of the run; ``started`` (time.monotonic()) is when its clock started (tests pass an earlier)."""
    box = open_box(options, load_acceptance(), time.monotonic() if started is None else started)
    try:
        return command(box)
    finally:
        box.close()


def command(box: Box) -> int:
    registry = {**stages.STAGES, **arch_stages.stages(box)}
    try:
        held_packages(box)
        chosen = planned(box)
    except Usage as usage:
        print(f"ERROR {usage}", file=sys.stderr)
        return EXIT_USAGE
    options = box.options
    box.console.say(f"gpu acceptance: out {options.outdir}, work {options.work}, carry {options.carry}, "
                    f"CUDA_HOME {box.cuda_home or 'none'}, deadline {options.deadline}s")
    box.console.say(f"stages this command: {' '.join(stage.name for stage in chosen)}")
    try:
        for stage in chosen:
            after(stage, run_stage(box, stage, registry[stage.name]), box)
    except Stop as stop:
        summary.skip_remaining(box.summary, box.data.stages, stop.reason, status=stop.status)
    return finish(box)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse(list(sys.argv[1:] if argv is None else argv), load_acceptance())
        return run(options)
    except Usage as usage:
        print(f"ERROR {usage}\n(scripts/gpu_acceptance.sh --help shows the usage)", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as error:  # the data file
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
