"""Cross-building's own logic (builder/steps/cross.py) on hand-made inputs: the unpacked target torch must be the
job's, a wheel unpacks as an installer lays it out and never outside the site, the target's extension suffix comes
from its _sysconfigdata, and the x86_64 twin runs setup.py for the same torch."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from builder.core.errors import ToolchainError
from builder.steps.cross import check_target_torch, host_twin, merge_trees, target_sysconfig, unpack_wheel
from builder.steps.platform import cross_target, load_platforms
from builder.steps.torch_index import TorchMismatch
from tests.jobs import local_job

ARM = dataclasses.replace(local_job(), platform="aarch64")
VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '{version}'
debug = False
cuda: Optional[str] = {cuda}
hip: Optional[str] = None
"""


def site_with(tmp_path: Path, version: str, cuda: str) -> Path:
    (tmp_path / "torch").mkdir(parents=True)
    (tmp_path / "torch" / "version.py").write_text(VERSION_PY.format(version=version, cuda=cuda))
    return tmp_path


def test_the_unpacked_torch_of_the_jobs_version_and_cuda_passes(tmp_path: Path) -> None:
    check_target_torch(ARM, site_with(tmp_path, "2.14.1+cu130", "'13.0'"))  # as torch 2.14.1's own version.py


@pytest.mark.parametrize(
    ("version", "cuda", "found"),
    [("2.14.0", "'13.0'", "2.14.0 (CUDA 13.0)"), ("2.14.1", "None", "2.14.1 (CUDA None)"),
     ("2.14.1+cu126", "'12.6'", "2.14.1 (CUDA 12.6)")],
)
def test_another_torch_for_the_target_is_refused(tmp_path: Path, version: str, cuda: str, found: str) -> None:
    with pytest.raises(TorchMismatch) as raised:
        check_target_torch(ARM, site_with(tmp_path, version, cuda))
    assert str(raised.value) == (f"the aarch64 torch unpacked for {ARM.identifier} is {found}, "
                                 "the job needs 2.14.1 (CUDA 13.0)")


def wheel_of(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_wheel_unpacks_as_an_installer_lays_it_out(tmp_path: Path) -> None:
    wheel = wheel_of(tmp_path, {"nvidia/cu13/lib/libcudart.so.13": b"ELF", "x-1.0.data/platlib/y.py": b"y",
                                "x-1.0.data/scripts/tool": b"#!", "x-1.0.dist-info/METADATA": b"m"})
    unpack_wheel(wheel, tmp_path / "site")
    found = sorted(p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*") if p.is_file())
    assert found == ["nvidia/cu13/lib/libcudart.so.13", "x-1.0.dist-info/METADATA", "y.py"]


@pytest.mark.parametrize("member", ["../escape.py", "/abs.py", "a/../../b.py"])
def test_a_member_outside_the_site_is_refused(tmp_path: Path, member: str) -> None:
    with pytest.raises(ToolchainError, match="leaves the site"):
        unpack_wheel(wheel_of(tmp_path, {member: b"x"}), tmp_path / "site")
    assert not (tmp_path / "escape.py").exists()


def test_the_extension_suffix_is_read_from_the_targets_sysconfigdata(tmp_path: Path) -> None:
    folder = tmp_path / "usr" / "lib" / "python3.11"
    folder.mkdir(parents=True)
    (folder / "_sysconfigdata__aarch64-linux-gnu.py").write_text(
        "# system configuration generated and used by the sysconfig module\n"
        "build_time_vars = {'EXT_SUFFIX': '.cpython-311-aarch64-linux-gnu.so', 'SIZEOF_LONG': 8}\n"
    )
    variables = target_sysconfig(tmp_path, load_platforms()["aarch64"], "3.11")
    assert variables["EXT_SUFFIX"] == ".cpython-311-aarch64-linux-gnu.so"


def test_a_missing_sysconfigdata_says_so(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="cannot read the target's sysconfig"):
        target_sysconfig(tmp_path, load_platforms()["aarch64"], "3.11")


def test_later_trees_win_when_merged(tmp_path: Path) -> None:
    for tree, text in (("host", "x86"), ("wheel", "arm")):
        (tmp_path / tree / "crt").mkdir(parents=True)
        (tmp_path / tree / "cuda_runtime.h").write_text(text)
    (tmp_path / "host" / "crt" / "host_config.h").write_text("cccl")
    merge_trees([tmp_path / "host", tmp_path / "wheel"], tmp_path / "merged")
    assert (tmp_path / "merged" / "cuda_runtime.h").read_text() == "arm"
    assert (tmp_path / "merged" / "crt" / "host_config.h").read_text() == "cccl"


def test_only_another_platform_is_cross_built_and_its_twin_is_this_machines() -> None:
    assert cross_target(local_job()) is None
    target = cross_target(ARM)
    assert target is not None and target.name == "aarch64"
    twin = host_twin(ARM)
    assert (twin.platform, twin.torch, twin.python, twin.accelerator) == ("x86_64", ARM.torch, ARM.python,
                                                                         ARM.accelerator)


def test_the_preflight_names_each_missing_cross_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.steps import cross

    platform = load_platforms()["aarch64"]
    monkeypatch.setattr(cross.shutil, "which", lambda tool: None if tool in ("debootstrap", "qemu-aarch64-static")
                        else f"/usr/bin/{tool}")
    assert cross.cross_problem(platform) == ("cross-building for aarch64 needs debootstrap, qemu-aarch64-static "
                                             "(scripts/install-system-deps.sh test installs them)")
    monkeypatch.setattr(cross.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    assert cross.cross_problem(platform) is None
    assert cross.cross_problem(load_platforms()["x86_64"]) is not None  # nothing cross-builds x86_64 here


def test_the_compiler_wrappers_are_made_for_the_interpreter_they_exec(tmp_path: Path, monkeypatch) -> None:
    """The wrappers exec the interpreter that made them: a cached pair made by another interpreter (a venv deleted
    since, an old checkout's) is not used, so no wrapper names an interpreter that is gone."""
    from builder.steps import cross

    monkeypatch.setattr(cross, "cross_root", lambda: tmp_path)
    monkeypatch.setattr(cross.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(cross, "include_folders", lambda *args: ["/include"])
    platform = load_platforms()["aarch64"]
    made = []
    for python in ("/gone/venv/bin/python", "/here/venv/bin/python"):
        monkeypatch.setattr(cross.sys, "executable", python)
        made.append(cross.compilers(platform, tmp_path / "sysroot").cxx)
    assert made[0].parent != made[1].parent
    assert '"/here/venv/bin/python"' in made[1].read_text() and "/gone/" not in made[1].read_text()
