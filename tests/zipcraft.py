"""Zip archives written byte by byte, for the hostile-archive tests: names zipfile would not write (duplicates,
``..``), headers that lie about sizes, entries that share one compressed stream, and bombs whose deflate stream is
made once and reused. Also a wheel whose provenance record agrees with everything it holds, so the only thing wrong
with it is what a case plants."""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_STORED, _DEFLATED = 0, 8


@dataclass(frozen=True, kw_only=True)
class Blob:
    """A member's bytes as the archive holds them, with the CRC and size of what they inflate to."""

    raw: bytes
    crc: int
    size: int
    method: int = _DEFLATED
    repeat: int = 1  # ``raw`` written this many times, then ``tail``: a large member never held whole
    tail: bytes = b""

    @property
    def compressed_size(self) -> int:
        return len(self.raw) * self.repeat + len(self.tail)

    @classmethod
    def of(cls, data: bytes, *, deflate: bool = True) -> Blob:
        if not deflate:
            return cls(raw=data, crc=zlib.crc32(data), size=len(data), method=_STORED)
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        return cls(raw=compressor.compress(data) + compressor.flush(), crc=zlib.crc32(data), size=len(data))


@functools.cache
def zeros(size: int) -> Blob:
    """``size`` zero bytes deflated (about 1,000:1), made 1 MiB at a time and kept for the process."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk, parts, crc = bytes(1 << 20), [], 0
    for start in range(0, size, len(chunk)):
        piece = chunk[: min(len(chunk), size - start)]
        parts.append(compressor.compress(piece))
        crc = zlib.crc32(piece, crc)
    return Blob(raw=b"".join(parts) + compressor.flush(), crc=crc, size=size)


@functools.cache
def zeros_sha256(size: int) -> str:
    digest, chunk = hashlib.sha256(), bytes(1 << 20)
    for start in range(0, size, len(chunk)):
        digest.update(chunk[: min(len(chunk), size - start)])
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    blob: Blob
    declared_size: int | None = None  # what the headers say it inflates to, when they lie
    same_data_as: int | None = None  # point at an earlier entry's local header and data instead of writing any
    flags: int = 0x800  # UTF-8 names


def craft(path: Path, entries: list[Entry]) -> Path:
    """Write ``entries`` as one archive, byte by byte (streamed: a repeated blob is never held whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    central, offsets = bytearray(), []
    with path.open("wb") as out:
        for entry in entries:
            name, blob = entry.name.encode(), entry.blob
            size = blob.size if entry.declared_size is None else entry.declared_size
            if entry.same_data_as is None:
                offsets.append(out.tell())
                out.write(_LOCAL.pack(b"PK\x03\x04", 20, entry.flags, blob.method, 0, 0x21, blob.crc,
                                      blob.compressed_size, size, len(name), 0) + name)
                for _ in range(blob.repeat):
                    out.write(blob.raw)
                out.write(blob.tail)
            else:
                offsets.append(offsets[entry.same_data_as])
            central += _CENTRAL.pack(b"PK\x01\x02", 20, 20, entry.flags, blob.method, 0, 0x21, blob.crc,
                                     blob.compressed_size, size, len(name), 0, 0, 0, 0, 0o100644 << 16,
                                     offsets[-1]) + name
        start = out.tell()
        out.write(bytes(central) + _END.pack(b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), start, 0))
    return path


def repeated(chunk: bytes, times: int) -> Blob:
    """``chunk`` ``times`` over, deflated: the chunk is compressed once with a full flush (no back-references
    across it), so the same compressed block is valid at every position; a final empty block ends the stream."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(times):
        crc = zlib.crc32(chunk, crc)
    return Blob(raw=block, crc=crc, size=len(chunk) * times, repeat=times, tail=b"\x03\x00")


# -- a wheel whose provenance agrees with its contents ---------------------------------------------------------------

PROJECT, VERSION, LABEL = "causal_conv1d", "1.7.0", "pt214cu130"
DIST_INFO = f"{PROJECT}-{VERSION}+{LABEL}.dist-info"
WHEEL_NAME = f"{PROJECT}-{VERSION}+{LABEL}-cp311-cp311-linux_x86_64.whl"


def record(files: dict[str, str], **changes: object) -> dict[str, object]:
    """A provenance record (schema 1) for ``files`` ({name: sha256}) that the wheel's metadata agrees with."""
    base: dict[str, object] = {
        "schema": 1, "job": f"causal-conv1d-{VERSION}+{LABEL}-cp311-x86_64", "package": "causal-conv1d",
        "version": VERSION, "label": LABEL, "python": "cp311", "manylinux": "manylinux_2_28_x86_64",
        "sdist": {"filename": "causal_conv1d-1.7.0.tar.gz", "sha256": "0" * 64},
        "recipe": {"arch_control": "env", "env": {}, "abi_env": None, "patches": [], "applied": []},
        "torch": {"version": "2.14.1", "requirement": None, "cxx11_abi": True},
        "toolkit": {"kind": "cpu", "version": "0"}, "host_compiler": "gcc", "archs": {"sass": [], "ptx": []},
        "wheelwright": {"version": "0", "commit": "0"}, "build_host": {"name": "h", "system": "Linux", "libc": "glibc"},
        "files": files,
    }
    return {**base, **changes}


def provenance_wheel(directory: Path, payload: list[Entry], *, record_changes: dict[str, object] | None = None,
                     extra: list[Entry] | None = None, digests: dict[str, str] | None = None,
                     provenance_bytes: bytes | None = None) -> Path:
    """A wheel of ``payload`` (plus its METADATA, WHEEL and wheelwright.json, then ``extra``) whose record lists
    every payload member's sha256 (``digests`` supplies those of members too large to hash here)."""
    digests = digests or {}
    files = {e.name: digests.get(e.name) or _sha256(e.blob) for e in payload}
    metadata = f"Metadata-Version: 2.1\nName: causal-conv1d\nVersion: {VERSION}+{LABEL}\n\n".encode()
    wheel = b"Wheel-Version: 1.0\nGenerator: zipcraft\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
    data = provenance_bytes or json.dumps({**record(files), **(record_changes or {})}).encode()
    meta = [Entry(name=f"{DIST_INFO}/METADATA", blob=Blob.of(metadata)),
            Entry(name=f"{DIST_INFO}/WHEEL", blob=Blob.of(wheel)),
            Entry(name=f"{DIST_INFO}/wheelwright.json", blob=Blob.of(data))]
    return craft(directory / WHEEL_NAME, [*payload, *meta, *(extra or [])])


def _sha256(blob: Blob) -> str:
    if blob.method == _STORED:
        return hashlib.sha256(blob.raw).hexdigest()
    return hashlib.sha256(zlib.decompress(blob.raw, -15)).hexdigest()


def module(name: str, text: str = "VALUE = 1\n") -> Entry:
    return Entry(name=name, blob=Blob.of(text.encode()))
