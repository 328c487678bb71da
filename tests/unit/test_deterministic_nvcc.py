"""The nvcc wrapper's determinism: a per-file -frandom-seed, and nvcc's per-process temp-file name replaced in the
object by a fixed name of the same length (so no offset moves)."""

from __future__ import annotations

from pathlib import Path

from builder.steps.programs.objcache import accepts_random_seed, deterministic_args, normalise_object


def test_seed_is_the_translation_unit_and_a_given_seed_is_kept() -> None:
    args = ["-gencode", "arch=compute_90,code=sm_90", "-c", "/fixed/src/csrc/a.cu", "-o", "a.o"]
    assert deterministic_args(args) == [*args, "-frandom-seed=/fixed/src/csrc/a.cu"]
    seeded = [*args, "-frandom-seed=mine"]
    assert deterministic_args(seeded) == seeded


def test_an_nvcc_without_the_option_gets_no_seed() -> None:
    """CUDA 11.8's nvcc stops at "Unknown option '-frandom-seed=...'": the wrapper asks nvcc's usage first."""
    args = ["-c", "/fixed/src/csrc/a.cu", "-o", "a.o"]
    assert deterministic_args(args, seedable=False) == args
    cuda_118 = "--threads <number>                          (-t)\n"
    cuda_130 = cuda_118 + "--frandom-seed <seed>                       (-frandom-seed)\n"
    assert (accepts_random_seed(cuda_118), accepts_random_seed(cuda_130)) == (False, True)


def test_temp_file_name_is_fixed_in_place(tmp_path: Path) -> None:
    obj = tmp_path / "a.o"
    data = b"\x7fELF...tmpxft_0000655e_00000000-6_a.cudafe1.cpp\x00rest"
    obj.write_bytes(data)
    normalise_object(obj)
    fixed = obj.read_bytes()
    assert fixed == data.replace(b"tmpxft_0000655e_00000000", b"tmpxft_00000000_00000000")
    assert len(fixed) == len(data)
