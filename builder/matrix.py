"""matrix.yaml: the YAML loader (line numbers kept, no float surprises) and the pydantic schema.

Every error names the file, the line and the key, and unknown keys get a "did you mean ...?".
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError

HOST_PYTHON = "host"
ARCH_CONTROLS = ("gencode-rewrite", "torch-arch-list")


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps every unquoted number-like scalar a string: ``python: [3.10]`` is "3.10", not 3.1."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version") from None
    return value


def _check_specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a version specifier like '>=2.3,<2.4'") from None
    return value


class SdistPin(_Strict):
    version: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    url: str | None = Field(default=None, pattern=r"^https?://")

    _version = field_validator("version")(_check_version)


class PatchSpec(_Strict):
    name: str
    versions: str = ""
    torch: str = ""

    _ranges = field_validator("versions", "torch")(_check_specifier)


class RecipeSpec(_Strict):
    env: dict[str, str] = {}
    abi_env: str | None = None
    arch_control: Literal["gencode-rewrite", "torch-arch-list"] = "gencode-rewrite"
    patches: list[PatchSpec] = []
    import_names: list[str] = Field(min_length=1)

    @field_validator("patches")
    @classmethod
    def _known_patches(cls, patches: list[PatchSpec]) -> list[PatchSpec]:
        from .recipes import PATCHES

        for patch in patches:
            if patch.name not in PATCHES:
                hint = _did_you_mean(patch.name, PATCHES)
                raise ValueError(f"unknown patch {patch.name!r}{hint}; known: {', '.join(sorted(PATCHES))}")
        return patches


class PackageSpec(_Strict):
    name: str
    versions: list[SdistPin] = Field(min_length=1)
    recipe: RecipeSpec

    @field_validator("name")
    @classmethod
    def _normalised(cls, name: str) -> str:
        if name != canonicalize_name(name):
            raise ValueError(f"write the package name normalised: {canonicalize_name(name)!r}, not {name!r}")
        return name

    @field_validator("versions")
    @classmethod
    def _unique_versions(cls, pins: list[SdistPin]) -> list[SdistPin]:
        seen = [p.version for p in pins]
        duplicates = sorted({v for v in seen if seen.count(v) > 1})
        if duplicates:
            raise ValueError(f"version listed twice: {', '.join(duplicates)}")
        return pins

    @property
    def latest(self) -> SdistPin:
        return max(self.versions, key=lambda pin: Version(pin.version))


_SELECTOR_RE = re.compile(r"^[A-Za-z0-9_.+*?\[\]!-]+$")


class Axes(_Strict):
    """The axes a profile expands; matrix.yaml's top level gives defaults, each profile overrides."""

    versions: Literal["latest", "all"] | None = None
    torch: list[str] | None = Field(default=None, min_length=1)
    accelerators: list[str] | None = Field(default=None, min_length=1)
    python: list[str] | None = Field(default=None, min_length=1)
    archs: dict[str, list[str]] | None = None
    include: list[str] | None = None
    exclude: list[str] | None = None

    @field_validator("torch")
    @classmethod
    def _torch_versions(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"\d+\.\d+(\.\d+)?", value):
                raise ValueError(f"torch {value!r} is not a release like '2.14' or '2.14.1'")
        return values

    @field_validator("python")
    @classmethod
    def _pythons(cls, values: list[str]) -> list[str]:
        for value in values:
            if value != HOST_PYTHON and not re.fullmatch(r"3\.\d+", value):
                raise ValueError(f"python {value!r} is not a CPython version like '3.11' (or 'host')")
        return values

    @field_validator("include", "exclude")
    @classmethod
    def _selectors(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _SELECTOR_RE.fullmatch(value) or value.count("[") != value.count("]"):
                raise ValueError(f"selector {value!r} is not an fnmatch pattern over job identifiers")
        return values


class Profile(Axes):
    description: str = ""
    packages: list[str] | None = None  # names; default: every package


class Matrix(Axes):
    default_profile: str = "local"
    packages: list[PackageSpec] = Field(min_length=1)
    profiles: dict[str, Profile] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Matrix:
        names = [p.name for p in self.packages]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"package listed twice: {', '.join(duplicates)}")
        if self.default_profile not in self.profiles:
            hint = _did_you_mean(self.default_profile, self.profiles)
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile{hint}")
        for profile_name, profile in self.profiles.items():
            for name in profile.packages or ():
                if name not in names:
                    hint = _did_you_mean(name, names)
                    raise ValueError(f"profile {profile_name!r} names unknown package {name!r}{hint}")
        return self

    def package(self, name: str) -> PackageSpec:
        return next(p for p in self.packages if p.name == name)

    def profile(self, name: str | None) -> Profile:
        name = name or self.default_profile
        if name not in self.profiles:
            hint = _did_you_mean(name, self.profiles)
            raise ConfigError(f"no profile {name!r} in the matrix{hint}", tip=f"profiles: {', '.join(self.profiles)}")
        return self.profiles[name]

    def axis(self, profile: Profile, name: str) -> Any:
        """A profile's value for an axis, falling back to the matrix's top level."""
        value = getattr(profile, name)
        return getattr(self, name) if value is None else value


def _did_you_mean(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _line_map(node: yaml.Node, path: tuple = (), lines: dict | None = None) -> dict[tuple, int]:
    """Map each key path to the 1-based line it starts on; also rejects duplicate mapping keys."""
    lines = {} if lines is None else lines
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
            lines[(*path, key)] = key_node.start_mark.line + 1
            _line_map(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, (*path, index), lines)
    return lines


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        self.key, self.line = key, line


def _allowed_keys(loc: tuple) -> list[str]:
    """The keys the schema accepts where an unknown key was found, for "did you mean"."""
    model: Any = Matrix
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        info = fields.get(part)
        if info is None:
            # a dict[str, Model] value: stay on the value model
            continue
        model = _inner_model(info.annotation)
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()]


def _inner_model(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _format_errors(error: ValidationError, path: Path, lines: dict[tuple, int]) -> str:
    messages = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
        if item["type"] == "extra_forbidden":
            hint = _did_you_mean(loc[-1], _allowed_keys(loc))
            text = f"unknown key {loc[-1]!r}{hint}"
        elif item["type"] == "missing":
            text = f"missing required key {loc[-1]!r}"
        else:
            text = item["msg"].removeprefix("Value error, ")
        messages.append(f"{path}:{line}: {key}: {text}")
    return "\n".join(messages)


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the matrix: {error.strerror}") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        lines = _line_map(node) if node is not None else {}
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _DuplicateKey as dup:
        raise ConfigError(f"{path}:{dup.line}: key {dup.key!r} appears twice in the same mapping") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(error, 'problem', error)}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{path}: the matrix is empty; it needs at least 'packages' and 'profiles'")
    try:
        return Matrix.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(_format_errors(error, path, lines), tip="see README.md, 'The matrix'") from None
