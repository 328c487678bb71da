"""An upstream setup.py, read as a syntax tree: check it has the shape its recipe expects, then inject the
wheelwright prelude (builder/steps/recipes/prelude.py) and route its setup() call through wheelwright_setup()."""

from __future__ import annotations

import ast
import pprint
import re
from collections.abc import Mapping
from dataclasses import dataclass

from builder.core.errors import RecipeError
from builder.core.resources import RECIPE_PRELUDE

PRELUDE_BEGIN = "# >>> wheelwright recipe prelude >>>"
PRELUDE_END = "# <<< wheelwright recipe prelude <<<"
WRAPPER = "wheelwright_setup"
_GENCODE = re.compile(r"arch=compute_\d+")
_OFFLOAD = "--offload-arch"


@dataclass(frozen=True, kw_only=True)
class SetupShape:
    """What the recipe relies on in a setup.py."""

    setup_call: ast.Call
    insert_line: int  # 0-based index of the line the prelude goes before
    constants: frozenset[str]  # every string literal, f-string parts included
    env_reads: Mapping[str, frozenset[str]]  # variable read -> the literals its value is compared with


def read_shape(text: str, where: str) -> SetupShape:
    try:
        tree = ast.parse(text, filename="setup.py")
    except SyntaxError as error:
        raise RecipeError(f"{where}: setup.py does not parse: {error}") from None
    if PRELUDE_BEGIN in text:
        raise RecipeError(
            f"{where}: setup.py already has the wheelwright prelude", tip="apply recipes to a fresh unpack"
        )
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_setup(node.func)]
    if len(calls) != 1:
        raise RecipeError(f"{where}: setup.py has {len(calls)} setup() calls, the recipe expects exactly one")
    keywords = {k.arg for k in calls[0].keywords}
    missing = {"version", "ext_modules"} - keywords
    if missing:
        raise RecipeError(f"{where}: setup() in setup.py is not given {', '.join(sorted(missing))}")
    constants = frozenset(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return SetupShape(
        setup_call=calls[0], insert_line=_insert_line(tree), constants=constants, env_reads=_env_reads(tree)
    )


def _is_setup(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "setup"
    return isinstance(func, ast.Attribute) and func.attr == "setup" and getattr(func.value, "id", None) == "setuptools"


def _insert_line(tree: ast.Module) -> int:
    """Before the first statement that is neither the docstring nor a __future__ import (those must come first)."""
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            return node.lineno - 1
    return (tree.body[-1].end_lineno or 0) if tree.body else 0


def _env_name(node: ast.AST) -> str | None:
    """The variable of ``os.getenv("X", ...)``, ``os.environ.get("X", ...)`` or ``os.environ["X"]``."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = ast.unparse(node.func)
        if func in ("os.getenv", "getenv", "os.environ.get", "environ.get"):
            return node.args[0].value if isinstance(node.args[0].value, str) else None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
        value = node.slice.value if isinstance(node.slice, ast.Constant) else None
        return value if isinstance(value, str) else None
    return None


def _env_reads(tree: ast.Module) -> Mapping[str, frozenset[str]]:
    reads: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if (name := _env_name(node)) is not None:
            reads.setdefault(name, set())
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
            for side in sides:
                if (name := _env_name(side)) is not None:
                    reads.setdefault(name, set()).update(literals)
    return {name: frozenset(values) for name, values in reads.items()}


def check_env_reads(shape: SetupShape, expected: Mapping[str, str | None], where: str) -> None:
    """Each variable must be read by setup.py; a value given must be one setup.py compares the variable with."""
    for name, value in expected.items():
        if name not in shape.env_reads:
            raise RecipeError(f"{where}: setup.py no longer reads ${name}, which the recipe sets")
        compared = shape.env_reads[name]
        if value is not None and compared and value not in compared:
            raise RecipeError(f"{where}: setup.py compares ${name} with {sorted(compared)}, the recipe sets {value!r}")


def check_arch_flags(shape: SetupShape, kind: str, where: str) -> None:
    """gencode-rewrite is for setup.py files that hardcode their arch list; say so when that is no longer true."""
    if kind == "cuda" and not any(_GENCODE.search(c) for c in shape.constants):
        raise RecipeError(
            f"{where}: setup.py hardcodes no '-gencode arch=compute_XY' flags",
            tip="if it now honours TORCH_CUDA_ARCH_LIST, set arch_control: torch-arch-list in matrix.yaml",
        )
    if kind == "rocm" and not any(_OFFLOAD in c for c in shape.constants):
        raise RecipeError(f"{where}: setup.py passes no {_OFFLOAD} flag to hipcc")


def check_install_requires_torch(shape: SetupShape, where: str) -> None:
    """When setup.py is where the requirements come from, torch must be among them (a literal list is checked now,
    anything else by the prelude at build time)."""
    given = {k.arg: k.value for k in shape.setup_call.keywords}
    if "install_requires" not in given:
        raise RecipeError(f"{where}: setup() in setup.py is not given install_requires, so torch cannot be pinned")
    value = given["install_requires"]
    if isinstance(value, ast.List | ast.Tuple):
        listed = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if not any(re.match(r"\s*torch\b(?![-_.\w])", r, re.IGNORECASE) for r in listed):
            raise RecipeError(f"{where}: setup.py's install_requires does not list torch: {listed}")


def prelude_source() -> str:
    return RECIPE_PRELUDE.read_text()


def inject_prelude(text: str, shape: SetupShape, job_values: Mapping[str, object], where: str) -> str:
    """setup.py with the prelude (and the job's values) inserted and its setup() call renamed to the wrapper."""
    lines = _rename_call(text.splitlines(keepends=True), shape.setup_call.func)
    block = [
        f"{PRELUDE_BEGIN}\n",
        prelude_source(),
        f"\nWHEELWRIGHT_JOB = {pprint.pformat(dict(job_values), sort_dicts=False, width=110)}\n",
        "wheelwright_block_downloads()\n",
        f"{PRELUDE_END}\n\n",
    ]
    patched = "".join(lines[: shape.insert_line] + block + lines[shape.insert_line :])
    _check_patched(patched, where)
    return patched


def _rename_call(lines: list[str], func: ast.expr) -> list[str]:
    """Replace the called name's source span (ast columns count UTF-8 bytes) with the wrapper's name."""
    first, last = func.lineno - 1, (func.end_lineno or func.lineno) - 1
    head = lines[first].encode()[: func.col_offset].decode()
    tail = lines[last].encode()[func.end_col_offset :].decode()
    return lines[:first] + [head + WRAPPER + tail] + lines[last + 1 :]


def _check_patched(patched: str, where: str) -> None:
    try:
        compile(patched, "setup.py", "exec")
        tree = ast.parse(patched)
    except SyntaxError as error:  # a bug in the rewrite, but name the package that triggered it
        raise RecipeError(f"{where}: patched setup.py does not compile: {error}") from None
    calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
    wrapped = sum(isinstance(f, ast.Name) and f.id == WRAPPER for f in calls)
    if wrapped != 1 or any(_is_setup(f) for f in calls):
        raise RecipeError(f"{where}: patched setup.py does not route exactly one setup() call through {WRAPPER}()")
