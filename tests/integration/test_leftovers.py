"""What a killed build leaves running is ended by the next build of its workspace: ninja starts every command in a
process group of its own, so a build killed by its group (kill -9, a cancelled CI job) leaves its compilers
running under the workspace's fixed paths. They carry the workspace in their environment (compile.WORKSPACE_ENV),
and runner.kill_marked finds them by it, whatever group or session they moved to."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from builder.core.runner import kill_marked
from builder.steps.compilation import WORKSPACE_ENV


def started(workspace: Path, command: str) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own (as ninja's children are out of the build's group), marked as a
    process of ``workspace``'s build."""
    env = {**os.environ, WORKSPACE_ENV: str(workspace)}
    return subprocess.Popen(["/bin/sh", "-c", command], env=env, start_new_session=True)


def marked(workspace: Path) -> list[int]:
    wanted = f"{WORKSPACE_ENV}={workspace}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def running(workspace: Path) -> list[str]:
    """The sorted names of the processes carrying the workspace; [] while one of them is gone mid-read."""
    names = []
    for pid in marked(workspace):
        try:
            names.append((Path("/proc") / str(pid) / "comm").read_text().strip())
        except OSError:
            return []
    return sorted(names)


def settled(workspace: Path) -> bool:
    """The shell and both sleeps are up, each past its exec: a process's environment reads empty while it execs,
    so counting before that can miss one (1 run in 200 under load did)."""
    return running(workspace) == ["sh", "sleep", "sleep"]


@pytest.mark.timeout(60)
def test_the_processes_of_a_killed_build_are_ended_and_no_others(tmp_path: Path) -> None:
    ours, other = tmp_path / "causal-conv1d-1.7.0+pt214cu130", tmp_path / "mamba-ssm-2.3.0+pt214cu130"
    leftover = started(ours, "sleep 300 & sleep 300 & wait")  # a parent and its two children, as nvcc's wrapper
    bystander = started(other, "exec sleep 300")  # another job's build, running beside it
    try:
        deadline = time.monotonic() + 10
        while not settled(ours) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(marked(ours)) == 3
        assert kill_marked(WORKSPACE_ENV, str(ours)) == 3
        # the shell is killed, or its children die first and its `wait` lets it exit 0 before its own SIGKILL
        # lands: which of the two depends on scheduling; that it ended within the bound does not
        assert leftover.wait(timeout=10) in (-signal.SIGKILL, 0)
        assert marked(ours) == []
        assert bystander.poll() is None and len(marked(other)) == 1
    finally:
        for process in (leftover, bystander):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_nothing_marked_is_nothing_killed(tmp_path: Path) -> None:
    assert kill_marked(WORKSPACE_ENV, str(tmp_path / "nobody"), timeout=1) == 0


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root (unshare --mount)")
def test_a_build_of_the_same_workspace_in_a_container_is_not_ended(tmp_path: Path) -> None:
    """A container's build of the same job runs under the same path in its own /tmp; the host sees its processes.
    Before the namespace check, a host build starting that job killed the container's compilers (exit -9)."""
    ours = tmp_path / "causal-conv1d-1.7.0+pt214cu130"
    inside = started(ours, "exec unshare --mount sleep 300")
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _running_sleep(ours):
            time.sleep(0.05)
        assert _running_sleep(ours), "the namespaced sleep never started"
        assert kill_marked(WORKSPACE_ENV, str(ours), timeout=1) == 0
        assert inside.poll() is None
    finally:
        if inside.poll() is None:
            os.killpg(inside.pid, signal.SIGKILL)
            inside.wait()


def _running_sleep(workspace: Path) -> bool:
    return running(workspace) == ["sleep"]
