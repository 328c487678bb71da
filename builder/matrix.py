"""matrix.yaml: the YAML loader (line numbers kept, no float surprises), the pydantic schema, and the checks that
span fields. Every error names the file, the line and the key path; unknown keys get a "did you mean ...?".
Checks that need the torch facts (does torch 2.1 have CUDA 12.4?) happen when a profile is expanded (plan.py)."""

from __future__ import annotations

import datetime
import re
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from .errors import ConfigError, did_you_mean
from .facts import Accelerator

HOST_PYTHON = "host"
ARCH_CONTROLS = ("gencode-rewrite", "torch-arch-list")
AXES = ("torch", "accelerators", "python", "include", "exclude")

Loc = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps every unquoted number-like scalar a string: ``python: [3.10]`` is "3.10", not 3.1."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# Scalar checks. Each is attached to its type with AfterValidator, so an error's location names the list item.
def _package_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version") from None
    return value


def _specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a version specifier like '>=2.3,<2.4'") from None
    return value


def _sha256(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"{value!r} is not a sha256 digest: 64 lowercase hex digits ({len(value)} characters given)")
    return value


def _url(value: str) -> str:
    if not re.match(r"https?://[^/\s]+/", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


def _package_name(value: str) -> str:
    if value != canonicalize_name(value):
        raise ValueError(f"write the package name normalised: {canonicalize_name(value)!r}, not {value!r}")
    return value


def _patch_name(value: str) -> str:
    from .recipes import PATCHES  # recipes import the job types; a top-level import would be circular

    if value not in PATCHES:
        raise ValueError(f"unknown patch {value!r}{did_you_mean(value, PATCHES)}; known: {', '.join(sorted(PATCHES))}")
    return value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


def _import_name(value: str) -> str:
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"{value!r} is not an importable module name")
    return value


def _torch(value: str) -> str:
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", value):
        raise ValueError(f"torch {value!r} is not a release like '2.14' or '2.14.1'")
    return value


def _python(value: str) -> str:
    if value != HOST_PYTHON and not re.fullmatch(r"3\.\d+", value):
        raise ValueError(f"python {value!r} is not a CPython version like '3.11' (or {HOST_PYTHON!r})")
    return value


def _accelerator(value: str) -> str:
    Accelerator.parse(value)  # its ValueError says how to spell one
    return value


def _arch(value: str) -> str:
    if not re.fullmatch(r"\d+\.\d+[af]?(\+PTX)?|gfx[0-9a-f]+", value):
        raise ValueError(f"{value!r} is not a GPU architecture like '9.0', '9.0a', '12.0+PTX' or 'gfx942'")
    return value


def _selector(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.+*?\[\]!-]+", value) or value.count("[") != value.count("]"):
        raise ValueError(f"selector {value!r} is not an fnmatch pattern over job identifiers")
    return value


PackageVersion = Annotated[str, AfterValidator(_package_version)]
Specifier = Annotated[str, AfterValidator(_specifier)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
Url = Annotated[str, AfterValidator(_url)]
PackageName = Annotated[str, AfterValidator(_package_name)]
PatchName = Annotated[str, AfterValidator(_patch_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
ImportName = Annotated[str, AfterValidator(_import_name)]
TorchVersion = Annotated[str, AfterValidator(_torch)]
PythonVersion = Annotated[str, AfterValidator(_python)]
AcceleratorName = Annotated[str, AfterValidator(_accelerator)]
Arch = Annotated[str, AfterValidator(_arch)]
Selector = Annotated[str, AfterValidator(_selector)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SdistPin(_Strict):
    version: PackageVersion
    sha256: Sha256
    url: Url | None = None


class PatchSpec(_Strict):
    name: PatchName
    versions: Specifier = ""
    torch: Specifier = ""


class RecipeSpec(_Strict):
    env: dict[EnvName, str] = {}
    abi_env: EnvName | None = None
    arch_control: Literal["gencode-rewrite", "torch-arch-list"] = "gencode-rewrite"
    patches: list[PatchSpec] = []
    import_names: list[ImportName] = Field(min_length=1)


class PackageSpec(_Strict):
    name: PackageName
    versions: list[SdistPin] = Field(min_length=1)
    recipe: RecipeSpec

    @property
    def latest(self) -> SdistPin:
        return max(self.versions, key=lambda pin: Version(pin.version))


class Axes(_Strict):
    """The axes a profile expands; matrix.yaml's top level gives defaults, each profile overrides."""

    versions: Literal["latest", "all"] | None = None
    torch: list[TorchVersion] | None = Field(default=None, min_length=1)
    accelerators: list[AcceleratorName] | None = Field(default=None, min_length=1)
    python: list[PythonVersion] | None = Field(default=None, min_length=1)
    archs: dict[AcceleratorName, Annotated[list[Arch], Field(min_length=1)]] | None = None
    include: list[Selector] | None = None
    exclude: list[Selector] | None = None


class Profile(Axes):
    description: str = ""
    packages: list[str] | None = Field(default=None, min_length=1)  # names; default: every package


class Matrix(Axes):
    default_profile: str = "local"
    packages: list[PackageSpec] = Field(min_length=1)
    profiles: dict[str, Profile] = Field(min_length=1)

    _source: str = PrivateAttr(default="matrix")
    _lines: dict[Loc, int] = PrivateAttr(default_factory=dict)

    def package(self, name: str) -> PackageSpec:
        return next(p for p in self.packages if p.name == name)

    def profile(self, name: str | None) -> Profile:
        name = name or self.default_profile
        if name not in self.profiles:
            hint = did_you_mean(name, self.profiles)
            raise ConfigError(f"no profile {name!r} in {self._source}{hint}", tip=f"profiles: {', '.join(self.profiles)}")
        return self.profiles[name]

    def axis(self, profile: Profile, name: str) -> Any:
        """A profile's value for an axis, falling back to the matrix's top level."""
        value = getattr(profile, name)
        return getattr(self, name) if value is None else value

    def axis_loc(self, profile_name: str, name: str) -> Loc:
        """Where :meth:`axis` found its value: in the profile, or at the top level."""
        profile = self.profiles[profile_name]
        return ("profiles", profile_name, name) if getattr(profile, name) is not None else (name,)

    def locate(self, loc: Loc) -> str:
        """``matrix.yaml:12: packages.0.recipe.env``: the file, the line the key (or its nearest parent) is on, the key."""
        return _locate(self._source, self._lines, loc)


def _locate(source: str, lines: dict[Loc, int], loc: Loc) -> str:
    line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
    key = ".".join(str(part) for part in loc)
    return f"{source}:{line}: {key}" if key else f"{source}:{line}"


# Checks across fields, run once the schema holds. Each yields (location, message).
def _cross_field_problems(matrix: Matrix) -> Iterator[tuple[Loc, str]]:
    yield from _duplicates([("packages", i, "name") for i in range(len(matrix.packages))],
                           [p.name for p in matrix.packages], "package")
    for i, package in enumerate(matrix.packages):
        locs = [("packages", i, "versions", j, "version") for j in range(len(package.versions))]
        yield from _duplicates(locs, [canonicalize_version(pin.version) for pin in package.versions], "version")
    if matrix.default_profile not in matrix.profiles:
        hint = did_you_mean(matrix.default_profile, matrix.profiles)
        known = ", ".join(matrix.profiles)
        yield ("default_profile",), f"{matrix.default_profile!r} is not a profile{hint}; profiles: {known}"
    yield from _axes_problems((), matrix)
    names = [p.name for p in matrix.packages]
    for profile_name, profile in matrix.profiles.items():
        yield from _axes_problems(("profiles", profile_name), profile)
        for k, name in enumerate(profile.packages or ()):
            if name not in names:
                yield ("profiles", profile_name, "packages", k), f"no package {name!r} in packages{did_you_mean(name, names)}"


def _axes_problems(prefix: Loc, axes: Axes) -> Iterator[tuple[Loc, str]]:
    for name in (*AXES, "packages") if isinstance(axes, Profile) else AXES:
        values = getattr(axes, name) or []
        yield from _duplicates([(*prefix, name, k) for k in range(len(values))], _axis_keys(name, values), name)
    for accel_name, archs in (axes.archs or {}).items():
        kind = Accelerator.parse(accel_name).kind
        for k, arch in enumerate(archs):
            if arch.startswith("gfx") != (kind == "rocm"):
                yield (*prefix, "archs", accel_name, k), f"{arch!r} is not a {kind.upper()} architecture"


def _axis_keys(name: str, values: Sequence[str]) -> list[str]:
    """What makes two axis values the same job: torch 2.14 and 2.14.1 both label as pt214."""
    if name == "torch":
        return ["torch " + ".".join(v.split(".")[:2]) for v in values]
    if name == "accelerators":
        return [Accelerator.parse(v).name for v in values]
    return list(values)


def _duplicates(locs: Sequence[Loc], keys: Sequence[str], what: str) -> Iterator[tuple[Loc, str]]:
    first: dict[str, Loc] = {}
    for loc, key in zip(locs, keys):
        if key in first:
            where = ".".join(str(part) for part in first[key])
            yield loc, f"{what} {key!r} is listed twice (first at {where}); each value must give distinct jobs"
        first.setdefault(key, loc)


# pydantic's error locations, read back through the schema.
def _schema_path(loc: Loc) -> tuple[Loc, Any]:
    """``loc`` without the parts pydantic adds (``[key]`` after a bad dict key, a member name inside a union),
    and the type found at its parent (for the keys an unknown key could have meant)."""
    clean: list[str | int] = []
    parent: Any = None
    annotation: Any = Matrix
    for part in loc:
        annotation = _unwrap(annotation)
        if part == "[key]" or isinstance(part, str) and _is_union(annotation):
            continue
        parent = annotation
        clean.append(part)
        annotation = _child(annotation, part)
    return tuple(clean), parent


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and Optional[...] (which pydantic does not show in locations)."""
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif _is_union(annotation) and len(members := [a for a in typing.get_args(annotation) if a is not type(None)]) == 1:
            annotation = members[0]
        else:
            return annotation


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def _child(annotation: Any, part: str | int) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        info = annotation.model_fields.get(str(part))
        return info.annotation if info else None
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list:
        return args[0]
    if typing.get_origin(annotation) is dict:
        return args[1]
    return None


def _known_keys(model: Any) -> list[str]:
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


_EXPECTED = {
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "bool_type": "true or false",
}


def _explain(item: Any) -> tuple[Loc, str]:
    """One pydantic error as (location, message a user can act on)."""
    loc, parent = _schema_path(tuple(item["loc"]))
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden":
        known = _known_keys(parent)
        hint = did_you_mean(loc[-1], known) or f" (known keys: {', '.join(known)})"
        return loc, f"unknown key {loc[-1]!r}{hint}"
    if kind == "missing":
        return loc, f"missing required key {loc[-1]!r}"
    if kind in _EXPECTED:
        quote = "; quote it to make it a string" if isinstance(value, bool | datetime.date) else ""
        return loc, f"expected {_EXPECTED[kind]}, got {_yaml_kind(value)}{quote}"
    if kind == "literal_error":
        return loc, f"expected {item['msg'].removeprefix('Input should be ')}, got {value!r}"
    if kind == "too_short":
        return loc, "must not be empty"
    return loc, item["msg"].removeprefix("Value error, ")


def _yaml_kind(value: object) -> str:
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, datetime.date):
        return f"the date {value}"
    return f"{value!r}"


# Reading the file.
def _line_map(node: yaml.Node, path: Loc = (), lines: dict[Loc, int] | None = None) -> dict[Loc, int]:
    """Map each key path to the 1-based line it starts on; also rejects duplicate mapping keys."""
    lines = {} if lines is None else lines
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _YamlProblem(key_node.start_mark.line + 1, "a key must be a plain value, not a list or mapping")
            key = key_node.value
            if key in seen:
                raise _YamlProblem(key_node.start_mark.line + 1, f"{key!r} appears twice in the same mapping")
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _line_map(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, index), lines)
    return lines


class _YamlProblem(Exception):
    def __init__(self, line: int, text: str) -> None:
        super().__init__(text)
        self.line, self.text = line, text


def _parse_yaml(text: str, path: Path) -> tuple[Any, dict[Loc, int]]:
    try:
        node = yaml.compose(text, Loader=_Loader)
        lines = _line_map(node) if node is not None else {}
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _YamlProblem as problem:
        raise ConfigError(f"{path}:{problem.line}: {problem.text}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or error
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    return raw, lines


def _report(source: str, lines: dict[Loc, int], problems: Sequence[tuple[Loc, str]]) -> ConfigError:
    text = "\n".join(f"{_locate(source, lines, loc)}: {message}" for loc, message in problems)
    return ConfigError(text, tip="the matrix file format is described in README.md, 'The matrix file'")


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the matrix: {error.strerror}") from None
    raw, lines = _parse_yaml(text, path)
    if not isinstance(raw, dict) or not raw:
        what = "empty" if not raw else f"a {_yaml_kind(raw).removeprefix('a ')}, not a mapping"
        raise ConfigError(f"{path}: the matrix is {what}; it needs at least 'packages' and 'profiles'")
    try:
        matrix = Matrix.model_validate(raw)
    except ValidationError as error:
        raise _report(str(path), lines, [_explain(item) for item in error.errors(include_url=False)]) from None
    matrix._source, matrix._lines = str(path), lines
    problems = list(_cross_field_problems(matrix))
    if problems:
        raise _report(str(path), lines, problems)
    return matrix
