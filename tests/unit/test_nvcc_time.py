"""Per-(translation unit, arch) compile times from nvcc --time output (rows as nvcc 11.8 writes them)."""

from __future__ import annotations

from pathlib import Path

from builder.steps.nvcc_time import HOST, read_times

CSV = """\
source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
csrc/fwd.cu , gcc-11 (preprocessing 1) , csrc/fwd.cu  , /tmp/a.ii , compute_90 , nvcc , 598.2580 , ms
csrc/fwd.cu , cicc , /tmp/a.ii  , /tmp/a.ptx , compute_90 , nvcc , 2887.4810 , ms
csrc/fwd.cu , ptxas , /tmp/a.ptx  , /tmp/a.cubin , sm_90 , nvcc , 1000.0 , ms
csrc/fwd.cu , cicc , /tmp/b.ii  , /tmp/b.ptx , compute_80 , nvcc , 2923.2571 , ms
csrc/fwd.cu , cudafe++ , /tmp/c.ii  , /tmp/c.cpp , , nvcc , 5782.9902 , ms
csrc/bwd.cu , ptxas , /tmp/d.ptx  , /tmp/d.cubin , sm_100f , nvcc , 500 , ms
 , nvcc (driver) ,  , t ,  , nvcc , 1.3711 , ms
"""


def test_times_are_summed_per_unit_and_arch(tmp_path: Path) -> None:
    path = tmp_path / "time.csv"
    path.write_text(CSV)
    times = {(t["unit"], t["arch"]): t["seconds"] for t in read_times(path)}
    assert times == {
        ("bwd.cu", "10.0f"): 0.5,
        ("fwd.cu", "8.0"): 2.923,
        ("fwd.cu", "9.0"): round((598.258 + 2887.481 + 1000.0) / 1000, 3),
        ("fwd.cu", HOST): 5.783,
    }


def test_no_file_no_times(tmp_path: Path) -> None:
    assert read_times(tmp_path / "absent.csv") == []
