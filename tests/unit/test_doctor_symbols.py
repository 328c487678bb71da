"""doctor and ``undefined symbol`` (issue 30): the line explained with the symbol index (demangled, which releases
export it), the demangled names stored in the index for a machine without libstdc++, an installed extension's
missing symbols as a verdict, and no "built for another torch minor" for a wheel inside its window."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from builder.core.symbols import NAMES_FILE, TorchAbi, encode_entry, entry_path
from builder.doctor import symbolcheck
from builder.doctor.explain import explain
from builder.doctor.probe import Environment
from builder.doctor.undefined import render_answers, undefined_answers
from builder.doctor.verdicts import diagnose

OLD = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"
NEW = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"
OLD_NAME = "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)"
LINE = f"ImportError: /gone/site-packages/causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: {OLD}"
DATA = Path(__file__).parent / "data" / "doctor"


def _entry(torch: str, variant: str, *symbols: str) -> TorchAbi:
    return TorchAbi(torch=torch, variant=variant, platform="x86_64", cxx11_abi=True,
                    libraries={"libc10_cuda.so": frozenset(symbols)})


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for entry in (_entry("2.9.1", "cu128", OLD), _entry("2.10.0", "cu128", NEW), _entry("2.11.0", "cu130", NEW),
                  _entry("2.12.1", "cu130", NEW)):
        entry_path(tmp_path, entry).write_bytes(encode_entry(entry))
    monkeypatch.setenv("WHEELWRIGHT_SYMBOLS", str(tmp_path))
    return tmp_path


def test_the_line_is_explained_with_the_releases_that_export_the_symbol(index: Path) -> None:
    (finding,) = explain(LINE)
    assert finding.code == "torch-minor"
    assert finding.cause.endswith(
        f"`{OLD_NAME}` is exported by torch 2.9 (cu128), and not by 2.10 (cu128), 2.11-2.12 (cu130)."
    )


def test_without_an_index_the_line_is_explained_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHEELWRIGHT_SYMBOLS", str(tmp_path / "none"))
    (finding,) = explain(LINE)
    assert "is exported by" not in finding.cause and "another torch minor" in finding.cause


def test_the_answer_demangles_and_tells_where_the_symbol_lives(index: Path) -> None:
    (answer,) = undefined_answers(LINE + "\n" + LINE, python="/no/python", index_url=None)  # one per symbol
    assert answer["demangled"] == OLD_NAME
    assert render_answers([answer]) == [
        f"undefined symbol `{OLD_NAME}`",
        "  exported by torch 2.9 (cu128); not by 2.10 (cu128), 2.11-2.12 (cu130)",
    ]


def test_without_libstdcxx_the_index_names_it(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (index / NAMES_FILE).write_bytes(gzip.compress(json.dumps({OLD: OLD_NAME}).encode()))
    monkeypatch.setattr(symbolcheck, "can_demangle", lambda: False)
    symbolcheck._stored_names.cache_clear()
    assert symbolcheck.shown(OLD) == OLD_NAME
    assert symbolcheck.shown(NEW) == NEW  # not stored: the mangled name, rather than nothing


def test_the_torch_an_extension_was_built_for(index: Path) -> None:
    entries = symbolcheck.symbol_index()
    assert symbolcheck.built_for(frozenset({NEW, "memcpy"}), entries) == "torch 2.10 (cu128), 2.11-2.12 (cu130)"
    assert symbolcheck.built_for(frozenset({OLD, NEW}), entries) == (
        "no indexed torch (it needs symbols from several)")
    assert symbolcheck.built_for(frozenset({"memcpy"}), entries).startswith("the index cannot tell")


def _recorded() -> dict:
    return json.loads((DATA / "cpu-ok.json").read_text())["environment"]


def test_missing_symbols_read_from_the_files_are_a_verdict(index: Path) -> None:
    data = copy.deepcopy(_recorded())
    data["packages"][0]["extensions"][0].update(
        missing_symbols=[OLD], missing_count=3, symbols_checked=True, built_for="torch 2.9 (cu128)", imports=False)
    (diagnosis,) = diagnose(Environment.from_dict(data))
    assert (diagnosis.verdicts[0].code, diagnosis.verdicts[0].message) == (
        "torch-minor",
        (f"causal_conv1d_cuda needs `{OLD_NAME}` and 2 more, which torch 2.14.1+cu130 does not export (read from the "
         "files, before importing anything): it was built for another torch; torch 2.9 (cu128) export everything it "
         "needs."),
    )


def test_a_wheel_inside_its_window_is_said_to_load_and_the_tested_one_offered() -> None:
    data = copy.deepcopy(_recorded())
    package = data["packages"][0]
    package["version"] = "1.7.0+pt212cu130"  # built for 2.12, installed beside 2.14.1
    package["extensions"][0].update(symbols_checked=True, imports=True)
    (verdict,) = diagnose(Environment.from_dict(data))[0].verdicts
    assert (verdict.code, verdict.message) == (
        "torch-minor",
        ("causal-conv1d 1.7.0+pt212cu130 was built for torch 2.12, but this environment has torch 2.14.1+cu130; it "
        "loads here (this torch exports every symbol its extension needs, and it imports), but the wheel built for "
        "this torch is the one tested with it."),
    )
    package["extensions"][0]["symbols_checked"] = False  # not read: the label's word stands
    (verdict,) = diagnose(Environment.from_dict(data))[0].verdicts
    assert verdict.message.endswith("a compiled extension only loads into the torch minor it was built against.")
