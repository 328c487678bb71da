"""The settings: one module names every ``WHEELWRIGHT_*`` variable and is the only reader of them (apart from the
standard-library programs a compile runs), values cascade default < file < environment and are read at call time,
and docs/settings.md lists each one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from builder.core import settings
from builder.core.errors import ConfigError
from builder.core.settings import SETTINGS, cache_root, setting, setting_given, setting_number

ROOT = Path(__file__).resolve().parents[2]
# Programs run by path in a job's environment, standard library only: they read what the compile stage set for them.
PROGRAMS = {p.relative_to(ROOT).as_posix() for p in (ROOT / "builder/steps/programs").glob("*.py")}
# WHEELWRIGHT_* words that are no variable: names in the code pasted into setup.py, and a prefix a benchmark clears.
NOT_VARIABLES = {"WHEELWRIGHT_ARCH_OPTIONS", "WHEELWRIGHT_STRAY_ARCH", "WHEELWRIGHT_TORCH",
                 "WHEELWRIGHT_NVCC"}
SETTER_CALLS = {"setting", "setting_given", "setting_number", "setting_path", "cache_root", "expand_settings"}


def _checkout_files() -> list[Path]:
    """The checkout's code, data, docs and build files (the run logs under docs/gpu-runs/ are records, not read)."""
    folders = ("builder", "index_site", "scripts", "tests", "docs", "docker", ".ci", ".github")
    found = [p for folder in folders for p in (ROOT / folder).rglob("*") if p.is_file()
             and p.suffix in {".py", ".sh", ".toml", ".yml", ".yaml", ".md", "", ".Dockerfile", ".cjs"}
             and "__pycache__" not in p.parts and "gpu-runs" not in p.parts]
    return found + [ROOT / name for name in ("Makefile", "README.md", "matrix.yaml", "pyproject.toml", "setup.py")]


def _python_files() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for folder in ("builder", "index_site", "scripts")
                  for p in (ROOT / folder).rglob("*.py"))


def _constants(tree: ast.AST) -> dict[str, str]:
    """Top-level ``NAME = "WHEELWRIGHT_..."`` assignments, the way a variable's name is often kept."""
    return {target.id: node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


def _name_of(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def _name_tuples(tree: ast.AST, known: dict[str, str]) -> dict[str, list[str]]:
    """``NAMES = ("A", module.B, ...)``: tuples of variable names, which a loop then reads one by one."""
    return {target.id: [e.value if isinstance(e, ast.Constant) else known.get(_name_of(e), "") for e in node.value.elts]
            for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List))
            for target in node.targets if isinstance(target, ast.Name)}


def environment_reads(source: str | ast.Module, names: dict[str, str] | None = None, *,
                      prefix: str = "WHEELWRIGHT_", handed_in: bool = True) -> list[str]:
    """The variables starting with ``prefix`` that the source reads from the environment (``get``, ``[...]``,
    ``in``, ``getenv``): from os.environ, or (``handed_in``) from a mapping handed in as ``environ``, and a
    WHEELWRIGHT_* one from any mapping handed in (the environment by another name); by name, by a constant or by a
    loop over a tuple of names."""
    tree = ast.parse(source) if isinstance(source, str) else source
    known = {**(names or {}), **_constants(tree)}
    tuples = _name_tuples(tree, known)
    loops: dict[str, set[str]] = {}  # a loop variable's name: every tuple a loop of that name runs over
    for node in ast.walk(tree):
        if isinstance(node, (ast.comprehension, ast.For)) and isinstance(node.target, ast.Name):
            loops.setdefault(node.target.id, set()).add(_name_of(node.iter))
    parameters = {a.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}

    def variables(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id in loops:
            return [name for loop in sorted(loops[node.id]) for name in tuples.get(loop, [])]
        return [known.get(_name_of(node), "")]

    from_os = any(isinstance(node, ast.ImportFrom) and node.module == "os" and "environ" in [a.name for a in node.names]
                  for node in ast.walk(tree))

    def is_environ(node: ast.expr, key: list[str]) -> bool:  # not a dict a module builds for a child
        if isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os":
            return True
        given = handed_in and isinstance(node, ast.Name) and node.id in parameters
        return isinstance(node, ast.Name) and ((from_os and node.id == "environ") or (given and (
            node.id == "environ" or any(k.startswith("WHEELWRIGHT_") for k in key))))

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            key = variables(node.args[0])
            if (node.func.attr == "get" and is_environ(node.func.value, key)) or node.func.attr == "getenv":
                found += key
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            found += key if is_environ(node.value, key := variables(node.slice)) else []
        elif isinstance(node, ast.Compare):
            found += key if any(is_environ(c, key := variables(node.left)) for c in node.comparators) else []
    return [name for name in found if name and name.startswith(prefix)]


@pytest.mark.parametrize(("source", "found"), [
    ('import os\nos.environ.get("WHEELWRIGHT_CACHE")', ["WHEELWRIGHT_CACHE"]),
    ('import os\nos.environ["WHEELWRIGHT_CACHE"]', ["WHEELWRIGHT_CACHE"]),
    ('import os\nos.getenv("WHEELWRIGHT_CACHE", "x")', ["WHEELWRIGHT_CACHE"]),
    ('from os import environ\nenviron.get("WHEELWRIGHT_CACHE")', ["WHEELWRIGHT_CACHE"]),
    ('import os\n"WHEELWRIGHT_CACHE" in os.environ', ["WHEELWRIGHT_CACHE"]),
    ('import os\nNAME = "WHEELWRIGHT_ENGINE"\ndef f():\n    return os.environ.get(NAME)', ["WHEELWRIGHT_ENGINE"]),
    ('import os\nos.environ.get("PATH")', []),
    ('env = {"WHEELWRIGHT_CACHE": "/c"}', []),  # setting one for a child process is not reading it
    ('import os\nos.environ["WHEELWRIGHT_CACHE"] = "/c"', []),
    ('environ = {}\nenviron.get("WHEELWRIGHT_NVCC_POOL")', []),  # a child's environment the module built
    # the environment handed in as a mapping is still the environment
    ('def f(environ):\n    return environ.get("WHEELWRIGHT_OBJCACHE_REMOTE")', ["WHEELWRIGHT_OBJCACHE_REMOTE"]),
    ('REMOTE = "WHEELWRIGHT_OBJCACHE_REMOTE"\ndef f(env):\n    return env[REMOTE]', ["WHEELWRIGHT_OBJCACHE_REMOTE"]),
    ('import os\nNAMES = ("PIP_INDEX_URL", "WHEELWRIGHT_TORCH_INDEX")\n{k: os.environ[k] for k in NAMES}',
     ["WHEELWRIGHT_TORCH_INDEX"]),
    ('import os\nA = ("WHEELWRIGHT_CACHE",)\nB = ("PATH",)\n[os.environ[k] for k in A]\n[k for k in B]',
     ["WHEELWRIGHT_CACHE"]),  # another loop of the same name
    ('def f(row):\n    return row.get("name")', []),
])
def test_a_read_of_the_environment_is_found(source: str, found: list[str]) -> None:
    assert environment_reads(source) == found


def _product_trees() -> dict[str, ast.Module]:
    return {path: ast.parse((ROOT / path).read_text()) for path in _python_files()
            if path not in PROGRAMS | {"builder/core/settings.py"}}


def _variable_names(trees: dict[str, ast.Module]) -> dict[str, str]:
    return {k: v for tree in trees.values() for k, v in _constants(tree).items() if v.isupper() or "_" in v}


def test_nothing_reads_a_wheelwright_variable_but_the_settings_module() -> None:
    """WHEELWRIGHT_* (the OBJCACHE_* ones too) only through builder.core.settings, in the product and the scripts
    (whose mappings handed in are a build's environment they made, not theirs): the programs a compile runs are the
    exception, standard library only (they read what compilation.py set)."""
    trees = _product_trees()
    names = _variable_names(trees)
    readers = {path: reads for path, tree in trees.items()
               if (reads := environment_reads(tree, names, handed_in=not path.startswith("scripts/")))}
    assert readers == {}


def test_every_variable_the_product_reads_is_named_in_the_settings_module() -> None:
    """The other tools' variables too (GITHUB_*, SOURCE_DATE_EPOCH, the proxies): settings.OTHER_TOOLS names each."""
    trees = {path: tree for path, tree in _product_trees().items() if not path.startswith("scripts/")}
    names = _variable_names(trees)
    named = {s.name for s in SETTINGS} | {name for other in settings.OTHER_TOOLS for name in other.names}
    unnamed = {path: sorted(set(reads) - named) for path, tree in trees.items()
               if set(reads := environment_reads(tree, names, prefix="")) - named}
    assert len(trees) > 100 and unnamed == {}


def import_time_calls(source: str) -> list[str]:
    """Calls of the settings' readers that run when the module is imported (module or class level, defaults)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
                visit(default)
            for decorator in getattr(node, "decorator_list", []):
                visit(decorator)
            return
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in SETTER_CALLS:
            found.append(ast.unparse(node))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


@pytest.mark.parametrize(("source", "found"), [
    ('X = setting("WHEELWRIGHT_CACHE")', ['setting("WHEELWRIGHT_CACHE")']),
    ('def f(root=cache_root()):\n    pass', ["cache_root()"]),
    ('class A:\n    x = settings.setting_number("WHEELWRIGHT_LEDGER_TIMEOUT")', [
        "settings.setting_number('WHEELWRIGHT_LEDGER_TIMEOUT')"]),
    ('def f():\n    return setting("WHEELWRIGHT_CACHE")', []),
])
def test_a_setting_read_at_import_is_found(source: str, found: list[str]) -> None:
    assert [call.replace('"', "'") for call in import_time_calls(source)] == [f.replace('"', "'") for f in found]


def test_no_setting_is_read_at_import() -> None:
    calls = {path: found for path in _python_files() if (found := import_time_calls((ROOT / path).read_text()))}
    assert calls == {}


def test_every_wheelwright_variable_in_the_tree_is_named_in_the_settings() -> None:
    pattern = re.compile(r"WHEELWRIGHT_[A-Z0-9_]*[A-Z0-9]")
    words = {word for path in _checkout_files() for word in pattern.findall(path.read_text(errors="replace"))}
    assert sorted(words - NOT_VARIABLES - {s.name for s in SETTINGS}) == []


@pytest.mark.parametrize("named", SETTINGS, ids=lambda s: s.name)
def test_docs_settings_lists_each_setting(named: settings.Setting) -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith(f"| `{named.name}` |")]
    assert len(rows) == 1 and named.about in rows[0]


@pytest.mark.parametrize("other", settings.OTHER_TOOLS, ids=lambda o: o.names[0])
def test_docs_settings_lists_each_other_tools_variable(other: settings.OtherVariable) -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    row = "| " + ", ".join(f"`{name}`" for name in other.names) + f" | {other.about} |"
    assert row in page.splitlines()


# -- the cascade ------------------------------------------------------------------------------------------------


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder, no settings variable set."""
    monkeypatch.chdir(tmp_path)
    for named in SETTINGS:
        monkeypatch.delenv(named.name, raising=False)
    return tmp_path


def test_the_default_then_the_file_then_the_environment(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert setting("WHEELWRIGHT_LEDGER_TIMEOUT") == "30" and setting_given("WHEELWRIGHT_LEDGER_TIMEOUT") is None
    (here / "wheelwright.toml").write_text("ledger_timeout = 5\nnvcc_split = false\n")
    assert setting_number("WHEELWRIGHT_LEDGER_TIMEOUT") == 5 and setting("WHEELWRIGHT_NVCC_SPLIT") == "0"
    monkeypatch.setenv("WHEELWRIGHT_LEDGER_TIMEOUT", "7")
    assert setting("WHEELWRIGHT_LEDGER_TIMEOUT") == "7" == setting_given("WHEELWRIGHT_LEDGER_TIMEOUT")
    monkeypatch.setenv("WHEELWRIGHT_LEDGER_TIMEOUT", "")  # empty: unset, the file's value holds
    assert setting("WHEELWRIGHT_LEDGER_TIMEOUT") == "5"


def test_the_settings_variable_names_another_file(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "elsewhere.toml").write_text('cache = "~/ww"\n')
    monkeypatch.setenv("WHEELWRIGHT_SETTINGS", str(here / "elsewhere.toml"))
    assert cache_root() == Path.home() / "ww"
    monkeypatch.setenv("WHEELWRIGHT_SETTINGS", str(here / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml: no such settings file"):
        setting("WHEELWRIGHT_CACHE")


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_cache_variable_is_an_unset_one(here: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", value)
    assert cache_root() == Path.home() / ".cache" / "wheelwright"


@pytest.mark.parametrize(("text", "message"), [
    ("cach = '/c'\n", r"wheelwright.toml: unknown setting 'cach' \(did you mean 'cache'\?\)"),
    ("nvcc_pool = '/p'\n", r"wheelwright.toml: unknown setting 'nvcc_pool' \(wheelwright sets it"),
    ("settings = 'x.toml'\n", r"unknown setting 'settings' \(wheelwright sets it, or only the environment does\)"),
    ("[cache]\npath = '/c'\n", r"wheelwright.toml: cache: a setting is a string or a number, not dict"),
    ("cache = \n", r"wheelwright.toml: not valid TOML"),
    ("ledger_timeout = 'soon'\n", r"wheelwright.toml: ledger_timeout='soon': not a number at least 0"),
])
def test_a_bad_file_is_one_error_naming_the_file_and_key(here: Path, text: str, message: str) -> None:
    (here / "wheelwright.toml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        setting_number("WHEELWRIGHT_LEDGER_TIMEOUT", at_least=0)


def test_wheelwrights_own_variables_come_from_the_environment_only(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "wheelwright.toml").write_text("cache = '/c'\n")
    assert setting("WHEELWRIGHT_HOST_PYTHON") is None  # the file is not read for it
    monkeypatch.setenv("WHEELWRIGHT_HOST_PYTHON", "3.12")
    assert setting("WHEELWRIGHT_HOST_PYTHON") == "3.12"


def test_a_setting_in_a_template_is_expanded_through_the_cascade(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "wheelwright.toml").write_text("cuda_home = '/opt/cuda-13'\n")
    monkeypatch.setenv("OTHER", "x")
    assert settings.expand_settings("$WHEELWRIGHT_CUDA_HOME/bin:${WHEELWRIGHT_CUDA_HOME}:$OTHER") == (
        "/opt/cuda-13/bin:/opt/cuda-13:x")
    assert settings.expand_settings("$WHEELWRIGHT_ROCM_INDEX") == "$WHEELWRIGHT_ROCM_INDEX"  # unset stays
