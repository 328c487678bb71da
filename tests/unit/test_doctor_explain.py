"""`doctor --explain`: each error message issue 12 quotes (and the ones doctor's own import check meets) maps to its
verdict with its cause in one sentence."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from builder.doctor.explain import explain, explain_import_error
from builder.doctor.main import run

# The messages as users paste them, each with the verdict code and a phrase its cause must say.
QUOTED = [
    (
        "RuntimeError: The causal_conv1d CUDA extension is incompatible with the current PyTorch version",
        "torch-minor",
        "the causal_conv1d extension was compiled against a different torch minor than the one installed",
    ),
    (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "no-kernel-image",
        "no SASS for this GPU's compute capability and no PTX the driver could compile for it",
    ),
    (
        (
            "ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.11' not found (required by "
            "/opt/venv/lib/python3.11/site-packages/causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so)"
        ),
        "libstdcxx-too-old",
        (
            "needs CXXABI_1.3.11, newer than what the libstdc++ this process loaded "
            "(/usr/lib/x86_64-linux-gnu/libstdc++.so.6)"
        ),
    ),
    (
        (
            "ImportError: /opt/venv/lib/python3.11/site-packages/selective_scan_cuda.cpython-311-x86_64-linux-gnu.so: "
            "undefined symbol: _ZN3c104cuda9SetDeviceEi"
        ),
        "torch-minor",
        "torch does not define _ZN3c104cuda9SetDeviceEi...: the extension was built against another torch minor",
    ),
    (
        (
            "ImportError: causal_conv1d_cuda.so: undefined symbol: "
            "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
        ),
        "cxx-abi",
        "its _GLIBCXX_USE_CXX11_ABI does not match torch's",
    ),
    (
        (
            "ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by "
            "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so)"
        ),
        "glibc-too-old",
        "needs GLIBC_2.32, newer than this system's glibc",
    ),
    ("GLIBC_2.32 not found", "glibc-too-old", "needs GLIBC_2.32"),
    (
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        "driver-too-old",
        "the NVIDIA driver is older than the CUDA runtime",
    ),
    (
        "ModuleNotFoundError: No module named 'causal_conv1d_cuda'",
        "extension-missing",
        "causal_conv1d_cuda is the package's compiled CUDA extension and it is not installed",
    ),
    (
        "ImportError: libstdc++.so.6: version `GLIBCXX_3.4.30' not found",
        "libstdcxx-too-old",
        "needs GLIBCXX_3.4.30",
    ),
]


@pytest.mark.parametrize(("line", "code", "cause"), QUOTED, ids=[q[1] + "-" + str(i) for i, q in enumerate(QUOTED)])
def test_each_quoted_error_maps_to_its_verdict(line: str, code: str, cause: str) -> None:
    (finding,) = explain(f'Traceback (most recent call last):\n  File "x.py", line 1\n{line}\n')
    assert finding.code == code
    assert cause in finding.cause
    assert finding.quote == line[:300]
    assert finding.cause.endswith(".") and finding.cause.count(". ") == 0, "one sentence"


def test_a_log_gives_one_finding_per_cause_in_order() -> None:
    log = "\n".join([QUOTED[5][0], "noise", QUOTED[1][0], QUOTED[5][0], QUOTED[1][0]])
    assert [f.code for f in explain(log)] == ["glibc-too-old", "no-kernel-image"]


def test_unrelated_text_is_not_explained() -> None:
    assert explain("ValueError: shapes (3,) and (4,) not aligned\n") == ()
    assert explain_import_error("SyntaxError: invalid syntax") is None


def test_a_symbol_outside_torch_is_not_blamed_on_torch() -> None:
    code, cause = explain_import_error("undefined symbol: cudaGetDriverEntryPointByVersion")
    assert code == "import-failed" and "does not define cudaGetDriverEntryPointByVersion" in cause


def _args(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"index_url": None, "python": "python", "json": False, "explain": None, **values})


def test_explain_reads_a_log_file_and_says_the_fix(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1\n" + QUOTED[1][0] + "\n")
    text, code = run(_args(explain=str(log)))
    assert code == 0
    assert text.splitlines()[0] == (
        "no kernel image for this GPU: the extension carries no SASS for this GPU's compute capability and no PTX "
        "the driver could compile for it."
    )
    assert text.splitlines()[1] == f"  from: {QUOTED[1][0]}"


def test_explain_of_nothing_recognised_exits_1() -> None:
    text, code = run(_args(explain="all good"))
    assert code == 1 and "recognises none of these lines" in text
