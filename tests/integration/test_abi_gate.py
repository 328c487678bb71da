"""The verify gate's C++ ABI check on real compiler output: one small extension source, calling into torch's c10
the way every extension does (TORCH_CHECK), compiled with g++ against the real torch 2.14.1 headers once per value
of _GLIBCXX_USE_CXX11_ABI. torch 2.14 is a cxx11 build: the gate takes the cxx11 object and refuses the other one,
naming the mismatch, before any user meets "undefined symbol: _ZN3c10..."."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from builder.core.runner import run
from builder.plan.facts import load_facts
from builder.steps.environment import runtime_env
from builder.steps.verify import verify_wheel
from scripts.bench.wheels import job_wheel
from tests.jobs import local_job

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch 2.14.1 for CUDA 13.0 is installed for cp311"),
]

SOURCE = """\
#include <string>
#include <c10/util/Exception.h>

// Exported like a pybind11 binding would be; the std::string parameter is what the ABI flag changes.
void probe_check(const std::string& message) {
    TORCH_CHECK(!message.empty(), "probe: ", message);
}
"""


@pytest.fixture(scope="module")
def torch_include() -> Path:
    job = local_job()
    return runtime_env(job, load_facts()).site_packages / "torch" / "include"


@pytest.mark.parametrize(("flag", "accepted"), [(1, True), (0, False)], ids=["cxx11-accepted", "pre-cxx11-refused"])
def test_the_gate_refuses_the_other_abi(flag: int, accepted: bool, torch_include: Path, tmp_path: Path) -> None:
    job = local_job()
    assert job.cxx11_abi, "torch 2.14 is a cxx11 build"
    source = tmp_path / "probe.cpp"
    source.write_text(SOURCE)
    so = tmp_path / "probe_ext.so"
    run(
        [
            "g++",
            "-shared",
            "-fPIC",
            "-O0",
            "-std=c++20",
            f"-D_GLIBCXX_USE_CXX11_ABI={flag}",
            f"-I{torch_include}",
            source,
            "-o",
            so,
        ],
        step=f"compile probe with _GLIBCXX_USE_CXX11_ABI={flag}",
    )
    report = verify_wheel(job_wheel(tmp_path, job, {so.name: so}, platform="manylinux_2_28_x86_64"), job, runtime=None)
    abi = next(check for check in report.checks if check.name == "cxx-abi")
    assert abi.ok is accepted, abi.detail
    if accepted:
        assert "cxx11, as torch 2.14.1" in abi.detail
    else:
        assert "C++ ABI mismatch" in abi.detail
        assert "torch 2.14.1 was built with the cxx11 (_GLIBCXX_USE_CXX11_ABI=1) ABI" in abi.detail
        assert "probe_ext.so uses the pre-cxx11 ABI" in abi.detail
        assert "std::string const&" in abi.detail
