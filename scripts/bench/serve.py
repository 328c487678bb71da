"""Benchmark `wheelwright serve` under concurrent load: the real CLI serves a site in its own process, and N clients
on loopback (asyncio, one connection per request, all N opened at once) fetch its pages, .metadata and wheels
until a bounded count of requests is done or a time limit passes. Prints requests/s and the failure count (refused
or reset connections, timeouts, short bodies, any status but 200), and the same clients one at a time beside it.

    .venv/bin/python scripts/bench_serve.py                       # 500 concurrent clients, 2,000 requests
    .venv/bin/python scripts/bench_serve.py --clients 200 --requests 600 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.wheelhouse import Layout
from index_site.stage import build_site
from scripts.bench.wheels import WheelSpec, make_wheel

ROOT = Path(__file__).resolve().parents[2]

LABELS = ("pt214cu130", "pt213cu130", "pt212cu126", "pt211cu128")
PYTHONS = ("cp310", "cp311", "cp312", "cp313")


@dataclass
class Tally:
    ok: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    def fail(self, why: str) -> None:
        self.failures[why] = self.failures.get(why, 0) + 1

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def make_site(workdir: Path) -> tuple[Path, list[str]]:
    """A small real site: 16 wheels over 4 variants; returns it and the URL paths the clients fetch."""
    output = workdir / "wheelhouse"
    for label in LABELS:
        for python in PYTHONS:
            make_wheel(Layout(root=output).dist, WheelSpec(label=label, python=python, payload_bytes=64_000))
    site = output / "site"
    build_site(output, site, base_url="http://127.0.0.1")
    paths = ["/", "/simple/", "/simple/causal-conv1d/", "/json/causal-conv1d/"]
    for wheel in sorted(site.glob("whl/*/*.whl")):
        relative = wheel.relative_to(site).as_posix().replace("+", "%2B")
        paths += [f"/{relative}", f"/{relative}.metadata", f"/whl/{wheel.parent.name}.html"]
    return site, paths


def start_server(site: Path) -> tuple[subprocess.Popen[str], int]:
    """`wheelwright serve` on a free loopback port, in its own process; returns it and the port."""
    command = [sys.executable, "-m", "builder.cli.main", "serve", "--site", str(site), "--port", "0"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert server.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if match:
            return server, int(match[1])
        if not line and server.poll() is not None:
            break
    server.kill()
    raise SystemExit("wheelwright serve did not start")


async def fetch(port: int, path: str, tally: Tally, timeout: float) -> None:
    try:
        await asyncio.wait_for(_fetch(port, path, tally), timeout)
    except asyncio.TimeoutError:
        tally.fail("timeout")
    except (ConnectionError, OSError) as error:
        tally.fail(type(error).__name__)
    except asyncio.IncompleteReadError:
        tally.fail("short body")


async def _fetch(port: int, path: str, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = (await reader.readline()).split()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    finally:
        writer.close()
    if len(status) < 2 or status[1] != b"200":
        tally.fail(f"HTTP {status[1].decode() if len(status) > 1 else '?'}")
        return
    tally.ok += 1
    tally.bytes += len(body)


async def load(
    port: int, paths: list[str], *, clients: int, requests: int, seconds: float, timeout: float
) -> dict[str, Any]:
    """``clients`` connections at once, wave after wave, until ``requests`` are done or ``seconds`` have passed."""
    tally, done, start = Tally(), 0, time.perf_counter()
    while done < requests and time.perf_counter() - start < seconds:
        wave = min(clients, requests - done)
        await asyncio.gather(*(fetch(port, paths[(done + i) % len(paths)], tally, timeout) for i in range(wave)))
        done += wave
    elapsed = time.perf_counter() - start
    return {
        "clients": clients,
        "requests": done,
        "ok": tally.ok,
        "failures": tally.failed,
        "failure_kinds": tally.failures,
        "seconds": round(elapsed, 3),
        "requests_per_second": round(done / elapsed, 1),
        "megabytes": round(tally.bytes / 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=500, help="concurrent connections (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=2000, help="requests in all (default: %(default)s)")
    parser.add_argument(
        "--seconds", type=float, default=120, help="stop starting waves after this (default: %(default)s)"
    )
    parser.add_argument("--timeout", type=float, default=30, help="per request (default: %(default)s s)")
    parser.add_argument("--site", type=Path, help="serve this site (default: a generated one)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.clients * 2 + 64)), hard))
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as temporary:
        site, paths = (args.site, ["/"]) if args.site else make_site(Path(temporary))
        server, port = start_server(site)
        try:
            limits = {"seconds": args.seconds, "timeout": args.timeout}
            sequential = asyncio.run(load(port, paths, clients=1, requests=min(200, args.requests), **limits))
            concurrent = asyncio.run(load(port, paths, clients=args.clients, requests=args.requests, **limits))
        finally:
            server.terminate()
            log = server.communicate(timeout=30)[0]
    results = {"one_at_a_time": sequential, "concurrent": concurrent, "server_tracebacks": log.count("Traceback")}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, r in (("one client", sequential), (f"{args.clients} concurrent clients", concurrent)):
            kinds = ", ".join(f"{k} {v}" for k, v in r["failure_kinds"].items())
            print(
                f"{name + ':':<26} {r['requests']} requests in {r['seconds']:.2f} s = {r['requests_per_second']:,.0f} "
                f"requests/s, {r['failures']} failures{f' ({kinds})' if kinds else ''}"
            )
        print(f"{'server tracebacks:':<26} {results['server_tracebacks']}")
    return 0 if concurrent["failures"] == 0 and not results["server_tracebacks"] else 1


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
