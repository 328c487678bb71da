"""Stands in for `wheelwright build` in the acceptance driver's resume tests: after SECONDS, it leaves what a build
leaves in WHEELHOUSE (a wheel per package in dist/ and a ledger saying so), for the build stage to collect.

Usage: python acceptance_fake_build.py WHEELHOUSE LABEL SECONDS [PACKAGE,...]   (default: both packages; an arch
build's stand-in names causal-conv1d alone)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from builder.core.ledger import Ledger, LedgerEntry

PACKAGES = {"causal-conv1d": "1.7.0", "mamba-ssm": "2.3.2.post1"}


def main(wheelhouse: str, label: str, seconds: str, packages: str = ",".join(PACKAGES)) -> int:
    print("fake build: compiling", flush=True)
    time.sleep(float(seconds))
    out = Path(wheelhouse)
    (out / "dist").mkdir(parents=True, exist_ok=True)
    with Ledger(out / "ledger.sqlite") as ledger:
        for package, version in PACKAGES.items():
            if package not in packages.split(","):
                continue
            wheel = f"{package.replace('-', '_')}-{version}+{label}-cp312-cp312-manylinux_2_38_x86_64.whl"
            (out / "dist" / wheel).write_bytes(b"not a real wheel")
            ledger.put(
                LedgerEntry(
                    job_id=f"{package}-{version}+{label}-cp312-x86_64",
                    package=package,
                    version=version,
                    label=label,
                    torch="2.11.0",
                    accelerator="cu130",
                    python="3.12",
                    input_hash="h",
                    status="built",
                    phase="verify",
                    timings={"compile": float(seconds)},
                    wheel=wheel,
                )
            )
    print("fake build: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
