"""Content hashes of files, and the file identity that says when a hash taken earlier still holds, shared by the
build steps and the index. Only regular files are read: a symlink, FIFO or device named like a wheel is refused."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, NamedTuple

_CHUNK = 1 << 20


class NotARegularFile(OSError):
    """The path is a symlink, FIFO, device or folder: never read, hashed, copied or served as a file."""


class FileIdentity(NamedTuple):
    """What must all hold for a hash taken earlier to describe a file's bytes now. ctime cannot be set by a
    user and changes on every write, so a rewrite with the same size that restores the mtime is still seen.
    A tuple: tens of thousands are built and compared on every index run."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        return cls(status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)

    def __str__(self) -> str:
        return f"{self.inode}:{self.size}:{self.mtime_ns}:{self.ctime_ns}"

    @classmethod
    def parse(cls, text: str | None) -> FileIdentity | None:
        """The identity written by ``str()``, or None for anything else (an older row, a damaged one)."""
        try:
            inode, size, mtime_ns, ctime_ns = (int(part) for part in (text or "").split(":"))
        except ValueError:
            return None
        return cls(inode, size, mtime_ns, ctime_ns)


def regular_identity(path: Path | str) -> FileIdentity:
    """The identity of the regular file at ``path`` itself (a symlink is not followed); raise NotARegularFile."""
    status = os.lstat(path)
    if not stat.S_ISREG(status.st_mode):
        raise NotARegularFile(f"{path}: not a regular file")
    return FileIdentity.of(status)


def identity_if_regular(path: Path | str) -> FileIdentity | None:
    """The identity of the regular file at ``path`` (a symlink is not followed); None for a missing file or one of
    another kind. One lstat: the index asks it of every file on every run."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return FileIdentity.of(status) if stat.S_ISREG(status.st_mode) else None


@contextmanager
def sorted_entries(folder: Path | str, suffix: str) -> Iterator[tuple[list[str], Callable[[str], os.stat_result]]]:
    """The names in ``folder`` that end in ``suffix``, sorted, and the lstat of a name there: one fstatat
    relative to the folder held open, so no path is walked again per file. The index lists dist/ and variant/ on
    every run: at 100,000 files each, a third less CPU than the stat of os.scandir's entries in the folder's
    order (docs/runs.md). Raises what opening or listing the folder raises."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        names = [name for name in os.listdir(fd) if name.endswith(suffix)]
        names.sort()
        yield names, functools.partial(os.stat, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def holds_identity(path: str, identity: tuple[int, int, int, int]) -> bool:
    """Whether the regular file at ``path`` still has ``identity`` (a FileIdentity)."""
    return identity_if_regular(path) == identity


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of the regular file at ``path``: no symlink followed, a FIFO never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(f"{path}: not a regular file")
    return fd


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in chunks."""
    with path.open("rb") as file:
        return sha256_stream(file)


def sha256_stream(file: BinaryIO) -> str:
    """The hex sha256 of what is left to read of ``file``."""
    digest = hashlib.sha256()
    while chunk := file.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def hash_regular(path: Path | str) -> tuple[str, FileIdentity]:
    """The sha256 of the regular file at ``path`` and its identity, both from the one open descriptor; the identity
    is taken after reading, so a write during the read shows as a changed identity next time."""
    with os.fdopen(open_regular(path), "rb") as file:
        return sha256_stream(file), FileIdentity.of(os.fstat(file.fileno()))
