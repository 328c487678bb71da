"""The rooms say their rules: every package's ``__init__.py`` has a docstring saying what its modules own and what
they may import, so a newcomer finds the room for a change and knows what it may touch."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_says_what_it_holds() -> None:
    packages = [p for folder in ("builder", "index_site", "scripts", "tests")
                for p in (ROOT / folder).rglob("__init__.py") if "__pycache__" not in p.parts]
    silent = [p.relative_to(ROOT).as_posix() for p in packages if not ast.get_docstring(ast.parse(p.read_text()))]
    assert len(packages) > 10 and sorted(silent) == []
