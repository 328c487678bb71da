"""Rewrite a wheel's archive: the members it holds, changed or added files, a fresh RECORD, and bytes that depend
only on the contents (entries sorted, .dist-info last, one timestamp from SOURCE_DATE_EPOCH, fixed permissions), so
the same files always make the same wheel."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import time
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from builder.core.archive import open_archive
from builder.core.errors import WheelError
from builder.core.files import atomic_file

_EPOCH_FLOOR = 315532800  # 1980-01-01, the earliest time a zip entry can hold
_DEFAULT_EPOCH = _EPOCH_FLOOR  # without SOURCE_DATE_EPOCH: the bytes must not depend on when the build ran


_LEVEL = 6  # zlib's default: what pip, wheel and auditwheel write
# A member this large is deflated in chunks of this size on every core (zlib lets go of the GIL), pigz's way:
# each chunk its own raw deflate stream ending in a sync flush (byte-aligned, not final), the last one finished, so
# the concatenation is one valid deflate stream. The chunk size, not the core count, fixes the bytes; a chunk
# starts without the previous one's 32 KiB window, which costs well under 0.1% of size at 4 MiB.
_CHUNK = 4 << 20


@dataclass(frozen=True)
class Deflated:
    """A member's bytes as an archive written by write_wheel holds them (deflated at _LEVEL), and their CRC."""

    raw: bytes
    crc: int


@dataclass(frozen=True, kw_only=True)
class Member:
    data: bytes
    executable: bool = False
    # read_members(keep_deflated=True) keeps what the archive held: write_wheel copies it instead of deflating
    # ``data`` again (the ~330 MB extension of a full-arch wheel takes ~12 s on one core), while its CRC is data's
    deflated: Deflated | None = field(default=None, compare=False, repr=False)


def read_members(wheel: Path, *, keep_deflated: bool = False) -> dict[str, Member]:
    """Every file of ``wheel`` by its archive name (directories dropped), read within the archive caps of
    builder.core.archive; ``keep_deflated`` also keeps each member's compressed bytes for write_wheel to copy:
    only for a wheel write_wheel wrote, so the copy is the deflate stream it would have made (the level is not in
    the archive)."""
    try:
        with open_archive(wheel) as archive, open(wheel, "rb") as raw:
            return {
                info.filename: Member(
                    data=archive.read(info),
                    executable=bool((info.external_attr >> 16) & 0o111),
                    deflated=_deflated(raw, info) if keep_deflated else None,
                )
                for info in archive.files
            }
    except (zipfile.BadZipFile, OSError, struct.error) as error:
        raise WheelError(f"{wheel}: not a readable wheel ({error})") from None


def _deflated(raw: BinaryIO, info: zipfile.ZipInfo) -> Deflated | None:
    """The member's compressed bytes, read past its local header (30 bytes, then the name and the extra field,
    whose lengths end it); None for a stored or encrypted member."""
    if info.compress_type != zipfile.ZIP_DEFLATED or info.flag_bits & 0x1:
        return None
    raw.seek(info.header_offset)
    header = raw.read(30)
    if header[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {info.filename}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    raw.seek(name_length + extra_length, os.SEEK_CUR)
    return Deflated(raw=raw.read(info.compress_size), crc=info.CRC)


def dist_info_dir(members: Mapping[str, Member], where: str) -> str:
    """The one top-level ``*.dist-info`` folder of the wheel."""
    found = {name.split("/", 1)[0] for name in members if name.split("/", 1)[0].endswith(".dist-info")}
    if len(found) != 1:
        raise WheelError(f"{where}: expected one .dist-info folder, found {sorted(found) or 'none'}")
    return found.pop()


def record_digest(data: bytes) -> str:
    """RECORD's hash notation: ``sha256=<urlsafe base64, no padding>``."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def source_date_epoch() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH", "")
    try:
        return max(int(raw), _EPOCH_FLOOR) if raw else _DEFAULT_EPOCH
    except ValueError:
        raise WheelError(f"SOURCE_DATE_EPOCH={raw!r} is not a number of seconds") from None


def _order(name: str, dist_info: str) -> tuple[int, str]:
    """Payload first, then .dist-info, RECORD last (the order wheel tools write and installers expect)."""
    if name == f"{dist_info}/RECORD":
        return (2, name)
    return (1 if name.startswith(dist_info + "/") else 0, name)


def write_wheel(path: Path, members: Mapping[str, Member]) -> Path:
    """Write ``members`` (RECORD is regenerated) as a reproducible wheel at ``path``, atomically."""
    dist_info = dist_info_dir(members, path.name)
    record_name = f"{dist_info}/RECORD"
    files = {name: member for name, member in members.items() if name != record_name}
    lines = [f"{name},{record_digest(m.data)},{len(m.data)}" for name, m in sorted(files.items())]
    files[record_name] = Member(data=("\n".join([*lines, f"{record_name},,"]) + "\n").encode())
    stamp = time.gmtime(source_date_epoch())[:6]
    with atomic_file(path) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED,
                                                  compresslevel=_LEVEL) as archive:
        for name in sorted(files, key=lambda n: _order(n, dist_info)):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if files[name].executable else 0o100644) << 16
            member = files[name]
            if member.deflated is None and len(member.data) > _CHUNK:
                _write_deflated(archive, info, member.data, _deflate(member.data))
            elif not _copy_deflated(archive, info, member):
                archive.writestr(info, member.data)
    return path


def _deflate(data: bytes) -> Deflated:
    """``data`` deflated at _LEVEL in _CHUNK pieces side by side (see _CHUNK)."""
    view = memoryview(data)
    chunks = [view[start:start + _CHUNK] for start in range(0, len(data), _CHUNK)]
    from concurrent.futures import ThreadPoolExecutor  # a build's: the index writes no wheel this large

    with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1)) as pool:
        parts = list(pool.map(_deflate_chunk, chunks, [k == len(chunks) - 1 for k in range(len(chunks))]))
    return Deflated(raw=b"".join(parts), crc=zlib.crc32(data))


def _deflate_chunk(chunk: memoryview, last: bool) -> bytes:
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(chunk) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _copy_deflated(archive: zipfile.ZipFile, info: zipfile.ZipInfo, member: Member) -> bool:
    """Write ``member`` from the compressed bytes kept from a wheel write_wheel wrote; False, and nothing written,
    when there are none or their CRC is not ``data``'s (a changed member)."""
    deflated = member.deflated
    if deflated is None or zlib.crc32(member.data) != deflated.crc:
        return False
    _write_deflated(archive, info, member.data, deflated)
    return True


def _write_deflated(archive: zipfile.ZipFile, info: zipfile.ZipInfo, data: bytes, deflated: Deflated) -> None:
    """``data``'s entry from ``deflated`` (its deflate stream and CRC), as writestr would have written it but for
    the deflate. zipfile has no API for this: it appends at ``start_dir``, where writestr would, and registers the
    entry as writestr does, for close() to list it."""
    info.CRC, info.file_size, info.compress_size = deflated.crc, len(data), len(deflated.raw)
    fp = archive.fp
    if fp is None:  # closed: writestr would raise as well
        raise ValueError("attempt to write to a closed ZIP archive")
    info.header_offset = archive.start_dir
    fp.seek(info.header_offset)
    fp.write(info.FileHeader())
    fp.write(deflated.raw)
    archive.start_dir = fp.tell()
    archive.filelist.append(info)
    archive.NameToInfo[info.filename] = info
