"""How a POSIX shell reads a command we print for people to paste: its words, and a test failure on anything the
shell would expand, run, redirect or glob instead."""

from __future__ import annotations

import re
import shlex

import pytest

from index_site.variants import _INSTALLED_TORCH_CHANNEL

# What the shell reads outside single quotes: a $ or ` expands (also inside double quotes), the rest unquoted
# ends the command, redirects, globs or expands a brace or ~.
_EXPANDS, _UNQUOTED = set("$`!"), set(";&|<>()*?[]{}~#")


def shell_words(command: str) -> list[str]:
    """The words a POSIX shell reads in ``command``, failing the test on anything it would expand or run. The
    landing page's one intended substitution (the installed torch's channel) is left out of the check."""
    checked = re.sub(re.escape(_INSTALLED_TORCH_CHANNEL).replace(re.escape("{TAGS}"), r"\{[^}]*\}"), "CHANNEL", command)
    quote, escaped = "", False
    for at, char in enumerate(checked):
        if escaped:
            escaped = False
        elif quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif char == '"':
            quote = "" if quote == '"' else '"'
        elif char == "'" and not quote:
            quote = "'"
        elif char in _EXPANDS or (char in _UNQUOTED and not quote):
            pytest.fail(f"the shell reads {char!r} at {at} of {checked!r}")
    assert not quote, f"an unclosed quote in {checked!r}"
    return shlex.split(command)
