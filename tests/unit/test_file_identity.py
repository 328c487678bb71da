"""A file's strong identity (builder/core/hashing.py): what the index holds a hash to, and what breaks it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from builder.core.hashing import FileIdentity, holds_identity, regular_identity, sorted_entries


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


def test_a_folder_is_listed_in_order_with_the_lstat_of_each_name(tmp_path: Path) -> None:
    for name in ("b.whl", "a.whl", "notes.txt"):
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "c.whl").symlink_to(tmp_path / "a.whl")
    with sorted_entries(tmp_path, ".whl") as (names, status_of):
        assert names == ["a.whl", "b.whl", "c.whl"]
        assert FileIdentity.of(status_of("a.whl")) == regular_identity(tmp_path / "a.whl")
        assert stat.S_ISLNK(status_of("c.whl").st_mode)  # the link itself, never followed


@pytest.mark.parametrize("which", ["dist", "variant"])
def test_a_file_gone_between_listing_and_its_stat_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    from index_site import inputs

    kept = "causal_conv1d-1.7.0-cp311-cp311-linux_x86_64-pt214cu130.whl"
    (tmp_path / kept).write_bytes(b"x")
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda fd: [*real(fd), kept.replace("1.7.0", "1.6.0")])  # listed, then gone
    listed, refused = (inputs.listing if which == "dist" else inputs.variant_listing)(tmp_path)
    assert list(listed) == [kept] and refused == []
