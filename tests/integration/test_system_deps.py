"""scripts/install-system-deps.sh, which `make test` and `make build-matrix` run first: quiet when everything is
there, and one ERROR line naming the command when packages are missing and it may not install them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-system-deps.sh"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, *args: str, installed: bool) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    _fake(fake, "dpkg-query", "echo 'install ok installed'" if installed else "exit 1")
    _fake(fake, "id", "echo 1000")  # not root
    _fake(fake, "sudo", "exit 1")  # and no password-less sudo
    _fake(fake, "apt-get", f"echo apt-get \"$@\" >> {tmp_path / 'apt.log'}")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_nothing_missing_installs_nothing(tmp_path: Path) -> None:
    done = _run(tmp_path, "build", installed=True)  # (the test part also fetches axe-core: not hermetic)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("system packages present: g++ gcc-11 g++-11 debian-archive-keyring g++-aarch64-linux-gnu "
                           "debootstrap\n")
    assert not (tmp_path / "apt.log").exists()


def test_missing_without_root_is_one_error_line_naming_the_command(tmp_path: Path) -> None:
    done = _run(tmp_path, "test", installed=False)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1  # one line; npm is in the list only where there is none
    assert done.stderr.startswith(
        "ERROR missing system packages g++ gcc-11 g++-11 debian-archive-keyring g++-aarch64-linux-gnu debootstrap "
        "chromium fonts-dejavu-core"
    )
    assert done.stderr.endswith(": run `sudo bash scripts/install-system-deps.sh test`\n")
    assert not (tmp_path / "apt.log").exists()


def test_the_build_needs_only_the_compilers_and_the_keyring(tmp_path: Path) -> None:
    """g++, plus gcc-11/g++-11 (CUDA 11.8's host compiler) and the keyring Debian's CUDA 11.8 packages are checked
    against, and the aarch64 cross compiler with debootstrap for its sysroot: no browser or npm for a build."""
    done = _run(tmp_path, "build", installed=False)
    assert done.returncode == 1
    assert ("missing system packages g++ gcc-11 g++-11 debian-archive-keyring g++-aarch64-linux-gnu debootstrap:"
            in done.stderr)
