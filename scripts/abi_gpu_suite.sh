#!/usr/bin/env bash
# Issue 30, on the H200 box: causal-conv1d 1.7.0 built for torch 2.12 (cp312, sm_90), whose symbol window the index
# predicts to hold torch 2.11, runs its own tests/test_causal_conv1d.py against the box's torch 2.11.0+cu130. An
# import proves symbols, not struct layouts: the suite proves the kernels see the tensors they expect.
#
#   here:  bash scripts/prepare_abi_carry.sh WHEELHOUSE    (fills .carry/abi/: the wheel, doctor.py, the sdist)
#   there: bash scripts/abi_gpu_suite.sh "$OUT"            (carry=[".carry"], about 300 s with 16 workers)
#
# Writes $OUT/abi-suite.json (doctor's verdict before import, the import, the suite's counts) and the logs beside it.
set -euo pipefail
OUT=${1:?usage: abi_gpu_suite.sh OUTDIR}
BOX_PYTHON=${WHEELWRIGHT_BOX_PYTHON:-python3}   # the box's python3: a venv holding torch 2.11, pytest, xdist
PIP=${WHEELWRIGHT_PIP:-"$BOX_PYTHON -m pip"}
CARRY=.carry/abi
mkdir -p "$OUT"
wheel=$(ls "$CARRY"/causal_conv1d-1.7.0+pt212cu130-cp312-*.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# a venv that sees the box's torch (as gpu_acceptance.sh's make_venv: python3 is itself a venv, so a .pth file adds
# its site-packages), the 2.12 wheel installed into it
"$BOX_PYTHON" -m venv --without-pip "$work/venv"
venv_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$BOX_PYTHON" -c 'import site; print("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages()))' \
    > "$venv_site/box-site-packages.pth"
env -u PIP_FIND_LINKS $PIP --python "$work/venv/bin/python" install --no-deps --no-index --quiet "$wheel"
python="$work/venv/bin/python"

# doctor first: the extension's imports against the installed torch's exports, read from the files
"$python" "$CARRY/doctor.py" --python "$python" --json > "$OUT/abi-doctor.json" || true
"$python" -c 'import torch, causal_conv1d_cuda; print("imported on torch", torch.__version__)' \
    > "$OUT/abi-import.log" 2>&1 && imported=true || imported=false

tar -xzf "$CARRY"/causal_conv1d-1.7.0.tar.gz -C "$work" causal_conv1d-1.7.0/tests
workers=$(nproc)
start=$(date +%s)
(cd "$work/causal_conv1d-1.7.0" && timeout 540 "$python" -m pytest -q -p no:cacheprovider -n "$workers" \
    tests/test_causal_conv1d.py) > "$OUT/abi-suite.log" 2>&1 && suite=0 || suite=$?
seconds=$(( $(date +%s) - start ))
counts=$(tail -n 3 "$OUT/abi-suite.log" | grep -E "passed|failed" | tail -n 1 || true)
"$python" - "$OUT" "$imported" "$suite" "$seconds" "$counts" "$(basename "$wheel")" <<'PY'
import json, sys
out, imported, suite, seconds, counts, wheel = sys.argv[1:]
doctor = json.load(open(f"{out}/abi-doctor.json")) if open(f"{out}/abi-doctor.json").read().strip() else None
summary = {"wheel": wheel, "imported": imported == "true", "suite_exit": int(suite), "suite_seconds": int(seconds),
           "suite_counts": counts, "upstream_counts": "9485 passed, 3888 skipped",
           "doctor": [(d["package"], [v["code"] for v in d["verdicts"]]) for d in (doctor or {}).get("diagnoses", [])]}
json.dump(summary, open(f"{out}/abi-suite.json", "w"), indent=2)
print(json.dumps(summary, indent=2))
PY
