"""pip 23.0.1 (Python 3.10's bundled pip, the seed's) installs an old release whose METADATA says
`Name: causal_conv1d` from our served index.

pip 22.3 - 23.1 read only the legacy `data-dist-info-metadata` attribute (PEP 658) and compare the metadata's Name
with the requested project unnormalised, so they refuse such a wheel as "inconsistent Name"; PEP 714 renamed the
attribute for that reason. The index serves PEP 714's name only: the same pip then downloads the wheel and compares
normalised names. A copy of the site with the legacy attribute put back is refused, so the test can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.runner import run
from index_site.serve import serving
from index_site.stage import build_site
from scripts.bench.wheels import wheel_of_files

OLD_PIP = "pip==23.0.1"
WHEEL = "causal_conv1d-1.1.1+pt20cu117-py3-none-any.whl"


@pytest.fixture(scope="module")
def old_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose pip is 23.0.1, from the registry (pip's own cache keeps it between runs)."""
    venv = tmp_path_factory.mktemp("old-pip") / "venv"
    run([sys.executable, "-m", "venv", venv], step="create venv")
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", OLD_PIP], step="install pip")
    return python


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("wheelhouse")
    (output / "dist").mkdir()
    wheel_of_files(
        output / "dist",
        name="causal_conv1d",
        version="1.1.1+pt20cu117",
        python_tag="py3",
        platform="any",
        pure=True,
        metadata_name="causal_conv1d",  # what causal-conv1d 1.1.1's setup.py names itself
        requires=(),
        files={"causal_conv1d/__init__.py": b'WHEEL_FILENAME = "ours"\n'},
    )
    build_site(output, output / "site", base_url="http://127.0.0.1/")
    return output / "site"


def with_legacy_attribute(site: Path, copy: Path) -> Path:
    """The site as an index that still serves `data-dist-info-metadata` beside PEP 714's name."""
    shutil.copytree(site, copy)
    for page in copy.rglob("*.html"):
        text = page.read_text()
        page.write_text(text.replace('data-core-metadata="', 'data-dist-info-metadata="'))
    return copy


@pytest.fixture
def pip_install(old_pip: Path, tmp_path: Path) -> Iterator:
    def install(site: Path) -> subprocess.CompletedProcess:
        target = tmp_path / f"target-{len(list(tmp_path.iterdir()))}"
        with serving(site) as server:
            command = [
                old_pip, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-deps",
                "--only-binary", ":all:", "--target", target, "--index-url", f"{server.url}/simple/",
                "causal-conv1d==1.1.1+pt20cu117",
            ]  # fmt: skip
            return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    yield install


def test_pip_23_0_installs_a_non_normalised_name_from_our_index(pip_install, site: Path) -> None:
    page = (site / "simple" / "causal-conv1d" / "index.html").read_text()
    assert WHEEL.replace("+", "%2B") in page and "data-core-metadata=" in page
    assert "dist-info-metadata" not in page
    result = pip_install(site)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Successfully installed causal-conv1d-1.1.1+pt20cu117" in result.stdout


def test_the_legacy_attribute_makes_the_same_pip_refuse_it(pip_install, site: Path, tmp_path: Path) -> None:
    result = pip_install(with_legacy_attribute(site, tmp_path / "legacy-site"))
    assert result.returncode != 0
    assert "inconsistent Name" in result.stdout + result.stderr
