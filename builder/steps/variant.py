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
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

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


def make_twin(wheel: Path, out_dir: Path) -> Twin:
    """Write the variant twin of the verified ``wheel`` into ``out_dir`` and check it; raises WheelError if wrong."""
    # the verified wheel is write_wheel's (provenance.embed): its payload's deflated bytes are copied, not redone
    members = read_members(wheel, keep_deflated=True)
    record = provenance.read(members, wheel.name).record
    label = str(record["label"])
    properties = properties_for(label, record["archs"])
    twin_members = _twin_members(members, wheel.name, label, properties)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = write_wheel(out_dir / variant_filename(wheel.name, label), twin_members)
    _check(members, wheel.name, path)
    log.info("%s: variant twin %s", wheel.name, path.name)
    return Twin(
        path=path, label=label, properties={ns: {f: tuple(v) for f, v in fs.items()} for ns, fs in properties.items()}
    )


def _twin_members(
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
    old, new = dist_info_dir(original, original_name), dist_info_dir(twin, twin_name)
    payload = {n: hashlib.sha256(m.data).digest() for n, m in original.items() if not n.startswith(old + "/")}
    twin_payload = {n: hashlib.sha256(m.data).digest() for n, m in twin.items() if not n.startswith(new + "/")}
    problems = [] if payload == twin_payload else ["payload differs from the verified wheel"]
    label = twin_name.removesuffix(".whl").rsplit("-", 1)[1]
    problems += _variant_problems(twin.get(f"{new}/{VARIANT_JSON}"), label)
    problems += provenance.disagreements(twin, twin_name)
    before = original[f"{old}/METADATA"].data.decode().splitlines()
    after = twin[f"{new}/METADATA"].data.decode().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after) or len(changed) != 1 or not changed[0][0].startswith("Version: "):
        problems.append("METADATA differs from the verified wheel's in more than its Version")
    return problems


def _variant_problems(member: Member | None, label: str) -> list[str]:
    if member is None:
        return [f"no {VARIANT_JSON}"]
    document = json.loads(member.data)
    variants = document.get("variants", {})
    if list(variants) != [label] or not _LABEL.fullmatch(label):
        return [f"{VARIANT_JSON} describes {sorted(variants)}, the filename says {label}"]
    priorities = document.get("default-priorities", {}).get("namespace", [])
    if sorted(priorities) != sorted(document.get("providers", {})) or not set(variants[label]) <= set(priorities):
        return [f"{VARIANT_JSON}: providers, priorities and the namespaces used disagree"]
    bad = [
        f"{ns}::{f}::{v}"
        for ns, fs in variants[label].items()
        for f, vs in fs.items()
        for v in vs
        if not _VALUE.fullmatch(v)
    ]
    return [f"{VARIANT_JSON}: invalid property values {bad}"] if bad else []


def ensure_twins(dist: Path, variant_dir: Path) -> tuple[list[Path], list[str]]:
    """Make the missing twin of every wheel in ``dist`` (wheels built before twins existed); (made, skipped with
    the reason). dist/ holds only wheels that passed the verify gate, and each twin is checked again."""
    made, skipped = [], []
    present = {p.name for p in variant_dir.glob("*.whl")} if variant_dir.is_dir() else set()
    for wheel in sorted(dist.glob("*.whl")) if dist.is_dir() else []:
        if not stat.S_ISREG(wheel.lstat().st_mode):  # a symlink is never followed, a FIFO or device never opened
            continue  # the index refuses it with its reason
        try:
            name = parse_wheel_filename(wheel.name)[1]
            label = name.local
            if label is None or variant_filename(wheel.name, label) in present:
                continue
            made.append(make_twin(wheel, variant_dir).path)
        except (WheelError, ValueError) as error:
            skipped.append(f"{wheel.name}: {error}")
    return made, skipped
