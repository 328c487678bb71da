"""scripts/hostile_on_commit.py's data and report: an issue's classes come from every scripts/data/hostile file of
that issue (one per branch), a bad file is one ERROR naming file and key, pytest's junit XML is read into outcomes
(a module that did not import counts as failing), and each case counts for the first class it matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import ConfigError
from scripts.hostile_on_commit import CONTEXT, Outcome, load_classes, read_junit, render_report

PART = """files = ["{file}"]
[[class]]
name = "{name}"
tests = ["{pattern}"]
"""


def test_issue_11s_classes_and_files_are_the_data_files() -> None:
    classes = load_classes(11)
    assert classes.files[0] == "tests/integration/test_hostile.py" and len(classes.classes) == 8
    assert classes.class_of("test_hostile::test_x[label-pt]") == "Labels that are not variants"
    assert classes.class_of("test_hostile::test_bad_input_is_one_error_line[matrix-empty]").startswith("Tracebacks")
    assert classes.class_of("test_serve_load::test_anything") == "Load: serve under concurrent clients"
    assert classes.class_of("test_hostile::test_unrelated") == CONTEXT


def test_an_issues_classes_come_from_each_branchs_file_and_no_other_issues(tmp_path: Path) -> None:
    (tmp_path / "issue25-a.toml").write_text(PART.format(file="tests/a.py", name="Archives", pattern="test_a::*"))
    (tmp_path / "issue25-b.toml").write_text(PART.format(file="tests/b.py", name="Peers", pattern="test_b::*"))
    (tmp_path / "issue250.toml").write_text(PART.format(file="tests/c.py", name="Other", pattern="test_c::*"))
    classes = load_classes(25, tmp_path)
    assert classes.files == ("tests/a.py", "tests/b.py")
    assert [c.name for c in classes.classes] == ["Archives", "Peers"]
    with pytest.raises(ConfigError, match="no issue26.toml or issue26-"):
        load_classes(26, tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('files = ["t.py"]\n', "missing key 'class'"),
        ('files = ["t.py"]\n[[class]]\nname = "x"\ntests = []\n', r"\[class.0\] tests: .*at least 1"),
        ('files = ["t.py"]\n[[class]]\nname = "x"\ntests = ["a"]\nissue = 25\n', r"\[class.0\] unknown key 'issue'"),
        ("files = [", "issue25.toml"),
    ],
    ids=["no-classes", "no-patterns", "unknown-key", "not-toml"],
)
def test_a_bad_data_file_is_one_error_naming_it(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "issue25.toml").write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_classes(25, tmp_path)


JUNIT = """<testsuites><testsuite>
<testcase classname="tests.integration.test_hostile" name="test_x[label-a]"/>
<testcase classname="tests.integration.test_hostile" name="test_x[label-b]"><failure message="assert"/></testcase>
<testcase classname="tests.integration.test_hostile" name="test_y"><skipped/></testcase>
<testcase classname="" name="tests.integration.test_faults"><error message="ImportError"/></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_and_the_report_count_cases_that_fail_before_and_pass_now(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    before = read_junit(tmp_path / "junit.xml")
    assert before == {
        "test_hostile::test_x[label-a]": Outcome("passed"),
        "test_hostile::test_x[label-b]": Outcome("failed", "assertion"),
        "test_hostile::test_y": Outcome("skipped"),
        "test_faults::*": Outcome("not importable", "import error"),
    }
    after = {test: Outcome("passed") for test in ("test_hostile::test_x[label-a]", "test_hostile::test_x[label-b]",
                                                  "test_faults::test_a_killed_index")}
    report = render_report(before, after, load_classes(11), old="a" * 40, head="b" * 40, replaced=(), command="c")
    assert report.startswith("# Hostile-input and fault tests: before and after issue #11")
    assert "| Labels that are not variants | 2 | 2 | 1 | 1 | 0 | 0 | 0 | 0 |" in report
    assert "| Recovery: a killed index or publish converges; locks | 1 | 1 | 1 | 0 | 0 | 0 | 0 | 1 |" in report
    assert "Cases of a class that pass on both: 1.\n- `test_hostile::test_x[label-a]`" in report
