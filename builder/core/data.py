"""The one loader path for wheelwright's TOML data files: read (builder.core.files.read_toml), then validate into a
pydantic model, with the first problem reported as one line naming the file, the table and the key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from builder.core.errors import ConfigError, did_you_mean
from builder.core.files import read_toml
from builder.core.resources import Resource

Model = TypeVar("Model", bound=BaseModel)


def load_data(
    source: Path | Resource, model: type[Model], *, what: str, error: type[ConfigError] = ConfigError
) -> Model:
    """``source`` (a path, or one of wheelwright's own resources) read as TOML and validated as ``model``."""
    where = source.source if isinstance(source, Resource) else str(source)
    return validate(read_toml(source, what=what, error=error), model, where, error=error)


def validate(
    raw: Mapping[str, Any], model: type[Model], where: str, *, error: type[ConfigError] = ConfigError
) -> Model:
    try:
        return model.model_validate(raw)
    except ValidationError as failure:
        raise error(f"{where}: {describe(failure, model)}") from None


def describe(failure: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first problem: ``[packages.mamba-ssm] rocm_arch_env: 'lower' is not an environment variable name``;
    an unknown key of ``model`` (or of a table inside it) with "did you mean"."""
    problem = failure.errors()[0]
    loc = [str(part) for part in problem["loc"] if part != "[key]"]  # pydantic marks a bad dict key so
    if problem["type"] in ("missing", "extra_forbidden"):  # the key is named in the message, its table in front
        key = loc.pop()
        if problem["type"] == "missing":
            return _table(loc) + f"missing key {key!r}"
        return _table(loc) + f"unknown key {key!r}" + did_you_mean(key, _keys_at(model, loc))
    message = _TOML_TYPES.get(problem["type"]) or str(problem["msg"]).removeprefix("Value error, ")
    if problem["type"] in _TOML_TYPES and isinstance(problem.get("input"), (str, int, float, bool)):
        message += f", got {problem['input']!r}"
    named = [i for i, part in enumerate(loc) if not part.isdigit()]
    if not named or (problem["type"] == "value_error" and loc[-1].isdigit()):  # an array's table, refused whole
        return _table(loc) + message
    if len(loc) == 1:
        return f"[{loc[0]}] {message}"
    at = named[-1]  # the key; the indices after it say which item of its array
    return _table(loc[:at]) + loc[at] + "".join(f"[{i}]" for i in loc[at + 1:]) + ": " + message


# pydantic's type errors as a TOML file's reader names the types
_TOML_TYPES = {
    "string_type": "must be a string",
    "bool_type": "must be a boolean (true or false)",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
}


def _table(loc: list[str]) -> str:
    return f"[{'.'.join(loc)}] " if loc else ""


def _keys_at(model: type[BaseModel] | None, loc: list[str]) -> list[str]:
    """The keys the table at ``loc`` may hold: the fields (by their TOML names) of the model found there."""
    for part in loc:
        if model is None:
            return []
        if part.isdigit() or part not in _by_key(model):
            continue  # an array's index, or a table's own name (a dict of tables)
        model = _model_in(_by_key(model)[part].annotation)
    return list(_by_key(model)) if model is not None else []


def _by_key(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The model a field holds, through tuples, dicts, optionals and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None
