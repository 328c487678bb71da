"""The GPU machine's thin driver (docs/gpu-acceptance.md): carry, bootstrap, stages and their summary, started by
scripts/gpu_acceptance.sh and scripts/gpu_build_proof.sh; the checks themselves are the tests of tests/gpu/. Imports
the product's public names, never a test module."""
