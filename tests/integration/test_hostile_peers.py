"""Slow, silent, flooding and garbled peers (tests/peers.py: real sockets on loopback) against every reader of the
network, and daemons and installers that hang (a fake `docker` on PATH, real pip and apt-get against a silent
index): each must end in one error naming the peer and the deadline or cap it passed, never a hang. The deadlines
are scaled down with WHEELWRIGHT_DEADLINE_SCALE so a case takes seconds; pytest-timeout bounds each case far above
its stated deadline (the assertion is on what happened, not on how fast). Also: `serve` under idle and slow
clients, and tools that print bytes that are not UTF-8."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from builder.core.errors import FetchError
from scripts.bench.wheels import WheelSpec, make_wheel
from tests import peers
from tests.integration.test_hostile import assert_one_error, wheelwright

pytestmark = pytest.mark.timeout(45)  # every case ends within ~10 s here; a hang is what fails it
ROOT = Path(__file__).resolve().parents[2]
SCALE = 0.03  # index pages: connect 0.3 s, idle 0.9 s, total 3.6 s; sdists: total 9 s
FAST = {"WHEELWRIGHT_DEADLINE_SCALE": str(SCALE)}
PORT = r"127\.0\.0\.1:\d+"


@pytest.fixture(autouse=True)
def scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHEELWRIGHT_DEADLINE_SCALE", str(SCALE))


@pytest.fixture
def peer_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of the case's misbehaving peer (``blackhole``: one that never completes a connection)."""
    behaviour = request.param
    if behaviour == "blackhole":
        with peers.blackhole() as url:
            yield url
        return
    with peers.peer(behaviour) as server:
        yield server.url


IDLE, TOTAL, CONNECT = r"no byte for [\d.]+ s \(idle deadline\)", r"not done within [\d.]+ s \(total deadline\)", (
    r"no connection within [\d.]+ s \(connect deadline\)"
)
PAGE_CAP = r"more than 64 MiB \(size cap\)"
NOT_HTTP = r"not an HTTP answer \(BadStatusLine: 'SSH-2\.0-OpenSSH_9\.2p1\\r\\n'\)"


def cases(cap: str, *names: str, announced: int = 0) -> list[object]:
    """One case a misbehaving peer, by name, with what its reader's error must say: ``cap`` is the reader's size cap
    (a flood passes it; a peer announcing ``announced`` bytes is refused for it before a byte is read)."""
    size = next(f"{announced >> shift}-{unit}" for unit, shift in (("tib", 40), ("gib", 30), ("b", 0))
                if announced % (1 << shift) == 0)
    peer = {
        "silent": (peers.silent, IDLE),
        "trickle-body": (peers.trickle, TOTAL),
        "trickle-head": (peers.trickle_head, TOTAL),
        "flood": (peers.flood, cap),
        f"announced-{size}": (peers.announced(announced), rf"{announced} bytes announced, {cap}"),
        "not-http": (peers.not_http, NOT_HTTP),
        "blackhole": ("blackhole", CONNECT),
    }
    return [pytest.param(*peer[name], id=name) for name in names]


# -- index pages through the real CLI: `upstream` reads the registry's PEP 691 page of each package -------------------

EVERY_PEER = ("silent", "trickle-body", "trickle-head", "flood", "not-http", "blackhole")
UPSTREAM = cases(PAGE_CAP, *EVERY_PEER, "announced-1-tib", announced=1 << 40)


@pytest.mark.parametrize(("peer_url", "pattern"), UPSTREAM, indirect=["peer_url"])
def test_upstream_stops_at_a_deadline_naming_the_index(tmp_path: Path, peer_url: str, pattern: str) -> None:
    run = wheelwright("upstream", "--matrix", ROOT / "matrix.yaml", "--index-url", f"{peer_url}/simple/",
                      cwd=tmp_path, env=FAST, timeout=40)
    assert_one_error(run, 5, rf"^ERROR \S+: cannot read http://{PORT}/simple/\S+/: {pattern}")


FACTS = cases(PAGE_CAP, "silent", "trickle-body", "flood", "not-http")


@pytest.mark.parametrize(("peer_url", "pattern"), FACTS, indirect=["peer_url"])
def test_facts_check_stops_at_a_deadline_naming_the_registry(tmp_path: Path, peer_url: str, pattern: str) -> None:
    env = {**FAST, "WHEELWRIGHT_INDEX_URL": f"{peer_url}/simple/"}
    run = wheelwright("facts", "check", cwd=tmp_path, env=env, timeout=40)
    assert_one_error(run, 5, rf"^ERROR facts check: cannot read the index page http://{PORT}/simple/torch/: {pattern}")


# -- sdists, torch index pages and wheels, doctor's lookups (each the real function, against the real peer) ----------

SDISTS = cases(r"more than 64 MiB \(size cap\)", *EVERY_PEER, "announced-1-gib", announced=1 << 30)


@pytest.mark.parametrize(("peer_url", "pattern"), SDISTS, indirect=["peer_url"])
def test_an_sdist_download_stops_at_a_deadline_or_cap(tmp_path: Path, peer_url: str, pattern: str) -> None:
    from builder.plan.job import Sdist
    from builder.steps.fetch import fetch_sdist

    sdist = Sdist(filename="toy-0.1.tar.gz", sha256="0" * 64, url=f"{peer_url}/files/toy-0.1.tar.gz")
    with pytest.raises(FetchError) as raised:
        fetch_sdist(sdist, "toy", cache_dir=tmp_path / "cache")
    assert re.fullmatch(rf"toy: download of http://{PORT}/files/toy-0\.1\.tar\.gz failed: {pattern}", str(raised.value))
    assert not any((tmp_path / "cache").iterdir())  # nothing half-written left behind


TORCH_PAGES = cases(PAGE_CAP, "silent", "trickle-body", "flood", "not-http")


@pytest.mark.parametrize(("peer_url", "pattern"), TORCH_PAGES, indirect=["peer_url"])
def test_a_torch_index_page_stops_at_a_deadline_or_cap(peer_url: str, pattern: str) -> None:
    from builder.steps.fetch import index_files

    page = rf"^job: cannot read the index page http://{PORT}/whl/cu130/torch/: {pattern}$"
    with pytest.raises(FetchError, match=page):
        index_files(f"{peer_url}/whl/cu130/torch/", "job")


TORCH_WHEELS = cases(r"more than 8 GiB \(size cap\)", "silent", "announced-16-gib", "not-http", announced=16 << 30)


@pytest.mark.parametrize(("peer_url", "pattern"), TORCH_WHEELS, indirect=["peer_url"])
def test_a_torch_wheel_download_stops_at_a_deadline_or_cap(tmp_path: Path, peer_url: str, pattern: str) -> None:
    from builder.steps.fetch import download_checked

    url = f"{peer_url}/whl/torch-2.14.1-cp311-cp311-linux_x86_64.whl"
    with pytest.raises(FetchError, match=rf"^job: download of http://{PORT}/whl/\S+ failed: {pattern}$"):
        download_checked(url, tmp_path / "torch.whl", None, "job")
    assert list(tmp_path.iterdir()) == []


DOCTOR = cases(r"more than 16 MiB \(size cap\)", "silent", "trickle-body", "flood", "not-http", "blackhole")


@pytest.mark.parametrize(("peer_url", "pattern"), DOCTOR, indirect=["peer_url"])
def test_doctors_index_lookup_stops_at_a_deadline_or_cap(peer_url: str, pattern: str) -> None:
    from builder.doctor.fix import IndexUnreachable, fetch_json

    url = f"{peer_url}/whl/pt214cu130/json/causal-conv1d/index.json"
    with pytest.raises(IndexUnreachable, match=rf"^http://{PORT}/whl/\S+/index\.json: {pattern}$"):
        fetch_json(url)


# -- the object store: publish against an S3 endpoint that does not answer ---------------------------------------------


STORES = [pytest.param(peers.silent, "read", id="silent"), pytest.param("blackhole", "connect", id="blackhole")]


@pytest.mark.parametrize(("peer_url", "which"), STORES, indirect=["peer_url"])
@pytest.mark.timeout(90)  # four attempts with the standard retry mode's backoff between them
def test_publish_stops_at_the_stores_deadline_naming_the_endpoint(tmp_path: Path, peer_url: str, which: str) -> None:
    out = tmp_path / "out"
    make_wheel(out / "dist", WheelSpec())
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    env = {**FAST, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}
    run = wheelwright("publish", "--output", out, "--bucket", "wheels", "--endpoint-url", peer_url, cwd=tmp_path,
                      env=env, timeout=80)
    assert_one_error(run, 7, rf"^ERROR S3 \w+ \S+: .*{PORT}.* \({which} deadline [\d.]+ s, 4 attempts\)")


# -- daemons and installers -------------------------------------------------------------------------------------------

HANGING_DOCKER = "#!/bin/sh\nsleep 600 &\nwait\n"  # a CLI whose daemon never answers; a child of its own, too


def test_images_build_stops_when_docker_info_hangs(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(HANGING_DOCKER)
    (fake / "docker").chmod(0o755)
    env = {**FAST, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "WHEELWRIGHT_PEER_TEST": str(tmp_path)}
    run = wheelwright("images", "build", "--engine", "docker", "--matrix", ROOT / "matrix.yaml", cwd=tmp_path,
                      env=env, timeout=40)
    assert_one_error(run, 4, rf"^ERROR `{re.escape(str(fake / 'docker'))} info` did not answer within [\d.]+ s "
                             r"\(total deadline\): its daemon hangs")
    assert _marked("WHEELWRIGHT_PEER_TEST", str(tmp_path)) == []  # the fake's own child was killed with it


def _marked(variable: str, value: str) -> list[int]:
    """Processes still running with ``variable=value`` in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{variable}={value}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def pip_download(tmp: Path, index: str) -> list[str | Path]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--index-url", f"{index}/simple/", "--dest", tmp,
            "toy"]


def apt_get_update(tmp: Path, mirror: str) -> list[str | Path]:
    from builder.steps.toolchain import _apt_options

    if os.geteuid() != 0 or not Path("/usr/bin/apt-get").exists():
        pytest.skip("apt-get update with a private state folder needs root and apt-get")
    apt = tmp / "apt"
    for folder in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial"):
        folder.mkdir(parents=True)
    (apt / "sources.list").write_text(f"deb [trusted=yes] {mirror}/debian trixie main\n")
    return ["apt-get", *_apt_options(apt), "update"]


# (case, the command against a silent peer's URL, its deadline in builder.core.runner, a scale that puts that deadline
# inside the tool's own socket timeout, what the error says)
SILENT_PEERS = [
    pytest.param(pip_download, "PIP_TOOLS", "0.002",  # 1800 s -> 3.6 s, inside pip's own 15 s
                 r"waited on the package index for 3\.6 s \(total deadline\) and was stopped", id="pip-index"),
    pytest.param(apt_get_update, "APT_UPDATE", "0.005",  # 600 s -> 3 s, inside apt's own 30 s
                 r"waited on Debian's mirror for 3 s \(total deadline\)", id="apt-get-mirror"),
]


@pytest.mark.parametrize(("command", "deadline", "scale", "message"), SILENT_PEERS)
def test_an_installer_against_a_silent_peer_stops_at_its_total_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: Callable[[Path, str], list[str | Path]], deadline: str,
    scale: str, message: str
) -> None:
    from builder.core import runner

    monkeypatch.setenv("WHEELWRIGHT_DEADLINE_SCALE", scale)
    env = {**os.environ, "WHEELWRIGHT_PEER_TEST": str(tmp_path), "PIP_NO_CACHE_DIR": "1"}
    with peers.peer(peers.silent) as server:
        argv = command(tmp_path, server.url)
        with pytest.raises(runner.DeadlinePassed, match=message):
            runner.run(argv, step=command.__name__, env=env, log_path=tmp_path / "tool.log",
                       deadline=getattr(runner, deadline))
    assert _marked("WHEELWRIGHT_PEER_TEST", str(tmp_path)) == []


def test_a_bad_deadline_scale_is_one_error(tmp_path: Path) -> None:
    run = wheelwright("upstream", "--matrix", ROOT / "matrix.yaml", "--index-url", "http://127.0.0.1:9/simple/",
                      cwd=tmp_path, env={"WHEELWRIGHT_DEADLINE_SCALE": "fast"})
    assert_one_error(run, 2, r"^ERROR WHEELWRIGHT_DEADLINE_SCALE='fast': not a number above 0 and at most 100")


# -- serve: idle and slow clients --------------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """`wheelwright serve` of a small site in its own process (deadlines scaled: 0.6 s for a request head); its pid
    and port."""
    out = tmp_path / "out"
    make_wheel(out / "dist", WheelSpec())
    assert wheelwright("index", "--output", out, cwd=tmp_path).code == 0
    env = {**os.environ, **FAST, "COLUMNS": "200", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "builder.cli.main", "serve", "--output", out, "--port", "0"]
    with subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as server:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", line)[1])  # type: ignore[index]
        try:
            yield server.pid, port
        finally:
            server.kill()


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)[1])  # type: ignore[index]


def test_serve_with_300_idle_sockets_serves_a_client_and_bounds_its_threads(served: tuple[int, int]) -> None:
    from index_site.serve import MAX_CONNECTIONS

    pid, port = served
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(300)]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            assert page.status == 200 and b"causal-conv1d" in page.read()
        assert _threads(pid) <= MAX_CONNECTIONS + 4  # the handlers, the main thread and a few of the runtime's
    finally:
        for sock in idle:
            sock.close()


def _drip(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    for byte in data:
        if stop.wait(0.1):
            return
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return


# (case, what the client sends at once, what it then sends a byte at a time every 0.1 s)
SLOW_CLIENTS = [
    ("says-nothing", b"", b""),
    ("slow-request-line", b"", b"GET /simple/causal-conv1d/ HTTP/1.1\r\n" * 20),
    ("slow-headers", b"GET / HTTP/1.1\r\n", b"X-Slow: " + b"a" * 1000 + b"\r\n"),
]


@pytest.mark.parametrize(("first", "dripped"), [c[1:] for c in SLOW_CLIENTS], ids=[c[0] for c in SLOW_CLIENTS])
def test_serve_cuts_off_a_client_that_sends_no_request_head_in_time(
    served: tuple[int, int], first: bytes, dripped: bytes
) -> None:
    _, port = served
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(first)
        dripper = threading.Thread(target=_drip, args=(client, dripped, stop), daemon=True)
        dripper.start()
        try:
            answer = _until_closed(client)
        finally:
            stop.set()
            dripper.join()
    assert not answer.startswith(b"HTTP/1.1 200"), answer[:200]


def _until_closed(client: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a reset counts as closed)."""
    received = b""
    while True:
        try:
            chunk = client.recv(1 << 16)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


# -- tools that print bytes that are not UTF-8 ------------------------------------------------------------------------

NOT_UTF8 = b"\xff\xfe bytes of another encoding \xe9t\xe9\n"


def fake_tool(tmp: Path, name: str, *, code: int = 0) -> Path:
    """An executable printing NOT_UTF8 on stdout and stderr."""
    path = tmp / name
    octal = "".join(f"\\{b:03o}" for b in NOT_UTF8)
    path.write_text(f"#!/bin/sh\nprintf '{octal}'\nprintf '{octal}' >&2\nexit {code}\n")
    path.chmod(0o755)
    return path


def doctor_of_a_python(tmp: Path) -> str:
    run = wheelwright("doctor", "--python", fake_tool(tmp, "python", code=1), cwd=tmp)
    assert_one_error(run, 1, r"^ERROR --python \S+: .*\ufffd")
    return run.output


def nvcc_usage(tmp: Path) -> str:
    from builder.steps.programs.objcache import _usage

    return _usage(str(fake_tool(tmp, "nvcc")))


def cuobjdump_listing(tmp: Path) -> str:
    from builder.steps.sass import kernel_sass

    return repr(kernel_sass(fake_tool(tmp, "cuobjdump"), tmp / "kernel.o"))


UNDECODABLE: list[tuple[str, Callable[[Path], str]]] = [
    ("doctor-probe", doctor_of_a_python),
    ("nvcc-help", nvcc_usage),
    ("cuobjdump-sass", cuobjdump_listing),
]


@pytest.mark.parametrize("reader", [c[1] for c in UNDECODABLE], ids=[c[0] for c in UNDECODABLE])
def test_output_that_is_not_utf8_is_read_with_replacement(tmp_path: Path, reader: Callable[[Path], str]) -> None:
    text = reader(tmp_path)
    assert "Traceback" not in text


def test_the_runner_reads_output_that_is_not_utf8_with_replacement(tmp_path: Path) -> None:
    from builder.core.runner import run

    result = run([fake_tool(tmp_path, "tool")], step="tool", capture=True, log_path=tmp_path / "tool.log")
    assert "\ufffd" in result.output and "bytes of another encoding" in result.output
    assert "\ufffd" in (tmp_path / "tool.log").read_text(encoding="utf-8")

