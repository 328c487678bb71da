"""Tiny binaries built from scratch for unit tests: fatbin containers and a minimal ELF that carries sections.

Written from the layout documented in builder/core/fatbin.py, independently of the parser, so the tests can catch a
parser that drifts from that layout.
"""

from __future__ import annotations

import struct

PTX, SASS = 1, 2
FLAGS_64BIT_LINUX = 0x11
COMPRESSED_DEFAULT = 0x8000
COMPRESSED_SPEED = 0x2000
ARCH_SPECIFIC = 0x100000
FAMILY_SPECIFIC = 0x200000


def fatbin_entry(kind: int, sm: int, *, flags: int = FLAGS_64BIT_LINUX, payload: bytes = b"\0" * 24,
                 compressed: bool = False, extra_header: bytes = b"") -> bytes:
    """One entry: a 64-byte header (plus ``extra_header``, an option table) and its payload padded to 8 bytes."""
    padded = payload + b"\0" * (-len(payload) % 8)
    header_size = 64 + len(extra_header)
    compressed_size = len(payload) if compressed else 0
    uncompressed_size = 4 * len(payload) if compressed else 0
    option_offset = 64 if extra_header else 0
    major, minor = (9, 0) if kind == PTX else (1, 8)
    header = struct.pack(
        "<HHIQIIHHIIIQQQ",
        kind, 0x0101, header_size, len(padded), compressed_size, option_offset,
        minor, major, sm, 0, 0, flags, 0, uncompressed_size,
    )
    assert len(header) == 64
    return header + extra_header + padded


def fatbin_container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with_sections(sections: dict[str, bytes]) -> bytes:
    """A minimal little-endian ELF64 relocatable object: header, section data, then the section header table."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name in [*sections, ".shstrtab"])
    blobs = [*sections.values(), names]
    offsets, body, offset = [], b"", 64
    for blob in blobs:
        offsets.append(offset)
        body += blob + b"\0" * (-len(blob) % 8)
        offset = 64 + len(body)
    shoff = offset
    section_headers = [b"\0" * 64]
    name_offset = 1
    for index, (name, blob) in enumerate(zip([*sections, ".shstrtab"], blobs)):
        sh_type = 3 if name == ".shstrtab" else 1  # SHT_STRTAB / SHT_PROGBITS
        fields = (name_offset, sh_type, 0, 0, offsets[index], len(blob), 0, 0, 8, 0)
        section_headers.append(struct.pack("<IIQQQQIIQQ", *fields))
        name_offset += len(name) + 1
    count = len(section_headers)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, count, count - 1)
    return header + body + b"".join(section_headers)


def elf_with_symbols(
    *,
    exports: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    weak_required: tuple[str, ...] = (),
    hidden: tuple[str, ...] = (),
    filler: bytes = b"",
) -> bytes:
    """An ELF64 shared object whose ``.dynsym`` exports, needs (strong or weak) and hides these names; ``filler``
    (a ``.text`` section) comes first, so a large one puts the symbol tables at the end, as patchelf leaves torch's."""
    names = b"\0"
    entries = [b"\0" * 24]
    # (name, st_info = bind << 4 | type, st_other visibility, st_shndx): defined ones in section 1 (.text)
    rows = ([(n, 1 << 4 | 2, 0, 1) for n in exports] + [(n, 1 << 4 | 2, 0, 0) for n in required]
            + [(n, 2 << 4 | 2, 0, 0) for n in weak_required] + [(n, 1 << 4 | 2, 2, 1) for n in hidden])
    for name, info, other, shndx in rows:
        entries.append(struct.pack("<IBBHQQ", len(names), info, other, shndx, 0, 0))
        names += name.encode() + b"\0"
    sections = [(".text", 1, filler or b"\x90" * 16, 0), (".dynsym", 11, b"".join(entries), 3),
                (".dynstr", 3, names, 0)]
    shnames = b"\0" + b"".join(s[0].encode() + b"\0" for s in sections) + b".shstrtab\0"
    body, offsets = b"", []
    for _, _, blob, _ in sections:
        offsets.append(64 + len(body))
        body += blob + b"\0" * (-len(blob) % 8)
    offsets.append(64 + len(body))
    body += shnames + b"\0" * (-len(shnames) % 8)
    headers, at = [b"\0" * 64], 1
    for index, (name, kind, blob, link) in enumerate(sections):
        headers.append(struct.pack("<IIQQQQIIQQ", at, kind, 2, 0, offsets[index], len(blob), link, 1, 8,
                                   24 if kind == 11 else 0))
        at += len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", at, 3, 0, 0, offsets[-1], len(shnames), 0, 0, 1, 0))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64 + len(body), 0, 64, 0, 0, 64, len(headers),
                                 len(headers) - 1)
    return header + body + b"".join(headers)


def elf_with_segments(machine: int, alignments: tuple[int, ...], *, loads: bool = True) -> bytes:
    """A minimal ELF64 shared object header with one program header per alignment (PT_LOAD, or PT_NOTE when
    ``loads`` is False) and no sections: what the platform checks read (e_machine, each segment's p_align)."""
    phoff, count = 64, len(alignments)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, phoff, 0, 0, 64, 56, count, 64, 0, 0)
    kind = 1 if loads else 4
    programs = b"".join(struct.pack("<IIQQQQQQ", kind, 5, 0, 0, 0, 0, 0, align) for align in alignments)
    return header + programs
