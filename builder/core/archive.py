"""Bounded reads of zip archives (wheels): the member count, each member's and the archive's uncompressed bytes
and the compression ratio are capped, counted as the bytes inflate (a header's sizes are never trusted), and
member names that are absolute, climb out, repeat or differ only by case are refused with the member named.
Standard library only and Python 3.9+ (doctor.py's floor), so any reader may use it. Caps: docs/hostile-input.md."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from builder.core.errors import WheelError

MIB = 1 << 20
_CHUNK = MIB  # bytes inflated per step: what a read holds beyond the member's own bytes
RATIO_FLOOR = MIB  # a member (or an archive) this small may compress better than ``ratio``: text, zeros, tiny files


class ArchiveError(WheelError):
    """An archive is malformed or breaks a cap; the message names the archive and, where one is at fault, the
    member."""


@dataclass(frozen=True)
class Limits:
    """What one archive may hold and what reading it may cost (the figures and why: docs/hostile-input.md)."""

    members: int  # entries in the central directory, folders included
    directory_bytes: int  # the central directory itself, checked before zipfile parses it
    member_bytes: int  # one member, uncompressed
    total_bytes: int  # every member read from one opened archive, uncompressed, together
    ratio: int  # uncompressed : compressed, for a member (and for the archive) past RATIO_FLOOR bytes
    case_folding: bool = True  # refuse names that differ only by case (our wheels; not torch's, read for one file)


# Our wheels. The largest, mamba-ssm built for 9 archs: ~62 members, one ~510 MB extension, ~1.5:1 overall.
WHEEL = Limits(members=10_000, directory_bytes=16 * MIB, member_bytes=2048 * MIB, total_bytes=2048 * MIB, ratio=50)
# A wheel we read one small file of (torch's, ~20k members, for torch/version.py or its METADATA).
FOREIGN = Limits(members=200_000, directory_bytes=128 * MIB, member_bytes=16 * MIB, total_bytes=64 * MIB, ratio=50,
                 case_folding=False)

_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # what PEP 427 wheels use; bzip2/lzma readers are not asked
# Errors a malformed archive raises from zipfile and zlib (encrypted: RuntimeError; bad deflate: zlib.error).
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError,
                struct.error, KeyError)
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory: signature, disks, entries here/total, size, offset
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


class Archive:
    """An open archive whose member names have been checked; ``read``, ``chunks`` and ``extract`` stay within
    ``limits``, counted across every read of this archive."""

    def __init__(self, stream: BinaryIO, size: int, where: str, limits: Limits) -> None:
        self.where, self.limits, self.size = where, limits, size
        _check_directory(stream, size, where, limits)
        try:
            self._zip = zipfile.ZipFile(stream)
        except _READ_ERRORS as error:
            raise ArchiveError(f"{where}: not a readable zip archive ({error})") from None
        infos = self._zip.infolist()
        if len(infos) > limits.members:
            raise ArchiveError(f"{where}: {len(infos):,} members; at most {limits.members:,} are read")
        check_names([info.filename for info in infos], where, case_folding=limits.case_folding)
        _check_layout(infos, self._zip.start_dir, where)
        self.files = tuple(info for info in infos if not info.is_dir())
        self.inflated = 0

    def names(self) -> list[str]:
        return [info.filename for info in self.files]

    def info(self, name: str) -> zipfile.ZipInfo:
        try:
            return self._zip.getinfo(name)
        except KeyError:
            raise ArchiveError(f"{self.where}: no member {name!r}") from None

    def chunks(self, member: zipfile.ZipInfo | str) -> Iterator[bytes]:
        """The member's bytes as they inflate, stopped as soon as a cap is passed."""
        info = self.info(member) if isinstance(member, str) else member
        self._check_declared(info)
        produced = 0
        try:
            with self._zip.open(info) as stream:
                while True:
                    chunk = stream.read(_CHUNK)
                    if not chunk:
                        return
                    produced += len(chunk)
                    self.inflated += len(chunk)
                    self._check_counts(info, produced)
                    yield chunk
        except _READ_ERRORS as error:
            raise ArchiveError(f"{self.where}: member {info.filename!r} cannot be read ({error})") from None

    def read(self, member: zipfile.ZipInfo | str) -> bytes:
        return b"".join(self.chunks(member))

    def extract(self, into: Path) -> None:
        """Every member under ``into`` (folders made, nothing written outside it: the names were checked)."""
        for info in self._zip.infolist():
            target = into.joinpath(*info.filename.rstrip("/").split("/"))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:
                out.writelines(self.chunks(info))

    def _check_declared(self, info: zipfile.ZipInfo) -> None:
        """What the header says, refused before a byte inflates (the counting below is what holds)."""
        if info.compress_type not in _METHODS:
            raise ArchiveError(f"{self.where}: member {info.filename!r} uses compression method "
                               f"{info.compress_type}; a wheel is stored or deflated")
        self._check_counts(info, info.file_size, declared=True)

    def _check_counts(self, info: zipfile.ZipInfo, produced: int, *, declared: bool = False) -> None:
        said = "declares" if declared else "inflates to"
        plus = "" if declared else "+"  # counting stops at the first chunk past a cap
        limits, member = self.limits, f"member {info.filename!r}"
        if produced > limits.member_bytes:
            raise ArchiveError(f"{self.where}: {member} {said} more than {limits.member_bytes:,} bytes, the cap "
                               "for one member")
        if produced > RATIO_FLOOR and produced > limits.ratio * max(info.compress_size, 1):
            raise ArchiveError(f"{self.where}: {member} {said} {produced:,}{plus} bytes from "
                               f"{info.compress_size:,} compressed: more than {limits.ratio}:1 (a zip bomb?)")
        total = self.inflated + (produced if declared else 0)
        if total > limits.total_bytes:
            raise ArchiveError(f"{self.where}: its members inflate to more than {limits.total_bytes:,} bytes "
                               f"together (at {member})")
        if total > RATIO_FLOOR and total > limits.ratio * max(self.size, 1):
            raise ArchiveError(f"{self.where}: its members inflate to {total:,}{plus} bytes from a "
                               f"{self.size:,}-byte archive: more than {limits.ratio}:1 (at {member}; a zip bomb?)")


@contextmanager
def open_archive(path: Path, limits: Limits = WHEEL, *, where: str | None = None) -> Iterator[Archive]:
    """``path`` opened for bounded reads; a FIFO, a device or a folder is refused without being read."""
    shown = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO does not wait for a writer
    except OSError as error:
        raise ArchiveError(f"{shown}: cannot open ({error.strerror or error})") from None
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise ArchiveError(f"{shown}: not a regular file")
    with os.fdopen(fd, "rb") as stream:
        yield Archive(stream, status.st_size, shown, limits)


@contextmanager
def open_stream(stream: BinaryIO, size: int, where: str, limits: Limits = FOREIGN) -> Iterator[Archive]:
    """A seekable stream of ``size`` bytes (a remote file read by ranges) opened for bounded reads."""
    yield Archive(stream, size, where, limits)


def check_names(names: list[str], where: str, *, case_folding: bool = True) -> None:
    """Refuse a name that is empty, absolute, climbs (``..``), holds a control character, a backslash or an empty
    or ``.`` part, repeats another, differs from another only by case, or is a file and a folder at once."""
    seen: dict[str, str] = {}
    files: set[str] = set()
    folders: set[str] = set()
    for name in names:
        path = name.removesuffix("/")
        problem = _name_problem(path)
        if problem:
            raise ArchiveError(f"{where}: member {name!r} {problem}")
        key = path.casefold() if case_folding else path
        if key in seen:
            how = "appears twice" if seen[key] == path else f"differs from {seen[key]!r} only by case"
            raise ArchiveError(f"{where}: member {name!r} {how}")
        seen[key] = path
        (folders if name.endswith("/") else files).add(key)
        parts = key.split("/")
        folders.update("/".join(parts[:k]) for k in range(1, len(parts)))
    if files & folders:
        both = min(files & folders)
        raise ArchiveError(f"{where}: member {seen[both]!r} is both a file and a folder")


def _name_problem(path: str) -> str | None:
    if not path:
        return "has an empty name"
    if path.startswith("/") or (len(path) > 1 and path[0].isalpha() and path[1] == ":"):
        return "is an absolute path"
    if any(ord(c) < 0x20 or c == "\x7f" for c in path):
        return "holds a control character"
    if "\\" in path:
        return "holds a backslash (a Windows path)"
    parts = path.split("/")
    if ".." in parts:
        return "climbs out of the archive (..)"
    if "" in parts or "." in parts:
        return "has an empty or '.' part"
    return None


def _check_directory(stream: BinaryIO, size: int, where: str, limits: Limits) -> None:
    """The end record's entry count and directory size, read before zipfile builds an object per entry."""
    entries, directory = _end_record(stream, size, where)
    if entries > limits.members:
        raise ArchiveError(f"{where}: {entries:,} members; at most {limits.members:,} are read")
    if directory > limits.directory_bytes:
        raise ArchiveError(f"{where}: a {directory:,}-byte central directory; at most "
                           f"{limits.directory_bytes:,} bytes are read")


def _end_record(stream: BinaryIO, size: int, where: str) -> tuple[int, int]:
    """(entries, central directory bytes) from the end record, or from the zip64 end record just before its
    locator where there is one: the values zipfile itself goes by."""
    tail_size = min(size, _EOCD.size + 0xFFFF)
    stream.seek(size - tail_size)
    tail = stream.read(tail_size)
    at = _end_record_at(tail)
    if at < 0:
        raise ArchiveError(f"{where}: not a zip archive (no end of central directory)")
    _, _, _, _, entries, directory, _, _ = _EOCD.unpack_from(tail, at)
    locator = size - tail_size + at - _ZIP64_LOCATOR.size
    if locator < _ZIP64_EOCD.size:
        return entries, directory
    stream.seek(locator - _ZIP64_EOCD.size)
    record = stream.read(_ZIP64_EOCD.size + _ZIP64_LOCATOR.size)
    if record[_ZIP64_EOCD.size:_ZIP64_EOCD.size + 4] != b"PK\x06\x07" or record[:4] != b"PK\x06\x06":
        return entries, directory
    fields = _ZIP64_EOCD.unpack_from(record)
    return fields[7], fields[8]  # entries in total, directory size


def _end_record_at(tail: bytes) -> int:
    """Where the end record starts in ``tail``, found as zipfile finds it (the last 22 bytes, else the last
    signature), so the counts checked here are the ones zipfile then uses; -1 where there is none."""
    if len(tail) >= _EOCD.size and tail[-_EOCD.size:-_EOCD.size + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
        return len(tail) - _EOCD.size
    at = tail.rfind(b"PK\x05\x06")
    return at if 0 <= at <= len(tail) - _EOCD.size else -1


def _check_layout(infos: list[zipfile.ZipInfo], directory_start: int, where: str) -> None:
    """Members' data must not overlap one another or the central directory: overlapping entries are how a small
    archive inflates one compressed stream many times."""
    ordered = sorted(infos, key=lambda info: info.header_offset)
    ends = [info.header_offset + 30 + len(_raw_name(info)) + info.compress_size for info in ordered]
    for info, end, after in zip(ordered, ends, [*ordered[1:], None]):
        limit = directory_start if after is None else after.header_offset
        if end > limit:
            other = "the central directory" if after is None else f"member {after.filename!r}"
            raise ArchiveError(f"{where}: member {info.filename!r} overlaps {other}")


def _raw_name(info: zipfile.ZipInfo) -> bytes:
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
