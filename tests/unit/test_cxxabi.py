"""The C++ ABI read from an extension's symbols, and the verify gate's judgement of it (mangled names as g++ emits
them for c10::detail::torchCheckFail under each value of _GLIBCXX_USE_CXX11_ABI)."""

from __future__ import annotations

import dataclasses

from builder.steps.cxxabi import AbiEvidence, classify, demangle
from builder.steps.elf import ElfFacts
from builder.steps.verify import WheelFacts, check_cxx_abi
from tests.unit.test_verify import JOB

CXX11 = "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
PRE_CXX11 = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"
UNRELATED = "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm"  # libstdc++'s own, not torch's
NO_STRING = "_ZN3c104cuda20getCurrentCUDAStreamEa"


def test_demangle_uses_libstdcxx() -> None:
    assert (
        demangle(PRE_CXX11) == "c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&)"
    )
    assert demangle("not_mangled") == "not_mangled"


def test_classify_reads_each_abi_from_torch_symbols_only() -> None:
    assert classify([CXX11, NO_STRING, UNRELATED]).abi == "cxx11"
    assert classify([PRE_CXX11, NO_STRING]).abi == "pre-cxx11"
    assert classify([CXX11, PRE_CXX11]).abi == "mixed"
    assert classify([NO_STRING, UNRELATED, "memcpy"]).abi is None


def _wheel(*symbols: str) -> WheelFacts:
    elf = ElfFacts(path="ext.so", abi=classify(symbols))
    return WheelFacts(filename="x.whl", metadata="", files=(), elves=(elf,))


def test_the_gate_refuses_the_other_abi_and_names_the_mismatch() -> None:
    pre_job = dataclasses.replace(JOB, cxx11_abi=False)
    refused = check_cxx_abi(_wheel(CXX11), pre_job)
    assert not refused.ok
    assert "C++ ABI mismatch" in refused.detail and "pre-cxx11 (_GLIBCXX_USE_CXX11_ABI=0)" in refused.detail
    assert "std::__cxx11::basic_string" in refused.detail
    assert check_cxx_abi(_wheel(PRE_CXX11), pre_job).ok
    assert not check_cxx_abi(_wheel(PRE_CXX11), dataclasses.replace(JOB, cxx11_abi=True)).ok


def test_no_evidence_passes_and_says_so() -> None:
    check = check_cxx_abi(_wheel(NO_STRING), JOB)
    assert check.ok and "either ABI loads" in check.detail
    assert AbiEvidence().abi is None
