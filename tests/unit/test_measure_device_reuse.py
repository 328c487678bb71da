"""scripts/measure_device_reuse.py's logic without a compiler: reading nvcc calls out of `ninja -t commands`, the
table's comparisons, and the device-reuse facts it writes for `plan --estimate`."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from builder.plan.estimate import reuse_facts
from scripts.measure_device_reuse import Chain, Unit, classes, facts, main, nvcc_commands, reuse_classes, table


def chain(torch: str, ii: str, cubin: str, unit: str = "k.cu") -> Chain:
    return Chain(torch=torch, unit=unit, arch="9.0", digests={"ii": ii, "module_id": "m", "ptx": "p", "ptx_code": "p",
                                                              "cubin": cubin},
                 kernels={"sm_90 k": "same"}, cpu={"preprocess": 1.0, "cicc": 60.0, "ptxas": 20.0},
                 results={"cicc": "miss", "ptxas": "miss"})


CHAINS = [chain("2.11.0", "a", "x"), chain("2.12.1", "b", "x"), chain("2.13.0", "b", "y"), chain("2.14.1", "c", "y")]
UNITS = [Unit(torch=c.torch, unit="k.cu", cpu={"front": 3.0, "host": 16.0}) for c in CHAINS]


def test_the_nvcc_calls_are_read_out_of_ninjas_commands() -> None:
    wrapper = "/v/bin/python /r/builder/steps/programs/objcache.py /cache off /cuda/bin/nvcc"
    recorded = "\n".join([
        "g++ -MMD -c /s/x.cpp -o /b/x.o",
        f"{wrapper} -MD -MF /b/k.o.d -c /s/k.cu -o /b/k.o --compiler-options ''\"'\"'-fPIC'\"'\"''",
    ])
    ((nvcc, args),) = nvcc_commands(recorded)
    assert nvcc == "/cuda/bin/nvcc"
    assert args == ["-MD", "-MF", "/b/k.o.d", "-c", "/s/k.cu", "-o", "/b/k.o", "--compiler-options", "'-fPIC'"]
    assert shlex.join(args).count("fPIC") == 1


def test_torch_versions_are_grouped_by_equal_values() -> None:
    assert classes({"2.11.0": "a", "2.12.1": "a"}) == "same in all 2"
    assert classes({"2.11.0": "a", "2.12.1": "b", "2.13.0": "b"}) == "2.11 \\| 2.12=2.13"


def test_cicc_classes_follow_its_inputs_and_ptxas_classes_its_cubin() -> None:
    assert reuse_classes(CHAINS, "cicc") == [["2.11"], ["2.12", "2.13"], ["2.14"]]
    assert reuse_classes(CHAINS, "ptxas") == [["2.11", "2.12"], ["2.13", "2.14"]]


def test_the_table_has_one_row_per_unit_and_arch() -> None:
    head, rule, row = table(UNITS, CHAINS)
    assert head.count("|") == rule.count("|") == row.replace("\\|", "").count("|")  # escaped: within a cell
    assert "| k.cu | 9.0 | 2.11 \\| 2.12=2.13 \\| 2.14 |" in row and "1 of 1 kernels equal in all" in row


def test_the_facts_load_as_the_estimate_reads_them() -> None:
    text = facts(UNITS, CHAINS, "causal-conv1d", "1.7.0", "cu130")
    loaded = reuse_facts(text)
    key = ("causal-conv1d", "1.7.0", "cu130", "k.cu", "cicc")
    assert loaded.classes[key] == (frozenset({"2.11"}), frozenset({"2.12", "2.13"}), frozenset({"2.14"}))
    assert loaded.shares[key] == round(60.0 / 100.0, 3)


def test_facts_of_a_report_name_the_package_the_file_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--report mamba.json --facts V,A` wrote `package = "causal-conv1d"` (--package's default) into mamba-ssm's
    entries; the file now says which package it measured."""
    measured = tmp_path / "mamba.json"
    measured.write_text(json.dumps({"package": "mamba-ssm", "units": [dataclasses.asdict(u) for u in UNITS],
                                    "chains": [dataclasses.asdict(c) for c in CHAINS]}))
    assert main(["--report", str(measured), "--facts", "2.3.2.post1,cu130"]) == 0
    loaded = reuse_facts(capsys.readouterr().out.split("\n\n", 1)[1])
    assert {key[:3] for key in loaded.classes} == {("mamba-ssm", "2.3.2.post1", "cu130")}
