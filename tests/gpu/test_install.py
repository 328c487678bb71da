"""What pip installed into the test venv, read from its installation report (--pip-report): each package is our
labelled wheel, fetched from wheelwright's index, byte for byte the file the build put into dist/, and seen by this
interpreter (the venv's). An arch variant's venv holds its one wheel and nothing else."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from packaging.utils import canonicalize_name

from builder.core.hashing import sha256_of
from scripts.gpu.data import AcceptanceData
from tests.gpu.options import Given
from tests.gpu.report import Recorded


@pytest.fixture(scope="module")
def installed(given: Given) -> dict[str, dict[str, Any]]:
    """pip's report's installed items, by canonical name."""
    report = json.loads(given.need("pip_report").read_text())
    return {canonicalize_name(item["metadata"]["name"]): item for item in report.get("install", [])}


def _same_as_built(built: Path, archive_info: dict[str, Any]) -> list[str]:
    if not built.is_file():
        return [f"{built.name} is not a wheel the build put into {built.parent}"]
    reported = (archive_info.get("hashes") or {}).get("sha256")
    if reported is None:
        return [f"pip reported no sha256 for {built.name} (the index's link carries none)"]
    return [] if reported == sha256_of(built) else [f"{built.name} differs from the file in {built.parent}"]


def test_installed_from_the_index(
    package: str, installed: dict[str, dict[str, Any]], acceptance: AcceptanceData, given: Given, record: Recorded,
    stage_data: dict[str, Any],
) -> None:
    index_url, dist = given.need("index_url"), given.need("dist_dir")
    item = installed.get(canonicalize_name(package))
    assert item is not None, "pip's report does not list it as installed"
    version, url = item["metadata"]["version"], item["download_info"]["url"]
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    label = f"+{acceptance.label}"
    problems = [] if version.endswith(label) else [f"version {version} lacks the label {label}"]
    if not url.startswith(index_url.rstrip("/") + "/"):
        problems.append(f"fetched from {url}, not from {index_url}")
    problems += _same_as_built(dist / filename, item["download_info"].get("archive_info", {}))
    record.detail, record.data = f"{filename} from {url}", {"version": version, "wheel": filename, "url": url}
    stage_data.setdefault("wheels", []).append(filename)
    stage_data["index_url"] = index_url
    assert not problems, "; ".join(problems)


def test_seen_by_this_interpreter(package: str, installed: dict[str, dict[str, Any]], record: Recorded) -> None:
    item = installed.get(canonicalize_name(package))
    wanted = item["metadata"]["version"] if item else None
    try:
        seen: str | None = metadata.version(package)
    except metadata.PackageNotFoundError:
        seen = None
    record.detail = f"importlib.metadata sees {seen}, pip installed {wanted}"
    assert seen is not None and seen == wanted, record.detail


def test_nothing_else_installed(installed: dict[str, dict[str, Any]], acceptance: AcceptanceData) -> None:
    """An arch variant's venv: the variant's wheel alone, from its own index."""
    assert list(installed) == [canonicalize_name(acceptance.arch.package)], f"pip installed {list(installed)}"
