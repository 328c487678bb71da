"""`wheelwright upstream`'s logic: the newest final release upstream against the newest version we pin."""

from __future__ import annotations

import io
import json

import pytest

from builder.core.errors import FetchError, WheelError
from builder.plan.matrix import load_matrix
from builder.steps import releases
from builder.steps.wheelzip import Member, source_date_epoch, write_wheel
from tests.jobs import MATRIX


def serve(monkeypatch: pytest.MonkeyPatch, pages: dict[str, object]) -> list[str]:
    asked: list[str] = []

    def open_url(url: str, *, accept: str | None = None, **limits: object) -> io.BytesIO:
        asked.append(url)
        if url not in pages:
            raise OSError(f"404 {url}")
        return io.BytesIO(json.dumps(pages[url]).encode())

    monkeypatch.setattr(releases, "open_url", open_url)
    return asked


def test_behind_when_upstream_has_a_newer_final_release(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {
        "https://idx/causal-conv1d/": {"versions": ["1.6.0", "1.7.0", "1.8.0", "1.9.0rc1", "junk!"]},
        "https://idx/mamba-ssm/": {"versions": ["2.3.2.post1"]},
    })
    statuses = releases.check_upstream(load_matrix(MATRIX).packages, index="https://idx/")
    by_name = {s.package: s for s in statuses}
    assert (by_name["causal-conv1d"].upstream, by_name["causal-conv1d"].behind) == ("1.8.0", True)
    assert (by_name["mamba-ssm"].ours, by_name["mamba-ssm"].behind) == ("2.3.2.post1", False)


def test_an_unreadable_page_is_one_fetch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {"https://idx/causal-conv1d/": {"files": []}})
    with pytest.raises(FetchError, match="lists no 'versions'"):
        releases.released_versions("causal-conv1d", index="https://idx/")
    with pytest.raises(FetchError, match="cannot read https://idx/mamba-ssm/"):
        releases.released_versions("mamba-ssm", index="https://idx/")


def test_wheel_bytes_depend_on_contents_and_source_date_epoch_only(tmp_path, monkeypatch) -> None:
    members = {"pkg/b.py": Member(data=b"b"), "pkg/a.so": Member(data=b"\x7fELF", executable=True),
               "pkg-1.0.dist-info/METADATA": Member(data=b"Name: pkg\n")}
    first = write_wheel(tmp_path / "first.whl", members).read_bytes()
    second = write_wheel(tmp_path / "second.whl", dict(reversed(list(members.items())))).read_bytes()
    assert first == second
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert source_date_epoch() == 1700000000
    assert write_wheel(tmp_path / "third.whl", members).read_bytes() != first
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(WheelError, match="SOURCE_DATE_EPOCH='yesterday' is not a number"):
        source_date_epoch()
