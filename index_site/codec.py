"""The site manifest's JSON through msgspec, imported only by a run that reads or writes the manifest (a run that
finds nothing moved does neither, and skips its import). A document as the index writes it is decoded straight
into typed tuples, each type checked on the way: 87,000 records at 10,000 wheels (21 MB) in about half the standard
library's time, before its lists are made into records at all. Encoding is a sixth of json.dumps's."""

from __future__ import annotations

import json
from typing import Any

import msgspec


class _Document(msgspec.Struct):
    generator: str
    base_url: str | None = None
    files: dict[str, tuple[str, int, int, int, int]] = {}
    groups: dict[str, tuple[str, tuple[str, ...]]] = {}
    blocks: dict[str, tuple[str, int, msgspec.Raw]] = {}  # each block's files left undecoded (records.Block)


_DECODER = msgspec.json.Decoder(_Document)
_ENTRIES = msgspec.json.Decoder(dict[str, tuple[str, int, int, int, int]])


def decode(first: memoryview) -> dict[str, Any] | None:
    """The manifest's document as a dict of its fields, or None where it is not as the index writes it (an older
    record's fields, a float, a number past 64 bits, JSON the standard library reads but msgspec does not)."""
    try:
        typed = _DECODER.decode(first)
    except msgspec.MsgspecError:
        return None
    return msgspec.structs.asdict(typed)


def decode_line(line: bytes) -> object:
    """A change line of the manifest as JSON decodes it (dicts, lists, text and numbers), in a third of the standard
    library's time; None where it is no JSON msgspec reads (torn, damaged, or nested past its limit)."""
    try:
        return msgspec.json.decode(line)
    except (msgspec.MsgspecError, RecursionError):
        return None


def encode(document: object) -> bytes:
    """Compact JSON (no spaces), in UTF-8."""
    return msgspec.json.encode(document)


def decode_entries(raw: object) -> object:
    """A block's files as the manifest holds them ({path: [sha256, inode, size, mtime_ns, ctime_ns]}), from the
    bytes the document's decoding left undecoded; as the standard library decodes them where they are not as the
    index writes them, for records._records to drop what it cannot trust; None where they are no JSON."""
    if not isinstance(raw, msgspec.Raw):
        return None
    try:
        return _ENTRIES.decode(raw)
    except msgspec.MsgspecError:
        pass
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return None
