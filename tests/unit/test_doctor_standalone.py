"""The generated doctor.py: one file of standard-library imports only, no trace of the builder package, its site's
URL as the default index, and the same answers as builder.doctor when loaded as a module of its own."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.errors import WheelwrightError
from builder.doctor import standalone
from builder.doctor.explain import explain
from builder.doctor.probe import Environment
from builder.doctor.standalone import standalone_source
from builder.doctor.verdicts import diagnose

DATA = Path(__file__).parent / "data" / "doctor"


def test_only_the_standard_library_and_nothing_of_builder() -> None:
    tree = ast.parse(standalone_source("https://wheels.example.org"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}
    assert "builder" not in imported


def test_the_default_index_is_the_sites() -> None:
    source = standalone_source("https://wheels.example.org/")
    assert "DEFAULT_INDEX_URL = 'https://wheels.example.org'\n" in source
    assert "curl -s https://wheels.example.org/doctor.py | python -" in source
    assert source.startswith("#!/usr/bin/env python3\n") and source.count("from __future__ import annotations") == 1


@pytest.fixture
def doctor_py(tmp_path: Path) -> Iterator[types.ModuleType]:
    """doctor.py imported as a module of its own (registered, as dataclasses need), not run."""
    path = tmp_path / "doctor_py_under_test.py"
    path.write_text(standalone_source(""))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[path.stem]


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_the_same_verdicts_as_the_package(doctor_py: types.ModuleType, name: str) -> None:
    data = json.loads((DATA / name).read_text())["environment"]
    ours = diagnose(Environment.from_dict(data))
    theirs = doctor_py.diagnose(doctor_py.Environment.from_dict(data))
    assert [(d.package.name, [(v.code, v.message) for v in d.verdicts]) for d in theirs] == [
        (d.package.name, [(v.code, v.message) for v in d.verdicts]) for d in ours
    ]


def test_the_same_explanations_as_the_package(doctor_py: types.ModuleType) -> None:
    log = "undefined symbol: _ZN3c104cuda9SetDeviceEi\nversion `GLIBC_2.34' not found\n"
    assert [(f.code, f.cause) for f in doctor_py.explain(log)] == [(f.code, f.cause) for f in explain(log)]


def test_a_module_out_of_order_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    standalone_source.cache_clear()
    order = list(standalone.MODULES)
    order.remove("builder.core.elfread")
    monkeypatch.setattr(standalone, "MODULES", tuple(order))
    with pytest.raises(
        WheelwrightError,
        match="builder.core.fatbin imports ElfFile from builder.core.elfread, which is not defined before it",
    ):
        standalone_source("x")
    standalone_source.cache_clear()


def test_a_third_party_import_fails_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    standalone_source.cache_clear()
    monkeypatch.setattr(standalone, "MODULES", (*standalone.MODULES, "builder.plan.job"))
    with pytest.raises(
        WheelwrightError, match="builder.plan.job imports packaging.utils, which is not in the standard"
    ):
        standalone_source("y")
    standalone_source.cache_clear()
