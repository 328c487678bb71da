"""The archive caps against what they must let through and where they must hold: a wheel of our largest real
wheel's shape (full-arch mamba-ssm, docs/hostile-input.md) reads within WHEEL's caps, and the reader refuses the
same hostile archives on Python 3.9 (doctor.py's floor) as on this interpreter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from builder.core.archive import WHEEL, ArchiveError, open_archive
from tests.zipcraft import Blob, Entry, craft, module, repeated, zeros

ROOT = Path(__file__).resolve().parents[2]
PYTHON39 = Path.home() / ".pyenv/versions/3.9.18/bin/python"

# Full-arch mamba-ssm 2.3.2.post1 (9 archs), as docs/hostile-input.md derives it from the recorded runs: 53 Python
# files of 1.01 MB (the largest 107,618 bytes, 8.6:1), one extension of ~510 MB at ~1.5:1, eight .dist-info files.
EXTENSION_MIB = 510
PYTHON_FILES = 53


def mamba_shaped(tmp: Path) -> Path:
    chunk = os.urandom(699_051) + bytes(349_525)  # 1 MiB that deflates about 1.5:1, as cubins do
    text = ("    x = triton.language.load(pointer + offsets, mask=mask, other=0.0)\n" * 1_600).encode()[:107_618]
    members = [Entry(name=f"mamba_ssm/ops/triton/m{k}.py", blob=Blob.of(text if k == 0 else text[:17_000]))
               for k in range(PYTHON_FILES)]
    members.append(Entry(name="selective_scan_cuda.cpython-311-x86_64-linux-gnu.so",
                         blob=repeated(chunk, EXTENSION_MIB)))
    dist_info = "mamba_ssm-2.3.2.post1+pt214cu130.dist-info"
    for name in ("METADATA", "WHEEL", "RECORD", "top_level.txt", "LICENSE", "AUTHORS", "wheelwright.json",
                 "variant.json"):
        members.append(module(f"{dist_info}/{name}", "x" * 4000))
    return craft(tmp / "mamba_ssm-2.3.2.post1+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl", members)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_wheel_of_the_largest_real_wheels_shape_reads_within_the_caps(tmp_path: Path) -> None:
    wheel = mamba_shaped(tmp_path)
    with open_archive(wheel, WHEEL) as opened:
        inflated = {info.filename: sum(len(chunk) for chunk in opened.chunks(info)) for info in opened.files}
        assert len(opened.files) == PYTHON_FILES + 9 and opened.inflated == sum(inflated.values())
    assert max(inflated.values()) == EXTENSION_MIB << 20
    margin = WHEEL.member_bytes / (EXTENSION_MIB << 20)
    assert margin >= 4 and WHEEL.total_bytes / sum(inflated.values()) >= 4  # the stated margin
    assert wheel.stat().st_size * WHEEL.ratio > sum(inflated.values()) * 30  # the ratio cap: 30x over this wheel's


_SCRIPT = """
import json, sys
from pathlib import Path
from builder.core.archive import ArchiveError, open_archive, WHEEL
results = {}
for path in sorted(Path(sys.argv[1]).iterdir()):
    try:
        with open_archive(path, WHEEL) as opened:
            total = sum(len(opened.read(info)) for info in opened.files)
        results[path.name] = "read %d bytes" % total
    except ArchiveError as error:
        results[path.name] = "ArchiveError " + str(error).split(": ", 1)[1]
print(json.dumps(results))
"""

ARCHIVES = {
    "bomb.whl": [module("pkg/a.py"), Entry(name="pkg/w.bin", blob=zeros(256 << 20))],
    "bomb-many.whl": [Entry(name=f"pkg/m{k}.bin", blob=zeros(1 << 20)) for k in range(200)],
    "climbing.whl": [module("pkg/../../owned.py")],
    "absolute.whl": [module("/tmp/owned.py")],
    "duplicate.whl": [module("pkg/a.py"), module("pkg/a.py")],
    "case-twin.whl": [module("pkg/A.py"), module("pkg/a.py")],
    "overlapping.whl": [module("pkg/a.py"), Entry(name="pkg/b.py", blob=Blob.of(b"VALUE = 1\n"), same_data_as=0)],
    "sound.whl": [module("pkg/__init__.py"), module("pkg-1.0.dist-info/METADATA", "Name: pkg\n")],
}


@pytest.mark.skipif(not PYTHON39.exists(), reason="needs pyenv's Python 3.9 (doctor.py's floor)")
def test_python_3_9_refuses_what_this_interpreter_refuses(tmp_path: Path) -> None:
    for name, entries in ARCHIVES.items():
        craft(tmp_path / name, entries)
    here = {}
    for path in sorted(tmp_path.iterdir()):
        try:
            with open_archive(path, WHEEL) as opened:
                here[path.name] = f"read {sum(len(opened.read(info)) for info in opened.files)} bytes"
        except ArchiveError as error:
            here[path.name] = "ArchiveError " + str(error).split(": ", 1)[1]
    result = subprocess.run([str(PYTHON39), "-c", _SCRIPT, str(tmp_path)], capture_output=True, text=True,
                            timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == here
    assert here["sound.whl"] == "read 20 bytes"
    assert sum(v.startswith("ArchiveError") for v in here.values()) == len(ARCHIVES) - 1
