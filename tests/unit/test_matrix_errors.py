"""Broken matrix files: each gets its own clear ERROR line naming file:line and key, a non-zero exit code, no traceback.

Each case edits a small valid matrix. The edit marks the line the error must point at with ``# HERE``, so the
expected location is read from the broken file itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field, ValidationError

from builder.cli.main import main
from builder.core.errors import ConfigError, PlanError
from builder.plan.expand import load_plan
from builder.plan.matrix import EnvName, _schema_path, _Strict

# A valid one-package, one-profile matrix; the cases below edit it. The integration tests use it too.
VALID = (Path(__file__).resolve().parents[1] / "data" / "matrix-minimal.yaml").read_text()

SHA = "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"
SECOND_PACKAGE = f"""\
  - name: mamba-ssm
    versions:
      - version: 2.3.2.post1
        sha256: {SHA}
    recipe:
      import_names: [mamba_ssm]
"""


@dataclass(frozen=True)
class Case:
    id: str
    edits: tuple[tuple[str, str], ...]  # (old, new) replacements applied to VALID
    phrase: str  # the part of the message that says what is wrong
    exit_code: int = ConfigError.exit_code
    args: tuple[str, ...] = ()


def case(id: str, old: str, new: str, phrase: str, **kwargs: object) -> Case:
    return Case(id=id, edits=((old, new),), phrase=phrase, **kwargs)  # type: ignore[arg-type]


PLAN = PlanError.exit_code
CASES = [
    *(
        case(f"torch-index-{name}", "default_profile: local\n",
             f"default_profile: local\ntorch_index: {value}  # HERE\n",
             f"torch index {parsed!r} is not an http(s) or file URL")
        for name, value, parsed in (
            ("no-scheme", "download.pytorch.org/whl/{accelerator}/", "download.pytorch.org/whl/{accelerator}/"),
            ("other-field", "https://mirror.test/{cuda}/", "https://mirror.test/{cuda}/"),
            ("open-brace", "https://mirror.test/{accelerator", "https://mirror.test/{accelerator"),
            ("space", "'https://mirror.test/a b/{accelerator}/'", "https://mirror.test/a b/{accelerator}/"),
        )
    ),
    case("unknown-key", "      env:\n", "      envv:  # HERE\n", "unknown key 'envv' (did you mean 'env'?)"),
    case("unknown-top-key", "profiles:\n", "profile:  # HERE\n", "unknown key 'profile' (did you mean 'profiles'?)"),
    case(
        "unknown-profile-key",
        "    torch: [2.14.1]\n",
        "    torhc: [2.14.1]  # HERE\n",
        "unknown key 'torhc' (did you mean 'torch'?)",
    ),
    case("torch-typo", "[2.14.1]", "[2.14.9]  # HERE", "torch 2.14.9 is not in the torch facts", exit_code=PLAN),
    case(
        "torch-unknown-minor",
        "[2.14.1]",
        "[2.41]  # HERE",
        "torch 2.41 is not in the torch facts (did you mean '2.4.1'?)",
        exit_code=PLAN,
    ),
    case("torch-not-a-version", "[2.14.1]", "[latest]  # HERE", "torch 'latest' is not a release like '2.14'"),
    case(
        "cuda-never-built",
        "[cu130]",
        "[cu124]  # HERE",
        "torch 2.14 was never built for CUDA 12.4; built: 12.6, 13.0, 13.2",
        exit_code=PLAN,
    ),
    case(
        "rocm-never-built",
        "[cu130]",
        "[rocm6.1]  # HERE",
        "torch 2.14 was never built for ROCm 6.1; built: 7.2",
        exit_code=PLAN,
    ),
    case(
        "accelerator-misspelt", "[cu130]", "[cuda13]  # HERE", "'cuda13' is not an accelerator; write CUDA as 'cu130'"
    ),
    case(
        "python-never-supported",
        '["3.11"]',
        '["3.9"]  # HERE',
        "torch 2.14 has no wheels for Python 3.9; it supports 3.10",
        exit_code=PLAN,
    ),
    case("python-not-a-version", '["3.11"]', '["3.1O"]  # HERE', "python '3.1O' is not a CPython version like '3.11'"),
    case("python-free-threaded-misspelt", '["3.11"]', '["3.13T"]  # HERE', "free-threaded '3.13t'"),
    case(
        "python-free-threaded-never-shipped",
        '["3.11"]',
        '["3.13t"]  # HERE',
        "torch 2.14 has no wheels for Python 3.13t; it supports 3.10, 3.11, 3.12, 3.13, 3.14, 3.14t",
        exit_code=PLAN,
    ),
    case(
        "selector-bad",
        '    python: ["3.11"]\n',
        '    python: ["3.11"]\n    exclude: ["cp311 x86"]  # HERE\n',
        "selector 'cp311 x86' is not an fnmatch pattern over job identifiers",
    ),
    case(
        "selector-matches-nothing",
        '    python: ["3.11"]\n',
        '    python: ["3.11"]\n    exclude: ["*cp312*"]  # HERE\n',
        "selector '*cp312*' matches no job of profile 'local'",
        exit_code=PLAN,
    ),
    Case(
        id="include-impossible-literal",
        edits=(
            ("[2.14.1]", '["2.4", "2.14"]'),
            (
                '    python: ["3.11"]\n',
                (
                    '    python: ["3.11"]\n    include:\n      - causal-conv1d-1.7.0+pt214cu130-cp311-x86_64\n'
                    "      - causal-conv1d-1.7.0+pt24cu130-cp311-x86_64  # HERE\n"
                ),
            ),
        ),
        phrase=(
            "include asks for causal-conv1d-1.7.0+pt24cu130-cp311-x86_64, which cannot be built: "
            "torch 2.4 was never built for CUDA 13.0; built: 11.8, 12.1, 12.4"
        ),
        exit_code=PLAN,
    ),
    Case(
        id="include-only-impossible",
        edits=(
            ("[2.14.1]", '["2.4", "2.14"]'),
            ('    python: ["3.11"]\n', '    python: ["3.11"]\n    include: ["*pt24*"]  # HERE\n'),
        ),
        phrase="include '*pt24*' matches only combinations that cannot be built: torch 2.4 was never built for CUDA",
        exit_code=PLAN,
    ),
    case("sha256-missing", f"        sha256: {SHA}\n", "", "missing required key 'sha256'"),
    case(
        "sha256-bad",
        f"        sha256: {SHA}\n",
        f"        sha256: {SHA[:-1]}  # HERE\n",
        "is not a sha256 digest: 64 lowercase hex digits (63 characters given)",
    ),
    case(
        "sha256-uppercase",
        f"        sha256: {SHA}\n",
        f"        sha256: {SHA.upper()}  # HERE\n",
        "is not a sha256 digest",
    ),
    case(
        "package-duplicate",
        "profiles:\n",
        VALID.split("packages:\n")[1]
        .split("profiles:")[0]
        .replace("  - name: causal-conv1d\n", "  - name: causal-conv1d  # HERE\n")
        + "profiles:\n",
        "package 'causal-conv1d' is listed twice (at packages.0.name)",
    ),
    case(
        "version-duplicate",
        "    recipe:\n",
        f"      - version: 1.7.0  # HERE\n        sha256: {SHA}\n    recipe:\n",
        "version '1.7.0' is listed twice (at packages.0.versions.0.version)",
    ),
    case(
        "version-same-as",
        "    recipe:\n",
        f"      - version: '1.7'  # HERE\n        sha256: {SHA}\n    recipe:\n",
        "version '1.7' is the same version as '1.7.0'",
    ),
    case(
        "version-not-pep440", "version: 1.7.0", "version: 1.7-final-x  # HERE", "'1.7-final-x' is not a PEP 440 version"
    ),
    case("torch-minor-twice", "[2.14.1]", "[2.14.1, '2.14']  # HERE", "torch '2.14' is the same torch as '2.14.1'"),
    case(
        "accelerator-twice",
        "[cu130]",
        "[cu130, cu130]  # HERE",
        "accelerator 'cu130' is listed twice (at profiles.local.accelerators.0)",
    ),
    case("list-expected", "[cu130]", "cu130  # HERE", "expected a list, got 'cu130'"),
    case(
        "mapping-expected",
        '    python: ["3.11"]\n',
        '    python: ["3.11"]\n  gpu: h200  # HERE\n',
        "expected a mapping, got 'h200'",
    ),
    case(
        "string-expected",
        "    python:",
        "    description: [a, b]  # HERE\n    python:",
        "expected a string, got a list",
    ),
    case(
        "empty-value",
        "    python:",
        "    archs:\n      cu130:  # HERE\n    python:",
        "expected a list, got nothing (an empty value)",
    ),
    case("empty-list", "[cu130]", "[]  # HERE", "accelerators: must not be empty"),
    case(
        "duplicate-yaml-key",
        "    python:",
        "    torch: [2.14.0]  # HERE\n    python:",
        "profiles.local.torch: key 'torch' appears twice in the same mapping (first on line 16)",
    ),
    case(
        "invalid-yaml",
        '    python: ["3.11"]\n',
        '    python: ["3.11"\n  bad: ]  # HERE\n',
        "not valid YAML: expected ',' or ']', but got '<scalar>'",
    ),
    case(
        "tab-indent",
        "    torch: [2.14.1]\n",
        "\ttorch: [2.14.1]  # HERE\n",
        "not valid YAML: found character '\\t' that cannot start any token",
    ),
    case(
        "two-documents",
        '    python: ["3.11"]\n',
        '    python: ["3.11"]\n---  # HERE\nprofiles: {}\n',
        "not valid YAML: expected a single document in the stream but found another document",
    ),
    case("complex-key", "profiles:\n", "? [a, b]  # HERE\n: 1\nprofiles:\n", "a key must be a plain value"),
    case(
        "default-profile-unknown",
        "default_profile: local",
        "default_profile: locl  # HERE",
        "'locl' is not a profile (did you mean 'local'?)",
    ),
    case("profile-unknown-cli", "", "", "no profile 'relase'", args=("--profile", "relase")),
    case(
        "patch-unknown",
        "        - name: cxx20",
        "        - name: cxx2O  # HERE",
        "unknown patch 'cxx2O' (did you mean 'cxx20'?)",
    ),
    case("patch-range-bad", 'torch: ">=2.14"', 'torch: "2.14+"  # HERE', "'2.14+' is not a version specifier"),
    case(
        "name-not-normalised",
        "  - name: causal-conv1d",
        "  - name: Causal_Conv1d  # HERE",
        "write the package name normalised: 'causal-conv1d', not 'Causal_Conv1d'",
    ),
    case(
        "env-name-bad",
        "        CAUSAL_CONV1D_FORCE_BUILD: TRUE",
        "        FORCE BUILD: TRUE  # HERE",
        "'FORCE BUILD' is not an environment variable name",
    ),
    case(
        "arch-wrong-kind",
        "    python:",
        "    archs:\n      cu130: [gfx942]  # HERE\n    python:",
        "'gfx942' is not a CUDA architecture",
    ),
    case(
        "arch-bad",
        "    python:",
        "    archs:\n      cu130: [sm_90]  # HERE\n    python:",
        "'sm_90' is not a GPU architecture like '9.0'",
    ),
    case(
        "archs-stray-accelerator",
        "    python:",
        "    archs:\n      cu128: ['9.0']  # HERE\n    python:",
        "the profile does not build cu128 (its accelerators: cu130)",
        exit_code=PLAN,
    ),
    case(
        "profile-unknown-package",
        "    python:",
        "    packages: [causal-conv1]  # HERE\n    python:",
        "no package 'causal-conv1' in packages (did you mean 'causal-conv1d'?)",
    ),
    case(
        "versions-literal",
        "    python:",
        "    versions: newest  # HERE\n    python:",
        "expected 'latest' or 'all', got 'newest'",
    ),
    case(
        "no-packages", VALID[VALID.index("packages:") : VALID.index("profiles:")], "", "missing required key 'packages'"
    ),
    case(
        "no-torch",
        "    torch: [2.14.1]\n",
        "",
        "no 'torch' given, neither in the profile nor at the top level",
        exit_code=PLAN,
    ),
    case(
        "second-package-broken",
        "profiles:\n",
        SECOND_PACKAGE.replace("    recipe:\n", "    recipe:\n      abi_env: 3  # HERE\n").replace(
            "import_names: [mamba_ssm]", "import_names: [mamba-ssm]"
        )
        + "profiles:\n",
        "'3' is not an environment variable name",
    ),
]


def broken_text(c: Case) -> str:
    text = VALID
    for old, new in c.edits:
        assert old in text, f"case {c.id}: {old!r} not in the valid matrix"
        text = text.replace(old, new, 1)
    return text


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_broken_matrix_gets_its_own_message(c: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    text = broken_text(c)
    path.write_text(text)
    marked = [n for n, line in enumerate(text.splitlines(), 1) if "# HERE" in line]
    where = f"{path}:{marked[0]}:" if marked else f"{path}"

    code = main(["plan", "--matrix", str(path), *c.args])

    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("ERROR ")]
    assert code == c.exit_code, captured.err
    assert any(c.phrase in line and where in line for line in errors), (
        f"want {where} ... {c.phrase!r} in:\n{captured.err}"
    )
    assert "Traceback" not in captured.err + captured.out
    assert captured.out == ""


def test_the_messages_are_distinct() -> None:
    phrases = [c.phrase for c in CASES]
    assert len(set(phrases)) == len(phrases)


def test_the_valid_matrix_is_valid(tmp_path: Path) -> None:
    """The cases above fail because of their edit, not because the matrix they edit is broken."""
    path = tmp_path / "matrix.yaml"
    path.write_text(VALID)
    plan = load_plan(path, host="3.11")
    assert [job.identifier for job in plan.jobs] == ["causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"]
    # an unquoted TRUE stays the string the build reads, not a YAML boolean
    assert plan.jobs[0].recipe.env == (("CAUSAL_CONV1D_FORCE_BUILD", "TRUE"),)


def test_libyaml_reads_a_valid_matrix_and_python_words_a_broken_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid file is composed by libyaml alone (the same values and lines as the pure-Python parser gives);
    only a file libyaml refuses reaches the pure-Python parser, whose message is the one shown."""
    from builder.plan import matrix

    path = tmp_path / "matrix.yaml"
    path.write_text(VALID)
    python_loader = matrix._Loader
    slow = matrix._composed(python_loader(VALID))  # (values, lines) as the pure-Python parser reads them
    used: list[str] = []

    def counted(text: str) -> matrix._Loader:
        used.append(text)
        return python_loader(text)

    monkeypatch.setattr(matrix, "_Loader", counted)
    assert matrix._parse_yaml(VALID, path) == slow
    assert used == []
    broken = VALID.replace("default_profile: local", "default_profile: [local")
    with pytest.raises(ConfigError, match=r"matrix.yaml:\d+: not valid YAML: .*(expected|flow)"):
        matrix._parse_yaml(broken, path)
    assert used == [broken]


def test_every_problem_is_reported_in_file_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    text = (
        VALID.replace("      env:\n", "      envv:\n")
        .replace("[cu130]", "[cu1300]")
        .replace("default_profile: local", "default_profile: [x]")
    )
    path.write_text(text)

    assert main(["plan", "--matrix", str(path)]) == ConfigError.exit_code

    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ERROR ")]
    lines = [int(line.split(f"{path}:")[1].split(":")[0]) for line in errors]
    assert len(errors) == 3
    assert lines == sorted(lines)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("", "the matrix is empty"),
        ("# only a comment\n", "the matrix is empty"),
        ("- a\n- b\n", "the matrix is a list, not a mapping"),
    ],
)
def test_empty_or_non_mapping_matrix(
    text: str, phrase: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    assert main(["plan", "--matrix", str(path)]) == ConfigError.exit_code
    assert f"ERROR {path}: {phrase}" in capsys.readouterr().err


def test_missing_matrix_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.yaml"
    assert main(["plan", "--matrix", str(path)]) == ConfigError.exit_code
    assert f"ERROR {path}: cannot read the matrix: No such file or directory" in capsys.readouterr().err


def test_host_python_listed_twice(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(VALID.replace('["3.11"]', '["3.11", host]'))
    with pytest.raises(
        PlanError, match=r"matrix.yaml:18: profiles.local.python.1: Python 3.11 \('host'.*already listed at"
    ):
        load_plan(path, host="3.11")
    assert len(load_plan(path, host="3.12").jobs) == 2


def test_host_python_torch_never_supported(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(VALID.replace('["3.11"]', "[host]"))
    with pytest.raises(PlanError, match=r"has Python 3.9 \('host', the Python running wheelwright\)"):
        load_plan(path, host="3.9")


def test_messages_keep_their_brackets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Selectors have [...] in them; the console must not read them as rich markup and swallow them."""
    path = tmp_path / "matrix.yaml"
    path.write_text(VALID.replace('["3.11"]', '["3.11"]\n    exclude: ["*cp31[23]*"]'))
    assert main(["plan", "--matrix", str(path)]) == PlanError.exit_code
    assert "selector '*cp31[23]*' matches no job" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(VALID.replace("[cu130]", "[cu124]"))
    assert main(["--debug", "plan", "--matrix", str(path)]) == PlanError.exit_code
    assert "Traceback" in capsys.readouterr().err


class _Sub(_Strict):
    name: str = ""


class _Shapes(_Strict):
    """Shapes whose pydantic locations carry extra parts: a real union, and dicts with checked keys."""

    choice: str | list[_Sub] = ""
    table: dict[EnvName, _Sub] = Field(default_factory=dict)


@pytest.mark.parametrize(
    ("raw", "loc", "parent"),
    [
        ({"choice": [{"nam": "x"}]}, ("choice", 0, "nam"), _Sub),  # pydantic: choice.list[_Sub].0.nam
        ({"table": {"A B": {}}}, ("table", "A B"), dict[EnvName, _Sub]),  # pydantic: table.'A B'.[key]
        ({"table": {"A": {"nam": 1}}}, ("table", "A", "nam"), _Sub),
    ],
)
def test_locations_read_naturally(raw: dict[str, Any], loc: tuple[Any, ...], parent: object) -> None:
    with pytest.raises(ValidationError) as caught:
        _Shapes.model_validate(raw)
    assert (loc, parent) in [_schema_path(tuple(e["loc"]), _Shapes) for e in caught.value.errors()]
