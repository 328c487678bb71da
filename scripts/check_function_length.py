"""No function in the tree is longer than 60 lines (STYLE.md: past that, a step is missing): from its `def` line to
its last, docstring and comments included. `make check` runs it over every Python file of the checkout.

    python scripts/check_function_length.py [--limit 60] [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

LIMIT = 60
SKIPPED_FOLDERS = frozenset({"build", "dist", "node_modules", "__pycache__"})


def python_files(root: Path) -> Iterator[Path]:
    """The checkout's Python files: hidden folders (.venv, .git, .carry), build outputs and eggs left out."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        folders = relative.parts[:-1]
        if any(part.startswith(".") or part in SKIPPED_FOLDERS or part.endswith(".egg-info") for part in folders):
            continue
        yield path


def long_functions(path: Path, limit: int = LIMIT) -> list[tuple[int, str, int]]:
    """(line, name, length) of each function or method in ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    return [
        (node.lineno, node.name, length)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > limit
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--limit", type=int, default=LIMIT, help="the most lines a function may have")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    found = [
        (path.relative_to(args.root), line, name, length)
        for path in python_files(args.root)
        for line, name, length in long_functions(path, args.limit)
    ]
    for path, line, name, length in found:
        print(f"ERROR {path}:{line}: {name} is {length} lines (at most {args.limit}): split out a step",
              file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
