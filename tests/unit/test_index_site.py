"""The index stage on a real folder of hand-made wheels: what it writes, what it leaves alone when re-run, what it
takes from the ledger instead of hashing, and what it prunes or refuses."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import msgspec
import pytest

from builder.core.errors import ConfigError
from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry
from index_site import catalog as catalog_module
from index_site import records as records_module
from index_site import site as site_module
from index_site import stage
from index_site.layout import SITE_MARKER
from index_site.records import load_manifest
from index_site.stage import build_site
from index_site.state import STATE_FILE
from scripts.bench.wheels import WheelSpec, make_wheel
from tests.jobs import ledger_entry

BASE = "https://wheels.example.org"
SPECS = [
    WheelSpec(label="pt214cu130", python="cp311"),
    WheelSpec(label="pt214cu130", python="cp312"),
    WheelSpec(label="pt213cu130", python="cp311"),
    WheelSpec(label="pt212cu126", python="cp311"),
    WheelSpec(project="mamba-ssm", version="2.3.2.post1", label="pt214cu130", python="cp311"),
]


@pytest.fixture
def output(tmp_path: Path) -> Path:
    for spec in SPECS:
        make_wheel(tmp_path / "dist", spec)
    return tmp_path


def _snapshot(site: Path) -> dict[str, int]:
    return {p.relative_to(site).as_posix(): p.stat().st_mtime_ns for p in site.rglob("*") if p.is_file()}


def test_cold_index_links_wheels_and_writes_their_metadata(output: Path) -> None:
    report = build_site(output, output / "site", base_url=BASE)
    assert report.stats.hashed == len(SPECS) and report.wheels == len(SPECS)
    assert report.variants == ("pt212cu126", "pt213cu130", "pt214cu130")
    for wheel in (output / "dist").iterdir():
        label = wheel.name.split("+")[1].split("-")[0]
        published = output / "site" / "whl" / label / wheel.name
        assert os.path.samefile(wheel, published)  # hard-linked, not copied
        metadata = (published.parent / (wheel.name + ".metadata")).read_bytes()
        assert metadata.startswith(b"Metadata-Version: 2.1\nName: ")
        digest = hashlib.sha256(metadata).hexdigest()
        assert f'data-core-metadata="sha256={digest}"' in (output / "site" / f"whl/{label}.html").read_text()


def test_reindex_without_changes_writes_nothing(output: Path) -> None:
    build_site(output, output / "site", base_url=BASE)
    before = _snapshot(output / "site")
    report = build_site(output, output / "site", base_url=BASE)
    assert report.stats.hashed == 0 and report.stats.cached == len(SPECS)
    assert report.written == () and report.deleted == ()
    assert _snapshot(output / "site") == before


def test_a_site_wheel_replaced_by_other_bytes_is_linked_again(output: Path) -> None:
    """The directory entry's inode number is what confirms a site wheel as the hard link into dist/: a file put in
    its place (another inode, the same size) is replaced by the link again."""
    build_site(output, output / "site", base_url=BASE)
    wheel = next((output / "dist").glob("*pt213cu130*"))
    published = output / "site/whl/pt213cu130" / wheel.name
    published.unlink()
    published.write_bytes(b"x" * wheel.stat().st_size)
    report = build_site(output, output / "site", base_url=BASE)
    assert report.written == (f"whl/pt213cu130/{wheel.name}",)
    assert os.path.samefile(wheel, published)


def test_a_site_on_another_filesystem_checks_its_wheels_by_their_identity(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inode numbers mean nothing across filesystems: there each site wheel is held to its full identity."""
    build_site(output, output / "site", base_url=BASE)
    monkeypatch.setattr(stage, "quiet_run", lambda *_: (None, None))  # each run plans the whole site
    monkeypatch.setattr(site_module, "as_left", lambda *_: None)
    seen: list[str] = []
    real = site_module.identity_if_regular
    monkeypatch.setattr(site_module, "identity_if_regular", lambda path: seen.append(os.fspath(path)) or real(path))
    assert build_site(output, output / "site", base_url=BASE).written == ()
    assert [path for path in seen if path.endswith(".whl")] == []  # one filesystem: the entries' inodes suffice
    monkeypatch.setattr(site_module, "_device", lambda folder: -1)  # dist/ on "another" filesystem
    assert build_site(output, output / "site", base_url=BASE).written == ()
    assert sum(1 for path in seen if path.endswith(".whl")) == len(SPECS)


def test_anything_put_into_or_taken_out_of_a_site_folder_is_seen_by_the_next_index(output: Path) -> None:
    """A file put there is pruned, a wheel taken out is linked again, a file renamed over a wheel (another inode
    under its name) is replaced by the link again."""
    site = output / "site"
    build_site(output, site, base_url=BASE)
    folder = site / "whl/pt213cu130"
    (folder / "stray.html").write_text("not the index's")
    assert build_site(output, site, base_url=BASE).deleted == ("whl/pt213cu130/stray.html",)
    wheel = next((output / "dist").glob("*pt213cu130*"))
    (folder / wheel.name).unlink()
    assert build_site(output, site, base_url=BASE).written == (f"whl/pt213cu130/{wheel.name}",)
    other = folder / "other.whl"
    other.write_bytes(b"x" * wheel.stat().st_size)
    os.replace(other, folder / wheel.name)  # another inode under the wheel's name
    assert build_site(output, site, base_url=BASE).written == (f"whl/pt213cu130/{wheel.name}",)
    assert os.path.samefile(wheel, folder / wheel.name)


def test_a_manifest_changed_behind_the_index_is_read_as_it_is(output: Path) -> None:
    """Records taken out of the manifest are written back by the next run; a damaged manifest is refused."""
    site = output / "site"
    build_site(output, site, base_url=BASE)
    marker = site / SITE_MARKER
    complete = {path: record.sha256 for path, record in load_manifest(site).items()}
    document = json.loads(marker.read_text())
    marker.write_text(json.dumps({**document, "files": {}}))
    build_site(output, site, base_url=BASE)
    assert {path: record.sha256 for path, record in load_manifest(site).items()} == complete
    marker.write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        build_site(output, site, base_url=BASE)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: [raw[0], raw[2], raw[3]], id="an older record (sha256, size, mtime)"),
        pytest.param(lambda raw: [raw[0], *raw[1:4], float(raw[4])], id="a number written as a float"),
        pytest.param(lambda raw: [raw[0], *raw[1:4], 2**70], id="a number past 64 bits"),
        pytest.param(lambda raw: None, id="null for a record"),
        pytest.param(lambda raw: {"sha256": raw[0]}, id="an object for a record"),
    ],
)
def test_a_manifest_the_typed_decoder_refuses_is_read_record_by_record(output: Path, damage: Any) -> None:
    """A document not as the index writes it (msgspec's typed decode refuses it whole) is still read: each record
    that holds is kept, the damaged one is verified again, and the next run writes it back. Each document here also
    lacks its line end (json.dumps writes none), so the next run writes the file whole rather than append to it."""
    site = output / "site"
    build_site(output, site, base_url=BASE)
    marker = site / SITE_MARKER
    complete = {path: record.sha256 for path, record in load_manifest(site).items()}
    document = json.loads(marker.read_text())
    damaged = min(document["files"])
    document["files"][damaged] = damage(document["files"][damaged])
    marker.write_text(json.dumps(document))
    assert load_manifest(site).keys() - {damaged} == complete.keys() - {damaged}  # the others read as they are
    build_site(output, site, base_url=BASE)
    assert {path: record.sha256 for path, record in load_manifest(site).items()} == complete
    assert load_manifest(site)[damaged].identity == FileIdentity.of((site / damaged).stat())


def test_one_new_wheel_appends_a_line_of_changes_to_the_manifest(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "_CHANGES_FRACTION", 1)  # five wheels: a change is a good part of the file
    site = output / "site"
    build_site(output, site, base_url=BASE)
    before = (site / SITE_MARKER).read_bytes()
    new = make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    build_site(output, site, base_url=BASE)
    after = (site / SITE_MARKER).read_bytes()
    assert after.startswith(before) and after.count(b"\n") == 2  # the document as it was, then one line
    change = json.loads(after[len(before) :])
    assert "wheels.json" in change["files"]
    # the new wheel's block, written whole: the label's wheels, each with its .metadata; the other label's block
    # is left as it was (the others written are the blocks of the page groups it moved: its variant's pages, ...)
    assert [key for key in change["blocks"] if key.startswith("wheels:")] == ["wheels:pt213cu130"]
    block_paths = change["blocks"]["wheels:pt213cu130"][2].keys()
    assert f"whl/pt213cu130/{new.name}" in block_paths
    assert all(path.startswith("whl/pt213cu130/") for path in block_paths)
    assert change["files"].keys() | block_paths < load_manifest(site).keys()
    assert _stated_wrongly(site) == []


def test_a_manifest_line_torn_by_a_kill_is_left_out_and_the_next_run_writes_the_manifest_whole(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed while appending leaves part of a line: a reader ignores it (the records in it are lost, so their
    files are verified again) and the next write rewrites the file whole rather than append after it."""
    monkeypatch.setattr(records_module, "_CHANGES_FRACTION", 1)
    site = output / "site"
    build_site(output, site, base_url=BASE)
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    build_site(output, site, base_url=BASE)
    marker = site / SITE_MARKER
    marker.write_bytes(marker.read_bytes()[:-40])  # as a kill midway through the append would leave it
    records = load_manifest(site)
    assert len(records) < len(_site_files(site))  # the torn line's records are not taken
    make_wheel(output / "dist", WheelSpec(label="pt212cu126", python="cp312"))
    build_site(output, site, base_url=BASE)
    assert marker.read_bytes().count(b"\n") == 1  # written whole
    assert _stated_wrongly(site) == []


def test_change_lines_past_their_share_of_the_manifest_have_it_written_whole(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = output / "site"
    build_site(output, site, base_url=BASE)
    monkeypatch.setattr(records_module, "_CHANGES_FRACTION", 10**9)  # no room for any line
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    build_site(output, site, base_url=BASE)
    assert (site / SITE_MARKER).read_bytes().count(b"\n") == 1
    assert _stated_wrongly(site) == []


def test_one_new_wheel_hashes_one_file_and_rewrites_only_the_pages_that_list_it(output: Path) -> None:
    build_site(output, output / "site", base_url=BASE)
    before = _snapshot(output / "site")
    new = make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp312"))
    report = build_site(output, output / "site", base_url=BASE)
    assert (report.stats.hashed, report.stats.cached) == (1, len(SPECS))
    expected = {
        f"whl/pt213cu130/{new.name}",
        f"whl/pt213cu130/{new.name}.metadata",
        "whl/pt213cu130.html",
        "whl/pt213cu130/simple/causal-conv1d/index.html",
        "whl/pt213cu130/json/causal-conv1d/index.json",
        "simple/causal-conv1d/index.html",
        "json/causal-conv1d/index.json",
        "select/pt213cu130-cp312.html",  # the setup page of the new wheel
        "wheels/causal-conv1d/1.7.0.json",  # its release's wheels
        "wheels.json",  # the releases' wheel counts
        "index.html",
    }
    assert set(report.written) == expected
    after = _snapshot(output / "site")
    changed = {path for path in after if before.get(path) != after[path]}
    assert changed == expected | {".wheelwright-site.json"}


def test_wheels_the_ledger_built_are_not_hashed_again(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger(output / "ledger.sqlite") as ledger:
        for wheel in (output / "dist").iterdir():
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            identity = str(FileIdentity.of(wheel.stat()))
            ledger.put(
                _entry(
                    wheel.name,
                    status="built",
                    wheel=wheel.name,
                    wheel_sha256=digest,
                    wheel_size=wheel.stat().st_size,
                    wheel_identity=identity,
                )
            )

    def refuse(file: object) -> str:
        raise AssertionError(f"{file} was hashed although the ledger knows it")

    monkeypatch.setattr(catalog_module, "sha256_stream", refuse)
    report = build_site(output, output / "site", base_url=BASE)
    assert (report.stats.from_ledger, report.stats.hashed) == (len(SPECS), 0)


def test_a_ledger_hash_is_not_trusted_on_size_alone(output: Path) -> None:
    """A wheel replaced by other bytes of the same size after the build: the ledger's digest no longer applies."""
    wheel = min((output / "dist").iterdir())
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(
            _entry(
                wheel.name,
                status="built",
                wheel=wheel.name,
                wheel_sha256="0" * 64,
                wheel_size=wheel.stat().st_size,
                wheel_identity=str(FileIdentity.of(wheel.stat())),
            )
        )
    data = bytearray(wheel.read_bytes())
    data[-30] ^= 1  # same size, other bytes (the zip's comment area is not checked by the index)
    mtime = wheel.stat().st_mtime_ns
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(mtime, mtime))  # even with the old mtime restored
    report = build_site(output, output / "site", base_url=BASE)
    assert report.stats.from_ledger == 0
    pages = [path.read_text() for path in (output / "site").rglob("*.html")]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert not any("0" * 64 in page for page in pages) and any(digest in page for page in pages)


def test_a_rebuilt_wheel_with_the_same_name_is_hashed_again(output: Path) -> None:
    build_site(output, output / "site", base_url=BASE)
    replaced = make_wheel(output / "dist", WheelSpec(label="pt212cu126", python="cp311", salt="rebuilt"))
    report = build_site(output, output / "site", base_url=BASE)
    assert report.stats.hashed == 1
    digest = hashlib.sha256(replaced.read_bytes()).hexdigest()
    assert f"#sha256={digest}" in (output / "site/whl/pt212cu126.html").read_text()
    assert os.path.samefile(replaced, output / "site/whl/pt212cu126" / replaced.name)


def test_a_state_row_is_used_only_while_its_file_keeps_the_identity_it_records(output: Path) -> None:
    """A wheel rebuilt under the same name (another inode) is judged again, whoever wrote the state's row."""
    dist, ledger = output / "dist", output / "ledger.sqlite"
    catalog_module.scan(dist, ledger)
    assert catalog_module.scan(dist, ledger).stats.cached == len(SPECS)
    replaced = make_wheel(dist, WheelSpec(label="pt212cu126", python="cp311", salt="rebuilt"))
    again = catalog_module.scan(dist, ledger)
    assert (again.stats.hashed, again.stats.cached) == (1, len(SPECS) - 1)
    digests = {wheel.filename: wheel.sha256 for wheel in again.wheels}
    assert digests[replaced.name] == hashlib.sha256(replaced.read_bytes()).hexdigest()


def test_an_index_state_deleted_or_damaged_costs_a_cold_scan_and_is_made_again(output: Path) -> None:
    dist, ledger = output / "dist", output / "ledger.sqlite"
    catalog_module.scan(dist, ledger)
    (output / STATE_FILE).unlink()
    assert catalog_module.scan(dist, ledger).stats.hashed == len(SPECS)  # no rows: hashed and written again
    assert catalog_module.scan(dist, ledger).stats.cached == len(SPECS)
    (output / STATE_FILE).write_bytes(b"not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (output / f"{STATE_FILE}{suffix}").unlink(missing_ok=True)
    assert catalog_module.scan(dist, ledger).stats.hashed == len(SPECS)
    assert catalog_module.scan(dist, ledger).stats.cached == len(SPECS)


# A release's rows in the state (one MessagePack value), damaged: they are left out, their files checked again.
DAMAGED_ROWS = [
    ("not-messagepack", lambda value: b"\xc1" * 10),
    ("truncated", lambda value: value[: len(value) // 2]),
    ("a-length-past-the-end", lambda value: b"\xdd\xff\xff\xff\xff"),
    ("text-not-a-blob", lambda value: value.hex()),
    ("a-field-missing", lambda value: msgspec.msgpack.encode([row[:-1] for row in msgspec.msgpack.decode(value)])),
    ("a-size-as-text", lambda value: msgspec.msgpack.encode(
        [[*row[:2], str(row[2]), *row[3:]] for row in msgspec.msgpack.decode(value)])),
    ("a-field-too-many", lambda value: msgspec.msgpack.encode([[*row, 1] for row in msgspec.msgpack.decode(value)])),
    ("a-map-not-rows", lambda value: msgspec.msgpack.encode({"rows": msgspec.msgpack.decode(value)})),
    ("deeply-nested", lambda value: b"\x91" * 100_000),
]


@pytest.mark.parametrize("damage", [d[1] for d in DAMAGED_ROWS], ids=[d[0] for d in DAMAGED_ROWS])
def test_a_release_s_rows_damaged_in_the_state_cost_only_that_release_s_files_a_read(
    output: Path, damage: Callable[[bytes], bytes | str]
) -> None:
    dist, ledger = output / "dist", output / "ledger.sqlite"
    catalog_module.scan(dist, ledger)
    with sqlite3.connect(output / STATE_FILE) as db:
        (value,) = db.execute("SELECT rows FROM wheels WHERE release = 'causal_conv1d-1.7.0'").fetchone()
        db.execute("UPDATE wheels SET rows = ? WHERE release = 'causal_conv1d-1.7.0'", (damage(value),))
    again = catalog_module.scan(dist, ledger)
    of_release = sum(spec.project == "causal-conv1d" and spec.version == "1.7.0" for spec in SPECS)
    assert 0 < of_release < len(SPECS)
    assert (again.stats.hashed, again.stats.cached) == (of_release, len(SPECS) - of_release)
    assert [wheel.filename for wheel in again.wheels] == sorted(path.name for path in dist.iterdir())
    assert catalog_module.scan(dist, ledger).stats.cached == len(SPECS)  # written again whole


def test_a_wheel_touched_but_not_changed_keeps_its_upload_time(output: Path) -> None:
    """Its identity moved, so it is hashed again; the same bytes keep the time they were first indexed at."""
    dist, ledger = output / "dist", output / "ledger.sqlite"
    before = {w.filename: w.upload_time for w in catalog_module.scan(dist, ledger).wheels}
    wheel = next(dist.glob("*pt212cu126*"))
    os.utime(wheel, ns=(wheel.stat().st_atime_ns, wheel.stat().st_mtime_ns + 10**9))
    catalog = catalog_module.scan(dist, ledger)
    assert catalog.stats.hashed == 1
    assert {w.filename: w.upload_time for w in catalog.wheels} == before


def test_a_rescan_opens_only_the_files_whose_identity_moved(output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist, ledger = output / "dist", output / "ledger.sqlite"
    catalog_module.scan(dist, ledger)
    opened: list[str] = []
    real = catalog_module.open_regular
    monkeypatch.setattr(catalog_module, "open_regular", lambda path: opened.append(Path(path).name) or real(path))
    added = make_wheel(dist, WheelSpec(version="1.8.0", label="pt214cu130"))
    rewritten = next(dist.glob("*pt212cu126*"))
    status = rewritten.stat()
    rewritten.write_bytes(rewritten.read_bytes()[:-4] + b"\0\0\0\0")  # same size, then the same mtime
    os.utime(rewritten, ns=(status.st_atime_ns, status.st_mtime_ns))
    catalog = catalog_module.scan(dist, ledger)
    assert sorted(opened) == sorted([added.name, rewritten.name])
    assert catalog.stats.hashed == 2
    digests = {wheel.filename: wheel.sha256 for wheel in catalog.wheels}
    assert digests[rewritten.name] == hashlib.sha256(rewritten.read_bytes()).hexdigest()


def test_removed_wheels_and_emptied_variants_are_pruned(output: Path) -> None:
    build_site(output, output / "site", base_url=BASE)
    (output / "site" / "CNAME").write_text("wheels.example.org\n")  # not the index's: left alone
    for wheel in (output / "dist").glob("*pt212cu126*"):
        wheel.unlink()
    report = build_site(output, output / "site", base_url=BASE)
    assert "whl/pt212cu126.html" in report.deleted
    assert not (output / "site/whl/pt212cu126").exists()
    assert (output / "site/CNAME").exists()
    assert "pt212cu126" not in (output / "site/simple/causal-conv1d/index.html").read_text()


def test_hostile_files_in_dist_are_reported_and_never_reach_the_site(output: Path) -> None:
    make_wheel(output / "dist", WheelSpec(filename="x<script>-1.0+pt214cu130-cp311-cp311-linux_x86_64.whl"))
    make_wheel(output / "dist", WheelSpec(metadata_name="../../evil", label="pt211cu128"))
    report = build_site(output, output / "site", base_url=BASE)
    assert len(report.rejected) == 2
    text = "".join(
        p.read_text()
        for p in (output / "site").rglob("*")
        if p.is_file() and not p.name.endswith((".whl", ".metadata"))
    )
    assert "x<script>" not in text and "x&lt;script" not in text
    assert "evil" not in text and "pt211cu128" not in text


def test_refuses_to_take_over_a_folder_it_did_not_create(output: Path) -> None:
    (output / "mine").mkdir()
    (output / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a wheelwright site"):
        build_site(output, output / "mine", base_url=BASE)
    assert (output / "mine" / "notes.txt").read_text() == "keep me"


def test_failed_builds_from_the_ledger_reach_the_landing_page(output: Path) -> None:
    with Ledger(output / "ledger.sqlite") as ledger:
        ledger.put(
            _entry(
                "causal-conv1d-1.7.0+pt214cu130-cp313-x86_64",
                status="failed",
                python="3.13",
                reason="nvcc: <b>no</b> sm_120",
            )
        )
    build_site(output, output / "site", base_url=BASE)
    landing = (output / "site/index.html").read_text()
    assert "nvcc: &lt;b&gt;no&lt;/b&gt; sm_120" in landing
    assert "<b>no</b>" not in landing


def _entry(job_id: str, *, status: str, python: str = "3.11", **fields: object) -> LedgerEntry:
    return ledger_entry(job_id=job_id, python=python, status=status,
                        phase="compile" if status == "failed" else "verify", **fields)


def test_gpu_archs_come_from_the_verify_report_and_malformed_ones_are_left_out(output: Path) -> None:
    wheels = sorted((output / "dist").iterdir())
    reports = [
        json.dumps({"sass": ["7.5", "9.0"], "ptx": ["9.0"]}),
        json.dumps({"sass": ['9.0"><script>'], "ptx": []}),  # not an arch: the wheel shows none recorded
        "not json",
    ]
    with Ledger(output / "ledger.sqlite") as ledger:
        for wheel, report in zip(wheels, reports):
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            size = wheel.stat().st_size
            ledger.put(
                _entry(
                    wheel.name, status="built", wheel=wheel.name, wheel_sha256=digest, wheel_size=size, report=report
                )
            )
    build_site(output, output / "site", base_url=BASE)
    archs = {entry["filename"]: entry["archs"] for entry in _wheels_json(output / "site")}
    assert archs[wheels[0].name] == {"sass": ["7.5", "9.0"], "ptx": ["9.0"]}
    assert archs[wheels[1].name] is None and archs[wheels[2].name] is None
    pages = [(output / "site" / "index.html").read_text(), *(p.read_text() for p in (output / "site/select").iterdir())]
    assert not any("&lt;script&gt;" in page or '9.0"><script>' in page for page in pages)


def _wheels_json(site: Path) -> list[dict]:
    """Every wheel entry of wheels.json, each release's read from the file its URL names."""
    releases = json.loads((site / "wheels.json").read_text())["releases"]
    paths = [unquote(release["url"].removeprefix(BASE + "/")) for release in releases]
    return [entry for path in paths for entry in json.loads((site / path).read_text())["wheels"]]


def _stated_wrongly(site: Path) -> list[str]:
    """The site's files the manifest does not record with their digest and identity, and its records of no file."""
    records, files = load_manifest(site), _site_files(site)
    wrong = sorted(records.keys() ^ files.keys())
    for path in sorted(records.keys() & files.keys()):
        record, data = records[path], (site / path).read_bytes()
        if record.sha256 != hashlib.sha256(data).hexdigest() or record.identity != FileIdentity.of(files[path]):
            wrong.append(path)
    return wrong


def _site_files(site: Path) -> dict[str, os.stat_result]:
    return {p.relative_to(site).as_posix(): p.lstat() for p in site.rglob("*") if p.is_file() and p.name != SITE_MARKER}


@pytest.mark.parametrize(
    ("change", "listed"),
    [
        ("a file added", False),  # the folder's identity moved, its count of folders did not: the record stands
        ("a folder added", True),
        ("a folder renamed", True),  # same count, but a recorded one is gone
        ("a folder replaced by a file", True),
    ],
)
def test_a_folder_is_listed_again_only_when_its_folders_may_have_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, listed: bool
) -> None:
    import os

    from index_site import quiet

    top = tmp_path / "variant"
    for name in ("a", "b"):
        (top / name).mkdir(parents=True)
    before = os.lstat(top)
    left = {"variant": ([before.st_ino, before.st_mtime_ns, before.st_ctime_ns], ["a", "b"])}
    if change == "a file added":
        (top / "new.whl").write_bytes(b"x")
    elif change == "a folder added":
        (top / "c").mkdir()
    elif change == "a folder renamed":
        (top / "b").rename(top / "c")
    else:
        (top / "b").rmdir()
        (top / "b").write_bytes(b"x")
    now = os.lstat(top)
    found: dict[str, list[int] | None] = {"variant": [now.st_ino, now.st_mtime_ns, now.st_ctime_ns]}
    listed = listed or now.st_nlink == 1  # a filesystem that counts no folders in a folder's links: always listed
    scanned: list[object] = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: scanned.append(path) or scandir(path))
    stats = quiet._subfolder_stats(str(top), "variant", now.st_nlink, found, left)
    assert bool(scanned) == listed
    assert sorted(stats) == sorted(p.name for p in top.iterdir() if p.is_dir())
