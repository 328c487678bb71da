"""The code digest (index_site/code.py) holds what a complete run left, what it kept of each release and every page
group's digest: it must be made of every file the site's bytes depend on, or a wheelwright that reads them otherwise
keeps pages the last one wrote."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import builder.core.resources as resources_module
import builder.plan.facts as facts_module
from builder.core.resources import Resource
from index_site import code
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import site_files

ROOT = Path(code.__file__).parents[1]
BASE = "https://wheels.example.org"


def _module_file(name: str) -> Path | None:
    """The file of module ``name`` in this checkout, or None where it is no module of it."""
    path = ROOT.joinpath(*name.split("."))
    for found in (path.with_suffix(".py"), path / "__init__.py"):
        if found.is_file():
            return found
    return None


def _imported(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(module, names taken from it) of every import in ``path``'s source, at any depth (imports inside functions
    too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [alias.name for alias in node.names]


def _builder_closure() -> tuple[set[Path], set[str]]:
    """The files of builder that index_site imports, directly or through each other, and the names they take from
    builder.core.resources."""
    pending = sorted((ROOT / "index_site").glob("*.py"))
    seen: set[Path] = set()
    resources: set[str] = set()
    while pending:
        path = pending.pop()
        for module, names in _imported(path):
            if not module.startswith("builder"):
                continue
            if module == "builder.core.resources":
                resources.update(names)
            files = [_module_file(f"{module}.{name}") or _module_file(module) for name in names] or [
                _module_file(module)
            ]
            for found in files:
                if found is not None and found not in seen:
                    seen.add(found)
                    pending.append(found)
        if path.is_relative_to(ROOT / "builder"):
            resources.update(_resource_attributes(path))
    return seen, resources


def _resource_attributes(path: Path) -> set[str]:
    """The names read as ``resources.NAME`` in ``path``."""
    return {
        node.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "resources"
    }


def test_the_code_digest_is_made_of_every_module_and_data_file_index_site_reaches() -> None:
    inputs = set(code.code_inputs())
    modules, names = _builder_closure()
    assert modules, "index_site imports nothing of builder: the walk is broken"
    assert sorted(path.relative_to(ROOT).as_posix() for path in modules - inputs) == []
    data = [value for name in names if isinstance(value := getattr(resources_module, name, None), Resource)]
    assert resources_module.TORCH_FACTS in data
    assert sorted(r.source for r in data if ROOT / r.source not in inputs) == []


@pytest.fixture
def facts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the torch facts file that the index reads, and its code digest is made of, instead of the
    checkout's: a test changes it as a new wheelwright's facts would be."""
    copy = tmp_path / "torch.toml"
    copy.write_bytes(resources_module.TORCH_FACTS.read_bytes())

    class _Copy(Resource):
        def read_bytes(self) -> bytes:
            return copy.read_bytes()

        def read_text(self) -> str:
            return copy.read_text(encoding="utf-8")

    resource = _Copy("builder.data", "torch.toml")
    inputs = code.code_inputs()
    monkeypatch.setattr(resources_module, "TORCH_FACTS", resource)
    monkeypatch.setattr(facts_module, "TORCH_FACTS", resource)
    monkeypatch.setattr(code, "code_inputs", lambda: [copy if path.name == "torch.toml" else path for path in inputs])
    _forget_digests()
    yield copy
    _forget_digests()


def _forget_digests() -> None:
    code.code_digest.cache_clear()
    facts_module._default_facts.cache_clear()




def test_new_torch_facts_render_the_pages_that_show_them_again(tmp_path: Path, facts_file: Path) -> None:
    """A wheelwright whose torch facts say 2.14 shipped no 3.12 shows its 3.12 setups otherwise (no setup page for
    it, other choices on the others): the site indexed by the last one becomes the site a cold index makes."""
    out = tmp_path / "out"
    for spec in (WheelSpec(label="pt214cu130", python="cp311"), WheelSpec(label="pt213cu130", python="cp312")):
        make_wheel(out / "dist", spec)
    build_site(out, out / "site", base_url=BASE)
    before = site_files(out / "site")
    shipped = 'python = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.14t"]'
    text = facts_file.read_text()
    at = text.index(shipped, text.index('torch = "2.14"'))
    facts_file.write_text(text[:at] + shipped.replace('"3.12", ', "") + text[at + len(shipped):])
    _forget_digests()
    build_site(out, out / "site", base_url=BASE)
    build_site(out, out / "cold", base_url=BASE)
    after, cold = site_files(out / "site"), site_files(out / "cold")
    assert "select/pt214cu130-cp312.html" in before.keys() - cold.keys()  # the facts moved what the site shows
    assert after.keys() == cold.keys()
    assert [path for path in cold if after[path] != cold[path]] == []
