"""`wheelwright facts check` against a recorded registry answer (tests/data/registry/torch.json: the real PEP 691
page trimmed to torch 2.13.0-2.15.0, and the METADATA headers of each minor's default wheel)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from builder.cli.facts import BEHIND_EXIT
from builder.cli.main import main
from builder.plan.facts import load_facts
from builder.plan.releases import TorchFacts
from builder.steps import torch_registry
from builder.steps.torch_registry import compare, cuda_of, provenance, registry_releases

RECORDED = json.loads((Path(__file__).parent.parent / "data" / "registry" / "torch.json").read_text())


class Recorded:
    def files(self, project: str) -> list[dict]:
        assert project == "torch"
        return RECORDED["files"]

    def metadata(self, file: Mapping) -> str:
        return RECORDED["metadata"][file["filename"]]


def facts_without(minor: str) -> TorchFacts:
    facts = load_facts()
    return dataclasses.replace(facts, releases=tuple(r for r in facts.releases if r.minor != minor))


def test_the_registry_releases_read_from_filenames_and_metadata() -> None:
    releases = {r.minor: r for r in registry_releases(Recorded(), since="2.13")}
    assert releases["2.14"].patches == ("2.14.0", "2.14.1")
    # free-threaded wheels (cp314-cp314t) are Pythons of their own, read from the ABI tag
    assert releases["2.15"].python == ("3.11", "3.12", "3.13", "3.14", "3.14t", "3.15", "3.15t")
    assert releases["2.13"].python == ("3.10", "3.11", "3.12", "3.13", "3.14", "3.14t")
    assert releases["2.14"].pypi_cuda == "13.0"  # cuda-toolkit[...]==13.0.3
    assert releases["2.15"].pypi_cuda == "13.2"


def test_cuda_pins_of_each_generation() -> None:
    assert cuda_of("Requires-Dist: nvidia-cuda-runtime-cu11 (==11.7.99) ; platform_system == 'Linux'\n") == "11.7"
    assert cuda_of("Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'\n") == "12.8"
    assert cuda_of("Requires-Dist: cuda-toolkit[cublas,cudart]==13.0.3; platform_system == 'Linux'\n") == "13.0"
    assert cuda_of("Requires-Dist: filelock\n") is None


def test_current_facts_have_no_findings_for_the_recorded_releases() -> None:
    assert compare(load_facts(), registry_releases(Recorded(), since="2.13")) == []


def test_a_missing_minor_gets_a_stanza_that_loads_as_facts() -> None:
    (finding,) = compare(facts_without("2.15"), registry_releases(Recorded(), since="2.13"))
    assert "torch 2.15 (2.15.0) is on the registry but not in the facts" in finding.problem
    assert finding.stanza is not None
    assert 'python = ["3.11", "3.12", "3.13", "3.14", "3.14t", "3.15", "3.15t"]' in finding.stanza
    assert 'pypi_cuda = "13.2"' in finding.stanza
    import tomllib

    from builder.plan.facts import parse_facts

    raw = tomllib.loads(finding.stanza)
    raw["release"][0]["cuda"] = ["13.2"]
    pasted = parse_facts({"release": raw["release"], "archs": {"cuda": {"13.2": ["9.0"]}}}, "stanza")
    assert pasted.release("2.15.0").pypi_cuda == "13.2"


def test_a_missing_patch_and_wrong_python_are_findings() -> None:
    facts = load_facts()
    stale = dataclasses.replace(facts.release("2.14"), patches=("2.14.0",), python=("3.10", "3.11"))
    releases = tuple(stale if r.minor == "2.14" else r for r in facts.releases)
    problems = [
        f.problem
        for f in compare(dataclasses.replace(facts, releases=releases), registry_releases(Recorded(), since="2.13"))
    ]
    assert any("patches lack 2.14.1" in p for p in problems)
    assert any("python is ['3.10', '3.11']" in p for p in problems)


def test_the_cli_exits_non_zero_and_prints_the_stanza(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch_registry, "PyPIRegistry", Recorded)
    monkeypatch.setattr("builder.cli.facts.load_facts", lambda: facts_without("2.15"))
    assert main(["facts", "check"]) == BEHIND_EXIT
    captured = capsys.readouterr()
    assert "BEHIND torch 2.15" in captured.err
    assert '[[release]]\ntorch = "2.15"' in captured.out


def test_the_cli_exits_zero_when_current(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch_registry, "PyPIRegistry", Recorded)
    monkeypatch.setattr(
        "builder.cli.facts.load_facts",
        lambda: dataclasses.replace(
            load_facts(), releases=tuple(r for r in load_facts().releases if r.minor in ("2.13", "2.14", "2.15"))
        ),
    )
    assert main(["facts", "check"]) == 0
    assert "torch facts are current" in capsys.readouterr().out


def facts_of(*minors: str) -> TorchFacts:
    facts = load_facts()
    return dataclasses.replace(facts, releases=tuple(r for r in facts.releases if r.minor in minors))


def test_the_summary_says_what_was_verified_and_what_rests_on_citations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch_registry, "PyPIRegistry", Recorded)
    monkeypatch.setattr("builder.cli.facts.load_facts", lambda: facts_of("2.13", "2.14", "2.15"))
    assert main(["facts", "check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "verified against the registry (patches, Pythons, the plain wheel's CUDA from Requires-Dist): "
        "2.13 cu130 (x86_64 and aarch64), 2.14 cu130 (x86_64 and aarch64), 2.15 cu132 (x86_64 and aarch64)"
    )
    assert lines[2] == "resting on citations (builder/data/torch.toml sources):"
    cited = {line.split(":")[0].strip(): line for line in lines[3:]}
    assert set(cited) == {"2.13 cu126, cu129, cu132, rocm7.2", "2.14 cu126, cu132, rocm7.2", "2.15 cu130"}
    assert "pytorch/pytorch#194367" in cited["2.14 cu126, cu132, rocm7.2"]
    assert "pytorch/pytorch#190385" in cited["2.15 cu130"]


def test_a_minor_the_registry_disagrees_with_or_lacks_is_verified_in_nothing() -> None:
    facts = facts_of("2.12", "2.13", "2.14")
    stale = dataclasses.replace(facts.release("2.14"), patches=("2.14.0",))
    facts = dataclasses.replace(facts, releases=(*facts.releases[:2], stale))
    releases = registry_releases(Recorded(), since="2.13")  # the recording starts at 2.13: no 2.12
    summary = provenance(facts, releases, compare(facts, releases))
    assert summary.verified == ("2.13 cu130 (x86_64 and aarch64)",)
    cited = dict(summary.cited)
    assert cited["2.12 every fact (not on the registry)"] == facts.release("2.12").sources
    assert "2.14 cu126, cu130, cu132, rocm7.2" in cited  # its default variant too, while patches disagree


def test_the_behind_output_ends_with_the_summary_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch_registry, "PyPIRegistry", Recorded)
    monkeypatch.setattr("builder.cli.facts.load_facts", lambda: facts_of("2.13", "2.14"))
    assert main(["facts", "check"]) == BEHIND_EXIT
    out = capsys.readouterr().out
    summary = "verified against the registry (patches, Pythons, the plain wheel's CUDA from Requires-Dist): "
    assert f"{summary}2.13 cu130 (x86_64 and aarch64), 2.14 cu130 (x86_64 and aarch64)\n" in out


def test_the_registrys_aarch64_wheels_are_read_with_their_markers() -> None:
    releases = {r.minor: r for r in registry_releases(Recorded(), since="2.13")}
    assert (releases["2.14"].aarch64_cuda, releases["2.15"].aarch64_cuda) == ("13.0", "13.2")
    assert releases["2.14"].aarch64_python == releases["2.14"].python
    # up to torch 2.10 every CUDA pin is marked for x86_64 alone: on aarch64 the wheel is a CPU build
    marked = ('Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
              'platform_machine == "x86_64"\n')
    assert cuda_of(marked) == "12.8" and cuda_of(marked, machine="aarch64") is None
    assert cuda_of(marked, machine="x86_64") == "12.8"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"aarch64_cuda": None}, "pypi_aarch64 is 13.0, but the registry's 2.14.1 aarch64 wheel is a CPU build"),
        ({"aarch64_cuda": "12.8"}, "but the registry's 2.14.1 aarch64 wheel pins CUDA 12.8"),
        ({"aarch64_cuda": None, "aarch64_python": ()}, "but the registry's 2.14.1 aarch64 wheel does not exist"),
        ({"aarch64_python": ("3.11",)}, "the registry's 2.14.1 aarch64 wheels are for ['3.11']"),
    ],
)
def test_the_aarch64_facts_disagreeing_with_the_registry_are_findings(change: dict, problem: str) -> None:
    releases = [dataclasses.replace(r, **change) if r.minor == "2.14" else r
                for r in registry_releases(Recorded(), since="2.13")]
    (finding,) = compare(load_facts(), releases)
    assert finding.minor == "2.14" and problem in finding.problem


def test_an_aarch64_cuda_build_the_facts_lack_is_a_finding() -> None:
    facts = load_facts()
    lacking = dataclasses.replace(facts.release("2.14"), pypi_aarch64=None)
    facts = dataclasses.replace(facts, releases=tuple(lacking if r.minor == "2.14" else r for r in facts.releases))
    (finding,) = compare(facts, registry_releases(Recorded(), since="2.13"))
    assert 'the registry\'s 2.14.1 aarch64 wheel is a CUDA 13.0 build: pypi_aarch64 = "13.0"' in finding.problem


def test_pytorch_index_aarch64_variants_of_the_registrys_cuda_ask_nothing_of_the_registry() -> None:
    # torch 2.8-2.10: PyTorch's index has cu128 aarch64 wheels, the registry's aarch64 wheel of that CUDA is a CPU
    # build; facts check read the real registry so (2026-12-04) and must not call that behind
    facts = load_facts()
    cpu_there = dataclasses.replace(facts.release("2.14"), pypi_aarch64=None)
    facts = dataclasses.replace(facts, releases=tuple(cpu_there if r.minor == "2.14" else r for r in facts.releases))
    releases = [dataclasses.replace(r, aarch64_cuda=None) for r in registry_releases(Recorded(), since="2.13")]
    assert [f for f in compare(facts, releases) if f.minor == "2.14"] == []
