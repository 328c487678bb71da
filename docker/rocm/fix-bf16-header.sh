#!/usr/bin/env bash
# Make every function that ROCm 6.0's amd_hip_bf16.h defines at namespace scope with a bare __HOST_DEVICE__
# `static inline`, the fix mamba-ssm documents for ROCm 6.0 (see rocm.Dockerfile). Fails when it changes nothing:
# a header that no longer needs it means the Dockerfile's version condition is out of date.
set -euo pipefail
header=${1:?usage: fix-bf16-header.sh path/to/amd_hip_bf16.h}
original=$(mktemp)
cp "$header" "$original"
sed -i -E '/^__HOST_DEVICE__ /{/(^|[^_a-z])inline([^_a-z]|$)/!s/^__HOST_DEVICE__ /__HOST_DEVICE__ static inline /}' "$header"
changed=$(diff "$original" "$header" | grep -c '^>' || true)
rm -f "$original"
if [ "$changed" -eq 0 ]; then
  echo "ERROR ${header}: no non-inline __HOST_DEVICE__ definitions; this header does not need the ROCm 6.0 fix" >&2
  exit 1
fi
echo "${header}: ${changed} definitions made static inline"
