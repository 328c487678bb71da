"""Data files and pages whose JSON (or SQLite) has the wrong types: the provenance record, the registry's file
entries, the torch index's entry, a ledger row's columns and its compile_times. Each is one error of the
family, naming the field, never an AttributeError or a TypeError; one case a line. And doctor --explain still
names the libstdc++ a loader quotes, now that it finds it backwards from the match."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import FetchError, LedgerError, WheelError
from builder.core.ledger import Ledger, compile_times
from builder.doctor.explain import explain
from builder.plan.facts import load_facts
from builder.steps import provenance, torch_index
from builder.steps.nvcc_time import unit_costs
from builder.steps.torch_registry import checked_entries
from builder.steps.wheelzip import Member
from tests.jobs import local_job
from tests.zipcraft import DIST_INFO, record

# -- the provenance record ---------------------------------------------------------------------------------------------

RECORDS = [
    ("files-a-list", {"files": ["a.py"]}, r"files is \['a\.py'\] \(list\), not a table"),
    ("files-digest-a-number", {"files": {"a.py": 5}}, r"files\['a\.py'\] is 5 \(int\), not a sha256 string"),
    ("toolkit-a-string", {"toolkit": "cuda"}, r"toolkit is 'cuda' \(str\), not a table"),
    ("archs-a-list", {"archs": ["9.0"]}, r"archs is \['9\.0'\] \(list\), not a table"),
    ("archs-sass-a-string", {"archs": {"sass": "9.0"}}, r"archs\.sass is '9\.0' \(str\), not a list of strings"),
    ("archs-ptx-numbers", {"archs": {"sass": [], "ptx": [9.0]}}, r"archs\.ptx is \[9\.0\] \(list\)"),
    ("torch-null", {"torch": None}, r"torch is None \(NoneType\), not a table"),
    ("requirement-a-list", {"torch": {"requirement": ["torch==2.14.1"]}}, r"torch\.requirement is \['torch"),
    ("cxx11-abi-a-string", {"torch": {"cxx11_abi": "yes"}}, r"torch\.cxx11_abi is 'yes' \(str\), not true or false"),
    ("patches-a-table", {"recipe": {"patches": {"a": 1}}}, r"recipe\.patches is \{'a': 1\} \(dict\), not a list"),
    ("patch-name-a-number", {"recipe": {"patches": [{"name": 5}]}}, r"recipe\.patches\[0\] is \{'name': 5\}"),
    ("label-a-number", {"label": 214}, r"label is 214 \(int\), not a string"),
    ("job-a-table", {"job": {}}, r"job is \{\} \(dict\), not a string"),
    ("build-host-a-string", {"build_host": "h"}, r"build_host is 'h' \(str\), not a table"),
    ("long-value-cut", {"label": ["x" * 500]}, r"label is \['xxxx+\.\.\. \(list\)"),
]


def members(data: bytes) -> dict[str, Member]:
    return {"causal_conv1d/__init__.py": Member(data=b""), f"{DIST_INFO}/wheelwright.json": Member(data=data)}


@pytest.mark.parametrize(("changes", "pattern"), [c[1:] for c in RECORDS], ids=[c[0] for c in RECORDS])
def test_a_wrong_typed_record_field_is_one_wheel_error_naming_it(changes: dict[str, Any], pattern: str) -> None:
    data = json.dumps({**record({}), **changes}).encode()
    with pytest.raises(WheelError, match=r"w\.whl: wheelwright\.json: " + pattern):
        provenance.read(members(data), "w.whl")
    assert provenance.disagreements(members(data), "w.whl")[0].startswith("w.whl: wheelwright.json: ")


@pytest.mark.parametrize("data", [b"[" * 100_000, b"{" * 100_000, b'{"schema": 1, "files": ' + b"[" * 50_000],
                         ids=["nested-lists", "nested-tables", "nested-after-a-field"])
def test_json_nested_past_the_recursion_limit_is_not_json(data: bytes) -> None:
    with pytest.raises(WheelError, match=r"wheelwright\.json is not JSON"):
        provenance.read(members(data), "w.whl")


def test_a_record_of_an_older_build_that_lacks_fields_still_reads() -> None:
    data = json.dumps({"schema": 1, "files": {}, "version": "1.0"}).encode()
    assert provenance.read(members(data), "w.whl").files == {}
    assert provenance.describe(provenance.read(members(data), "w.whl"))[0] == ("job", "None")


# -- the registry's file entries (facts check) -------------------------------------------------------------------------

WHEEL = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
REGISTRY = [
    ("files-a-table", {"a": 1}, r"'files' is a dict, not a list"),
    ("entry-a-list", [[WHEEL]], r"file entry 0 is a list, not a table"),
    ("no-filename", [{"url": "x"}], r"file entry 0 has no 'filename'"),
    ("filename-null", [{"filename": None}], r"file entry 0 has no 'filename'"),
    ("filename-a-table", [{"filename": {}}], r"'filename' is the dict \{\}, not str"),
    ("size-a-float", [{"filename": WHEEL, "size": 1.5}], r"'size' is the float 1\.5, not int"),
    ("size-a-bool", [{"filename": WHEEL, "size": False}], r"'size' is the bool False, not int"),
    ("url-a-number", [{"filename": WHEEL, "url": 1}], r"'url' is the int 1, not str"),
    ("yanked-a-number", [{"filename": WHEEL, "yanked": 1}], r"'yanked' is the int 1, not bool or str"),
    ("metadata-a-list", [{"filename": WHEEL, "dist-info-metadata": []}], r"'dist-info-metadata' is the list"),
    ("second-entry-bad", [{"filename": WHEEL}, 7], r"file entry 1 is a int, not a table"),
]


@pytest.mark.parametrize(("files", "pattern"), [c[1:] for c in REGISTRY], ids=[c[0] for c in REGISTRY])
def test_a_wrong_typed_registry_entry_is_one_fetch_error(files: object, pattern: str) -> None:
    with pytest.raises(FetchError, match=pattern):
        checked_entries(files, "the torch page")


def test_sound_registry_entries_pass_as_they_are() -> None:
    files = [{"filename": WHEEL, "url": "/x", "size": 10, "yanked": "broken", "core-metadata": {"sha256": "ab"}},
             {"filename": "torch-2.14.1.tar.gz", "yanked": False, "core-metadata": True}]
    assert checked_entries(files, "the torch page") == files


# -- the torch index's picked entry ------------------------------------------------------------------------------------

MIRROR = "https://mirror.test/whl/{accelerator}/"
TORCH = "torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
INDEX_ENTRIES = [
    ("sha256-climbs", {"hashes": {"sha256": "../../../../tmp/owned"}}, r"with sha256 '\.\./\.\./\.\./\.\./tmp/owned'"),
    ("sha256-upper-case", {"hashes": {"sha256": "AB" * 32}}, r"not 64 hexadecimal digits"),
    ("sha256-a-number", {"hashes": {"sha256": 5}}, r"with sha256 '5', not 64"),
    ("sha256-a-list", {"hashes": {"sha256": ["ab" * 32]}}, r"not 64 hexadecimal digits"),
    ("url-file", {"url": "file:///etc/shadow"}, r"sends .* to 'file:///etc/shadow': only http or https URLs"),
    ("url-data", {"url": "data:,x"}, r"only http or https URLs"),
    ("url-no-scheme", {"url": "/etc/shadow"}, r"only http or https URLs"),
]


@pytest.mark.parametrize(("changes", "pattern"), [c[1:] for c in INDEX_ENTRIES], ids=[c[0] for c in INDEX_ENTRIES])
def test_a_torch_index_entry_that_would_name_a_path_or_a_local_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], pattern: str
) -> None:
    entry = {"filename": TORCH, "url": f"https://files.test/{TORCH}", "hashes": {"sha256": "ab" * 32}, **changes}
    monkeypatch.setattr(torch_index, "index_files", lambda page, who: [entry])
    with pytest.raises(FetchError, match=pattern):
        torch_index.find_torch_wheel(local_job(), load_facts(), MIRROR)


def test_a_file_index_may_list_file_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"filename": TORCH, "url": f"file:///mirror/{TORCH}", "hashes": {}}
    monkeypatch.setattr(torch_index, "index_files", lambda page, who: [entry])
    wheel = torch_index.find_torch_wheel(local_job(), load_facts(), "file:///mirror/whl/{accelerator}/")
    assert (wheel.url, wheel.sha256) == (f"file:///mirror/{TORCH}", None)


# -- a ledger row's columns and its compile_times ----------------------------------------------------------------------

ROW = {"job_id": "j1", "package": "causal-conv1d", "version": "1.7.0", "label": "pt214cu130", "torch": "2.14.1",
       "accelerator": "cu130", "python": "3.11", "input_hash": "h", "status": "built", "timings": "{}",
       "updated_at": 1.0}
COLUMNS = [
    ("version-a-number", {"version": 170}, r"job 'j1' has version 170 \(int\), not text"),
    ("status-a-blob", {"status": b"built"}, r"job 'j1' has status b'built' \(bytes\), not text"),
    ("wheel-size-text", {"wheel_size": "big"}, r"job 'j1' has wheel_size 'big' \(str\), not an integer or NULL"),
    ("updated-at-text", {"updated_at": "now"}, r"has updated_at 'now' \(str\), not a number or an integer"),
    ("timings-values-text", {"timings": '{"compile": "long"}'}, r"job 'j1' has unreadable timings"),
    ("timings-nested", {"timings": "[" * 100_000}, r"job 'j1' has unreadable timings"),
    ("timings-negative", {"timings": '{"compile": -1}'}, r"job 'j1' has unreadable timings"),
    ("job-id-a-number", {"job_id": 5}, r"job '5' has job_id 5 \(int\), not text"),
]


@pytest.mark.parametrize(("changes", "pattern"), [c[1:] for c in COLUMNS], ids=[c[0] for c in COLUMNS])
def test_a_ledger_row_with_a_wrong_typed_column_is_one_ledger_error(
    tmp_path: Path, changes: dict[str, Any], pattern: str
) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger(path).close()
    row = {**ROW, **changes}
    with sqlite3.connect(path) as db:  # the same columns without their types: SQLite keeps each value as given
        columns = [name for _, name, *_ in db.execute("PRAGMA table_info(jobs)")]
        db.execute("DROP TABLE jobs")
        db.execute(f"CREATE TABLE jobs ({', '.join(columns)})")
        db.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
    with Ledger(path) as ledger, pytest.raises(LedgerError, match=pattern):
        ledger.entries()


TIMES = [
    ("not-json", "{", r"compile_times is not JSON"),
    ("a-table", '{"a": 1}', r"compile_times is \{'a': 1\} \(dict\), not a list"),
    ("nested", "[" * 100_000, r"compile_times is not JSON"),
    ("entry-a-list", '[["a.cu", "9.0", 1]]', r"entry 0 is \['a\.cu', '9\.0', 1\] \(list\)"),
    ("seconds-text", '[{"unit": "a.cu", "arch": "9.0", "seconds": "1"}]', r"entry 0 is"),
    ("seconds-infinite", '[{"unit": "a.cu", "arch": "9.0", "seconds": Infinity}]', r"entry 0 is .*inf"),
    ("arch-a-number", '[{"unit": "a.cu", "arch": 9.0, "seconds": 1}]', r"entry 0 is .*'arch': 9\.0"),
    ("second-entry", '[{"unit": "a.cu", "arch": "9.0", "seconds": 1}, null]', r"entry 1 is None"),
]


@pytest.mark.parametrize(("text", "pattern"), [c[1:] for c in TIMES], ids=[c[0] for c in TIMES])
def test_malformed_compile_times_are_one_ledger_error_where_the_build_reads_them_too(text: str, pattern: str) -> None:
    with pytest.raises(LedgerError, match=pattern) as raised:
        compile_times(text, "row 7")
    assert str(raised.value).startswith("row 7: compile_times ")
    with pytest.raises(LedgerError, match=pattern):
        unit_costs([text])


def test_sound_compile_times_read_as_before() -> None:
    text = '[{"unit": "a.cu", "arch": "9.0", "seconds": 2}, {"unit": "a.cu", "arch": "host", "seconds": 0.5}]'
    assert [(t.unit, t.arch, t.seconds) for t in compile_times(text, "r")] == [("a.cu", "9.0", 2.0),
                                                                               ("a.cu", "host", 0.5)]
    assert compile_times(None, "r") == [] and unit_costs([text, None]) == {"a.cu": {"9.0": 2.0, "host": 0.5}}
    assert not math.isnan(unit_costs([text])["a.cu"]["9.0"])


# -- doctor --explain: the library a loader quotes, found backwards from the match -------------------------------------

LOADER_LINES = [
    ("conda", "ImportError: /opt/conda/lib/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by x.so)",
     "/opt/conda/lib/libstdc++.so.6"),
    ("prefixed-token", "x/usr/lib/libstdc++.so.6.0.33: version 'CXXABI_1.3.15' not found",
     "/usr/lib/libstdc++.so.6.0.33"),
    ("no-library", "version `GLIBCXX_3.4.32' not found (required by x.so)", None),
    ("not-a-libstdcxx", "/usr/lib/libfoo.so: version `GLIBCXX_3.4.32' not found", None),
    ("space-before-colon", "/usr/lib/libstdc++.so.6 : version `GLIBCXX_3.4.32' not found", None),
]


@pytest.mark.parametrize(("line", "library"), [c[1:] for c in LOADER_LINES], ids=[c[0] for c in LOADER_LINES])
def test_the_libstdcxx_a_loader_names_is_still_quoted(line: str, library: str | None) -> None:
    (finding,) = explain(line)
    assert finding.code == "libstdcxx-too-old"
    assert (f"({library})" in finding.cause) if library else ("loaded provides" in finding.cause)
