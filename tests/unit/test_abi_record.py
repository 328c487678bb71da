"""What a built wheel records of its ABI (builder/steps/abi.py): the symbols each extension imports from the torch it
was built against, by library, weak references and its own symbols left out; its window over the index; the record
in the provenance and the ledger, and from the ledger into the index's wheels.json and setup page."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import pytest

from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.symbols import TorchAbi
from builder.steps import provenance
from builder.steps.abi import all_imports, wheel_abi
from index_site.catalog import Catalog
from index_site.render import render_site
from index_site.report import ScanStats
from index_site.wheels import GpuArchs
from scripts.bench.wheels import indexed_wheel
from tests.jobs import local_job
from tests.synth import elf_with_symbols

NEW = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"
COW = "_ZN3c104impl3cow23materialize_cow_storageERNS_11StorageImplE"
EMPTY = "_ZN2at4_ops5empty4callEN3c108ArrayRefIlEE"
RUNTIME_ERROR = "_ZNSt13runtime_errorC1EPKc"
JOB = local_job()  # causal-conv1d 1.7.0 for torch 2.14.1 cu130, cp311, x86_64


def _torch(site: Path) -> Path:
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libc10_cuda.so").write_bytes(elf_with_symbols(exports=(NEW,)))
    # libc10 exports std::runtime_error's constructor too, as torch 2.0.1's does (libstdc++ linked in part)
    (lib / "libc10.so").write_bytes(elf_with_symbols(exports=(COW, "_ZN3c1010unused_oneEv", RUNTIME_ERROR)))
    (lib / "libtorch_cpu.so").write_bytes(elf_with_symbols(exports=(EMPTY,), required=(COW,)))
    return site


def _wheel(folder: Path) -> Path:
    wheel = folder / "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl"
    extension = elf_with_symbols(exports=("PyInit_causal_conv1d_cuda",),
                                 required=(NEW, COW, EMPTY, "memcpy", "cudaLaunchKernel", RUNTIME_ERROR),
                                 weak_required=("_ZN3c1010unused_oneEv",))
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so", extension)
        archive.writestr("causal_conv1d/__init__.py", "")
    return wheel


def _entry(torch: str, *symbols: str) -> TorchAbi:
    return TorchAbi(torch=torch, variant="cu130", platform="x86_64", cxx11_abi=True,
                    libraries={"libc10.so": frozenset(symbols)})


def test_a_wheel_records_what_it_imports_from_its_torch_and_where_that_loads(tmp_path: Path) -> None:
    entries = [_entry("2.12.1", NEW, COW, EMPTY), _entry("2.13.0", NEW, EMPTY), _entry("2.14.1", NEW, COW, EMPTY)]
    record = wheel_abi(_wheel(tmp_path), JOB, _torch(tmp_path / "site"), entries)
    assert record["extensions"] == {"causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so": {
        "libc10.so": [COW], "libc10_cuda.so": [NEW], "libtorch_cpu.so": [EMPTY]}}
    # not memcpy, not the weak reference, not std::runtime_error's constructor: libstdc++ has it for any torch
    assert (record["torch"], record["accelerator"], record["cxx11_abi"], record["cuda_major"]) == (
        "2.14.1", "cu130", True, 13)
    window = record["window"]
    assert isinstance(window, dict)
    assert window["loads"] == ["2.12.1", "2.14.1"] and list(window["breaks"]) == ["2.13.0"]
    assert window["text"] == ("loads on torch 2.12-2.12, 2.14-2.14 (checked 2.12-2.14); breaks on 2.13: missing "
                              "`c10::impl::cow::materialize_cow_storage(c10::StorageImpl&)`")
    assert all_imports(record) == {NEW, COW, EMPTY}


def test_the_provenance_and_the_ledger_carry_the_record_to_the_index(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "_first_line", lambda command, log_path: "c++ (test) 12")
    record = wheel_abi(_wheel(tmp_path), JOB, _torch(tmp_path / "site"), [_entry("2.14.1", NEW, COW, EMPTY)])
    built = provenance.build_record(JOB, toolchain=None, abi=record)
    assert built["abi"] == record
    row = LedgerEntry(job_id=JOB.identifier, package=JOB.package, version=JOB.version, label=JOB.label,
                      torch=JOB.torch, accelerator=JOB.accelerator.name, python=JOB.python, input_hash="x",
                      status=Status.BUILT, wheel="w.whl", abi=json.dumps(record),
                      report=json.dumps({"sass": ["9.0"], "ptx": []}))
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(row)
        assert ledger.wheel_archs() == {"w.whl": ('["9.0"]', "[]", "loads on torch 2.14-2.14 (checked 2.14-2.14)")}


def test_the_index_shows_the_window_the_ledger_recorded() -> None:
    filename = "causal_conv1d-1.7.0+pt212cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
    text = "loads on torch 2.11-2.12 (checked 2.11-2.15); breaks on 2.13: missing `c10::impl::cow::x()`"
    archs = {filename: GpuArchs(sass=("9.0",), ptx=(), abi_window=text)}
    catalog = Catalog(wheels=(indexed_wheel(filename, "1"),), failures=(), rejected=(), stats=ScanStats(),
                      archs=archs)
    pages = render_site(catalog, base_url="https://wheels.example.org")
    (release,) = [json.loads(body) for path, body in pages.items() if path.startswith("wheels/")]
    assert release["wheels"][0]["abi_window"] == text
    setup = pages["select/pt212cu130-cp311.html"].decode()
    assert "<dt>torch ABI</dt><dd>loads on torch 2.11-2.12 (checked 2.11-2.15); breaks on 2.13: missing " in setup
    unrecorded = render_site(dataclasses.replace(catalog, archs={}), base_url="https://wheels.example.org")
    assert "torch ABI" not in unrecorded["select/pt212cu130-cp311.html"].decode()
