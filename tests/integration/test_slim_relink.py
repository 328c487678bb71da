"""Slim wheels cut from real nvcc objects: two translation units compiled once for SASS 8.0, 9.0, 12.0 and PTX 12.0,
linked by g++ as setuptools links (the command in the log), then relinked per arch with each object's fatbin cut by
objcopy, repaired by auditwheel, recorded and passed through the verify gate; the slim variant is made and holds
exactly its arch's SASS and the job's PTX that can run beside it (12.0's on the sm_120 wheel only)."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import pytest

from builder.core.fatbin import fatbin_archs
from builder.core.hashing import sha256_of
from builder.core.runner import run
from builder.steps import slim
from builder.steps.repair import repair_wheel
from builder.steps.verify import verify_wheel
from scripts.bench.wheels import job_wheel, with_provenance
from tests.jobs import local_job

pytestmark = pytest.mark.nvcc

DATA = Path(__file__).parent / "data"
GENCODES = ("arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_120,code=[sm_120,compute_120]")
ARCHS = ("8.0", "9.0", "12.0+PTX")
LIBRARY = "toy_cuda.cpython-311-x86_64-linux-gnu.so"


@pytest.fixture(scope="module")
def build(cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(source folder, the compile's wheel, the log): objects under source/build/, linked as setuptools does."""
    source = tmp_path_factory.mktemp("src")
    objects = []
    for unit in ("a", "b"):
        code = (DATA / "scale_kernel.cu").read_text().replace("scale", f"scale_{unit}")
        (source / f"{unit}.cu").write_text(code)
        objects.append(f"build/{unit}.o")
        (source / "build").mkdir(exist_ok=True)
        flags = [f"-gencode={g}" for g in GENCODES]
        run([cuda_home / "bin" / "nvcc", "-c", "-Xcompiler", "-fPIC", *flags, f"{unit}.cu", "-o", objects[-1]],
            step=f"nvcc {unit}", cwd=source, log_path=source / "nvcc.log")
    link = ["g++", "-shared", *(str(source / o) for o in objects), f"-L{cuda_home}/lib64", "-lcudart",
            "-o", f"build/lib/{LIBRARY}"]
    (source / "build" / "lib").mkdir()
    run(link, step="link", cwd=source, log_path=source / "nvcc.log")
    job = dataclasses.replace(local_job(), archs=ARCHS)
    (source.parent / "built").mkdir(exist_ok=True)
    built = job_wheel(source.parent / "built", job, {f"{LIBRARY}": source / "build" / "lib" / LIBRARY})
    return source, built, f"copying stuff\n{' '.join(link)}\nrunning install\n"


def test_every_sass_arch_is_relinked_with_its_sass_and_the_ptx_it_can_run(build: tuple[Path, Path, str],
                                                                      tmp_path: Path) -> None:
    source, built, log = build
    job = dataclasses.replace(local_job(), archs=ARCHS)
    relinked = slim.relink(job, source, built, log, tmp_path)
    assert [r.arch for r in relinked] == ["8.0", "9.0", "12.0"]
    for one in relinked:
        found = fatbin_archs(one.libraries[LIBRARY])
        assert (found.sass, found.ptx) == ({one.arch}, {"12.0"} if one.arch == "12.0" else set())
        assert one.libraries[LIBRARY].stat().st_size < (source / "build" / "lib" / LIBRARY).stat().st_size


def test_the_slim_wheel_passes_the_gate_and_becomes_its_archs_variant(
    build: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, built, log = build
    job = dataclasses.replace(local_job(), archs=ARCHS)
    fat = with_provenance(repair_wheel(built, job, tmp_path / "fat").wheel, job)
    hashed: list[Path] = []
    monkeypatch.setattr(slim, "sha256_of", lambda path: hashed.append(Path(path)) or sha256_of(path))
    relinked = slim.relink(job, source, built, log, tmp_path / "relink")
    (tmp_path / "variant").mkdir()
    cuts = slim.cut_wheels(job, built, fat, relinked, tmp_path / "work", tmp_path / "variant",
                           repair=lambda w, j, o: repair_wheel(w, j, o).wheel,
                           verify=lambda w, j: verify_wheel(w, j, runtime=None))
    assert [c.arch for c in cuts if c.variant] == ["8.0", "9.0", "12.0"]
    assert hashed.count(fat) == 1  # read and hashed once for the three cuts, not once each
    (cut,) = [c for c in cuts if c.arch == "9.0"]
    assert cut.reason == ""
    assert cut.variant is not None and cut.variant.name.endswith("-pt214cu130sm90.whl")
    with zipfile.ZipFile(cut.variant) as archive:
        record = json.loads(archive.read("causal_conv1d-1.7.0.dist-info/wheelwright.json"))
        variant = json.loads(archive.read("causal_conv1d-1.7.0.dist-info/variant.json"))
        (tmp_path / "x.so").write_bytes(archive.read(LIBRARY))
    assert record["cut"] == {"from": fat.name, "sha256": sha256_of(fat), "variant": "pt214cu130sm90"}
    assert record["archs"] == {"sass": ["9.0"], "ptx": []}
    assert variant["variants"]["pt214cu130sm90"]["nvidia"]["sm_arch"] == ["90_real"]
    assert fatbin_archs(tmp_path / "x.so").describe() == "SASS 9.0"
    assert set(cut.timings) == {"relink", "repair", "verify", "variant"}
