"""The wheel the builder made in this session (the `real_build` fixture: causal-conv1d, torch 2.14.1, sm_90),
indexed next to hand-made wheels of the same project, version, Python and platform under other labels: real pip,
resolving for the wheel's own interpreter and platform, gets exactly the wheel of the variant page it reads."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.core.runner import run
from index_site.serve import serving
from index_site.stage import build_site
from index_site.wheels import RejectedWheel, WheelName, parse_wheel_name
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import crawl

# slow: the session's real build (conftest.real_build) compiles for minutes; in the slow session it is the same build
# the e2e, provenance and doctor tests use, where in the integration session it would be a second one.
pytestmark = [pytest.mark.nvcc, pytest.mark.slow]
OTHER_LABELS = ("pt213cu130", "pt212cu126", "pt211cu128", "pt214cu130")


@dataclass(frozen=True, kw_only=True)
class MixedIndex:
    url: str
    wheels: tuple[WheelName, ...]
    builder_wheels: tuple[str, ...]


def _builder_wheels(dist: Path) -> list[Path]:
    wheels = []
    for path in sorted(dist.glob("*.whl")):
        try:
            parse_wheel_name(path.name)
        except RejectedWheel:
            continue
        wheels.append(path)
    return wheels


def _place(source: Path, dist: Path) -> None:
    dist.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dist / source.name)
    except OSError:
        shutil.copy2(source, dist / source.name)


@pytest.fixture(scope="module")
def mixed_index(tmp_path_factory: pytest.TempPathFactory, real_build: Path) -> Iterator[MixedIndex]:
    real = _builder_wheels(real_build / "dist")
    assert real, f"the session's build left no wheel in {real_build / 'dist'}"
    output = tmp_path_factory.mktemp("mixed")
    for path in real:
        _place(path, output / "dist")
        name = parse_wheel_name(path.name)
        for label in [label for label in OTHER_LABELS if label != name.label][:2]:
            spec = WheelSpec(
                project=name.project,
                version=name.public_version,
                label=label,
                python=name.python_tag,
                platform=name.platform_tag,
            )
            if not (output / "dist" / spec.wheel_filename).exists():
                make_wheel(output / "dist", spec)
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url)
        wheels = tuple(parse_wheel_name(p.name) for p in sorted((output / "dist").glob("*.whl")))
        yield MixedIndex(url=server.url, wheels=wheels, builder_wheels=tuple(p.name for p in real))


def test_each_variant_page_gives_its_own_wheel_for_the_wheels_platform(
    mixed_index: MixedIndex, tmp_path: Path, installer_env: dict
) -> None:
    for name in mixed_index.wheels:
        python = name.python_tag.split(".")[0]
        target = [
            *("--python-version", f"{python[2]}.{python[3:]}", "--implementation", python[:2]),
            *("--abi", name.abi_tag.split(".")[0], "--platform", name.platform_tag.split(".")[0]),
        ]
        report = tmp_path / f"{name.filename}.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--report", report, "--no-deps", "--no-index"]
        command += ["--ignore-installed", "--only-binary=:all:", "--no-cache-dir", *target]
        page = f"{mixed_index.url}/whl/{name.label}.html"
        run([*command, "-f", page, f"{name.project}=={name.public_version}"], step="pip dry-run", env=installer_env)
        (install,) = json.loads(report.read_text())["install"]
        assert install["download_info"]["url"].rsplit("/", 1)[-1].replace("%2B", "+") == name.filename


def test_every_link_resolves_with_builder_wheels(mixed_index: MixedIndex) -> None:
    result = crawl(mixed_index.url + "/")
    assert result.problems == []
    fetched = {url.rsplit("/", 1)[-1].replace("%2B", "+") for url in result.files}
    assert set(mixed_index.builder_wheels) <= fetched
