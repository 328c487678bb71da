"""The one loader path for wheelwright's TOML data files: read (builder.core.files.read_toml), then validate into a
pydantic model, with the first problem reported as one line naming the file, the table and the key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from builder.core.errors import ConfigError
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
        raise error(f"{where}: {describe(failure)}") from None


def describe(failure: ValidationError) -> str:
    """The first problem: ``[packages.mamba-ssm] rocm_arch_env: 'lower' is not an environment variable name``."""
    problem = failure.errors()[0]
    loc = [str(part) for part in problem["loc"] if part != "[key]"]  # pydantic marks a bad dict key so
    if problem["type"] == "missing":
        message = f"missing key {loc.pop()!r}"
    elif problem["type"] == "extra_forbidden":
        message = f"unknown key {loc.pop()!r}"
    else:
        message = str(problem["msg"]).removeprefix("Value error, ")
    if len(loc) >= 2:
        place = f"[{'.'.join(loc[:-1])}] {loc[-1]}: "
    elif loc:
        place = f"[{loc[0]}] "
    else:
        place = ""
    return place + message
