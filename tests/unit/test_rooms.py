"""The rooms say their rules: every package's ``__init__.py`` has a docstring saying what its modules own and what
they may import, so a newcomer finds the room for a change and knows what it may touch."""

from __future__ import annotations

import ast
import builtins
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_says_what_it_holds() -> None:
    packages = [p for folder in ("builder", "index_site", "scripts", "tests")
                for p in (ROOT / folder).rglob("__init__.py") if "__pycache__" not in p.parts]
    silent = [p.relative_to(ROOT).as_posix() for p in packages if not ast.get_docstring(ast.parse(p.read_text()))]
    assert len(packages) > 10 and sorted(silent) == []


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return names


@pytest.mark.parametrize("program", sorted(p.name for p in (ROOT / "builder/steps/programs").glob("*.py")
                                           if p.name != "__init__.py"))
def test_a_program_run_in_the_jobs_environment_imports_the_standard_library_only(program: str) -> None:
    """What the import contract in pyproject.toml names, for every package there is: the job's Python has only the
    standard library and the program's siblings (beside it on sys.path when run by path, or as the package)."""
    siblings = {p.stem for p in (ROOT / "builder/steps/programs").glob("*.py")}
    allowed = {"__future__", "builder.steps.programs", *siblings, *(f"builder.steps.programs.{s}" for s in siblings)}
    assert sorted(name for name in _imported(ROOT / "builder/steps/programs" / program)
                  if name not in allowed and name.split(".")[0] not in sys.stdlib_module_names) == []


def test_no_module_is_named_after_a_builtin() -> None:
    """A module named ``compile`` is renamed by every importer (``import compile as compile_stage``)."""
    modules = [p for folder in ("builder", "index_site", "scripts") for p in (ROOT / folder).rglob("*.py")]
    assert sorted(p.relative_to(ROOT).as_posix() for p in modules if p.stem in dir(builtins)) == []
