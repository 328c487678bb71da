"""write_wheel deflates a large member in chunks side by side into one valid deflate stream, whose bytes depend
only on the data; it copies the deflated bytes of members read with keep_deflated instead of compressing them
again (the archive is byte for byte the one a fresh compression writes), and a member whose data changed is
compressed afresh (its kept bytes are not its data's)."""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import pytest

from builder.steps import wheelzip
from builder.steps.wheelzip import Member, read_members, write_wheel

DIST_INFO = "pkg-1.0.dist-info"


def _members() -> dict[str, Member]:
    # incompressible bytes beside compressible ones, like an extension's code beside its fatbins
    payload = os.urandom(300_000) + b"\x00\x01" * 200_000
    large = (os.urandom(1 << 20) + bytes(range(256)) * 8192) * 5  # 15 MiB: 4 chunks, the last one short
    return {
        "pkg/_ext.so": Member(data=payload, executable=True),
        "pkg/_big.so": Member(data=large, executable=True),
        "pkg/__init__.py": Member(data=b"x = 1\n"),
        "pkg/empty.txt": Member(data=b""),
        f"{DIST_INFO}/METADATA": Member(data=b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"),
        f"{DIST_INFO}/WHEEL": Member(data=b"Wheel-Version: 1.0\n"),
    }


def test_copied_members_give_the_bytes_a_fresh_compression_gives(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    fresh = write_wheel(tmp_path / "a" / "pkg-1.0-py3-none-any.whl", _members())
    kept = read_members(fresh, keep_deflated=True)
    assert all(member.deflated is not None for member in kept.values())
    (tmp_path / "b").mkdir()
    copied = write_wheel(tmp_path / "b" / fresh.name, kept)
    assert copied.read_bytes() == fresh.read_bytes()
    with zipfile.ZipFile(copied) as archive:
        assert archive.testzip() is None
    assert {name: m.data for name, m in read_members(copied).items()} == {n: m.data for n, m in kept.items()}


def test_a_large_member_is_one_valid_deflate_stream_whatever_the_core_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = _members()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    wheel = write_wheel(tmp_path / "a" / "pkg-1.0-py3-none-any.whl", members)
    big = read_members(wheel, keep_deflated=True)["pkg/_big.so"]
    assert len(big.data) > 3 * wheelzip._CHUNK and big.deflated is not None
    assert zlib.decompress(big.deflated.raw, -zlib.MAX_WBITS) == members["pkg/_big.so"].data
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert write_wheel(tmp_path / "b" / wheel.name, members).read_bytes() == wheel.read_bytes()


def test_a_renamed_member_is_copied_and_a_changed_one_compressed_afresh(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", _members())
    kept = read_members(wheel, keep_deflated=True)
    extension = kept.pop("pkg/_ext.so")
    kept["pkg/sub/_ext.so"] = extension  # renamed: the name lives in the headers, not in the deflated bytes
    changed = Member(data=b"x = 2\n", deflated=kept["pkg/__init__.py"].deflated)  # stale kept bytes
    kept["pkg/__init__.py"] = changed
    out = tmp_path / "out"
    out.mkdir()
    rewritten = read_members(write_wheel(out / wheel.name, kept))
    assert rewritten["pkg/sub/_ext.so"].data == extension.data and rewritten["pkg/sub/_ext.so"].executable
    assert rewritten["pkg/__init__.py"].data == b"x = 2\n"
    assert "pkg/sub/_ext.so,sha256=" in rewritten[f"{DIST_INFO}/RECORD"].data.decode()

