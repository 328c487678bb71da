"""`wheelwright facts check` once for real: the registry's torch page and the default wheels' METADATA (by PEP 658
or HTTP range requests). Every torch minor the facts know must agree with the registry; a minor released after
the facts were written is reported with a stanza, which is the check doing its job."""

from __future__ import annotations

import subprocess
import sys

from builder.plan.facts import load_facts
from builder.steps.torch_registry import check


def test_the_facts_agree_with_the_registry() -> None:
    facts = load_facts()
    findings = check(facts)
    known = {release.minor for release in facts.releases}
    assert [f.problem for f in findings if f.minor in known] == []
    assert all(f.stanza for f in findings), findings  # only new minors remain, each with its stanza


def test_the_command_exits_by_whether_the_facts_are_behind() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "builder.cli.main", "facts", "check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    behind = "BEHIND" in result.stderr
    assert result.returncode == (10 if behind else 0), result.stderr
    assert behind or "torch facts are current" in result.stdout
