"""The channel's fallback logic (index_site/fallback.py): null names and their order, which fat twins give way to
their slim wheels, the guards and the archs the arch guard names, the sizes the landing page shows."""

from __future__ import annotations

import json

import pytest

from index_site import fallback
from index_site.variants import VariantWheel

TAG = "cp311-cp311-manylinux_2_28_x86_64"


def twin(label: str, sm: list[str], *, cuda: str = "13.0", size: int = 100) -> VariantWheel:
    torch = f"{label[2]}.{label[3:5]}"
    properties = {"abi_dependency": {"torch": [torch]}, "nvidia": {"cuda_version_lower_bound": [cuda], "sm_arch": sm}}
    variant = json.dumps({"properties": properties, "providers": {}}, sort_keys=True)
    return VariantWheel("variant", (1, 2, 3, 4), f"causal_conv1d-1.7.0-{TAG}-{label}.whl", "causal-conv1d", "1.7.0",
                        label, "0" * 64, size, "1" * 64, None, "", variant)


@pytest.mark.parametrize(
    ("label", "tag"),
    [("pt214cu130", "2141300_pt214cu130"), ("pt214cu126", "2141206_pt214cu126"), ("pt29cu118", "2091108_pt29cu118"),
     ("pt113cu117", "1131107_pt113cu117")],
)
def test_build_tags_put_the_newest_torch_then_the_newest_cuda_first(label: str, tag: str) -> None:
    assert fallback.build_tag(label) == tag


def test_a_null_is_the_fat_twin_under_a_name_without_a_variant_label() -> None:
    assert fallback.null_name(twin("pt214cu130", ["90_real"])) == f"causal_conv1d-1.7.0-2141300_pt214cu130-{TAG}.whl"
    order = sorted(int(fallback.build_tag(label).split("_")[0]) for label in ("pt213cu130", "pt214cu126", "pt29cu130"))
    assert order == [2091300, 2131300, 2141206]


def test_a_real_build_beside_a_day0_wheel_is_the_one_null_of_their_name() -> None:
    day0 = twin("pt215cu130", ["90_real"])
    real = day0._replace(filename=day0.filename.replace("1.7.0-", "1.7.0-1-"), sha256="2" * 64)
    for order in ([day0, real], [real, day0]):
        (null,) = fallback.listing(order).nulls
        assert (null.filename, null.sha256) == (f"causal_conv1d-1.7.0-2151300_pt215cu130-{TAG}.whl", "2" * 64)


def test_slim_wheels_take_their_fat_twins_place_as_variants_and_it_stays_as_the_null() -> None:
    fat = twin("pt214cu130", ["80_real", "90_real", "120_real", "120_virtual"])
    slims = [twin("pt214cu130sm90", ["90_real", "120_virtual"]), twin("pt214cu130sm80", ["80_real", "120_virtual"])]
    other = twin("pt214cu126", ["80_real"], cuda="12.6")
    listed = fallback.listing([fat, *slims, other])
    assert sorted(t.label for t in listed.variants) == ["pt214cu126", "pt214cu130sm80", "pt214cu130sm90"]
    assert sorted(t.filename for t in listed.nulls) == [fallback.null_name(other), fallback.null_name(fat)]
    (guards,) = fallback.guard_groups([fat, *slims, other]).values()
    assert sorted(guard.label for guard in guards) == ["pt214.noarch", "pt214cu126.drv", "pt214cu130.drv"]
    assert "80_real" not in json.loads(guards[-1].variant)["properties"]["nvidia"]["sm_arch"]  # the slims cover it


def test_the_arch_guard_names_only_gpus_no_listed_build_runs_on() -> None:
    """uv's NVIDIA provider: a GPU M.m runs {M}{w}_real for w <= m and {M}0_virtual; a guard naming a value a
    covered GPU supports would rank above its build (8.9 supports 86_real before 80_real)."""
    four = twin("pt214cu130", ["80_real", "90_real", "100_real", "120_real", "120_virtual"])
    uncovered = fallback.uncovered_archs([four])
    assert "86_real" not in uncovered and "89_real" not in uncovered and "121_real" not in uncovered
    assert {"75_real", "70_real", "110_real", "50_real"} <= set(uncovered)
    assert fallback.uncovered_archs([twin("pt214cu130", ["86_real"])])[:1] == ["129_real"]
    assert "80_real" in fallback.uncovered_archs([twin("pt214cu130", ["86_real"])])  # 8.0 cannot run SASS 8.6


def test_guards_are_the_same_bytes_for_the_same_builds() -> None:
    members = [twin("pt214cu130", ["90_real"])]
    assert [guard.made() for guard in fallback.guards_of(members)] == [g.made() for g in fallback.guards_of(members)]
    (driver, data, metadata), (arch, _, _) = [guard.made() for guard in fallback.guards_of(members)]
    assert (driver.size, driver.filename) == (len(data), f"causal_conv1d-1.7.0-{TAG}-pt214cu130.drv.whl")
    assert driver.label == "pt214cu130.drv" and arch.label == "pt214.noarch"
    assert b"Requires-Dist: torch==0+nvidia.driver.older.than.cuda.13.0\n" in metadata


def test_sizes_pair_each_fat_wheel_with_its_slim_wheels() -> None:
    twins = [twin("pt214cu130", ["90_real"], size=300), twin("pt214cu130sm90", ["90_real"], size=80),
             twin("pt214cu130sm100", ["100_real"], size=90), twin("pt214cu126", ["90_real"], size=200)]
    (size,) = fallback.channel_sizes(twins)
    assert (size.label, size.fat, size.slims) == ("pt214cu130", 300, (("9.0", 80), ("10.0", 90)))
    assert size.slim_for("9.0") == 80
