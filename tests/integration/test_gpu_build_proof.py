"""scripts/gpu_build_proof.sh's CPU-side behaviour: bad arguments are one ERROR line and exit 2, and --collect
reports a detached run's output (running: exit 4; finished: exit 0; none: exit 1)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_build_proof.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=60)


def test_bad_arguments_are_one_error_line(tmp_path: Path) -> None:
    for args, message in (((), "OUTDIR is required"), ((str(tmp_path), "--nope"), "unknown option: --nope"),
                          ((str(tmp_path), "--collect", "soon"), "--collect wants seconds")):
        done = run(*args)
        assert done.returncode == 2 and done.stderr.startswith("ERROR ") and message in done.stderr, done.stderr


def test_collect_reports_a_detached_run(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    assert run(str(out), "--collect", "1", "--work", str(work)).returncode == 1  # nothing was started
    state = work / "build-proof"
    state.mkdir(parents=True, exist_ok=True)  # the first --collect made it
    (state / "bench-full.txt").write_text("(d) ours      wall     201 s\n")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (state / "pid").write_text(f"{sleeper.pid}\n")
        running = run(str(out), "--collect", "1", "--work", str(work))
        assert running.returncode == 4 and "still running" in running.stdout
    finally:
        sleeper.kill()
        sleeper.wait()
    done = run(str(out), "--collect", "1", "--work", str(work))
    assert done.returncode == 0 and "(d) ours      wall     201 s" in done.stdout
    assert (out / "bench-full.txt").read_text() == (state / "bench-full.txt").read_text()
