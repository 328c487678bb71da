"""`wheelwright serve` under load: scripts/bench_serve.py runs the real CLI server in its own process and opens
500 loopback connections at once, wave after wave; every request must be answered in full, with no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_500_concurrent_clients_are_all_answered() -> None:
    command = [sys.executable, "-m", "scripts.bench_serve", "--clients", "500", "--requests", "1000", "--json"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280, check=False)
    figures = json.loads(result.stdout)
    concurrent = figures["concurrent"]
    assert concurrent["requests"] == 1000 and concurrent["clients"] == 500, figures
    assert (concurrent["failures"], concurrent["ok"]) == (0, 1000), figures
    assert figures["server_tracebacks"] == 0, result.stderr
    assert result.returncode == 0
