"""Recipe logic on small setup.py / pyproject.toml texts written for these tests (the real upstream files are
exercised in tests/integration/test_recipes.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from builder.core.errors import ConfigError, RecipeError
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.plan.job import Job, PatchRef, Recipe, Sdist
from builder.steps.recipes import prelude, pyproject, recipe, setup_py
from builder.steps.recipes.facts import package_facts, parse_package_facts

W = "pkg 1.0"


def make_job(**overrides: object) -> Job:
    fields: dict[str, object] = dict(
        package="mamba-ssm", version="2.3.2.post1", sdist=Sdist(filename="x.tar.gz", sha256="0" * 64),
        recipe=Recipe(env=(("MAMBA_FORCE_BUILD", "TRUE"),), abi_env="MAMBA_FORCE_CXX11_ABI",
                      patches=(PatchRef(name="cxx20", torch=">=2.14"),)),
        torch="2.14.1", accelerator=Accelerator.parse("cu130"), python="3.11", cxx11_abi=True, archs=("9.0",),
        manylinux="manylinux_2_28",
    )
    fields.update(overrides)
    return Job(**fields)


# --- arch flags -------------------------------------------------------------------------------------------------


def test_gencode_flags_for_plain_family_and_ptx_archs() -> None:
    assert recipe.cuda_gencode_flags(tuple(map(Arch.parse, ("9.0", "10.0f", "12.0+PTX"))), W) == (
        "-gencode", "arch=compute_90,code=sm_90",
        "-gencode", "arch=compute_100f,code=sm_100f",
        "-gencode", "arch=compute_120,code=sm_120",
        "-gencode", "arch=compute_120,code=compute_120",
    )
    assert recipe.cuda_gencode_flags((Arch.parse("9.0a"),), W) == ("-gencode", "arch=compute_90a,code=sm_90a")


@pytest.mark.parametrize("arch", ["gfx942", "12.10"])
def test_an_arch_nvcc_cannot_name_is_refused(arch: str) -> None:
    with pytest.raises(RecipeError, match=f"pkg 1.0: '{arch}' is not a CUDA arch"):
        recipe.cuda_gencode_flags((Arch.parse(arch),), W)


@pytest.mark.parametrize("arch", ["90", "sm_90", "9.0+ptx"])
def test_a_malformed_arch_never_reaches_a_job(arch: str) -> None:
    with pytest.raises(ValueError, match="is not a GPU architecture"):
        make_job(archs=(arch,))


def test_rocm_archs_become_offload_flags_and_env() -> None:
    job = make_job(accelerator=Accelerator.parse("rocm6.2"), archs=("gfx90a", "gfx942"))
    assert recipe.arch_flags(job, W) == ("--offload-arch=gfx90a", "--offload-arch=gfx942")
    env = recipe.build_env(job, package_facts("mamba-ssm"))
    assert env["HIP_ARCHITECTURES"] == env["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx942"
    assert "TORCH_CUDA_ARCH_LIST" not in env


def test_torch_arch_list_strategy_leaves_flags_alone_and_sets_the_list() -> None:
    job = make_job(recipe=Recipe(arch_control="torch-arch-list"), archs=("8.0", "9.0+PTX"))
    assert recipe.arch_flags(job, W) is None
    assert recipe.build_env(job, package_facts("mamba-ssm"))["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"


def test_env_carries_switches_label_and_abi() -> None:
    facts = package_facts("mamba-ssm")
    env = recipe.build_env(make_job(), facts)
    assert env == {"MAMBA_FORCE_BUILD": "TRUE", "MAMBA_LOCAL_VERSION": "pt214cu130",
                   "MAMBA_FORCE_CXX11_ABI": "TRUE", "TORCH_CUDA_ARCH_LIST": "9.0"}
    assert recipe.build_env(make_job(cxx11_abi=False), facts)["MAMBA_FORCE_CXX11_ABI"] == "FALSE"


# --- the prelude's build-time logic -------------------------------------------------------------------------------


def test_split_arch_flags_removes_every_spelling_with_its_value() -> None:
    flags = ["-O3", "-gencode", "arch=compute_75,code=sm_75", "-gencode=arch=compute_80,code=sm_80",
             "--generate-code", "arch=compute_87,code=sm_87", "-arch=sm_90", "--threads", "4", "-lineinfo"]
    kept, removed = prelude.wheelwright_split_arch_flags(flags, "cuda")
    assert kept == ["-O3", "--threads", "4", "-lineinfo"]
    assert len(removed) == 6


def test_split_arch_flags_for_rocm() -> None:
    kept, removed = prelude.wheelwright_split_arch_flags(["-O3", "--offload-arch=native", "-DX"], "rocm")
    assert kept == ["-O3", "-DX"] and removed == ["--offload-arch=native"]


def ext(nvcc: list[str]) -> SimpleNamespace:
    return SimpleNamespace(name="k", extra_compile_args={"cxx": ["-O3"], "nvcc": nvcc})


def test_set_arch_flags_replaces_upstream_list_with_the_jobs() -> None:
    module = ext(["-O3", "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=sm_90"])
    upstream = prelude.wheelwright_set_arch_flags([module], "cuda", ["-gencode", "arch=compute_90a,code=sm_90a"], W)
    assert module.extra_compile_args["nvcc"] == ["-O3", "-gencode", "arch=compute_90a,code=sm_90a"]
    assert upstream[1] == "arch=compute_75,code=sm_75"


def test_set_arch_flags_fails_when_upstream_passed_none_or_hid_them() -> None:
    with pytest.raises(prelude.WheelwrightRecipeError, match="passed no cuda arch flags"):
        prelude.wheelwright_set_arch_flags([ext(["-O3"])], "cuda", ["-gencode", "arch=compute_90,code=sm_90"], W)
    with pytest.raises(prelude.WheelwrightRecipeError, match=r"unrecognised arch flags \['-Xptxas=-arch=sm_75'\]"):
        prelude.wheelwright_set_arch_flags([ext(["-gencode", "x", "-Xptxas=-arch=sm_75"])], "cuda", [], W)
    flat = SimpleNamespace(name="k", extra_compile_args=["-O3"])
    with pytest.raises(prelude.WheelwrightRecipeError, match=r"extension k has no extra_compile_args\['nvcc'\]"):
        prelude.wheelwright_set_arch_flags([flat], "cuda", [], W)


def test_pin_torch_replaces_only_torch() -> None:
    pinned, found = prelude.wheelwright_pin_torch(["torch", "torchvision", "Torch>=2", "ninja"], "torch==2.14.*")
    assert pinned == ["torch==2.14.*", "torchvision", "torch==2.14.*", "ninja"] and found == 2


def run_wrapper(monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> dict:
    captured: dict = {}
    monkeypatch.setattr(prelude, "wheelwright_upstream_setup", lambda **given: captured.update(given))
    monkeypatch.setattr(prelude, "WHEELWRIGHT_JOB", {
        "identifier": "pkg-1.0+pt214cu130-cp311-x86_64", "version": "1.0+pt214cu130",
        "torch_requirement": "torch==2.14.*", "torch_in_install_requires": True, "arch_kind": "cuda",
        "arch_flags": ["-gencode", "arch=compute_90,code=sm_90"],
    })
    prelude.wheelwright_setup(**kwargs)
    return captured


def test_wrapper_forces_version_pin_and_archs(monkeypatch: pytest.MonkeyPatch) -> None:
    module = ext(["-gencode", "arch=compute_75,code=sm_75"])
    given = run_wrapper(monkeypatch, version="1.0", install_requires=["torch", "ninja"], ext_modules=[module])
    assert given["version"] == "1.0+pt214cu130"
    assert given["install_requires"] == ["torch==2.14.*", "ninja"]
    assert module.extra_compile_args["nvcc"] == ["-gencode", "arch=compute_90,code=sm_90"]
    assert given["options"] == {"bdist_wheel": {"compression": "stored"}}  # repair's input only: not deflated


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(version="1.1", install_requires=["torch"]), r"computes version '1.1', not 1.0"),
        (dict(version="1.0", install_requires=["ninja"]), "install_requires does not list torch"),
        (dict(version="1.0", install_requires=["torch"], ext_modules=[]), "declares no extension modules"),
    ],
)
def test_wrapper_refuses_unexpected_arguments(monkeypatch: pytest.MonkeyPatch, kwargs: dict, message: str) -> None:
    kwargs.setdefault("ext_modules", [ext(["-gencode", "arch=compute_75,code=sm_75"])])
    with pytest.raises(prelude.WheelwrightRecipeError, match=message):
        run_wrapper(monkeypatch, **kwargs)


# --- setup.py shape -----------------------------------------------------------------------------------------------

SETUP = textwrap.dedent('''\
    # -*- coding: utf-8 -*-
    """A setup.py written for these tests."""
    from __future__ import annotations
    import os
    from setuptools import setup
    FORCE = os.getenv("PKG_FORCE_BUILD", "FALSE") == "TRUE"
    LOCAL = os.environ.get("PKG_LOCAL_VERSION")
    flags = ["-gencode", "arch=compute_80,code=sm_80"]
    setup(name="pkg", version="1.0", ext_modules=[], install_requires=["torch", "ninja"])
''')


def test_shape_finds_the_call_env_reads_and_insertion_point() -> None:
    shape = setup_py.read_shape(SETUP, W)
    assert shape.insert_line == 3  # after the docstring and the __future__ import, before `import os`
    assert shape.env_reads == {"PKG_FORCE_BUILD": frozenset({"TRUE"}), "PKG_LOCAL_VERSION": frozenset()}
    setup_py.check_env_reads(shape, {"PKG_FORCE_BUILD": "TRUE", "PKG_LOCAL_VERSION": None}, W)
    setup_py.check_arch_flags(shape, "cuda", W)
    setup_py.check_install_requires_torch(shape, W)


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ({"PKG_FORCE_BUILD": "1"}, r"compares \$PKG_FORCE_BUILD with \['TRUE'\], the recipe sets '1'"),
        ({"PKG_SKIP": None}, r"no longer reads \$PKG_SKIP"),
    ],
)
def test_env_reads_that_would_not_take_effect_are_refused(expected: dict, message: str) -> None:
    with pytest.raises(RecipeError, match=f"pkg 1.0: setup.py {message}"):
        setup_py.check_env_reads(setup_py.read_shape(SETUP, W), expected, W)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t + "setup(name='again', version='1', ext_modules=[])\n", "has 2 setup\\(\\) calls"),
        (lambda t: t.replace('version="1.0", ', ""), "is not given version"),
        (lambda t: t.replace("arch=compute_80,code=sm_80", "-O3"), "hardcodes no '-gencode"),
        (lambda t: t.replace('"torch", ', ""), r"install_requires does not list torch: \['ninja'\]"),
        (lambda t: t.replace("setup(name", "setup(\nname"), None),
    ],
)
def test_shape_changes_fail_loudly(edit, message: str | None) -> None:
    def check() -> None:
        shape = setup_py.read_shape(edit(SETUP), W)
        setup_py.check_arch_flags(shape, "cuda", W)
        setup_py.check_install_requires_torch(shape, W)

    if message is None:  # a layout change alone is no shape change
        check()
        return
    with pytest.raises(RecipeError, match=message):
        check()


def test_injection_keeps_future_import_first_and_routes_the_call() -> None:
    shape = setup_py.read_shape(SETUP, W)
    patched = setup_py.inject_prelude(SETUP, shape, {"identifier": "x"}, W)
    compile(patched, "setup.py", "exec")
    lines = patched.splitlines()
    assert lines[:3] == SETUP.splitlines()[:3] and lines[3] == setup_py.PRELUDE_BEGIN
    assert (
        lines[-1] == 'wheelwright_setup(name="pkg", version="1.0", ext_modules=[], install_requires=["torch", "ninja"])'
    )
    assert "WHEELWRIGHT_JOB = {'identifier': 'x'}" in patched
    with pytest.raises(RecipeError, match="already has the wheelwright prelude"):
        setup_py.read_shape(patched, W)


def test_rename_counts_columns_in_bytes() -> None:
    text = 'NAME = "ünïcödé"; setuptools.setup(name=NAME, version="1", ext_modules=[])\n'
    patched = setup_py.inject_prelude(text, setup_py.read_shape(text, W), {}, W)
    assert patched.endswith('NAME = "ünïcödé"; wheelwright_setup(name=NAME, version="1", ext_modules=[])\n')


# --- pyproject.toml -------------------------------------------------------------------------------------------------

PYPROJECT = textwrap.dedent('''\
    [project]
    name = "pkg"
    dynamic = ["version"]
    dependencies = [
        "torch",
        'einops',
        "triton>=3.5.0",
    ]
    [build-system]
    requires = ["setuptools", "torch"]
''')


def test_requirements_source() -> None:
    assert pyproject.requirements_source(None, W) == pyproject.SETUP_PY
    assert pyproject.requirements_source("[build-system]\nrequires = []\n", W) == pyproject.SETUP_PY
    assert pyproject.requirements_source(PYPROJECT, W) == pyproject.PYPROJECT
    dynamic = PYPROJECT.replace('dynamic = ["version"]', 'dynamic = ["version", "dependencies"]')
    assert pyproject.requirements_source(dynamic, W) == pyproject.SETUP_PY
    with pytest.raises(RecipeError, match="neither lists dependencies nor declares them dynamic"):
        pyproject.requirements_source('[project]\nname = "pkg"\ndynamic = ["version"]\n', W)


def test_pin_torch_in_pyproject_touches_only_project_dependencies() -> None:
    patched = pyproject.pin_torch(PYPROJECT, "torch==2.14.*", W)
    assert patched == PYPROJECT.replace('    "torch",', '    "torch==2.14.*",')


def test_pin_torch_in_pyproject_fails_without_torch_or_an_editable_array() -> None:
    with pytest.raises(RecipeError, match=r"dependencies do not list torch: \['einops', 'triton>=3.5.0'\]"):
        pyproject.pin_torch(PYPROJECT.replace('    "torch",\n', ""), "torch==2.14.*", W)
    one_line = '[project]\nname = "pkg"\ndependencies = ["torch"]\n'
    with pytest.raises(RecipeError, match="no multi-line 'dependencies = \\[' array"):
        pyproject.pin_torch(one_line, "torch==2.14.*", W)


def test_static_version_in_pyproject_is_refused() -> None:
    with pytest.raises(RecipeError, match="sets a static version"):
        pyproject.check_version_dynamic('[project]\nname = "pkg"\nversion = "1.0"\n', W)


# --- patches and facts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "job", "applies"),
    [
        (PatchRef(name="cxx20", torch=">=2.14"), make_job(torch="2.14.1"), True),
        (PatchRef(name="cxx20", torch=">=2.14"), make_job(torch="2.11.0"), False),
        (PatchRef(name="cxx20", versions="<2.3"), make_job(version="2.2.6.post3"), True),
        (PatchRef(name="cxx20", versions="<2.3"), make_job(version="2.3.2.post1"), False),
        (PatchRef(name="cxx20"), make_job(), True),
    ],
)
def test_patch_ranges(ref: PatchRef, job: Job, applies: bool) -> None:
    assert recipe.patch_applies(ref, job) is applies


def test_unknown_patch_and_no_op_patch_are_errors(tmp_path: Path) -> None:
    job = make_job(recipe=Recipe(patches=(PatchRef(name="nope"),)))
    known = "cxx20, drop-buildtools, split-causal-conv1d-bwd"
    with pytest.raises(RecipeError, match=f"unknown patch 'nope' \\(known: {known}\\)"):
        recipe.select_patches(job, W)
    (tmp_path / "setup.py").write_text('flags = ["-std=c++20"]\n')
    with pytest.raises(RecipeError, match="patch cxx20 applies \\(torch 2.14.1\\) but found nothing to change"):
        recipe.run_patches(tmp_path, make_job(), recipe.select_patches(make_job(), W), W)


def test_package_facts_are_checked_on_load() -> None:
    assert package_facts("Mamba_SSM").local_version_env == "MAMBA_LOCAL_VERSION"
    with pytest.raises(RecipeError, match="flash-attn: no recipe facts in builder/data/recipes.toml"):
        package_facts("flash-attn")
    with pytest.raises(ConfigError, match="needs exactly the keys"):
        parse_package_facts({"packages": {"pkg": {"local_version_env": "X"}}})
    with pytest.raises(ConfigError, match="'lower' is not an environment variable name"):
        parse_package_facts({"packages": {"pkg": {"local_version_env": "lower", "rocm_arch_env": "X"}}})


def test_sdist_version_must_match_the_job(tmp_path: Path) -> None:
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: mamba_ssm\nVersion: 2.2.6.post3\n")
    recipe.check_sdist_version(tmp_path, make_job(version="2.2.6.post3"), W)
    with pytest.raises(RecipeError, match="holds version 2.2.6.post3, not 2.3.2.post1"):
        recipe.check_sdist_version(tmp_path, make_job(), W)


def test_the_plan_knows_exactly_the_patches_the_recipes_define() -> None:
    from builder.plan.job import PATCH_NAMES
    from builder.steps.recipes import PATCHES

    assert set(PATCHES) == PATCH_NAMES


def test_recipe_facts_errors_name_the_file_table_and_key(tmp_path: Path) -> None:
    from builder.core.data import load_data
    from builder.steps.recipes.facts import RecipeFacts

    path = tmp_path / "recipes.toml"
    path.write_text('[packages.Pkg_A]\nlocal_version_env = "A"\nrocm_arch_env = "B"\n')
    with pytest.raises(ConfigError, match=r"recipes.toml: \[packages\] Pkg_A: write the package name normalized"):
        load_data(path, RecipeFacts, what="the recipe facts")
    path.write_text("[packages\n")
    with pytest.raises(ConfigError, match=r"recipes.toml: not valid TOML"):
        load_data(path, RecipeFacts, what="the recipe facts")
