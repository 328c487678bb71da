"""The repository's matrix.yaml, expanded: the JSON GitHub Actions reads, checked against a schema, the torch
facts and golden files; --explain and --select."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from builder.cli.main import main
from builder.core.errors import PlanError
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.plan.archs import apply_known_bad
from builder.plan.expand import Plan, expand, load_plan
from builder.plan.facts import load_facts
from builder.plan.matrix import Matrix, load_matrix
from builder.plan.releases import TorchFacts

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "matrix.yaml"
TESTS = ROOT / "tests"
HOST = "3.11"  # stands in for the local profile's `host` Python, so the golden plan is the same on every machine


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(MATRIX)


@pytest.fixture(scope="module")
def facts() -> TorchFacts:
    return load_facts()


@pytest.fixture(scope="module")
def release_json() -> dict[str, Any]:
    """What `wheelwright plan --profile release --format json` prints, run in-process."""
    capture = pytest.MonkeyPatch()
    lines: list[str] = []
    capture.setattr("sys.stdout.write", lines.append)
    try:
        assert main(["plan", "--matrix", str(MATRIX), "--profile", "release", "--format", "json"]) == 0
    finally:
        capture.undo()
    return json.loads("".join(lines))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((TESTS / "schemas" / "plan-matrix.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_release_json_matches_the_schema(
    release_json: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(release_json)]
    assert errors == []


def test_the_schema_rejects_what_it_should(
    release_json: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    """The schema is not vacuous: a wrong label, a stray key and a missing key each fail it."""
    row = release_json["include"][0]
    for broken in (
        {**row, "label": "pt2014cu130"},
        {**row, "extra": 1},
        {k: v for k, v in row.items() if k != "archs"},
    ):
        assert not validator.is_valid({"include": [broken]})


def test_release_json_has_no_duplicate_identifiers(release_json: dict[str, Any]) -> None:
    ids = [row["id"] for row in release_json["include"]]
    assert len(ids) == len(set(ids))


def test_release_json_rows_agree_with_the_facts(release_json: dict[str, Any], facts: TorchFacts) -> None:
    for row in release_json["include"]:
        release = facts.release(row["torch"])
        accelerator = Accelerator.parse(row["accelerator"])
        assert row["torch"] in release.patches, row["id"]
        assert accelerator in release.accelerators, row["id"]
        assert row["python"] in release.python, row["id"]
        assert row["cxx11_abi"] == release.cxx11_abi_for(accelerator), row["id"]
        assert row["manylinux"] == release.manylinux_for(accelerator), row["id"]
        expected, _ = apply_known_bad(row["id"], row["package"], row["version"], accelerator.version,
                                      tuple(map(Arch.parse, facts.default_archs(accelerator))))
        assert row["archs"] == ";".join(map(str, expected)), row["id"]
        assert row["id"] == f"{row['package']}-{row['version']}+{row['label']}-{row['python_tag']}-{row['platform']}"


def test_release_plan_drops_only_what_torch_never_shipped(
    release_json: dict[str, Any], matrix: Matrix, facts: TorchFacts
) -> None:
    """Every (torch, accelerator, Python) the facts allow within the profile's axes is planned, for every package."""
    profile = matrix.profiles["release"]
    possible = {
        (release.minor, accelerator.name, python)
        for release in (facts.release(t) for t in profile.torch or ())
        for accelerator in release.accelerators
        if accelerator.name in (profile.accelerators or ())
        for python in release.python
        if python in (profile.python or ())
    }
    for package in matrix.packages:
        planned = {
            (row["torch"].rsplit(".", 1)[0], row["accelerator"], row["python"])
            for row in release_json["include"]
            if row["package"] == package.name
        }
        assert planned == possible, package.name
        assert {row["version"] for row in release_json["include"] if row["package"] == package.name} == {
            package.latest.version
        }


def test_every_profile_of_the_matrix_expands(matrix: Matrix, facts: TorchFacts) -> None:
    for name in matrix.profiles:
        assert expand(matrix, facts, name, host=HOST).jobs


def _golden_text(plan: Plan) -> str:
    """The GitHub matrix, one job per line, so a review diff shows whole jobs appearing or going."""
    rows = ",\n".join("  " + json.dumps(row) for row in plan.as_github_matrix()["include"])
    return '{"include": [\n' + rows + "\n]}\n"


@pytest.mark.parametrize("profile", ["local", "release"])
def test_golden_plan(profile: str, matrix: Matrix, facts: TorchFacts, update_golden: bool) -> None:
    golden = TESTS / "golden" / f"plan-{profile}.json"
    text = _golden_text(expand(matrix, facts, profile, host=HOST))
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: run pytest --update-golden and review it"
    assert text == golden.read_text(), f"the {profile} plan changed: review, then run pytest --update-golden"


def test_golden_release_is_what_the_cli_prints(release_json: dict[str, Any]) -> None:
    assert json.loads((TESTS / "golden" / "plan-release.json").read_text()) == release_json


def test_the_seeds_first_wheel_is_planned(matrix: Matrix, facts: TorchFacts) -> None:
    """`pip install causal-conv1d==1.1.1+pt21cu118 -f <index-url>`, the seeds' first install line."""
    plan = expand(matrix, facts, "seed-pt21", host=HOST)
    assert [job.identifier for job in plan.jobs] == [
        "causal-conv1d-1.1.1+pt21cu118-cp310-x86_64",
        "causal-conv1d-1.1.1+pt21cu118-cp311-x86_64",
    ]
    assert {(job.torch, job.cxx11_abi, job.manylinux) for job in plan.jobs} == {("2.1.2", False, "manylinux2014")}
    assert all(job.accelerator.version != facts.release("2.1").pypi_cuda for job in plan.jobs)  # PyTorch's index
    assert not any("pt21" in job.identifier for job in expand(matrix, facts, "seed", host=HOST).jobs)


def test_release_plans_free_threaded_pythons_where_torch_shipped_them(release_json: dict[str, Any]) -> None:
    rows = {row["id"]: row for row in release_json["include"]}
    row = rows["causal-conv1d-1.7.0+pt215cu132-cp315t-x86_64"]
    assert (row["python"], row["python_tag"]) == ("3.15t", "cp315t")
    assert "causal-conv1d-1.7.0+pt27cu126-cp313t-x86_64" in rows
    assert not any("pt26" in i and "cp313t" in i for i in rows)  # torch 2.6 has no free-threaded wheels
    assert not any("pt214" in i and "cp313t" in i for i in rows)  # nor 2.14 a 3.13t one


def test_local_plan_follows_the_host_python(matrix: Matrix, facts: TorchFacts) -> None:
    assert {job.python for job in expand(matrix, facts, "local", host="3.12").jobs} == {"3.12"}
    assert expand(matrix, facts, None, host="3.12").profile == matrix.default_profile == "local"


SMALL = """\
packages:
  - name: causal-conv1d
    versions:
      - version: 1.7.0
        sha256: 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b
    recipe:
      import_names: [causal_conv1d]
profiles:
  local:
    torch: ["2.1", "2.4"]
    accelerators: [cu121, cu124, rocm5.6]
    python: ["3.9", "3.12"]
    exclude: ["*pt21cu121-cp39*"]
"""


@pytest.fixture
def small_matrix(tmp_path: Path) -> Path:
    """A few drops of every kind; rendering the release profile's table costs a second, too slow for a unit test."""
    path = tmp_path / "matrix.yaml"
    path.write_text(SMALL)
    return path


def test_explain_lists_dropped_combinations_with_reasons(
    small_matrix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--matrix", str(small_matrix), "--explain"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("│")[1:3] for line in out.splitlines() if line.startswith("│")]
    table = {job.strip(): cell.strip() for job, cell in rows}
    assert (
        table["causal-conv1d-1.7.0+pt21cu124-cp39-x86_64"]
        == "torch 2.1 was never built for CUDA 12.4; built: 11.8, 12.1"
    )
    assert table["causal-conv1d-1.7.0+pt24rocm56-cp39-x86_64"] == "torch 2.4 was never built for ROCm 5.6; built: 6.1"
    assert table["causal-conv1d-1.7.0+pt21cu121-cp312-x86_64"] == (
        "torch 2.1 has no wheels for Python 3.12; it supports 3.8, 3.9, 3.10, 3.11"
    )
    assert table["causal-conv1d-1.7.0+pt21cu121-cp39-x86_64"] == "not selected by include/exclude"
    assert table["causal-conv1d-1.7.0+pt24cu121-cp312-x86_64"] == "2.4.1"  # a job row: its torch column
    plan = load_plan(small_matrix)
    assert f"profile local: {len(plan.jobs)} jobs" in out
    assert f"dropped: {len(plan.dropped)}" in out
    assert len(table) == len(plan.jobs) + len(plan.dropped) == 2 * 3 * 2  # every combination shows up once


def test_without_explain_only_the_count_of_dropped(small_matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(small_matrix)]) == 0
    out = capsys.readouterr().out
    assert "never built" not in out
    assert f"{len(load_plan(small_matrix).dropped)} combinations dropped; --explain lists them with the reason" in out


def test_select_narrows_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--matrix", str(MATRIX), "--profile", "release", "--format", "json", "--select", "*pt214*cp311*"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)["include"]
    assert sorted(row["id"] for row in rows) == sorted(
        f"{package}+pt214{accelerator}-cp311-{platform}"
        for package in ("causal-conv1d-1.7.0", "mamba-ssm-2.3.2.post1")
        for accelerator in ("cu126", "cu130", "cu132", "rocm72")
        for platform in ("x86_64", "aarch64")
        if platform == "x86_64" or accelerator != "rocm72"  # torch never built ROCm for aarch64
    )


def test_select_matching_nothing_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--matrix", str(MATRIX), "--profile", "release", "--select", "*pt214cu118*"])
    captured = capsys.readouterr()
    assert code == PlanError.exit_code
    assert "ERROR --select '*pt214cu118*' matches none of the" in captured.err
    assert "TIP `wheelwright plan --profile release` lists the job identifiers" in captured.err
    assert captured.out == ""


def test_compact_json_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(MATRIX), "--profile", "gpu-box", "--format", "json", "--compact"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert [row["python"] for row in json.loads(out)["include"]] == ["3.12", "3.12"]


def test_json_stays_plain_when_colour_is_forced(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI often forces colour; GitHub's fromJSON() would choke on escape codes."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["plan", "--matrix", str(MATRIX), "--profile", "gpu-box", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    json.loads(out)


def test_table_is_not_squeezed_into_80_columns(small_matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal (a pipe, a CI log) rich would fit the table into 80 columns and cut identifiers short."""
    assert main(["plan", "--matrix", str(small_matrix), "--explain"]) == 0
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert [
        "causal-conv1d-1.7.0+pt24cu124-cp312-x86_64",
        "2.4.1",
        "cuda 12.4",
        "3.12",
        "pre-cxx11",
        "7.5 8.0 8.7 9.0",
        "-",
        "manylinux2014",
    ] in rows
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) > 80


AXES_DEFAULTS = """\
torch: ["2.14"]
accelerators: [cu130]
python: ["3.11"]
packages:
  - name: causal-conv1d
    versions:
      - version: 1.7.0
        sha256: 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b
      - version: 1.6.1
        sha256: e4a697ec2db3906f012e675125569f8b510b4559bc53e3095143d91369e1221b
        url: https://example.org/sdists/causal_conv1d-1.6.1.tar.gz
    recipe:
      import_names: [causal_conv1d]
  - name: mamba-ssm
    versions:
      - version: 2.3.2.post1
        sha256: 104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028
    recipe:
      import_names: [mamba_ssm]
profiles:
  local: {}
  every-version:
    versions: all
    packages: [causal-conv1d]
    archs:
      cu130: ["9.0a", "12.0+PTX"]
"""


def test_profiles_fall_back_to_the_top_level_axes(tmp_path: Path, facts: TorchFacts) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(AXES_DEFAULTS)
    plan = load_plan(path, facts=facts)
    assert [job.identifier for job in plan.jobs] == [
        "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64",
        "mamba-ssm-2.3.2.post1+pt214cu130-cp311-x86_64",
    ]
    job = plan.jobs[0]
    assert job.torch == facts.release("2.14").latest  # a minor means its newest patch
    # the cu130 defaults, but sm_103 under nvcc 13 is known bad for causal-conv1d (builder/data/archs.toml)
    defaults = facts.default_archs(Accelerator.parse("cu130"))
    assert tuple(map(str, job.archs)) == tuple(a for a in defaults if a != "10.3")
    assert tuple(map(str, plan.jobs[1].archs)) == facts.default_archs(Accelerator.parse("cu130"))
    assert job.sdist.filename == "causal_conv1d-1.7.0.tar.gz"
    assert job.sdist.url is None


def test_a_profile_can_build_every_version_of_some_packages_for_its_own_archs(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(AXES_DEFAULTS)
    plan = load_plan(path, "every-version")
    assert [(job.version, tuple(map(str, job.archs)), job.sdist.url) for job in plan.jobs] == [
        ("1.6.1", ("9.0a", "12.0+PTX"), "https://example.org/sdists/causal_conv1d-1.6.1.tar.gz"),
        ("1.7.0", ("9.0a", "12.0+PTX"), None),
    ]
    assert plan.as_github_matrix()["include"][0]["archs"] == "9.0a;12.0+PTX"


def test_an_error_in_a_top_level_axis_points_at_the_top_level(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(AXES_DEFAULTS.replace("accelerators: [cu130]", "accelerators: [cu130, cu118]"))
    with pytest.raises(PlanError, match=r"matrix.yaml:2: accelerators.1: no torch of profile 'local' has cu118"):
        load_plan(path)
