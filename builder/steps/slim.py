"""Slim per-arch wheels cut from one compile: the fat build's objects linked again, each ``.nv_fatbin`` cut to one
SASS arch plus the job's PTX that can run beside it (no recompile), then repaired, recorded (provenance naming the fat
wheel they were cut from) and verified like any wheel, and published as the PEP 825 variant ``{label}sm90``."""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import io
import json
import logging
import os
import shlex
import shutil
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from builder.core.elfread import ElfFile
from builder.core.errors import WheelError, WheelwrightError
from builder.core.fatbin import FatbinEntry, elf_fatbin, select_entries
from builder.core.hashing import sha256_of
from builder.core.ledger import SlimRow, Status
from builder.core.runner import run
from builder.plan.arch import Arch
from builder.plan.archs import split
from builder.plan.job import Job
from builder.steps import provenance
from builder.steps.wheelzip import Member, dist_info_dir, read_members, record_digest

if TYPE_CHECKING:
    from builder.steps.verify import VerifyReport

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")

CUT = "cut"  # the provenance field of a slim wheel: {"from": fat wheel, "sha256": its digest, "variant": label, ...}


def slim_label(label: str, arch: str) -> str:
    """``pt214cu130`` and ``9.0`` -> ``pt214cu130sm90``: the variant label of the slim wheel of one SASS arch."""
    return f"{label}sm{arch.replace('.', '')}"


def slim_archs(job: Job, arch: str) -> tuple[Arch, ...]:
    """The arch list of the slim wheel of ``arch``: its SASS, and the PTX of the job it keeps (``compute_120``)."""
    _, ptx = split(job.archs)
    return (Arch.parse(arch), *(Arch.parse(f"compute_{p.replace('.', '')}") for p in slim_ptx(arch, ptx)))


def slim_ptx(arch: str, ptx: Iterable[str]) -> tuple[str, ...]:
    """The job's PTX that the slim wheel of ``arch`` keeps: the PTX a GPU given that wheel can JIT, of an arch at
    most ``arch`` (uv gives it to GPUs of compute capability ``arch`` and up within its major). PTX is
    forward-compatible only: compute_120 never runs on a 9.x GPU, and would make the sm_90 wheel half as big
    again (14 of 40 MB); the fat wheel, the null fallback for GPUs no slim wheel fits, keeps all of it."""
    return tuple(p for p in ptx if capability(p) <= capability(arch))


def capability(arch: str) -> tuple[int, int]:
    """``9.0`` or ``9.0a`` -> (9, 0)."""
    major, _, minor = arch.partition(".")
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def cuttable(job: Job) -> tuple[str, ...]:
    """The SASS archs a job's slim wheels are cut for: every SASS arch of a CUDA job that has two or more (with
    one, the fat wheel is already that arch's wheel)."""
    sass, _ = split(job.archs)
    return sass if job.accelerator.kind == "cuda" and len(sass) > 1 else ()


# --- the link, as the build ran it -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Link:
    """One shared object's link command, as setuptools logged it in the job's log (its working directory is the
    source tree)."""

    argv: tuple[str, ...]

    @property
    def output(self) -> str:
        return self.argv[self.argv.index("-o") + 1]

    @property
    def objects(self) -> tuple[str, ...]:
        return tuple(arg for arg in self.argv if arg.endswith(".o"))

    def with_inputs(self, objects: Mapping[str, Path], output: Path) -> list[str]:
        """The same command with ``objects`` (old path -> new) in place of the originals and ``output`` as -o."""
        argv = [str(objects.get(arg, arg)) for arg in self.argv]
        argv[argv.index("-o") + 1] = str(output)
        return argv


def find_links(log_text: str, names: Iterable[str]) -> dict[str, Link]:
    """The last link command in ``log_text`` of each shared object named in ``names`` (file names): a logged line
    that splits into a compiler call with ``-shared`` and ``-o`` naming that file."""
    wanted, found = set(names), {}
    for line in log_text.splitlines():
        if "-shared" not in line or "-o" not in line:
            continue
        try:
            argv = tuple(shlex.split(line))
        except ValueError:
            continue
        if "-shared" in argv and "-o" in argv[:-1] and Path(argv[argv.index("-o") + 1]).name in wanted:
            found[Path(argv[argv.index("-o") + 1]).name] = Link(argv=argv)
    return found


def gpu_libraries(wheel: Path) -> dict[str, Member]:
    """The members of ``wheel`` that are shared objects carrying GPU code."""
    members = read_members(wheel)
    return {name: member for name, member in members.items() if name.endswith(".so") and _has_gpu_code(member.data)}


def _has_gpu_code(data: bytes) -> bool:
    try:
        return not elf_fatbin(ElfFile(io.BytesIO(data), where="member"), where="member").empty
    except WheelError:
        return False


# --- relinking -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Relinked:
    """The slim shared objects of one SASS arch, by the wheel member each replaces."""

    arch: str
    libraries: Mapping[str, Path]
    seconds: float = 0.0


class SlimSkipped(WheelwrightError):
    """Why no slim wheel is cut for a job (its fat wheel is unaffected)."""


def keeper(arch: str, ptx: Iterable[str]) -> Callable[[FatbinEntry], bool]:
    """Which fatbin entries a slim wheel of ``arch`` keeps: that arch's SASS, the job's PTX, and anything that is
    neither (never dropped unread)."""
    wanted_ptx = frozenset(ptx)
    return lambda entry: (
        (entry.kind == "sass" and entry.arch == arch) or (entry.kind == "ptx" and entry.arch in wanted_ptx)
        or entry.kind == "other"
    )


def relink(job: Job, source: Path, built: Path, log_text: str, out: Path) -> list[Relinked]:
    """Link each GPU library of ``built`` again per SASS arch of ``job`` from the objects the compile left in
    ``source`` (its working directory), each object's fatbin cut to that arch and the PTX it keeps; the archs side
    by side (objcopy and the linker: subprocesses)."""
    archs = cuttable(job)
    if not archs:
        return []
    libraries = gpu_libraries(built)
    links = find_links(log_text, {Path(name).name for name in libraries})
    if missing := sorted(Path(name).name for name in libraries if Path(name).name not in links):
        raise SlimSkipped(f"no link command of {', '.join(missing)} in the build's log")
    objcopy = _objcopy(links[Path(next(iter(libraries))).name].argv[0])
    _, ptx = split(job.archs)

    def one(arch: str) -> Relinked:
        started = time.monotonic()
        folder = out / arch
        folder.mkdir(parents=True, exist_ok=True)
        made, keep = {}, keeper(arch, slim_ptx(arch, ptx))
        for member in libraries:
            link = links[Path(member).name]
            objects = {o: _slim_object(source / o, keep, folder, objcopy) for o in link.objects}
            made[member] = folder / Path(member).name
            run(link.with_inputs(objects, made[member]), step=f"{job.identifier}: relink sm {arch}", cwd=source)
        return Relinked(arch=arch, libraries=made, seconds=time.monotonic() - started)

    return _side_by_side(one, archs)


def _side_by_side(work: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``work`` of each item in threads of their own (each in a copy of this context: the job's log), in order."""
    with ThreadPoolExecutor(max_workers=max(1, len(items)), thread_name_prefix="slim") as pool:
        return [f.result() for f in [pool.submit(contextvars.copy_context().run, work, item) for item in items]]


def _slim_object(path: Path, keep: Callable[[FatbinEntry], bool], folder: Path, objcopy: str) -> Path:
    """``path`` with its ``.nv_fatbin`` section cut to what ``keep`` says (objcopy resizes the section; the one
    relocation against it points at its start); an object without one as it is."""
    with path.open("rb") as stream:
        elf = ElfFile(stream, where=str(path))
        section = elf.section(".nv_fatbin")
        data = b"" if section is None else elf.data(section)
    if not data:
        return path
    name = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    fatbin, slim = folder / f"{name}.fatbin", folder / f"{name}.o"
    fatbin.write_bytes(select_entries(data, keep, where=str(path)))
    run([objcopy, f"--update-section=.nv_fatbin={fatbin}", str(path), str(slim)], step=f"slim {path.name}")
    return slim


def _objcopy(compiler: str) -> str:
    """The objcopy of the linking compiler's binutils (a cross compiler's own), as the compiler names it."""
    found = run([compiler, "-print-prog-name=objcopy"], step="find objcopy", capture=True).output.strip()
    program = shutil.which(found or "objcopy")
    if program is None:
        raise SlimSkipped(f"no objcopy for {compiler} ({found or 'objcopy'} not found)")
    return program


# --- the slim wheel --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Cut:
    """One slim wheel, as the build recorded it: its variant file, or why there is none."""

    arch: str
    label: str
    variant: Path | None = None
    reason: str = ""
    sha256: str = ""
    size: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)
    report: str = ""


def slim_built_wheel(built: Path, relinked: Relinked, out: Path) -> Path:
    """``built`` (the compile's wheel, before repair) with the GPU libraries replaced by ``relinked``'s, stored
    (repair and provenance write it again, deflated once), RECORD made anew."""
    members = read_members(built)
    for name, path in relinked.libraries.items():
        members[name] = dataclasses.replace(members[name], data=path.read_bytes())
    out.mkdir(parents=True, exist_ok=True)
    target = out / built.name
    record = next(name for name in members if name.endswith(".dist-info/RECORD"))
    lines = [f"{name},{record_digest(m.data)},{len(m.data)}" for name, m in sorted(members.items()) if name != record]
    members[record] = Member(data=("\n".join([*lines, f"{record},,"]) + "\n").encode())
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, member in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if member.executable else 0o100644) << 16
            archive.writestr(info, member.data)
    return target


@dataclass(frozen=True, kw_only=True)
class Origin:
    """The fat wheel the slim wheels are cut from, read and hashed once for all of them (a full-arch wheel is some
    200 MB: hashed again per arch, nine archs cost eight needless reads)."""

    name: str
    record: Mapping[str, object]  # its provenance, the payload's digests left out
    sha256: str

    @classmethod
    def of(cls, fat: Path) -> Origin:
        record = {k: v for k, v in provenance.read_wheel(fat).record.items() if k != "files"}
        return cls(name=fat.name, record=record, sha256=sha256_of(fat))


def cut_record(origin: Origin, job: Job, arch: str) -> dict[str, object]:
    """The slim wheel's provenance: the fat wheel's (its payload digests aside) with the slim arch list and the
    fat wheel it was cut from."""
    record = dict(origin.record)
    slim_job = dataclasses.replace(job, archs=slim_archs(job, arch))
    record["archs"] = provenance.job_archs(slim_job)
    record[CUT] = {"from": origin.name, "sha256": origin.sha256, "variant": slim_label(job.label, arch)}
    return record


Repair = Callable[[Path, Job, Path], Path]  # (wheel, job, out dir) -> the repaired wheel
Verify = Callable[[Path, Job], "VerifyReport"]


def cut_wheels(
    job: Job, built: Path, fat: Path, relinked: Iterable[Relinked], work: Path, variant_dir: Path, *,
    repair: Repair, verify: Verify,
) -> list[Cut]:
    """Each relinked arch as a wheel: repaired, recorded and verified like any wheel (the slim job's archs), then
    written into ``variant_dir`` as the variant ``{label}sm90``; the archs side by side (``repair`` serialises
    itself where it must). A slim wheel the gate refuses is left out, and its Cut says why; the fat wheel is never
    affected."""
    origin = Origin.of(fat)
    return _side_by_side(lambda one: _cut_one(job, built, origin, one, work / f"cut-{one.arch}", variant_dir, repair,
                                              verify), list(relinked))


def _cut_one(
    job: Job, built: Path, fat: Origin, relinked: Relinked, work: Path, variant_dir: Path, repair: Repair,
    verify: Verify,
) -> Cut:
    from builder.steps import variant  # the twin's maker names and checks the slim variant too

    label, timings = slim_label(job.label, relinked.arch), {"relink": round(relinked.seconds, 3)}
    slim_job = dataclasses.replace(job, archs=slim_archs(job, relinked.arch))
    with _timed(timings, "repair"):
        repaired = repair(slim_built_wheel(built, relinked, work / "built"), slim_job, work / "repaired")
        provenance.embed(repaired, cut_record(fat, job, relinked.arch))
    with _timed(timings, "verify"):
        report = verify(repaired, slim_job)
    summary = json.dumps(report.as_dict(), sort_keys=True, default=str)
    if not report.ok:
        return Cut(arch=relinked.arch, label=label, reason="; ".join(report.reasons), timings=timings, report=summary)
    with _timed(timings, "variant"):
        made = variant.make_twin(repaired, work / "variant", label=label)
        destination = variant_dir / made.path.name
        os.replace(made.path, destination)
    log.info("%s: slim wheel %s (%d bytes)", job.identifier, destination.name, destination.stat().st_size)
    return Cut(arch=relinked.arch, label=label, variant=destination, sha256=sha256_of(destination),
               size=destination.stat().st_size, timings=timings, report=summary)


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        timings[name] = round(time.monotonic() - started, 3)


def ledger_row(job_id: str, cut: Cut, fat: str) -> SlimRow:
    """The ledger's row of one slim wheel (its own table, beside its job's row): built with its variant file, or
    failed with the gate's reasons."""
    return SlimRow(
        job_id=job_id, arch=cut.arch, label=cut.label, status=Status.BUILT if cut.variant else Status.FAILED,
        wheel=cut.variant.name if cut.variant else None, wheel_sha256=cut.sha256 or None, wheel_size=cut.size or None,
        cut_from=fat, timings=dict(cut.timings), reason=cut.reason or None, report=cut.report or None,
    )


# --- checking a slim wheel against its fat wheel ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FatRead:
    """A fat wheel as cut_problems compares its slim wheels with it: every member and the file's digest. The index
    checks a job's slim wheels one after another; read once for all of them, not once each (nine reads of a
    200 MB wheel were 8.7 CPU-s of a cold index's 9 slim checks, one job's)."""

    members: Mapping[str, Member]
    sha256: str

    @classmethod
    def of(cls, fat: Path) -> FatRead:
        return cls(members=read_members(fat), sha256=sha256_of(fat))


def cut_problems(fat: Path, cut: Path, *, read: FatRead | None = None) -> list[str]:
    """Where the slim variant ``cut`` is not one cut from ``fat`` (the verified wheel of dist/): its provenance
    names ``fat`` by name and digest and agrees with what it holds, its GPU libraries hold exactly the recorded
    SASS and PTX, everything else it installs is ``fat``'s byte for byte, METADATA differs in the Version alone,
    and its variant.json describes the label its name ends with. [] when it is. ``read``: ``fat`` as read for an
    earlier check, while it is the same file."""
    from builder.steps import variant

    try:
        members, fat_read = read_members(cut), read or FatRead.of(fat)
        record = provenance.read(members, cut.name).record
    except WheelError as error:
        return [str(error)]
    original = fat_read.members
    label = cut.name.removesuffix(".whl").rsplit("-", 1)[-1]
    cut_from = record.get(CUT)
    if not isinstance(cut_from, dict) or cut_from != {"from": fat.name, "sha256": fat_read.sha256, "variant": label}:
        return [f"{provenance.FILENAME} does not name {fat.name} (as it is now) as the wheel {label} was cut from"]
    new, old = dist_info_dir(members, cut.name), dist_info_dir(original, fat.name)
    problems = provenance.disagreements(members, cut.name)
    problems += variant.variant_problems(members.get(f"{new}/{variant.VARIANT_JSON}"), label)
    problems += _payload_problems(original, old, members, new, record.get("archs", {}))
    before, after = variant.metadata_lines(original.get(f"{old}/METADATA")), variant.metadata_lines(
        members.get(f"{new}/METADATA"))
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) != len(after) or len(changed) != 1 or not changed[0][0].startswith("Version: "):
        problems.append("METADATA differs from the fat wheel's in more than its Version")
    return problems


def _payload_problems(original: Mapping[str, Member], old: str, members: Mapping[str, Member], new: str,
                      archs: object) -> list[str]:
    """The payload is the fat wheel's but for its GPU libraries, which hold exactly ``archs``."""
    fat = {n: m for n, m in original.items() if not n.startswith(old + "/")}
    slim = {n: m for n, m in members.items() if not n.startswith(new + "/")}
    if fat.keys() != slim.keys():
        return ["its files are not the fat wheel's"]
    want = archs if isinstance(archs, dict) else {}
    problems = []
    for name in sorted(fat):
        if slim[name].data == fat[name].data:
            continue
        try:
            found = elf_fatbin(ElfFile(io.BytesIO(slim[name].data), where=name), where=name)
        except WheelError as error:
            problems.append(str(error))
            continue
        if found.empty or (sorted(found.sass), sorted(found.ptx)) != (sorted(want.get("sass", [])),
                                                                       sorted(want.get("ptx", []))):
            problems.append(f"{name} differs from the fat wheel's and holds {found.describe()}, not its cut archs")
    return problems
