"""doctor on an aarch64 machine (a GH200): its platform check reads the machine, so the fix it offers from a variant
page holding both platforms' wheels is the aarch64 one, and an index with only x86_64 wheels offers none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.doctor.fix import find_fix
from builder.doctor.labels import parse_wheel, platform_fits, wheel_fits
from builder.doctor.probe import Environment
from builder.doctor.verdicts import diagnose
from index_site.catalog import Catalog
from index_site.render import render_site
from index_site.report import ScanStats
from scripts.bench.wheels import indexed_wheel

INDEX = "https://wheels.example.org"
RECORDED = Path(__file__).parent / "data" / "doctor" / "cpu-ok.json"
X86 = "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
ARM = "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"


def gh200() -> Environment:
    """The recorded CPU machine's environment, on aarch64 (Ubuntu 24.04's glibc), with the wrong torch minor's
    wheel installed: doctor must find the one for its torch."""
    data = json.loads(RECORDED.read_text())["environment"]
    data["machine"], data["glibc"] = "aarch64", "2.39"
    data["packages"][0]["version"] = "1.7.0+pt213cu130"
    for extension in data["packages"][0]["extensions"]:
        extension["path"] = extension["path"].replace("x86_64", "aarch64")
    return Environment.from_dict(data)


def fetch_from(*filenames: str):
    files = tuple(indexed_wheel(name, "a") for name in filenames)
    pages = render_site(Catalog(wheels=files, failures=(), rejected=(), stats=ScanStats()), base_url=INDEX)
    return lambda url: json.loads(pages[url.removeprefix(INDEX + "/")]) if url.removeprefix(INDEX + "/") in pages \
        else None


@pytest.mark.parametrize(
    ("platform", "fits"),
    [("manylinux_2_28_aarch64", True), ("manylinux2014_aarch64", True), ("manylinux_2_28_x86_64", False),
     ("linux_aarch64", True), ("manylinux_2_40_aarch64", False)],
)
def test_an_aarch64_machine_takes_aarch64_tags_only(platform: str, fits: bool) -> None:
    assert platform_fits(platform, machine="aarch64", glibc="2.39") is fits


def test_the_fix_on_aarch64_installs_the_aarch64_wheel_of_its_variant() -> None:
    env = gh200()
    fix = find_fix(env, diagnose(env)[0], INDEX, fetch_from(X86, ARM))
    assert fix is not None and fix.wheel == ARM
    assert fix.pip is not None and fix.pip.endswith(f"causal-conv1d==1.7.0+pt214cu130 -f {INDEX}/whl/pt214cu130.html")


def test_an_index_of_x86_64_wheels_only_offers_an_aarch64_machine_nothing() -> None:
    env = gh200()
    fix = find_fix(env, diagnose(env)[0], INDEX, fetch_from(X86))
    assert fix is not None and fix.pip is None
    assert "no causal-conv1d wheel for pt214cu130 (cp311, aarch64, glibc 2.39)" in fix.note


def test_both_platforms_wheels_parse_with_their_own_platform() -> None:
    arm, x86 = parse_wheel(ARM), parse_wheel(X86)
    assert arm is not None and x86 is not None
    assert wheel_fits(arm, python_tag="cp311", machine="aarch64", glibc="2.17")
    assert not wheel_fits(x86, python_tag="cp311", machine="aarch64", glibc="2.39")
