"""Recipes on the real upstream setup.py files of every pinned version (sdists come through the fetch cache: the
network is needed once). setup.py runs for real against a stub torch and the real CUDA toolkit's `nvcc -V`; what
the tests assert is what setup.py hands on: the nvcc flags of each extension, the version, the requirements."""

from __future__ import annotations

import email.parser
import os
import re
import sys
import textwrap
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import setuptools

from builder.core.hashing import sha256_of
from builder.core.runner import run
from builder.plan.accelerator import Accelerator
from builder.plan.expand import expand
from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.plan.matrix import Profile, load_matrix
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.recipes import apply_recipe

ROOT = Path(__file__).resolve().parents[2]
CUDA_HOME = Path("/usr/local/cuda-13.0")
ARCH_LIKE = re.compile(r"\b(?:sm|compute)_\d|^-arch|^--gpu-architecture|^-code|^--gpu-code|^--generate-code|^-gencode")

pytestmark = pytest.mark.skipif(
    not (CUDA_HOME / "bin" / "nvcc").exists(), reason=f"setup.py asks {CUDA_HOME}/bin/nvcc for its version"
)


def matrix_jobs() -> dict[str, Job]:
    """Every pinned version of every package, for torch 2.14 (cxx20 applies) and 2.11 (it does not)."""
    matrix = load_matrix(ROOT / "matrix.yaml")
    profile = Profile(torch=["2.14.1", "2.11.0"], accelerators=["cu130"], python=["3.12"], versions="all",
                      archs={"cu130": ["9.0"]})
    matrix = matrix.model_copy(update={"profiles": {**matrix.profiles, "recipes-test": profile}})
    return {f"{j.package}-{j.version}-{j.label}": j for j in expand(matrix, load_facts(), "recipes-test").jobs}


JOBS = matrix_jobs()
VERSIONS = ["causal-conv1d-1.6.1", "causal-conv1d-1.7.0", "mamba-ssm-2.2.6.post3", "mamba-ssm-2.3.2.post1"]


def job_for(version: str, label: str = "pt214cu130", **changes: object) -> Job:
    return replace(JOBS[f"{version}-{label}"], **changes)


def fresh_tree(job: Job, tmp_path: Path) -> Path:
    return unpack_sdist(fetch_sdist(job), tmp_path / "src")


@dataclass
class SetupRun:
    kwargs: dict
    namespace: dict
    torch: ModuleType

    @property
    def nvcc_flags(self) -> list[str]:
        (extension,) = self.kwargs["ext_modules"]
        return extension.extra_compile_args["nvcc"]

    @property
    def cxx_flags(self) -> list[str]:
        return self.kwargs["ext_modules"][0].extra_compile_args["cxx"]


def stub_modules(job: Job) -> dict[str, ModuleType]:
    """torch as far as these setup.py files use it; CUDAExtension builds the same Extension fields torch's does."""
    rocm = job.accelerator.kind == "rocm"
    torch = ModuleType("torch")
    torch.__version__ = f"{job.torch}+{job.accelerator.name}"
    version = job.accelerator.version
    torch.version = SimpleNamespace(cuda=None if rocm else version, hip=f"{version}.0-0" if rocm else None)
    torch._C = SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=False)
    cpp = ModuleType("torch.utils.cpp_extension")
    # no HIP toolkit here: HIP_HOME None skips upstream's hipcc version check (it warns instead)
    cpp.CUDA_HOME, cpp.HIP_HOME = (None if rocm else str(CUDA_HOME)), None
    cpp.BuildExtension = type("BuildExtension", (), {})

    def extension(name: str, sources: list[str], extra_compile_args: dict, include_dirs: list) -> setuptools.Extension:
        return setuptools.Extension(name, sources, extra_compile_args=extra_compile_args, include_dirs=include_dirs)

    cpp.CUDAExtension = cpp.CppExtension = extension
    bdist = ModuleType("wheel.bdist_wheel")
    bdist.bdist_wheel = type("bdist_wheel", (), {})
    return {"torch": torch, "torch.utils": ModuleType("torch.utils"), "torch.utils.cpp_extension": cpp,
            "wheel": ModuleType("wheel"), "wheel.bdist_wheel": bdist}


def run_setup_py(root: Path, job: Job, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> SetupRun:
    """Execute setup.py down to its setup() call and capture what setup() receives."""
    modules = stub_modules(job)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    captured: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.setattr(urllib.request, "urlretrieve", urllib.request.urlretrieve)  # the prelude replaces it
    monkeypatch.chdir(root)
    namespace = {"__file__": str(root / "setup.py"), "__name__": "__main__"}
    exec(compile((root / "setup.py").read_text(), str(root / "setup.py"), "exec"), namespace)  # noqa: S102
    return SetupRun(kwargs=captured, namespace=namespace, torch=modules["torch"])


def gencodes(flags: list[str]) -> list[str]:
    return [flags[i + 1] for i, flag in enumerate(flags) if flag == "-gencode"]


@pytest.mark.parametrize("version", VERSIONS)
def test_upstream_setup_py_hardcodes_many_archs(version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: unpatched, setup.py ignores the job's archs (so the test below could fail)."""
    job = job_for(version)
    upstream = run_setup_py(fresh_tree(job, tmp_path), job, {"TORCH_CUDA_ARCH_LIST": "9.0"}, monkeypatch)
    assert "arch=compute_75,code=sm_75" in gencodes(upstream.nvcc_flags)
    assert len(gencodes(upstream.nvcc_flags)) >= 8
    assert upstream.kwargs["version"] == job.version


@pytest.mark.parametrize(
    ("archs", "expected"),
    [
        (("9.0",), ["arch=compute_90,code=sm_90"]),
        (("9.0a", "12.0+PTX"), ["arch=compute_90a,code=sm_90a", "arch=compute_120,code=sm_120",
                                "arch=compute_120,code=compute_120"]),
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_nvcc_receives_only_the_jobs_archs(
    version: str, archs: tuple[str, ...], expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_for(version, archs=archs)
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    compile((root / "setup.py").read_text(), "setup.py", "exec")
    flags = run_setup_py(root, job, dict(result.env), monkeypatch).nvcc_flags
    assert gencodes(flags) == expected
    assert [f for f in flags if ARCH_LIKE.search(f)] == [f for pair in zip(["-gencode"] * 3, expected) for f in pair]
    # torch's BuildExtension adds arch flags of its own only when none of the flags mentions "arch"
    assert any("arch" in flag for flag in flags)


@pytest.mark.parametrize("version", VERSIONS)
def test_setup_receives_label_version_torch_pin_and_switches(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_for(version)
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    setup = run_setup_py(root, job, dict(result.env), monkeypatch)
    assert setup.kwargs["version"] == job.local_version == f"{job.version}+pt214cu130"
    assert [r for r in setup.kwargs["install_requires"] if r.startswith("torch")] == ["torch==2.14.*"]
    assert setup.namespace["FORCE_BUILD"] is True  # upstream's bdist_wheel will not fetch a prebuilt wheel
    assert setup.torch._C._GLIBCXX_USE_CXX11_ABI is True  # job.cxx11_abi reached upstream's ABI switch
    with pytest.raises(setup.namespace["WheelwrightRecipeError"], match="tried to download"):
        setup.namespace["urllib"].request.urlretrieve("https://example.invalid/x.whl", "x.whl")


@pytest.mark.parametrize(
    ("version", "label", "std"),
    [
        ("mamba-ssm-2.2.6.post3", "pt214cu130", "-std=c++20"),
        ("mamba-ssm-2.3.2.post1", "pt214cu130", "-std=c++20"),
        ("mamba-ssm-2.3.2.post1", "pt211cu130", "-std=c++17"),
        ("causal-conv1d-1.7.0", "pt214cu130", None),
    ],
)
def test_cxx20_patch_only_for_mamba_under_torch_214(
    version: str, label: str, std: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_for(version, label)
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    assert any(c.startswith("patch cxx20") for c in result.changes) is (std == "-std=c++20")
    setup = run_setup_py(root, job, dict(result.env), monkeypatch)
    stds = sorted({f for f in setup.nvcc_flags + setup.cxx_flags if f.startswith("-std=")})
    assert stds == ([std] if std else [])


@pytest.mark.parametrize("version", VERSIONS)
def test_rocm_hipcc_receives_only_the_jobs_offload_archs(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_for(version, accelerator=Accelerator.parse("rocm6.4"), archs=("gfx90a", "gfx942"))
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    assert result.env["HIP_ARCHITECTURES"] == result.env["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942"
    with pytest.warns(UserWarning, match="hipcc was not found"):
        setup = run_setup_py(root, job, dict(result.env), monkeypatch)
    offload = [flag for flag in setup.nvcc_flags if "offload-arch" in flag or "gfx" in flag]
    assert offload == ["--offload-arch=gfx90a", "--offload-arch=gfx942"]
    assert setup.kwargs["version"] == f"{job.version}+pt214rocm64"


def stub_torch_package(where: Path) -> Path:
    """The same torch stub as files, for a setuptools run in its own process (wheel is the real one there)."""
    files = {
        "torch/__init__.py": """
            import os
            from types import SimpleNamespace
            __version__ = os.environ["STUB_TORCH_VERSION"]
            version = SimpleNamespace(cuda=os.environ["STUB_TORCH_CUDA"], hip=None)
            _C = SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=False)
        """,
        "torch/utils/__init__.py": "",
        "torch/utils/cpp_extension.py": """
            import os
            import setuptools
            from setuptools.command.build_ext import build_ext as BuildExtension
            CUDA_HOME, HIP_HOME = os.environ["CUDA_HOME"], None
            def CUDAExtension(name, sources, extra_compile_args, include_dirs):
                return setuptools.Extension(name, sources, extra_compile_args=extra_compile_args,
                                            include_dirs=[str(d) for d in include_dirs])
            CppExtension = CUDAExtension
        """,
    }
    for name, text in files.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(textwrap.dedent(text))
    return where


@pytest.mark.parametrize("version", VERSIONS)
def test_wheel_metadata_carries_label_and_torch_pin(version: str, tmp_path: Path) -> None:
    """setuptools' own metadata step decides between pyproject.toml and setup.py; ask it."""
    job = job_for(version)
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    stubs = stub_torch_package(tmp_path / "stubs")
    env = {**os.environ, **result.env, "PYTHONPATH": str(stubs), "CUDA_HOME": str(CUDA_HOME),
           "STUB_TORCH_VERSION": f"{job.torch}+cu130", "STUB_TORCH_CUDA": "13.0"}
    code = "import sys, setuptools.build_meta as backend; print(backend.prepare_metadata_for_build_wheel(sys.argv[1]))"
    (tmp_path / "meta").mkdir()
    done = run([sys.executable, "-c", code, tmp_path / "meta"], step="metadata", env=env, cwd=root, capture=True)
    dist_info = done.output.strip().splitlines()[-1]
    metadata = email.parser.Parser().parsestr((tmp_path / "meta" / dist_info / "METADATA").read_text())
    assert metadata["Version"] == f"{job.version}+pt214cu130"
    assert [r for r in metadata.get_all("Requires-Dist") if re.match(r"torch\b", r)] == ["torch==2.14.*"]


def test_pinned_sdists_are_cached_with_their_hashes() -> None:
    for version in VERSIONS:
        job = job_for(version)
        path = fetch_sdist(job)
        assert path.name == job.sdist.filename and sha256_of(path) == job.sdist.sha256


def test_a_full_arch_causal_conv1d_job_hands_the_pool_its_split_parts_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_SPLIT_CORES", "64")  # enough cores that all six parts pay
    job = job_for("causal-conv1d-1.7.0", archs=("7.5", "8.0", "9.0", "10.0", "12.0"))
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    parts = {f"causal_conv1d_bwd_part{k}.cu" for k in range(1, 7)}
    assert set(result.part_shares) == parts
    assert {whole for whole, _ in result.part_shares.values()} == {"causal_conv1d_bwd.cu"}
    assert sum(share for _, share in result.part_shares.values()) == pytest.approx(1.0)
    # the parts are uneven (six costliest instantiations cannot share one): the costlier ones must go first
    assert len({round(share, 6) for _, share in result.part_shares.values()}) > 1
    assert not apply_recipe(fresh_tree(job_for("causal-conv1d-1.7.0", archs=("9.0",)), tmp_path / "narrow"),
                            job_for("causal-conv1d-1.7.0", archs=("9.0",))).part_shares
