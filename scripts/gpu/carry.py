"""What travels to the lent GPU box for the acceptance run (docs/gpu-acceptance.md): the wheels of wheelwright's
dependencies that the box lacks (scripts/data/gpu_box.toml lists what it has), the build environment's pinned tools,
and the profile's pinned sdists laid out as the fetch stage's cache. scripts/prepare_gpu_carry.sh runs it
(`python -m scripts.gpu.carry`) with the dev venv's interpreter, whose installed distributions give the versions of
dependencies that pyproject.toml does not pin itself."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Self

import tomllib
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from builder.core.data import load_data
from builder.core.errors import ConfigError, WheelwrightError
from builder.plan.job import Job

ROOT = Path(__file__).resolve().parents[2]

BOX_FILE = ROOT / "scripts" / "data" / "gpu_box.toml"
BUILD_REQUIREMENTS = ROOT / "builder" / "data" / "build-requirements.txt"
EXIT_CARRY_ERROR = 1


class CarryError(Exception):
    """The carry cannot be worked out or is incomplete; the message names what and where."""


class BoxFacts(BaseModel):
    """[box] in scripts/data/gpu_box.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    python: str
    python_full: str
    implementation: str
    machine: str
    platforms: tuple[str, ...]
    packages: frozenset[str]  # canonical names

    @field_validator("packages", mode="before")
    @classmethod
    def _canonical_once(cls, names: list[str]) -> frozenset[str]:
        canonical = [canonicalize_name(str(name)) for name in names]
        if len(set(canonical)) != len(canonical):
            raise ValueError("names a package twice (names are compared normalised)")
        return frozenset(canonical)

    @model_validator(mode="after")
    def _a_release_of_python(self) -> Self:
        if not self.python_full.startswith(self.python + "."):
            raise ValueError(f"python_full {self.python_full!r} is not a {self.python} release")
        return self


class CarryLimit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    limit_mib: int


class BoxFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    box: BoxFacts
    carry: CarryLimit


class Box(BoxFacts):
    """The box's facts and the carry's size limit, as one value."""

    limit_mib: int

    def marker_environment(self) -> dict[str, str]:
        """What PEP 508 markers see on the box's interpreter (CPython on Linux)."""
        return {
            "python_version": self.python, "python_full_version": self.python_full,
            "implementation_name": "cpython", "implementation_version": self.python_full,
            "platform_python_implementation": "CPython", "platform_machine": self.machine,
            "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix", "extra": "",
        }


def load_box(path: Path = BOX_FILE) -> Box:
    try:
        loaded = load_data(path, BoxFile, what="the box facts")
    except ConfigError as error:
        raise CarryError(str(error)) from None
    return Box(**loaded.box.model_dump(), limit_mib=loaded.carry.limit_mib)


# -- which wheels -----------------------------------------------------------------------------------------------


def project_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    try:
        return [Requirement(line) for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, InvalidRequirement) as error:
        raise CarryError(f"{pyproject}: cannot read [project].dependencies: {error}") from None


def pinned(requirement: Requirement) -> str | None:
    """The version of an exact ``name==1.2.3`` pin, else None."""
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and not specs[0].version.endswith(".*"):
        return specs[0].version
    return None


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_requires(name: str) -> list[str]:
    return metadata.requires(name) or []


def carry_closure(
    requirements: Iterable[Requirement],
    *,
    present: frozenset[str],
    environment: dict[str, str],
    version_of: Callable[[str], str | None] = installed_version,
    requires_of: Callable[[str], list[str]] = installed_requires,
) -> dict[str, str]:
    """The distributions the box must be given: every requirement (and theirs, recursively) that applies on the
    box and is not installed there, at its pinned version, else the version installed here. A package the box has
    is not followed: its own dependencies came with it."""
    carried: dict[str, str] = {}
    queue = list(requirements)
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if not _applies(requirement.marker, environment) or name in present or name in carried:
            continue
        here = version_of(name)
        version = pinned(requirement) or here
        if version is None:
            raise CarryError(
                f"{requirement} is needed on the box but not pinned, and this interpreter has no {name} "
                f"to read a version from (run `make venv` and use .venv/bin/python)"
            )
        if here != version:
            raise CarryError(
                f"{requirement} is pinned, but this interpreter has {name} {here}: its dependencies "
                f"cannot be read for the pinned version (run `make venv` and use .venv/bin/python)"
            )
        if not requirement.specifier.contains(version, prereleases=True):
            raise CarryError(f"{name} {version} installed here does not satisfy {requirement}")
        carried[name] = version
        queue += [Requirement(line) for line in requires_of(name)]
    return dict(sorted(carried.items()))


def _applies(marker: Marker | None, environment: dict[str, str]) -> bool:
    return marker is None or marker.evaluate(environment)  # extra="" drops optional extras' requirements


def unmet(
    requirements: Iterable[Requirement],
    *,
    environment: dict[str, str],
    version_of: Callable[[str], str | None] = installed_version,
    requires_of: Callable[[str], list[str]] = installed_requires,
) -> tuple[list[str], list[str]]:
    """(missing, other versions): what this interpreter lacks of the requirements and theirs, and where the version
    it has is not the one asked for (on the box, the image's own packages against wheelwright's pins)."""
    missing, mismatched, seen = [], [], set()
    queue = list(requirements)
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if not _applies(requirement.marker, environment):
            continue
        version = version_of(name)
        if version is None:
            missing.append(str(requirement))
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            mismatched.append(f"{requirement} (found {name} {version})")
        if name not in seen:
            seen.add(name)
            queue += [Requirement(line) for line in requires_of(name)]
    return sorted(set(missing)), sorted(set(mismatched))


def build_requirements(path: Path = BUILD_REQUIREMENTS) -> dict[str, str]:
    """The build environment's pins: every job's build venv pip-installs these, so the box needs them as wheels."""
    pins: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        version = pinned(requirement)
        if version is None:
            raise CarryError(f"{path}:{number}: {line!r} is not an exact == pin")
        pins[canonicalize_name(requirement.name)] = version
    return pins


# -- sdists -----------------------------------------------------------------------------------------------------


def profile_jobs(box: Box, matrix: Path = ROOT / "matrix.yaml") -> list[Job]:
    from builder.plan.expand import load_plan

    return list(load_plan(matrix, box.profile).jobs)


def carry_sdists(jobs: Sequence[Job], destination: Path) -> list[Path]:
    """The jobs' sdists in ``destination`` (the fetch cache's ``sdists/`` layout), hash-checked by the fetch stage:
    copied from this machine's cache when it holds them, otherwise downloaded."""
    from builder.core.hashing import sha256_of
    from builder.steps.fetch import cache_dir_for_sdists, fetch_sdist

    paths = []
    for job in {job.sdist.filename: job for job in jobs}.values():
        local = cache_dir_for_sdists() / job.sdist.filename
        target = destination / job.sdist.filename
        if not target.is_file() and local.is_file() and sha256_of(local) == job.sdist.sha256:
            destination.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, target)
        paths.append(fetch_sdist(job, cache_dir=destination))
    return paths


# -- checking what was carried ----------------------------------------------------------------------------------


def wheels_in(folder: Path) -> dict[str, list[str]]:
    """Canonical name -> versions of the wheels in ``folder``."""
    found: dict[str, list[str]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        try:
            name, version, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename as error:
            raise CarryError(f"{wheel}: {error}") from None
        found.setdefault(str(name), []).append(str(version))
    return found


def missing_wheels(folder: Path, wanted: dict[str, str]) -> list[str]:
    """What is wrong with ``folder`` against ``wanted``: absent, other-version, duplicate or unwanted wheels."""
    found = wheels_in(folder) if folder.is_dir() else {}
    problems = []
    for name, version in wanted.items():
        versions = found.get(name, [])
        if versions != [version]:
            problems.append(f"{folder}: want {name}=={version}, found {', '.join(versions) or 'nothing'}")
    problems += [f"{folder}: {name} {', '.join(v)} is not wanted" for name, v in found.items() if name not in wanted]
    return problems


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


# -- command line -----------------------------------------------------------------------------------------------


def _print_pins(pins: dict[str, str]) -> None:
    for name, version in pins.items():
        print(f"{name}=={version}")


def cmd_wheels(args: argparse.Namespace) -> int:
    box = load_box(args.box)
    _print_pins(
        carry_closure(project_requirements(args.pyproject), present=box.packages, environment=box.marker_environment())
    )
    return 0


def cmd_build_wheels(args: argparse.Namespace) -> int:
    _print_pins(build_requirements())
    return 0


def cmd_platforms(args: argparse.Namespace) -> int:
    box = load_box(args.box)
    print(
        " ".join(
            [
                f"--python-version {box.python}",
                f"--implementation {box.implementation}",
                *(f"--platform {platform}" for platform in box.platforms),
            ]
        )
    )
    return 0


def cmd_sdists(args: argparse.Namespace) -> int:
    for path in carry_sdists(profile_jobs(load_box(args.box)), args.dest):
        print(path)
    return 0


def cmd_satisfied(args: argparse.Namespace) -> int:
    """On the box, with the carried wheels on the path: can wheelwright's requirements all be imported?"""
    from packaging.markers import default_environment

    environment = {key: str(value) for key, value in default_environment().items()}
    missing, mismatched = unmet(project_requirements(args.pyproject), environment={**environment, "extra": ""})
    for line in mismatched:
        print(f"WARN installed at a version outside the requirement: {line}")
    for line in missing:
        print(f"{'ERROR' if args.strict else 'WARN'} not installed: {line}")
    print(f"requirements: {len(missing)} missing, {len(mismatched)} outside their requirement")
    return EXIT_CARRY_ERROR if missing and args.strict else 0


def cmd_check(args: argparse.Namespace) -> int:
    box = load_box(args.box)
    carry: Path = args.carry
    wanted = carry_closure(
        project_requirements(args.pyproject), present=box.packages, environment=box.marker_environment()
    )
    problems = missing_wheels(carry / "wheels", wanted) + missing_wheels(carry / "build-wheels", build_requirements())
    from builder.core.hashing import sha256_of

    for job in profile_jobs(box):
        sdist = carry / "cache" / "sdists" / job.sdist.filename
        if not sdist.is_file() or sha256_of(sdist) != job.sdist.sha256:
            problems.append(f"{sdist}: missing or not sha256 {job.sdist.sha256} ({job.identifier})")
    size = folder_bytes(carry) if carry.is_dir() else 0
    total = size + args.tree_bytes
    print(
        f"carry: {carry} holds {size / 2**20:.1f} MiB; with the repository's {args.tree_bytes / 2**20:.1f} MiB, "
        f"{total / 2**20:.1f} MiB of the {box.limit_mib} MiB that may travel"
    )
    if total > box.limit_mib * 2**20:
        problems.append(f"{total / 2**20:.1f} MiB would travel, over the {box.limit_mib} MiB limit")
    for problem in problems:
        print(f"ERROR {problem}", file=sys.stderr)
    return EXIT_CARRY_ERROR if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.gpu.carry", description=__doc__.splitlines()[0])
    parser.add_argument("--box", type=Path, default=BOX_FILE, help="box facts (default: %(default)s)")
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("wheels", help="print name==version of each wheelwright dependency the box lacks").set_defaults(
        func=cmd_wheels
    )
    commands.add_parser("build-wheels", help="print the build environment's pins").set_defaults(func=cmd_build_wheels)
    commands.add_parser("platforms", help="print pip download's target options for the box").set_defaults(
        func=cmd_platforms
    )
    satisfied = commands.add_parser(
        "satisfied", help="list wheelwright's requirements this interpreter lacks or has at other versions"
    )
    satisfied.add_argument("--strict", action="store_true", help="fail when one is missing")
    satisfied.set_defaults(func=cmd_satisfied)
    sdists = commands.add_parser("sdists", help="put the box profile's sdists into DEST (fetch cache layout)")
    sdists.add_argument("--dest", type=Path, required=True, help="the cache's sdists folder, e.g. .carry/cache/sdists")
    sdists.set_defaults(func=cmd_sdists)
    check = commands.add_parser("check", help="check a carry folder is complete and small enough")
    check.add_argument("--carry", type=Path, required=True)
    check.add_argument("--tree-bytes", type=int, default=0, help="bytes of the repository files that travel too")
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CarryError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_CARRY_ERROR
    except WheelwrightError as error:  # from the plan and fetch stages: a bad matrix, a failed download or hash
        print(f"ERROR {error}", file=sys.stderr)
        if error.tip:
            print(f"TIP {error.tip}", file=sys.stderr)
        return EXIT_CARRY_ERROR


if __name__ == "__main__":
    sys.exit(main())
