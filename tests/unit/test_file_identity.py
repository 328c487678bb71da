"""A file's strong identity (builder/core/hashing.py): what the index holds a hash to, and what breaks it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from builder.core.hashing import FileIdentity, holds_identity, regular_identity


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        ("nothing", True),
        ("the same size of other bytes, the mtime put back", False),  # ctime moves: no user can set it
        ("replaced by a copy", False),  # another inode
        ("a symlink to it in its place", False),
        ("removed", False),
        ("a folder in its place", False),
    ],
)
def test_a_file_holds_its_identity_until_anything_about_it_changes(tmp_path: Path, change: str, holds: bool) -> None:
    path = tmp_path / "a.whl"
    path.write_bytes(b"wheel bytes")
    identity = regular_identity(path)
    before = os.lstat(path)
    if change == "the same size of other bytes, the mtime put back":
        time.sleep(0.05)  # past the kernel's coarse clock tick, which stamps ctime
        path.write_bytes(b"WHEEL BYTES")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "replaced by a copy":
        (tmp_path / "copy").write_bytes(path.read_bytes())
        os.replace(tmp_path / "copy", path)
    elif change == "a symlink to it in its place":
        os.replace(path, tmp_path / "elsewhere")
        path.symlink_to(tmp_path / "elsewhere")
    elif change == "removed":
        path.unlink()
    elif change == "a folder in its place":
        path.unlink()
        path.mkdir()
    assert holds_identity(str(path), identity) is holds
    assert isinstance(identity, FileIdentity)
