"""Reading a few byte ranges of a member of a large zip without reading the rest: the central directory, one local
header, and from a deflated member only its head (inflated from the start) or its tail (inflated from a deflate
block found near the end). A torch wheel's libtorch_cuda.so keeps its dynamic symbol names in its last few MB
(patchelf moved ``.dynstr`` there): 2 MB of a 356 MB member instead of all of it.

Where the bytes come from is a :class:`ByteSource`: a cached wheel on disk, or HTTP range requests on its URL. Each
counts what it read, so a caller can say how much of the wheel it took."""

from __future__ import annotations

import io
import struct
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from builder.core.errors import FetchError, WheelError

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_WINDOW = 32768  # deflate's back-reference window
_TRY = 4096  # compressed bytes a candidate block start must inflate without an error before it is taken seriously
HTTP_TIMEOUT = 60.0


class ByteSource(Protocol):
    """Random access to a file's bytes, counting what was read."""

    name: str
    size: int
    bytes_read: int
    reads: int

    def read(self, offset: int, length: int) -> bytes: ...


class LocalFile:
    """A file on disk (a torch wheel in the cache)."""

    def __init__(self, path: Path) -> None:
        self.path, self.name = path, path.name
        self.size = path.stat().st_size
        self.bytes_read = self.reads = 0

    def read(self, offset: int, length: int) -> bytes:
        with self.path.open("rb") as stream:
            stream.seek(offset)
            data = stream.read(length)
        self.bytes_read += len(data)
        self.reads += 1
        if len(data) != length:
            raise WheelError(f"{self.name}: {length} bytes at {offset} run past its end ({self.size} bytes)")
        return data


class HttpRanges:
    """A file behind a URL, read with HTTP range requests; a server that ignores ``Range`` is refused, not
    downloaded whole."""

    def __init__(self, url: str, size: int, *, name: str) -> None:
        self.url, self.size, self.name = url, size, name
        self.bytes_read = self.reads = 0

    @classmethod
    def open(cls, url: str, *, size: int | None, name: str) -> HttpRanges:
        """``size`` as the index listed it; a PEP 503 page lists none, and the first range answer says it."""
        if size is not None:
            return cls(url, size, name=name)
        source = cls(url, 0, name=name)
        request = urllib.request.Request(url, headers={"Range": "bytes=0-0", "User-Agent": "wheelwright"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                total = response.headers.get("Content-Range", "").rpartition("/")[2]
                response.read(1)
        except (urllib.error.URLError, OSError) as error:
            raise FetchError(f"{name}: cannot reach {url}: {getattr(error, 'reason', error)}") from None
        if response.status != 206 or not total.isdigit():
            raise FetchError(f"{name}: {url} does not serve byte ranges (HTTP {response.status}, Content-Range "
                             f"{response.headers.get('Content-Range')!r})")
        source.size, source.bytes_read, source.reads = int(total), 1, 1
        return source

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        last = offset + length - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={offset}-{last}",
                                                             "User-Agent": "wheelwright"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                if response.status != 206:
                    raise FetchError(f"{self.name}: {self.url} answered a range request with HTTP "
                                     f"{response.status}, not 206 (the server does not serve byte ranges)")
                data: bytes = response.read(length + 1)
        except (urllib.error.URLError, OSError) as error:
            raise FetchError(f"{self.name}: cannot read bytes {offset}-{last} of {self.url}: "
                             f"{getattr(error, 'reason', error)}") from None
        self.bytes_read += len(data)
        self.reads += 1
        if len(data) != length:
            raise FetchError(f"{self.name}: asked {self.url} for {length} bytes at {offset}, got {len(data)}")
        return data


class _Adapter(io.RawIOBase):
    """A ByteSource as the seekable stream zipfile reads its central directory from."""

    def __init__(self, source: ByteSource) -> None:
        self.source, self.position = source, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.source.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.source.size - self.position)
        if count <= 0:
            return 0
        data = self.source.read(self.position, count)
        buffer[:count] = data
        self.position += count
        return count


@dataclass(frozen=True, kw_only=True)
class Member:
    """A member's place in the archive: where its (compressed) data starts, and its sizes."""

    name: str
    data_offset: int
    compressed_size: int
    size: int
    deflated: bool


def members(source: ByteSource) -> dict[str, Member]:
    """Every member of the zip by name, read from its central directory (and one local header per member asked
    for later, in :func:`locate`)."""
    try:
        with zipfile.ZipFile(io.BufferedReader(_Adapter(source), 1 << 16)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise WheelError(f"{source.name}: not a readable zip ({error})") from None
    return {info.filename: _member(info) for info in infos}


def _member(info: zipfile.ZipInfo) -> Member:
    # data_offset is filled in by locate(): the local header's name and extra lengths may differ from the central's
    return Member(name=info.filename, data_offset=info.header_offset, compressed_size=info.compress_size,
                  size=info.file_size, deflated=info.compress_type == zipfile.ZIP_DEFLATED)


def locate(source: ByteSource, member: Member) -> Member:
    """The member with ``data_offset`` pointing at its data, past its local header."""
    header = source.read(member.data_offset, _LOCAL_HEADER.size)
    fields = _LOCAL_HEADER.unpack(header)
    if fields[0] != _LOCAL_MAGIC:
        raise WheelError(f"{source.name}: {member.name}: no local file header at offset {member.data_offset}")
    start = member.data_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
    if start + member.compressed_size > source.size:
        raise WheelError(f"{source.name}: {member.name}: its data runs past the end of the archive")
    return Member(name=member.name, data_offset=start, compressed_size=member.compressed_size, size=member.size,
                  deflated=member.deflated)


class MemberBytes:
    """Byte ranges of one member, inflating no more of it than they need: a range near the start from the start,
    a range near the end from a deflate block near the end (whichever reads fewer compressed bytes)."""

    def __init__(self, source: ByteSource, member: Member) -> None:
        self.source, self.member = source, member
        self._head = b""  # the member's first bytes, inflated
        self._head_state: zlib._Decompress | None = None
        self._head_read = 0  # compressed bytes read for the head
        self._head_pending = b""  # of those, the ones not inflated yet
        self._tail = b""  # the member's last bytes, inflated; starts at self._tail_start
        self._tail_start = member.size
        self._tail_unknown: list[tuple[int, int]] = []  # ranges of the tail the unknown window may have reached
        self._tail_data = b""  # the compressed bytes the tail was inflated from: the member's last ones

    def read(self, offset: int, length: int) -> bytes:
        end = offset + length
        if offset < 0 or end > self.member.size:
            raise WheelError(f"{self.source.name}: {self.member.name}: bytes {offset}-{end} lie outside its "
                             f"{self.member.size} bytes")
        if not self.member.deflated:
            return self.source.read(self.member.data_offset + offset, length)
        if end <= len(self._head):
            return self._head[offset:end]
        if self._tail_covers(offset, end):
            return self._tail[offset - self._tail_start : end - self._tail_start]
        if end <= self.member.size - offset:  # nearer the start than the end: inflate from the start
            self._inflate_head(end)
            return self._head[offset:end]
        self._inflate_tail(offset, end)
        return self._tail[offset - self._tail_start : end - self._tail_start]

    def _tail_covers(self, offset: int, end: int) -> bool:
        return offset >= self._tail_start and not any(a < end and offset < b for a, b in self._tail_unknown)

    def _inflate_head(self, end: int) -> None:
        """Inflate from the start until ``end`` bytes are out, and no further: each call is capped at what is still
        wanted, so a member that inflates to far more than its directory entry says costs no more memory."""
        if self._head_state is None:
            self._head_state = zlib.decompressobj(-15)
        ratio = self.member.compressed_size / max(1, self.member.size)
        parts = [self._head]
        have = len(self._head)
        while have < end:
            if not self._head_pending:
                if self._head_read >= self.member.compressed_size:
                    break
                # what the rest should take at the member's average ratio, and a little more: rarely a second read
                size = min(max(1 << 16, int((end - have) * ratio * 1.1)), self.member.compressed_size - self._head_read)
                self._head_pending = self.source.read(self.member.data_offset + self._head_read, size)
                self._head_read += size
            try:
                out = self._head_state.decompress(self._head_pending, end - have)
            except zlib.error as error:
                raise WheelError(f"{self.source.name}: {self.member.name}: corrupt deflate data ({error})") from None
            self._head_pending = self._head_state.unconsumed_tail
            if not out and not self._head_pending and self._head_state.eof:
                break
            parts.append(out)
            have += len(out)
        self._head = b"".join(parts)
        if len(self._head) < end:
            raise WheelError(f"{self.source.name}: {self.member.name}: inflates to {len(self._head)} bytes, "
                             f"not the {self.member.size} its directory entry says")

    def _inflate_tail(self, offset: int, end: int) -> None:
        """Inflate the member's end from a block boundary early enough that bytes ``offset`` to ``end`` are known;
        each retry reads only the compressed bytes before those it already has."""
        want = self.member.size - offset
        ratio = self.member.compressed_size / max(1, self.member.size)
        span = max(1 << 16, int(want * ratio * 1.25) + 2 * _WINDOW)
        while True:
            span = min(span, self.member.compressed_size)
            start = self.member.compressed_size - span
            if span > len(self._tail_data):
                more = span - len(self._tail_data)
                self._tail_data = self.source.read(self.member.data_offset + start, more) + self._tail_data
            found = _inflate_from_a_block(self._tail_data, self.member.size, from_start=start == 0)
            if found is not None:
                tail, unknown = found
                tail_start = self.member.size - len(tail)
                self._tail, self._tail_start = tail, tail_start
                self._tail_unknown = [(tail_start + a, tail_start + b) for a, b in unknown]
                if self._tail_covers(offset, end):
                    return
            if start == 0:
                raise WheelError(f"{self.source.name}: {self.member.name}: no deflate block boundary found "
                                 "from which its end inflates")
            span *= 2


def _inflate_from_a_block(data: bytes, size: int, *, from_start: bool) -> tuple[bytes, list[tuple[int, int]]] | None:
    """(the inflated end of the member, the ranges of it that may hold bytes of the unknown window), from the first
    bit of ``data`` at which a deflate block starts that inflates cleanly to the end of ``data``."""
    if from_start:
        out = _inflate_all(data, b"", 0, size)
        return (out, []) if out is not None else None
    for byte, bit in _candidate_block_starts(data):
        zeros = _inflate_all(_primed(data[byte:], bit, guess=0), bytes(_WINDOW), _PRIMED_OUTPUT[bit], size)
        if zeros is None:
            continue
        ones = _inflate_all(_primed(data[byte:], bit, guess=1), b"\x01" * _WINDOW, _PRIMED_OUTPUT[bit], size)
        if ones is None or len(ones) != len(zeros):
            continue
        # A byte that came from the unknown window differs between the two guesses at it; one that did not is the
        # same in both, whatever the window held.
        return zeros, _differences(zeros, ones)
    return None


def _differences(first: bytes, second: bytes, grain: int = 4096) -> list[tuple[int, int]]:
    """The ``grain``-sized stretches where two equally long byte strings differ, merged (compared in C, a stretch
    at a time: a tail is megabytes)."""
    found: list[tuple[int, int]] = []
    for start in range(0, len(first), grain):
        if first[start : start + grain] != second[start : start + grain]:
            end = min(start + grain, len(first))
            if found and found[-1][1] == start:
                found[-1] = (found[-1][0], end)
            else:
                found.append((start, end))
    return found


# -- starting to inflate mid-stream ----------------------------------------------------------------------------------
# zlib inflates from a byte boundary, and a block starts at any bit. Rather than shift the rest of the stream (which
# would put every later stored block, byte-aligned in the original, off its boundary), a few empty fixed-Huffman
# blocks are put in front, as many bits long as the block's offset into its byte (mod 8): the original bytes then
# keep their alignment. An odd count needs one literal (a 9-bit code), which the output then starts with; the two
# guesses at the window use two different literals, so a back-reference to it shows as unknown like the window.

_EMPTY_FIXED = [0, 1, 0] + [0] * 7  # BFINAL 0, BTYPE 01 (LSB first), end-of-block: 10 bits


def _literal_block(value: int) -> list[int]:
    code = 0b110010000 + value - 144  # literals 144-255: 9-bit codes, sent most significant bit first
    return [0, 1, 0] + [(code >> (8 - i)) & 1 for i in range(9)] + [0] * 7  # 19 bits


def _prefix_bits(offset: int, guess: int) -> list[int]:
    """Whole deflate blocks, ``offset`` bits long modulo 8 (10 bits an empty block, 19 with one literal)."""
    if offset % 2 == 0:
        return _EMPTY_FIXED * ({0: 0, 2: 1, 4: 2, 6: 3}[offset])
    return _literal_block(144 + guess) + _EMPTY_FIXED * ({3: 0, 5: 1, 7: 2, 1: 3}[offset])


_PRIMED_OUTPUT = {bit: 1 if bit % 2 else 0 for bit in range(8)}  # bytes the prefix itself inflates to


def _primed(data: bytes, bit: int, *, guess: int) -> bytes:
    """``data`` from its ``bit``-th bit on, as zlib can inflate it: the prefix, then the original bytes."""
    bits = _prefix_bits(bit, guess)
    whole, tail = divmod(len(bits), 8)
    packed = bytes(sum(b << i for i, b in enumerate(bits[8 * n : 8 * n + 8])) for n in range(whole))
    if tail == 0:
        return packed + data
    low = sum(b << i for i, b in enumerate(bits[8 * whole :]))
    return packed + bytes([(data[0] & (0xFF << tail) & 0xFF) | low]) + data[1:]


def _candidate_block_starts(data: bytes) -> Iterator[tuple[int, int]]:
    """(byte, bit) positions where a deflate block plausibly starts (a stored block's lengths agree; a dynamic
    block's code-length code is complete) and the next 64 kB inflate without an error from any window: the ones
    worth inflating to the end. A false start decodes garbage until a garbage block header fails."""
    for byte in range(max(0, len(data) - _TRY)):
        value = int.from_bytes(data[byte : byte + 12], "little")
        for bit in range(8):
            if _plausible_header(value >> bit, data, byte, bit) and all(
                _inflates_a_while(_primed(data[byte : byte + size], bit, guess=0))
                for size in (_TRY, 16 * _TRY)
            ):
                yield byte, bit


def _plausible_header(header: int, data: bytes, byte: int, bit: int) -> bool:
    kind = (header >> 1) & 3
    if kind == 0:  # stored: LEN and its complement, at the next byte boundary
        at = byte + 1 if bit + 3 <= 8 else byte + 2
        return at + 4 <= len(data) and int.from_bytes(data[at : at + 2], "little") ^ int.from_bytes(
            data[at + 2 : at + 4], "little") == 0xFFFF
    if kind != 2 or (header >> 3) & 31 > 29 or (header >> 8) & 31 > 29:
        return False
    count = ((header >> 13) & 15) + 4  # HCLEN + 4 code lengths of 3 bits each: the code must be complete
    lengths = [(header >> (17 + 3 * i)) & 7 for i in range(count)]
    return sum(1 << (7 - n) for n in lengths if n) == 128


def _inflates_a_while(data: bytes) -> bool:
    try:
        inflater = zlib.decompressobj(-15, zdict=bytes(_WINDOW))
        inflater.decompress(data, 64 * len(data))
    except zlib.error:
        return False
    return not inflater.eof


def _inflate_all(data: bytes, window: bytes, skip: int, limit: int) -> bytes | None:
    """The whole stream inflated (less the ``skip`` bytes a prefix made), when it ends exactly at the end of
    ``data`` within ``limit`` bytes; None when it fails, ends elsewhere or would make more."""
    try:
        inflater = zlib.decompressobj(-15, zdict=window) if window else zlib.decompressobj(-15)
        out = inflater.decompress(data, limit + skip + 1)
    except zlib.error:
        return None
    if not inflater.eof or inflater.unused_data or inflater.unconsumed_tail or len(out) > limit + skip:
        return None
    return out[skip:]
