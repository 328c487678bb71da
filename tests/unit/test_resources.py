"""builder/core/resources.py names every data file and template there is, so the wheel (whose package data comes
from it) cannot miss one that a new feature added to the folder."""

from __future__ import annotations

import re
from pathlib import Path

from builder.core import resources

ROOT = Path(__file__).resolve().parents[2]


def test_every_template_is_named() -> None:
    on_disk = {p.name for p in (ROOT / "index_site" / "templates").iterdir() if p.is_file()}
    assert {Path(t.name).name for t in resources.TEMPLATES} == on_disk


def test_every_data_file_is_named() -> None:
    on_disk = {p.name for p in (ROOT / "builder" / "data").iterdir() if p.is_file() and p.suffix != ".py"}
    assert set(resources.PACKAGE_DATA["builder.data"]) == on_disk


def test_each_resource_reads() -> None:
    for resource in (*resources.NOT_MODULES, *resources.BUILD_DATA):
        assert resource.read_bytes(), resource.source


def test_every_toml_data_file_is_read_through_load_data() -> None:
    """Each TOML file of builder/data is read by a ``load_data(<its resource>, ...)`` call (one loader, one error
    shape), never parsed by hand."""
    toml = {name for name, value in vars(resources).items() if isinstance(value, resources.Resource)
            and value.package == "builder.data" and value.name.endswith(".toml")}
    code = "\n".join(p.read_text() for p in (ROOT / "builder").rglob("*.py"))
    read = set(re.findall(r"load_data\(\s*([A-Z_]+)\b", code))
    # images.toml (its text is hashed too) and device-reuse.toml (a test hands it text): parse_toml, then validate
    read |= set(re.findall(r"parse_toml\([^\n]*, ([A-Z_]+)\.source\)", code))
    assert len(toml) >= 8 and sorted(toml - read) == []

