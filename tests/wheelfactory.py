"""The small labelled wheels of the index tests live with the benchmarks that build them too: scripts/bench/wheels.py
(scripts never import a test module; tests may import scripts)."""

from scripts.bench.wheels import WheelSpec, indexed_wheel, make_wheel, metadata_text

__all__ = ["WheelSpec", "indexed_wheel", "make_wheel", "metadata_text"]
