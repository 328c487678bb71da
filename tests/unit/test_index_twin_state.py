"""What the index asks of the twin step, and when: a twin is checked again exactly when its file's or its wheel's
full identity moved (an mtime set back does not hide a write: the ctime moved), never on a run where neither did;
a wheel that cannot have a twin is asked once per identity; without a twin step nothing is published."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import pytest

from builder.steps.twins import VariantTwins
from index_site import site as index_site_module
from index_site import twins as index_twins
from index_site.stage import build_site
from index_site.twins import NO_CHECKER, read_derived
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.index_checks import site_files
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
    assert report.twins_published == 1 and list(report.twins.without.values()) == [(plain,)]


def test_a_twin_or_wheel_whose_identity_moved_is_checked_again(output: Path, monkeypatch) -> None:
    """Checked again: its bytes hashed against the twin derived from its wheel (one read), which they match, so
    the twin step's slower comparison is not asked for."""
    hashed: list[str] = []

    def counted(path: Path, *args):
        hashed.append(path.name)
        return read_derived(path, *args)

    monkeypatch.setattr(index_twins, "read_derived", counted)
    index(output, Counting())
    twin = next((output / "variant").iterdir())
    for touched in (twin, next((output / "dist").glob("*pt214cu130*"))):
        status = touched.stat()
        os.utime(touched, ns=(status.st_atime_ns, status.st_mtime_ns))  # the same times, set again: ctime moves
        hashed.clear()
        counting = Counting()
        index(output, counting)
        assert hashed == [twin.name] and (counting.checked, counting.made) == ([], [])
    hashed.clear()
    index(output, Counting())
    assert hashed == []


def _added_with_twin(output: Path) -> Path:
    """A new wheel with its twin beside it in variant/, as the build leaves them, both big enough to be compared
    (index_site.twins._COMPARED_FROM); the twin's path."""
    job = local_job()
    payload = random.Random(0).randbytes(index_twins._COMPARED_FROM + 1000)  # incompressible: the twin is as big
    files = {"causal_conv1d/__init__.py": b"x = 2\n", "causal_conv1d/kernels.bin": payload}
    wheel = with_provenance(job_wheel(output / "dist", job, files, python_tag="cp312"), job)
    return VariantTwins().make(wheel, output / "variant")


def _counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The twins index_site.twins hashes from now on (one entry a file)."""
    hashed: list[int] = []
    real = index_twins.sha256_stream

    def counted(file):
        hashed.append(1)
        return real(file)

    monkeypatch.setattr(index_twins, "sha256_stream", counted)
    return hashed


def test_a_twin_the_build_wrote_beside_its_new_wheel_is_read_once(output: Path, monkeypatch) -> None:
    """The catalog compares the twin's bytes with those it works out from the new wheel, as it works them out;
    settling the twin takes its digest from there and hashes nothing: one read of it, where there were two."""
    index(output, VariantTwins())
    twin = _added_with_twin(output)
    hashed = _counting_hashes(monkeypatch)
    counting = Counting()
    report = index(output, counting)
    published = {row.filename: row.sha256 for row in report.twins.published}
    assert hashed == [] and (counting.made, counting.checked) == ([], [])
    assert published[twin.name] == hashlib.sha256(twin.read_bytes()).hexdigest()


def test_a_small_twin_beside_its_new_wheel_is_hashed_where_it_is_settled(output: Path, monkeypatch) -> None:
    """Below _COMPARED_FROM the twin is not opened beside its wheel (that costs more than its digest): settling
    hashes it, once."""
    index(output, VariantTwins())
    job = local_job()
    wheel = with_provenance(job_wheel(output / "dist", job, {"causal_conv1d/__init__.py": b"x = 2\n"},
                                      python_tag="cp312"), job)
    twin = VariantTwins().make(wheel, output / "variant")
    hashed = _counting_hashes(monkeypatch)
    report = index(output, Counting())
    assert hashed == [1] and twin.name in {row.filename for row in report.twins.published}


@pytest.mark.parametrize("damage", ["one byte changed", "one byte short", "one byte more"])
def test_a_twin_beside_its_new_wheel_that_is_not_its_bytes_is_checked_as_ever(
    output: Path, monkeypatch, damage: str
) -> None:
    """Compared and found other, the twin is not taken for the derived one: it is hashed or read, and checked as
    ever (made again where its files differ; a byte past its archive's end hides none of them). What is published
    is the digest of the bytes in place."""
    index(output, VariantTwins())
    twin = _added_with_twin(output)
    right = twin.read_bytes()
    middle = len(right) // 2
    wrong = {
        "one byte changed": right[:middle] + bytes([right[middle] ^ 1]) + right[middle + 1:],
        "one byte short": right[:-1],
        "one byte more": right + b"\0",
    }[damage]
    twin.write_bytes(wrong)
    counting = Counting()
    report = index(output, counting)
    published = {row.filename: row.sha256 for row in report.twins.published}
    assert published[twin.name] == hashlib.sha256(twin.read_bytes()).hexdigest()
    assert twin.read_bytes() == (wrong if damage == "one byte more" else right)
    assert len(counting.made) == (0 if damage == "one byte more" else 1)


def test_a_twin_that_moves_after_the_catalog_compared_it_is_hashed(output: Path, monkeypatch) -> None:
    """The comparison holds for the identity the twin had then: a write since (its ctime moved) is read again."""
    index(output, VariantTwins())
    twin = _added_with_twin(output)
    settle = index_site_module.settle_twins

    def touched_first(*args, **kwargs):
        status = twin.stat()
        os.utime(twin, ns=(status.st_atime_ns, status.st_mtime_ns))  # the same times, set again: ctime moves
        return settle(*args, **kwargs)

    monkeypatch.setattr(index_site_module, "settle_twins", touched_first)
    hashed = _counting_hashes(monkeypatch)
    report = index(output, Counting())
    assert hashed == [1] and twin.name in {row.filename for row in report.twins.published}


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


@pytest.mark.parametrize("change", ["wheel-added", "twin-touched", "twin-removed", "wheel-removed"])
def test_with_twins_a_re_index_leaves_the_bytes_a_cold_index_of_a_copy_writes(
    output: Path, tmp_path_factory: pytest.TempPathFactory, change: str
) -> None:
    """The twins' pages, .metadata and .provenance.json files come from what the catalog derived of their wheels
    on a re-index, and from the twins themselves on a cold one: every file pip reads is the same bytes."""
    index(output, VariantTwins())
    if change == "wheel-added":
        job = local_job()
        wheel = job_wheel(output / "dist", job, {"causal_conv1d/__init__.py": b"x = 2\n"}, python_tag="cp312")
        with_provenance(wheel, job)
    elif change == "twin-touched":
        twin = next((output / "variant").iterdir())
        os.utime(twin, ns=(twin.stat().st_atime_ns, twin.stat().st_mtime_ns))
    elif change == "twin-removed":
        next((output / "variant").iterdir()).unlink()
    else:
        next((output / "dist").glob("*pt214cu130*")).unlink()
    index(output, VariantTwins())
    cold = tmp_path_factory.mktemp("cold")
    for folder in ("dist", "variant"):
        if (output / folder).exists():
            shutil.copytree(output / folder, cold / folder)
    index(cold, VariantTwins())
    assert site_files(output / "site") == site_files(cold / "site")


