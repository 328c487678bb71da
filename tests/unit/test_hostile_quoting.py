"""Hostile values in what we print for people to paste and in the code we generate, one case a line: every command
doctor or the index shows must read, in a POSIX shell, as exactly its words (nothing expanded, nothing run, no
second command), and doctor.py must stay Python whatever URL it is made for. test_hostile runs the CLI itself."""

from __future__ import annotations

import ast
import html
import json
import os
import re
from pathlib import Path

import pytest

from builder.cli.index import _emit
from builder.cli.main import _report
from builder.core.errors import PublishError, WheelwrightError
from builder.doctor.fix import Fix, find_fix
from builder.doctor.probe import Environment
from builder.doctor.standalone import standalone_source
from builder.doctor.verdicts import diagnose
from index_site.publish import RemoteObject, check_plan, plan_publish
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.shellwords import shell_words

DATA = Path(__file__).parent / "data" / "doctor"
INDEX = "https://wheels.example.org"
# -- doctor's fix line: a filename the index lists, the interpreter's path, the --index-url given ----------------


def doctor_fix(*, version: str = "1.7.0+pt214cu130", executable: str | None = None, index: str = INDEX) -> Fix:
    data = json.loads((DATA / "cpu-ok.json").read_text())["environment"]
    data["packages"][0]["version"] = "1.7.0+pt213cu130"  # built for another torch: the fix is a wheel
    data["executable"] = executable or data["executable"]
    filename = f"causal_conv1d-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"

    def fetch(url: str) -> dict | None:
        return {"files": [{"filename": filename}]} if url.endswith("/whl/pt214cu130/json/causal-conv1d/index.json") else None

    env = Environment.from_dict(data)
    fix = find_fix(env, diagnose(env)[0], index, fetch)
    assert fix is not None and fix.pip and fix.uv, fix
    return fix


BAD_VERSION = "1.7.0+pt214cu130;touch${IFS}pwned"
# (case, the command, a word it must hold exactly)
DOCTOR_CASES = [
    ("pip-wheel-version-semicolon", lambda: doctor_fix(version=BAD_VERSION).pip, f"causal-conv1d=={BAD_VERSION}"),
    ("uv-wheel-version-semicolon", lambda: doctor_fix(version=BAD_VERSION).uv, f"causal-conv1d=={BAD_VERSION}"),
    ("pip-wheel-version-backtick", lambda: doctor_fix(version="1.7.0+pt214cu130`id`").pip, "causal-conv1d==1.7.0+pt214cu130`id`"),
    ("pip-python-path-space", lambda: doctor_fix(executable="/opt/my env/bin/python").pip, "/opt/my env/bin/python"),
    ("uv-python-path-substitution", lambda: doctor_fix(executable="/tmp/$(touch pwned)/python").uv, "/tmp/$(touch pwned)/python"),
    ("pip-python-path-quote", lambda: doctor_fix(executable="/home/o'brien/bin/python").pip, "/home/o'brien/bin/python"),
    ("pip-index-url-ampersand", lambda: doctor_fix(index="https://w.example/a&b").pip, "https://w.example/a&b/whl/pt214cu130.html"),
    ("uv-index-url-glob", lambda: doctor_fix(index="https://w.example/[ab]*").uv, "https://w.example/[ab]*/whl/pt214cu130.html"),
]


@pytest.mark.parametrize(("command", "word"), [c[1:] for c in DOCTOR_CASES], ids=[c[0] for c in DOCTOR_CASES])
def test_doctors_fix_line_reads_as_its_words(command, word: str) -> None:
    assert word in shell_words(command())


# -- the index's commands: the base URL in every command of every page -------------------------------------------

_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)


def page_commands(site: Path) -> list[str]:
    commands = []
    for page in sorted(site.rglob("*.html")):
        commands += [html.unescape(re.sub(r"<[^>]+>", "", code)) for code in _CODE.findall(page.read_text())]
    return [c for c in commands if c.startswith(("pip ", "uv ", "curl ")) and "w.example" in c]  # no prose


# (case, a base URL the --base-url check lets through: an http(s) URL without whitespace or control characters)
BASE_URLS = [
    ("semicolon", "https://w.example/a;touch${IFS}pwned"),
    ("substitution", "https://w.example/$(touch${IFS}pwned)"),
    ("backtick", "https://w.example/`id`"),
    ("double-quote", 'https://w.example/a"b'),
    ("single-quote", "https://w.example/it's"),
    ("ampersand-tilde", "https://w.example/~me&x"),
    ("bang", "https://w.example/wow!"),
    ("glob-brace", "https://w.example/a*{b,c}"),
]


@pytest.mark.parametrize("base_url", [c[1] for c in BASE_URLS], ids=[c[0] for c in BASE_URLS])
def test_every_command_the_index_shows_reads_as_its_words(tmp_path: Path, base_url: str) -> None:
    make_wheel(tmp_path / "dist", WheelSpec())
    build_site(tmp_path, tmp_path / "site", base_url=base_url)
    commands = page_commands(tmp_path / "site")
    kinds = {command.split()[0] for command in commands}
    assert {"pip", "uv", "curl"} <= kinds and len(commands) >= 5, commands
    for command in commands:
        urls = [word for word in shell_words(command.removesuffix(" | python -")) if "w.example" in word]
        assert urls and all(word.startswith(base_url + "/") for word in urls), (command, urls)


# -- doctor.py: the base URL pasted into its Python ----------------------------------------------------------------

# (case, a URL that reaches the generator)
DOCTOR_PY_URLS = [
    ("triple-quote", 'https://w.example/"""'),
    ("backslash-n", "https://w.example/\\N"),
    ("backslash-last", "https://w.example/x\\"),
    ("quotes-both", "https://w.example/'\"'"),
]


@pytest.mark.parametrize("url", [c[1] for c in DOCTOR_PY_URLS], ids=[c[0] for c in DOCTOR_PY_URLS])
def test_doctor_py_is_python_for_any_url_it_is_made_for(url: str) -> None:
    tree = ast.parse(standalone_source(url))
    assigned = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert isinstance(assigned["DEFAULT_INDEX_URL"], ast.Constant) and assigned["DEFAULT_INDEX_URL"].value == url
    assert shell_words(ast.get_docstring(tree).split("curl -s ", 1)[1].split(" |")[0]) == [url + "/doctor.py"]


# (case, a URL with a character no line of Python may hold as it is)
CONTROL_URLS = [("newline", "https://w.example/a\nb"), ("nul", "https://w.example/\x00"), ("carriage-return", "https://w.example/\r")]


@pytest.mark.parametrize("url", [c[1] for c in CONTROL_URLS], ids=[c[0] for c in CONTROL_URLS])
def test_doctor_py_is_not_made_for_a_url_with_a_control_character(url: str) -> None:
    with pytest.raises(WheelwrightError, match="control character"):
        standalone_source(url)


# -- names from a folder or a bucket in what the CLI prints: one line each, and no escape sequence reaches the terminal

# (case, a name as os.scandir or a bucket's listing gives it, as the line shows it)
LINE_FORGERS = [
    ("line-end", "a\nERROR forged.whl", "a\\nERROR forged.whl"),
    ("carriage-return", "a\rERROR forged.whl", "a\\rERROR forged.whl"),
    ("line-separator", "a\u2028ERROR forged.whl", "a\\u2028ERROR forged.whl"),
    ("escape-sequence", "b\x1b[2J\x1b[31m.whl", "b\\x1b[2J\\x1b[31m.whl"),
    ("not-utf8", os.fsdecode(b"c\xff.whl"), "c\\udcff.whl"),
]
FORGERS = pytest.mark.parametrize(("name", "shown"), [c[1:] for c in LINE_FORGERS], ids=[c[0] for c in LINE_FORGERS])


@FORGERS
def test_a_warning_naming_a_file_is_one_line(name: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    _emit([], [f"not indexed: {name}: not a wheel file"])
    assert capsys.readouterr().err == f"WARN not indexed: {shown}: not a wheel file\n"


@FORGERS
def test_an_error_naming_a_bucket_key_is_one_line_a_key(name: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    key = f"whl/pt214cu130/{name}"
    plan = plan_publish([], {key: RemoteObject(key=key, etag='"e"', size=8)}, "")  # the bucket's, not the site's
    with pytest.raises(PublishError) as raised:
        check_plan(plan, allow_delist=False)
    assert str(raised.value).splitlines()[1:] == [f"whl/pt214cu130/{shown}"]
    _report(raised.value)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ERROR")]
    assert errors[1:] == [f"ERROR whl/pt214cu130/{shown}"]
