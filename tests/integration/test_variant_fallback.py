"""The variant channel where people install (issue 28), with the pinned uv and pip against the served site: slim
per-arch variants of the pt214cu130 build, its null fallback for machines with no GPU visible and for installers
that know nothing of variants, and the guards that refuse in words where a GPU is visible but nothing runs on it."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.doctor.channel import channel_verdicts, fetch_text
from builder.doctor.fix import fetch_json
from builder.doctor.probe import Environment, Gpu, Torch
from builder.steps.twins import VariantTwins
from index_site.serve import serving
from index_site.stage import build_site
from tests import variant_channel
from tests.index_checks import installer_environment

UV = Path(sys.executable).parent / "uv"
DRIVER, SM = "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION", "NV_VARIANT_PROVIDER_FORCE_SM_ARCH"


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    output = tmp_path_factory.mktemp("fallback-site")
    torch_wheels = variant_channel.write_channel(output)
    variant_channel.write_slims(output)  # pt214cu130: sm90 (SASS alone) and sm120 (with PTX 12.0)
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url, twins=VariantTwins())
        yield f"{server.url}/variant/pt214/simple/", torch_wheels


def uv_install(channel: tuple[str, Path], root: Path, **gpu: str) -> tuple[subprocess.CompletedProcess, Path]:
    index, torch_wheels = channel
    env = {k: v for k, v in installer_environment(root / "uv-cache").items() if not k.startswith("NV_VARIANT")}
    python = variant_channel.venv_with_torch(UV, root, torch_wheels, "2.14.1", env)
    return variant_channel.uv_one_url(UV, python, {**env, **gpu}, index), python


def test_no_gpu_visible_installs_the_null_fallback(channel: tuple[str, Path], tmp_path: Path) -> None:
    """A Docker build, a CI image, a login node: no driver, no GPU. The fat build of the newest CUDA installs."""
    result, python = uv_install(channel, tmp_path)
    assert result.returncode == 0, result.stderr
    assert variant_channel.installed(python) == ("pt214cu130", "2.14.1")
    assert variant_channel.installed_variant(python) == "pt214cu130"  # the fat twin's bytes: the null


def test_an_sm90_gpu_gets_the_sm90_slim_wheel(channel: tuple[str, Path], tmp_path: Path) -> None:
    result, python = uv_install(channel, tmp_path, **{DRIVER: "13.0", SM: "9.0"})
    assert result.returncode == 0, result.stderr
    assert variant_channel.installed_variant(python) == "pt214cu130sm90"


def test_an_sm121_gpu_gets_the_sm120_slim_wheel(channel: tuple[str, Path], tmp_path: Path) -> None:
    result, python = uv_install(channel, tmp_path, **{DRIVER: "13.0", SM: "12.1"})
    assert result.returncode == 0, result.stderr
    assert variant_channel.installed_variant(python) == "pt214cu130sm120"


def test_an_sm86_gpu_gets_the_build_with_family_sass(channel: tuple[str, Path], tmp_path: Path) -> None:
    """No slim wheel of the cu130 build runs on 8.6; the cu126 build's SASS 8.0 does (same family)."""
    result, python = uv_install(channel, tmp_path, **{DRIVER: "13.0", SM: "8.6"})
    assert result.returncode == 0, result.stderr
    assert variant_channel.installed_variant(python) == "pt214cu126"


@pytest.mark.parametrize(("driver", "needs"), [("12.4", "cuda.13.0"), ("12.8", "cuda.13.0")])
def test_a_driver_too_old_for_the_cuda_is_refused_in_words(channel: tuple[str, Path], tmp_path: Path,
                                                           driver: str, needs: str) -> None:
    """12.4: too old for both builds; 12.8: the cu126 build has no SASS for 12.0 and cu130's needs a newer driver.
    The null would install and fail at import; the guard refuses before anything is installed."""
    result, python = uv_install(channel, tmp_path, **{DRIVER: driver, SM: "12.0"})
    assert result.returncode != 0
    assert f"torch==0+nvidia.driver.older.than.{needs}" in result.stderr, result.stderr
    assert variant_channel.installed(python) == (None, "2.14.1")


def test_a_gpu_no_build_has_sass_or_ptx_for_is_refused_in_words(channel: tuple[str, Path], tmp_path: Path) -> None:
    result, python = uv_install(channel, tmp_path, **{DRIVER: "13.0", SM: "7.5"})
    assert result.returncode != 0
    assert "torch==0+no.sass.or.ptx.for.this.gpu.arch" in result.stderr, result.stderr
    assert variant_channel.installed(python) == (None, "2.14.1")


def test_pip_which_knows_nothing_of_variants_installs_the_null(channel: tuple[str, Path], tmp_path: Path) -> None:
    index, torch_wheels = channel
    env = installer_environment(tmp_path / "uv-cache")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv"], check=True, env=env)
    python = tmp_path / "venv" / "bin" / "python"
    # the test extras' pip (26.x), installing into the venv: the pip users have today
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", "--no-cache-dir"]
    version = subprocess.run([*pip, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("pip 26."), version
    subprocess.run([*pip, "install", "-q", "--no-index", "-f", torch_wheels, "torch==2.14.1"], check=True, env=env)
    result = subprocess.run([*pip, "install", "causal-conv1d", "--index-url", index], capture_output=True,
                            text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert variant_channel.installed(python) == ("pt214cu130", "2.14.1")
    assert variant_channel.installed_variant(python) == "pt214cu130"


@pytest.mark.parametrize(
    ("gpu", "driver", "runs"),
    [
        (Gpu("Tesla T4", "7.5"), "13.0", ()),
        (Gpu("NVIDIA H200", "9.0"), "13.0", ("pt214cu126", "pt214cu130sm90")),
        (Gpu("NVIDIA RTX PRO 6000", "12.0"), "12.8", ()),  # cu126 has no 12.0, cu130 needs a newer driver
    ],
    ids=["sm75", "sm90", "sm120-old-driver"],
)
def test_doctor_says_first_whether_a_build_of_the_channel_runs_here(
    channel: tuple[str, Path], gpu: Gpu, driver: str, runs: tuple[str, ...]
) -> None:
    """doctor reads the channel of the environment's torch (variant/pt214/json/) before anything is installed."""
    site = channel[0].removesuffix("/variant/pt214/simple/")
    env = Environment(python="3.11.7", python_tag="cp311", executable="python", machine="x86_64",
                      torch=Torch(version="2.14.1+cu130", cuda="13.0"), driver_cuda=driver, gpus=(gpu,))
    (verdict,) = [v for v in channel_verdicts(env, site, fetch_json, fetch_text) if v.project == "causal-conv1d"]
    assert verdict.runs == bool(runs)
    if runs:
        assert f"{', '.join(runs)} run on the {gpu.name}" in verdict.message
    else:
        assert f"no build of causal-conv1d 1.7.0 on the variant channel runs on the {gpu.name}" in verdict.message
        assert "uv refuses to install it" in verdict.message and "no kernel image" in verdict.message


def test_the_landing_page_shows_what_each_machine_downloads(channel: tuple[str, Path]) -> None:
    """The fat wheel's size (no GPU, pip) beside each slim wheel's, read from the served landing page."""
    index, _ = channel
    with urllib.request.urlopen(index.removesuffix("variant/pt214/simple/")) as response:
        page = response.read().decode()
    sizes = re.search(r'<ul class="channel-sizes">\s*<li>(.*?)</li>', page, re.DOTALL)
    assert sizes is not None, "the landing page shows no sizes"
    assert re.fullmatch(r"causal-conv1d 1\.7\.0, pt214cu130 \(cp311\): every arch [\d.]+ kB; sm_90 [\d.]+ kB; "
                        r"sm_120 [\d.]+ kB", sizes.group(1)), sizes.group(1)


# --- the slim wheels' publication rule -------------------------------------------------------------------------------


def slim_site(tmp_path: Path) -> tuple[Path, list[Path]]:
    output = tmp_path / "out"
    variant_channel.write_channel(output)
    return output, variant_channel.write_slims(output)


def published_slims(output: Path) -> list[str]:
    report = build_site(output, output / "site", base_url="http://wheels.test", twins=VariantTwins())
    return sorted(t.label for t in report_twins(output) if "sm" in t.label) if report else []


def report_twins(output: Path) -> list:  # type: ignore[type-arg]
    from index_site.report import TwinReport
    from index_site.state import IndexState, state_path

    with IndexState(state_path(output / "ledger.sqlite")) as state:
        published = tuple(row for row in state.twins().values() if not row.verdict)
    return list(TwinReport(folder=str(output / "variant"), published=published).twins)


def test_slim_wheels_are_published_with_their_fat_wheel(tmp_path: Path) -> None:
    output, _ = slim_site(tmp_path)
    assert published_slims(output) == ["pt214cu130sm120", "pt214cu130sm90"]
    page = (output / "site/variant/pt214/simple/causal-conv1d/index.html").read_text()
    assert "-pt214cu130sm90.whl#sha256=" in page and "-pt214cu130.whl#sha256=" not in page  # the fat is the null
    assert "-2141300_pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=" in page


def test_a_slim_wheel_whose_fat_wheel_is_withdrawn_is_not_published(tmp_path: Path) -> None:
    output, _ = slim_site(tmp_path)
    (fat,) = (output / "dist").glob("*+pt214cu130-*.whl")
    fat.unlink()
    assert published_slims(output) == []
    page = (output / "site/variant/pt214/simple/causal-conv1d/index.html").read_text()
    assert "sm90" not in page and "2141300_pt214cu130" not in page


def test_a_slim_wheel_cut_from_another_build_of_its_fat_wheel_is_refused(tmp_path: Path) -> None:
    """The fat wheel rebuilt (other bytes, same name): the slim wheels name the old one's digest."""
    output, _ = slim_site(tmp_path)
    assert published_slims(output) == ["pt214cu130sm120", "pt214cu130sm90"]
    (fat,) = (output / "dist").glob("*+pt214cu130-*.whl")
    job = variant_channel.job_of("pt214cu130")
    rebuilt = variant_channel.job_wheel(fat.parent, job, {"causal_conv1d/__init__.py": b'LABEL = "rebuilt"\n'},
                                        platform="manylinux_2_28_x86_64")
    variant_channel.with_provenance(rebuilt, job)
    assert rebuilt == fat
    assert published_slims(output) == []


def test_a_slim_wheel_whose_payload_is_not_its_fat_wheels_is_refused(tmp_path: Path) -> None:
    output, (sm90, _) = slim_site(tmp_path)
    from builder.steps.wheelzip import Member, read_members, write_wheel

    members = read_members(sm90)
    members["causal_conv1d/__init__.py"] = Member(data=b"import os\n")
    write_wheel(sm90, members)
    assert published_slims(output) == ["pt214cu130sm120"]
