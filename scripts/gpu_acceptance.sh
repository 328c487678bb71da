#!/usr/bin/env bash
# The GPU acceptance run on the lent GPU machine, one command from the repository root (docs/gpu-acceptance.md):
#
#   bash scripts/gpu_acceptance.sh OUTDIR [--resume] [--stages LIST] [--detach] ...     (--help lists them all)
#
# scripts/gpu/bootstrap.py installs the carried wheels (.carry, which scripts/prepare_gpu_carry.sh fills) into the
# work folder, then runs the driver, scripts/gpu/acceptance.py, with them on its path; each stage's checks on the
# GPU are tests of tests/gpu. PYTHON picks the interpreter (default: python3, the machine's, which has torch).
exec "${PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/gpu/bootstrap.py" acceptance "$@"
