"""The build's preflight (builder/farm/build.py): one reason per job in the stated order (interpreter, toolkit,
torch), counts that add up to the plan, no side effect, and the farm scope that leaves images' parts out."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from builder.farm import build as build_stage
from builder.farm.build import NEEDS_TORCH_INDEX, READY, count_reasons, preflight
from builder.plan.accelerator import Accelerator
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import torch_index
from builder.steps.toolchain import ToolkitReadiness

ROOT = Path(__file__).resolve().parents[2]
FACTS = load_facts()
TEMPLATE = "https://torch-index.test/{accelerator}/"
LINUX = "manylinux_2_28_x86_64"


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A machine with Pythons 3.10 and 3.11, toolkits for cu130 only, the registry's torch 2.14.1 and 2.12.1, and
    no torch index in reach; every read of an index page is logged, and any download fails the test."""
    state: dict[str, Any] = {"pythons": {"3.10", "3.11"}, "pages": [], "toolkit_calls": 0}
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WHEELWRIGHT_INDEX_URL", "https://registry.test/simple/")

    def find_pythons(version: str) -> list[Path]:
        if version not in state["pythons"]:
            raise build_stage.NotBuildableHere(f"no Python {version} interpreter on this machine")
        return [Path(f"/usr/bin/python{version}")]

    def readiness(accelerator: Accelerator, archs: tuple[str, ...]) -> ToolkitReadiness:
        state["toolkit_calls"] += 1
        if accelerator.name == "cu130":
            return ToolkitReadiness(source="host-13.0", cuda="13.0", problem=None)
        return ToolkitReadiness(source=None, cuda=None, problem=f"no toolkit for {accelerator} here")

    def index_files(page: str, who: str) -> list[dict[str, Any]]:
        state["pages"].append(page)
        if page != "https://registry.test/simple/torch/":
            raise torch_index.FetchError(f"{who}: cannot read the index page {page}: Name or service not known")
        return [{"filename": f"torch-{v}-{py}-{py}-{LINUX}.whl", "url": f"https://f.test/{v}-{py}.whl", "hashes": {}}
                for v in ("2.14.1", "2.12.1") for py in ("cp310", "cp311")]

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("the preflight downloads nothing")

    monkeypatch.setattr(build_stage, "find_pythons", find_pythons)
    monkeypatch.setattr(build_stage, "toolkit_readiness", readiness)
    monkeypatch.setattr(torch_index, "index_files", index_files)
    monkeypatch.setattr(torch_index, "download_checked", no_download)
    return state


def jobs() -> list[Any]:
    """The local job in five variants, one per reason, and one ready."""
    (base,) = [j for j in load_plan(ROOT / "matrix.yaml", "local", host="3.11").jobs if j.package == "causal-conv1d"]
    cu126 = Accelerator.parse("cu126")
    return [
        base,  # torch 2.14.1 cu130 cp311: ready (the registry's own variant)
        dataclasses.replace(base, python="3.14"),  # no interpreter
        dataclasses.replace(base, accelerator=cu126),  # no toolkit, and its torch needs PyTorch's index: toolkit first
        dataclasses.replace(base, torch="2.13.0"),  # toolkit fine, the registry has no 2.13.0 for it
        dataclasses.replace(base, torch="2.12.1", python="3.10"),  # ready
    ]


def test_each_job_gets_the_first_reason_in_the_stated_order(machine: dict[str, Any]) -> None:
    found = preflight(jobs(), FACTS, TEMPLATE)
    assert [r.reason for r in found] == [
        READY,
        "need Python 3.14 (not on this machine)",
        "no toolkit for cu126 here",
        "torch wheel not on its index",
        READY,
    ]
    assert found[3].problem is not None and "lists no torch 2.13.0 wheel for cp311" in found[3].problem


def test_the_counts_add_up_to_the_jobs_checked_with_ready_first(machine: dict[str, Any]) -> None:
    found = preflight(jobs() * 3, FACTS, TEMPLATE)
    counts = count_reasons(found)
    assert counts[0] == (READY, 6)
    assert sum(n for _, n in counts) == len(found) == 15
    assert dict(counts) == {r: sum(1 for f in found if f.reason == r) for r in {f.reason for f in found}}


def test_each_index_page_and_toolkit_is_read_once_per_run_and_nothing_is_written(
    machine: dict[str, Any], tmp_path: Path
) -> None:
    preflight(jobs() * 10, FACTS, TEMPLATE)
    assert sorted(set(machine["pages"])) == sorted(machine["pages"])  # no page twice
    assert machine["toolkit_calls"] == 2  # (cu130, 9.0) and (cu126, 9.0)
    assert not (tmp_path / "cache").exists()


def test_a_torch_index_out_of_reach_counts_its_variants_under_one_reason(machine: dict[str, Any]) -> None:
    job = dataclasses.replace(jobs()[0], accelerator=Accelerator.parse("cu126"))
    found = preflight([job], FACTS, TEMPLATE, scope="farm")  # the farm's scope: no interpreter, no toolkit
    assert [r.reason for r in found] == [NEEDS_TORCH_INDEX]
    assert "https://torch-index.test/cu126/ cannot be reached here" in (found[0].problem or "")
    assert machine["toolkit_calls"] == 0
