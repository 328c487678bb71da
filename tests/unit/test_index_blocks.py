"""The manifest's blocks (index_site/blocks.py): each label's wheels and each label's twins recorded whole, with the
digest of the files they were placed from. A run takes a block as it is, undecoded, only while that digest holds and
its folder is settled; anything else that moved makes the block again from its files, held to their records one by
one, and the site ends as a cold index of the same folder, every file recorded with its digest and identity."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.hashing import FileIdentity
from builder.steps.twins import VariantTwins
from index_site import blocks as blocks_module
from index_site.catalog import scan
from index_site.layout import SITE_MARKER
from index_site.records import Block, load_manifest, recorded_manifest
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.index_checks import site_files
from tests.jobs import local_job
from tests.sitecheck import check_site

BASE = "https://wheels.example.org"


@pytest.fixture
def output(tmp_path: Path) -> Path:
    job = local_job()  # pt214cu130, with provenance: it has a twin
    (tmp_path / "dist").mkdir()
    with_provenance(job_wheel(tmp_path / "dist", job, {"causal_conv1d/__init__.py": b"x = 1\n"}), job)
    for python in ("cp311", "cp312"):
        make_wheel(tmp_path / "dist", WheelSpec(label="pt213cu130", python=python))
    index(tmp_path)
    return tmp_path


def index(output: Path, site: str = "site") -> None:
    build_site(output, output / site, base_url=BASE, twins=VariantTwins())


def test_each_labels_wheels_and_twins_are_one_block(output: Path) -> None:
    blocks = recorded_manifest(output / "site").blocks
    assert {key: block.count for key, block in blocks.items() if not key.startswith("group:")} == {
        "wheels:pt213cu130": 4,  # two wheels, each with its .metadata
        "wheels:pt214cu130": 2,
        "twins:pt214cu130": 5,  # the twin, its null, their .metadata and its wheelwright.json
    }
    assert _wrongly_recorded(output / "site") == []


def test_a_page_group_that_renders_its_pages_itself_is_one_block(output: Path) -> None:
    recorded = recorded_manifest(output / "site")
    for label in ("pt213cu130", "pt214cu130"):  # its find-links page, and its simple and JSON indexes
        digest, paths = recorded.groups[f"variant:{label}"]
        block = recorded.blocks[f"group:variant:{label}"]
        assert (block.digest, sorted(block.records())) == (digest, sorted(paths))
    assert "whl/pt213cu130.html" not in recorded.files
    # a project's joined pages, and the parts of the pages for people, are recorded page by page
    assert {"simple/causal-conv1d/index.html", "index.html", "select/pt214cu130-cp311.html"} <= recorded.files.keys()


def test_a_wheel_added_to_one_label_leaves_the_other_blocks_undecoded(
    output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = recorded_manifest(output / "site").blocks
    decoded: list[str] = []
    real = Block.records
    monkeypatch.setattr(Block, "records", lambda block: decoded.append(block.digest) or real(block))
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp310"))
    index(output)
    monkeypatch.undo()
    after = recorded_manifest(output / "site").blocks
    assert after["wheels:pt213cu130"].count == 6
    changed = {key for key in before if key not in after or after[key].digest != before[key].digest}
    assert {"wheels:pt213cu130", "group:variant:pt213cu130"} <= changed
    assert not changed & {"wheels:pt214cu130", "twins:pt214cu130", "group:variant:pt214cu130", "group:doctor"}
    # the blocks it changes, and only those; doctor.py's, at the site's root (no folder of the site's own identity
    # holds it), is held to its record file by file
    assert set(decoded) == {before[key].digest for key in {*changed, "group:doctor"}}
    _ends_as_a_cold_index(output)


def _touched(output: Path) -> None:
    """A source wheel's mtime set back as it was: its ctime moved all the same."""
    wheel = next((output / "dist").glob("*pt213cu130-cp311*"))
    status = wheel.stat()
    os.utime(wheel, ns=(status.st_atime_ns, status.st_mtime_ns))


def _rewritten(output: Path) -> None:
    """A source wheel written again with other bytes under its name."""
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp311", salt="other"))


def _damaged_manifest(damage: Callable[[list], object]) -> Callable[[Path], None]:
    def move(output: Path) -> None:
        marker = output / "site" / SITE_MARKER
        document = json.loads(marker.read_bytes().split(b"\n")[0])
        document["blocks"]["wheels:pt213cu130"] = damage(document["blocks"]["wheels:pt213cu130"])
        marker.write_text(json.dumps(document) + "\n")

    return move


def _forged_digest(output: Path) -> None:
    """A change line that gives a block of another label's digest: the manifest is no longer the one written."""
    marker = output / "site" / SITE_MARKER
    document = json.loads(marker.read_bytes().split(b"\n")[0])
    forged = [document["blocks"]["wheels:pt214cu130"][0], *document["blocks"]["wheels:pt213cu130"][1:]]
    with marker.open("a") as file:
        file.write(json.dumps({"files": {}, "groups": {}, "blocks": {"wheels:pt213cu130": forged}}) + "\n")


# (case, what moves): each leaves a block that must not be taken as it is
MOVES: list[tuple[str, Callable[[Path], object]]] = [
    ("source-touched", _touched),
    ("source-rewritten", _rewritten),
    ("source-removed", lambda out: next((out / "dist").glob("*pt213cu130-cp312*")).unlink()),
    ("label-removed", lambda out: [wheel.unlink() for wheel in (out / "dist").glob("*pt213cu130*")]),
    ("twin-removed", lambda out: next((out / "variant").glob("*.whl")).unlink()),
    ("stray-in-its-folder", lambda out: (out / "site/whl/pt213cu130/stray.whl").write_bytes(b"x")),
    ("metadata-removed", lambda out: next((out / "site/whl/pt213cu130").glob("*.metadata")).unlink()),
    ("block-count-wrong", _damaged_manifest(lambda block: [block[0], block[1] + 1, block[2]])),
    ("block-not-a-list", _damaged_manifest(lambda block: {"digest": block[0]})),
    ("block-entries-not-an-object", _damaged_manifest(lambda block: [block[0], block[1], [1, 2]])),
    ("block-entry-wrong-types", _damaged_manifest(lambda block: [block[0], block[1], dict.fromkeys(block[2], 1)])),
    ("block-digest-forged", _forged_digest),
]


@pytest.mark.parametrize("move", [m[1] for m in MOVES], ids=[m[0] for m in MOVES])
def test_a_block_whose_sources_folder_or_record_moved_is_made_again(
    output: Path, move: Callable[[Path], object]
) -> None:
    move(output)
    index(output)
    _ends_as_a_cold_index(output)


def test_a_manifest_without_blocks_gets_them_on_the_next_run(output: Path) -> None:
    """An older manifest records every file outside any block: the next run that plans the site puts them in."""
    marker = output / "site" / SITE_MARKER
    files = {path: [record.sha256, *record.identity] for path, record in load_manifest(output / "site").items()}
    groups = {key: [digest, list(paths)] for key, (digest, paths) in recorded_manifest(output / "site").groups.items()}
    marker.write_text(json.dumps({"generator": "wheelwright", "base_url": BASE, "files": files, "groups": groups}))
    make_wheel(output / "dist", WheelSpec(label="pt213cu130", python="cp310"))
    index(output)
    placed = {key for key in recorded_manifest(output / "site").blocks if not key.startswith("group:")}
    assert placed == {"wheels:pt213cu130", "wheels:pt214cu130", "twins:pt214cu130"}
    _ends_as_a_cold_index(output)


def _ends_as_a_cold_index(output: Path) -> None:
    site = output / "site"
    assert check_site(site) == []
    assert _wrongly_recorded(site) == []
    index(output, "cold")
    assert site_files(site) == site_files(output / "cold")


def _wrongly_recorded(site: Path) -> list[str]:
    """The site's files the manifest does not record with their digest and identity, and its records of no file."""
    records = load_manifest(site)
    files = {p.relative_to(site).as_posix(): p for p in site.rglob("*") if p.is_file() and p.name != SITE_MARKER}
    wrong = sorted(records.keys() ^ files.keys())
    for path in sorted(records.keys() & files.keys()):
        record = records[path]
        if record.sha256 != hashlib.sha256(files[path].read_bytes()).hexdigest():
            wrong.append(f"{path}: digest")
        elif record.identity != FileIdentity.of(files[path].lstat()):
            wrong.append(f"{path}: identity")
    return wrong




def test_a_wheel_without_an_identity_is_left_out_of_its_block_s_digest(output: Path) -> None:
    """A wheel not placed from a file the catalog checked has no identity: its block's digest is that of the others,
    and a label none of whose wheels has one makes no block."""
    catalog = scan(output / "dist", output / "ledger.sqlite")
    dropped = next(w for w in catalog.wheels if w.name.label == "pt213cu130")
    rest = [w for w in catalog.wheels if w is not dropped]
    identities = {name: identity for name, identity in catalog.identities.items() if name != dropped.filename}
    digests = blocks_module.expected(catalog.wheels, (), identities, "code")
    assert digests == blocks_module.expected(rest, (), catalog.identities, "code")
    assert digests["wheels:pt213cu130"] != blocks_module.expected(catalog.wheels, (), catalog.identities, "code")[
        "wheels:pt213cu130"
    ]
    of_label = {name: identity for name, identity in catalog.identities.items() if "+pt213cu130-" not in name}
    assert "wheels:pt213cu130" not in blocks_module.expected(catalog.wheels, (), of_label, "code")
