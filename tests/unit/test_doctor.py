"""doctor's verdicts and fixes over recorded environments: `doctor --json` outputs captured on this machine (torch
2.14.1 in a venv, the real causal-conv1d wheel relabelled for torch 2.13 and then the right one), one written by
hand for the H200 box (marked so; the GPU acceptance run captures the real one), and edited copies of them that
cover every verdict. Each verdict's message is asserted word for word."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from builder.doctor.fix import find_fix
from builder.doctor.probe import Environment, parse_smi_cuda, string_abi
from builder.doctor.report import as_json, render_text
from builder.doctor.verdicts import diagnose
from index_site import layout
from index_site.catalog import Catalog
from index_site.render import render_site
from index_site.report import ScanStats
from scripts.bench.wheels import indexed_wheel

DATA = Path(__file__).parent / "data" / "doctor"
INDEX = "https://wheels.example.org"


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())["environment"]


def env_of(data: dict) -> Environment:
    return Environment.from_dict(data)


def messages(data: dict) -> list[tuple[str, str]]:
    (diagnosis, *_) = diagnose(env_of(data))
    return [(v.code, v.message) for v in diagnosis.verdicts]


def extension(data: dict, package: int = 0) -> dict:
    return data["packages"][package]["extensions"][0]


@pytest.fixture
def cpu_ok() -> dict:
    return recorded("cpu-ok.json")


@pytest.fixture
def gpu_ok() -> dict:
    return recorded("gpu-h200-by-hand.json")


# -- the recorded environments as they are ---------------------------------------------------------------------


def test_the_recorded_json_is_what_the_verdicts_still_say() -> None:
    """Replaying each capture gives the verdicts it recorded: the fixtures and the code agree."""
    for path in sorted(DATA.glob("*.json")):
        document = json.loads(path.read_text())
        env = env_of(document["environment"])
        replayed = [(d.package.name, [(v.code, v.message) for v in d.verdicts]) for d in diagnose(env)]
        saved = [(d["package"], [(v["code"], v["message"]) for v in d["verdicts"]]) for d in document["diagnoses"]]
        assert replayed == saved, path.name


def test_ok_on_this_machine(cpu_ok: dict) -> None:
    assert messages(cpu_ok) == [
        (
            "ok",
            (
                "causal-conv1d 1.7.0+pt214cu130 fits torch 2.14.1+cu130 and has SASS for sm_90 (no "
                "GPU seen here to check "
                "against); its extension imports."
            ),
        )
    ]


def test_ok_on_the_h200(gpu_ok: dict) -> None:
    verdicts = [(d.package.name, [(v.code, v.message) for v in d.verdicts]) for d in diagnose(env_of(gpu_ok))]
    assert verdicts == [
        (
            "causal-conv1d",
            [
                (
                    "ok",
                    (
                        "causal-conv1d 1.7.0+pt211cu130 fits torch 2.11.0+cu130 and runs on sm_90 "
                        "(NVIDIA H200); its extension imports."
                    ),
                )
            ],
        ),
        (
            "mamba-ssm",
            [
                (
                    "ok",
                    (
                        "mamba-ssm 2.3.2.post1+pt211cu130 fits torch 2.11.0+cu130 and runs on sm_90 "
                        "(NVIDIA H200); its extension imports."
                    ),
                )
            ],
        ),
    ]


def test_built_for_another_torch_minor_as_recorded() -> None:
    assert messages(recorded("cpu-torch-minor.json")) == [
        (
            "torch-minor",
            (
                "causal-conv1d 1.7.0+pt213cu130 was built for torch 2.13, but this environment has "
                "torch 2.14.1+cu130; a "
                "compiled extension only loads into the torch minor it was built against."
            ),
        )
    ]


def test_no_packages_installed() -> None:
    document = json.loads((DATA / "cpu-no-packages.json").read_text())
    env = env_of(document["environment"])
    assert diagnose(env) == ()
    text = render_text(env, (), {}, ("causal-conv1d", "mamba-ssm"))
    assert text.startswith("causal-conv1d: not installed\nmamba-ssm: not installed\n(read /tmp/i12-venv/bin/python; ")
    assert "\n\nwhat doctor read:\n" in text


# -- edited variants: one per verdict -----------------------------------------------------------------------------


def test_cxx_abi_mismatch(cpu_ok: dict) -> None:
    extension(cpu_ok)["cxx11_abi"] = False
    assert messages(cpu_ok) == [
        (
            "cxx-abi",
            (
                "causal-conv1d's extension uses the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0) but "
                "torch 2.14.1+cu130 was "
                "built with the C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1), so the torch symbols it needs do not "
                "exist (undefined symbol: _ZN3c10...)."
            ),
        )
    ]


def test_upstream_label_with_the_other_abi(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+cu13torch2.14cxx11abiFALSE"
    assert [code for code, _ in messages(cpu_ok)] == ["cxx-abi"]


def test_no_sass_and_no_ptx_for_the_gpu(gpu_ok: dict) -> None:
    extension(gpu_ok).update(sass=["8.0", "8.6"], ptx=[])
    assert messages(gpu_ok) == [
        (
            "no-kernel-image",
            (
                "causal-conv1d's extension has SASS for sm_80, sm_86 and PTX for none, none of which "
                "runs on the NVIDIA "
                "H200 (sm_90): 'no kernel image is available for execution on the device'."
            ),
        )
    ]


def test_ptx_the_driver_jit_compiles_is_ok_with_a_warning(gpu_ok: dict) -> None:
    extension(gpu_ok).update(sass=["8.0"], ptx=["8.0"])
    verdicts = messages(gpu_ok)
    assert verdicts[0] == (
        "ptx-jit",
        (
            "causal-conv1d's extension has no SASS for the NVIDIA H200 (sm_90), but the driver "
            "JIT-compiles its PTX for "
            "compute_80 on first use: it works, the first call of each kernel is slow."
        ),
    )
    assert verdicts[1][0] == "ok" and diagnose(env_of(gpu_ok))[0].ok


def test_arch_specific_ptx_does_not_cover_another_gpu(gpu_ok: dict) -> None:
    extension(gpu_ok).update(sass=["10.0a"], ptx=["10.0a"])
    assert [code for code, _ in messages(gpu_ok)] == ["no-kernel-image"]


def test_glibc_too_old(cpu_ok: dict) -> None:
    cpu_ok["glibc"] = "2.27"
    extension(cpu_ok)["glibc"] = "2.28"
    path = extension(cpu_ok)["path"]
    assert messages(cpu_ok) == [
        (
            "glibc-too-old",
            (
                f"causal-conv1d's extension {path} needs GLIBC_2.28, but this system's glibc is 2.27 "
                "(version `GLIBC_2.28' "
                "not found)."
            ),
        )
    ]


def test_libstdcxx_too_old(cpu_ok: dict) -> None:
    cpu_ok.update(libstdcxx="/opt/conda/lib/libstdc++.so.6", libstdcxx_glibcxx="3.4.29", libstdcxx_cxxabi="1.3.13")
    extension(cpu_ok).update(glibcxx="3.4.30")
    assert messages(cpu_ok) == [
        (
            "libstdcxx-too-old",
            (
                "causal-conv1d's extension needs GLIBCXX_3.4.30, but the libstdc++ this Python loads "
                "(/opt/conda/lib/libstdc++.so.6) provides at most GLIBCXX_3.4.29."
            ),
        )
    ]


def test_cxxabi_too_old(cpu_ok: dict) -> None:
    cpu_ok.update(libstdcxx_cxxabi="1.3.10")
    extension(cpu_ok).update(cxxabi="1.3.11")
    assert [m for c, m in messages(cpu_ok)] == [
        (
            "causal-conv1d's extension needs CXXABI_1.3.11, but the libstdc++ this Python loads "
            f"({cpu_ok['libstdcxx']}) provides at most CXXABI_1.3.10."
        )
    ]


def test_extension_missing_from_an_sdist_build(cpu_ok: dict) -> None:
    cpu_ok["packages"][0].update(version="1.7.0", extensions=[], from_source=True)
    assert messages(cpu_ok) == [
        (
            "extension-missing",
            (
                "causal-conv1d 1.7.0 has no compiled extension (causal_conv1d_cuda): it was built from source without "
                "building its CUDA code (an sdist install where nvcc or torch was missing, or a "
                "SKIP_CUDA_BUILD switch), so "
                "every kernel call fails."
            ),
        )
    ]


def test_driver_too_old_for_the_toolkit(gpu_ok: dict) -> None:
    gpu_ok.update(driver="550.54.15", driver_cuda="12.4")
    (first, *_) = diagnose(env_of(gpu_ok))
    assert [(v.code, v.message) for v in first.verdicts] == [
        (
            "driver-too-old",
            (
                "causal-conv1d was built with CUDA 13.0, which needs NVIDIA driver 580.65.06 or "
                "newer; this machine has "
                "driver 550.54.15 (CUDA 12.4) (CUDA driver version is insufficient for CUDA runtime version)."
            ),
        )
    ]


def test_torch_missing(cpu_ok: dict) -> None:
    cpu_ok["torch"] = {"error": "importing torch failed: ModuleNotFoundError: No module named 'torch'"}
    extension(cpu_ok).update(imports=None)
    assert messages(cpu_ok) == [
        (
            "torch-missing",
            (
                "torch does not import in this Python (importing torch failed: ModuleNotFoundError: No module named "
                "'torch'), and causal-conv1d needs it."
            ),
        )
    ]


def test_an_import_failure_is_explained_when_recognised(cpu_ok: dict) -> None:
    error = "ImportError: causal_conv1d_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
    extension(cpu_ok).update(imports=False, import_error=error)
    assert messages(cpu_ok) == [
        (
            "torch-minor",
            (
                "causal_conv1d_cuda does not import: torch does not define "
                "_ZN3c104cuda9SetDeviceEi...: the extension was "
                f"built against another torch minor (or with the other C++ ABI), whose symbols differ. ({error})"
            ),
        )
    ]


def test_an_unrecognised_import_failure_is_quoted(cpu_ok: dict) -> None:
    extension(cpu_ok).update(imports=False, import_error="Segmentation fault (exit code -11)")
    assert messages(cpu_ok) == [
        (
            "import-failed",
            (
                "causal_conv1d_cuda does not import, for a reason doctor does not recognise: Segmentation fault (exit "
                "code -11)"
            ),
        )
    ]


def test_root_causes_come_first(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    cpu_ok["glibc"] = "2.17"
    assert [code for code, _ in messages(cpu_ok)] == ["glibc-too-old", "torch-minor"]


# -- the fix -------------------------------------------------------------------------------------------------------


def site_fetch(*wheels: tuple[str, str, str]):
    """The PEP 691 pages render_site writes for these (project, version, python) wheels, served from memory."""
    files = [
        indexed_wheel(f"{project.replace('-', '_')}-{version}-{python}-{python}-manylinux_2_28_x86_64.whl", "a")
        for project, version, python in wheels
    ]
    pages = render_site(Catalog(wheels=tuple(files), failures=(), rejected=(), stats=ScanStats()), base_url=INDEX)

    def fetch(url: str) -> dict | None:
        path = url.removeprefix(INDEX + "/")
        return json.loads(pages[path]) if path in pages else None

    return fetch


def the_fix(data: dict, fetch, index: str | None = INDEX):
    env = env_of(data)
    return find_fix(env, diagnose(env)[0], index, fetch)


def test_the_fix_installs_the_variant_of_this_torch(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    fetch = site_fetch(("causal-conv1d", "1.7.0+pt214cu130", "cp311"), ("causal-conv1d", "1.7.0+pt213cu130", "cp311"))
    fix = the_fix(cpu_ok, fetch)
    python = cpu_ok["executable"]
    assert fix.pip == (
        f"{python} -m pip install --force-reinstall --no-deps causal-conv1d==1.7.0+pt214cu130 "
        f"-f {INDEX}/whl/pt214cu130.html"
    )
    assert fix.uv == (
        f"uv pip install --python {python} --reinstall --no-deps causal-conv1d==1.7.0+pt214cu130 "
        f"--find-links {INDEX}/whl/pt214cu130.html"
    )
    assert fix.wheel.startswith("causal_conv1d-1.7.0+pt214cu130-cp311-")
    assert fix.page == f"{INDEX}/{layout.setup_path('pt214cu130', '3.11')}"  # the page index_site writes


def test_no_wheel_for_this_python_names_the_nearest_and_the_matrix_line(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    fetch = site_fetch(
        ("causal-conv1d", "1.7.0+pt214cu130", "cp312"),
        ("causal-conv1d", "1.7.0+pt213cu130", "cp311"),
        ("causal-conv1d", "1.7.0+pt214cu126", "cp311"),
    )
    fix = the_fix(cpu_ok, fetch)
    assert fix.pip is None
    assert fix.note.startswith(
        "the index has no causal-conv1d wheel for pt214cu130 (cp311, x86_64, glibc 2.36); the nearest is "
        "causal_conv1d-1.7.0+pt214cu126-cp311-cp311-"
    )
    assert fix.note.endswith(
        "(torch 2.14, cu126), which needs that torch; or build it: add a profile to matrix.yaml with torch: "
        '["2.14"], accelerators: [cu130], python: ["3.11"].'
    )


def test_no_wheel_anywhere(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    fix = the_fix(cpu_ok, site_fetch(("mamba-ssm", "2.3.2.post1+pt214cu130", "cp311")))
    assert fix.note == (
        "the index has no causal-conv1d wheel for pt214cu130 (cp311, x86_64, glibc 2.36), nor for any other variant; "
        'or build it: add a profile to matrix.yaml with torch: ["2.14"], accelerators: [cu130], python: ["3.11"].'
    )


def test_without_an_index_the_fix_names_the_variant(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    fix = the_fix(cpu_ok, site_fetch(), index=None)
    assert fix.note == "the wheel to install is causal-conv1d for pt214cu130; pass --index-url to check it exists."


def test_a_driver_problem_gets_no_wheel(gpu_ok: dict) -> None:
    gpu_ok.update(driver="550.54.15", driver_cuda="12.4")
    fix = the_fix(gpu_ok, site_fetch())
    assert fix.note == "no other wheel helps here: the fix is the driver or the system named above."


def test_a_cpu_torch_needs_a_cuda_torch_first(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    cpu_ok["torch"].update(version="2.14.1+cpu", cuda=None)
    fix = the_fix(cpu_ok, site_fetch())
    assert fix.note == "torch 2.14.1+cpu is a CPU build: install a CUDA build of torch first, then run doctor again."


def test_ok_needs_no_fix(cpu_ok: dict) -> None:
    assert the_fix(cpu_ok, site_fetch()) is None


# -- the answer's shape ------------------------------------------------------------------------------------------


def test_text_says_the_answer_first_then_the_evidence(cpu_ok: dict) -> None:
    cpu_ok["packages"][0]["version"] = "1.7.0+pt213cu130"
    env = env_of(cpu_ok)
    diagnoses = diagnose(env)
    fetch = site_fetch(("causal-conv1d", "1.7.0+pt214cu130", "cp311"))
    fixes = {"causal-conv1d": find_fix(env, diagnoses[0], INDEX, fetch)}
    lines = render_text(env, diagnoses, fixes, ("mamba-ssm",)).splitlines()
    assert lines[0] == "causal-conv1d 1.7.0+pt213cu130: built for another torch minor"
    assert lines[2].startswith("  fix: installs causal_conv1d-1.7.0+pt214cu130-cp311-")
    assert lines[2].endswith(", built for torch 2.14 (pt214cu130):")
    assert lines[3] == "    " + fixes["causal-conv1d"].pip
    assert lines[6] == f"  this setup's page: {INDEX}/select/pt214cu130-cp311.html"
    assert lines[7] == "mamba-ssm: not installed"
    assert "what doctor read:" in lines and any(
        line.startswith("  torch 2.14.1+cu130 (CUDA 13.0, C++11 ABI)") for line in lines
    )


def test_json_round_trips_the_environment(gpu_ok: dict) -> None:
    env = env_of(gpu_ok)
    document = as_json(env, diagnose(env), {})
    assert Environment.from_dict(json.loads(json.dumps(document))["environment"]) == env
    assert document["ok"] is True and [d["headline"] for d in document["diagnoses"]] == ["OK", "OK"]


def test_every_verdict_code_has_a_headline_and_a_fixture_variant() -> None:
    from builder.doctor import explain, report

    codes = {
        value
        for name, value in vars(explain).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, str)
    }
    assert codes == set(report.HEADLINES)
    tested = Path(__file__).read_text()
    assert all(f'"{code}"' in tested for code in codes - {"ok"}), "each verdict is asserted above"


# -- readers of nvidia-smi and symbols -----------------------------------------------------------------------------


def test_nvidia_smi_banner() -> None:
    banner = "| NVIDIA-SMI 580.95.05    Driver Version: 580.95.05    CUDA Version: 13.0     |"
    assert parse_smi_cuda(banner) == "13.0"
    assert parse_smi_cuda("no banner") is None


def test_string_abi_from_symbols() -> None:
    cxx11 = "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
    old = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"
    assert string_abi((cxx11, "PyInit_x")) is True
    assert string_abi((old, "PyInit_x")) is False
    assert string_abi(("PyInit_x", "cudaLaunchKernel")) is None


def test_fixtures_are_marked_by_origin() -> None:
    by_hand = json.loads((DATA / "gpu-h200-by-hand.json").read_text())
    assert "written by hand" in by_hand["_origin"]
    assert copy.deepcopy(by_hand["environment"]["gpus"]) == [{"name": "NVIDIA H200", "arch": "9.0"}]
    assert layout.DOCTOR == "doctor.py"
