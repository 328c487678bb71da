"""The rooms say their rules: every package's ``__init__.py`` has a docstring saying what its modules own and what
they may import, every other folder a README.md saying what lives there and how to change it, so a newcomer finds
the room for a change and knows what it may touch."""

from __future__ import annotations

import ast
import builtins
import fnmatch
import os
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


# The folders and files the product's layout fixes (README, "The code's layers"); each folder says its rules.
FIXED_FOLDERS = ("builder", "docker", "index_site", "scripts", "tests", "docs", ".ci", ".github/workflows")
# Folders whose README waits for their room's owner, each with why: a strict xfail, so the test fails once it is
# there and this entry must go.
PENDING: dict[str, str] = {}  # folder: why it may not say its rules yet (an expected failure that must flip)


def _ignored(relative: Path, patterns: list[str]) -> bool:
    """Whether .gitignore's simple patterns (``name/``, ``/anchored/``, ``*.glob``) leave this folder out."""
    for pattern in patterns:
        anchored, bare = pattern.startswith("/"), pattern.strip("/")
        names = [relative.as_posix()] if anchored else list(relative.parts)
        if any(fnmatch.fnmatch(name, bare) for name in names):
            return True
    return False


def folders_with_files(root: Path) -> list[Path]:
    """Every folder of the checkout below ``root`` that holds a file, as git sees it: what .gitignore leaves out,
    .git and the other hidden folders but .ci and .github are not the checkout's."""
    ignore = root / ".gitignore"
    patterns = [line.strip() for line in (ignore.read_text().splitlines() if ignore.is_file() else [])
                if line.strip() and not line.startswith("#")]
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if (not d.startswith(".") or d in (".ci", ".github"))
                         and not _ignored((here / d).relative_to(root), patterns))
        if files and here != root:
            found.append(here.relative_to(root))
    return found


def _docstring(package: Path) -> str:
    init = package / "__init__.py"
    return (ast.get_docstring(ast.parse(init.read_text())) or "") if init.is_file() else ""


def says_its_rules(root: Path, folder: Path) -> bool:
    """A folder says which rules its files obey when it has a README.md or a package docstring (an __init__.py with
    a module docstring), when its package's docstring names it (``templates/``), or when a folder above it, below
    the checkout's root, has a README.md covering its tree. The root's README.md is for users and covers no folder:
    a new top-level folder needs its own."""
    if _docstring(root / folder) or f"{folder.name}/" in _docstring(root / folder.parent):
        return True
    return any((root / above / "README.md").is_file() for above in (folder, *folder.parents) if above != Path("."))


@pytest.mark.parametrize("folder", [
    pytest.param(folder.as_posix(), marks=pytest.mark.xfail(strict=True, reason=PENDING[folder.as_posix()]))
    if folder.as_posix() in PENDING else folder.as_posix()
    for folder in folders_with_files(ROOT)])
def test_every_folder_says_which_rules_its_files_obey(folder: str) -> None:
    assert says_its_rules(ROOT, Path(folder)), f"add {folder}/README.md: what lives there, its rules, how to change it"


def test_the_fixed_layout_is_there_and_each_folder_says_its_rules() -> None:
    assert (ROOT / "matrix.yaml").is_file()
    assert [f for f in FIXED_FOLDERS if not ((ROOT / f).is_dir() and says_its_rules(ROOT, Path(f)))] == []


@pytest.mark.parametrize(("tree", "silent"), [
    ({"wheels/a.json": ""}, ["wheels"]),  # a new top-level folder of data: the root's README does not cover it
    ({"README.md": "", "wheels/a.json": ""}, ["wheels"]),
    ({"wheels/README.md": "", "wheels/a.json": "", "wheels/old/b.json": ""}, []),  # one README covers its tree
    ({"pkg/__init__.py": "", "pkg/m.py": ""}, ["pkg"]),  # a package without a docstring
    ({"pkg/__init__.py": '"""What pkg owns."""', "pkg/data/a.toml": ""}, ["pkg/data"]),  # a docstring, not a README
    ({"pkg/__init__.py": '"""What pkg owns; data/ holds its TOML."""', "pkg/data/a.toml": ""}, []),  # it names data/
    ({".gitignore": "/out/\n", "out/a.whl": "", ".hidden/a": ""}, []),
])
def test_a_folder_that_says_nothing_is_found(tmp_path: Path, tree: dict[str, str], silent: list[str]) -> None:
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = [f.as_posix() for f in folders_with_files(tmp_path) if not says_its_rules(tmp_path, f)]
    assert found == silent
