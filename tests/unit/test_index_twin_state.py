"""What the index asks of the twin step, and when: a twin is checked again exactly when its file's or its wheel's
full identity moved (an mtime set back does not hide a write: the ctime moved), never on a run where neither did;
a wheel that cannot have a twin is asked once per identity; without a twin step nothing is published."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.steps.twins import VariantTwins
from index_site.site import build_site
from index_site.twins import NO_CHECKER
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.jobs import local_job

BASE = "https://wheels.example.org"


class Counting(VariantTwins):
    """The real twin step, counting what the index asks of it."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.checked: list[str] = []

    def make(self, wheel: Path, folder: Path) -> Path:
        self.made.append(wheel.name)
        return super().make(wheel, folder)

    def problems(self, wheel: Path, twin: Path) -> list[str]:
        self.checked.append(twin.name)
        return super().problems(wheel, twin)


@pytest.fixture
def output(tmp_path: Path) -> Path:
    job = local_job()
    (tmp_path / "dist").mkdir()
    with_provenance(job_wheel(tmp_path / "dist", job, {"causal_conv1d/__init__.py": b"x = 1\n"}), job)
    make_wheel(tmp_path / "dist", WheelSpec(label="pt213cu130"))  # no provenance: no twin
    return tmp_path


def index(output: Path, twins: Counting | None):
    return build_site(output, output / "site", base_url=BASE, twins=twins)


def test_an_unchanged_run_asks_the_twin_step_nothing(output: Path) -> None:
    first = Counting()
    report = index(output, first)
    assert len(first.made) == 1 and first.checked == [] and len(report.twins.twins) == 1  # make_twin checks it
    again = Counting()
    report = index(output, again)
    assert (again.made, again.checked) == ([], [])
    plain = next((output / "dist").glob("*pt213cu130*")).name
    assert len(report.twins.twins) == 1 and list(report.twins.without.values()) == [(plain,)]


def test_a_twin_or_wheel_whose_identity_moved_is_checked_again(output: Path) -> None:
    index(output, Counting())
    twin = next((output / "variant").iterdir())
    status = twin.stat()
    os.utime(twin, ns=(status.st_atime_ns, status.st_mtime_ns))  # the same times, set again: the ctime moves
    counting = Counting()
    index(output, counting)
    assert counting.checked == [twin.name] and counting.made == []
    wheel = next((output / "dist").glob("*pt214cu130*"))
    os.utime(wheel, ns=(wheel.stat().st_atime_ns, wheel.stat().st_mtime_ns))
    counting = Counting()
    index(output, counting)
    assert counting.checked == [twin.name]


def test_without_a_twin_step_no_twin_is_made_and_none_unchecked_is_published(output: Path) -> None:
    report = index(output, None)
    assert report.twins.twins == () and NO_CHECKER in report.twins.without
    assert not (output / "variant").exists() and not (output / "site/variant").exists()
    VariantTwins().make(next((output / "dist").glob("*pt214cu130*")), output / "variant")  # made by the build
    for _ in range(2):
        report = index(output, None)
        assert report.twins.twins == () and [NO_CHECKER in r.reason for r in report.twins.refused] == [True]
        assert not (output / "site/variant").exists()
    assert len(index(output, Counting()).twins.twins) == 1
