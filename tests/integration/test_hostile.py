"""Hostile input, as an attacker or an unlucky operator would give it, one case a line, grouped by class. Each runs
the real CLI in a subprocess under a time limit and an address-space limit, and must end in exactly what an
operator can act on: one ERROR line naming the problem and a non-zero exit, or (for a file in dist/ that is not
a wheel the index may list) a WARN line, exit 0 and a site whose every link resolves to bytes with the stated
hash. Never a traceback, a hang or unbounded memory. A new class of mistake gets its lines here."""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.core.ledger import Ledger
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.shellwords import shell_words
from tests.sitecheck import check_site

ROOT = Path(__file__).resolve().parents[2]
MATRIX = (ROOT / "tests/data/matrix-minimal.yaml").read_text()
MEMORY_LIMIT = 3 << 30  # a run that tries to inflate a bomb dies here instead of taking the machine
pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Run:
    code: int
    output: str


def wheelwright(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    """The real CLI in a subprocess, bounded in time and memory."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    environment = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    result = subprocess.run(
        [sys.executable, "-m", "builder.cli.main", *map(str, args)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        check=False,
    )
    return Run(code=result.returncode, output=result.stdout + result.stderr)


def assert_one_error(run: Run, code: int, pattern: str) -> None:
    assert "Traceback" not in run.output, run.output
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR ")]
    assert run.code == code, run.output
    assert errors and re.search(pattern, errors[0]), run.output


# -- setups: each writes the hostile thing into the case's folder ------------------------------------------------


def matrix(text: str | bytes) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        path = tmp / "matrix.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return write


def laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    return "packages: " + "[" * depth + "]" * depth + "\n"


def with_url(url: str) -> str:
    return MATRIX.replace("sha256: 3202", f"url: {json.dumps(url)}\n        sha256: 3202")


def ledger_bytes(content: bytes) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        (tmp / "out").mkdir(exist_ok=True)
        (tmp / "out/ledger.sqlite").write_bytes(content)

    return write


def ledger_sql(*statements: str) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        (tmp / "out").mkdir(exist_ok=True)
        db = sqlite3.connect(tmp / "out/ledger.sqlite")
        for statement in statements:
            db.execute(statement)
        db.commit()
        db.close()

    return write


def truncated_ledger(tmp: Path) -> None:
    (tmp / "out").mkdir(exist_ok=True)
    with Ledger(tmp / "out/ledger.sqlite") as ledger:
        ledger._db.execute("PRAGMA journal_mode=DELETE")
        ledger._db.execute("CREATE TABLE filler (x)")
        ledger._db.executemany("INSERT INTO filler VALUES (?)", [("x" * 1000,)] * 200)
    data = (tmp / "out/ledger.sqlite").read_bytes()
    (tmp / "out/ledger.sqlite").write_bytes(data[: len(data) // 3])


def directory(relative: str) -> Callable[[Path], None]:
    return lambda tmp: (tmp / relative).mkdir(parents=True, exist_ok=True)


def text_file(relative: str, content: str = "x") -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        (tmp / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp / relative).write_text(content)

    return write


def indexed_site(tmp: Path) -> None:
    make_wheel(tmp / "out/dist", WheelSpec())
    assert wheelwright("index", "--output", "out", cwd=tmp).code == 0


def nothing(tmp: Path) -> None:
    pass


LEDGER_TIMINGS_BROKEN = (
    (
        "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, package TEXT, version TEXT, label TEXT, torch TEXT,"
        " accelerator TEXT, python TEXT, input_hash TEXT, status TEXT, phase TEXT, timings TEXT, log_path TEXT,"
        " wheel TEXT, wheel_sha256 TEXT, wheel_size INTEGER, reason TEXT, report TEXT, wheel_identity TEXT,"
        " updated_at REAL)"
    ),
    (
        "INSERT INTO jobs VALUES ('j', 'p', '1', 'pt214cu130', '2.14', 'cu130', '3.11', 'h', 'failed', NULL,"
        " '{not json', NULL, NULL, NULL, NULL, 'r', NULL, NULL, 0)"
    ),
)

# (case, setup, arguments, exit code, pattern of the ERROR line)
ERROR_CASES = [
    # unbounded work from tiny input
    ("yaml-billion-laughs", matrix(laughs()), ["plan"], 2, r"expands to more than 100,000 nodes"),
    ("yaml-recursive-alias", matrix("a: &a [*a]\n"), ["plan"], 2, r"alias refers to the node that contains it"),
    ("yaml-nested-60", matrix(nested(60)), ["plan"], 2, r"nested deeper than 50 levels"),
    ("yaml-nested-20000", matrix(nested(20000)), ["plan"], 2, r"nested too deeply"),
    ("yaml-2-mib", matrix("# " + "x" * (2 << 20) + "\n"), ["plan"], 2, r"may have at most 1,048,576"),
    # bytes that are not a matrix
    ("matrix-binary", matrix(bytes(range(256)) * 4), ["plan"], 2, r"not UTF-8 text"),
    ("matrix-nul", matrix("packages: [\x00]\n"), ["plan"], 2, r"not valid YAML"),
    ("matrix-missing", nothing, ["plan"], 2, r"cannot read the matrix"),
    ("matrix-directory", directory("matrix.yaml"), ["plan"], 2, r"cannot read the matrix"),
    ("matrix-empty", matrix(""), ["plan"], 2, r"the matrix is empty"),
    ("matrix-a-list", matrix("- 1\n- 2\n"), ["plan"], 2, r"not a mapping"),
    ("url-with-space", matrix(with_url("https://example.org/a b.tar.gz")), ["plan"], 2, r"not an http\(s\) URL"),
    ("url-with-tab", matrix(with_url("https://example.org/a\tb.tar.gz")), ["plan"], 2, r"not an http\(s\) URL"),
    ("url-no-path", matrix(with_url("https://example.org")), ["plan"], 2, r"not an http\(s\) URL"),
    ("url-ftp", matrix(with_url("ftp://example.org/a.tar.gz")), ["plan"], 2, r"not an http\(s\) URL"),
    # selectors that would select everything
    ("select-empty", matrix(MATRIX), ["plan", "--select", ""], 3, r"--select '' is empty"),
    ("select-blank", matrix(MATRIX), ["plan", "--select", "  "], 3, r"--select '  ' is empty"),
    ("select-nothing", matrix(MATRIX), ["plan", "--select", "*cu999*"], 3, r"matches none of the"),
    ("include-empty", matrix(MATRIX + "    include: []\n"), ["plan"], 2, r"include"),
    # the ledger: damaged, foreign, newer, shaped wrong
    ("ledger-random", ledger_bytes(os.urandom(4096)), ["index", "--output", "out"], 9, r"not a usable ledger"),
    ("ledger-text", ledger_bytes(b"hello\n" * 100), ["index", "--output", "out"], 9, r"not a usable ledger"),
    ("ledger-truncated", truncated_ledger, ["index", "--output", "out"], 9, r"ledger"),
    ("ledger-directory", directory("out/ledger.sqlite"), ["index", "--output", "out"], 9, r"a folder, not a ledger"),
    ("ledger-newer", ledger_sql("PRAGMA user_version = 99"), ["index", "--output", "out"], 9, r"newer wheelwright"),
    ("ledger-foreign-jobs", ledger_sql("CREATE TABLE jobs (x)"), ["index", "--output", "out"], 9, r"ledger"),
    ("ledger-bad-timings", ledger_sql(*LEDGER_TIMINGS_BROKEN), ["index", "--output", "out"], 9, r"unreadable timings"),
    ("ledger-bad-timings-status", ledger_sql(*LEDGER_TIMINGS_BROKEN), ["status", "--output", "out"], 9, r"timings"),
    ("ledger-random-status", ledger_bytes(os.urandom(4096)), ["status", "--output", "out"], 9, r"not a usable ledger"),
    # output and site folders that are not folders, or not ours
    ("output-is-a-file", text_file("out"), ["index", "--output", "out"], 11, r"out.*Not a directory"),
    ("site-is-a-file", text_file("site"), ["index", "--output", "out", "--site", "site"], 2, r"not a folder"),
    ("site-not-ours", text_file("site/notes.txt"), ["index", "--output", "out", "--site", "site"], 2, r"not a wheelwright site"),
    ("site-marker-garbage", text_file("out/site/.wheelwright-site.json", "{"), ["index", "--output", "out"], 2, r"unreadable"),
    ("site-marker-foreign", text_file("out/site/.wheelwright-site.json", "[]"), ["index", "--output", "out"], 2, r"not a wheelwright site manifest"),
    ("site-marker-directory", directory("out/site/.wheelwright-site.json"), ["index", "--output", "out"], 2, r"unreadable"),
    # serve and publish arguments
    ("serve-port-99999", indexed_site, ["serve", "--output", "out", "--port", "99999"], 2, r"--port 99999: a TCP port is 0-65535"),
    ("serve-port-negative", indexed_site, ["serve", "--output", "out", "--port", "-1"], 2, r"a TCP port is 0-65535"),
    ("serve-host-bogus", indexed_site, ["serve", "--output", "out", "--host", "no such host!", "--port", "0"], 2, r"cannot listen"),
    ("serve-no-site", nothing, ["serve", "--output", "out"], 2, r"no site to serve"),
    ("publish-no-site", nothing, ["publish", "--output", "out", "--bucket", "b", "--dry-run"], 2, r"not a wheelwright site"),
    ("publish-jobs-0", indexed_site, ["publish", "--output", "out", "--bucket", "b", "--jobs", "0"], 2, r"--jobs 0"),
    ("publish-prefix-dotdot", indexed_site, ["publish", "--output", "out", "--bucket", "b", "--prefix", "a/../b"], 2, r"'\.\.' are not allowed"),
    # numbers out of their range: refused as the command line is read, before any file is
    ("shard-size-0", matrix(MATRIX), ["plan", "--format", "shards", "--shard-size", "0"], 2, r"--shard-size 0: must be a whole number from 1 to 256"),
    ("shard-size-257", matrix(MATRIX), ["plan", "--format", "shards", "--shard-size", "257"], 2, r"--shard-size 257: .* from 1 to 256"),
    ("shard-size-negative", matrix(MATRIX), ["plan", "--format", "shards", "--shard-size", "-5"], 2, r"--shard-size -5: .* from 1 to 256"),
    ("shard-size-words", matrix(MATRIX), ["plan", "--format", "shards", "--shard-size", "many"], 2, r"--shard-size 'many': not a number"),
    ("runners-0", matrix(MATRIX), ["plan", "--estimate", "--runners", "0"], 2, r"--runners 0: must be a whole number from 1 to 10,000"),
    ("runners-negative", matrix(MATRIX), ["plan", "--estimate", "--runners", "-3"], 2, r"--runners -3: .* from 1 to 10,000"),
    ("runners-fraction", matrix(MATRIX), ["plan", "--estimate", "--runners", "2.5"], 2, r"--runners '2\.5': not a number"),
    ("cores-0", matrix(MATRIX), ["plan", "--estimate", "--cores", "0"], 2, r"--cores 0: must be a whole number from 1 to 1,024"),
    ("cores-100000", matrix(MATRIX), ["plan", "--estimate", "--cores", "100000"], 2, r"--cores 100000: .* from 1 to 1,024"),
    ("parallel-0", nothing, ["build", "--parallel", "0"], 2, r"--parallel 0: must be a whole number from 1 to 256"),
    ("parallel-negative", nothing, ["build", "--parallel", "-2"], 2, r"--parallel -2: .* from 1 to 256"),
    ("publish-jobs-100000", nothing, ["publish", "--output", "out", "--bucket", "b", "--dry-run", "--jobs", "100000"], 2, r"--jobs 100000: .* from 1 to 256"),
    ("serve-port-words", nothing, ["serve", "--output", "out", "--port", "http"], 2, r"--port 'http': not a number; a TCP port is 0-65535"),
    # a base URL the index pastes into its pages, their commands and doctor.py's Python
    ("base-url-newline", nothing, ["index", "--output", "out", "--base-url", "https://w.example/a\nb"], 2, r"--base-url 'https://w\.example/a\\nb': not an http\(s\) URL"),
    ("base-url-carriage-return", nothing, ["index", "--output", "out", "--base-url", "https://w.example/\r"], 2, r"--base-url .*: not an http\(s\) URL"),
    ("base-url-tab", nothing, ["index", "--output", "out", "--base-url", "https://w.example/a\tb"], 2, r"--base-url .*: not an http\(s\) URL"),
    ("base-url-space", nothing, ["index", "--output", "out", "--base-url", "https://w.example/a b"], 2, r"--base-url 'https://w\.example/a b': not an http\(s\) URL"),
    ("base-url-escape", nothing, ["index", "--output", "out", "--base-url", "https://w.example/\x1b[2J"], 2, r"--base-url .*: not an http\(s\) URL"),
    ("base-url-delete", nothing, ["index", "--output", "out", "--base-url", "https://w.example/\x7f"], 2, r"--base-url .*: not an http\(s\) URL"),
    ("base-url-ftp", nothing, ["index", "--output", "out", "--base-url", "ftp://w.example"], 2, r"--base-url 'ftp://w\.example': not an http\(s\) URL"),
    ("base-url-no-scheme", nothing, ["index", "--output", "out", "--base-url", "w.example"], 2, r"--base-url 'w\.example': not an http\(s\) URL"),
    ("base-url-no-host", nothing, ["index", "--output", "out", "--base-url", "https:///whl"], 2, r"--base-url 'https:///whl': not an http\(s\) URL"),
    ("base-url-query", nothing, ["index", "--output", "out", "--base-url", "https://w.example/?a=1"], 2, r"--base-url .*: not an http\(s\) URL"),
    ("base-url-empty", nothing, ["index", "--output", "out", "--base-url", ""], 2, r"--base-url '': not an http\(s\) URL"),
    # words of the command line that are not UTF-8 (a lone surrogate in sys.argv), which no row or page holds
    ("output-not-utf8", nothing, ["index", "--output", os.fsdecode(b"out\xff")], 2, r"^ERROR --output out\\xff: not UTF-8 text$"),
    ("site-not-utf8", nothing, ["index", "--output", "out", "--site", os.fsdecode(b"s\xff")], 2, r"^ERROR --site s\\xff: not UTF-8"),
    ("base-url-not-utf8", nothing, ["index", "--output", "out", "--base-url", os.fsdecode(b"https://w.example/\xff")], 2, r"--base-url https://w\.example/\\xff: not UTF-8"),
    ("matrix-path-not-utf8", nothing, ["plan", "--matrix", os.fsdecode(b"m\xff.yaml")], 2, r"^ERROR --matrix m\\xff\.yaml: not UTF-8"),
    ("command-not-utf8", nothing, [os.fsdecode(b"ind\xffex")], 2, r"^ERROR ind\\xffex: not UTF-8 text$"),
]


@pytest.mark.parametrize(("setup", "arguments", "code", "pattern"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_bad_input_is_one_error_line(tmp_path: Path, setup, arguments: list[str], code: int, pattern: str) -> None:
    setup(tmp_path)
    assert_one_error(wheelwright(*arguments, cwd=tmp_path), code, pattern)


@pytest.mark.parametrize(
    ("value", "shown"), [("https://w.example/a\nb", r"a\\nb"), (os.fsdecode(b"https://w.example/\xff"), r"\\udcff")],
    ids=["newline", "not-utf8"],
)
def test_a_base_url_from_the_environment_is_checked_as_the_option_is(tmp_path: Path, value: str, shown: str) -> None:
    run = wheelwright("index", "--output", "out", cwd=tmp_path, env={"WHEELWRIGHT_BASE_URL": value})
    assert_one_error(run, 2, rf"--base-url 'https://w\.example/{shown}': not an http\(s\) URL")


# (case, a base URL the check lets through, which each command the index prints must still hold as one word)
PRINTED_BASE_URLS = [
    ("semicolon", "https://w.example/a;touch${IFS}pwned"),
    ("substitution", "https://w.example/$(touch${IFS}pwned)"),
    ("rich-markup", "https://w.example/[bold]x[/bold]"),
]


@pytest.mark.parametrize("base_url", [c[1] for c in PRINTED_BASE_URLS], ids=[c[0] for c in PRINTED_BASE_URLS])
def test_the_commands_index_prints_read_as_their_words(tmp_path: Path, base_url: str) -> None:
    make_wheel(tmp_path / "out/dist", WheelSpec())
    run = wheelwright("index", "--output", "out", "--base-url", base_url, cwd=tmp_path)
    assert run.code == 0 and "Traceback" not in run.output, run.output
    commands = [line.split("  ", 2)[-1] for line in run.output.splitlines() if " install " in line]
    assert len(commands) == 1, run.output  # pt214cu130's find-links line (the test wheel has no variant twin)
    assert shell_words(commands[0]) == ["pip", "install", "PACKAGE", "-f", f"{base_url}/whl/pt214cu130.html"]


# -- files in dist/ that are not wheels the index may list: skipped with a WARN, the rest indexed ------------------


def zip_bomb(tmp: Path) -> str:
    """A small wheel whose METADATA inflates to 100 MiB (a real bomb's header states its size honestly)."""
    spec = WheelSpec(version="1.7.1")
    path = tmp / "out/dist" / spec.wheel_filename
    member = f"causal_conv1d-{spec.local_version}.dist-info/METADATA"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open(member, "w") as metadata:
        metadata.write(b"Metadata-Version: 2.1\nName: causal-conv1d\nVersion: 1.7.1+pt214cu130\n\n")
        for _ in range(100):
            metadata.write(b"\0" * (1 << 20))
    return path.name


def symlink_outside(tmp: Path) -> str:
    outside = make_wheel(tmp / "elsewhere", WheelSpec(version="1.7.2"))
    (tmp / "out/dist" / outside.name).symlink_to(outside)
    return outside.name


def dangling_symlink(tmp: Path) -> str:
    name = WheelSpec(version="1.7.3").wheel_filename
    (tmp / "out/dist" / name).symlink_to(tmp / "gone.whl")
    return name


def fifo(tmp: Path) -> str:
    name = WheelSpec(version="1.7.4").wheel_filename
    os.mkfifo(tmp / "out/dist" / name)
    return name


def dev_zero(tmp: Path) -> str:
    name = WheelSpec(version="1.7.5").wheel_filename
    (tmp / "out/dist" / name).symlink_to("/dev/zero")
    return name


def folder(tmp: Path) -> str:
    name = WheelSpec(version="1.7.6").wheel_filename
    (tmp / "out/dist" / name).mkdir()
    return name


def not_utf8(tmp: Path) -> str:
    """A name with a byte no UTF-8 text holds (os.scandir hands it over as a lone surrogate): shown as \\xff."""
    name = WheelSpec(version="1.7.11").wheel_filename.removesuffix(".whl")
    (tmp / "out/dist" / os.fsdecode(name.encode() + b"\xff.whl")).write_bytes(b"PK\x03\x04")
    return name + "\\xff.whl"


def labelled(label: str) -> Callable[[Path], str]:
    return lambda tmp: make_wheel(tmp / "out/dist", WheelSpec(version="1.7.7", label=label)).name


def not_a_zip(tmp: Path) -> str:
    name = WheelSpec(version="1.7.8").wheel_filename
    (tmp / "out/dist" / name).write_bytes(b"PK\x03\x04" + os.urandom(2000))
    return name


def two_metadata(tmp: Path) -> str:
    spec = WheelSpec(version="1.7.9")
    path = make_wheel(tmp / "out/dist", spec)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("other-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: other\nVersion: 1.0\n")
    return path.name


def metadata_lies(tmp: Path) -> str:
    return make_wheel(tmp / "out/dist", WheelSpec(version="1.7.10", metadata_name="mamba-ssm")).name


# (case, setup returning the refused filename, pattern of its WARN line)
SKIPPED_CASES = [
    # archives that would inflate without bound
    ("metadata-zip-bomb", zip_bomb, r"METADATA is 104,857,\d+\+? bytes; the index accepts at most 1,048,576"),
    # files that are not what their name says
    ("symlink-outside-dist", symlink_outside, r"a symbolic link \(never followed\)"),
    ("symlink-dangling", dangling_symlink, r"a symbolic link \(never followed\)"),
    ("fifo-named-whl", fifo, r"a special file"),
    ("symlink-to-dev-zero", dev_zero, r"a symbolic link \(never followed\)"),
    ("folder-named-whl", folder, r"a folder"),
    ("not-a-zip", not_a_zip, r"cannot read the wheel"),
    ("two-dist-infos", two_metadata, r"expected one \.dist-info/METADATA, found 2"),
    ("metadata-names-another-project", metadata_lies, r"METADATA names project"),
    ("name-not-utf8", not_utf8, r"a name not in UTF-8, not a wheel's; skipped"),
    # labels that are not variants torch shipped
    ("label-unknown-torch", labelled("pt99cu999"), r"not a known variant: torch 9\.9 is not in the facts table"),
    ("label-cuda-never-shipped", labelled("pt214cu118"), r"torch 2\.14 was not released for cu118"),
    ("label-rocm-never-shipped", labelled("pt214rocm10"), r"not a known variant"),
]


@pytest.mark.parametrize(("setup", "pattern"), [c[1:] for c in SKIPPED_CASES], ids=[c[0] for c in SKIPPED_CASES])
def test_a_file_that_is_not_a_listable_wheel_is_skipped_with_a_warning(tmp_path: Path, setup, pattern: str) -> None:
    good = make_wheel(tmp_path / "out/dist", WheelSpec())
    refused = setup(tmp_path)
    run = wheelwright("index", "--output", "out", cwd=tmp_path)
    assert run.code == 0 and "Traceback" not in run.output, run.output
    warnings = [line for line in run.output.splitlines() if line.startswith("WARN") and refused in line]
    assert warnings and re.search(pattern, warnings[0]), run.output
    site = tmp_path / "out/site"
    assert check_site(site) == []
    assert [path.name for path in site.rglob("*.whl")] == [good.name]
    assert not any(refused in path.read_text() for path in site.rglob("*.html"))


# -- a site's folder replaced behind the index: nothing written out of the site, and the site whole again ------------

# (case, a folder of the site the index writes into, what stands there instead: a symlink out of the site or a file)
TAMPERED_FOLDERS = [
    ("top-folder-symlink", "simple", "symlink"),
    ("json-folder-symlink", "json", "symlink"),
    ("wheels-folder-symlink", "whl", "symlink"),
    ("label-folder-symlink", "whl/pt214cu130", "symlink"),
    ("project-folder-symlink", "simple/causal-conv1d", "symlink"),
    ("label-folder-a-file", "whl/pt214cu130", "file"),
]


@pytest.mark.parametrize(("folder", "kind"), [c[1:] for c in TAMPERED_FOLDERS], ids=[c[0] for c in TAMPERED_FOLDERS])
def test_a_folder_of_the_site_replaced_is_never_written_through(tmp_path: Path, folder: str, kind: str) -> None:
    make_wheel(tmp_path / "out/dist", WheelSpec())
    assert wheelwright("index", "--output", "out", cwd=tmp_path).code == 0
    site, outside = tmp_path / "out/site", tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(site / folder)
    if kind == "symlink":
        (site / folder).symlink_to(outside)
    else:
        (site / folder).write_text("not a folder\n")
    make_wheel(tmp_path / "out/dist", WheelSpec(version="1.7.1"))  # a run that writes into that folder
    run = wheelwright("index", "--output", "out", cwd=tmp_path)
    assert run.code == 0 and "Traceback" not in run.output, run.output
    assert list(outside.iterdir()) == []
    assert (site / folder).is_dir() and not (site / folder).is_symlink()
    assert check_site(site) == []


# -- requests to `serve`: nothing outside the site, nothing that is not a regular file of it ---------------------


@pytest.fixture(scope="module")
def trapped_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site that is also the build output (ledger.sqlite and dist/ inside it), then laced with traps."""
    out = tmp_path_factory.mktemp("trapped") / "out"
    out.mkdir()
    assert wheelwright("index", "--output", out, "--site", out, cwd=out.parent).code == 0
    make_wheel(out / "dist", WheelSpec())
    with Ledger(out / "ledger.sqlite"):
        pass
    assert wheelwright("index", "--output", out, "--site", out, cwd=out.parent).code == 0
    (out / "whl/passwd.html").symlink_to("/etc/passwd")
    (out / "simple/root").symlink_to("/")
    (out / "whl/pt214cu130/zero.whl").symlink_to("/dev/zero")
    os.mkfifo(out / "whl/pt214cu130/fifo.whl")
    (out / "json/dist").symlink_to(out / "dist")
    return out


WHEEL = "/whl/pt214cu130/" + WheelSpec().wheel_filename.replace("+", "%2B")
# (case, request path, status)
REQUESTS = [
    ("landing", "/", 200),
    ("wheel", WHEEL, 200),
    ("metadata", WHEEL + ".metadata", 200),
    ("ledger-in-site", "/ledger.sqlite", 404),
    ("dist-in-site", "/dist/" + WheelSpec().wheel_filename.replace("+", "%2B"), 404),
    ("manifest", "/.wheelwright-site.json", 404),
    ("symlinked-page", "/whl/passwd.html", 404),
    ("symlinked-folder", "/simple/root/etc/passwd", 404),
    ("symlinked-folder-to-dist", "/json/dist/", 404),
    ("symlink-to-dev-zero", "/whl/pt214cu130/zero.whl", 404),
    ("fifo", "/whl/pt214cu130/fifo.whl", 404),
    ("dotdot", "/../ledger.sqlite", 404),
    ("dotdot-encoded", "/%2e%2e/ledger.sqlite", 404),
    ("dotdot-inside", "/whl/../ledger.sqlite", 404),
    ("double-slash", "//ledger.sqlite", 404),
    ("backslash", "/whl\\..\\ledger.sqlite", 404),
    ("absolute-encoded", "/%2fetc%2fpasswd", 404),
    ("nul", "/%00", 400),
    ("nul-in-name", "/whl/pt214cu130.html%00.txt", 400),
    ("not-utf8", "/%ff%fe", 400),
    ("folder-without-index", "/whl/", 404),
    ("very-long", "/" + "a" * 70_000, 414),
]


@pytest.mark.parametrize(("path", "status"), [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS])
def test_serve_answers_hostile_paths_without_leaving_the_site(
    trapped_site: Path, path: str, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    from index_site.serve import serving

    with serving(trapped_site) as server, socket.create_connection(server.server_address[:2], timeout=10) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = _read_all(client)
    assert answer.split(b"\r\n", 1)[0].split()[1] == str(status).encode(), answer[:200]
    assert b"root:" not in answer and b"SQLite format" not in answer
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


@pytest.mark.parametrize(
    "request_bytes",
    [b"\x00\x01\x02garbage\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 200 + b"\r\n"],
    ids=["binary", "no-path", "http-9", "200-headers"],
)
def test_serve_survives_malformed_requests(trapped_site: Path, request_bytes: bytes) -> None:
    from index_site.serve import serving

    with serving(trapped_site) as server:
        with socket.create_connection(server.server_address[:2], timeout=10) as client:
            client.sendall(request_bytes)
            assert _read_all(client).startswith(b"HTTP/1.")
        with socket.create_connection(server.server_address[:2], timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(client).startswith(b"HTTP/1.1 200")  # still serving


def test_serve_logs_a_clients_request_line_without_its_escape_sequences(
    trapped_site: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from index_site.serve import serving

    caplog.set_level(logging.INFO, logger="index_site.serve")
    with serving(trapped_site) as server, socket.create_connection(server.server_address[:2], timeout=10) as client:
        client.sendall(b"GET /\x1b[2J\x1b[31mred HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        _read_all(client)
    logged = [record.getMessage() for record in caplog.records if record.name == "index_site.serve"]
    assert [message for message in logged if "/\\x1b[2J\\x1b[31mred" in message], logged
    assert not [message for message in logged if "\x1b" in message], logged


def _read_all(client: socket.socket) -> bytes:
    chunks = []
    while chunk := client.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


# -- merge: a shard (a CI artifact) is untrusted input ----------------------------------------------------------------

SHARD_JOBS = {"a": ("3.11", "cp311"), "b": ("3.12", "cp312")}


def shard(tmp: Path, name: str) -> Path:
    """A wheelhouse as `wheelwright build` leaves it: one built job, its wheel in dist/ and its log in logs/."""
    from builder.core.hashing import sha256_of
    from builder.core.ledger import LedgerEntry, Status

    python, tag = SHARD_JOBS[name]
    job_id = f"causal-conv1d-1.7.0+pt214cu130-{tag}-x86_64"
    wheel = make_wheel(tmp / name / "dist", WheelSpec(python=tag, platform="manylinux_2_28_x86_64"))
    (tmp / name / "logs").mkdir()
    (tmp / name / "logs" / f"{job_id}.log").write_text(f"build log of {job_id}\n")
    entry = LedgerEntry(
        job_id=job_id, package="causal-conv1d", version="1.7.0", label="pt214cu130", torch="2.14.0",
        accelerator="cu130", python=python, input_hash="h", status=Status.BUILT, wheel=wheel.name,
        wheel_sha256=sha256_of(wheel), wheel_size=wheel.stat().st_size,
    )
    with Ledger(tmp / name / "ledger.sqlite") as ledger:
        ledger.put(entry)
    return tmp / name


def row(**changes: object) -> Callable[[Path], None]:
    """Shard b's one row with ``changes``; a value ``sha256 of PATH`` is the hash of that file (made here)."""

    def change(tmp: Path) -> None:
        import hashlib

        values = dict(changes)
        for column, value in changes.items():
            if isinstance(value, str) and value.startswith("sha256 of "):
                target = tmp / value.removeprefix("sha256 of ")
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text("not a wheel: the shard planted it\n")
                values[column] = hashlib.sha256(target.read_bytes()).hexdigest()
        with sqlite3.connect(tmp / "b/ledger.sqlite") as db:
            db.execute(f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in values)}", tuple(values.values()))
        db.close()

    return change


def planted(link: str, target: str, *, copy_of: str | None = None) -> Callable[[Path], None]:
    """A link in shard b to a file outside it (a copy of ``copy_of``, so the hash still matches, or a secret)."""

    def plant(tmp: Path) -> None:
        outside = tmp / target
        outside.write_bytes((tmp / copy_of).read_bytes() if copy_of else b"secret\n")
        (tmp / link).unlink()
        (tmp / link).symlink_to(outside)

    return plant


def removed(relative: str) -> Callable[[Path], None]:
    return lambda tmp: (tmp / relative).unlink()


JOB_B = "causal-conv1d-1.7.0+pt214cu130-cp312-x86_64"
WHEEL_B = "causal_conv1d-1.7.0+pt214cu130-cp312-cp312-manylinux_2_28_x86_64.whl"

# (case, what is done to shard b, the row's job_id as the ERROR line repr's it, the field it names)
MERGE_CASES = [
    ("wheel-dotdot", row(wheel="../owned.txt", wheel_sha256="sha256 of b/owned.txt"), JOB_B, "wheel"),
    ("wheel-absolute", row(wheel="/etc/passwd"), JOB_B, "wheel"),
    ("wheel-in-a-subfolder", row(wheel="a/b.whl", wheel_sha256="sha256 of b/dist/a/b.whl"), JOB_B, "wheel"),
    ("wheel-backslash", row(wheel="..\\owned.whl"), JOB_B, "wheel"),
    ("wheel-nul", row(wheel=WHEEL_B + "\x00.txt"), JOB_B, "wheel"),
    ("wheel-not-a-wheel-name", row(wheel="notes.txt", wheel_sha256="sha256 of b/dist/notes.txt"), JOB_B, "wheel"),
    ("wheel-dotfile", row(wheel=".hidden.whl", wheel_sha256="sha256 of b/dist/.hidden.whl"), JOB_B, "wheel"),
    ("wheel-sha256-mismatch", row(wheel_sha256="0" * 64), JOB_B, "wheel_sha256"),
    ("wheel-sha256-not-hex", row(wheel_sha256="not a hash"), JOB_B, "wheel_sha256"),
    ("wheel-missing", removed(f"b/dist/{WHEEL_B}"), JOB_B, "wheel"),
    ("wheel-null-on-a-built-row", row(wheel=None), JOB_B, "wheel"),
    ("wheel-a-link-out-of-the-shard", planted(f"b/dist/{WHEEL_B}", "outside.whl", copy_of=f"b/dist/{WHEEL_B}"), JOB_B, "wheel"),
    ("log-a-link-out-of-the-shard", planted(f"b/logs/{JOB_B}.log", "secret.txt"), JOB_B, "log"),
    ("job-id-dotdot", row(job_id="../../etc", wheel_sha256="sha256 of etc.log"), "../../etc", "job_id"),
    ("job-id-slash", row(job_id="causal-conv1d/1.7.0"), "causal-conv1d/1.7.0", "job_id"),
    ("job-id-newline", row(job_id=JOB_B + "\nERROR forged"), JOB_B + "\nERROR forged", "job_id"),
    ("job-id-not-the-rows-job", row(job_id="causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"), "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64", "job_id"),
    ("wheel-version-disagrees", row(version="1.8.0", job_id=JOB_B.replace("1.7.0", "1.8.0")), JOB_B.replace("1.7.0", "1.8.0"), "wheel"),
    ("wheel-label-disagrees", row(label="pt213cu130", job_id=JOB_B.replace("pt214", "pt213")), JOB_B.replace("pt214", "pt213"), "wheel"),
    ("wheel-python-disagrees", row(python="3.13", job_id=JOB_B.replace("cp312", "cp313")), JOB_B.replace("cp312", "cp313"), "wheel"),
    ("wheel-package-disagrees", row(package="mamba-ssm", job_id=JOB_B.replace("causal-conv1d", "mamba-ssm")), JOB_B.replace("causal-conv1d", "mamba-ssm"), "wheel"),
    ("version-with-a-local-label", row(version="1.7.0+evil"), JOB_B, "version"),
    ("label-not-a-label", row(label="../x"), JOB_B, "label"),
    ("python-not-a-python", row(python="3.12/x"), JOB_B, "python"),
    ("wheel-a-blob", row(wheel=WHEEL_B.encode()), JOB_B, "wheel"),
    ("package-a-blob", row(package=b"causal-conv1d"), JOB_B, "package"),
    ("wheel-size-text", row(wheel_size="big"), JOB_B, "wheel_size"),
    ("updated-at-text", row(updated_at="soon"), JOB_B, "updated_at"),
]


def _tree(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): (str(p.readlink()) if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.mark.parametrize(("setup", "job_id", "field"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_a_hostile_shard_refuses_the_whole_merge(tmp_path: Path, setup, job_id: str, field: str) -> None:
    shard(tmp_path, "a"), shard(tmp_path, "b")
    (tmp_path / "etc.log").write_text("a file outside every shard\n")
    setup(tmp_path)
    before = _tree(tmp_path)
    run = wheelwright("merge", "a", "b", "--output", "all", cwd=tmp_path)
    assert_one_error(run, 9, rf"^ERROR b: job {re.escape(repr(job_id))}: {field} ")
    assert _tree(tmp_path) == before, "merge wrote something"
    assert not (tmp_path / "all").exists()


def test_two_sound_shards_merge_as_before(tmp_path: Path) -> None:
    shards = [shard(tmp_path, "a"), shard(tmp_path, "b")]
    run = wheelwright("merge", "a", "b", "--output", "all", cwd=tmp_path)
    assert run.code == 0 and "merged 2 wheelhouses into all: 2 ledger rows, 2 wheels" in run.output, run.output
    for source in shards:
        for kind in ("dist", "logs"):
            for path in (source / kind).iterdir():
                assert (tmp_path / "all" / kind / path.name).read_bytes() == path.read_bytes()
    with Ledger(tmp_path / "all/ledger.sqlite") as ledger:
        entries = ledger.entries()
    assert [e.job_id for e in entries] == sorted(f"causal-conv1d-1.7.0+pt214cu130-{t}-x86_64" for _, t in SHARD_JOBS.values())
    assert [e.log_path for e in entries] == [f"all/logs/{e.job_id}.log" for e in entries]
