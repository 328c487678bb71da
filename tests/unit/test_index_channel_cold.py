"""The variant channel after changes a re-index met only in a hunt for differences from a cold index (2026-12-07):
two twins sharing one null name, a run killed between judging a rebuilt wheel and settling its twin, and a run
without the twin step after runs with it. Each time the site a re-index leaves is the one a cold index of a copy of
the same folders writes, and the cold one lists the digest of the file it links."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from builder.steps.twins import VariantTwins
from index_site.report import IndexReport
from index_site.stage import build_site
from scripts.bench.wheels import job_wheel, with_provenance
from tests import variant_channel
from tests.index_checks import site_files

BASE = "https://wheels.example.org"
NULL = "variant/files/causal_conv1d-1.7.0-2141300_pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl"


class Killed(Exception):
    """A run stopped part-way, as kill -9 would stop it (nothing after the raise runs)."""


@pytest.fixture
def output(tmp_path: Path) -> Path:
    """The channel of three builds, indexed with the twin step until the index keeps what it worked out."""
    out = tmp_path / "out"
    variant_channel.write_channel(out)
    shutil.rmtree(out / "torch")
    for _ in range(2):
        _index(out)
    return out


def _index(root: Path, twins: bool = True) -> IndexReport:
    return build_site(root, root / "site", base_url=BASE, twins=VariantTwins() if twins else None)


def _cold(output: Path, twins: bool = True) -> Path:
    """A cold index of a copy of ``output``'s dist/ and variant/: its site."""
    cold = output.parent / "cold"
    for name in ("dist", "variant"):
        if (output / name).exists():
            shutil.copytree(output / name, cold / name)
    _index(cold, twins)
    return cold / "site"




def _rebuilt(output: Path, label: str, payload: bytes, build_tag: str = "") -> Path:
    """A new build of ``label``'s job into dist/ (with its provenance; its twin not made): under the same name, or
    beside it with ``build_tag``."""
    job = variant_channel.job_of(label)
    work = output / "work"
    work.mkdir(exist_ok=True)
    wheel = with_provenance(job_wheel(work, job, {"causal_conv1d/__init__.py": payload},
                                      platform="manylinux_2_28_x86_64"), job)
    name = wheel.name.replace("-cp", f"-{build_tag}-cp", 1) if build_tag else wheel.name
    return Path(shutil.move(wheel, output / "dist" / name))


def _listed_digest(site: Path, null: str) -> str:
    page = (site / "variant/simple/causal-conv1d/index.html").read_text()
    found = re.search(re.escape(null.rsplit("/", 1)[1]) + r"#sha256=([0-9a-f]{64})", page)
    assert found is not None, f"{null} is not listed"
    return found.group(1)


def test_of_two_twins_sharing_a_null_the_file_placed_is_the_one_listed(output: Path) -> None:
    """A real build (build tag 1) beside a day-0 wheel of the same name: one null name, two fat twins. The page
    lists the build-tagged twin's; the site's file under that name must be its bytes, cold or not, run after run."""
    _rebuilt(output, "pt214cu130", b'LABEL = "tagged"\n', build_tag="1")
    _index(output)
    cold = _cold(output)
    for site in (output / "site", cold):
        assert hashlib.sha256((site / NULL).read_bytes()).hexdigest() == _listed_digest(site, NULL)
    assert site_files(output / "site") == site_files(cold)
    _index(cold.parent)  # nothing changed: the same file stays
    assert hashlib.sha256((cold / NULL).read_bytes()).hexdigest() == _listed_digest(cold, NULL)


@pytest.mark.parametrize("killed_at", ["index_site.site.settle_twins", "builder.steps.twins.VariantTwins.problems"])
def test_a_run_killed_after_judging_a_rebuilt_wheel_leaves_a_state_the_next_run_finishes(
    output: Path, killed_at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed run kept the rebuilt wheel's row (with the facts of the twin it derives), not its twin's: the
    next run reads the stale twin, makes it again, and must place the new twin's files, not the stale one's."""
    _rebuilt(output, "pt214cu126", b'LABEL = "rebuilt"\n')

    def killed(*args: object, **kwargs: object) -> None:
        raise Killed(killed_at)

    with monkeypatch.context() as patched:
        patched.setattr(killed_at, killed)
        with pytest.raises(Killed):
            _index(output)
    _index(output)
    assert site_files(output / "site") == site_files(_cold(output))


def test_without_the_twin_step_after_runs_with_it_no_twin_is_published(output: Path) -> None:
    """As a cold index without the twin step publishes none (build_site: without it none is published), a re-index
    without it takes the channel down; its rows stay, so the next run with the step checks nothing again."""
    assert (output / "site" / NULL).is_file()
    _index(output, twins=False)
    assert not (output / "site/variant").exists()
    assert site_files(output / "site") == site_files(_cold(output, twins=False))
    report = _index(output)
    assert (output / "site" / NULL).is_file() and report.twins.made == () and report.twins.remade == ()
