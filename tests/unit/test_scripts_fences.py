"""What scripts/ and tests/gpu may use of the product: its public names only (no `_private` name imported or reached
through a module), so that a change inside a module cannot break a benchmark or the GPU run unseen. The import
contracts (pyproject.toml) fence the modules; this fences the names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("builder", "index_site")


def private_uses(source: str) -> list[str]:
    """``module._name`` for each private product name the source imports, or reaches through a product module."""
    tree, modules, found = ast.parse(source), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCT:
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRODUCT:
                    found += [alias.name for part in alias.name.split(".") if part.startswith("_")]
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{modules[node.value.id]}.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for folder in ("scripts", "tests/gpu")
                                        for p in (ROOT / folder).rglob("*.py")))
def test_scripts_use_the_products_public_names_only(path: str) -> None:
    assert private_uses((ROOT / path).read_text()) == []


@pytest.mark.parametrize(("source", "found"), [
    ("from builder.steps.upstream import _unpack, tree_digest", ["builder.steps.upstream._unpack"]),
    ("from builder.steps import fetch\nfetch._download_unchecked()", ["builder.steps.fetch._download_unchecked"]),
    ("import builder.plan.archs as archs\narchs._KNOWN", ["builder.plan.archs._KNOWN"]),
    ("import torch\ntorch.cuda._sleep(1)", []),  # not the product's
    ("from builder.plan import archs\narchs.known_bad = None", []),
])
def test_private_names_are_found_however_they_are_reached(source: str, found: list[str]) -> None:
    assert private_uses(source) == found
