"""The variant twin of a verified wheel (PEP 825 wheel variants): the same payload under the public version, the
label moved from the version into the filename (``causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130
.whl``), and ``variant.json`` saying what the build needs: torch's minor (``abi_dependency :: torch :: 2.14``, PEP
850's ABI dependency provider), the CUDA lower bound and the SASS/PTX archs (the ``nvidia`` namespace that uv's
built-in NVIDIA provider answers), or ROCm's version and gfx archs (a ``rocm`` namespace of its own).

Made only from a wheel that passed the verify gate, and checked again here before it is published."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.utils import parse_wheel_filename

from builder.core.archive import Archive, open_archive
from builder.core.errors import WheelError
from builder.plan.job import parse_label
from builder.steps import provenance
from builder.steps.wheelzip import Member, dist_info_dir, read_members, write_wheel

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
    record = provenance.read(members, wheel.name).record
    built_for, archs = record.get("label"), record.get("archs", {})
    if not isinstance(built_for, str) or not _LABEL.fullmatch(built_for) or not isinstance(archs, dict) \
            or not _archs_ok(archs):
        raise WheelError(f"{wheel.name}: {provenance.FILENAME} records no label and archs a twin can be named for")
    try:
        properties = properties_for(built_for, archs)
    except ValueError as error:
        raise WheelError(f"{wheel.name}: {provenance.FILENAME}: {error}") from None
    label = label or built_for
    members_of_twin = twin_members(members, wheel.name, label, properties)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = write_wheel(out_dir / variant_filename(wheel.name, label), members_of_twin)
    _check(members, wheel.name, path)
    log.info("%s: variant twin %s", wheel.name, path.name)
    return Twin(
        path=path, label=label, properties={ns: {f: tuple(v) for f, v in fs.items()} for ns, fs in properties.items()}
    )


def twin_members(
    members: Mapping[str, Member], where: str, label: str, properties: Mapping[str, Mapping[str, list[str]]]
) -> dict[str, Member]:
    """The original's files with ``name-1.7.0+label.dist-info`` renamed to ``name-1.7.0.dist-info`` (and the
    same for ``.data``), METADATA's version made public, and variant.json added."""
    old = dist_info_dir(members, where)
    local = old.removesuffix(".dist-info").rsplit("-", 1)[1]
    public = local.split("+", 1)[0]
    prefix = old.removesuffix(".dist-info").rsplit("-", 1)[0]
    renames = {old: f"{prefix}-{public}.dist-info", f"{prefix}-{local}.data": f"{prefix}-{public}.data"}
    twin: dict[str, Member] = {}
    for name, member in members.items():
        top, _, rest = name.partition("/")
        twin[f"{renames.get(top, top)}/{rest}" if rest else name] = member
    dist_info = renames[old]
    metadata = twin[f"{dist_info}/METADATA"].data.decode()
    twin[f"{dist_info}/METADATA"] = Member(data=_public_version(metadata, local, public).encode())
    twin[f"{dist_info}/{VARIANT_JSON}"] = Member(data=encode(variant_document({label: properties})))
    return twin


def _public_version(metadata: str, local: str, public: str) -> str:
    line = f"Version: {local}\n"
    if line not in metadata:
        raise WheelError(f"METADATA has no 'Version: {local}' line to make public")
    return metadata.replace(line, f"Version: {public}\n", 1)


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
