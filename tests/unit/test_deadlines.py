"""The deadlines and caps: WHEELWRIGHT_DEADLINE_SCALE is read strictly, and docs/hostile-input.md states the
numbers the code uses (a table that drifted from the code would mislead the operator who tunes it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.core import runner
from builder.core.errors import ConfigError
from builder.core.http import Limits, size_text
from builder.core.settings import deadline_scale
from builder.doctor.fix import DOCTOR_PAGE
from builder.steps import fetch
from index_site import s3, serve

ROOT = Path(__file__).resolve().parents[2]
TABLE = (ROOT / "docs/hostile-input.md").read_text()


@pytest.mark.parametrize(("raw", "factor"), [("", 1.0), ("1", 1.0), ("0.03", 0.03), (" 3 ", 3.0), ("100", 100.0)])
def test_the_scale_is_a_number_above_0_and_at_most_100(
    monkeypatch: pytest.MonkeyPatch, raw: str, factor: float
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_DEADLINE_SCALE", raw)
    assert deadline_scale() == factor
    assert Limits(connect=10, idle=30, total=120, cap=5).scaled() == Limits(
        connect=10 * factor, idle=30 * factor, total=120 * factor, cap=5
    )


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "101", "nan", "inf", "1e400"])
def test_a_scale_that_is_no_such_number_is_an_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("WHEELWRIGHT_DEADLINE_SCALE", raw)
    with pytest.raises(ConfigError, match="WHEELWRIGHT_DEADLINE_SCALE"):
        deadline_scale()


@pytest.mark.parametrize(("count", "text"), [(64 << 20, "64 MiB"), (8 << 30, "8 GiB"), (1000, "1000 bytes")])
def test_sizes_read_as_people_write_them(count: int, text: str) -> None:
    assert size_text(count) == text


def row(name: str) -> list[str]:
    (line,) = [line for line in TABLE.splitlines() if line.startswith("|") and f"`{name}`" in line]
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize(
    ("name", "limits"),
    [
        ("INDEX_PAGE", fetch.INDEX_PAGE),
        ("SDIST", fetch.SDIST),
        ("TORCH_WHEEL", fetch.TORCH_WHEEL),
        ("METADATA", fetch.METADATA),
        ("DOCTOR_PAGE", DOCTOR_PAGE),
    ],
)
def test_the_table_states_each_http_limit(name: str, limits: Limits) -> None:
    cells = row(name)
    assert cells[2:6] == [f"{limits.connect:g} s", f"{limits.idle:g} s", f"{limits.total:g} s", size_text(limits.cap)]


COMMANDS = ["ENGINE_INFO", "ENGINE_QUERY", "PIP_TORCH", "PIP_TOOLS", "APT_UPDATE", "APT_DOWNLOAD"]


@pytest.mark.parametrize("name", COMMANDS)
def test_the_table_states_each_command_deadline(name: str) -> None:
    assert row(name)[4] == f"{getattr(runner, name).total:g} s"


def test_the_table_states_the_stores_and_the_servers_limits() -> None:
    (store,) = [line for line in TABLE.splitlines() if line.startswith("| the S3 API endpoint")]
    read = f"{s3.READ_TIMEOUT_S:g} s (boto's read timeout)"
    assert f"| {s3.CONNECT_TIMEOUT_S:g} s | {read} | {s3.ATTEMPTS} attempts |" in store
    assert re.search(rf"\| {serve.MAX_CONNECTIONS} \(`MAX_CONNECTIONS`\)", TABLE)
    assert re.search(rf"\| {serve.HEAD_DEADLINE_S:g} s from .*\(`HEAD_DEADLINE_S`\)", TABLE)
    assert re.search(rf"\| {serve.IDLE_S:g} s \(`IDLE_S`\)", TABLE)
    assert re.search(rf"after {serve.FULL_WAIT_S:g} s \(`FULL_WAIT_S`\)", TABLE)
