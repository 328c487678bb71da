"""Splitting a TU by its explicit instantiations: every instantiation lands in exactly one part, each part keeps
the whole body, setup.py lists the parts in the TU's place, and a file the split cannot handle is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import RecipeError
from builder.steps.recipes.tu_split import instantiations, split_text, split_tu

BODY = """#include "k.h"
template <typename T> __global__ void k(T* x) { x[0] = T(1); }
extern template void run<double>(int);
template <typename T> void run(int n) { k<T><<<1, 1>>>(nullptr); }
"""
TAIL = "".join(f"template void run<T{i}>(int n);\n" for i in range(7))


def test_every_instantiation_goes_to_exactly_one_part_with_the_whole_body() -> None:
    parts = split_text(BODY + "\n" + TAIL, 3, "k.cu")
    assert len(parts) == 3
    assert all(part.startswith(BODY) for part in parts)
    found = sorted(m[0] for part in parts for m in instantiations(part))
    assert found == sorted(TAIL.splitlines())
    assert [len(instantiations(part)) for part in parts] == [3, 2, 2]
    assert all("extern template void run<double>(int);" in part for part in parts)  # a declaration, kept


def test_code_after_the_instantiations_or_too_few_of_them_is_an_error() -> None:
    with pytest.raises(RecipeError, match="code between the explicit instantiations"):
        split_text(BODY + TAIL + "void later() {}\n", 2, "k.cu")
    with pytest.raises(RecipeError, match="7 explicit instantiations, fewer than the 8 parts"):
        split_text(BODY + TAIL, 8, "k.cu")


def test_setup_py_lists_the_parts_in_place_of_the_tu(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(BODY + TAIL)
    (tmp_path / "setup.py").write_text('sources=[\n    "csrc/a.cpp",\n    "csrc/k.cu",\n    "csrc/z.cu",\n]\n')
    changes = split_tu(tmp_path, "csrc/k.cu", 2)
    assert changes and "split into 2 TUs" in changes[0]
    setup = (tmp_path / "setup.py").read_text()
    assert '"csrc/k_part1.cu", "csrc/k_part2.cu",\n    "csrc/z.cu"' in setup and '"csrc/k.cu"' not in setup
    assert (tmp_path / "csrc" / "k_part2.cu").read_text().startswith(BODY)
    assert split_tu(tmp_path, "csrc/k.cu", 2) == []  # setup.py no longer lists it: the patch reports no change


def test_the_bwd_patch_splits_only_for_a_job_of_many_archs(tmp_path: Path) -> None:
    from builder.steps.recipes.patches import BWD_SPLIT_MIN_ARCHS, split_causal_conv1d_bwd
    from tests.jobs import local_job

    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "causal_conv1d_bwd.cu").write_text(BODY + TAIL)
    (tmp_path / "setup.py").write_text('sources=["csrc/causal_conv1d_bwd.cu"]\n')
    narrow = split_causal_conv1d_bwd(tmp_path, local_job(archs=("9.0",)))
    assert narrow == [f"csrc/causal_conv1d_bwd.cu kept whole: 1 arch(s), fewer than {BWD_SPLIT_MIN_ARCHS}"]
    assert not (tmp_path / "csrc" / "causal_conv1d_bwd_part1.cu").exists()
    full = split_causal_conv1d_bwd(tmp_path, local_job(archs=("7.5", "8.0", "9.0", "10.0", "12.0")))
    assert "split into 6 TUs" in full[0] and (tmp_path / "csrc" / "causal_conv1d_bwd_part6.cu").is_file()
