"""The variant twin of a verified wheel (PEP 825 wheel variants): the same payload under the public version, the
label moved from the version into the filename (``causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130
.whl``), and ``variant.json`` saying what the build needs: torch's minor (``abi_dependency :: torch :: 2.14``, PEP
850's ABI dependency provider), the CUDA lower bound and the SASS/PTX archs (the ``nvidia`` namespace that uv's
built-in NVIDIA provider answers), or ROCm's version and gfx archs (a ``rocm`` namespace of its own).

Made only from a wheel that passed the verify gate, and checked again here before it is published."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, NamedTuple

from packaging.utils import parse_wheel_filename

from builder.core.archive import WHEEL, Archive, open_archive
from builder.core.errors import WheelError
from builder.core.files import atomic_file
from builder.core.hashing import open_regular
from builder.plan.accelerator import parse_label
from builder.steps import provenance
from builder.steps.wheelzip import Member, dist_info_dir, read_members, record_digest, write_wheel

log = logging.getLogger(__name__)

SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"  # the variant schema uv 0.13 reads
VARIANT_JSON = "variant.json"
# uv 0.13 swaps its own implementation in for a provider declared with this plugin-api (checked with real uv).
NVIDIA_PROVIDER: dict[str, object] = {
    "requires": ["nvidia-variant-provider"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
# No installer implements a ROCm provider yet: declared as a plugin, so installers that cannot run it treat ROCm
# variants as unsupported (never installed by mistake) rather than as always compatible.
ROCM_PROVIDER: dict[str, object] = {
    "requires": ["rocm-variant-provider"],
    "plugin-api": "rocm_variant_provider.plugin:RocmVariantPlugin",
}
NAMESPACE_ORDER = ("abi_dependency", "nvidia", "rocm")  # torch's ABI first: a wrong torch never loads
_LABEL = re.compile(r"[0-9a-z._]+")
_VALUE = re.compile(r"[a-z0-9_.]+")


@dataclass(frozen=True, kw_only=True)
class Twin:
    path: Path
    label: str
    properties: Mapping[str, Mapping[str, tuple[str, ...]]]  # {namespace: {feature: values}}


NO_PROVENANCE = "no wheelwright.json (built before provenance was recorded, or not by wheelwright)"  # as the index's


def _archs_ok(archs: object) -> bool:
    """``{"sass": [...], "ptx": [...]}`` of arch names (provenance's archs, from which a twin's properties come)."""
    if not isinstance(archs, dict):
        return False
    lists = [archs.get(kind, []) for kind in ("sass", "ptx")]
    return all(isinstance(names, list) and all(isinstance(a, str) and _VALUE.fullmatch(a) for a in names)
               for names in lists)


def variant_filename(filename: str, label: str) -> str:
    """``causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl`` -> ``causal_conv1d-1.7.0-cp311-cp311-
    linux_x86_64-pt214cu130.whl``."""
    name, version, _build, _tags = parse_wheel_filename(filename)
    tag = filename.removesuffix(".whl").split("-", 2)[2]
    return f"{name.replace('-', '_')}-{version.public}-{tag}-{label}.whl"


def sm_values(archs: Iterable[str], suffix: str) -> list[str]:
    """``9.0`` -> ``90_real`` (SASS) or ``90_virtual`` (PTX), as uv's NVIDIA provider names compute capabilities."""
    return [arch.replace(".", "") + suffix for arch in archs]


def properties_for(label: str, archs: Mapping[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """What a build of ``label`` with ``archs`` (provenance's SASS/PTX lists) needs from the installing machine."""
    torch_minor, accelerator = parse_label(label)
    properties: dict[str, dict[str, list[str]]] = {"abi_dependency": {"torch": [torch_minor]}}
    if accelerator.kind == "cuda":
        sm = sm_values(archs.get("sass", []), "_real") + sm_values(archs.get("ptx", []), "_virtual")
        properties["nvidia"] = {"cuda_version_lower_bound": [accelerator.version], "sm_arch": sm}
    else:
        properties["rocm"] = {
            "rocm_version_lower_bound": [accelerator.version],
            "gfx_arch": list(archs.get("sass", [])),
        }
    return properties


def providers_for(namespaces: Iterable[str], torch_minors: Iterable[str]) -> dict[str, dict[str, object]]:
    """The provider table for ``namespaces``. uv 0.13 implements no ABI dependency provider, so torch is declared
    statically, newest minor first (see docs/variant-channel.md for what that means for selection)."""
    minors = sorted(set(torch_minors), key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)
    known: dict[str, dict[str, object]] = {
        "abi_dependency": {"static-properties": {"torch": minors}},
        "nvidia": NVIDIA_PROVIDER,
        "rocm": ROCM_PROVIDER,
    }
    return {namespace: known[namespace] for namespace in NAMESPACE_ORDER if namespace in set(namespaces)}


def variant_document(variants: Mapping[str, Mapping[str, Mapping[str, list[str]]]]) -> dict[str, object]:
    """A ``variant.json`` / ``{name}-{version}-variants.json`` document for ``variants`` ({label: properties})."""
    namespaces = {ns for props in variants.values() for ns in props}
    minors = [v for props in variants.values() for v in props.get("abi_dependency", {}).get("torch", [])]
    providers = providers_for(namespaces, minors)
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": list(providers)},
        "providers": providers,
        "variants": {
            label: {ns: {f: list(v) for f, v in feats.items()} for ns, feats in props.items()}
            for label, props in sorted(variants.items())
        },
    }


def encode(document: Mapping[str, object]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def make_twin(wheel: Path, out_dir: Path, *, label: str | None = None) -> Twin:
    """Write the variant twin of the verified ``wheel`` into ``out_dir`` and check it; raises WheelError if wrong.
    ``label`` names the variant otherwise than the wheel's label (a slim wheel's ``pt214cu130sm90``)."""
    # the verified wheel is write_wheel's (provenance.embed): its payload's deflated bytes are copied, not redone
    members = read_members(wheel, keep_deflated=True)
    dist_info = dist_info_dir(members, wheel.name)
    if f"{dist_info}/{provenance.FILENAME}" not in members:
        raise WheelError(NO_PROVENANCE)
    built_for, properties = _variant_of(provenance.read(members, wheel.name).record, wheel.name)
    label = label or built_for
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / variant_filename(wheel.name, label)
    twin = twin_members(members, wheel.name, label, properties)
    if not _write_derived(wheel, target, _record(twin, target.name)):  # the bytes derive_twin works out
        write_wheel(target, twin)
    _check(members, wheel.name, target)
    log.info("%s: variant twin %s", wheel.name, target.name)
    return Twin(
        path=target, label=label, properties={ns: {f: tuple(v) for f, v in fs.items()} for ns, fs in properties.items()}
    )


def _variant_of(record: Mapping[str, object], where: str) -> tuple[str, dict[str, dict[str, list[str]]]]:
    """The label a twin is named for and the properties its variant.json states, from the wheel's provenance."""
    label, archs = record.get("label"), record.get("archs", {})
    if not isinstance(label, str) or not _LABEL.fullmatch(label) or not isinstance(archs, dict) or not _archs_ok(archs):
        raise WheelError(f"{where}: {provenance.FILENAME} records no label and archs a twin can be named for")
    try:
        return label, properties_for(label, archs)
    except ValueError as error:
        raise WheelError(f"{where}: {provenance.FILENAME}: {error}") from None


def twin_members(
    members: Mapping[str, Member], where: str, label: str, properties: Mapping[str, Mapping[str, list[str]]]
) -> dict[str, Member]:
    """The original's files with ``name-1.7.0+label.dist-info`` renamed to ``name-1.7.0.dist-info`` (and the
    same for ``.data``), METADATA's version made public, and variant.json added."""
    names = _TwinNames.of(dist_info_dir(members, where))
    twin = {names.rename(name): member for name, member in members.items()}
    metadata = twin[f"{names.dist_info}/METADATA"].data.decode()
    twin[f"{names.dist_info}/METADATA"] = Member(data=names.public_metadata(metadata).encode())
    twin[f"{names.dist_info}/{VARIANT_JSON}"] = Member(data=encode(variant_document({label: properties})))
    return twin


class _TwinNames(NamedTuple):
    """How a wheel's names become its twin's: the .dist-info and .data folders lose the label."""

    renames: Mapping[str, str]  # top-level folder of the wheel: the twin's
    dist_info: str  # the twin's .dist-info folder
    local: str  # the wheel's version, 1.7.0+pt214cu130
    public: str  # the twin's, 1.7.0

    @classmethod
    def of(cls, dist_info: str) -> _TwinNames:
        prefix, local = dist_info.removesuffix(".dist-info").rsplit("-", 1)
        public = local.split("+", 1)[0]
        renames = {dist_info: f"{prefix}-{public}.dist-info", f"{prefix}-{local}.data": f"{prefix}-{public}.data"}
        return cls(renames, renames[dist_info], local, public)

    def rename(self, name: str) -> str:
        top, _, rest = name.partition("/")
        return f"{self.renames.get(top, top)}/{rest}" if rest else name

    def public_metadata(self, metadata: str) -> str:
        return _public_version(metadata, self.local, self.public)


def _public_version(metadata: str, local: str, public: str) -> str:
    """METADATA with its Version line's local version made public (a line of its own: not the tail of another
    header that happens to end so)."""
    line = f"Version: {local}\n"
    at = 0 if metadata.startswith(line) else metadata.find(f"\n{line}") + 1
    if at == 0 and not metadata.startswith(line):
        raise WheelError(f"METADATA has no 'Version: {local}' line to make public")
    return f"{metadata[:at]}Version: {public}\n{metadata[at + len(line):]}"


# --- checking a twin -------------------------------------------------------------------------------------------------


def check_twin(original: Path, twin: Path) -> None:
    """The twin holds the original's payload byte for byte, the same metadata but the version, one valid variant
    whose label is the filename's, and provenance that still agrees with it."""
    _check(read_members(original), original.name, twin)


def _check(original: Mapping[str, Member], original_name: str, twin: Path) -> None:
    """check_twin against the original's members already read; the twin is read back from disk."""
    problems = twin_problems(original, original_name, read_members(twin), twin.name)
    if problems:
        raise WheelError(f"{twin.name}: variant twin of {original_name} is wrong: {'; '.join(problems)}")


def twin_problems(
    original: Mapping[str, Member], original_name: str, twin: Mapping[str, Member], twin_name: str
) -> list[str]:
    """Where ``twin`` is not the twin of ``original`` (both read whole, within the archive caps); [] when it is."""
    old, new = dist_info_dir(original, original_name), dist_info_dir(twin, twin_name)
    payload = {n: hashlib.sha256(m.data).digest() for n, m in original.items() if not n.startswith(old + "/")}
    twin_payload = {n: hashlib.sha256(m.data).digest() for n, m in twin.items() if not n.startswith(new + "/")}
    problems = [] if payload == twin_payload else ["payload differs from the verified wheel"]
    label = twin_name.removesuffix(".whl").rsplit("-", 1)[-1]
    problems += _variant_problems(twin.get(f"{new}/{VARIANT_JSON}"), label)
    record_problem = _record_problem(twin.get(f"{new}/{provenance.FILENAME}"))
    problems += [record_problem] if record_problem else provenance.disagreements(twin, twin_name)
    before, after = _text(original.get(f"{old}/METADATA")), _text(twin.get(f"{new}/METADATA"))
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after) or len(changed) != 1 or not changed[0][0].startswith("Version: "):
        problems.append("METADATA differs from the verified wheel's in more than its Version")
    return problems


def metadata_lines(member: Member | None) -> list[str]:
    """A METADATA member's lines (none for a missing one): what twins and slim wheels compare."""
    return _text(member)


def variant_problems(member: Member | None, label: str) -> list[str]:
    """Where a variant.json member is not one valid variant named ``label``; [] when it is."""
    return _variant_problems(member, label)


def _text(member: Member | None) -> list[str]:
    return member.data.decode("utf-8", "replace").splitlines() if member is not None else []


def _record_problem(member: Member | None) -> str:
    """What keeps the twin's provenance from being compared at all: absent, not a JSON object, or fields of other
    types than a record's (the comparison reads them unguarded); "" when it can be compared."""
    if member is None:
        return f"no {provenance.FILENAME}"
    try:
        record = json.loads(member.data)
    except (ValueError, RecursionError):
        return f"{provenance.FILENAME} is not JSON"
    if not isinstance(record, dict):
        return f"{provenance.FILENAME} is not a JSON object"
    files, torch = record.get("files", {}), record.get("torch", {})
    if not isinstance(files, dict) or not all(isinstance(digest, str) for digest in files.values()):
        return f"{provenance.FILENAME}: 'files' is not {{name: sha256}}"
    if not isinstance(torch, dict) or not isinstance(torch.get("requirement", ""), str | None):
        return f"{provenance.FILENAME}: 'torch' is not {{'requirement': text, ...}}"
    return "" if _archs_ok(record.get("archs", {})) else f"{provenance.FILENAME}: 'archs' is not {{sass, ptx}}"


def _variant_problems(member: Member | None, label: str) -> list[str]:
    if member is None:
        return [f"no {VARIANT_JSON}"]
    try:
        document = json.loads(member.data)
    except (ValueError, RecursionError):
        return [f"{VARIANT_JSON} is not JSON"]
    variants = document.get("variants") if isinstance(document, dict) else None
    if not isinstance(variants, dict) or list(variants) != [label] or not _LABEL.fullmatch(label):
        described = sorted(variants) if isinstance(variants, dict) else variants
        return [f"{VARIANT_JSON} describes {described!r}, the filename says {label}"]
    priorities = document.get("default-priorities")
    namespaces = priorities.get("namespace") if isinstance(priorities, dict) else None
    providers, properties = document.get("providers"), variants[label]
    if not isinstance(providers, dict) or not isinstance(namespaces, list) or not _properties_ok(properties):
        return [f"{VARIANT_JSON}: providers, priorities or properties are not shaped as PEP 825 says"]
    if sorted(map(str, namespaces)) != sorted(providers) or not set(properties) <= set(namespaces):
        return [f"{VARIANT_JSON}: providers, priorities and the namespaces used disagree"]
    bad = [f"{ns}::{f}::{v}" for ns, fs in properties.items() for f, vs in fs.items() for v in vs
           if not _VALUE.fullmatch(v)]
    return [f"{VARIANT_JSON}: invalid property values {bad}"] if bad else []


def _properties_ok(properties: object) -> bool:
    return isinstance(properties, dict) and all(
        isinstance(features, dict)
        and all(isinstance(values, list) and all(isinstance(v, str) for v in values) for values in features.values())
        for features in properties.values()
    )


# --- the twin's bytes, a function of its wheel's ---------------------------------------------------------------------
# The twin make_twin writes is its wheel's stored members rearranged: the payload's and the unchanged metadata's
# deflated bytes copied as they are, METADATA, variant.json and RECORD deflated anew, every entry stamped with the
# wheel's time, laid out as write_wheel lays out a wheel (so a twin write_wheel made of a wheel it wrote has the
# same bytes). derive_twin works out those bytes' sha256 without writing them or inflating the payload: a twin
# file with that digest is the twin of that wheel, which is how the index checks one in a single read.


class DerivedTwin(NamedTuple):
    """The twin make_twin writes for a wheel: its filename, its bytes' sha256 and size, and the files of its
    .dist-info the index serves or reads (METADATA, variant.json, wheelwright.json)."""

    name: str
    sha256: str
    size: int
    members: Mapping[str, bytes]
    matched: bool = False  # derive_open's ``twin`` held exactly these bytes


class _Entry(NamedTuple):
    name: str  # in the twin
    executable: bool
    stored: zipfile.ZipInfo | None  # the wheel's deflated member whose stored bytes are copied
    data: bytes  # else these bytes, deflated here


class _Derivation(NamedTuple):
    name: str
    stamp: tuple[int, int, int, int, int, int]
    entries: tuple[_Entry, ...]  # in the twin's order, RECORD last
    members: Mapping[str, bytes]  # the .dist-info files the index reads

    @property
    def record(self) -> bytes:
        return self.entries[-1].data


def derive_twin(wheel: Path) -> DerivedTwin | None:
    """The twin make_twin writes for ``wheel``, worked out as it writes it but into a digest (nothing of the
    payload inflates); None where the wheel cannot have one (no provenance, unreadable)."""
    try:
        with os.fdopen(open_regular(wheel), "rb") as file:
            return derive_open(file, Archive(file, os.fstat(file.fileno()).st_size, wheel.name, WHEEL))
    except (WheelError, OSError):
        return None


def derive_open(file: BinaryIO, archive: Archive, twin: BinaryIO | None = None) -> DerivedTwin | None:
    """derive_twin of the wheel open as ``file``, ``archive`` (named by its filename) opened on it. ``twin``: a file
    that may already hold the twin, read beside the bytes as they are worked out and compared with them (``matched``):
    one read of it, and no digest of its own."""
    digest = _Digest(twin)
    try:
        derivation = _derivation(archive, archive.where)
        _emit(derivation, file, digest)
    except (WheelError, OSError, zipfile.BadZipFile, struct.error, UnicodeDecodeError, KeyError):
        return None
    return DerivedTwin(derivation.name, digest.hexdigest(), digest.size, derivation.members, digest.matched())


def _write_derived(wheel: Path, target: Path, record: bytes) -> bool:
    """Write the derived twin of ``wheel`` at ``target`` if its RECORD is ``record`` (what write_wheel would write:
    the wheel's own RECORD, whose lines the derivation copies, may not describe its files); else False."""
    try:
        with os.fdopen(open_regular(wheel), "rb") as file:
            derivation = _derivation(Archive(file, os.fstat(file.fileno()).st_size, wheel.name, WHEEL), wheel.name)
            if derivation.name != target.name or derivation.record != record:
                return False
            with atomic_file(target) as out:
                _emit(derivation, file, out)
    except (WheelError, OSError, zipfile.BadZipFile, struct.error, UnicodeDecodeError, KeyError):
        target.unlink(missing_ok=True)
        return False
    return True


def _derivation(archive: Archive, where: str) -> _Derivation:
    """What the twin of the wheel in ``archive`` holds, entry by entry."""
    infos = {info.filename: info for info in archive.files}
    if any(info.flag_bits & 0x1 for info in infos.values()):
        raise WheelError(f"{where}: an encrypted member")
    old = _dist_info(list(infos), where)
    names = _TwinNames.of(old)
    read = {name: archive.read(info) for name, info in infos.items() if name.startswith(old + "/")}
    if f"{old}/{provenance.FILENAME}" not in read:
        raise WheelError(NO_PROVENANCE)
    record = provenance.read({name: Member(data=data) for name, data in read.items()}, where).record
    label, properties = _variant_of(record, where)
    dist = names.dist_info
    metadata = names.public_metadata(read[f"{old}/METADATA"].decode()).encode()
    variant_json = _variant_json(label, json.dumps(properties, sort_keys=True))
    fresh = {f"{dist}/METADATA": metadata, f"{dist}/{VARIANT_JSON}": variant_json}
    entries: dict[str, _Entry] = {}
    for name, info in infos.items():
        twin = names.rename(name)
        executable = bool((info.external_attr >> 16) & 0o111)
        if info.compress_type == zipfile.ZIP_DEFLATED:
            entries[twin] = _Entry(twin, executable, info, b"")
        else:
            entries[twin] = _Entry(twin, executable, None, read[name] if name in read else archive.read(info))
    entries.update((name, _Entry(name, False, None, data)) for name, data in fresh.items())
    entries.pop(f"{dist}/RECORD", None)
    lines = _record_lines(entries, old, dist, read, archive)
    entries[f"{dist}/RECORD"] = _Entry(f"{dist}/RECORD", False, None, _record_text(lines, f"{dist}/RECORD"))
    ordered = sorted(entries.values(), key=lambda entry: _order(entry.name, dist))
    stamp = min(info.date_time for info in infos.values())  # write_wheel stamps every entry alike
    members = {"METADATA": metadata, VARIANT_JSON: variant_json,
               provenance.FILENAME: read[f"{old}/{provenance.FILENAME}"]}
    return _Derivation(variant_filename(where, label), stamp, tuple(ordered), members)


@functools.lru_cache(maxsize=256)  # pure: a site's twins share a few dozen (label, properties); indent=2 is slow
def _variant_json(label: str, properties: str) -> bytes:
    return encode(variant_document({label: json.loads(properties)}))


def _record_lines(
    entries: Mapping[str, _Entry], old: str, dist_info: str, read: Mapping[str, bytes], archive: Archive
) -> dict[str, str]:
    """RECORD's line of each entry: a copied payload file's from the wheel's RECORD (``old``: its .dist-info; the
    digest is of the same bytes), inflating the file only where that has no line of the file's size for it; the
    rest from their bytes."""
    listed = _record_entries(read.get(f"{old}/RECORD", b""))
    lines = {}
    for name, entry in entries.items():
        stored = entry.stored
        if stored is None or name.startswith(dist_info + "/"):
            data = entry.data if stored is None else read[stored.filename]
        else:
            line = listed.get(stored.filename)
            if line is not None and line[1] == stored.file_size:
                lines[name] = f"{name},{line[0]},{line[1]}"
                continue
            data = archive.read(stored)
        lines[name] = f"{name},{record_digest(data)},{len(data)}"
    return lines


def _record_entries(record: bytes) -> dict[str, tuple[str, int]]:
    """{file: (digest, size)} of the lines of a RECORD as write_wheel writes them; others are left out."""
    found = {}
    for line in record.decode("utf-8", "replace").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0] and parts[1].startswith("sha256=") and parts[2].isdigit():
            found[parts[0]] = (parts[1], int(parts[2]))
    return found


def _record_text(lines: Mapping[str, str], record_name: str) -> bytes:
    """RECORD as write_wheel writes it: a line per file by name, then RECORD's own."""
    return ("\n".join([*(lines[name] for name in sorted(lines)), f"{record_name},,"]) + "\n").encode()


def _record(members: Mapping[str, Member], where: str) -> bytes:
    """The RECORD write_wheel writes for ``members``."""
    record_name = f"{dist_info_dir(members, where)}/RECORD"
    lines = {n: f"{n},{record_digest(m.data)},{len(m.data)}" for n, m in members.items() if n != record_name}
    return _record_text(lines, record_name)


def _order(name: str, dist_info: str) -> tuple[int, str]:
    """write_wheel's order: the payload, then .dist-info, RECORD last."""
    if name == f"{dist_info}/RECORD":
        return (2, name)
    return (1 if name.startswith(dist_info + "/") else 0, name)


def _emit(derivation: _Derivation, wheel: BinaryIO, out: IO[bytes] | _Digest) -> None:
    """Write the twin's bytes to ``out``: each entry's local header and deflated bytes (copied from ``wheel``, the
    open wheel, or deflated here as zipfile's writestr does), then the central directory zipfile writes."""
    with zipfile.ZipFile(out, "w") as archive:
        for entry in derivation.entries:
            info = zipfile.ZipInfo(entry.name, date_time=derivation.stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if entry.executable else 0o100644) << 16
            if entry.stored is None:
                compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
                deflated = compressor.compress(entry.data) + compressor.flush()
                info.CRC, info.file_size, info.compress_size = zlib.crc32(entry.data), len(entry.data), len(deflated)
                _append(archive, info, iter((deflated,)))
            else:
                stored = entry.stored
                info.CRC, info.file_size, info.compress_size = stored.CRC, stored.file_size, stored.compress_size
                _append(archive, info, _stored_bytes(wheel, stored))


def _append(archive: zipfile.ZipFile, info: zipfile.ZipInfo, chunks: Iterator[bytes]) -> None:
    """An entry of ``info``'s header and ``chunks``, appended where writestr would append it and registered as it
    registers one (zipfile has no API for an entry already deflated; wheelzip's _write_deflated does the same)."""
    fp = archive.fp
    if fp is None:
        raise ValueError("attempt to write to a closed ZIP archive")
    info.header_offset = archive.start_dir
    fp.write(info.FileHeader())
    for chunk in chunks:
        fp.write(chunk)
    archive.start_dir = fp.tell()
    archive.filelist.append(info)
    archive.NameToInfo[info.filename] = info


def _stored_bytes(wheel: BinaryIO, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's stored (deflated) bytes, past its local header, in chunks."""
    _skip_header(wheel, info)
    left = info.compress_size
    while left > 0:
        chunk = wheel.read(min(left, 1 << 20))
        if not chunk:
            raise WheelError(f"{info.filename}: its stored bytes end early")
        left -= len(chunk)
        yield chunk


class _Digest:
    """A write-only stream that keeps the sha256 and size of what is written to it, and whether ``against`` holds
    the same bytes (read as far as they agree, and no further than what is written, plus one byte)."""

    def __init__(self, against: BinaryIO | None = None) -> None:
        self._sha256 = hashlib.sha256()
        self.size = 0
        self._against = against
        self._same = against is not None

    def write(self, data: bytes) -> int:
        self._sha256.update(data)
        self.size += len(data)
        if self._same and self._against is not None and self._against.read(len(data)) != data:
            self._same = False
        return len(data)

    def matched(self) -> bool:
        """Whether ``against`` held exactly what was written, and nothing after it."""
        return self._same and self._against is not None and self._against.read(1) == b""

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def hexdigest(self) -> str:
        return self._sha256.hexdigest()


def quick_problems(wheel: Path, twin: Path) -> list[str] | None:
    """twin_problems without inflating the payload, for the twin make_twin writes: it copies the wheel's payload
    streams and its wheelwright.json byte for byte. Where every payload member has the same name, CRC, sizes and
    raw stream as the wheel's, and the provenance the same bytes, the payload is the same and the provenance agrees
    with it as the wheel's does (the verify gate's question); only METADATA and variant.json are then compared.
    None where a stream or the provenance differs: that takes the full comparison."""
    with open_archive(wheel) as original, open_archive(twin) as made:
        old, new = _dist_info(original.names(), wheel.name), _dist_info(made.names(), twin.name)
        payload = {i.filename: i for i in original.files if not i.filename.startswith(old + "/")}
        twin_payload = {i.filename: i for i in made.files if not i.filename.startswith(new + "/")}
        if payload.keys() != twin_payload.keys() or not all(
            _same_stream(wheel, twin, payload[name], twin_payload[name]) for name in payload
        ):
            return None
        record = f"/{provenance.FILENAME}"
        if _member(original, old + record) != _member(made, new + record):
            return None
        label = twin.name.removesuffix(".whl").rsplit("-", 1)[-1]
        problems = _variant_problems(_as_member(_member(made, f"{new}/{VARIANT_JSON}")), label)
        before = _text(_as_member(_member(original, f"{old}/METADATA")))
        after = _text(_as_member(_member(made, f"{new}/METADATA")))
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after) or len(changed) != 1 or not changed[0][0].startswith("Version: "):
        problems.append("METADATA differs from the verified wheel's in more than its Version")
    return problems


def _dist_info(names: list[str], where: str) -> str:
    return dist_info_dir(dict.fromkeys(names, Member(data=b"")), where)


def _member(archive: Archive, name: str) -> bytes | None:
    return archive.read(name) if name in archive.names() else None


def _as_member(data: bytes | None) -> Member | None:
    return None if data is None else Member(data=data)


def _same_stream(wheel: Path, twin: Path, a: zipfile.ZipInfo, b: zipfile.ZipInfo) -> bool:
    """Whether two members hold the same raw stream: method, CRC, sizes and the stored bytes."""
    if (a.compress_type, a.CRC, a.file_size, a.compress_size) != (b.compress_type, b.CRC, b.file_size, b.compress_size):
        return False
    with open(wheel, "rb") as first, open(twin, "rb") as second:
        _skip_header(first, a)
        _skip_header(second, b)
        left = a.compress_size
        while left > 0:
            size = min(left, 1 << 20)
            chunk = first.read(size)
            if len(chunk) != size or second.read(size) != chunk:
                return False
            left -= size
    return True


def _skip_header(raw: BinaryIO, info: zipfile.ZipInfo) -> None:
    """Put ``raw`` at the member's stored bytes, past its local header (30 bytes, then name and extra field)."""
    raw.seek(info.header_offset)
    header = raw.read(30)
    if header[:4] != b"PK\x03\x04":
        raise WheelError(f"{info.filename}: no local header")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    raw.seek(name_length + extra_length, os.SEEK_CUR)
