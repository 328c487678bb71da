"""The symbol-level ABI (builder/core/symbols.py): what an ELF file's dynamic symbol table exports and needs, the
index entries on disk, and a wheel's window over them with the sentence the index and doctor show."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from builder.core.symbols import (
    TorchAbi,
    decode_entry,
    encode_entry,
    entry_path,
    family_reason,
    load_index,
    read_linkage_of,
    version_key,
    window,
)
from tests.synth import elf_with_symbols

OLD = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"  # (int, char const*, char const*, int, bool)
NEW = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"  # the 4th parameter unsigned since torch 2.10
COW = "_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE"
SHARED = "_ZN3c1019UndefinedTensorImpl10_singletonE"


def entry(torch: str, *symbols: str, variant: str = "cu130", cxx11: bool = True, platform: str = "x86_64") -> TorchAbi:
    return TorchAbi(torch=torch, variant=variant, platform=platform, cxx11_abi=cxx11,
                    libraries={"libc10.so": frozenset(symbols)})


def test_exports_and_needs_are_told_apart(tmp_path: Path) -> None:
    path = tmp_path / "ext.so"
    path.write_bytes(elf_with_symbols(exports=("PyInit_ext",), required=(OLD, "memcpy"),
                                      weak_required=("__gmon_start__",), hidden=("internal_helper",)))
    linkage = read_linkage_of(path)
    assert linkage.exports == {"PyInit_ext"}  # the hidden definition is not an export
    assert linkage.required == {OLD, "memcpy"}
    assert linkage.optional == {"__gmon_start__"}  # a weak reference does not stop the load


def test_an_entry_survives_its_file(tmp_path: Path) -> None:
    original = entry("2.12.1", NEW, COW)
    path = entry_path(tmp_path, original)
    path.write_bytes(encode_entry(original))
    assert path.name == "torch-2.12.1-cu130-x86_64.json.gz"
    assert decode_entry(path.read_bytes(), str(path)) == original
    assert encode_entry(original) == encode_entry(original)  # reproducible: no timestamp in the gzip header


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not gzip", "not a readable symbol index entry"),
        (gzip.compress(b"{not json"), "not a readable symbol index entry"),
        (gzip.compress(b'{"schema": 99}'), "not a version 1 torch symbol index entry"),
        (gzip.compress(b'{"schema": 1, "libraries": []}'), "'libraries' is not a mapping"),
        (gzip.compress(b'{"schema": 1, "libraries": {}}'), "no 'torch'"),
    ],
)
def test_a_damaged_entry_costs_its_release_not_the_index(tmp_path: Path, content: bytes, why: str) -> None:
    good = entry("2.14.1", NEW)
    entry_path(tmp_path, good).write_bytes(encode_entry(good))
    (tmp_path / "torch-2.13.0-cu130-x86_64.json.gz").write_bytes(content)
    entries, problems = load_index(tmp_path)
    assert entries == [good]
    assert len(problems) == 1 and why in problems[0] and "torch-2.13.0" in problems[0]


def test_no_index_is_an_empty_one(tmp_path: Path) -> None:
    assert load_index(tmp_path / "absent") == ([], [])


INDEX = [
    entry("2.9.1", OLD, COW, SHARED, variant="cu128"),
    entry("2.10.0", NEW, COW, SHARED, variant="cu128"),
    entry("2.11.0", NEW, COW, SHARED),
    entry("2.12.1", NEW, COW, SHARED),
    entry("2.13.0", NEW, SHARED),
    entry("2.14.1", NEW, SHARED),
    entry("2.15.0", NEW, SHARED, variant="cu132"),
    entry("2.0.1", OLD, COW, SHARED, variant="cu117", cxx11=False),
]


def test_a_window_is_the_releases_of_its_family_that_export_all_it_imports() -> None:
    found = window(frozenset({NEW, COW, SHARED}), INDEX, built_for="2.12.1", platform="x86_64", cuda_major=13,
                   cxx11_abi=True)
    assert found.loads == ("2.11.0", "2.12.1")
    assert [v for v, _ in found.breaks] == ["2.13.0", "2.14.1", "2.15.0"]
    assert dict(found.other) == {"2.9.1 cu128": "CUDA 12, not CUDA 13", "2.10.0 cu128": "CUDA 12, not CUDA 13",
                                 "2.0.1 cu117": "CUDA 11, not CUDA 13"}
    assert found.describe() == (
        "loads on torch 2.11-2.12 (checked 2.11-2.15); breaks on 2.13: missing "
        "`c10::impl::cow::materialize_cow_storage(c10::StorageImpl&)`"
    )


def test_the_sentence_names_the_break_below_as_well() -> None:
    cuda12 = [e for e in INDEX if e.variant == "cu128"]
    found = window(frozenset({OLD, SHARED}), cuda12, built_for="2.9.1", platform="x86_64", cuda_major=12,
                   cxx11_abi=True)
    assert found.describe() == (
        "loads on torch 2.9-2.9 (checked 2.9-2.10); breaks on 2.10: missing "
        "`c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)`"
    )
    newer = window(frozenset({NEW, COW}), cuda12 + INDEX[2:4], built_for="2.10.0", platform="x86_64",
                   cuda_major=12, cxx11_abi=True)
    assert newer.describe().endswith("breaks on 2.9: missing `c10::cuda::c10_cuda_check_implementation(int, char "
                                     "const*, char const*, unsigned int, bool)`")


def test_gaps_in_a_window_show_as_separate_spans() -> None:
    found = window(frozenset({SHARED, "only_odd"}), [entry("2.11.0", SHARED, "only_odd"), entry("2.12.1", SHARED),
                                                     entry("2.13.0", SHARED, "only_odd")],
                   built_for="2.13.0", platform="x86_64", cuda_major=13, cxx11_abi=True)
    assert found.describe().startswith("loads on torch 2.11-2.11, 2.13-2.13 (checked 2.11-2.13)")


def test_a_window_over_no_release_of_its_family_says_so() -> None:
    found = window(frozenset({NEW}), INDEX, built_for="2.14.1", platform="aarch64", cuda_major=13, cxx11_abi=True)
    assert found.describe() == "no indexed torch of its CUDA major and C++ ABI to check against"
    assert found.as_dict()["loads"] == [] and len(found.as_dict()["other"]) == len(INDEX)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (entry("2.14.1", platform="aarch64"), "built for aarch64"),
        (entry("2.14.1", variant="cu128"), "CUDA 12, not CUDA 13"),
        (entry("2.14.1", variant="cpu"), "CUDA none, not CUDA 13"),
        (entry("2.14.1", cxx11=False), "pre-cxx11 C++ ABI"),
        (entry("2.14.1"), None),
    ],
)
def test_which_builds_a_wheel_is_compared_with(candidate: TorchAbi, reason: str | None) -> None:
    assert family_reason(candidate, platform="x86_64", cuda_major=13, cxx11_abi=True) == reason


def test_versions_order_by_number() -> None:
    assert sorted(["2.10.0", "2.9.1", "2.0.1", "2.14.1+cu130"], key=version_key) == [
        "2.0.1", "2.9.1", "2.10.0", "2.14.1+cu130"]
