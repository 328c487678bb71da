"""The files of a site folder as the index, serve and publish see them: only regular files under the managed
names (layout.MANAGED), reached without following a symlink at any level. A symlink, FIFO or device inside the
site is never read, served or uploaded, so nothing outside the site can be reached through it."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from builder.core.hashing import NotARegularFile
from index_site import layout

log = logging.getLogger(__name__)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_site_file(site: Path | str, relative: str) -> int:
    """A read-only descriptor of the regular file ``relative`` of ``site``; every folder on the way is opened with
    O_NOFOLLOW relative to its parent, so a symlink anywhere on the path fails instead of leading elsewhere.

    Raises FileNotFoundError (not a site path, or missing) or NotARegularFile."""
    if not layout.is_site_path(relative):
        raise FileNotFoundError(relative)
    *folders, name = relative.split("/")
    directory = os.open(site, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for folder in folders:
            try:
                parent, directory = directory, os.open(folder, _DIRECTORY_FLAGS, dir_fd=directory)
            except (NotADirectoryError, OSError) as error:  # ELOOP: a symlinked folder
                raise FileNotFoundError(relative) from error
            os.close(parent)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
        except OSError as error:
            if error.errno in (2, 20):
                raise FileNotFoundError(relative) from error
            raise NotARegularFile(f"{relative}: not a regular file") from error
    finally:
        os.close(directory)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{relative}: not a regular file")
    return fd


def site_files(site: Path) -> Iterator[str]:
    """The relative paths of the regular files under the managed names; anything else is skipped with a warning."""
    for top in layout.MANAGED:
        root = site / top
        if root.is_symlink() or not root.exists():
            if root.is_symlink():
                log.warning("%s: a symbolic link, not part of the site; skipped", root)
            continue
        if root.is_file():
            yield top
            continue
        for directory, folders, files in os.walk(root):
            relative = Path(directory).relative_to(site).as_posix()
            for name in folders + files:
                path = os.path.join(directory, name)
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode) and name in files and layout.is_site_path(f"{relative}/{name}"):
                    yield f"{relative}/{name}"
                elif not stat.S_ISDIR(mode):
                    log.warning("%s: not a regular file, not part of the site; skipped", path)
