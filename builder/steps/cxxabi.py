"""Which C++ ABI an extension was compiled with, read from the symbols it shares with torch (c10::, at::, torch::).

libstdc++'s dual ABI (``_GLIBCXX_USE_CXX11_ABI``) changes the mangled names of every function that takes a
std::string or std::list: ``std::__cxx11::basic_string`` under the cxx11 ABI, the old ``std::string`` otherwise.
An extension built with the other flag than its torch asks torch for symbols torch does not define, which users
meet as ``undefined symbol: _ZN3c10...`` at import. Demangling uses libstdc++'s own demangler (``__cxa_demangle``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from builder.core.demangle import demangle

# The namespaces an extension shares with torch; a symbol elsewhere says nothing about torch's ABI.
_TORCH_NAMESPACE = re.compile(r"(?:^|[^A-Za-z0-9_])(?:c10|at|torch|caffe2)::")
_CXX11 = "std::__cxx11::"
# What the old ABI's string and list look like demangled: the "Ss" abbreviation prints as std::string.
_PRE_CXX11 = re.compile(r"std::(?:string|basic_string<|list<)")
EXAMPLES = 3


@dataclass(frozen=True, kw_only=True)
class AbiEvidence:
    """Symbols (demangled) shared with torch that can only come from one ABI; a few examples of each."""

    cxx11: int = 0
    pre_cxx11: int = 0
    cxx11_examples: tuple[str, ...] = ()
    pre_cxx11_examples: tuple[str, ...] = ()

    @property
    def abi(self) -> str | None:
        """ "cxx11", "pre-cxx11", "mixed", or None when no symbol shared with torch involves a string or list."""
        if self.cxx11 and self.pre_cxx11:
            return "mixed"
        if self.cxx11:
            return "cxx11"
        return "pre-cxx11" if self.pre_cxx11 else None

    def merge(self, other: AbiEvidence) -> AbiEvidence:
        return AbiEvidence(
            cxx11=self.cxx11 + other.cxx11,
            pre_cxx11=self.pre_cxx11 + other.pre_cxx11,
            cxx11_examples=(self.cxx11_examples + other.cxx11_examples)[:EXAMPLES],
            pre_cxx11_examples=(self.pre_cxx11_examples + other.pre_cxx11_examples)[:EXAMPLES],
        )


def classify(symbols: Iterable[str]) -> AbiEvidence:
    """Evidence of each ABI among ``symbols`` (mangled names from an ELF's dynamic symbol table)."""
    cxx11: list[str] = []
    pre: list[str] = []
    for symbol in symbols:
        if not symbol.startswith("_Z"):
            continue
        name = demangle(symbol)
        if not _TORCH_NAMESPACE.search(name):
            continue
        if _CXX11 in name:
            cxx11.append(name)
        elif _PRE_CXX11.search(name):
            pre.append(name)
    return AbiEvidence(
        cxx11=len(cxx11),
        pre_cxx11=len(pre),
        cxx11_examples=tuple(cxx11[:EXAMPLES]),
        pre_cxx11_examples=tuple(pre[:EXAMPLES]),
    )
