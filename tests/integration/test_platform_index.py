"""One served index, one variant label, two platforms (issue 29): the variant's page lists the x86_64 and the
aarch64 wheel of each release, and real pip picks by its platform. `pip install --dry-run --platform
manylinux_2_28_aarch64 --only-binary=:all: --target T -f <page>` takes the aarch64 wheel; the same without
--platform, here on x86_64, takes the x86_64 one. Test wheels from the factory; the real built wheels were served
and picked the same way (docs/runs.md)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.runner import run
from index_site.serve import serving
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import installer_environment

PLATFORMS = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64"}
PROJECTS = (("causal-conv1d", "1.7.0"), ("mamba-ssm", "2.3.2.post1"))
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def served_wheels(output: Path, specs: list[WheelSpec]) -> None:
    for spec in specs:
        make_wheel(output / "dist", spec)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    output = tmp_path_factory.mktemp("two-platforms")
    specs = [WheelSpec(project=p, version=v, python=TAG, platform=tag) for p, v in PROJECTS
             for tag in PLATFORMS.values()]
    served_wheels(output, specs)
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url)
        yield server.url


def dry_run(tmp_path: Path, page: str, project: str, *platform: str) -> str:
    """The wheel real pip would install for ``project`` from ``page``, read from its report."""
    report = tmp_path / f"{project}-{'-'.join(platform) or 'native'}.json"
    options = ["--platform", *platform, "--python-version", PYTHON, "--only-binary=:all:"] if platform else []
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-cache-dir", "--no-deps", "--no-index",
               "--ignore-installed", *options, "--target", str(tmp_path / "T"), "-f", page, project,
               "--report", str(report)]
    run(command, step="pip install --dry-run", env=installer_environment(tmp_path / "uv-cache"), capture=True)
    (install,) = json.loads(report.read_text())["install"]
    return str(install["download_info"]["url"]).rsplit("/", 1)[-1].replace("%2B", "+")


def test_the_variant_page_serves_both_platforms(index: str) -> None:
    with urllib.request.urlopen(f"{index}/whl/pt214cu130.html") as response:
        page = response.read().decode()
    for project, version in PROJECTS:
        for tag in PLATFORMS.values():
            name = WheelSpec(project=project, version=version, python=TAG, platform=tag).wheel_filename
            assert name.replace("+", "%2B") in page, name


@pytest.mark.parametrize(("project", "version"), PROJECTS)
def test_pip_picks_the_aarch64_wheel_for_an_aarch64_target_and_x86_64_here(
    index: str, tmp_path: Path, project: str, version: str
) -> None:
    page = f"{index}/whl/pt214cu130.html"
    wheels = {p: WheelSpec(project=project, version=version, python=TAG, platform=tag).wheel_filename
              for p, tag in PLATFORMS.items()}
    assert dry_run(tmp_path, page, project, PLATFORMS["aarch64"]) == wheels["aarch64"]
    if os.uname().machine != "x86_64":
        pytest.skip("the native pick is checked where this machine is x86_64")
    assert dry_run(tmp_path, page, project) == wheels["x86_64"]


def test_the_selector_offers_a_platform_choice_naming_each_platforms_wheel(index: str) -> None:
    with urllib.request.urlopen(f"{index}/select/pt214cu130-{TAG}.html") as response:
        page = response.read().decode()
    assert '<legend class="axis-name">Platform</legend>' in page
    assert 'id="plat-x86_64" value="x86_64" checked' in page and 'id="plat-aarch64" value="aarch64"' in page
    for project, version in PROJECTS:
        arm = WheelSpec(project=project, version=version, python=TAG, platform=PLATFORMS["aarch64"]).wheel_filename
        assert f"on aarch64 the command installs {arm}" in page
    assert ':has(#plat-aarch64:checked) .note[data-show="1-aarch64"]' in page


def test_a_site_of_one_platform_offers_no_platform_choice(tmp_path: Path) -> None:
    served_wheels(tmp_path, [WheelSpec(python=TAG, platform=PLATFORMS["x86_64"])])
    build_site(tmp_path, tmp_path / "site", base_url="https://wheels.example.org")
    page = (tmp_path / "site" / "select" / f"pt214cu130-{TAG}.html").read_text()
    assert "Platform</legend>" not in page and '<input type="radio" name="platform"' not in page
    assert 'data-on="x86_64"' in page  # its commands show without a platform choice (the style's :not rule)


@pytest.mark.slow
@pytest.mark.proof
def test_real_built_wheels_of_both_platforms_are_picked_by_platform(tmp_path: Path) -> None:
    """The real wheels `make build-matrix` built (PROFILE=aarch64, and the local profile's x86_64 ones), from the
    folders WHEELWRIGHT_PROOF_DISTS names (os.pathsep-separated dist/ folders), served as one index."""
    folders = [Path(p) for p in os.environ.get("WHEELWRIGHT_PROOF_DISTS", "").split(os.pathsep) if p]
    if not folders:
        pytest.skip("set WHEELWRIGHT_PROOF_DISTS to the dist/ folders of an aarch64 and an x86_64 build")
    (tmp_path / "dist").mkdir()
    wheels = [w for folder in folders for w in folder.glob("*.whl")]
    for wheel in wheels:  # copies: the index takes no link in dist/ for a wheel
        shutil.copyfile(wheel, tmp_path / "dist" / wheel.name)
    with serving(tmp_path / "site") as server:
        build_site(tmp_path, tmp_path / "site", base_url=server.url)
        for project in sorted({w.name.split("-")[0].replace("_", "-") for w in wheels}):
            mine = [w.name for w in wheels if w.name.startswith(project.replace("-", "_") + "-")]
            labels = {name.split("+")[1].split("-")[0] for name in mine}
            for label in labels:
                page = f"{server.url}/whl/{label}.html"
                arm = [n for n in mine if n.endswith("aarch64.whl")]
                x86 = [n for n in mine if n.endswith("x86_64.whl")]
                if arm:  # pip's --platform takes the wheel's own tag: it expands no older manylinux from it
                    tag = arm[0].removesuffix(".whl").rsplit("-", 1)[1].split(".")[0]
                    assert dry_run(tmp_path, page, project, tag) in arm
                if x86:
                    assert dry_run(tmp_path, page, project) in x86
