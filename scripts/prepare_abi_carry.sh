#!/usr/bin/env bash
# Issue 30: what scripts/abi_gpu_suite.sh needs on the H200 box, into .carry/abi/: causal-conv1d 1.7.0 built for torch
# 2.12 for Python 3.12 (from WHEELHOUSE/dist, `wheelwright build --profile abi-proof`), the standalone doctor.py and
# causal-conv1d's sdist (its tests).
set -euo pipefail
WHEELHOUSE=${1:?usage: prepare_abi_carry.sh WHEELHOUSE}
mkdir -p .carry/abi
cp "$WHEELHOUSE"/dist/causal_conv1d-1.7.0+pt212cu130-cp312-*.whl .carry/abi/
cp "${WHEELWRIGHT_CACHE:-$HOME/.cache/wheelwright}"/sdists/causal_conv1d-1.7.0.tar.gz .carry/abi/
.venv/bin/python -c 'from builder.doctor.standalone import standalone_source; print(standalone_source(), end="")' \
    > .carry/abi/doctor.py
du -sh .carry/abi
