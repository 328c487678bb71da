"""Per-package facts about upstream setup.py files (builder/data/recipes.toml), checked on load."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from packaging.utils import canonicalize_name

from builder.core.errors import ConfigError, RecipeError
from builder.core.files import read_toml
from builder.core.resources import RECIPE_FACTS

SOURCE = RECIPE_FACTS.source
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True, kw_only=True)
class PackageFacts:
    local_version_env: str  # setup.py appends "+$VALUE" to the version it reads
    rocm_arch_env: str  # setup.py passes its value to hipcc as --offload-arch

    def env_names(self) -> tuple[str, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


def parse_package_facts(raw: Mapping[str, Any], source: str = SOURCE) -> Mapping[str, PackageFacts]:
    known = {f.name for f in fields(PackageFacts)}
    packages = {}
    for name, entry in raw.get("packages", {}).items():
        where = f"{source}: [packages.{name}]"
        if canonicalize_name(name) != name:
            raise ConfigError(f"{where}: write the package name normalized, as {canonicalize_name(name)!r}")
        if set(entry) != known:
            raise ConfigError(f"{where}: needs exactly the keys {sorted(known)}, got {sorted(entry)}")
        for key, value in entry.items():
            if not isinstance(value, str) or not _ENV_NAME.match(value):
                raise ConfigError(f"{where}: {key} = {value!r} is not an environment variable name")
        packages[name] = PackageFacts(**entry)
    return MappingProxyType(packages)


@functools.cache
def _all_facts() -> Mapping[str, PackageFacts]:
    return parse_package_facts(read_toml(RECIPE_FACTS, what="the recipe facts"))


def package_facts(package: str) -> PackageFacts:
    facts = _all_facts()
    try:
        return facts[canonicalize_name(package)]
    except KeyError:
        raise RecipeError(
            f"{package}: no recipe facts in {SOURCE} (known: {', '.join(sorted(facts))})",
            tip=f"read {package}'s setup.py and add a [packages.{canonicalize_name(package)}] table",
        ) from None
