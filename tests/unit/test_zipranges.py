"""Byte ranges of a zip member without the rest (builder/steps/zipranges.py): what comes back equals the member's
bytes wherever it lies, a range at the end of a deflated member costs a small part of it, and a damaged archive is
one WheelError. Over an in-memory source; tests/integration/test_torch_symbols.py reads over HTTP."""

from __future__ import annotations

import io
import random
import zipfile

import pytest

from builder.core.errors import WheelError
from builder.steps.zipranges import MemberBytes, locate, members


class Memory:
    """A ByteSource over bytes, counting what was read."""

    def __init__(self, data: bytes, name: str = "memory.whl") -> None:
        self.data, self.name, self.size = data, name, len(data)
        self.bytes_read = self.reads = 0

    def read(self, offset: int, length: int) -> bytes:
        self.bytes_read += length
        self.reads += 1
        if offset < 0 or offset + length > self.size:
            raise WheelError(f"{self.name}: {length} bytes at {offset} run past its end")
        return self.data[offset : offset + length]


def _names(size: int, seed: int) -> bytes:
    """A string table like torch's ``.dynstr``: distinct mangled-looking names, sorted, built from a few dozen
    repeating parts (compressible, and unlike a repeated string not to nothing)."""
    rng = random.Random(seed)
    parts = ["c10", "at", "torch", "impl", "cuda", "Tensor", "Storage", "get", "set", "make", "dispatch", "Key",
             "Scalar", "Type", "ops", "native", "empty", "add", "mul", "out", "Device", "Guard", "Stream", "cow"]
    names: set[bytes] = set()
    total = 0
    while total < size:
        words = "".join(f"{len(w)}{w}" for w in rng.sample(parts, rng.randrange(2, 6)))
        args = "".join(rng.choice(["i", "j", "l", "PKc", "RKNS_6TensorE", "b"]) for _ in range(rng.randrange(1, 5)))
        name = f"_ZN{words}E{args}".encode()
        if name not in names:
            names.add(name)
            total += len(name) + 1
    return b"\0".join(sorted(names))[:size]


def _archive(member: bytes, *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        archive.writestr("torch/lib/small.txt", b"hello")
        archive.writestr("torch/lib/libbig.so", member)
    return buffer.getvalue()


# a head, a stretch zlib stores rather than compresses (a fatbin), and the string tables at the end
MEMBER = _names(1 << 16, 1) + random.Random(2).randbytes(1 << 18) + _names(3 << 19, 3)


def _opened(data: bytes) -> tuple[Memory, MemberBytes]:
    source = Memory(data)
    found = members(source)
    return source, MemberBytes(source, locate(source, found["torch/lib/libbig.so"]))


@pytest.mark.parametrize(
    ("offset", "length"),
    [
        (0, 64),  # the ELF header: from the start
        (1000, 5000),
        (len(MEMBER) - 4096, 4096),  # the end: from a block near it
        (len(MEMBER) - 1_000_000, 600_000),  # far from both ends: the cheaper side
        (len(MEMBER) - 1, 1),
    ],
)
def test_a_range_is_the_members_bytes_wherever_it_lies(offset: int, length: int) -> None:
    _, member = _opened(_archive(MEMBER))
    assert member.read(offset, length) == MEMBER[offset : offset + length]


def test_the_end_of_a_deflated_member_costs_a_small_part_of_it() -> None:
    data = _archive(MEMBER)
    source, member = _opened(data)
    before = source.bytes_read
    assert member.read(len(MEMBER) - 50_000, 50_000) == MEMBER[-50_000:]
    compressed = member.member.compressed_size
    # on a real libtorch_cuda.so, 4.5 MB of 356 MB (docs/abi.md); here the end is a smaller part of the member
    assert source.bytes_read - before < compressed * 2 / 3, (source.bytes_read - before, compressed)


def test_reads_from_both_ends_and_again_agree() -> None:
    _, member = _opened(_archive(MEMBER))
    for offset, length in [(len(MEMBER) - 100, 100), (0, 100), (len(MEMBER) - 300_000, 100), (50, 10)]:
        assert member.read(offset, length) == MEMBER[offset : offset + length]


def test_a_stored_member_is_read_where_it_lies() -> None:
    source, member = _opened(_archive(MEMBER, compression=zipfile.ZIP_STORED))
    before = source.bytes_read
    assert member.read(len(MEMBER) - 10, 10) == MEMBER[-10:]
    assert source.bytes_read - before == 10


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: data[: len(data) // 2], "not a readable zip"),
        (lambda data: b"PK" + b"\0" * 100, "not a readable zip"),
        (lambda data: data.replace(b"PK\x03\x04", b"XX\x03\x04"), "no local file header"),
    ],
    ids=["truncated", "no-directory", "no-local-header"],
)
def test_a_damaged_archive_is_one_error(damage, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(WheelError, match=why):
        _opened(damage(_archive(MEMBER)))[1].read(0, 64)


def test_a_range_outside_the_member_is_refused() -> None:
    _, member = _opened(_archive(MEMBER))
    with pytest.raises(WheelError, match="lie outside its"):
        member.read(len(MEMBER) - 10, 20)


def test_corrupt_deflate_data_is_one_error() -> None:
    data = bytearray(_archive(MEMBER))
    source = Memory(bytes(data))
    entry = locate(source, members(source)["torch/lib/libbig.so"])
    data[entry.data_offset + 10 : entry.data_offset + 400] = b"\xff" * 390
    with pytest.raises(WheelError, match="corrupt deflate data|inflates to"):
        MemberBytes(Memory(bytes(data)), entry).read(0, 1 << 20)


def _lying(data: bytes, name: str, size: int) -> bytes:
    """``data`` with ``name``'s uncompressed size in its central directory entry replaced by ``size``."""
    entry = data.find(b"PK\x01\x02")
    while entry >= 0:
        name_length = int.from_bytes(data[entry + 28 : entry + 30], "little")
        if data[entry + 46 : entry + 46 + name_length] == name.encode():
            return data[: entry + 24] + size.to_bytes(4, "little") + data[entry + 28 :]
        entry = data.find(b"PK\x01\x02", entry + 4)
    raise AssertionError(f"{name} not in the directory")


def test_a_member_that_inflates_to_more_than_it_says_is_inflated_no_further() -> None:
    bomb = _lying(_archive(bytes(64 << 20)), "torch/lib/libbig.so", 4096)  # 64 MiB of zeros said to be 4 kB
    source = Memory(bomb)
    member = MemberBytes(source, locate(source, members(source)["torch/lib/libbig.so"]))
    assert member.read(0, 4096) == bytes(4096)  # inflated only as far as asked
    from_the_end = MemberBytes(source, locate(source, members(source)["torch/lib/libbig.so"]))
    with pytest.raises(WheelError, match="no deflate block boundary"):
        from_the_end.read(4000, 96)  # every start inflates to more than the member's 4 kB: none is taken
