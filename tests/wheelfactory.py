"""TODO(issue 26): a shim for scripts/bench_index.py and bench_index_ab.py alone, until h25-index's rewrite of them
(which imports no test module) is merged; then it goes. The wheel factory is scripts/bench/wheels.py."""

from scripts.bench.wheels import WheelSpec, indexed_wheel, make_wheel, metadata_text

__all__ = ["WheelSpec", "indexed_wheel", "make_wheel", "metadata_text"]
