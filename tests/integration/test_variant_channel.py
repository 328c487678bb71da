"""The variant channel with the pinned uv (0.13.9, `--preview-features wheel-variants`) against the served site, in
fresh venvs holding a minimal distribution named torch: uv picks the CUDA variant the driver can run and the SASS
the GPU executes, refuses clearly where none fits, and never replaces the installed torch. The variant files
validate with variantlib, the PEPs' reference library.

GPU properties: uv's built-in NVIDIA provider reads the driver and the GPU, or NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_
VERSION and NV_VARIANT_PROVIDER_FORCE_SM_ARCH (measured: UV_CUDA_DRIVER_VERSION, the --torch-backend knob, is
ignored by the variant provider). CPU tests force both; the `gpu` test forces nothing and runs on the GPU machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from builder.steps.twins import VariantTwins
from index_site.serve import serving
from index_site.stage import build_site
from index_site.variants import installed_torch_command
from tests import variant_channel
from tests.index_checks import installer_environment

UV = Path(sys.executable).parent / "uv"
ON_H200 = {"NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "13.0", "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "9.0"}


@dataclass(frozen=True, kw_only=True)
class Channel:
    url: str
    output: Path
    torch_wheels: Path


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Channel]:
    output = tmp_path_factory.mktemp("variant-site")
    torch_wheels = variant_channel.write_channel(output)
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url, twins=VariantTwins())
        yield Channel(url=server.url, output=output, torch_wheels=torch_wheels)


def venv_with_torch(root: Path, channel: Channel, torch: str) -> tuple[Path, dict[str, str]]:
    env = installer_environment(root / "uv-cache")
    return variant_channel.venv_with_torch(UV, root, channel.torch_wheels, torch, env), env


def uv_one_url(python: Path, env: dict[str, str], index: str, **gpu: str) -> subprocess.CompletedProcess:
    return variant_channel.uv_one_url(UV, python, {**env, **gpu}, index)


installed = variant_channel.installed


# --- the files -------------------------------------------------------------------------------------------------------


def test_twins_carry_variant_json_that_variantlib_accepts(channel: Channel) -> None:
    twins = sorted((channel.output / "variant").glob("*.whl"))
    assert [t.name.rsplit("-", 1)[1] for t in twins] == ["pt213cu130.whl", "pt214cu126.whl", "pt214cu130.whl"]
    for twin in twins:
        label = twin.name.removesuffix(".whl").rsplit("-", 1)[1]
        with zipfile.ZipFile(twin) as archive:
            assert "causal_conv1d-1.7.0.dist-info/METADATA" in archive.namelist()  # the public version inside
            dist_info = VariantDistInfo(archive.read("causal_conv1d-1.7.0.dist-info/variant.json"), label)
        assert dist_info.variant_label == label
    twin = channel.output / "variant" / "causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130.whl"
    with zipfile.ZipFile(twin) as archive:
        properties = json.loads(archive.read("causal_conv1d-1.7.0.dist-info/variant.json"))["variants"]["pt214cu130"]
    assert properties == {
        "abi_dependency": {"torch": ["2.14"]},
        "nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["90_real", "120_real", "120_virtual"]},
    }


@pytest.mark.parametrize("root", ["variant/simple", "variant/pt214/simple"])
def test_index_level_variants_json_validates_and_is_linked(channel: Channel, root: str) -> None:
    page = (channel.output / "site" / root / "causal-conv1d" / "index.html").read_text()
    assert 'href="causal_conv1d-1.7.0-variants.json#sha256=' in page
    document = json.loads(
        (channel.output / "site" / root / "causal-conv1d" / "causal_conv1d-1.7.0-variants.json").read_text()
    )
    parsed = VariantsJson(document)
    labels = {"pt214cu130", "pt214cu126"} | ({"pt213cu130"} if root == "variant/simple" else set())
    guards = {"pt214.noarch", "pt214cu126.drv", "pt214cu130.drv"}  # index_site/fallback.py
    guards |= {"pt213.noarch", "pt213cu130.drv"} if root == "variant/simple" else set()
    assert set(parsed.variants) == labels | guards
    assert parsed.namespace_priorities == ["abi_dependency", "nvidia"]


# --- uv against the served channel -----------------------------------------------------------------------------------


def test_uv_one_url_installs_the_variant_the_driver_and_gpu_can_run(channel: Channel, tmp_path: Path) -> None:
    python, env = venv_with_torch(tmp_path / "a", channel, "2.14.1")
    result = uv_one_url(python, env, f"{channel.url}/variant/simple/", **ON_H200)
    assert result.returncode == 0, result.stderr
    assert installed(python) == ("pt214cu130", "2.14.1")

    older_driver = {**ON_H200, "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "12.8"}
    python, env = venv_with_torch(tmp_path / "b", channel, "2.14.1")
    result = uv_one_url(python, env, f"{channel.url}/variant/simple/", **older_driver)
    assert result.returncode == 0, result.stderr
    assert installed(python) == ("pt214cu126", "2.14.1")


def test_uv_refuses_clearly_when_no_variant_fits_the_gpu(channel: Channel, tmp_path: Path) -> None:
    """The null fallback would install and fail at the first kernel: the arch guard (index_site/fallback.py) is the
    one variant supported there, and its one requirement says why nothing installs."""
    python, env = venv_with_torch(tmp_path, channel, "2.14.1")
    turing = {**ON_H200, "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "7.5"}  # no build carries sm_75 SASS
    result = uv_one_url(python, env, f"{channel.url}/variant/simple/", **turing)
    assert result.returncode != 0
    assert "torch==0+no.sass.or.ptx.for.this.gpu.arch" in result.stderr
    assert installed(python) == (None, "2.14.1")


def test_two_torch_minors_each_get_their_variant_and_keep_their_torch(channel: Channel, tmp_path: Path) -> None:
    """The per-torch channel installs the matching variant in both venvs. The all-torch root serves the newest
    torch minor: uv 0.13.9 implements no ABI dependency provider, so for an older torch it refuses (torch==2.14.*
    cannot be met from this index) and leaves the installed torch alone."""
    for torch, tag in (("2.14.1", "pt214"), ("2.13.0", "pt213")):
        python, env = venv_with_torch(tmp_path / tag, channel, torch)
        result = uv_one_url(python, env, f"{channel.url}/variant/{tag}/simple/", **ON_H200)
        assert result.returncode == 0, result.stderr
        assert installed(python) == (f"{tag}cu130", torch)

    python, env = venv_with_torch(tmp_path / "root", channel, "2.13.0")
    result = uv_one_url(python, env, f"{channel.url}/variant/simple/", **ON_H200)
    assert result.returncode != 0
    assert "torch==2.14.*" in result.stderr
    assert installed(python) == (None, "2.13.0")


def test_uv_reads_the_json_channel(channel: Channel, tmp_path: Path) -> None:
    python, env = venv_with_torch(tmp_path, channel, "2.14.1")
    result = uv_one_url(python, env, f"{channel.url}/variant/json/", **ON_H200)
    assert result.returncode == 0, result.stderr
    assert installed(python) == ("pt214cu130", "2.14.1")


@pytest.mark.gpu
def test_on_the_gpu_machine_uv_detects_driver_and_arch_itself(channel: Channel, tmp_path: Path) -> None:
    """Run on the GPU box (a driver for CUDA >= 13.0 and an sm_90 GPU): nothing forced, uv asks the hardware."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA driver on this machine (on the GPU box: this test, or tests/gpu's)")
    python, env = venv_with_torch(tmp_path, channel, "2.14.1")
    env = {k: v for k, v in env.items() if not k.startswith("NV_VARIANT_PROVIDER_")}
    result = uv_one_url(python, env, f"{channel.url}/variant/simple/")
    assert result.returncode == 0, result.stderr
    assert installed(python) == ("pt214cu130", "2.14.1")


# --- the landing page's one command, for any torch -------------------------------------------------------------------


def test_the_landing_pages_one_uv_command_installs_each_torchs_variant(channel: Channel, tmp_path: Path) -> None:
    """The same command, copied from the served landing page, in two venvs whose torch minors differ: each gets
    the variant built for its torch (and the driver's CUDA), and keeps its torch."""
    command = variant_channel.landing_uv_command(channel.output / "site")
    assert command.startswith("uv pip install --preview-features wheel-variants causal-conv1d --index-url ")
    for torch, label in (("2.14.1", "pt214cu130"), ("2.13.0", "pt213cu130")):
        python, env = venv_with_torch(tmp_path / torch, channel, torch)
        result = variant_channel.run_in_venv(UV, command, python, {**env, **ON_H200})
        assert result.returncode == 0, result.stderr
        assert installed(python) == (label, torch)


def test_the_landing_pages_one_uv_command_refuses_a_torch_with_no_build(channel: Channel, tmp_path: Path) -> None:
    python, env = venv_with_torch(tmp_path, channel, "2.12.0")
    command = variant_channel.landing_uv_command(channel.output / "site")
    result = variant_channel.run_in_venv(UV, command, python, {**env, **ON_H200})
    assert result.returncode != 0
    # the channel of every torch: uv names the torch it would need, and keeps the installed one
    assert "causal-conv1d depend on torch==2.14.*" in result.stderr, result.stderr
    assert installed(python) == (None, "2.12.0")


def test_the_one_uv_command_names_the_installed_torchs_channel_or_the_channel_of_every_torch(tmp_path: Path) -> None:
    """The shell part of the command, run by bash with a python whose torch is a stub of each version."""
    command = installed_torch_command("https://wheels.test", "causal-conv1d", ("pt214", "pt213"))
    url = command.split("--index-url ", 1)[1]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    urls = {}
    for version in ("2.14.1+cu130", "2.13.0", "2.12.0", "2.14.0a0+git1234"):
        (tmp_path / "torch.py").write_text(f"__version__ = {version!r}\n")
        env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path)}
        done = subprocess.run(["bash", "-c", f"echo {url}"], env=env, capture_output=True, text=True, check=True)
        urls[version] = done.stdout.strip()
    assert urls == {
        "2.14.1+cu130": "https://wheels.test/variant/pt214/simple/",
        "2.13.0": "https://wheels.test/variant/pt213/simple/",
        "2.12.0": "https://wheels.test/variant/simple/",
        "2.14.0a0+git1234": "https://wheels.test/variant/pt214/simple/",
    }


# --- what the pinned uv does with other declarations of the torch provider -------------------------------------------


@pytest.mark.parametrize(
    ("provider", "skipped"),
    [
        ({"builtin": "abi_dependency"}, "abi_dependency"),
        (
            {"requires": ["wheelwright-torch-provider==0.1.0"], "plugin-api": "wheelwright_torch_provider:Plugin"},
            "wheelwright_torch_provider:Plugin",
        ),
    ],
    ids=["builtin-abi-dependency", "plugin"],
)
def test_uv_0_13_9_runs_no_torch_provider_so_every_variant_is_unsupported(
    channel: Channel, tmp_path: Path, provider: dict[str, object], skipped: str
) -> None:
    """Why torch is declared with static-properties: declared as PEP 850's built-in ABI dependency provider or as a
    plugin, uv 0.13.9 skips the provider (uv-distribution/src/variant/mod.rs, supported_variant_properties: only its
    vendored nvidia/tpu/x86_64/aarch64 providers run), never fetches the plugin, and finds no variant supported,
    whatever torch is installed: it takes the null fallback (index_site/fallback.py), the build-tagged wheel without
    a variant label. When this test fails, uv has grown the provider: declare it and drop the per-torch channels'
    command from the landing page."""
    site = tmp_path / "site"
    shutil.copytree(channel.output / "site", site)
    variant_channel.declare_torch_provider(site, "variant/simple", provider)
    with serving(site) as server:
        python, env = venv_with_torch(tmp_path / "venv", channel, "2.14.1")
        command = [
            UV,
            "pip",
            "install",
            "-v",
            "--python",
            python,
            "--preview-features",
            "wheel-variants",
            "causal-conv1d",
            "--index-url",
            f"{server.url}/variant/simple/",
        ]
        result = subprocess.run(
            command, env={**env, **ON_H200}, capture_output=True, text=True, timeout=120, check=False
        )
    assert result.returncode == 0, result.stderr
    assert f"Skipping unsupported wheel variant provider `{skipped}` for namespace `abi_dependency`" in result.stderr
    assert re.search(r"Selecting: causal-conv1d==1\.7\.0 \[compatible\] \(causal_conv1d-1\.7\.0-[0-9]+_pt214cu130-cp",
                     result.stderr), "not the null fallback"
    assert "wheelwright-torch-provider" not in result.stderr.replace(json.dumps(provider), "")  # never fetched
    assert installed(python) == ("pt214cu130", "2.14.1")
