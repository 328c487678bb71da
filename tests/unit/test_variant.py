"""Variant twins and the variant channel's pages: names, properties, the checks a twin must pass after
conversion, and the variants.json an index serves beside the twins."""

from __future__ import annotations

import dataclasses
import json
import random
import zipfile
from pathlib import Path

import pytest

from builder.core.errors import WheelError
from builder.plan.accelerator import Accelerator
from builder.steps import variant
from builder.steps.wheelzip import Member, read_members, write_wheel
from index_site import variants as channel
from index_site.twins import read_twin
from scripts.bench.wheels import job_wheel, with_provenance
from tests.jobs import local_job, rocm_job

JOB = local_job()


def verified(tmp_path: Path, job=JOB) -> Path:
    files = {"causal_conv1d/__init__.py": b"x = 1\n"}
    tmp_path.mkdir(parents=True, exist_ok=True)
    return with_provenance(job_wheel(tmp_path, job, files, platform="manylinux_2_28_x86_64"), job)


def test_variant_filename_moves_the_label_out_of_the_version() -> None:
    name = variant.variant_filename(
        "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "pt214cu130"
    )
    assert name == "causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130.whl"


def test_properties_name_torch_cuda_and_archs() -> None:
    properties = variant.properties_for("pt214cu130", {"sass": ["8.0", "9.0", "12.0"], "ptx": ["12.0"]})
    assert properties == {
        "abi_dependency": {"torch": ["2.14"]},
        "nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["80_real", "90_real", "120_real", "120_virtual"]},
    }
    assert variant.properties_for("pt24rocm61", {"sass": ["gfx942"], "ptx": []}) == {
        "abi_dependency": {"torch": ["2.4"]},
        "rocm": {"rocm_version_lower_bound": ["6.1"], "gfx_arch": ["gfx942"]},
    }


def test_twin_holds_the_same_payload_under_the_public_version(tmp_path: Path) -> None:
    twin = variant.make_twin(verified(tmp_path), tmp_path / "variant")
    members = read_members(twin.path)
    assert twin.path.name == "causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130.whl"
    assert "Version: 1.7.0\n" in members["causal_conv1d-1.7.0.dist-info/METADATA"].data.decode()
    document = json.loads(members["causal_conv1d-1.7.0.dist-info/variant.json"].data)
    assert list(document["variants"]) == ["pt214cu130"]
    assert document["default-priorities"]["namespace"] == ["abi_dependency", "nvidia"]
    assert document["providers"]["nvidia"]["plugin-api"] == "nvidia_variant_provider.plugin:NvidiaVariantPlugin"
    assert "causal_conv1d-1.7.0.dist-info/wheelwright.json" in members  # provenance travels with the twin


def test_twin_conversion_is_reproducible(tmp_path: Path) -> None:
    wheel = verified(tmp_path)
    first = variant.make_twin(wheel, tmp_path / "a").path.read_bytes()
    assert variant.make_twin(wheel, tmp_path / "b").path.read_bytes() == first


def test_a_wrong_twin_is_refused(tmp_path: Path) -> None:
    wheel = verified(tmp_path)
    twin = variant.make_twin(wheel, tmp_path / "variant").path
    members = read_members(twin)
    members["causal_conv1d/__init__.py"] = Member(data=b"x = 2\n")
    write_wheel(twin, members)
    with pytest.raises(WheelError, match="payload differs from the verified wheel"):
        variant.check_twin(wheel, twin)


def test_a_wheel_without_provenance_gets_no_twin(tmp_path: Path) -> None:
    plain = job_wheel(tmp_path, JOB, {"causal_conv1d/__init__.py": b""})
    with pytest.raises(WheelError, match="wheelwright.json"):
        variant.make_twin(plain, tmp_path / "variant")


def test_channel_pages_link_twins_metadata_and_variants_json(tmp_path: Path) -> None:
    twins = []
    for job in (JOB, dataclasses.replace(JOB, accelerator=Accelerator.parse("cu126")), rocm_job()):
        path = variant.make_twin(verified(tmp_path / job.label, job), tmp_path / "variant").path
        twins.append(_published(read_twin(path), path))
    pages = channel.render_channel(twins)
    assert channel.torch_tags(twins) == ("pt214",)
    page = pages["variant/simple/causal-conv1d/index.html"].decode()
    assert (
        'href="../../../variant/files/causal_conv1d-1.7.0-cp311-cp311-manylinux_2_28_x86_64-pt214cu130.whl#sha256='
        in page
    )
    assert 'data-core-metadata="sha256=' in page and 'href="causal_conv1d-1.7.0-variants.json#sha256=' in page
    document = json.loads(pages["variant/simple/causal-conv1d/causal_conv1d-1.7.0-variants.json"])
    assert document["default-priorities"]["namespace"] == ["abi_dependency", "nvidia", "rocm"]
    guards = ["pt214.noarch", "pt214cu126.drv", "pt214cu130.drv"]  # index_site/fallback.py (CUDA builds only)
    assert sorted(document["variants"]) == sorted(["pt214cu126", "pt214cu130", "pt214rocm61", *guards])
    assert "variant/pt214/json/causal-conv1d/index.json" in pages
    assert channel.render_channel([]) == {}


def _published(read: tuple, path: Path) -> channel.VariantWheel:
    identity, facts = read
    label = path.name.removesuffix(".whl").rsplit("-", 1)[1]
    return channel.VariantWheel(
        str(path.parent), tuple(identity), path.name, "causal-conv1d", "1.7.0", label, facts["sha256"],
        identity.size, facts["metadata_sha256"], facts["requires_python"], facts["provenance_sha256"],
        json.dumps(facts["variant"], sort_keys=True),
    )


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({}, id="plain"),
        pytest.param({"causal_conv1d/run.sh": Member(data=b"#!/bin/sh\n", executable=True)}, id="executable"),
        pytest.param({"causal_conv1d/empty.py": Member(data=b"")}, id="empty-member"),
        pytest.param({"causal_conv1d/big.bin": Member(data=random.Random(0).randbytes(3 << 20))}, id="large-member"),
    ],
)
def test_the_derived_twin_is_the_twin_make_twin_writes(tmp_path: Path, extra: dict) -> None:
    """derive_twin works out the twin's digest, size and .dist-info files without writing it; make_twin writes
    exactly those bytes, so the index can check a twin by one hash."""
    (tmp_path / "dist").mkdir()
    wheel = job_wheel(tmp_path / "dist", JOB, {"causal_conv1d/__init__.py": b"x = 1\n"})
    write_wheel(wheel, {**read_members(wheel), **extra})
    with_provenance(wheel, JOB)
    derived = variant.derive_twin(wheel)
    twin = variant.make_twin(wheel, tmp_path / "variant").path
    assert derived is not None
    assert (derived.name, derived.sha256, derived.size) == (twin.name, _sha256(twin), twin.stat().st_size)
    members = read_members(twin)
    assert derived.members["METADATA"] == members["causal_conv1d-1.7.0.dist-info/METADATA"].data
    assert derived.members["variant.json"] == members["causal_conv1d-1.7.0.dist-info/variant.json"].data


def test_a_wheel_whose_record_lies_still_gets_a_checked_twin(tmp_path: Path) -> None:
    """Where the wheel's RECORD does not describe its files, the derivation's copy of its lines would be wrong:
    make_twin writes the twin from the files instead, and its digest is not the derived one (the index then asks
    the twin step to compare, the slow way)."""
    wheel = verified(tmp_path / "dist")
    members = read_members(wheel)
    record = next(name for name in members if name.endswith("/RECORD"))
    lying = members[record].data.replace(b"causal_conv1d/__init__.py,sha256=", b"causal_conv1d/__init__.py,sha256=A")
    write_wheel(wheel, {**members, record: Member(data=lying)})  # write_wheel writes RECORD anew...
    with zipfile.ZipFile(wheel) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    entries[record] = lying  # ... so put the lying one back by hand
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    twin = variant.make_twin(wheel, tmp_path / "variant").path
    variant.check_twin(wheel, twin)
    derived = variant.derive_twin(wheel)
    assert derived is None or derived.sha256 != _sha256(twin) or b",sha256=A" not in twin.read_bytes()


def test_no_twin_is_derived_of_a_wheel_without_provenance(tmp_path: Path) -> None:
    assert variant.derive_twin(job_wheel(tmp_path, JOB, {"causal_conv1d/__init__.py": b""})) is None


@pytest.mark.parametrize("labels", [(), ("pt214cu130",), ("pt214cu130", "pt214cu126", "pt213cu130", "pt214rocm61")])
def test_a_variants_json_is_json_dumps_bytes_of_its_document(labels: tuple[str, ...]) -> None:
    """variants.py writes the indented document itself, each variant's properties dumped once per call: the
    bytes must stay those of json.dumps(indent=2, sort_keys=True)."""
    twins = []
    for label in labels:
        nvidia = {"sm_arch": ["90_real", "120_virtual"], "cuda_version_lower_bound": [label[-3:]]}
        properties = {"abi_dependency": {"torch": [f"{label[2]}.{label[3:5]}"]}, "nvidia": nvidia}
        providers = {"nvidia": {"requires": ["nvidia-variant-provider"]}, "abi_dependency": {}}
        variant = json.dumps({"properties": properties, "providers": providers}, sort_keys=True)
        twins.append(channel.VariantWheel("v", (1, 2, 3, 4), f"a-1.0-cp311-cp311-linux_x86_64-{label}.whl", "a",
                                          "1.0", label, "0" * 64, 1, "1" * 64, None, "", variant))
    dumped: dict[str, str] = {}
    expected = (json.dumps(channel.variants_document(twins), indent=2, sort_keys=True) + "\n").encode()
    assert channel.variants_json(twins, dumped) == expected
    assert channel.variants_json(twins, dumped) == expected  # again, from what the first call dumped
