"""The installed `wheelwright` console script, run as a real process: what CI and users see, exit codes included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from builder.core.errors import ConfigError, PlanError

ROOT = Path(__file__).resolve().parents[2]
WHEELWRIGHT = Path(sys.executable).with_name("wheelwright")


def wheelwright(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert WHEELWRIGHT.exists(), f"{WHEELWRIGHT} is missing: run `make venv`"
    # A pipe, not a terminal, and no colour forced: what a CI step captures.
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "COLUMNS")}
    return subprocess.run(
        [str(WHEELWRIGHT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_release_json_through_a_pipe_matches_the_schema_and_golden() -> None:
    result = wheelwright("plan", "--profile", "release", "--format", "json", "--compact")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    schema = json.loads((ROOT / "tests" / "schemas" / "plan-matrix.schema.json").read_text())
    jsonschema.validate(plan, schema, cls=jsonschema.Draft202012Validator)
    assert plan == json.loads((ROOT / "tests" / "golden" / "plan-release.json").read_text())


def test_release_explain_through_a_pipe_is_whole() -> None:
    result = wheelwright("plan", "--profile", "release", "--explain")
    assert result.returncode == 0, result.stderr
    assert "│ causal-conv1d-1.7.0+pt21cu124-cp39-x86_64 " in result.stdout
    assert "torch 2.1 was never built for CUDA 12.4; built: 11.8, 12.1" in result.stdout
    assert "…" not in result.stdout


@pytest.mark.parametrize(
    ("edit", "code", "message"),
    [
        (
            ("      env:", "      envv:"),
            ConfigError.exit_code,
            ":8: packages.0.recipe.envv: unknown key 'envv' (did you mean 'env'?)",
        ),
        (
            ("[cu130]", "[cu124]"),
            PlanError.exit_code,
            ":17: profiles.local.accelerators.0: no torch of profile 'local' has cu124: torch 2.14 was never built",
        ),
    ],
    ids=["unknown-key", "cuda-never-built"],
)
def test_a_broken_matrix_is_one_error_line_and_an_exit_code(
    edit: tuple[str, str], code: int, message: str, tmp_path: Path
) -> None:
    valid = (ROOT / "tests" / "data" / "matrix-minimal.yaml").read_text()
    assert edit[0] in valid
    (tmp_path / "matrix.yaml").write_text(valid.replace(*edit))

    result = wheelwright("plan", cwd=tmp_path)

    assert result.returncode == code
    assert result.stdout == ""
    assert result.stderr.startswith(f"ERROR matrix.yaml{message}")
    assert "Traceback" not in result.stderr


def test_unknown_profile_names_the_profiles() -> None:
    result = wheelwright("plan", "--profile", "relase")
    assert result.returncode == ConfigError.exit_code
    assert "ERROR no profile 'relase' in matrix.yaml (did you mean 'release'?)" in result.stderr
    profiles = ", ".join(yaml.safe_load((ROOT / "matrix.yaml").read_text())["profiles"])  # in the file's order
    assert f"TIP profiles: {profiles}" in result.stderr and "local, gpu-box" in profiles
