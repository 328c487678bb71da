"""matrix.yaml: the YAML loader (line numbers kept, no float surprises), the pydantic schema, and the checks that
span fields. Every error names the file, the line and the key path; unknown keys get a "did you mean ...?".
Checks that need the torch facts (does torch 2.1 have CUDA 12.4?) happen when a profile is expanded (plan.py)."""

from __future__ import annotations

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

from builder.core.errors import ConfigError, did_you_mean
from builder.plan.accelerator import Accelerator, torch_minor
from builder.plan.arch import Arch as GpuArch
from builder.plan.job import PATCH_NAMES
from builder.plan.releases import PLATFORMS

HOST_PYTHON = "host"
# PyTorch's own index: one PEP 503 root per accelerator, which also hosts torch's dependencies
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/{accelerator}/"
_TORCH_INDEX = re.compile(r"(https?|file)://[^\s{}\x00-\x1f\x7f]+(\{accelerator\}[^\s{}\x00-\x1f\x7f]*)*")
ARCH_CONTROLS = ("gencode-rewrite", "torch-arch-list")
AXES = ("torch", "accelerators", "python", "platforms", "include", "exclude")
_AXIS_ITEMS = {
    "torch": "torch",
    "platforms": "platform",
    "accelerators": "accelerator",
    "python": "python",
    "include": "selector",
    "exclude": "selector",
    "packages": "package",
}

Loc = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads every unquoted scalar but ``null`` as a string: ``python: [3.10]`` is "3.10", not 3.1;
    ``FORCE_BUILD: TRUE`` is "TRUE", not a boolean; ``version: 2024-01-01`` is not a date. The schema has no
    number, boolean or date field, so nothing is lost. It words what is wrong with a file the fast loader refuses."""


class _FastLoader(yaml.CSafeLoader):
    """_Loader's resolvers on libyaml's parser (PyYAML's wheels carry it): a tenth of the pure-Python composer's time
    (1.6 against 16 ms for matrix.yaml, docs/performance.md); it refuses nesting past 1,000 levels itself."""


_STRING_TAGS = (
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:timestamp",
)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _STRING_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_FastLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers


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
    # Whole-string match: a space or control character anywhere would fail only at fetch time, deep in a build.
    if not re.fullmatch(r"https?://[^/\s\x00-\x1f\x7f]+/[^\s\x00-\x1f\x7f]*", value):
        raise ValueError(f"{value!r} is not an http(s) URL (no spaces or control characters; quote them as %20)")
    return value


def _package_name(value: str) -> str:
    if value != canonicalize_name(value):
        raise ValueError(f"write the package name normalised: {canonicalize_name(value)!r}, not {value!r}")
    return value


def _patch_name(value: str) -> str:
    if value not in PATCH_NAMES:
        hint = did_you_mean(value, PATCH_NAMES)
        raise ValueError(f"unknown patch {value!r}{hint}; known: {', '.join(sorted(PATCH_NAMES))}")
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
    if value != HOST_PYTHON and not re.fullmatch(r"3\.\d+t?", value):
        raise ValueError(
            f"python {value!r} is not a CPython version like '3.11', free-threaded '3.13t' (or {HOST_PYTHON!r})"
        )
    return value


def check_torch_index(value: str) -> str:
    """A torch index template: an http(s) or file URL; ``{accelerator}`` (cu126, rocm6.4) is its only field."""
    if not _TORCH_INDEX.fullmatch(value):
        raise ValueError(
            f"torch index {value!r} is not an http(s) or file URL like {DEFAULT_TORCH_INDEX!r} "
            "({accelerator}, replaced by cu126, rocm6.4, ..., is its only field)"
        )
    return value


def _platform(value: str) -> str:
    if value not in PLATFORMS:
        hint = did_you_mean(value, PLATFORMS)
        raise ValueError(f"platform {value!r} is not one wheelwright builds{hint}; known: {', '.join(PLATFORMS)}")
    return value


def _accelerator(value: str) -> str:
    Accelerator.parse(value)  # its ValueError says how to spell one
    return value


def _arch(value: str) -> str:
    GpuArch.parse(value)  # its ValueError names the spellings
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
PlatformName = Annotated[str, AfterValidator(_platform)]
Arch = Annotated[str, AfterValidator(_arch)]
Selector = Annotated[str, AfterValidator(_selector)]
TorchIndex = Annotated[str, AfterValidator(check_torch_index)]
ArchLists = dict[AcceleratorName, Annotated[list[Arch], Field(min_length=1)]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class UpstreamPin(_Strict):
    """Files the sdist lacks, from upstream's release commit (see builder/steps/upstream.py)."""

    repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
    paths: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")]] = Field(min_length=1)
    tree_digest: Sha256


class SdistPin(_Strict):
    version: PackageVersion
    sha256: Sha256
    url: Url | None = None
    upstream: UpstreamPin | None = None


class PatchSpec(_Strict):
    name: PatchName
    versions: Specifier = ""
    torch: Specifier = ""


class VersionedEnv(_Strict):
    """Build switches only some releases read (mamba-ssm's MAMBA_KEEP_CUDA_BUILD opt-in, from after 2.3.2.post1)."""

    versions: Specifier
    env: dict[EnvName, str] = Field(min_length=1)


class RecipeSpec(_Strict):
    env: dict[EnvName, str] = {}
    env_by_version: list[VersionedEnv] = []
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
    platforms: list[PlatformName] | None = Field(default=None, min_length=1)  # None: x86_64 alone
    archs: ArchLists | None = None
    include: list[Selector] | None = Field(default=None, min_length=1)  # [] would select nothing; say so
    exclude: list[Selector] | None = None


class PackageArchs(_Strict):
    """One package's own arch lists in a profile, instead of the profile's, with the reason (`plan --explain`
    shows it): a package whose kernels take hours per arch on the profile's machine may build fewer."""

    package: str
    archs: ArchLists = Field(min_length=1)
    reason: Annotated[str, Field(min_length=1)]


class Profile(Axes):
    description: str = ""
    packages: list[str] | None = Field(default=None, min_length=1)  # names; default: every package
    package_archs: list[PackageArchs] = []


class Matrix(Axes):
    default_profile: str = "local"
    torch_index: TorchIndex = DEFAULT_TORCH_INDEX
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
            raise ConfigError(
                f"no profile {name!r} in {self._source}{hint}", tip=f"profiles: {', '.join(self.profiles)}"
            )
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
        """``matrix.yaml:12: packages.0.recipe.env``: the file, the line of the key (or its nearest parent), the key."""
        return _locate(self._source, self._lines, loc)


def _locate(source: str, lines: dict[Loc, int], loc: Loc) -> str:
    key = ".".join(str(part) for part in loc)
    where = f"{source}:{_line_of(lines, loc)}"
    return f"{where}: {key}" if key else where


def _line_of(lines: dict[Loc, int], loc: Loc) -> int:
    """The line of ``loc``, or of its nearest parent that is in the file (a missing key is reported at its parent)."""
    return next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)


# Checks across fields, run once the schema holds. Each yields (location, message).
def _cross_field_problems(matrix: Matrix) -> Iterator[tuple[Loc, str]]:
    names = [p.name for p in matrix.packages]
    yield from _duplicates([("packages", i, "name") for i in range(len(names))], names, names, "package")
    for i, package in enumerate(matrix.packages):
        locs = [("packages", i, "versions", j, "version") for j in range(len(package.versions))]
        versions = [pin.version for pin in package.versions]
        yield from _duplicates(locs, versions, [canonicalize_version(v) for v in versions], "version")
    if matrix.default_profile not in matrix.profiles:
        hint = did_you_mean(matrix.default_profile, matrix.profiles)
        known = ", ".join(matrix.profiles)
        yield ("default_profile",), f"{matrix.default_profile!r} is not a profile{hint}; profiles: {known}"
    yield from _axes_problems((), matrix)
    for profile_name, profile in matrix.profiles.items():
        yield from _axes_problems(("profiles", profile_name), profile)
        for k, name in enumerate(profile.packages or ()):
            if name not in names:
                yield (
                    ("profiles", profile_name, "packages", k),
                    f"no package {name!r} in packages{did_you_mean(name, names)}",
                )
        yield from _package_archs_problems(("profiles", profile_name, "package_archs"), profile, names)


def _package_archs_problems(prefix: Loc, profile: Profile, names: Sequence[str]) -> Iterator[tuple[Loc, str]]:
    first: dict[str, str] = {}
    for k, entry in enumerate(profile.package_archs):
        loc = (*prefix, k, "package")
        if entry.package not in names:
            yield loc, f"no package {entry.package!r} in packages{did_you_mean(entry.package, names)}"
        elif entry.package in first:
            yield loc, f"{entry.package!r} already has its arch lists (at {first[entry.package]}); give them once"
        first.setdefault(entry.package, ".".join(str(part) for part in (*prefix, k)))
        yield from _arch_kind_problems((*prefix, k), entry.archs)


def _arch_kind_problems(prefix: Loc, lists: ArchLists) -> Iterator[tuple[Loc, str]]:
    for accel_name, archs in lists.items():
        kind = Accelerator.parse(accel_name).kind
        for k, arch in enumerate(archs):
            if arch.startswith("gfx") != (kind == "rocm"):
                yield (*prefix, "archs", accel_name, k), f"{arch!r} is not a {kind.upper()} architecture"


def _axes_problems(prefix: Loc, axes: Axes) -> Iterator[tuple[Loc, str]]:
    for name in (*AXES, "packages") if isinstance(axes, Profile) else AXES:
        values = getattr(axes, name) or []
        locs = [(*prefix, name, k) for k in range(len(values))]
        yield from _duplicates(locs, values, _axis_keys(name, values), _AXIS_ITEMS[name])
    yield from _arch_kind_problems(prefix, axes.archs or {})


def _axis_keys(name: str, values: Sequence[str]) -> list[str]:
    """What makes two values of an axis give the same jobs: torch 2.14 and 2.14.1 are both labelled pt214."""
    if name == "torch":
        return [torch_minor(v) for v in values]
    if name == "accelerators":
        return [Accelerator.parse(v).name for v in values]
    return list(values)


def _duplicates(
    locs: Sequence[Loc], values: Sequence[str], keys: Sequence[str], what: str
) -> Iterator[tuple[Loc, str]]:
    """Values whose keys repeat: ``1.7.0`` twice, or ``1.7`` after ``1.7.0`` (the same version)."""
    first: dict[str, tuple[Loc, str]] = {}
    for loc, value, key in zip(locs, values, keys):
        if key not in first:
            first[key] = (loc, value)
            continue
        where, earlier = ".".join(str(part) for part in first[key][0]), first[key][1]
        same = "is listed twice" if value == earlier else f"is the same {what} as {earlier!r}"
        yield loc, f"{what} {value!r} {same} (at {where}); each {what} may appear once"


# pydantic's error locations, read back through the schema.
def _schema_path(loc: Loc, model: type[BaseModel] | None = None) -> tuple[Loc, Any]:
    """``loc`` without the parts pydantic adds (``[key]`` after a bad dict key, the member's name inside a union),
    and the type found at its parent (for the keys an unknown key could have meant)."""
    clean: list[str | int] = []
    parent: Any = None
    annotation: Any = model or Matrix
    for part in loc:
        annotation = _unwrap(annotation)
        if part == "[key]":
            continue
        if _is_union(annotation):
            annotation = next((m for m in typing.get_args(annotation) if part in _member_labels(m)), None)
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
        elif (
            _is_union(annotation)
            and len(members := [a for a in typing.get_args(annotation) if a is not type(None)]) == 1
        ):
            annotation = members[0]
        else:
            return annotation


def _member_labels(member: Any) -> tuple[str, ...]:
    """How pydantic may name a union member in a location: ``str``, ``Profile``, ``list[Profile]``."""
    return (getattr(member, "__name__", ""), re.sub(r"\w+\.", "", str(member)))


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
}


def _explain(item: Any) -> tuple[Loc, str]:
    """One pydantic error as (location, message a user can act on)."""
    loc, parent = _schema_path(tuple(item["loc"]))
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden":
        known = _known_keys(parent)
        hint = did_you_mean(loc[-1], known) or f" (known keys: {', '.join(known)})"
        return loc, f"unknown key {loc[-1]!r}{hint}"
    if kind == "missing":  # reported at the mapping that lacks the key, which is in the file
        return loc[:-1], f"missing required key {loc[-1]!r}"
    if kind in _EXPECTED:
        return loc, f"expected {_EXPECTED[kind]}, got {_yaml_kind(value)}"
    if kind == "literal_error":
        return loc, f"expected {item['msg'].removeprefix('Input should be ')}, got {value!r}"
    if kind == "too_short":
        return loc, "must not be empty"
    return loc, item["msg"].removeprefix("Value error, ")


def _yaml_kind(value: object) -> str:
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{value!r}"


# Reading the file.
def _line_map(node: yaml.Node, path: Loc = (), lines: dict[Loc, int] | None = None) -> dict[Loc, int]:
    """Map each key path to the 1-based line it starts on; also rejects duplicate mapping keys."""
    lines = {} if lines is None else lines
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise _YamlProblem(line, path, "a key must be a plain value, not a list or mapping")
            key = key_node.value
            if (*path, key) in lines:
                raise _YamlProblem(
                    line,
                    (*path, key),
                    f"key {key!r} appears twice in the same mapping (first on line {lines[(*path, key)]})",
                )
            lines[(*path, key)] = line
            _line_map(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, index), lines)
    return lines


class _YamlProblem(Exception):
    def __init__(self, line: int, loc: Loc, text: str) -> None:
        super().__init__(text)
        self.line, self.loc, self.text = line, loc, text


# A matrix is a few hundred nodes; these bound the work a hostile file can ask for ("billion laughs": a few
# hundred bytes of nested aliases that expand to billions of nodes in everything that walks the result).
MAX_MATRIX_BYTES = 1 << 20
MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = 50


def _expanded_size(node: yaml.Node) -> int:
    """How many nodes ``node`` stands for once every alias is expanded; raises past the limits or on a cycle."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise _YamlProblem(node.start_mark.line + 1, (), f"nested deeper than {MAX_DEPTH} levels")
        known = sizes.get(id(node))
        if known == -1:
            raise _YamlProblem(node.start_mark.line + 1, (), "an alias refers to the node that contains it")
        if known is not None:
            return known
        sizes[id(node)] = -1
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total = 1 + sum(size(child, depth + 1) for child in children)
        if total > MAX_EXPANDED_NODES:
            raise _YamlProblem(
                node.start_mark.line + 1, (), f"expands to more than {MAX_EXPANDED_NODES:,} nodes (aliases included)"
            )
        sizes[id(node)] = total
        return total

    return size(node, 0)


def _parse_yaml(text: str, path: Path) -> tuple[Any, dict[Loc, int]]:
    if len(text) > MAX_MATRIX_BYTES:
        raise ConfigError(f"{path}: {len(text):,} characters; a matrix file may have at most {MAX_MATRIX_BYTES:,}")
    try:
        raw, lines = _compose_and_construct(text)
    except _YamlProblem as problem:
        key = ".".join(str(part) for part in problem.loc)
        raise ConfigError(f"{path}:{problem.line}: {key + ': ' if key else ''}{problem.text}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {_yaml_problem(error)}") from None
    except RecursionError:  # the composer recurses per level, before our depth limit can look
        raise ConfigError(f"{path}: nested too deeply (a matrix needs a few levels)") from None
    return raw, lines


def _compose_and_construct(text: str) -> tuple[Any, dict[Loc, int]]:
    """The nodes are composed once, checked against the limits, mapped to lines, then turned into Python values:
    composing is most of the time a plan takes, so the text is not parsed a second time. libyaml composes; a file it
    refuses is composed again by the pure-Python parser, whose messages (and limits) are the ones users see."""
    try:
        return _composed(_FastLoader(text))
    except yaml.YAMLError:
        return _composed(_Loader(text))


def _composed(loader: Any) -> tuple[Any, dict[Loc, int]]:
    """The document of ``loader`` (either loader: libyaml's has no Python base in common with SafeLoader)."""
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        _expanded_size(node)
        lines = _line_map(node)
        return loader.construct_document(node), lines
    finally:
        loader.dispose()


def _yaml_problem(error: yaml.YAMLError) -> str:
    problem, context = getattr(error, "problem", None), getattr(error, "context", None)
    if not problem:
        return str(error)
    if problem.startswith("but ") and context:  # "expected a single document in the stream but found another document"
        return f"{context} {problem}"
    return f"{problem} ({context})" if context else problem


def _report(source: str, lines: dict[Loc, int], problems: Sequence[tuple[Loc, str]]) -> ConfigError:
    """All problems at once, in file order."""
    located = sorted((_line_of(lines, loc), _locate(source, lines, loc), message) for loc, message in problems)
    text = "\n".join(f"{where}: {message}" for _, where, message in located)
    return ConfigError(text, tip="the matrix file format is described in docs/matrix.md, 'The matrix file'")


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the matrix: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    raw, lines = _parse_yaml(text, path)
    if not isinstance(raw, dict) or not raw:
        what = "empty" if not raw else f"{_yaml_kind(raw)}, not a mapping"
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
