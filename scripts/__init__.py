"""The repository's scripts, importable as one package from the checkout's root (``python -m scripts.seed_checklist``):
the GPU machine's driver (gpu/), the benchmarks (bench/), the checks `make check` runs. They use the product's
public names (import contracts in pyproject.toml) and never a test module."""
