"""The emulated import's setup (builder/steps/emulate.py): qemu runs the root's own CPython with nothing of this
machine's Python leaking in, and the root shows an ARM CPU where qemu-user would pass the x86 host's through."""

from __future__ import annotations

from pathlib import Path

from builder.steps.emulate import cpuinfo, emulated_command, emulated_environ, emulation_files, prepare_root
from builder.steps.platform import load_platforms

CROSS = load_platforms()["aarch64"].cross
assert CROSS is not None


def test_the_cpu_is_described_as_linux_describes_an_arm_core() -> None:
    text = cpuinfo(0x410FD4F0)  # Neoverse V2
    assert "CPU implementer\t: 0x41\n" in text and "CPU part\t: 0xd4f\n" in text and "CPU variant\t: 0x0\n" in text
    assert text.startswith("processor\t: 0\n") and text.endswith("\n\n")


def test_the_root_gets_its_cpu_files_once(tmp_path: Path) -> None:
    prepare_root(tmp_path, CROSS)
    files = emulation_files(CROSS)
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()} == set(files)
    assert (tmp_path / "sys/devices/system/cpu/cpu0/regs/identification/midr_el1").read_text() == (
        "0x00000000410fd4f0\n"
    )
    before = (tmp_path / "proc" / "cpuinfo").stat().st_mtime_ns
    prepare_root(tmp_path, CROSS)
    assert (tmp_path / "proc" / "cpuinfo").stat().st_mtime_ns == before


def test_qemu_runs_the_roots_own_interpreter(tmp_path: Path) -> None:
    command = emulated_command("/usr/bin/qemu-aarch64-static", tmp_path, "3.11", ["-c", "pass"])
    assert command == ["/usr/bin/qemu-aarch64-static", "-L", str(tmp_path), str(tmp_path / "usr/bin/python3.11"),
                       "-c", "pass"]


def test_nothing_of_this_machines_python_leaks_in(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONHOME", "/somewhere")
    monkeypatch.setenv("VIRTUAL_ENV", "/venv")
    environ = emulated_environ([tmp_path / "wheel", tmp_path / "torch"], tmp_path)
    assert environ["PYTHONPATH"] == f"{tmp_path / 'wheel'}:{tmp_path / 'torch'}"
    assert "PYTHONHOME" not in environ and "VIRTUAL_ENV" not in environ and environ["PYTHONNOUSERSITE"] == "1"
