"""scripts/gpu_acceptance.sh's arguments: each checked as it is read, a bad one is one ERROR line and exit 2."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from builder.core.wheelhouse import Layout
from scripts.gpu.box import Options
from scripts.gpu.data import AcceptanceData

USAGE = """\
usage: scripts/gpu_acceptance.sh OUTDIR [--stages LIST] [--resume] [--detach] [--skip-build WHEELHOUSE]
                                        [--quick] [--leak-seconds N] [--work DIR] [--carry DIR] [--workers N]
                                        [--port N] [--deadline SECONDS] [--build-limit SECONDS]
                                        [--variants LIST] [--sass-reference PATH]

  OUTDIR                  the log, the summary JSON, the build logs and pytest's output go here (at most 8 files)
  --stages LIST           run only these stages (comma-separated; the setup stages before them come along)
  --resume                go on with the run an earlier command left in the work folder: its results stand, and
                          the stages it left pending (or a build still running) are run (or collected) now
  --detach                start the build (and the arch builds) and return without waiting (a later --resume
                          collects them)
  --skip-build WHEELHOUSE reuse an earlier run's build output (its dist/ and ledger.sqlite) and only test; one
                          that holds fewer packages (bench_build's full-arch output) has those installed and checked,
                          and the stages testing another are skipped, saying so
  --quick                 run a subset of causal-conv1d's suite (its counts are then not compared with upstream's)
  --leak-seconds N        each of the seed checklist's two leak runs (default: the data file's, 60)
  --work DIR              scratch folder: wheelhouse, venvs, cache, the summary (default: .gpu-work)
  --carry DIR             what scripts/prepare_gpu_carry.sh filled (default: .carry)
  --workers N             pytest-xdist workers for causal-conv1d's suite (default: 16)
  --port N                the index server's loopback port (default: a free one)
  --deadline SECONDS      no stage starts past this many seconds into the command, or with fewer seconds left
                          than it needs (it is left pending for --resume) (default: 570)
  --build-limit SECONDS   the detached build is stopped after this long, across commands (default: 1800)
  --variants LIST         the arch variants to build and collect (comma-separated; default: all of the data file's)
  --sass-reference PATH   the wheel ptx_speed times the PTX wheels against: a wheel, or a wheelwright output folder
                          holding one causal-conv1d wheel of the label; it must hold SASS for the GPU (default: the
                          main wheelhouse's, installed by the install stage)

The stages are scripts/data/gpu_acceptance.toml's; each stage's checks are tests of tests/gpu, run by pytest in the
venv the wheels are installed into (docs/gpu-acceptance.md maps them).

exit status: 0 every stage passed, 1 a stage failed, 2 bad arguments, 3 no CUDA device, 4 stages pending: run the
same command again with --resume (the work folder survives between commands while the machine stays warm)
"""
FLAGS = {"--resume": "resume", "--detach": "detach", "--quick": "quick"}


class Usage(Exception):
    """A bad argument; the message says which and why."""


def _count(option: str, least: int, most: int, wants: str) -> Callable[[str], int]:
    def read(text: str) -> int:
        if not text.isdigit() or not least <= int(text) <= most:
            raise Usage(f"{option} wants {wants}, not '{text}'")
        return int(text)

    return read


def _wheelhouse(text: str) -> Path:
    path = Path(text).absolute()
    if not (Layout(root=path).ledger.is_file() and Layout(root=path).dist.is_dir()):
        raise Usage(f"--skip-build {text}: no dist/ and ledger.sqlite there (a wheelwright build output)")
    return path


def _existing(text: str) -> Path:
    if not Path(text).exists():
        raise Usage(f"--sass-reference {text}: no such wheel or folder")
    return Path(text).absolute()


VALUES: dict[str, tuple[str, Callable[[str], object]]] = {  # option: (field, reader)
    "--stages": ("stages", str),
    "--skip-build": ("skip_build", _wheelhouse),
    "--leak-seconds": ("leak_seconds", _count("--leak-seconds", 1, 10**9, "a positive number")),
    "--work": ("work", lambda text: Path(text).absolute()),
    "--carry": ("carry", lambda text: Path(text).absolute()),
    "--workers": ("workers", _count("--workers", 1, 10**6, "a positive number")),
    "--port": ("port", _count("--port", 0, 65535, "0..65535")),
    "--deadline": ("deadline", _count("--deadline", 60, 10**9, "seconds >= 60")),
    "--build-limit": ("build_limit", _count("--build-limit", 60, 10**9, "seconds >= 60")),
    "--variants": ("variants", lambda text: tuple(name.strip() for name in text.split(",") if name.strip())),
    "--sass-reference": ("sass_reference", _existing),
}


def parse(argv: list[str], data: AcceptanceData) -> Options:
    """The options, or Usage naming the first bad argument; --help prints the usage and exits."""
    fields: dict[str, Any] = {}
    outdir: str | None = None
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help"):
            print(USAGE, end="")
            raise SystemExit(0)
        if arg in FLAGS:
            fields[FLAGS[arg]] = True
        elif arg in VALUES:
            if not rest or not rest[0]:
                raise Usage(f"{arg} needs a value")
            name, read = VALUES[arg]
            fields[name] = read(rest.pop(0))
        elif arg.startswith("-"):
            raise Usage(f"unknown option: {arg}")
        elif outdir is not None:
            raise Usage(f"one OUTDIR only (got '{outdir}' and '{arg}')")
        else:
            outdir = arg
    if outdir is None:
        raise Usage("OUTDIR is required")
    unknown = [name for name in fields.get("variants") or () if name not in data.arch.variants]
    if unknown:
        raise Usage(f"--variants: no arch variant '{unknown[0]}' (the data file has {','.join(data.arch.variants)})")
    return replace(Options(outdir=Path(outdir).absolute(), argv=tuple(argv)), **fields)
