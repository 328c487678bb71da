"""Fault injection for the CLI, run as ``python -m tests.faults FAULT TARGET CALL -- wheelwright arguments``: the
CALL-th call of TARGET (``module:attribute`` or ``module:Class.method``) kills the process with SIGKILL
(FAULT=kill, as a power cut or the OOM killer would) or raises ENOSPC / EROFS (a full or read-only disk), then
the real ``wheelwright`` main runs. Everything else is the real code: the test sees what an operator would."""

from __future__ import annotations

import errno
import functools
import importlib
import os
import signal
import sys
import threading

FAULTS = {"kill", "enospc", "erofs"}


def inject(fault: str, target: str, call: int) -> None:
    module_name, _, attribute = target.partition(":")
    owner = importlib.import_module(module_name)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0
    lock = threading.Lock()

    @functools.wraps(original)
    def faulty(*args, **kwargs):
        nonlocal calls
        with lock:
            calls += 1
            now = calls == call
        if now:
            _fail(fault, target)
        return original(*args, **kwargs)

    setattr(owner, name, faulty)


def _fail(fault: str, target: str) -> None:
    if fault == "kill":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    code = errno.ENOSPC if fault == "enospc" else errno.EROFS
    raise OSError(code, os.strerror(code), f"(injected into {target})")


def main(argv: list[str]) -> int:
    fault, target, call, separator, *arguments = argv
    if fault not in FAULTS or separator != "--":
        raise SystemExit(f"usage: python -m tests.faults {{{','.join(sorted(FAULTS))}}} TARGET CALL -- ARGS")
    inject(fault, target, int(call))
    from builder.cli.main import main as wheelwright

    return wheelwright(arguments)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
