"""Upstream commit archives (builder/steps/upstream.py) without the forge: an archive in the source cache is
overlaid after its tree digest is checked; one neither cached nor downloadable makes the job unbuildable here, with
the reason and the command that caches it, never a traceback or an obscure failure."""

from __future__ import annotations

import dataclasses
import socket
import tarfile
from pathlib import Path

import pytest

from builder.core.ledger import Status
from builder.core.wheelhouse import Layout
from builder.farm.build import Builder, BuildOptions
from builder.plan.facts import load_facts
from builder.plan.job import Job, UpstreamFiles
from builder.steps import upstream as upstream_module
from builder.steps.environment import NotBuildableHere
from builder.steps.upstream import UpstreamUnavailable, archive_name, fetch_archive, overlay_upstream, tree_digest
from tests.jobs import local_job
from tests.unit.test_build import FakeStages

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SETUP_PY = b"# the release's setup.py, in the sdist and at the commit\n"


def closed_port_url() -> str:
    """A loopback URL nothing listens on: a download from it fails at once, as the forge does from CI."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/archive.tar.gz"


def pinned(tree_digest_value: str = "0" * 64) -> UpstreamFiles:
    return UpstreamFiles(repo="example/pkg", commit=COMMIT, paths=("csrc",), tree_digest=tree_digest_value)


def job_with(upstream: UpstreamFiles) -> Job:
    job = local_job()
    return dataclasses.replace(job, sdist=dataclasses.replace(job.sdist, upstream=upstream))


def commit_archive(tmp_path: Path) -> tuple[Path, str]:
    """An archive laid out as the forge's (<name>-<commit>/...), of files this test writes; and its csrc digest."""
    top = tmp_path / "commit" / f"pkg-{COMMIT}"
    (top / "csrc").mkdir(parents=True)
    (top / "csrc" / "kernel.cu").write_text("__global__ void kernel() {}\n")
    (top / "setup.py").write_bytes(SETUP_PY)
    archive = tmp_path / "archive.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return archive, tree_digest(top, ["csrc"])


@pytest.fixture
def unreachable_forge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    url = closed_port_url()
    monkeypatch.setattr(upstream_module, "archive_url", lambda upstream: url)
    return tmp_path / "cache" / "sdists"


def test_an_archive_neither_cached_nor_downloadable_is_unavailable(unreachable_forge: Path) -> None:
    with pytest.raises(UpstreamUnavailable) as caught:
        fetch_archive(pinned(), "causal-conv1d-1.0.0+pt20cu117-cp310-x86_64")
    assert isinstance(caught.value, NotBuildableHere)
    message = str(caught.value)
    assert f"csrc of example/pkg@{COMMIT[:12]}" in message
    assert str(unreachable_forge / archive_name(pinned())) in message
    assert f"python -m scripts.cache_upstream CLONE example/pkg {COMMIT} csrc" in (caught.value.tip or "")
    assert not any(unreachable_forge.glob("*"))  # no partial archive left to be mistaken for a cached one


def test_the_build_reports_such_a_job_unbuildable_with_the_reason(
    unreachable_forge: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stages = FakeStages(monkeypatch, tmp_path)
    job = job_with(pinned())
    (outcome,) = Builder(Layout(root=tmp_path / "out"), load_facts(), BuildOptions()).run([job])
    assert outcome.entry.status == Status.UNBUILDABLE and outcome.entry.phase == "patch"
    assert "is not in the source cache" in (outcome.entry.reason or "")
    assert stages.compiled == []


def test_a_cached_archive_is_overlaid_after_its_digest_is_checked(
    unreachable_forge: Path, tmp_path: Path
) -> None:
    archive, digest = commit_archive(tmp_path)
    unreachable_forge.mkdir(parents=True)
    archive.rename(unreachable_forge / archive_name(pinned(digest)))
    source = tmp_path / "sdist"
    source.mkdir()
    (source / "setup.py").write_bytes(SETUP_PY)
    added = overlay_upstream(job_with(pinned(digest)), source)  # the forge is unreachable: the cache serves it
    assert (source / "csrc" / "kernel.cu").is_file()
    assert added == [f"upstream: csrc from example/pkg@{COMMIT[:12]} (tree digest checked)"]
