"""Generate ``doctor.py``: doctor's own modules concatenated into one standard-library-only file, so people who have
not installed wheelwright can run ``curl -s <site>/doctor.py | python -``.

The modules are joined in dependency order with their ``from builder... import`` lines removed: every name they
import is defined earlier in the same file. The checks here (no ``import builder``, no name defined twice, no
import of a name not defined yet, nothing outside the standard library) make a module that breaks those rules fail
the generation, not the user.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import shlex
import sys

from builder.core.errors import WheelwrightError

# Dependency order: each module imports only from those before it.
MODULES = (
    "builder.core.errors",
    "builder.core.settings",
    "builder.core.http",
    "builder.core.elfread",
    "builder.core.fatbin",
    "builder.core.demangle",
    "builder.core.symbols",
    "builder.doctor.labels",
    "builder.doctor.symbolcheck",
    "builder.doctor.probe",
    "builder.doctor.explain",
    "builder.doctor.verdicts",
    "builder.doctor.fix",
    "builder.doctor.channel",
    "builder.doctor.report",
    "builder.doctor.undefined",
    "builder.doctor.arguments",
    "builder.doctor.main",
)
_INDEX_LINE = 'DEFAULT_INDEX_URL = ""'
_HEADER = '''#!/usr/bin/env python3
"""wheelwright doctor: why causal-conv1d / mamba-ssm do not work in this Python, and the one command that fixes it.

    python doctor.py [--index-url URL] [--json] [--python PATH]
    python doctor.py --explain "<error text>"        (or a log file)
    curl -s {doctor} | python -

Generated from wheelwright's builder.doctor package (standard library only; Python 3.9+). Do not edit by hand.
"""

from __future__ import annotations
'''


@functools.lru_cache(maxsize=8)
def standalone_source(index_url: str = "") -> str:
    """The text of ``doctor.py``; ``index_url`` becomes its default ``--index-url``."""
    if _CONTROL.search(index_url):
        raise WheelwrightError(f"doctor.py: the index URL {index_url!r} holds a control character")
    doctor = shlex.quote(index_url.rstrip("/") + "/doctor.py") if index_url else "<site>/doctor.py"
    defined: set[str] = set()
    parts = [_HEADER.format(doctor=_in_docstring(doctor))]
    for name in MODULES:
        parts.append(_module_body(name, defined))
    parts.append('\nif __name__ == "__main__":\n    sys.exit(main())\n')
    source = "\n".join(parts)
    if _INDEX_LINE not in source:
        raise WheelwrightError(f"doctor.py: {_INDEX_LINE!r} not found in builder.doctor.arguments")
    return source.replace(_INDEX_LINE, f"DEFAULT_INDEX_URL = {index_url.rstrip('/')!r}", 1)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # a NUL or a line break would end the file's Python or its line


def _in_docstring(text: str) -> str:
    """``text`` as it reads inside the header's docstring: a backslash or a quote in a URL ends nothing there."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _module_body(name: str, defined: set[str]) -> str:
    source = inspect.getsource(importlib.import_module(name))
    tree = ast.parse(source)
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            drop.append((node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "builder":
            _check_defined(name, node, defined)
            drop.append((node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _check_stdlib(name, node)
    _check_new_names(name, tree, defined)
    lines = source.splitlines()
    kept = [line for number, line in enumerate(lines, 1) if not any(a <= number <= b for a, b in drop)]
    return f"\n# ---- {name} " + "-" * max(0, 100 - len(name)) + "\n" + "\n".join(kept).strip("\n") + "\n"


def _check_defined(module: str, node: ast.ImportFrom, defined: set[str]) -> None:
    for alias in node.names:
        if alias.asname or alias.name not in defined:
            raise WheelwrightError(
                f"doctor.py: {module} imports {alias.name} from {node.module}, which is not defined before it "
                "(list that module earlier in builder.doctor.standalone.MODULES, and import without 'as')"
            )


def _check_stdlib(module: str, node: ast.Import | ast.ImportFrom) -> None:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    for name in names:
        if name.split(".")[0] not in sys.stdlib_module_names:
            raise WheelwrightError(f"doctor.py: {module} imports {name}, which is not in the standard library")


def _check_new_names(module: str, tree: ast.Module, defined: set[str]) -> None:
    for node in tree.body:
        for name in _top_level_names(node):
            if name in defined and name not in _SHARED:
                raise WheelwrightError(f"doctor.py: {module} defines {name}, already defined by an earlier module")
            defined.add(name)


# Names several modules define to the same effect.
_SHARED = frozenset({"log", "annotations"})


def _top_level_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
        isinstance(node, ast.ImportFrom) and (node.module == "__future__" or (node.module or "").startswith("builder"))
    ):
        return []  # stdlib imports may repeat
    return []
