"""Torch facts (builder/data/torch.toml): the real table loads, and each broken variant of it fails loudly."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import FactsError
from builder.plan.accelerator import Accelerator, base_python, is_free_threaded, python_key
from builder.plan.facts import load_facts, parse_facts
from builder.plan.releases import TorchFacts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SOURCE = "torch.toml"


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return tomllib.loads(resources.files("builder.data").joinpath("torch.toml").read_text())


def release(raw: dict[str, Any], minor: str) -> dict[str, Any]:
    return next(r for r in raw["release"] if r["torch"] == minor)


def test_the_real_table_loads_with_every_release(raw: dict[str, Any]) -> None:
    facts = load_facts()
    assert [r.minor for r in facts.releases] == [r["torch"] for r in raw["release"]]
    assert facts.release("2.14.1").minor == "2.14"
    assert facts.release("2.1").latest == next(r for r in raw["release"] if r["torch"] == "2.1")["patches"][-1]


def test_release_lookup_rejects_unknown_patches() -> None:
    facts = load_facts()
    with pytest.raises(KeyError, match="torch 2.14.9 is not in the facts table"):
        facts.release("2.14.9")
    assert facts.release("2.10").minor == "2.10"  # not confused with 2.1


def test_torch_26_is_the_mixed_abi_release() -> None:
    """From shared/reference/torch-compat.md: cu126 and ROCm moved to cxx11/2_28; cu118/cu124 did not."""
    torch26 = load_facts().release("2.6")
    assert torch26.cxx11_abi_for(Accelerator.parse("cu126")) is True
    assert torch26.manylinux_for(Accelerator.parse("rocm6.2.4")) == "manylinux_2_28"
    assert torch26.cxx11_abi_for(Accelerator.parse("cu124")) is False
    assert torch26.manylinux_for(Accelerator.parse("cu118")) == "manylinux2014"


def test_every_toolkit_has_default_archs() -> None:
    facts = load_facts()
    for release_ in facts.releases:
        for accelerator in release_.accelerators:
            assert facts.default_archs(accelerator), accelerator


def test_a_facts_file_loads_from_a_path(raw: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "torch.toml"
    path.write_text((resources.files("builder.data") / "torch.toml").read_text())
    assert isinstance(load_facts(path), TorchFacts)
    path.write_text("[[release]\n")
    with pytest.raises(FactsError, match=rf"{re.escape(str(path))}: not valid TOML"):
        load_facts(path)
    with pytest.raises(FactsError, match="cannot read the torch facts"):
        load_facts(tmp_path / "missing.toml")


Breakage = Callable[[dict[str, Any]], None]


def _set(minor: str, key: str, value: object) -> Breakage:
    return lambda raw: release(raw, minor).__setitem__(key, value)


def _del(minor: str, key: str) -> Breakage:
    return lambda raw: release(raw, minor).__delitem__(key)


BROKEN: list[tuple[str, Breakage, str]] = [
    (
        "python-unsorted",
        _set("2.5", "python", ["3.9", "3.11", "3.10", "3.12"]),
        r"\[release.6\] torch 2.5: python must be sorted ascending and free of duplicates",
    ),
    (
        "python-duplicate",
        _set("2.5", "python", ["3.9", "3.9", "3.10"]),
        r"torch 2.5: python must be sorted ascending and free of duplicates",
    ),
    ("cuda-unsorted", _set("2.4", "cuda", ["12.1", "11.8", "12.4"]), r"torch 2.4: cuda must be sorted"),
    (
        "release-duplicate",
        lambda raw: raw["release"].append(copy.deepcopy(raw["release"][-1])),
        r"the \[\[release\]\] tables' torch minors must be sorted ascending and free of duplicates",
    ),
    (
        "release-out-of-order",
        lambda raw: raw["release"].insert(0, raw["release"].pop(3)),
        r"the \[\[release\]\] tables' torch minors must be sorted",
    ),
    ("abi-missing", _del("2.7", "cxx11_abi"), r"\[release.8\] missing key 'cxx11_abi'"),
    ("abi-not-boolean", _set("2.7", "cxx11_abi", "yes"),
     r"\[release.8\] cxx11_abi: must be a boolean \(true or false\), got 'yes'"),
    (
        "abi-override-not-boolean",
        _set("2.6", "abi_override", {"cu126": "true"}),
        r"\[release.7.abi_override\] cu126: must be a boolean \(true or false\), got 'true'",
    ),
    (
        "abi-override-unbuilt-variant",
        _set("2.6", "abi_override", {"cu126": True, "cu128": True}),
        r"torch 2.6: abi_override names variants torch 2.6 never built: \['cu128'\]",
    ),
    (
        "manylinux-override-unbuilt-variant",
        _set("2.6", "manylinux_override", {"rocm6.3": "manylinux_2_28"}),
        r"manylinux_override names variants torch 2.6 never built: \['rocm6.3'\]",
    ),
    (
        "cxx11-under-manylinux2014",
        _set("2.5", "cxx11_abi", True),
        r"torch 2.5: cu118 claims the cxx11 ABI under manylinux2014",
    ),
    (
        "cxx11-override-under-manylinux2014",
        _set("2.6", "manylinux_override", {"rocm6.2.4": "manylinux_2_28"}),
        r"cu126 claims the cxx11 ABI under manylinux2014",
    ),
    ("manylinux-unknown", _set("2.8", "manylinux", "manylinux_2_99"), r"unknown manylinux policy 'manylinux_2_99'"),
    (
        "pypi-cuda-not-a-variant",
        _set("2.8", "pypi_cuda", "12.4"),
        r"pypi_cuda 12.4 is not one of its CUDA variants \['12.6', '12.8', '12.9'\]",
    ),
    (
        "arch-list-missing",
        lambda raw: raw["archs"]["cuda"].pop("12.9"),
        r"torch 2.8 has CUDA 12.9 but \[archs.cuda\] has no list for it",
    ),
    (
        "arch-list-unsorted",
        lambda raw: raw["archs"]["cuda"].__setitem__("12.9", ["9.0", "8.0"]),
        r"\[archs.cuda\] 12.9: must be sorted",
    ),
    (
        "arch-not-an-arch",
        lambda raw: raw["archs"]["cuda"].__setitem__("12.9", ["sm_90"]),
        r"\[archs.cuda\] 12.9: 'sm_90' is not an architecture",
    ),
    ("rocm-archs-missing", lambda raw: raw["archs"].pop("rocm"), r"ROCm variants but \[archs.rocm\] default is empty"),
    ("unknown-key", _set("2.8", "pyhton", ["3.9"]), r"\[release.9\] unknown key 'pyhton' \(did you mean 'python'\?\)"),
    ("unknown-archs-key", lambda raw: raw["archs"].__setitem__("cuda_", {}),
     r"\[archs\] unknown key 'cuda_' \(did you mean 'cuda'\?\)"),
    ("python-not-a-list", _set("2.8", "python", "3.9"), r"\[release.9\] python: must be a list, got '3.9'"),
    ("python-item-not-a-string", _set("2.8", "python", [3.9]), r"\[release.9\] python\[0\]: must be a string, got 3.9"),
    (
        "cuda-two-digit-minor",
        _set("2.8", "cuda", ["12.6", "12.8", "12.10"]),
        r"cuda '12.10' is not a CUDA version with a one-digit minor",
    ),
    ("rocm-two-digit-part", _set("2.8", "rocm", ["6.10"]), r"rocm '6.10' is not a ROCm version with one-digit parts"),
    (
        "patch-of-another-minor",
        _set("2.8", "patches", ["2.8.0", "2.9.0"]),
        r"patches must be non-empty and each start with 2.8.",
    ),
    ("no-patches", _set("2.8", "patches", []), r"patches must be non-empty"),
    ("minor-misspelt", _set("2.8", "torch", "2.8.0"), r"torch '2.8.0' is not a minor release like '2.14'"),
    ("no-releases", lambda raw: raw.__setitem__("release", []), r"expected one or more \[\[release\]\] tables"),
    ("sources-missing", _del("2.14", "sources"), r"\[release.15\] missing key 'sources'"),
    ("sources-empty", _set("2.14", "sources", []), r"torch 2.14: sources must name where its facts were read"),
    ("sources-blank", _set("2.14", "sources", ["  "]), r"torch 2.14: sources must name where its facts were read"),
    ("sources-not-strings", _set("2.14", "sources", [194367]),
     r"\[release.15\] sources\[0\]: must be a string, got 194367"),
    (
        "free-threaded-without-its-base",
        _set("2.8", "python", ["3.9", "3.10", "3.11", "3.12", "3.13t"]),
        r"torch 2.8: python lists free-threaded 3.13t without its base Python",
    ),
    (
        "free-threaded-before-its-base",
        _set("2.8", "python", ["3.9", "3.10", "3.11", "3.12", "3.13t", "3.13"]),
        r"torch 2.8: python must be sorted ascending",
    ),
    (
        "free-threaded-before-pep-703",
        _set("2.8", "python", ["3.9", "3.10", "3.11", "3.12", "3.12t", "3.13"]),
        r"torch 2.8: python lists 3.12t; CPython is free-threaded from 3.13",
    ),
    ("free-threaded-misspelt", _set("2.8", "python", ["3.13", "3.13T"]), r"python '3.13T' is not a CPython version"),
]


@pytest.mark.parametrize(("breakage", "message"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_facts_fail_loudly(raw: dict[str, Any], breakage: Breakage, message: str) -> None:
    broken = copy.deepcopy(raw)
    breakage(broken)
    with pytest.raises(FactsError, match=rf"^{re.escape(SOURCE)}: .*{message}"):
        parse_facts(broken, SOURCE)


def test_the_unbroken_copy_parses(raw: dict[str, Any]) -> None:
    """The breakages above are what fails, not the copy they start from."""
    assert parse_facts(copy.deepcopy(raw), SOURCE) == load_facts()


@pytest.mark.parametrize(
    ("name", "kind", "version"),
    [("cu130", "cuda", "13.0"), ("cu118", "cuda", "11.8"), ("rocm6.2.4", "rocm", "6.2.4"), ("rocm7.1", "rocm", "7.1")],
)
def test_accelerator_round_trip(name: str, kind: str, version: str) -> None:
    accelerator = Accelerator.parse(name)
    assert (accelerator.kind, accelerator.version, accelerator.name, str(accelerator)) == (kind, version, name, name)


@pytest.mark.parametrize("name", ["cuda13", "cu1300", "cu013", "cu130\n", "rocm", "rocm6", "ROCM6.1", "cpu", ""])
def test_accelerator_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="is not an accelerator"):
        Accelerator.parse(name)


def test_python_key_puts_free_threaded_after_its_base() -> None:
    pythons = ["3.14", "3.13t", "3.9", "3.13", "3.14t", "3.10"]
    assert sorted(pythons, key=python_key) == ["3.9", "3.10", "3.13", "3.13t", "3.14", "3.14t"]
    assert (base_python("3.13t"), is_free_threaded("3.13t"), is_free_threaded("3.13")) == ("3.13", True, False)


def test_the_registry_variant_is_verified_and_the_rest_is_cited() -> None:
    """What `facts check` can confirm: the plain wheel's variant; torch 2.14's others rest on its sources."""
    torch214 = load_facts().release("2.14")
    assert torch214.registry_variant == Accelerator.parse("cu130")
    assert [a.name for a in torch214.cited_variants] == ["cu126", "cu132", "rocm7.2"]
    assert any("pytorch/pytorch#194367" in source for source in torch214.sources)


def test_the_newest_releases_ship_what_their_sources_say() -> None:
    facts = load_facts()
    assert facts.release("2.13").cuda == ("12.6", "12.9", "13.0", "13.2")  # cu129 by a cherry-pick
    assert facts.release("2.15").cuda == ("13.0", "13.2")  # 12.6 dropped
    assert facts.release("2.15").python[-3:] == ("3.14t", "3.15", "3.15t")
    assert "3.13t" not in facts.release("2.14").python  # the registry's 2.12.1 on have cp314t only


def test_facts_read_back_from_their_json_equal_the_file_s() -> None:
    """The index keeps the facts in its state as JSON (index_site.catalog.RecordedFacts): read back, they must be
    the very facts, overrides and arch lists included."""
    facts = load_facts()
    assert TorchFacts.from_json(facts.to_json()) == facts
    assert any(release.abi_override for release in facts.releases)  # the mappings take part
