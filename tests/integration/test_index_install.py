"""Real pip and real uv, in fresh virtual environments, install from the index served over loopback HTTP and get
exactly the wheel of the variant they asked for; PEP 658 metadata spares the wheel download; an independent
parser (pypi-simple) reads the pages into exactly the files on disk."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename
from pypi_simple import ProjectPage

from builder.core.runner import run
from index_site.wheels import parse_wheel_name, read_core_metadata
from tests.index_checks import crawl, fetch, pip_install
from tests.integration.conftest import PYTHON_TAG, ServedIndex, installed_wheel

LABELS = ("pt214cu130", "pt213cu130", "pt212cu126")


def uv(python: Path, env: dict[str, str], *args: str | Path) -> str:
    uv_binary = Path(sys.executable).parent / "uv"
    return run(
        [uv_binary, "pip", "install", "--python", python, "--no-deps", *args],
        step="uv pip install",
        env=env,
        capture=True,
    ).output


def _report(path: Path) -> list[dict]:
    return json.loads(path.read_text())["install"]


@pytest.mark.parametrize("label", LABELS)
def test_pip_gets_exactly_the_wheel_of_the_variant_page(
    served_index: ServedIndex, fresh_venv: Path, installer_env: dict, tmp_path: Path, label: str
) -> None:
    page = f"{served_index.url}/whl/{label}.html"
    pip_install(
        fresh_venv, installer_env, "--no-index", "-f", page, "causal-conv1d", "--report", tmp_path / "report.json"
    )
    (install,) = _report(tmp_path / "report.json")
    expected = served_index.wheel(label)
    assert install["download_info"]["url"].rsplit("/", 1)[-1].replace("%2B", "+") == expected
    assert installed_wheel(fresh_venv, installer_env) == expected


def test_pip_from_a_variant_simple_index_and_an_exact_pin_on_the_all_variants_index(
    served_index: ServedIndex, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    pip_install(
        fresh_venv,
        installer_env,
        "--index-url",
        f"{served_index.url}/whl/pt213cu130/simple/",
        "causal-conv1d",
        "--report",
        tmp_path / "a.json",
    )
    assert installed_wheel(fresh_venv, installer_env) == served_index.wheel("pt213cu130")
    pinned = "causal-conv1d==1.7.0+pt212cu126"
    pip_install(
        fresh_venv, installer_env, "--index-url", f"{served_index.url}/simple/", pinned, "--report", tmp_path / "b.json"
    )
    assert installed_wheel(fresh_venv, installer_env) == served_index.wheel("pt212cu126")


def test_pip_reads_the_json_index(
    served_index: ServedIndex, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    start = len(served_index.requests)
    pip_install(
        fresh_venv,
        installer_env,
        "--index-url",
        f"{served_index.url}/whl/pt214cu130/json/",
        "causal-conv1d",
        "--report",
        tmp_path / "r.json",
    )
    assert installed_wheel(fresh_venv, installer_env) == served_index.wheel("pt214cu130")
    paths = [r.path for r in served_index.requests[start:]]
    assert "/whl/pt214cu130/json/causal-conv1d/" in paths


def test_uv_gets_exactly_the_wheel_of_the_variant(
    served_index: ServedIndex, tmp_path: Path, installer_env: dict
) -> None:
    uv_binary = Path(sys.executable).parent / "uv"
    sources = {
        "pt213cu130": ["--no-index", "--find-links", f"{served_index.url}/whl/pt213cu130.html"],
        "pt212cu126": ["--index-url", f"{served_index.url}/whl/pt212cu126/simple/"],
        "pt214cu130": ["--index-url", f"{served_index.url}/whl/pt214cu130/json/"],
    }
    for label, source in sources.items():
        venv = tmp_path / f"venv-{label}"
        run([uv_binary, "venv", "--python", sys.executable, venv], step="uv venv", env=installer_env)
        output = uv(venv / "bin" / "python", installer_env, *source, "causal-conv1d")
        assert f"+ causal-conv1d==1.7.0+{label}" in output
        assert installed_wheel(venv / "bin" / "python", installer_env) == served_index.wheel(label)


def test_pip_dry_run_reads_pep_658_metadata_and_never_downloads_the_wheel(
    served_index: ServedIndex, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    start = len(served_index.requests)
    page = f"{served_index.url}/whl/pt214cu130.html"
    pip_install(
        fresh_venv, installer_env, "--dry-run", "--no-index", "-f", page, "mamba-ssm", "--report", tmp_path / "r.json"
    )
    (install,) = _report(tmp_path / "r.json")
    assert install["metadata"]["version"] == "2.3.2.post1+pt214cu130"
    assert install["metadata"]["requires_dist"] == ["torch==2.14.*"]
    wheel = served_index.wheel("pt214cu130", project="mamba-ssm", version="2.3.2.post1").replace("+", "%2B")
    fetched = {r.path: r for r in served_index.requests[start:]}
    assert f"/whl/pt214cu130/{wheel}.metadata" in fetched
    assert f"/whl/pt214cu130/{wheel}" not in fetched
    assert sum(r.length for r in fetched.values()) < 20_000  # the wheel itself is 400 kB


def test_every_link_resolves_and_matches_its_digest(served_index: ServedIndex) -> None:
    result = crawl(served_index.url + "/")
    assert result.problems == []
    wheels_on_disk = {p.name for p in (served_index.output / "dist").glob("*.whl")}
    assert {
        url.rsplit("/", 1)[-1].replace("%2B", "+") for url in result.files if url.endswith(".whl")
    } == wheels_on_disk


@pytest.mark.parametrize(
    "index", ["simple", "whl/pt214cu130/simple", "whl/pt213cu130/simple", "json", "whl/pt212cu126/json"]
)
def test_pypi_simple_parses_pages_into_exactly_the_files_on_disk(served_index: ServedIndex, index: str) -> None:
    dist = served_index.output / "dist"
    label = index.split("/")[1] if index.startswith("whl/") else None
    for project in ("causal-conv1d", "mamba-ssm"):
        expected = {
            p.name
            for p in dist.glob("*.whl")
            if parse_wheel_name(p.name).project == project and (label is None or f"+{label}-" in p.name)
        }
        url = f"{served_index.url}/{index}/{project}/"
        status, content_type, body = fetch(url)
        if not expected:
            assert status == 404
            continue
        page = (
            ProjectPage.from_json_data(json.loads(body), url)
            if "json" in content_type
            else ProjectPage.from_html(project, body, url)
        )
        assert {package.filename for package in page.packages} == expected
        for package in page.packages:
            _check_package(package, dist / package.filename)


def _check_package(package, wheel: Path) -> None:
    name = parse_wheel_name(wheel.name)
    metadata = read_core_metadata(wheel, name)
    assert package.digests == {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert package.has_metadata and package.metadata_digests == {"sha256": hashlib.sha256(metadata).hexdigest()}
    assert package.requires_python == ">=3.9"
    assert parse_wheel_filename(package.filename)[0] == name.project
    status, _, body = fetch(package.url)
    assert status == 200 and hashlib.sha256(body).hexdigest() == package.digests["sha256"]
    status, _, body = fetch(package.metadata_url)
    assert status == 200 and body == metadata


def test_the_interpreter_tag_matches_the_fixture_wheels() -> None:
    # The installs above rely on the fixture building wheels for the interpreter running the tests.
    assert PYTHON_TAG == f"cp{sys.version_info.major}{sys.version_info.minor}"
