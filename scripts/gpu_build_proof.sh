#!/usr/bin/env bash
# The full-arch build proof (issue 16) on the lent GPU machine, from the repository root (docs/gpu-acceptance.md):
#
#   bash scripts/gpu_build_proof.sh OUTDIR [--package causal-conv1d|mamba-ssm] [--runs ours|...|none] [--suite]
#                                          [--detach] [--work DIR] [--carry DIR]
#   bash scripts/gpu_build_proof.sh OUTDIR --collect SECONDS [--work DIR]
#
# scripts/gpu/bootstrap.py installs the carried wheels, then runs scripts/gpu/proof.py (its docstring says the rest).
exec "${PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/gpu/bootstrap.py" proof "$@"
