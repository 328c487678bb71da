"""Day-0 wheels (issue 30): for a torch minor no build has reached, the newest built wheel whose ABI window holds
that torch, carried over: the same payload, its METADATA pinned to the new minor, its provenance saying what the
binary was built against and where it was proven to load. Here: which wheel to carry (or why none), and the rewrite."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from builder.core.demangle import demangle
from builder.core.errors import WheelError
from builder.core.ledger import LedgerEntry, Status
from builder.core.symbols import TorchAbi, version_key
from builder.core.wheelname import WheelFilename
from builder.plan.job import Job
from builder.steps import provenance
from builder.steps.wheelzip import Member, dist_info_dir, read_members, write_wheel

log = logging.getLogger(__name__)

PREFIX = "day0."  # a day-0 row's job id is the job's with this in front: its own row, beside a real build's
PROVEN_BY = ("symbols", "import")


def row_id(job: Job) -> str:
    """``day0.causal-conv1d-1.7.0+pt211cu130-cp311-x86_64``: the platform stays the id's last part."""
    return PREFIX + job.identifier


def is_day0(entry: LedgerEntry) -> bool:
    return entry.job_id.startswith(PREFIX)


@dataclass(frozen=True, kw_only=True)
class Source:
    """A built wheel that might be carried: its ledger row, its file, and its ``abi`` record with the window over
    the symbol index as it is now (builder.steps.abi.record_of_built)."""

    entry: LedgerEntry
    wheel: Path
    record: Mapping[str, object]

    @property
    def loads(self) -> tuple[str, ...]:
        window = self.record.get("window")
        loads = window.get("loads", []) if isinstance(window, dict) else []
        return tuple(str(v) for v in loads)

    def why_not(self, torch: str) -> str:
        """Why this wheel's window leaves ``torch`` out, in a phrase."""
        window = self.record.get("window")
        window = window if isinstance(window, dict) else {}
        broken = window.get("breaks", {}).get(torch) if isinstance(window.get("breaks"), dict) else None
        built = f"{self.entry.label} (built against torch {self.entry.torch})"
        if isinstance(broken, dict) and broken.get("examples"):
            more = int(broken.get("missing", 1)) - 1
            tail = f" and {more} more" if more > 0 else ""
            return f"{built} misses `{demangle(str(broken['examples'][0]))}`{tail}"
        other = window.get("other", {}) if isinstance(window.get("other"), dict) else {}
        family = next((str(why) for key, why in other.items() if str(key).split()[0] == torch), None)
        return f"{built}: {family or 'its window was not checked against it'}"


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What day-0 does for ``job``: carry ``source``, or (``source`` None) publish nothing, for ``reason``."""

    job: Job
    source: Source | None
    reason: str


def platform_of(entry: LedgerEntry) -> str:
    return entry.job_id.rsplit("-", 1)[-1]


def candidates(job: Job, built: list[Source]) -> list[Source]:
    """The built wheels of ``job``'s package version, Python and platform, other labels than its own."""
    return [s for s in built if not is_day0(s.entry) and canonicalize_name(s.entry.package) == canonicalize_name(
        job.package) and s.entry.version == job.version and s.entry.python == job.python
        and platform_of(s.entry) == job.platform and s.entry.label != job.label]


def choose(job: Job, built: list[Source], index: list[TorchAbi]) -> Choice:
    """The newest wheel (by the torch it was built against) whose window holds ``job``'s torch, or why none does:
    a torch the symbol index lacks is never carried to (no symbols, no proof)."""
    indexed = any((e.torch, e.variant, e.platform) == (job.torch, job.accelerator.name, job.platform) for e in index)
    if not indexed:
        return Choice(job=job, source=None, reason=(
            f"day-0: the symbol index holds no torch {job.torch} {job.accelerator.name} {job.platform}, so no "
            f"window can be proven to hold it (wheelwright facts symbols {job.torch})"))
    found = candidates(job, built)
    if not found:
        return Choice(job=job, source=None, reason=(
            f"day-0: no built wheel of {job.package} {job.version} for Python {job.python} {job.platform} "
            f"to carry to torch {job.torch}"))
    holding = [s for s in found if job.torch in s.loads]
    if not holding:
        reasons = "; ".join(s.why_not(job.torch) for s in sorted(found, key=lambda s: version_key(s.entry.torch)))
        return Choice(job=job, source=None, reason=(
            f"day-0: no built wheel's ABI window holds torch {job.torch} ({job.accelerator.name}): {reasons}"))
    source = max(holding, key=lambda s: (version_key(s.entry.torch), s.entry.label))
    return Choice(job=job, source=source, reason=statement(source.entry, job))


def statement(source: LedgerEntry, job: Job) -> str:
    return (f"day-0: binary built against torch {source.torch} ({source.label}), proven to load on torch "
            f"{job.torch} ({job.label}) by symbols and import")


# -- the rewrite ------------------------------------------------------------------------------------------------------


def carried_filename(source: str, job: Job) -> str:
    """``causal_conv1d-1.7.0+pt212cu130-1-cp311-...whl`` -> ``causal_conv1d-1.7.0+pt211cu130-cp311-...whl``: the
    job's label, no build tag (a real build of the label later takes one, which installers prefer)."""
    name = WheelFilename.parse(source)
    if name.version.public != job.version:
        raise WheelError(f"{source}: version {name.version.public}, not {job.package} {job.version}")
    return f"{name.dist}-{job.local_version}-{name.python_tag}-{name.abi_tag}-{name.platform_tag}.whl"


def pinned_metadata(text: str, job: Job, where: str) -> str:
    """METADATA with its Version the job's and its torch requirement the job's minor; every other line as it was.
    Only the header block is read (the description after the first empty line may say anything)."""
    head, blank, body = text.partition("\n\n")
    lines, versions, pins = [], 0, 0
    for line in head.split("\n"):
        field, _, value = line.partition(":")
        if field == "Version":
            versions += 1
            line = f"Version: {job.local_version}"
        elif field == "Requires-Dist" and _names_torch(value, where):
            pins += 1
            marker = Requirement(value.strip()).marker
            line = f"Requires-Dist: {job.torch_requirement}" + (f"; {marker}" if marker else "")
        lines.append(line)
    if versions != 1 or pins != 1:
        raise WheelError(f"{where}: METADATA has {versions} Version and {pins} torch Requires-Dist headers, "
                         "expected one of each")
    return "\n".join(lines) + blank + body


def _names_torch(value: str, where: str) -> bool:
    try:
        return canonicalize_name(Requirement(value.strip()).name) == "torch"
    except InvalidRequirement as error:
        raise WheelError(f"{where}: METADATA Requires-Dist {value.strip()!r} is not a requirement ({error})") from None


def without_build_tag(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("Build:"))


def carried_record(record: Mapping[str, object], source: LedgerEntry, job: Job,
                   abi: Mapping[str, object]) -> dict[str, object]:
    """The source's provenance for the day-0 wheel: its label and torch pin the job's, the torch it was built
    against kept, and a ``day0`` table saying where the binary comes from and what proved it loads."""
    torch_table = record.get("torch")
    torch = dict(torch_table) if isinstance(torch_table, dict) else {}
    day0 = {"built_against": {"torch": source.torch, "label": source.label, "wheel": source.wheel,
                              "sha256": source.wheel_sha256},
            "proven_on": {"torch": job.torch, "label": job.label, "by": list(PROVEN_BY)},
            "text": statement(source, job)}
    return {**record, "job": job.identifier, "label": job.label,
            "torch": {**torch, "requirement": job.torch_requirement}, "abi": dict(abi), "day0": day0}


def carry(source: Path, entry: LedgerEntry, job: Job, folder: Path, abi: Mapping[str, object]) -> Path:
    """Write the day-0 wheel of ``job`` from ``source`` into ``folder``: the payload's bytes as they were (copied
    deflated), the .dist-info renamed to the new version, METADATA, WHEEL and provenance rewritten, RECORD anew."""
    members = read_members(source, keep_deflated=True)
    old = dist_info_dir(members, source.name)
    new = f"{job.dist_name}-{job.local_version}.dist-info"
    record = provenance.read(members, source.name).record
    carried: dict[str, Member] = {}
    for name, member in members.items():
        carried[new + name[len(old):] if name.startswith(old + "/") else name] = member
    metadata = carried[f"{new}/METADATA"].data.decode("utf-8")
    carried[f"{new}/METADATA"] = Member(data=pinned_metadata(metadata, job, source.name).encode())
    wheel_file = carried.get(f"{new}/WHEEL")
    if wheel_file is None:
        raise WheelError(f"{source.name}: no {old}/WHEEL")
    carried[f"{new}/WHEEL"] = Member(data=without_build_tag(wheel_file.data.decode("utf-8")).encode())
    carried[f"{new}/{provenance.FILENAME}"] = Member(
        data=provenance.encode(carried_record(record, entry, job, abi)))
    folder.mkdir(parents=True, exist_ok=True)
    path = write_wheel(folder / carried_filename(source.name, job), carried)
    log.info("%s: carried from %s", path.name, source.name)
    return path


def with_build_tag(wheel: Path, tag: str) -> Path:
    """``wheel`` renamed with build tag ``tag`` (WHEEL's ``Build:`` the same), for a real build whose name a
    day-0 wheel already holds: both stay served, and installers prefer the tagged one."""
    name = WheelFilename.parse(wheel.name)
    members = read_members(wheel, keep_deflated=True)
    dist_info = dist_info_dir(members, wheel.name)
    text = without_build_tag(members[f"{dist_info}/WHEEL"].data.decode("utf-8"))
    members[f"{dist_info}/WHEEL"] = Member(data=(text.rstrip("\n") + f"\nBuild: {tag}\n").encode())
    target = wheel.with_name(
        f"{name.dist}-{name.version_text}-{tag}-{name.python_tag}-{name.abi_tag}-{name.platform_tag}.whl")
    write_wheel(target, members)
    wheel.unlink()
    return target


def day0_record(abi: Mapping[str, object], source: LedgerEntry, job: Job) -> dict[str, object]:
    """The day-0 row's ``abi``: the source's imports and window, the window's text led by the day-0 statement (the
    site shows that text on the wheel's entry and setup page)."""
    recorded = abi.get("window")
    window = dict(recorded) if isinstance(recorded, dict) else {}
    window["text"] = f"{statement(source, job)}; {window.get('text', '')}".rstrip("; ")
    return {**abi, "window": window, "day0": {"built_against": source.torch, "source": source.wheel,
                                              "proven_on": job.torch, "by": list(PROVEN_BY),
                                              "text": statement(source, job)}}


def labels(entries: list[LedgerEntry]) -> list[str]:
    """The labels served by a day-0 wheel and by no build of their own (what ``plan --estimate`` names)."""
    built = {(e.package, e.version, e.label, e.python) for e in entries if not is_day0(e) and e.wheel
             and e.status == Status.BUILT}
    return sorted({e.label for e in entries if is_day0(e) and e.status == Status.BUILT
                   and (e.package, e.version, e.label, e.python) not in built})


def report_json(report: Mapping[str, object]) -> str:
    return json.dumps(report, sort_keys=True, default=str)
