"""pyproject.toml: where a package's runtime requirements come from, and pinning torch there when it is the source.

setuptools takes ``[project] dependencies`` over setup.py's install_requires whenever the table lists them, so a
pin made only in setup.py would not reach the wheel's Requires-Dist.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from builder.core.errors import RecipeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SETUP_PY = "setup.py"
PYPROJECT = "pyproject.toml"
_DEPENDENCIES = re.compile(r"^dependencies\s*=\s*\[(?P<items>.*?)^\]", re.MULTILINE | re.DOTALL)
_STRING = re.compile(r"""(?P<quote>["'])(?P<value>[^"'\n]*)(?P=quote)""")


def _project(text: str | None, where: str) -> Mapping[str, Any] | None:
    if text is None:
        return None
    try:
        project: Mapping[str, Any] | None = tomllib.loads(text).get("project")
        return project
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{where}: pyproject.toml does not parse: {error}") from None


def requirements_source(text: str | None, where: str) -> str:
    """Which file setuptools takes the runtime requirements from: SETUP_PY or PYPROJECT."""
    project = _project(text, where)
    if project is None or "dependencies" in project.get("dynamic", []):
        return SETUP_PY
    if "dependencies" in project:
        return PYPROJECT
    raise RecipeError(f"{where}: pyproject.toml's [project] neither lists dependencies nor declares them dynamic")


def check_version_dynamic(text: str | None, where: str) -> None:
    """The recipe sets the version through setup(); a static [project] version would override it."""
    project = _project(text, where)
    if project is not None and "version" in project:
        raise RecipeError(f"{where}: pyproject.toml sets a static version, which setup() cannot relabel")


def _is_torch(requirement: str) -> bool:
    try:
        return Requirement(requirement).name.lower() == "torch"
    except InvalidRequirement:
        return False


def _dependencies(text: str, where: str) -> list[str]:
    project = _project(text, where)
    if project is None or not isinstance(project.get("dependencies"), list):
        raise RecipeError(f"{where}: pyproject.toml's [project] lists no dependencies")
    return list(project["dependencies"])


def pin_torch(text: str, pin: str, where: str) -> str:
    """``text`` with the torch entries of ``[project] dependencies`` replaced by ``pin``; checked by re-parsing."""
    before = _dependencies(text, where)
    if not any(_is_torch(r) for r in before):
        raise RecipeError(f"{where}: pyproject.toml's dependencies do not list torch: {before}")
    match = _DEPENDENCIES.search(text)
    if match is None:
        raise RecipeError(f"{where}: pyproject.toml has no multi-line 'dependencies = [' array the recipe can edit")
    items = _STRING.sub(lambda m: f'"{pin}"' if _is_torch(m["value"]) else m[0], match["items"])
    patched = text[: match.start("items")] + items + text[match.end("items") :]
    after = _dependencies(patched, where)
    expected = [pin if _is_torch(r) else r for r in before]
    if after != expected:
        raise RecipeError(f"{where}: could not pin torch in pyproject.toml dependencies {before}")
    return patched
