"""The seed profile's old releases (causal-conv1d < 1.5.1, mamba-ssm 1.0.1) ship sdists without csrc/; the build
takes it from upstream's release commit. For each pinned version: the real sdist from the registry, the real commit
archive, its tree digest as matrix.yaml pins it, and setup.py equal to the sdist's. The archive comes from the
source cache or the forge; CI reaches neither forge nor cache, so there each case is skipped with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.plan.job import Job
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.upstream import UpstreamUnavailable, fetch_archive, overlay_upstream

MATRIX = Path(__file__).resolve().parents[2] / "matrix.yaml"


def pinned_jobs() -> list[Job]:
    """One seed job per (package, version) whose sdist needs upstream files."""
    jobs: dict[tuple[str, str], Job] = {}
    for job in load_plan(MATRIX, "seed", host="3.11").jobs:
        if job.sdist.upstream is not None:
            jobs.setdefault((job.package, job.version), job)
    return list(jobs.values())


@pytest.mark.parametrize("job", pinned_jobs(), ids=lambda job: f"{job.package}-{job.version}")
def test_the_pinned_commit_supplies_what_the_sdist_lacks(job: Job, tmp_path: Path) -> None:
    assert job.sdist.upstream is not None
    try:
        fetch_archive(job.sdist.upstream, job.identifier)
    except UpstreamUnavailable as error:
        pytest.skip(f"{error} ({error.tip})")
    source = unpack_sdist(fetch_sdist(job), tmp_path / "src")
    assert not (source / "csrc").exists()  # the control: the registry's sdist cannot compile anything
    added = overlay_upstream(job, source)  # checks the tree digest and setup.py against the sdist's
    assert added and all("tree digest checked" in line for line in added)
    assert any(path.suffix == ".cu" for path in (source / "csrc").rglob("*"))
