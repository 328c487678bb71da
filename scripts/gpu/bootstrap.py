"""What must happen on the GPU machine before wheelwright's dependencies can be imported: the carried wheels
(.carry/wheels, which scripts/prepare_gpu_carry.sh fills) installed into the work folder's ww-site, once per set of
wheels (a detached build still running from an earlier command imports from it); then the driver runs with them on
its path. Standard library only: scripts/gpu_acceptance.sh and scripts/gpu_build_proof.sh run it by path.

    python3 scripts/gpu/bootstrap.py acceptance|proof ARGS...    (--work DIR and --carry DIR are read from ARGS)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK, CARRY = ROOT / ".gpu-work", ROOT / ".carry"  # the defaults; --work and --carry move them
MARKER = ".carried"


def carried(carry: Path) -> list[str]:
    """The wheels in the carry, by file name."""
    return sorted(path.name for path in (carry / "wheels").glob("*.whl"))


def installed(ww_site: Path) -> list[str]:
    """The wheels ww-site was installed from."""
    marker = ww_site / MARKER
    return marker.read_text().split() if marker.is_file() else []


def install(carry: Path, ww_site: Path, python: str = sys.executable) -> str | None:
    """``pip install --target ww-site`` of the carried wheels, unless ww-site already holds exactly them; why not,
    where pip could not (the wheels are for another Python, say)."""
    wheels = carried(carry)
    if not wheels or installed(ww_site) == wheels:
        return None
    shutil.rmtree(ww_site, ignore_errors=True)
    done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                           "--target", str(ww_site), *(str(carry / "wheels" / name) for name in wheels)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"pip exited {done.returncode}"])[-1]
    (ww_site / MARKER).write_text("\n".join(wheels) + "\n")
    return None


def folder(argv: list[str], option: str, default: Path) -> Path:
    """An option's folder in ``argv`` (taken from where the command was started), else the default."""
    for index, arg in enumerate(argv[:-1]):
        if arg == option and argv[index + 1]:
            return Path(argv[index + 1]).absolute()
    return default


def main(argv: list[str]) -> int:
    driver, args = argv[0], argv[1:]
    ww_site = folder(args, "--work", WORK) / "ww-site"
    failed = None if {"-h", "--help"} & set(args) else install(folder(args, "--carry", CARRY), ww_site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ww_site), str(ROOT),
                                                                       os.environ.get("PYTHONPATH"))))}
    importable = subprocess.run([sys.executable, "-c", "import builder.core.data"], env=env, capture_output=True,
                                text=True, check=False)
    if importable.returncode != 0:
        why = failed or (importable.stderr.strip().splitlines() or ["?"])[-1]
        print(f"ERROR wheelwright's dependencies do not import with {sys.executable} ({why}): fill the carry here "
              "(bash scripts/prepare_gpu_carry.sh), carry .carry, and run this with the machine's python3",
              file=sys.stderr)
        return 1
    if failed:
        print(f"WARN the carried wheels do not install with {sys.executable}: {failed}", file=sys.stderr)
    os.execve(sys.executable, [sys.executable, "-m", f"scripts.gpu.{driver}", *args], env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
