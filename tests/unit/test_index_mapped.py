"""The manifest and the project pages a join keeps are mapped rather than read (records.mapped): the run scans them
and cuts views of them, and a copy would cost the process as many pages of its own. A filesystem that cannot map
a file has it read instead, and the site comes out the same either way."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from index_site import records
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.index_checks import site_files

BASE = "https://wheels.example.org"


@pytest.mark.parametrize("maps", [True, False], ids=["mapped", "read"])
def test_a_re_index_takes_the_pages_it_keeps_from_mapped_or_read_files_and_equals_a_cold_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, maps: bool
) -> None:
    for spec in (WheelSpec(python="cp311"), WheelSpec(python="cp312"), WheelSpec(version="1.6.0")):
        make_wheel(tmp_path / "dist", spec)
    build_site(tmp_path, tmp_path / "site", base_url=BASE)
    if not maps:
        def refuse(*args: object, **kwargs: object) -> mmap.mmap:
            raise OSError(19, "No such device")  # as a filesystem without mmap answers

        monkeypatch.setattr(records.mmap, "mmap", refuse)
    given: list[type] = []
    real = records.mapped

    def spy(file: records.BinaryIO, limit: int) -> records.Buffer:
        content = real(file, limit)
        given.append(type(content))
        return content

    monkeypatch.setattr(records, "mapped", spy)
    make_wheel(tmp_path / "dist", WheelSpec(version="1.8.0"))
    report = build_site(tmp_path, tmp_path / "site", base_url=BASE)
    assert "simple/causal-conv1d/index.html" in report.written  # joined: the other versions' lines kept
    kind = mmap.mmap if maps else bytes
    assert len(given) >= 3 and set(given) == {kind}  # the manifest and the two project pages
    build_site(tmp_path, tmp_path / "cold", base_url=BASE)
    assert site_files(tmp_path / "site") == site_files(tmp_path / "cold")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda path: path.write_bytes(b"<html>"), b"<html>"),
        (lambda path: path.write_bytes(b""), b""),  # nothing to map: read
        (lambda path: None, None),
        (lambda path: path.mkdir(), None),
        (lambda path: path.symlink_to(path.with_name("target")), None),  # never followed
        (lambda path: os.mkfifo(path), None),  # never opened blocking
    ],
    ids=["page", "empty", "missing", "folder", "symlink", "fifo"],
)
@pytest.mark.parametrize("reader", [records.current_mapped, records.current_bytes], ids=["mapped", "read"])
def test_a_page_is_taken_only_where_a_regular_file_stands(
    tmp_path: Path, make: object, expected: bytes | None, reader: Callable[[Path], records.Buffer | None]
) -> None:
    (tmp_path / "target").write_bytes(b"elsewhere")
    path = tmp_path / "page.html"
    make(path)  # type: ignore[operator]
    content = reader(path)
    assert (bytes(content) if content is not None else None) == expected
