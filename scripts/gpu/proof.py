"""The full-arch build proof (issue 16) on the lent GPU machine, from the repository root:

    scripts/gpu_build_proof.sh OUTDIR [--package causal-conv1d|mamba-ssm] [--runs ours|ours,learned|upstream,ours|none]
                               [--suite] [--detach] [--work DIR] [--carry DIR]
    scripts/gpu_build_proof.sh OUTDIR --collect SECONDS [--work DIR]

It fills the cache from .carry as the acceptance run does (its carry stage), then runs scripts/bench_build.py's
full-arch mode against the machine's torch 2.11.0+cu130 and Python 3.12, with upstream's 9-arch list (sm_103 too,
for this comparison only): upstream's released build and/or ours, one after the other, each bounded; `learned`
builds ours' job again with ours' ledger beside it. OUTDIR/bench-full.txt gets the figures, OUTDIR/timelines/ each of
ours' compile timelines. A command may run 600 s at most: `ours` alone fits; upstream's build needs --detach, then
--collect. --suite runs the acceptance stages on ours' wheel (--skip-build; causal-conv1d's install, doctor and
upstream, mamba-ssm's install and doctor) into OUTDIR/suite within what is left of 570 s; --runs none --suite runs
only that, on the output an earlier command's ours left."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from builder.core.wheelhouse import Layout
from scripts.gpu import detach
from scripts.gpu.bootstrap import CARRY, WORK
from scripts.gpu.box import environ

ROOT = Path(__file__).resolve().parents[2]
# mamba-ssm's kernel stage (mamba) needs a causal-conv1d wheel too
SUITE_STAGES = {"causal-conv1d": "install,doctor,upstream", "mamba-ssm": "install,doctor"}
DEADLINE = 570


class Usage(Exception):
    """A bad argument; the message says which."""


def parse(argv: list[str]) -> dict[str, str]:
    """The options (OUTDIR as "out"), checked; a flag's value is "1"."""
    options, rest = {"package": "causal-conv1d", "runs": "ours", "work": str(WORK), "carry": str(CARRY)}, list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help"):
            print((__doc__ or "").split("\n\n")[1])
            raise SystemExit(0)
        if arg in ("--suite", "--detach"):
            options[arg[2:]] = "1"
        elif arg in ("--package", "--runs", "--collect", "--work", "--carry"):
            options[arg[2:]] = rest.pop(0) if rest else ""
        elif arg.startswith("-"):
            raise Usage(f"unknown option: {arg}")
        else:
            options["out"] = arg
    problems = [
        ("out" not in options, "OUTDIR is required (--help shows the usage)"),
        ("collect" in options and not options["collect"].isdigit(),
         f"--collect wants seconds, not '{options.get('collect')}'"),
        (options["package"] not in SUITE_STAGES,
         f"--package wants causal-conv1d or mamba-ssm, not '{options['package']}'"),
        ("suite" in options and "detach" in options,
         "--suite needs ours' wheel: not with --detach (run --runs none --suite after --collect)"),
        (options["runs"] == "none" and "suite" not in options,
         "--runs none builds nothing: give --suite, or runs to build"),
    ]
    for bad, message in problems:
        if bad:
            raise Usage(message)
    return options | {key: str(Path(options[key]).absolute()) for key in ("work", "carry")}


def keep_timelines(bench: Path, out: Path) -> None:
    """Each run's compile timeline (logs/JOB.timeline.jsonl in its output) into OUTDIR/timelines/RUN-JOB..."""
    (out / "timelines").mkdir(parents=True, exist_ok=True)
    for timeline in bench.glob("*/out/logs/*.timeline.jsonl"):
        shutil.copyfile(timeline, out / "timelines" / f"{timeline.parents[2].name}-{timeline.name}")


def collect(state: Path, bench: Path, out: Path, seconds: int) -> int:
    """Wait for a detached run, at most ``seconds``, then report what it printed: exit 4 while it still runs."""
    progress = detach.wait(state, seconds=seconds)
    printed = state / "bench-full.txt"
    if progress.state == detach.NONE or not printed.is_file():
        print(f"ERROR no detached run in {state}: start one with --detach", file=sys.stderr)
        return 1
    shutil.copyfile(printed, out / "bench-full.txt")
    keep_timelines(bench, out)
    print(printed.read_text(), end="")
    if progress.state == detach.RUNNING:
        print("still running: --collect again")
        return 4
    return 0


def suite(options: dict[str, str], out: Path, work: Path, started: float) -> int:
    """The acceptance stages on ours' wheelhouse, then the verdict of the stages it ran (the others were not
    picked, so its own exit status says "incomplete")."""
    wheelhouse = work / f"bench-full-{options['package']}" / "ours" / "out"
    left = int(DEADLINE - (time.monotonic() - started))
    if not Layout(root=wheelhouse).ledger.is_file():
        print(f"ERROR no ours output in {wheelhouse}: run --runs ours first", file=sys.stderr)
        return 1
    if left < 120:
        print(f"suite: not started, {left}s left of {DEADLINE}: run scripts/gpu_build_proof.sh {options['out']} "
              f"--package {options['package']} --runs none --suite")
        return 4
    picked = SUITE_STAGES[options["package"]].split(",")
    status = subprocess.run([sys.executable, "-m", "scripts.gpu.acceptance", str(out / "suite"), "--work", str(work),
                             "--carry", options["carry"],
                             "--skip-build", str(wheelhouse), "--stages", ",".join(picked), "--deadline",
                             str(max(60, left))], cwd=ROOT, check=False).returncode
    if status not in (0, 4):
        return status
    ran = {name: entry["status"] for name, entry in json.loads((out / "suite" / "summary.json").read_text())[
        "stages"].items()}
    ok = all(s in ("passed", "reused") for s in ran.values()) and all(ran.get(name) == "passed" for name in picked)
    print(f"suite on ours' full-arch wheel: {'passed' if ok else 'FAILED'} ("
          + ", ".join(f"{name} {status}" for name, status in ran.items()) + ")")
    return 0 if ok else 1


def build(options: dict[str, str], out: Path, work: Path, started: float) -> int:
    """The carry stage (the cache and ww-site), then bench_build's full-arch runs, detached or not."""
    carried = subprocess.run([sys.executable, "-m", "scripts.gpu.acceptance", str(out / "carry"), "--stages",
                              "carry", "--work", str(work), "--carry", options["carry"]], cwd=ROOT,
                             check=False).returncode
    if carried not in (0, 4):  # 4: the later stages were not picked
        print(f"ERROR the carry stage failed (exit {carried}): {out / 'carry'}", file=sys.stderr)
        return 1
    bench, state = work / f"bench-full-{options['package']}", work / "build-proof"
    shutil.rmtree(bench, ignore_errors=True)
    command = [sys.executable, "-m", "scripts.bench.build", "--full-arch", options["package"], "--runs",
               options["runs"], "--torch", "2.11.0", "--python", "3.12", "--limit", "1500", "--workdir", str(bench)]
    detach.stop(state)  # an earlier run's: the bench folder starts afresh
    (state / "bench-full.txt").unlink(missing_ok=True)
    detach.start(state, command, log=state / "bench-full.txt", limit_s=3600,
                 env=environ(work, Path(options["carry"]).absolute()))
    if "detach" in options:
        print(f"started: collect with scripts/gpu_build_proof.sh {options['out']} --collect 560")
        return 0
    status = collect(state, bench, out, seconds=int(DEADLINE - (time.monotonic() - started)))
    if status != 0 or "suite" not in options:
        return status
    return suite(options, out, work, started)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    try:
        options = parse(list(sys.argv[1:] if argv is None else argv))
    except Usage as usage:
        print(f"ERROR {usage}", file=sys.stderr)
        return 2
    out, work = Path(options["out"]).absolute(), Path(options["work"]).absolute()
    (work / "build-proof").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if "collect" in options:
        return collect(work / "build-proof", work / f"bench-full-{options['package']}", out, int(options["collect"]))
    if options["runs"] == "none":
        return suite(options, out, work, started)
    return build(options, out, work, started)


if __name__ == "__main__":
    sys.exit(main())
