"""Provenance: how a wheel was made, recorded inside it as ``<name>-<version>.dist-info/wheelwright.json`` (sdist
sha256, recipe and patches, torch and its ABI, toolkit and host compiler, GPU archs, wheelwright's version and
commit, build host), with the sha256 of every payload file, so the record can be checked against what the wheel
holds. Embedded after repair (which changes the ELF files) and checked again by the verify gate."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import __version__
from builder.core.errors import WheelError, WheelwrightError
from builder.core.settings import setting
from builder.steps.wheelzip import Member, dist_info_dir, read_members, write_wheel

if TYPE_CHECKING:  # the plan's arch models and pyelftools: not for the index, which only reads records
    from builder.plan.job import Job
    from builder.steps.elf import ElfFacts

log = logging.getLogger(__name__)

FILENAME = "wheelwright.json"
SCHEMA = 1
_REPOSITORY = Path(__file__).resolve().parents[2]  # the checkout wheelwright runs from, for its commit


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """A parsed record; ``record`` is the JSON object as stored."""

    record: Mapping[str, Any]

    @property
    def files(self) -> Mapping[str, str]:
        files: Mapping[str, str] = self.record.get("files", {})
        return files

    @property
    def label(self) -> str:
        return str(self.record.get("label", ""))


# --- collecting ------------------------------------------------------------------------------------------------------


def _first_line(command: list[str], log_path: Path | None) -> str:
    """The first output line of a version query, or why there is none (provenance never fails a build)."""
    from builder.core.runner import run  # a build's step: the index reads records, it runs nothing

    try:
        result = run(command, step=f"provenance: {command[0]}", log_path=log_path, check=False, capture=True)
    except (WheelwrightError, OSError) as error:  # recorded, not fatal: the compile step judged the toolchain
        return f"unavailable ({error})"
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    release = [line for line in lines if "release" in line]  # nvcc: "Cuda compilation tools, release 13.0, V13.0.88"
    return (release or lines or ["unavailable"])[0]


def wheelwright_commit() -> str:
    """The commit of the checkout wheelwright runs from (``WHEELWRIGHT_COMMIT`` wins, e.g. in CI images)."""
    return setting("WHEELWRIGHT_COMMIT") or _checkout_commit()


@functools.cache
def _checkout_commit() -> str:
    """Read once per process (the build reads it as it starts): the code a process runs is the code it loaded, so a
    build whose checkout moves on meanwhile (a merge during an hour-long matrix) still records the commit it runs."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(_REPOSITORY), "rev-parse", "HEAD"], capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(_REPOSITORY), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=10,
                               check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = head.stdout.strip() if head.returncode == 0 else "unknown"
    return commit + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _host() -> dict[str, str]:
    import platform

    libc, libc_version = platform.libc_ver()
    return {
        "name": platform.node(),
        "image": setting("WHEELWRIGHT_BUILDER_IMAGE") or "none (host build)",  # set by the container backend
        "system": f"{platform.system()} {platform.machine()}",
        "libc": f"{libc} {libc_version}".strip(),
    }


def job_archs(job: Job) -> dict[str, list[str]]:
    """The archs the job compiles, by the plan's spellings: SASS (ROCm: code objects) and PTX, each as ``9.0``."""
    from builder.plan.archs import split

    sass, ptx = split(job.archs)
    return {"sass": sorted(set(sass), key=_arch_sort), "ptx": sorted(set(ptx), key=_arch_sort)}


def _arch_sort(arch: str) -> tuple[Any, ...]:
    from builder.core.fatbin import arch_key  # the build's and the gate's: the index reads no ELF

    return arch_key(arch) if not arch.startswith("gfx") else (0, 0, arch)


def build_record(job: Job, *, toolchain: Mapping[str, str] | None, recipe_changes: tuple[str, ...] = (),
                 log_path: Path | None = None,
                 torch_wheel: Mapping[str, str | None] | None = None,
                 abi: Mapping[str, object] | None = None) -> dict[str, object]:
    """Everything the record says about the build (the file digests are added when it is embedded).

    ``toolchain`` is the job's toolkit record (``Toolchain.as_dict()``: source, CUDA version, root, host compilers),
    the same the ledger keeps; the record adds what those tools say they are. ``torch_wheel`` is where the torch it
    was built against came from (``RuntimeEnv.origin()``: the wheel's URL and sha256, or the interpreter's own);
    ``abi`` what its extensions import from that torch and the torch releases that export it all
    (builder/steps/abi.py)."""
    compiler = (toolchain or {}).get("cxx") or os.environ.get("CXX", "c++")
    toolkit: dict[str, str] = {"kind": job.accelerator.kind, "version": job.accelerator.version}
    if toolchain is not None and job.accelerator.kind == "cuda":
        toolkit.update(toolchain)
        toolkit["nvcc"] = _first_line([str(Path(toolchain["root"]) / "bin" / "nvcc"), "--version"], log_path)
    return {
        "schema": SCHEMA,
        "job": job.identifier,
        "package": job.package,
        "version": job.version,
        "label": job.label,
        "sdist": {"filename": job.sdist.filename, "sha256": job.sdist.sha256},
        "recipe": {
            "arch_control": job.recipe.arch_control,
            "env": dict(job.recipe.env),
            "abi_env": job.recipe.abi_env,
            "patches": [{"name": p.name, "versions": p.versions, "torch": p.torch} for p in job.recipe.patches],
            "applied": list(recipe_changes),
        },
        "torch": {"version": job.torch, "requirement": job.torch_requirement,
                  "cxx11_abi": job.cxx11_abi, **({"wheel": dict(torch_wheel)} if torch_wheel else {})},
        "python": job.python_tag,
        "toolkit": toolkit,
        "host_compiler": _first_line([compiler, "--version"], log_path),
        "archs": job_archs(job),
        "manylinux": job.manylinux,
        "wheelwright": {"version": __version__, "commit": wheelwright_commit()},
        "build_host": _host(),
        **({"abi": dict(abi)} if abi is not None else {}),
    }


# --- embedding and reading -------------------------------------------------------------------------------------------


def payload_digests(members: Mapping[str, Member], dist_info: str) -> dict[str, str]:
    """sha256 of every file outside ``.dist-info`` (what the wheel installs besides its metadata)."""
    return {name: hashlib.sha256(m.data).hexdigest() for name, m in sorted(members.items())
            if not name.startswith(dist_info + "/")}


def encode(record: Mapping[str, object]) -> bytes:
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()


def embed(wheel: Path, record: Mapping[str, object]) -> Provenance:
    """Add ``record`` with the payload's digests to ``wheel`` (rewritten in place, reproducibly)."""
    members = read_members(wheel)
    dist_info = dist_info_dir(members, wheel.name)
    digests = payload_digests(members, dist_info)
    full = {**record, "files": digests}
    members[f"{dist_info}/{FILENAME}"] = Member(data=encode(full))
    write_wheel(wheel, members)
    log.info("%s: provenance embedded (%d payload files)", wheel.name, len(digests))
    return Provenance(record=full)


def read(members: Mapping[str, Member], where: str) -> Provenance:
    dist_info = dist_info_dir(members, where)
    member = members.get(f"{dist_info}/{FILENAME}")
    if member is None:
        raise WheelError(f"{where}: no {dist_info}/{FILENAME} (built before provenance was recorded, or not by us)")
    try:
        record = json.loads(member.data)
    except (ValueError, RecursionError) as error:
        raise WheelError(f"{where}: {FILENAME} is not JSON ({str(error)[:200]})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise WheelError(f"{where}: {FILENAME} has an unknown schema (expected {SCHEMA})")
    problem = shape_problem(record)
    if problem:
        raise WheelError(f"{where}: {FILENAME}: {problem}")
    return Provenance(record=record)


# The record's fields by the type each is read as (a field may be absent: records of older builds lack some).
_TABLES = ("sdist", "recipe", "torch", "toolkit", "archs", "wheelwright", "build_host", "files")
_TEXTS = ("job", "package", "version", "label", "python", "manylinux", "host_compiler")
_TEXT_OR_NONE = (str, type(None))


def shape_problem(record: Mapping[str, Any]) -> str | None:
    """The first field of ``record`` whose type is not the one it is read as, said in a sentence; None when all
    are (describe, disagreements and the twin read the record without guarding each access)."""
    for name in _TEXTS:
        if not isinstance(record.get(name, ""), str):
            return _wrong(name, record[name], "a string")
    for name in _TABLES:
        if not isinstance(record.get(name, {}), dict):
            return _wrong(name, record[name], "a table")
    for name, value in record.get("files", {}).items():
        if not isinstance(value, str):
            return _wrong(f"files[{name!r}]", value, "a sha256 string")
    for kind in ("sass", "ptx"):
        archs = record.get("archs", {}).get(kind, [])
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            return _wrong(f"archs.{kind}", archs, "a list of strings")
    return _torch_problem(record.get("torch", {})) or _recipe_problem(record.get("recipe", {}))


def _torch_problem(torch: Mapping[str, Any]) -> str | None:
    if not isinstance(torch.get("requirement"), _TEXT_OR_NONE):
        return _wrong("torch.requirement", torch["requirement"], "a string")
    if not isinstance(torch.get("cxx11_abi"), (bool, type(None))):
        return _wrong("torch.cxx11_abi", torch["cxx11_abi"], "true or false")
    return None


def _recipe_problem(recipe: Mapping[str, Any]) -> str | None:
    patches = recipe.get("patches", [])
    if not isinstance(patches, list):
        return _wrong("recipe.patches", patches, "a list")
    for number, patch in enumerate(patches):
        fields = ("name", "versions", "torch")
        if not isinstance(patch, dict) or not all(isinstance(patch.get(f), _TEXT_OR_NONE) for f in fields):
            return _wrong(f"recipe.patches[{number}]", patch, "a table of name, versions and torch strings")
    return None


def _wrong(field: str, value: object, expected: str) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return f"{field} is {shown} ({type(value).__name__}), not {expected}"


def read_wheel(wheel: Path) -> Provenance:
    return read(read_members(wheel), wheel.name)


# --- checking against the wheel --------------------------------------------------------------------------------------


def disagreements(members: Mapping[str, Member], where: str, elves: tuple[ElfFacts, ...] | None = None) -> list[str]:
    """Where the record and the wheel's contents disagree; empty when they agree. ``elves`` (the wheel's ELF facts,
    when the caller has read them) adds the GPU arch comparison."""
    try:
        provenance = read(members, where)
    except WheelError as error:
        return [str(error)]
    dist_info = dist_info_dir(members, where)
    problems = _file_problems(provenance.files, payload_digests(members, dist_info))
    problems += _metadata_problems(provenance.record, members, dist_info)
    if elves is not None and provenance.record.get("toolkit", {}).get("kind") == "cuda":
        problems += _arch_problems(provenance.record.get("archs", {}), elves)
    return problems


def _file_problems(recorded: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    problems = [f"{name}: sha256 {actual[name][:12]}... but provenance records {digest[:12]}..."
                for name, digest in sorted(recorded.items()) if name in actual and actual[name] != digest]
    if missing := sorted(set(recorded) - set(actual)):
        problems.append(f"recorded but not in the wheel: {', '.join(missing)}")
    if extra := sorted(set(actual) - set(recorded)):
        problems.append(f"in the wheel but not recorded: {', '.join(extra)}")
    return problems


def _metadata_problems(record: Mapping[str, Any], members: Mapping[str, Member], dist_info: str) -> list[str]:
    metadata_member = members.get(f"{dist_info}/METADATA")
    if metadata_member is None:
        return [f"no {dist_info}/METADATA"]
    from email.parser import Parser  # the verify gate's: the index checks METADATA with packaging's parser

    metadata = Parser().parsestr(metadata_member.data.decode("utf-8", "replace"))
    version, label = str(record.get("version")), str(record.get("label"))
    problems = []
    variant = members.get(f"{dist_info}/variant.json")
    expected = version if variant is not None else f"{version}+{label}"
    if metadata.get("Version") != expected:
        problems.append(f"METADATA Version {metadata.get('Version')} but provenance says {expected}")
    cut = record.get("cut")
    if isinstance(cut, dict) and isinstance(cut.get("variant"), str):  # a slim wheel: its own variant label
        label = cut["variant"]
    if variant is not None and label not in _variant_labels(variant.data):
        problems.append(f"variant.json does not describe the recorded label {label}")
    requirement = record.get("torch", {}).get("requirement")
    torch_pins = [r.replace(" ", "") for r in metadata.get_all("Requires-Dist") or [] if r.startswith("torch")]
    if requirement and requirement not in torch_pins:
        problems.append(f"METADATA pins {torch_pins or 'no torch'} but provenance records {requirement}")
    return problems


def _variant_labels(data: bytes) -> Mapping[str, Any]:
    """variant.json's ``variants`` table; empty when it is not JSON or not shaped so (the label check then fails,
    naming the label)."""
    try:
        variants = json.loads(data).get("variants", {})
    except (ValueError, RecursionError, AttributeError):
        return {}
    return variants if isinstance(variants, dict) else {}


def _arch_problems(archs: Mapping[str, list[str]], elves: tuple[ElfFacts, ...]) -> list[str]:
    kernels = [elf for elf in elves if not elf.gpu.empty]
    sass = {a for elf in kernels for a in elf.gpu.sass}
    ptx = {a for elf in kernels for a in elf.gpu.ptx}
    want_sass, want_ptx = set(archs.get("sass", [])), set(archs.get("ptx", []))
    if (sass, ptx) == (want_sass, want_ptx):
        return []
    found = f"SASS {sorted(sass, key=_arch_sort)}, PTX {sorted(ptx, key=_arch_sort)}"
    return [f"the fatbins hold {found} but provenance records SASS {sorted(want_sass)}, PTX {sorted(want_ptx)}"]


def gate(wheel: Path, elves: tuple[ElfFacts, ...]) -> tuple[bool, str]:
    """The verify gate's question: does the wheel's provenance agree with what it holds? (ok, detail)."""
    try:
        members = read_members(wheel)
    except WheelError as error:
        return False, str(error)
    problems = disagreements(members, wheel.name, elves)
    if problems:
        return False, "; ".join(problems)
    record = read(members, wheel.name)
    return True, f"{len(record.files)} payload files, metadata and GPU archs agree with {FILENAME}"


def _abi(torch: Mapping[str, Any]) -> str:
    return "cxx11" if torch.get("cxx11_abi") else "pre-cxx11"


def _torch_wheel(wheel: object) -> str:
    if not isinstance(wheel, dict):
        return "not recorded"
    if wheel.get("origin") == "interpreter":
        return f"the interpreter's own ({wheel.get('python')}, torch {wheel.get('torch')})"
    return f"{wheel.get('url')} sha256 {wheel.get('sha256')} ({wheel.get('origin')})"


def describe(provenance: Provenance) -> list[tuple[str, str]]:
    """(field, value) rows for people: what ``wheelwright provenance`` prints."""
    r = provenance.record
    sdist, toolkit, torch, archs, ww, host = (
        r.get(k, {}) for k in ("sdist", "toolkit", "torch", "archs", "wheelwright", "build_host"))
    recipe = r.get("recipe", {})
    patches = ", ".join(f"{p.get('name')} ({p.get('versions') or 'any'} / torch {p.get('torch') or 'any'})"
                        for p in recipe.get("patches", [])) or "none"
    return [
        ("job", str(r.get("job"))),
        ("sdist", f"{sdist.get('filename')} sha256 {sdist.get('sha256')}"),
        ("recipe", f"arch control {recipe.get('arch_control')}; patches {patches}"),
        ("torch", f"{torch.get('version')} ({_abi(torch)} ABI), wheel pins {torch.get('requirement')}"),
        ("torch wheel", _torch_wheel(torch.get("wheel"))),
        ("toolkit", f"{toolkit.get('kind')} {toolkit.get('version')}: {toolkit.get('nvcc', '-')}"),
        ("host compiler", str(r.get("host_compiler"))),
        ("archs", f"SASS {' '.join(archs.get('sass', [])) or 'none'}; PTX {' '.join(archs.get('ptx', [])) or 'none'}"),
        ("wheelwright", f"{ww.get('version')} at {ww.get('commit')}"),
        ("build host", f"{host.get('name')} ({host.get('system')}, {host.get('libc')}), image {host.get('image')}"),
        ("payload files", str(len(provenance.files))),
    ]
