"""The fetch stage's own logic, with the network replaced: cache hits, hash checks, atomic writes, PEP 691 parsing,
and unpacking."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.error
from email.message import Message
from pathlib import Path

import pytest

from builder.core.errors import FetchError
from builder.plan.accelerator import Accelerator
from builder.plan.job import Job, Recipe, Sdist
from builder.steps import fetch

PAYLOAD = b"not really a tarball, but bytes with a known hash " * 5000
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
INDEX = "http://index.invalid/simple/"


class Response(io.BytesIO):
    """What urlopen returns, as far as fetch uses it."""

    def __init__(self, body: bytes, content_type: str = "application/octet-stream", fail_after: int | None = None):
        super().__init__(body)
        self.headers = Message()
        self.headers["Content-Type"] = content_type
        self.fail_after = fail_after

    def read(self, size: int = -1) -> bytes:
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError("connection reset mid-stream")
        return super().read(size)


def serve(monkeypatch: pytest.MonkeyPatch, pages: dict[str, Response]) -> list[tuple[str, str | None]]:
    """Replace the network with ``pages``; returns the log of requested (url, accept)."""
    requests: list[tuple[str, str | None]] = []

    def open_url(url: str, *, accept: str | None = None, **limits: object) -> Response:
        requests.append((url, accept))
        if url not in pages:
            raise AssertionError(f"unexpected request for {url}")
        return pages[url]

    monkeypatch.setattr(fetch, "open_url", open_url)
    return requests


def project_page(files: list[dict]) -> Response:
    body = json.dumps({"meta": {"api-version": "1.1"}, "name": "causal-conv1d", "files": files}).encode()
    return Response(body, content_type=fetch.PEP691_JSON)


def make_job(sdist: Sdist) -> Job:
    return Job(
        package="causal-conv1d", version="1.7.0", sdist=sdist, recipe=Recipe(), torch="2.14.1",
        accelerator=Accelerator.parse("cu130"), python="3.11", cxx11_abi=True, archs=("9.0",),
        manylinux="manylinux_2_28",
    )


SDIST = Sdist(filename="causal_conv1d-1.7.0.tar.gz", sha256=PAYLOAD_SHA, url="http://files.invalid/c.tar.gz")


def test_cache_hit_does_no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / SDIST.filename).write_bytes(PAYLOAD)
    requests = serve(monkeypatch, {})
    assert fetch.fetch_sdist(SDIST, "causal-conv1d", cache_dir=tmp_path) == tmp_path / SDIST.filename
    assert requests == []


def test_download_lands_in_cache_then_hits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    requests = serve(monkeypatch, {SDIST.url: Response(PAYLOAD)})
    path = fetch.fetch_sdist(make_job(SDIST), cache_dir=tmp_path)
    assert path.read_bytes() == PAYLOAD
    fetch.fetch_sdist(make_job(SDIST), cache_dir=tmp_path)
    assert len(requests) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [SDIST.filename]


def test_hash_mismatch_names_job_and_both_hashes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wrong = Sdist(filename=SDIST.filename, sha256="0" * 64, url=SDIST.url)
    serve(monkeypatch, {SDIST.url: Response(PAYLOAD)})
    with pytest.raises(FetchError) as caught:
        fetch.fetch_sdist(make_job(wrong), cache_dir=tmp_path)
    message = str(caught.value)
    assert "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64" in message
    assert f"sha256 {PAYLOAD_SHA}" in message and f"expected {'0' * 64}" in message
    assert list(tmp_path.iterdir()) == []  # neither the bad file nor a temporary one stays


def test_interrupted_download_leaves_no_partial_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    serve(monkeypatch, {SDIST.url: Response(PAYLOAD, fail_after=len(PAYLOAD) // 2)})
    with pytest.raises(FetchError, match="causal-conv1d: download of .* failed: connection reset"):
        fetch.fetch_sdist(SDIST, "causal-conv1d", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_stale_cache_entry_survives_a_failed_refetch_and_is_replaced_by_a_good_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cached = tmp_path / SDIST.filename
    cached.write_bytes(b"stale")
    serve(monkeypatch, {SDIST.url: Response(PAYLOAD, fail_after=1000)})
    with pytest.raises(FetchError):
        fetch.fetch_sdist(SDIST, "causal-conv1d", cache_dir=tmp_path)
    assert cached.read_bytes() == b"stale"  # the rename never happened
    serve(monkeypatch, {SDIST.url: Response(PAYLOAD)})
    assert fetch.fetch_sdist(SDIST, "causal-conv1d", cache_dir=tmp_path).read_bytes() == PAYLOAD


def test_cache_location_parameter_then_env_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "env"))
    assert fetch.cache_dir_for_sdists(tmp_path / "param") == tmp_path / "param"
    assert fetch.cache_dir_for_sdists() == tmp_path / "env" / "sdists"
    monkeypatch.delenv("WHEELWRIGHT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fetch.cache_dir_for_sdists() == tmp_path / "home" / ".cache" / "wheelwright" / "sdists"


def test_pep691_lookup_joins_relative_url_and_asks_for_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WHEELWRIGHT_INDEX_URL", INDEX.rstrip("/"))  # a missing trailing slash is tolerated
    unpinned = Sdist(filename=SDIST.filename, sha256=PAYLOAD_SHA)
    page = project_page([
        {"filename": "causal_conv1d-1.6.1.tar.gz", "url": "../../files/old.tar.gz", "hashes": {}},
        {"filename": SDIST.filename, "url": "../../files/c.tar.gz", "hashes": {"sha256": PAYLOAD_SHA}},
    ])
    requests = serve(
        monkeypatch, {INDEX + "causal-conv1d/": page, "http://index.invalid/files/c.tar.gz": Response(PAYLOAD)}
    )
    fetch.fetch_sdist(unpinned, "Causal_Conv1D", cache_dir=tmp_path)
    assert requests[0] == (INDEX + "causal-conv1d/", fetch.PEP691_JSON)


def test_pep691_registry_hash_disagreeing_with_pin_fails_before_download(monkeypatch: pytest.MonkeyPatch) -> None:
    page = project_page([{"filename": SDIST.filename, "url": "x.tar.gz", "hashes": {"sha256": "f" * 64}}])
    serve(monkeypatch, {INDEX + "causal-conv1d/": page})
    with pytest.raises(
        FetchError, match=f"lists causal_conv1d-1.7.0.tar.gz with sha256 {'f' * 64}.*pins {PAYLOAD_SHA}"
    ):
        fetch.find_file_url(SDIST, "causal-conv1d", index=INDEX)


def test_pep691_missing_file_lists_what_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    page = project_page([{"filename": "causal_conv1d-1.6.1.tar.gz", "url": "a", "hashes": {}},
                         {"filename": "causal_conv1d-1.6.1-cp311-cp311-linux_x86_64.whl", "url": "b", "hashes": {}}])
    serve(monkeypatch, {INDEX + "causal-conv1d/": page})
    with pytest.raises(FetchError, match=r"not listed on .*sdists there: causal_conv1d-1.6.1.tar.gz\)"):
        fetch.find_file_url(SDIST, "causal-conv1d", index=INDEX)


def test_pep691_html_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    serve(monkeypatch, {INDEX + "causal-conv1d/": Response(b"<html></html>", content_type="text/html")})
    with pytest.raises(FetchError, match="answered text/html, not the PEP 691 JSON"):
        fetch.find_file_url(SDIST, "causal-conv1d", index=INDEX)


def make_sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_unpack_returns_root_and_gives_a_pristine_tree_each_time(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/setup.py": b"original", "pkg-1.0/PKG-INFO": b""})
    root = fetch.unpack_sdist(sdist, tmp_path / "src")
    assert root == tmp_path / "src" / "pkg-1.0"
    (root / "setup.py").write_text("patched")
    (root / "leftover").write_text("x")
    again = fetch.unpack_sdist(sdist, tmp_path / "src")
    assert (again / "setup.py").read_text() == "original" and not (again / "leftover").exists()
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["pkg-1.0"]  # no staging directory left


def test_unpack_refuses_members_outside_the_destination(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path / "evil.tar.gz", {"pkg-1.0/setup.py": b"", "pkg-1.0/../../escaped": b"x"})
    with pytest.raises(FetchError, match="evil.tar.gz: cannot unpack"):
        fetch.unpack_sdist(sdist, tmp_path / "src")
    assert not (tmp_path / "escaped").exists()


def _hostile_member(kind: str) -> tarfile.TarInfo:
    if kind == "absolute":
        return tarfile.TarInfo("/tmp/wheelwright-escaped")
    if kind == "parent":
        return tarfile.TarInfo("pkg-1.0/../../escaped")
    info = tarfile.TarInfo("pkg-1.0/link")
    info.type, info.linkname = {
        "symlink out": (tarfile.SYMTYPE, "/etc/passwd"),
        "hard link out": (tarfile.LNKTYPE, "/etc/passwd"),
        "device": (tarfile.CHRTYPE, ""),
        "fifo": (tarfile.FIFOTYPE, ""),
    }[kind]
    return info


@pytest.fixture(params=["data filter", "plain members"])
def extraction(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of unpacking: tarfile's 'data' filter, and ours for a Python without it (a builder image's
    3.11.2 from Debian bookworm's source)."""
    if request.param == "plain members":
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


@pytest.mark.parametrize("kind", ["absolute", "parent", "symlink out", "hard link out", "device", "fifo"])
def test_unpack_refuses_hostile_members_either_way(kind: str, extraction: str, tmp_path: Path) -> None:
    sdist = tmp_path / "evil.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.addfile(tarfile.TarInfo("pkg-1.0/PKG-INFO"), io.BytesIO(b""))
        member = _hostile_member(kind)
        archive.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    # refused either way (the data filter makes an absolute name relative: then two top-level entries)
    with pytest.raises(FetchError, match="evil.tar.gz: (cannot unpack|expected one top-level directory)"):
        fetch.unpack_sdist(sdist, tmp_path / "src")
    assert not Path("/tmp/wheelwright-escaped").exists() and not (tmp_path / "escaped").exists()
    assert not (tmp_path / "src" / "pkg-1.0").exists()


def test_plain_members_unpack_files_with_safe_modes(extraction: str, tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, mode in (("pkg-1.0/setup.py", 0o6777), ("pkg-1.0/build.sh", 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = 2, mode
            archive.addfile(info, io.BytesIO(b"ok"))
    root = fetch.unpack_sdist(sdist, tmp_path / "src")
    assert (root / "setup.py").read_bytes() == b"ok"
    assert (root / "setup.py").stat().st_mode & 0o7022 == 0  # no setuid/setgid/sticky, no group/other write
    assert (root / "build.sh").stat().st_mode & 0o100


def test_unpack_wants_one_top_level_directory(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path / "flat.tar.gz", {"setup.py": b"", "PKG-INFO": b""})
    with pytest.raises(FetchError, match=r"expected one top-level directory, found \['PKG-INFO', 'setup.py'\]"):
        fetch.unpack_sdist(sdist, tmp_path / "src")


# -- index pages of either kind (the torch index: PyTorch's serves PEP 503 HTML only) ---------------------------------

PEP503_PAGE = b"""<!DOCTYPE html><html><body><h1>Links for torch</h1>
<a href="/whl/cu130/torch-2.14.1%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=""" + b"ab" * 32 + b"""">
torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href="https://files.test/torch-2.14.1%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl"
   data-requires-python="&gt;=3.10">
torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl</a>
</body></html>"""


def test_a_pep503_page_lists_each_anchor_with_its_absolute_url_and_fragment_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = "https://mirror.test/whl/cu130/torch/"
    serve(monkeypatch, {page: Response(PEP503_PAGE, content_type="text/html")})
    files = fetch.index_files(page, "job")
    assert files == [
        {"filename": "torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
         "url": "https://mirror.test/whl/cu130/torch-2.14.1%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl",
         "hashes": {"sha256": "ab" * 32}},
        {"filename": "torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
         "url": "https://files.test/torch-2.14.1%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl", "hashes": {}},
    ]


def test_a_pep691_page_gives_the_same_entries_with_absolute_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    page = "https://mirror.test/simple/torch/"
    entry = {"filename": "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "../../files/t.whl",
             "hashes": {"sha256": "cd" * 32}}
    serve(monkeypatch, {page: project_page([entry])})
    assert fetch.index_files(page, "job") == [{**entry, "url": "https://mirror.test/files/t.whl"}]


def test_a_page_the_index_does_not_have_lists_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    page = "https://mirror.test/whl/cu999/torch/"

    def open_url(url: str, *, accept: str | None = None, **limits: object) -> Response:
        raise urllib.error.HTTPError(url, 404, "Not Found", Message(), None)

    monkeypatch.setattr(fetch, "open_url", open_url)
    assert fetch.index_files(page, "job") == []


def test_an_index_that_does_not_answer_is_told_apart_from_one_that_errs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(url: str, *, accept: str | None = None, **limits: object) -> Response:
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    def broken(url: str, *, accept: str | None = None, **limits: object) -> Response:
        raise urllib.error.HTTPError(url, 503, "Service Unavailable", Message(), None)

    monkeypatch.setattr(fetch, "open_url", refused)
    with pytest.raises(fetch.IndexUnreachable, match="Connection refused"):
        fetch.index_files("https://down.test/torch/", "job")
    monkeypatch.setattr(fetch, "open_url", broken)
    with pytest.raises(FetchError, match="503") as raised:
        fetch.index_files("https://up.test/torch/", "job")
    assert not isinstance(raised.value, fetch.IndexUnreachable)


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"{}", "application/octet-stream", "not a PEP 503 or PEP 691 project page"),
        (b"{\"files\": 3}", fetch.PEP691_JSON, "'files' is not a list of tables"),
        (b"not json", fetch.PEP691_JSON, "is not a PEP 691 project page"),
        (b"x" * (fetch.PAGE_CAP_BYTES + 1), "text/html", "larger than 64 MiB"),
    ],
)
def test_a_page_that_is_no_index_page_is_one_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, body: bytes, content_type: str, message: str
) -> None:
    page = "https://mirror.test/whl/cu130/torch/"
    serve(monkeypatch, {page: Response(body, content_type=content_type)})
    with pytest.raises(FetchError, match=message):
        fetch.index_files(page, "job")
