"""The builds' fixed root (/tmp/wheelwright-build) in a /tmp other users share: a build compiles there only in a
real folder of its own user's, which no one else may write into."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.errors import FileSystemError
from builder.steps.compilation import _own_folder


def _symlink_to_a_folder_of_ours(root: Path) -> None:
    (root.parent / "elsewhere").mkdir()
    root.symlink_to(root.parent / "elsewhere")


def _a_file(root: Path) -> None:
    root.write_text("not a folder\n")


def _another_users_folder(root: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can make a folder another user's")  # CI's machine runs as root
    root.mkdir()
    os.chown(root, 65534, 65534)  # nobody


# (case, what stands at the fixed root's path before the build)
REFUSED = [
    ("symlink", _symlink_to_a_folder_of_ours),
    ("file", _a_file),
    ("another-users-folder", _another_users_folder),
]


@pytest.mark.parametrize("plant", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_fixed_root_not_a_folder_of_this_users_is_refused(tmp_path: Path, plant: Callable[[Path], None]) -> None:
    root = tmp_path / "wheelwright-build"
    plant(root)
    with pytest.raises(FileSystemError, match="is not a folder of this user's"):
        _own_folder(root)


def test_a_fixed_root_of_ours_is_made_or_kept_and_no_one_else_may_write_into_it(tmp_path: Path) -> None:
    made = tmp_path / "made"
    _own_folder(made)
    assert stat.S_IMODE(made.stat().st_mode) & 0o022 == 0
    kept = tmp_path / "kept"
    kept.mkdir()
    os.chmod(kept, 0o777)  # an older build's, under umask 000
    _own_folder(kept)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o755
