"""Per-package facts about upstream setup.py files (builder/data/recipes.toml), checked on load."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator

from builder.core.data import load_data, validate
from builder.core.errors import RecipeError
from builder.core.resources import RECIPE_FACTS

SOURCE = RECIPE_FACTS.source
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _env_name(value: object) -> str:
    if not isinstance(value, str) or not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


EnvName = Annotated[str, BeforeValidator(_env_name)]


class PackageFacts(BaseModel):
    model_config = ConfigDict(frozen=True)

    local_version_env: EnvName  # setup.py appends "+$VALUE" to the version it reads
    rocm_arch_env: EnvName  # setup.py passes its value to hipcc as --offload-arch

    @model_validator(mode="before")
    @classmethod
    def _exactly_the_keys(cls, entry: object) -> object:
        known = sorted(cls.model_fields)
        if isinstance(entry, dict) and set(entry) != set(known):
            raise ValueError(f"needs exactly the keys {known}, got {sorted(entry)}")
        return entry

    def env_names(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in type(self).model_fields)


def _package_name(name: str) -> str:
    if canonicalize_name(name) != name:
        raise ValueError(f"write the package name normalized, as {canonicalize_name(name)!r}")
    return name


class RecipeFacts(BaseModel):
    """builder/data/recipes.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    packages: dict[Annotated[str, AfterValidator(_package_name)], PackageFacts] = {}


def parse_package_facts(raw: Mapping[str, Any], source: str = SOURCE) -> Mapping[str, PackageFacts]:
    return MappingProxyType(validate(raw, RecipeFacts, source).packages)


@functools.cache
def _all_facts() -> Mapping[str, PackageFacts]:
    return MappingProxyType(load_data(RECIPE_FACTS, RecipeFacts, what="the recipe facts").packages)


def package_facts(package: str) -> PackageFacts:
    facts = _all_facts()
    try:
        return facts[canonicalize_name(package)]
    except KeyError:
        raise RecipeError(
            f"{package}: no recipe facts in {SOURCE} (known: {', '.join(sorted(facts))})",
            tip=f"read {package}'s setup.py and add a [packages.{canonicalize_name(package)}] table",
        ) from None
