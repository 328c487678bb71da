"""The site root is safe to point pip at: three variants of causal-conv1d 1.7.0 on the site, a torch installed, and
an upstream index (standing in for the public registry) whose newest release, 1.8.0, is newer than ours.

- The root page links variant pages, never wheels: `-f <root> --no-index` finds nothing rather than another
  torch's or CUDA's build.
- The command the landing page prints (pinned, binary only, the variant page) installs our build for the
  installed torch even though upstream is newer, leaves torch alone, and never falls back to a source build.
- `wheelwright upstream` notices that upstream is ahead (the farm's own check, like new torch releases)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.runner import run
from index_site.serve import serving
from scripts.bench.wheels import wheel_of_files
from tests.integration.conftest import ServedIndex, installed_wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """causal-conv1d 1.8.0 (a wheel that says it is upstream's) and a 1.7.0 sdist, as PEP 503 and PEP 691 pages."""
    root = tmp_path_factory.mktemp("upstream")
    files = root / "whl"  # serve answers only a site's own top-level names
    files.mkdir()
    wheel = wheel_of_files(
        files,
        name="causal_conv1d",
        version="1.8.0",
        python_tag="py3",
        platform="any",
        pure=True,
        requires=(),
        files={"causal_conv1d/__init__.py": b'WHEEL_FILENAME = "upstream 1.8.0"\n'},
    )
    (files / "causal_conv1d-1.7.0.tar.gz").write_bytes(b"an sdist pip must never build here")
    names = [wheel.name, "causal_conv1d-1.7.0.tar.gz"]
    (root / "simple" / "causal-conv1d").mkdir(parents=True)
    links = "".join(f'<a href="../../whl/{n}">{n}</a><br>\n' for n in names)
    (root / "simple" / "causal-conv1d" / "index.html").write_text(
        f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"
    )
    (root / "json" / "causal-conv1d").mkdir(parents=True)
    document = {
        "meta": {"api-version": "1.1"},
        "name": "causal-conv1d",
        "versions": ["1.7.0", "1.8.0"],
        "files": [{"filename": n, "url": f"../../whl/{n}", "hashes": {}} for n in names],
    }
    (root / "json" / "causal-conv1d" / "index.json").write_text(json.dumps(document))
    (root / "json" / "mamba-ssm").mkdir()  # current: the check names only the package that is behind
    (root / "json" / "mamba-ssm" / "index.json").write_text(json.dumps({"versions": ["2.3.2.post1"], "files": []}))
    with serving(root) as server:
        yield server.url


def pip(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-cache-dir", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)


def with_torch(python: Path, env: dict[str, str], tmp_path: Path, version: str) -> None:
    stub = wheel_of_files(
        tmp_path,
        name="torch",
        version=version,
        python_tag="py3",
        platform="any",
        pure=True,
        requires=(),
        files={"torch/__init__.py": f'__version__ = "{version}"\n'.encode()},
    )
    result = pip(python, env, "--no-index", str(stub))
    assert result.returncode == 0, result.stderr


def torch_version(python: Path) -> str:
    return run([python, "-c", "import torch; print(torch.__version__)"], step="torch", capture=True).output.strip()


def test_root_with_no_index_finds_no_wheel_to_mix_up(
    served_index: ServedIndex, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    with_torch(fresh_venv, installer_env, tmp_path, "2.13.0")
    result = pip(fresh_venv, installer_env, "--no-index", "-f", f"{served_index.url}/", "causal-conv1d")
    assert result.returncode != 0
    assert "No matching distribution found for causal-conv1d" in result.stderr
    assert torch_version(fresh_venv) == "2.13.0"


def test_printed_command_installs_our_build_though_upstream_is_newer(
    served_index: ServedIndex, upstream: str, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    with_torch(fresh_venv, installer_env, tmp_path, "2.13.0")
    page = f"{served_index.url}/whl/pt213cu130.html"
    printed = ["--only-binary", "causal-conv1d", "causal-conv1d==1.7.0", "-f", page]  # what the landing page prints
    result = pip(fresh_venv, installer_env, *printed, "--index-url", f"{upstream}/simple/")
    assert result.returncode == 0, result.stderr
    assert installed_wheel(fresh_venv, installer_env) == served_index.wheel("pt213cu130")
    assert torch_version(fresh_venv) == "2.13.0"


def test_printed_flags_at_the_root_refuse_instead_of_building_upstreams_sdist(
    served_index: ServedIndex, upstream: str, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    with_torch(fresh_venv, installer_env, tmp_path, "2.14.1")
    result = pip(
        fresh_venv,
        installer_env,
        "--only-binary",
        "causal-conv1d",
        "causal-conv1d==1.7.0",
        "-f",
        f"{served_index.url}/",
        "--index-url",
        f"{upstream}/simple/",
    )
    assert result.returncode != 0
    assert "No matching distribution found for causal-conv1d==1.7.0" in result.stderr
    assert "sdist" not in result.stdout and "Building" not in result.stdout


def test_the_unpinned_seed_command_is_the_hazard_the_pins_exist_for(
    served_index: ServedIndex, upstream: str, fresh_venv: Path, installer_env: dict, tmp_path: Path
) -> None:
    """`pip install causal-conv1d -f <root>` with the registry reachable takes upstream's newer release: nothing
    on a static page can stop that, which is why every command we print is pinned and `wheelwright upstream`
    tells the farm when upstream is ahead."""
    with_torch(fresh_venv, installer_env, tmp_path, "2.14.1")
    result = pip(
        fresh_venv, installer_env, "causal-conv1d", "-f", f"{served_index.url}/", "--index-url", f"{upstream}/simple/"
    )
    assert result.returncode == 0, result.stderr
    assert installed_wheel(fresh_venv, installer_env) == "upstream 1.8.0"


def test_wheelwright_upstream_notices_a_newer_release(upstream: str, tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((ROOT / "matrix.yaml").read_text())
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "builder.cli.main",
            "upstream",
            "--matrix",
            str(matrix),
            "--index-url",
            f"{upstream}/json/",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ERROR upstream released causal-conv1d 1.8.0, newer than matrix.yaml pins" in result.stdout + result.stderr
