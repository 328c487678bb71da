"""The CLI's number types and its parser's usage errors, without a subprocess (test_hostile runs the real CLI)."""

from __future__ import annotations

import argparse

import pytest

from builder.cli.arguments import UsageError, whole_number
from builder.cli.main import GITHUB_MATRIX_ROWS, build_parser
from builder.plan.shards import GITHUB_MATRIX_LIMIT


def test_the_parser_knows_githubs_matrix_limit_as_the_planner_does() -> None:
    assert GITHUB_MATRIX_ROWS == GITHUB_MATRIX_LIMIT
    assert build_parser().parse_args(["plan", "--shard-size", str(GITHUB_MATRIX_LIMIT)]).shard_size == 256


def test_a_whole_number_in_range_is_taken_and_the_ends_are_in_it() -> None:
    parse = whole_number(1, 8)
    assert (parse("1"), parse(" 8 "), parse("0004")) == (1, 8, 4)


@pytest.mark.parametrize("text", ["0", "9", "-1", "1.0", "", "0x4", "9" * 5000])
def test_anything_else_is_refused_saying_the_range(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="from 1 to 8"):
        whole_number(1, 8)(text)


def test_a_usage_error_names_the_option_first_and_exits_2() -> None:
    with pytest.raises(UsageError, match=r"^--runners 0: must be a whole number from 1 to 10,000$") as refused:
        build_parser().parse_args(["plan", "--runners", "0"])
    assert refused.value.exit_code == 2
    assert refused.value.tip == "`wheelwright plan --help` lists the options and what each accepts"
