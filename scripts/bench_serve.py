"""scripts/bench/serve.py at the path docs and issues cite: `python scripts/bench_serve.py` and
`python -m scripts.bench_serve` both run it."""

import sys
from pathlib import Path

if not __package__:  # run by its path: its own folder is on sys.path, not the checkout that holds `scripts`
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from scripts.bench.serve import main

if __name__ == "__main__":
    sys.exit(main())
