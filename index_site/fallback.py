"""What the variant channel lists beside the twins: the slim per-arch variants in place of their fat twin, the null
fallback (the fat twin's bytes under a build-tagged non-variant name, for machines with no GPU visible and for
installers that know nothing of variants) and the guards (tiny variant wheels that refuse, in words, where a GPU
is visible but no build can run on it: a driver too old for the CUDA, an arch with no SASS and no PTX)."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from builder.plan.accelerator import parse_label

if TYPE_CHECKING:
    from index_site.variants import VariantWheel

_SLIM = re.compile(r"^(?P<base>pt[1-9][0-9]+cu[0-9]+)sm(?P<sm>[0-9]+[af]?)$")
_CUDA = re.compile(r"^pt[1-9][0-9]+cu[0-9]+$")
# the NVIDIA provider's compute capabilities (majors 5 to 12, minors 0 to 9): what a guard can name
_MAJORS, _MINORS = range(5, 13), range(10)
NVIDIA_PROVIDER: dict[str, object] = {  # as builder/steps/variant.py declares it (uv runs its own for it)
    "requires": ["nvidia-variant-provider"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
DRIVER_REFUSAL = "torch==0+nvidia.driver.older.than.cuda.{cuda}"
ARCH_REFUSAL = "torch==0+no.sass.or.ptx.for.this.gpu.arch"


def base_label(label: str) -> str:
    """``pt214cu130sm90`` -> ``pt214cu130``; any other label as it is."""
    match = _SLIM.match(label)
    return match["base"] if match else label


def is_slim(label: str) -> bool:
    return _SLIM.match(label) is not None


def _parts(filename: str) -> tuple[str, str, str, str]:
    """(dist, version, python-abi-platform tag, label) of a twin's name; a build tag (a real build beside a day-0
    wheel of its name: docs/abi.md) is not part of any."""
    dist, version, rest = filename.removesuffix(".whl").split("-", 2)
    tag, label = rest.rsplit("-", 1)
    return dist, version, "-".join(tag.split("-")[-3:]), label


def _build_tagged(twin: VariantWheel) -> bool:
    return twin.filename.count("-") > 5


@functools.lru_cache(maxsize=1024)  # a pure function of a label: a site has a few dozen, its nulls thousands
def build_tag(label: str) -> str:
    """``pt214cu130`` -> ``2141300_pt214cu130``: installers take the highest build tag first, so the null of the
    newest torch, then the newest CUDA, is the one taken where several share a name and version."""
    match = _CUDA_PARTS.match(label)
    if match is None:
        raise ValueError(f"{label!r} is not a CUDA build's label")
    torch_major, torch_minor, cuda_major, cuda_minor = (int(part) for part in match.groups())
    return f"{torch_major}{torch_minor:02d}{cuda_major:02d}{cuda_minor:02d}_{label}"


_CUDA_PARTS = re.compile(r"^pt([1-9])([0-9]+)cu([1-9][0-9]*)([0-9])$")  # pt214cu130: torch 2.14, CUDA 13.0


def null_name(twin: VariantWheel) -> str:
    """``causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130.whl`` -> ``causal_conv1d-1.7.0-
    2141300_pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl``: no variant label, so the file is no variant."""
    dist, version, tag, label = _parts(twin.filename)
    return f"{dist}-{version}-{build_tag(label)}-{tag}.whl"


class Listing(NamedTuple):
    """One project's files on one channel."""

    variants: list[VariantWheel]  # the twins and slim wheels listed as variants
    nulls: list[VariantWheel]  # fat twins offered again under their null name (filename replaced)
    guards: list[VariantWheel]  # the guards of its builds, as listed (see Guard)


def listing(twins: Sequence[VariantWheel], guards: Sequence[VariantWheel] = ()) -> Listing:
    """The channel's files of one project: a fat twin whose slim wheels are published gives way to them as a variant
    and stays as the null; ``guards`` (of guard_groups, as listed) are listed with them."""
    nulls = [twin._replace(filename=name) for name, twin in null_twins(twins).items()]
    return Listing(variants=listed_variants(twins), nulls=nulls, guards=list(guards))


def null_twins(twins: Iterable[VariantWheel]) -> dict[str, VariantWheel]:
    """{null name: the fat twin offered under it}: one twin a name. Where two share one (a day-0 wheel's label and
    the real build beside it, build-tagged), the build-tagged twin's; of two alike, the later's. The listing and
    the files placed (variants.placed) both take it from here, so a page lists the digest of the file it links."""
    fats = sorted((t for t in twins if has_null(t)), key=_build_tagged)
    return {null_name(t): t for t in fats}


def listed_variants(twins: Sequence[VariantWheel]) -> list[VariantWheel]:
    """The twins listed as variants: the slim wheels, and each fat twin none of whose slim wheels is published."""
    slimmed = {(t.version, _parts(t.filename)[2], base_label(t.label)) for t in twins if is_slim(t.label)}
    if not slimmed:
        return list(twins)
    return [t for t in twins if is_slim(t.label) or (t.version, _parts(t.filename)[2], t.label) not in slimmed]


class Guard(NamedTuple):
    """A guard before its bytes are made: everything they are made from."""

    first: VariantWheel  # the first build of its group: the project, version and wheel tag it takes
    filename: str
    label: str  # pt214cu130.drv, pt214.noarch
    variant: str  # {"properties": ..., "providers": ...} as JSON text with sorted keys, as VariantWheel holds it
    refusal: str  # its one requirement

    @property
    def inputs(self) -> str:
        """What its bytes are made from, as one text (a page group's digest)."""
        return f"{self.first.project}\0{self.filename}\0{self.variant}\0{self.refusal}"

    def metadata(self) -> bytes:
        project, version = self.first.project, _parts(self.first.filename)[1]
        return (
            f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
            f"Summary: refuses to install: no build of {project} {version} runs on this machine's NVIDIA GPU\n"
            f"Requires-Dist: {self.refusal}\n"
        ).encode()

    def listed(self, sha256: str, size: int, metadata_sha256: str) -> VariantWheel:
        """The guard as a channel lists it, from the digests of its wheel and its METADATA."""
        return self.first._replace(
            folder="", identity=(0, 0, 0, 0), filename=self.filename, label=self.label, sha256=sha256, size=size,
            metadata_sha256=metadata_sha256, requires_python=None, provenance_sha256="", variant=self.variant,
        )

    def made(self) -> tuple[VariantWheel, bytes, bytes]:
        """(the guard as listed, its wheel's bytes, its METADATA): same inputs, same bytes."""
        document = json.loads(self.variant)
        dist, version, tag, _ = _parts(self.first.filename)
        dist_info = f"{dist}-{version}.dist-info"
        metadata = self.metadata()
        data = guard_wheel(dist_info, metadata, self.label, document["properties"], document["providers"], tag)
        listed = self.listed(hashlib.sha256(data).hexdigest(), len(data), hashlib.sha256(metadata).hexdigest())
        return listed, data, metadata


def guard_groups(twins: Sequence[VariantWheel]) -> dict[str, list[Guard]]:
    """The guards of one project's builds on every channel, by group (``1.7.0/pt214/cp311-cp311-...``): one group
    per (version, torch minor, wheel tag) of CUDA builds, made from the builds listed as variants."""
    seen = Seen()  # thousands of groups share a few dozen labels, arch sets and variant.json texts
    return {key: guards_of(members, seen) for key, members in guarded(twins).items()}


def guarded(twins: Sequence[VariantWheel]) -> dict[str, list[VariantWheel]]:
    """The builds each guard group (guard_groups) is made from, by its key: what a guard shows is a function of
    these builds' names, variants and labels, so a run that renders none of a group's guards need not work them out
    (2,732 groups of 10,000 twins, in 561 page groups of a version and torch minor: render.channel_groups)."""
    groups: dict[str, list[VariantWheel]] = defaultdict(list)
    cuda: dict[str, str | None] = {}  # by label: its torch tag where a CUDA build's (slim or fat), else None
    for twin in listed_variants(twins):
        label = twin.label
        torch_tag = cuda.get(label, "")
        if torch_tag == "":
            torch_tag = cuda[label] = twin.torch_tag if _CUDA.match(base_label(label)) else None
        if torch_tag is not None:
            python, abi, platform = twin.filename.rsplit("-", 4)[1:4]  # _parts' tag: no build tag among them
            groups[f"{twin.version}/{torch_tag}/{python}-{abi}-{platform}"].append(twin)
    return groups


def guard_facts(members: Iterable[VariantWheel], seen: Seen) -> Iterable[str]:
    """What a guard group's guards are made from, one text a build: its name, variant and label's facts."""
    return (f"{twin.filename}\0{twin.variant}\0{seen.label_text(twin.label)}" for twin in members)


class Seen:
    """What one listing or one run's channel groups have worked out already, by its inputs: labels parsed, archs
    left uncovered, guards' variant.json texts. Kept for one call or one run, never for the process."""

    def __init__(self) -> None:
        self.labels: dict[str, tuple[str, str]] = {}
        self.uncovered: dict[frozenset[str], list[str]] = {}
        self.texts: dict[tuple[str, ...], str] = {}
        self.label_texts: dict[str, str] = {}

    def label(self, label: str) -> tuple[str, str]:
        """(torch minor, CUDA version) of a CUDA build's label, slim or fat."""
        found = self.labels.get(label)
        if found is None:
            torch_minor, accelerator = parse_label(base_label(label))
            found = self.labels[label] = (torch_minor, accelerator.version)
        return found

    def label_text(self, label: str) -> str:
        """``label``'s facts as one text (guard_facts)."""
        found = self.label_texts.get(label)
        if found is None:
            found = self.label_texts[label] = "\0".join(self.label(label))
        return found

    def uncovered_archs(self, members: Sequence[VariantWheel]) -> list[str]:
        variants = frozenset(t.variant for t in members)
        found = self.uncovered.get(variants)
        if found is None:
            found = self.uncovered[variants] = uncovered_archs(members)
        return found

    def text(self, torch_minor: str, key: str, values: tuple[str, ...]) -> str:
        """A guard's variant.json as VariantWheel holds it."""
        found = self.texts.get((torch_minor, key, *values))
        if found is None:
            properties = {"abi_dependency": {"torch": [torch_minor]}, "nvidia": {key: list(values)}}
            providers = {"abi_dependency": {"static-properties": {"torch": [torch_minor]}}, "nvidia": NVIDIA_PROVIDER}
            document = {"properties": properties, "providers": providers}
            found = self.texts[(torch_minor, key, *values)] = json.dumps(document, sort_keys=True)
        return found


def guards_of(members: Sequence[VariantWheel], seen: Seen | None = None) -> list[Guard]:
    """The guards of one (version, torch minor, wheel tag): one per CUDA version (the driver's too old for it), and
    one for the GPUs no listed variant has SASS or PTX for. A guard is supported only where no build runs: uv
    ranks every listed build above it (it names no CUDA lower bound, or only archs no build covers)."""
    seen = seen or Seen()
    first = members[0]
    dist, version, tag, _ = _parts(first.filename)
    torch_minor = seen.label(first.label)[0]
    made = []
    for cuda in sorted({seen.label(t.label)[1] for t in members}):
        label = f"{first.torch_tag}cu{cuda.replace('.', '')}.drv"
        text = seen.text(torch_minor, "cuda_version_upper_bound", (cuda,))
        made.append(Guard(first, f"{dist}-{version}-{tag}-{label}.whl", label, text, DRIVER_REFUSAL.format(cuda=cuda)))
    uncovered = seen.uncovered_archs(members)
    if uncovered:
        label = f"{first.torch_tag}.noarch"
        text = seen.text(torch_minor, "sm_arch", tuple(uncovered))
        made.append(Guard(first, f"{dist}-{version}-{tag}-{label}.whl", label, text, ARCH_REFUSAL))
    return made


def uncovered_archs(members: Iterable[VariantWheel]) -> list[str]:
    """``{M}{m}_real`` for each compute capability M.m that no member runs on, as uv's NVIDIA provider judges it: a
    GPU M.m runs ``{M}{w}_real`` for w <= m and ``{M}0_virtual``."""
    values = {v for t in members for v in t.properties.get("nvidia", {}).get("sm_arch", [])}
    uncovered = []
    for major in reversed(_MAJORS):
        if f"{major}0_virtual" in values:
            continue
        lowest = next((minor for minor in _MINORS if f"{major}{minor}_real" in values), len(_MINORS))
        uncovered += [f"{major}{minor}_real" for minor in reversed(_MINORS) if minor < lowest]
    return uncovered


def guard_wheel(dist_info: str, metadata: bytes, label: str, properties: Mapping[str, object],
                providers: Mapping[str, object], tag: str) -> bytes:
    """A wheel of nothing but its metadata: the refusal is its one requirement. Same inputs, same bytes."""
    document = {
        "$schema": "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json",
        "default-priorities": {"namespace": list(providers)},
        "providers": providers,
        "variants": {label: properties},
    }
    python, abi, platform = tag.split("-")
    files = {
        f"{dist_info}/METADATA": metadata,
        f"{dist_info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: wheelwright\nRoot-Is-Purelib: false\n"
                               f"Tag: {python}-{abi}-{platform}\n").encode(),
        f"{dist_info}/variant.json": (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(),
    }
    record = "".join(f"{name},sha256={_b64(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def has_null(twin: VariantWheel) -> bool:
    """Whether ``twin`` is offered again as a null: every fat twin of a CUDA build (a ROCm build's never: without
    a GPU a CUDA build installs and imports, and its null would share the name)."""
    return _CUDA.match(twin.label) is not None


class ChannelSize(NamedTuple):
    """What each kind of machine downloads of one build from the channel (bytes): the fat wheel (no GPU visible,
    pip, an arch no slim wheel has) and each slim wheel by its SASS arch (``9.0``)."""

    project: str
    version: str
    label: str  # pt214cu130
    tag: str  # cp311-cp311-manylinux_2_28_x86_64
    fat: int
    slims: tuple[tuple[str, int], ...]

    def slim_for(self, arch: str) -> int | None:
        return dict(self.slims).get(arch)


def channel_sizes(twins: Iterable[VariantWheel]) -> tuple[ChannelSize, ...]:
    """The sizes of every CUDA build that has slim wheels on the channel, newest torch first."""
    twins = list(twins)
    # only builds of a label some slim wheel slims are read: a site's labels are few, its twins thousands
    slimmed = {label for label in {twin.label for twin in twins} if is_slim(label)}
    read = slimmed | {base_label(label) for label in slimmed}
    fats: dict[tuple[str, str, str, str], int] = {}
    slims: dict[tuple[str, str, str, str], list[tuple[str, int]]] = defaultdict(list)
    for twin in twins:
        if twin.label not in read:
            continue
        _, version, tag, label = _parts(twin.filename)
        key = (twin.project, version, base_label(label), tag)
        match = _SLIM.match(label)
        if match:
            sm = match["sm"]
            slims[key].append((f"{sm[:-1]}.{sm[-1]}", twin.size))
        elif _CUDA.match(label):
            fats[key] = twin.size
    found = [ChannelSize(*key, fat=fats[key], slims=tuple(sorted(slims[key], key=lambda s: _arch_order(s[0]))))
             for key in sorted(fats) if slims.get(key)]
    return tuple(sorted(found, key=lambda s: (s.project, s.label), reverse=False))


def _arch_order(arch: str) -> tuple[int, int]:
    major, minor = arch.split(".")
    return int(major), int(minor.rstrip("af"))
