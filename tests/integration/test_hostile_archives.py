"""Hostile archives and hostile data files, met where a user meets them: `wheelwright provenance` on a crafted
wheel, `wheelwright doctor --explain` (and the standalone doctor.py on Python 3.9) on a log built to be slow,
`wheelwright plan --estimate --ledger` on a ledger that is not one, `wheelwright facts check` against a registry
that answers wrong-typed JSON or a bomb, and `wheelwright build --preflight farm` against a torch index whose
entry would name a path. Each runs the real CLI in a subprocess under an address-space limit, and must end in one
ERROR line (or, for --explain, the finding) with the stated exit code, no traceback, and a peak RSS under
RSS_CAP, measured from the child's own rusage (os.wait4)."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.doctor.standalone import standalone_source
from tests import peers
from tests.zipcraft import (
    DIST_INFO,
    Blob,
    Entry,
    craft,
    module,
    provenance_wheel,
    record,
    zeros,
    zeros_sha256,
)

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "tests/data/matrix-minimal.yaml"
PYTHON39 = Path.home() / ".pyenv/versions/3.9.18/bin/python"
ADDRESS_LIMIT = 2 << 30  # a child that tries to inflate a bomb dies here instead of taking the machine
EXPLAIN_CPU_CAP = 20.0  # CPU-seconds for one doctor --explain of a hostile log
RSS_CAP = 200 << 20  # the CLI's own ~30-60 MiB, plus what a bounded read may hold; a bomb read whole is GiBs
pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Run:
    code: int
    output: str
    peak_rss: int  # bytes, the child's own ru_maxrss
    cpu: float = 0.0  # seconds of CPU, the child's own: bounded work is measured in it, not in wall time

    def errors(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.startswith("ERROR")]


def run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, stdin: Path | None = None) -> Run:
    """``command`` under prlimit's address-space limit (it execs the command: one process, whose rusage wait4
    returns); its exit code, its output and its peak RSS."""
    environment = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    limited = ["prlimit", f"--as={ADDRESS_LIMIT}", "--", *command]
    with tempfile.TemporaryFile() as output, open(stdin or os.devnull, "rb") as given:
        child = subprocess.Popen(limited, cwd=cwd, env=environment, stdin=given, stdout=output, stderr=output)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:  # the test's timeout: the child must not outlive it
            child.kill()
            child.wait()
            raise
        child.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    return Run(code=child.returncode, output=text, peak_rss=usage.ru_maxrss * 1024, cpu=usage.ru_utime + usage.ru_stime)


def wheelwright(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Run:
    return run([sys.executable, "-m", "builder.cli.main", *map(str, args)], cwd=cwd, env=env)


def assert_one_error(result: Run, code: int, pattern: str) -> None:
    assert "Traceback" not in result.output, result.output
    assert result.code == code, result.output
    assert len(result.errors()) == 1 and re.search(pattern, result.errors()[0]), result.output
    assert result.peak_rss < RSS_CAP, f"peak RSS {result.peak_rss >> 20} MiB"
    # the scan before the fix: 40 CPU-s for a 200 KB line, over an hour for these 2 MB ones; bounded: ~1-3 s
    assert result.cpu < EXPLAIN_CPU_CAP, f"{result.cpu:.1f} CPU-s"


# -- `wheelwright provenance` on a crafted wheel: its record agrees with every member, so only the plant is wrong --

BOMB = 1 << 30  # inflated bytes of one bomb member (about 1 MB in the archive)
PAYLOAD = "causal_conv1d/__init__.py"


def planted(*members: Entry) -> Callable[[Path], Path]:
    return lambda tmp: provenance_wheel(tmp, [module(PAYLOAD), *members])


def bomb_member(tmp: Path) -> Path:
    payload = Entry(name="causal_conv1d/weights.bin", blob=zeros(BOMB))
    return provenance_wheel(tmp, [module(PAYLOAD), payload], digests={payload.name: zeros_sha256(BOMB)})


def bomb_many_members(tmp: Path) -> Path:
    """1,024 members of 1 MiB of zeros, each under the per-member ratio's floor: 1 GiB from ~1 MB."""
    payload = [Entry(name=f"causal_conv1d/part{k}.bin", blob=zeros(1 << 20)) for k in range(1024)]
    return provenance_wheel(tmp, [module(PAYLOAD), *payload], digests={e.name: zeros_sha256(1 << 20) for e in payload})


def bomb_record(tmp: Path) -> Path:
    """wheelwright.json itself inflates to 1 GiB: valid JSON, its record padded with spaces."""
    text = json.dumps(record({PAYLOAD: _sha256(module(PAYLOAD))})).encode()
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    spaces = b" " * (1 << 20)
    raw = compressor.compress(text[:-1]) + b"".join(compressor.compress(spaces) for _ in range(1024))
    crc = zlib.crc32(text[:-1])
    for _ in range(1024):
        crc = zlib.crc32(spaces, crc)
    blob = Blob(raw=raw + compressor.compress(b"}") + compressor.flush(), crc=zlib.crc32(b"}", crc),
                size=len(text) + (1 << 30))
    wheel = provenance_wheel(tmp, [module(PAYLOAD)])
    with zipfile.ZipFile(wheel) as archive:
        kept = [Entry(name=i.filename, blob=Blob.of(archive.read(i))) for i in archive.infolist()
                if not i.filename.endswith("wheelwright.json")]
    return craft(wheel, [*kept, Entry(name=f"{DIST_INFO}/wheelwright.json", blob=blob)])


def _sha256(member: Entry) -> str:
    return hashlib.sha256(zlib.decompress(member.blob.raw, -15)).hexdigest()


def deep_json(tmp: Path) -> Path:
    return provenance_wheel(tmp, [module(PAYLOAD)], provenance_bytes=b"[" * 200_000 + b"]" * 200_000)


def typed(**changes: object) -> Callable[[Path], Path]:
    return lambda tmp: provenance_wheel(tmp, [module(PAYLOAD)], record_changes=changes)


def files_as(value: object) -> Callable[[Path], Path]:
    def setup(tmp: Path) -> Path:
        return provenance_wheel(tmp, [module(PAYLOAD)], record_changes={"files": value})

    return setup


def bad_variant_json(tmp: Path) -> Path:
    return provenance_wheel(tmp, [module(PAYLOAD)],
                            extra=[Entry(name=f"{DIST_INFO}/variant.json", blob=Blob.of(b"[1, 2"))])


PROVENANCE_CASES = [
    # archives that inflate without bound
    ("bomb-member", bomb_member, r"'causal_conv1d/weights\.bin' declares .* more than 50:1"),
    ("bomb-many-members", bomb_many_members, r"members inflate to .* more than 50:1"),
    ("bomb-provenance-record", bomb_record, r"'causal_conv1d.*wheelwright\.json' declares .* more than 50:1"),
    # names that leave the folder, repeat, or collide on a case-insensitive disk (each recorded, so only the
    # name is wrong)
    ("slip-climbing", planted(module("causal_conv1d/../../owned.py")), r"'causal_conv1d/\.\./\.\./owned\.py' climbs"),
    ("slip-absolute", planted(module("/tmp/owned.py")), r"'/tmp/owned\.py' is an absolute path"),
    ("slip-drive", planted(module("C:/owned.py")), r"'C:/owned\.py' is an absolute path"),
    ("slip-backslash", planted(module("causal_conv1d\\..\\..\\owned.py")), r"holds a backslash"),
    ("duplicate-member", planted(module(PAYLOAD, "VALUE = 2\n")), r"'causal_conv1d/__init__\.py' appears twice"),
    ("case-twin", planted(module("causal_conv1d/Ops.py"), module("causal_conv1d/ops.py")),
     r"'causal_conv1d/ops\.py' differs from 'causal_conv1d/Ops\.py' only by case"),
    ("control-character", planted(module("causal_conv1d/a\nb.py")), r"holds a control character"),
    # wrong-typed or malformed provenance JSON
    ("json-nested-200k", deep_json, r"wheelwright\.json is not JSON"),
    ("json-files-list", files_as([PAYLOAD]), r"files is \['causal_conv1d/__init__\.py'\] \(list\), not a table"),
    ("json-files-digest-int", files_as({PAYLOAD: 7}), r"files\['causal_conv1d/__init__\.py'\] is 7 \(int\)"),
    ("json-toolkit-string", typed(toolkit="cuda"), r"toolkit is 'cuda' \(str\), not a table"),
    ("json-archs-sass-int", typed(archs={"sass": 90, "ptx": []}), r"archs\.sass is 90 \(int\)"),
    ("json-archs-nested-list", typed(archs={"sass": [["9.0"]], "ptx": []}), r"archs\.sass is \[\['9\.0'\]\]"),
    ("json-torch-list", typed(torch=["2.14.1"]), r"torch is \['2\.14\.1'\] \(list\), not a table"),
    ("json-requirement-int", typed(torch={"requirement": 214}), r"torch\.requirement is 214 \(int\)"),
    ("json-patches-ints", typed(recipe={"patches": [1, 2]}), r"recipe\.patches\[0\] is 1"),
    ("json-recipe-string", typed(recipe="none"), r"recipe is 'none' \(str\), not a table"),
    ("json-version-int", typed(version=170), r"version is 170 \(int\), not a string"),
    ("json-sdist-list", typed(sdist=[]), r"sdist is \[\] \(list\), not a table"),
]


@pytest.mark.parametrize(("setup", "pattern"), [c[1:] for c in PROVENANCE_CASES], ids=[c[0] for c in PROVENANCE_CASES])
def test_provenance_refuses_a_hostile_wheel_in_one_line(tmp_path: Path, setup, pattern: str) -> None:
    wheel = setup(tmp_path / "in")
    result = wheelwright("provenance", wheel, cwd=tmp_path)
    assert_one_error(result, 10, pattern)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nothing unpacked beside it
    assert not Path("/tmp/owned.py").exists()


# (case, the record's job as a wheel from anywhere may hold it, how its line shows it)
PRINTED_FIELDS = [
    ("escape-sequence", "causal-conv1d\x1b[2J\x1b[31m", r"causal-conv1d\\x1b\[2J\\x1b\[31m"),
    ("line-end", "causal-conv1d\nOK forged", r"causal-conv1d\\nOK forged"),
    ("line-separator", "causal-conv1d\u2028OK forged", r"causal-conv1d\\u2028OK forged"),
]


@pytest.mark.parametrize(("job", "shown"), [c[1:] for c in PRINTED_FIELDS], ids=[c[0] for c in PRINTED_FIELDS])
def test_the_records_text_prints_one_line_a_field_with_no_escape_sequence(tmp_path: Path, job: str, shown: str) -> None:
    result = wheelwright("provenance", typed(job=job)(tmp_path / "in"), cwd=tmp_path)
    lines = result.output.splitlines()
    assert "\x1b" not in result.output and not any(line.startswith("OK forged") for line in lines), result.output
    assert [line for line in lines if line.startswith("│ job") and re.search(shown, line)], result.output


def test_a_variant_json_that_is_not_json_is_a_mismatch_not_a_traceback(tmp_path: Path) -> None:
    result = wheelwright("provenance", bad_variant_json(tmp_path), cwd=tmp_path)
    assert_one_error(result, 10, r"provenance disagrees with the wheel's contents")
    assert "variant.json does not describe the recorded label pt214cu130" in result.output


def test_a_sound_crafted_wheel_still_agrees(tmp_path: Path) -> None:
    result = wheelwright("provenance", provenance_wheel(tmp_path, [module(PAYLOAD)]), cwd=tmp_path)
    assert result.code == 0 and "OK the record agrees with the wheel" in result.output, result.output


# -- doctor --explain on input built to be slow or large --------------------------------------------------------------

MESSAGE = "ImportError: /opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by x.so)\n"


def long_line(unit: str, size: int = 2 << 20) -> Callable[[Path], Path]:
    """One ``size``-byte line of ``unit`` repeated (the old scan tried every '/' against the rest of its line:
    200 KB took 40 s, so 2 MB would take over an hour), then the real message."""

    def write(tmp: Path) -> Path:
        path = tmp / "build.log"
        path.write_text(unit * (size // len(unit)) + "\n" + MESSAGE)
        return path

    return write


def huge_log(tmp: Path) -> Path:
    """A 1 GiB log (sparse: NULs) whose last line is the message: only its tail is read."""
    path = tmp / "build.log"
    with path.open("wb") as log:
        log.truncate(1 << 30)
        log.seek(0, os.SEEK_END)
        log.write(b"\n" + MESSAGE.encode())
    return path


EXPLAIN_CASES = [
    ("line-of-slashes", long_line("/a")),
    ("line-of-library-paths", long_line("/usr/lib/libstdc++.so.6")),
    ("line-of-library-colons", long_line("/libstdc++.so.6:")),
    ("log-of-1-gib", huge_log),
]


@pytest.mark.timeout(900)  # a hang guard only: the bound is on CPU seconds (_assert_found), not on wall time
@pytest.mark.parametrize("setup", [c[1] for c in EXPLAIN_CASES], ids=[c[0] for c in EXPLAIN_CASES])
def test_doctor_explain_reads_a_hostile_log_in_bounded_work(tmp_path: Path, setup) -> None:
    log = setup(tmp_path)
    _assert_found(wheelwright("doctor", "--explain", log, cwd=tmp_path))
    command = [sys.executable, "-m", "builder.cli.main", "doctor", "--explain", "-"]
    _assert_found(run(command, cwd=tmp_path, stdin=log))


def _assert_found(result: Run) -> None:
    assert result.code == 0 and "Traceback" not in result.output, result.output
    assert "(/opt/conda/lib/libstdc++.so.6)" in result.output.splitlines()[0], result.output[:500]
    assert result.peak_rss < RSS_CAP, f"peak RSS {result.peak_rss >> 20} MiB"


@pytest.fixture(scope="module")
def doctor_py(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("doctor") / "doctor.py"
    path.write_text(standalone_source())
    return path


@pytest.mark.timeout(900)
@pytest.mark.skipif(not PYTHON39.exists(), reason="needs pyenv's Python 3.9 (doctor.py's floor)")
@pytest.mark.parametrize("setup", [c[1] for c in EXPLAIN_CASES], ids=[c[0] for c in EXPLAIN_CASES])
def test_the_standalone_doctor_on_python_3_9_reads_a_hostile_log_in_bounded_work(
    tmp_path: Path, setup, doctor_py: Path
) -> None:
    log = setup(tmp_path)
    _assert_found(run([str(PYTHON39), str(doctor_py), "--explain", str(log)], cwd=tmp_path))
    _assert_found(run([str(PYTHON39), str(doctor_py), "--explain", "-"], cwd=tmp_path, stdin=log))


# -- plan --estimate --ledger: a file that is not a ledger, or a row that does not read as one ------------------------


def raw(content: bytes) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        (tmp / "ledger.sqlite").write_bytes(content)
        return tmp / "ledger.sqlite"

    return write


def sql(*statements: str, parameters: tuple[object, ...] = ()) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        path = tmp / "ledger.sqlite"
        db = sqlite3.connect(path)
        for statement in statements:
            db.execute(statement, parameters if "?" in statement else ())
        db.commit()
        db.close()
        return path

    return write


_TABLE = "CREATE TABLE jobs (job_id, package, compile_times)"  # no types: SQLite keeps each value as given


def row(compile_times: object, package: object = "causal-conv1d") -> Callable[[Path], Path]:
    return sql(_TABLE, "INSERT INTO jobs VALUES ('j1', ?, ?)", parameters=(package, compile_times))


def timing(**changes: object) -> str:
    return json.dumps([{"unit": "a.cu", "arch": "9.0", "seconds": 10, **changes}])


def truncated(tmp: Path) -> Path:
    path = sql(_TABLE, *[f"INSERT INTO jobs VALUES ('j{k}', 'causal-conv1d', '{'x' * 900}')" for k in range(200)])(tmp)
    path.write_bytes(path.read_bytes()[:5000])
    return path


def folder(tmp: Path) -> Path:
    (tmp / "ledger.sqlite").mkdir()
    return tmp / "ledger.sqlite"


LEDGER_CASES = [
    # files that are not a ledger
    ("garbage", raw(b"garbage, not SQLite" * 10), r"not a usable ledger: file is not a database"),
    ("truncated", truncated, r"not a usable ledger: database disk image is malformed"),
    ("empty-file", raw(b""), r"not a wheelwright ledger \(no jobs table"),
    ("folder", folder, r"a folder, not a ledger file"),
    ("no-jobs-table", sql("CREATE TABLE other (x)"), r"not a wheelwright ledger \(no jobs table"),
    # rows whose compile_times are not what builds record
    ("compile-times-not-json", row("{not json"), r"job 'j1': compile_times is not JSON"),
    ("compile-times-object", row('{"a.cu": 1}'), r"compile_times is \{'a\.cu': 1\} \(dict\), not a list"),
    ("compile-times-integer", row(5), r"job 'j1' has compile_times 5 \(int\), not text"),
    ("compile-times-blob", row(b"\x00\x01"), r"job 'j1' has compile_times b'\\x00\\x01' \(bytes\), not text"),
    ("entry-a-number", row("[5]"), r"compile_times entry 0 is 5 \(int\)"),
    ("seconds-missing", row('[{"unit": "a.cu", "arch": "9.0"}]'), r"compile_times entry 0 is"),
    ("seconds-a-string", row(timing(seconds="ten")), r"compile_times entry 0 is .*'ten'"),
    ("seconds-nan", row(timing(seconds=float("nan"))), r"compile_times entry 0 is .*nan"),
    ("seconds-negative", row(timing(seconds=-5)), r"compile_times entry 0 is .*-5"),
    ("seconds-true", row(timing(seconds=True)), r"compile_times entry 0 is .*True"),
    ("unit-a-list", row(timing(unit=["a.cu"])), r"compile_times entry 0 is .*\['a\.cu'\]"),
    ("package-an-integer", row(timing(), package=7), r"job 'j1' has package 7 \(int\), not text"),
]


@pytest.mark.parametrize(("setup", "pattern"), [c[1:] for c in LEDGER_CASES], ids=[c[0] for c in LEDGER_CASES])
def test_plan_estimate_refuses_a_ledger_that_is_not_one_in_one_line(tmp_path: Path, setup, pattern: str) -> None:
    ledger = setup(tmp_path)
    result = wheelwright("plan", "--matrix", MATRIX, "--estimate", "--ledger", ledger, cwd=tmp_path)
    assert_one_error(result, 9, pattern)


def test_a_sound_ledger_still_estimates(tmp_path: Path) -> None:
    ledger = row(timing())(tmp_path)
    result = wheelwright("plan", "--matrix", MATRIX, "--estimate", "--ledger", ledger, cwd=tmp_path)
    assert result.code == 0 and "compile_times of causal-conv1d" in result.output, result.output


# -- a registry (facts check) and a torch index (preflight) that answer hostile pages, on loopback --------------------


class Pages(http.server.ThreadingHTTPServer):
    """Serves ``pages`` ({path: (content type, body)}) with byte ranges, as an index's host would."""

    def __init__(self, pages: dict[str, tuple[str, bytes]]) -> None:
        self.pages = pages
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Pages

    def do_GET(self) -> None:
        found = self.server.pages.get(self.path.split("?")[0])
        if found is None:
            self.send_error(404)
            return
        content_type, body = found
        start, end = 0, len(body) - 1
        if match := re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", "")):
            start, end = int(match[1]), min(int(match[2]), end)
        self.send_response(206 if self.headers.get("Range") else 200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(body[start:end + 1])

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, tuple[str, bytes]]], Pages]]:
    """``serve(pages)`` starts a server of those pages, serving until the test ends."""
    with contextlib.ExitStack() as servers:
        yield lambda pages: servers.enter_context(peers.serving(Pages(pages)))


PEP691 = "application/vnd.pypi.simple.v1+json"
TORCH_WHEEL = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"


def page(files: object) -> bytes:
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}).encode()


def entry(**changes: object) -> dict[str, object]:
    return {"filename": TORCH_WHEEL, "url": f"/files/{TORCH_WHEEL}", "hashes": {}, "size": 100, **changes}


REGISTRY_CASES = [
    ("entry-a-string", page([TORCH_WHEEL]), r"file entry 0 is a str, not a table"),
    ("entry-null", page([entry(), None]), r"file entry 1 is a NoneType, not a table"),
    ("filename-an-integer", page([entry(filename=214)]), r"file entry 0 \('214'\): 'filename' is the int 214"),
    ("filename-a-list", page([entry(filename=[TORCH_WHEEL])]), r"'filename' is the list \['torch-2\.14\.1"),
    ("url-a-list", page([entry(url=["x"])]), r"'url' is the list \['x'\], not str"),
    ("url-a-number", page([entry(url=5)]), r"'url' is the int 5, not str"),
    ("size-a-table", page([entry(size={})]), r"'size' is the dict \{\}, not int"),
    ("size-null", page([entry(size=None)]), r"cannot read the METADATA of torch-2\.14\.1.*int\(\) argument"),
]


@pytest.mark.parametrize(("body", "pattern"), [c[1:] for c in REGISTRY_CASES], ids=[c[0] for c in REGISTRY_CASES])
def test_facts_check_refuses_a_wrong_typed_registry_page_in_one_line(tmp_path: Path, serve, body: bytes,
                                                                       pattern: str) -> None:
    server = serve({"/simple/torch/": (PEP691, body)})
    result = wheelwright("facts", "check", cwd=tmp_path, env={"WHEELWRIGHT_INDEX_URL": f"{server.root}/simple/"})
    assert_one_error(result, 5, pattern)


def test_facts_check_reads_a_bomb_wheel_by_ranges_within_the_caps(tmp_path: Path, serve) -> None:
    """No PEP 658 metadata: the check reads the wheel's METADATA by range requests, and this one inflates."""
    wheel = craft(tmp_path / TORCH_WHEEL, [Entry(name="torch/__init__.py", blob=Blob.of(b"")),
                                           Entry(name="torch-2.14.1.dist-info/METADATA", blob=zeros(BOMB))])
    body = wheel.read_bytes()
    server = serve({"/simple/torch/": (PEP691, page([entry(size=len(body))])),
                    f"/files/{TORCH_WHEEL}": ("application/octet-stream", body)})
    result = wheelwright("facts", "check", cwd=tmp_path, env={"WHEELWRIGHT_INDEX_URL": f"{server.root}/simple/"})
    assert_one_error(result, 5, r"cannot read the METADATA of torch-2\.14\.1.*declares more than 16,777,216 bytes")


TORCH_INDEX_CASES = [
    ("sha256-climbs", "#sha256=../../../../tmp/owned", r"with sha256 '\.\./\.\./\.\./\.\./tmp/owned', not 64"),
    ("sha256-too-short", "#sha256=abc", r"with sha256 'abc', not 64 hexadecimal digits"),
    ("url-a-local-file", "file:///etc/passwd", r"sends torch-2\.14\.1\+cu130.* to 'file:///etc/passwd'"),
    ("url-ftp", "ftp://127.0.0.1/x.whl", r"only http or https URLs are followed"),
]


@pytest.mark.parametrize(("href", "pattern"), [c[1:] for c in TORCH_INDEX_CASES], ids=[c[0] for c in TORCH_INDEX_CASES])
def test_preflight_refuses_a_torch_index_entry_that_names_a_path_or_a_local_file(
    tmp_path: Path, serve, href: str, pattern: str
) -> None:
    filename = "torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
    link = f"/files/{filename}{href}" if href.startswith("#") else href
    html = f'<html><body><a href="{link}">{filename}</a></body></html>'.encode()
    server = serve({"/whl/cu130/torch/": ("text/html", html)})
    result = wheelwright("build", "--matrix", MATRIX, "--preflight", "farm", cwd=tmp_path,
                         env={"WHEELWRIGHT_TORCH_INDEX": f"{server.root}/whl/{{accelerator}}/"})
    assert_one_error(result, 5, pattern)
