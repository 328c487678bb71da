"""The option the recipe's setup() wrapper gives bdist_wheel (compression: stored) is one setuptools honours: the
wheel the compile writes for the repair is not deflated (provenance.embed deflates what ships, once)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from builder.steps.recipes import prelude


def test_the_wheel_setuptools_writes_for_repair_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real bdist_wheel (this venv's setuptools; the build env's pinned 80.9 has the option too, as every
    setuptools since it took bdist_wheel over from wheel) given what the wrapper passes setup()."""
    captured: dict = {}
    monkeypatch.setattr(prelude, "wheelwright_upstream_setup", lambda **given: captured.update(given))
    monkeypatch.setattr(prelude, "WHEELWRIGHT_JOB", {
        "identifier": "pkg", "version": "1.0", "torch_requirement": "torch", "torch_in_install_requires": False,
        "arch_kind": "cuda", "arch_flags": None,
    })
    prelude.wheelwright_setup(version="1.0", ext_modules=[object()])
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n" * 1000)
    (tmp_path / "setup.py").write_text(
        "from setuptools import setup\n"
        f"setup(name='pkg', version='1.0', packages=['pkg'], options={captured['options']!r})\n"
    )
    subprocess.run([sys.executable, "setup.py", "-q", "bdist_wheel", "-d", str(tmp_path / "dist")], cwd=tmp_path,
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}
