"""Arch spellings split into SASS and PTX, and the arch facts of builder/data/archs.toml applied to a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cli.main import main
from builder.core.errors import FactsError
from builder.plan.arch import Arch
from builder.plan.archs import apply_known_bad, known_bad, parse_known_bad, split, torch_arch_list
from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags

MATRIX = """\
default_profile: b300
packages:
  - name: causal-conv1d
    versions:
      - {version: 1.7.0, sha256: 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b}
    recipe: {import_names: [causal_conv1d_cuda]}
  - name: mamba-ssm
    versions:
      - {version: 2.3.2.post1, sha256: 104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028}
    recipe: {import_names: [selective_scan_cuda]}
profiles:
  b300:
    torch: [2.14.1]
    accelerators: [cu130]
    python: ["3.11"]
    archs:
      cu130: ["9.0", "10.0", "10.3"]
  jit:
    torch: [2.14.1]
    accelerators: [cu130]
    python: ["3.11"]
    archs:
      cu130: ["8.0", "9.0+PTX", "compute_100"]
"""


def parsed(*texts: str) -> tuple[Arch, ...]:
    return tuple(map(Arch.parse, texts))


def spelled(archs: tuple[Arch, ...]) -> tuple[str, ...]:
    return tuple(map(str, archs))


def test_split_spellings() -> None:
    assert split(parsed("8.0", "9.0+PTX", "compute_100", "10.0f")) == (("8.0", "9.0", "10.0f"), ("9.0", "10.0"))
    assert split(parsed("gfx942")) == (("gfx942",), ())
    assert torch_arch_list(parsed("8.0", "9.0+PTX", "compute_100")) == "8.0;9.0+PTX;10.0+PTX"


def test_ptx_only_reaches_nvcc_as_a_virtual_arch_only() -> None:
    assert cuda_gencode_flags(parsed("compute_90"), "w") == ("-gencode", "arch=compute_90,code=compute_90")
    assert cuda_gencode_flags(parsed("9.0+PTX"), "w") == (
        "-gencode",
        "arch=compute_90,code=sm_90",
        "-gencode",
        "arch=compute_90,code=compute_90",
    )


def test_sm103_is_dropped_for_causal_conv1d_under_nvcc_13_only() -> None:
    archs, (note,) = apply_known_bad("id", "causal-conv1d", "1.7.0", "13.0", parsed("9.0", "10.3"))
    assert spelled(archs) == ("9.0", "10.0")  # the family SASS that runs on sm_103 is added when missing
    assert "issues/105" in note.citation and "sm_100 covers it" in note.describe()
    assert apply_known_bad("id", "causal-conv1d", "1.7.0", "12.9", parsed("10.3")) == (parsed("10.3"), ())
    assert apply_known_bad("id", "mamba-ssm", "2.3.2.post1", "13.0", parsed("10.3")) == (parsed("10.3"), ())
    # with +PTX the PTX of 10.3 stays: only its SASS is wrong
    kept = apply_known_bad("id", "causal-conv1d", "1.7.0", "13.0", parsed("10.0", "10.3+PTX"))[0]
    assert spelled(kept) == ("10.0", "compute_103") and kept[1] == Arch.parse("compute_103")


def test_the_plan_drops_it_and_explain_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    plan = load_plan(path)
    archs = {job.package: spelled(job.archs) for job in plan.jobs}
    assert archs == {"causal-conv1d": ("9.0", "10.0"), "mamba-ssm": ("9.0", "10.0", "10.3")}
    assert main(["plan", "--matrix", str(path), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "arch lists chosen or corrected: 1" in out
    assert "no sm_103 SASS (sm_100 covers it): nvcc 13.x miscompiles" in out
    assert "https://github.com/Dao-AILab/causal-conv1d/issues/105" in out


def test_the_plan_table_shows_sass_and_ptx_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    assert main(["plan", "--matrix", str(path), "--profile", "jit"]) == 0
    rows = [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("│")
    ]
    row = next(r for r in rows if r[0].startswith("mamba-ssm"))
    assert row[5:7] == ["8.0 9.0", "9.0 10.0"]


def test_the_arch_facts_are_checked_on_load() -> None:
    assert known_bad()[0].package == "causal-conv1d"
    good = {
        "package": "p",
        "versions": "<2",
        "toolkit": ">=13",
        "sass": "10.3",
        "kept": "10.0",
        "reason": "r",
        "citation": "https://example.org/1",
    }
    with pytest.raises(FactsError, match=r"archs.toml: \[known_bad.0\] citation: must be a link"):
        parse_known_bad({"known_bad": [{**good, "citation": "issue 105"}]})
    with pytest.raises(FactsError, match=r"\[known_bad.1\] kept: '10' is not a CUDA arch"):
        parse_known_bad({"known_bad": [good, {**good, "kept": "10"}]})
    with pytest.raises(FactsError, match=r"\[known_bad.0\] toolkit: 'thirteen' is not a version specifier"):
        parse_known_bad({"known_bad": [{**good, "toolkit": "thirteen"}]})
    with pytest.raises(FactsError, match=r"\[known_bad.0\] missing key 'reason'"):
        parse_known_bad({"known_bad": [{k: v for k, v in good.items() if k != "reason"}]})
    with pytest.raises(FactsError, match=r"\[known_bad.0\] unknown key 'sas'"):
        parse_known_bad({"known_bad": [{**good, "sas": "9.0"}]})


PACKAGE_ARCHS = """\
  narrow:
    torch: [2.14.1]
    accelerators: [cu130]
    python: ["3.11"]
    archs:
      cu130: ["9.0", "10.0", "10.3"]
    package_archs:
      - package: mamba-ssm
        archs: {cu130: ["9.0+PTX"]}
        reason: selective_scan costs an hour per arch here
"""


def test_a_package_may_have_its_own_arch_list_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX + PACKAGE_ARCHS)
    plan = load_plan(path, "narrow")
    archs = {job.package: spelled(job.archs) for job in plan.jobs}
    # the other package keeps the profile's list (and the arch facts still apply to it)
    assert archs == {"causal-conv1d": ("9.0", "10.0"), "mamba-ssm": ("9.0+PTX",)}
    assert main(["plan", "--matrix", str(path), "--profile", "narrow", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "9.0+PTX (the profile's package_archs): selective_scan costs an hour per arch here" in out


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "      - {package: mamba-sm, archs: {cu130: ['9.0']}, reason: r}\n",
            "package_archs.0.package: no package 'mamba-sm' in packages (did you mean 'mamba-ssm'?)",
        ),
        (
            "      - {package: mamba-ssm, archs: {cu130: ['9.0']}, reason: r}\n"
            + "      - {package: mamba-ssm, archs: {cu130: ['8.0']}, reason: r}\n",
            "package_archs.1.package: 'mamba-ssm' already has its arch lists",
        ),
        ("      - {package: mamba-ssm, archs: {cu130: [gfx942]}, reason: r}\n", "'gfx942' is not a CUDA architecture"),
        ("      - {package: mamba-ssm, archs: {cu126: ['9.0']}, reason: r}\n", "the profile does not build cu126"),
        ("      - {package: mamba-ssm, archs: {cu130: ['9.0']}}\n", "reason"),
    ],
)
def test_bad_package_archs_name_their_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, message: str
) -> None:
    path = tmp_path / "matrix.yaml"
    profile = PACKAGE_ARCHS.split("    package_archs:\n")[0] + "    package_archs:\n" + entry
    path.write_text(MATRIX + profile)
    assert main(["plan", "--matrix", str(path), "--profile", "narrow"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("ERROR ") and message in err and "Traceback" not in err
