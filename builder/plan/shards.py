"""The plan as GitHub Actions matrices: one row per (package version, torch, toolkit) group, which shares a
container and compiles once, ordered by builder image and cut into shards of at most 256 rows (GitHub's limit
for one matrix), each row with a timeout sized from the plan's cost estimate."""

from __future__ import annotations

from collections.abc import Sequence

from builder.plan.estimate import CostModel, estimate, group_selector, groups, timeout_minutes
from builder.plan.job import Job

GITHUB_MATRIX_LIMIT = 256
JOB_MARGIN_MINUTES = 20  # checkout, image, caches and artifacts around the build step; keeps the job < 6 h
RUNNER_CORES = 4  # GitHub's standard Linux runners for public repositories, the x86_64 and the arm64 one alike
# Where each platform's groups run and the builder image base they build in (builder/data/images.toml): an aarch64
# group runs natively on GitHub's arm64 runner, in PyTorch's aarch64 manylinux image (no emulation, no cross)
RUNNERS = {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}
BASES = {"x86_64": "manylinux_2_28", "aarch64": "manylinux_2_28_aarch64"}


def image_name(job: Job) -> str:
    """The builder image a job runs in (`wheelwright images list`): ``cuda13.0``, ``rocm6.0``."""
    return f"{'cuda' if job.accelerator.kind == 'cuda' else 'rocm'}{job.accelerator.version}"


def rows(jobs: Sequence[Job], model: CostModel) -> list[dict[str, object]]:
    """One matrix row per group, grouped by image (so a runner's image cache serves neighbours)."""
    ours, _ = estimate(jobs, model, runners=1, cores=RUNNER_CORES)
    items = {item.name: item for item in ours.items}
    result = []
    for name, group in groups(jobs).items():
        result.append(
            {
                "group": name,
                "select": group_selector(group[0]),
                "platform": group[0].platform,
                "runner": RUNNERS[group[0].platform],
                "base": BASES[group[0].platform],
                "image": image_name(group[0]),
                "jobs": " ".join(job.identifier for job in group),
                "pythons": " ".join(job.python for job in group),
                "archs": ";".join(map(str, group[0].archs)),
                "timeout_minutes": timeout_minutes(items[name]),
                "job_timeout_minutes": timeout_minutes(items[name]) + JOB_MARGIN_MINUTES,
            }
        )
    return sorted(result, key=lambda row: (str(row["platform"]) != "x86_64", str(row["image"]).startswith("rocm"),
                                           row["image"], row["group"]))


def shard(jobs: Sequence[Job], model: CostModel, size: int = GITHUB_MATRIX_LIMIT) -> dict[str, object]:
    """``{"shards": [0, 1, ...], "matrices": [{"include": rows}, ...]}``; a group is never split."""
    if not 1 <= size <= GITHUB_MATRIX_LIMIT:
        raise ValueError(f"a shard holds 1 to {GITHUB_MATRIX_LIMIT} rows, not {size}")
    all_rows = rows(jobs, model)
    matrices = [{"include": all_rows[start : start + size]} for start in range(0, len(all_rows), size)]
    return {"shards": list(range(len(matrices))), "matrices": matrices}
