"""What argparse checks for the CLI: each number's range at parse time, and argparse's own usage errors in the house
style, one ERROR line naming the option plus a TIP, exit 2. Standard library only: `--help` builds the parsers."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import NoReturn

from builder.core.errors import ConfigError

_ARGUMENT = re.compile(r"argument (?P<option>[^:]+): (?P<problem>.*)", re.DOTALL)


class UsageError(ConfigError):
    """The command line itself is wrong: an unknown option, a missing value, a number out of its range."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors reach the entry point as a UsageError, printed there like every other error,
    instead of argparse's usage block and ``error:`` line; subparsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        match = _ARGUMENT.fullmatch(message)
        if match:  # "argument --runners: 0: ..." -> "--runners 0: ...", the way the stages name an option
            message = f"{match['option']} {match['problem']}"
        raise UsageError(message, tip=f"`{self.prog} --help` lists the options and what each accepts")


def whole_number(low: int, high: int, *, rule: str | None = None) -> Callable[[str], int]:
    """An argparse ``type=`` that accepts a whole number from ``low`` to ``high``; ``rule`` says it the option's
    way ("a TCP port is 0-65535"). The message starts with the value given, so the line reads ``--port 99999: ...``."""
    said = rule or f"must be a whole number from {low:,} to {high:,}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number; {said}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value}: {said}")
        return value

    return parse


# A site's root: every page's links and commands are this plus a path, so no query, fragment or whitespace.
# A byte of the environment that is not UTF-8 comes as a lone surrogate (\ud800-\udfff), which no page can hold.
_SITE_URL = re.compile(
    r"https?://[^/?#\s\x00-\x1f\x7f-\x9f\ud800-\udfff]+(/[^?#\s\x00-\x1f\x7f-\x9f\ud800-\udfff]*)?"
)


def site_url(text: str) -> str:
    """An argparse ``type=`` for a site's public URL, which the index writes into its pages, its commands and the
    Python of doctor.py: an http(s) URL in UTF-8 without whitespace, control characters, query or fragment."""
    if not _SITE_URL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: not an http(s) URL of a site (no whitespace, control characters, '?' or '#')"
        )
    return text
