#!/usr/bin/env bash
# The full-arch build proof (issue 16) on the lent GPU box, from the repository root:
#
#   scripts/gpu_build_proof.sh OUTDIR [--package causal-conv1d|mamba-ssm] [--runs ours|upstream,ours] [--detach]
#                              [--work DIR]
#   scripts/gpu_build_proof.sh OUTDIR --collect SECONDS [--work DIR]
#
# It fills the cache from .carry as scripts/gpu_acceptance.sh does (its preflight and carry stages), then runs
# scripts/bench_build.py's full-arch mode against the box's torch 2.11.0+cu130 and Python 3.12, with the same
# 9-arch list as upstream's release (sm_103 included, for this comparison only): upstream's released build and/or
# ours (the nvcc core pool and the split TU), one after the other, each bounded. OUTDIR/bench-full.txt gets wall,
# CPU-seconds of the whole process tree, cores-bound and the ratios. A command may run 600 s at most: `ours`
# alone fits (about 4 minutes); upstream's build (670 s measured there) needs --detach, and a later --collect.
set -euo pipefail

out="" package=causal-conv1d runs=ours detach=0 collect="" work=""
while [ $# -gt 0 ]; do
    case "$1" in
        --package) package=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --detach) detach=1; shift ;;
        --collect) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "ERROR --collect wants seconds, not '${2:-}'" >&2; exit 2; }
                   collect=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        -*) echo "ERROR unknown option: $1" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "ERROR OUTDIR is required (--help shows the usage)" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "$out" && cd "$out" && pwd)
WORK=$(mkdir -p "${work:-$ROOT/.gpu-work}" && cd "${work:-$ROOT/.gpu-work}" && pwd)
STATE=$WORK/build-proof       # the detached run's pid and console, kept between commands
mkdir -p "$STATE"
cd "$ROOT"

if [ -n "$collect" ]; then  # wait for a detached run, at most SECONDS, then report what it printed
    pid=$(cat "$STATE/pid" 2>/dev/null || true)
    for _ in $(seq "$collect"); do
        { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || break
        sleep 1
    done
    [ -f "$STATE/bench-full.txt" ] || { echo "ERROR no detached run in $STATE: start one with --detach" >&2; exit 1; }
    cp "$STATE/bench-full.txt" "$OUT/bench-full.txt"
    cat "$OUT/bench-full.txt"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "still running: --collect again"; exit 4; fi
    exit 0
fi

scripts/gpu_acceptance.sh "$OUT/carry" --stages carry --work "$WORK"  # the carried wheels into .gpu-work/ww-site, sdists into the cache
export PYTHONUNBUFFERED=1 WHEELWRIGHT_CACHE=$WORK/cache PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_FIND_LINKS="$ROOT/.carry/build-wheels $ROOT/.carry/wheels"
export WHEELWRIGHT_COMPILE_MEMORY_GB=${WHEELWRIGHT_COMPILE_MEMORY_GB:-1}  # as gpu_acceptance.sh: MemAvailable starts low
export PYTHONPATH="$WORK/ww-site:$ROOT" PATH="$WORK/ww-site/bin:$PATH"
bench=(python3 scripts/bench_build.py --full-arch "$package" --runs "$runs" --torch 2.11.0 --python 3.12
       --limit 1500 --workdir "$WORK/bench-full-$package")
rm -rf "$WORK/bench-full-$package"
if [ "$detach" -eq 1 ]; then
    setsid nohup "${bench[@]}" >"$STATE/bench-full.txt" 2>&1 </dev/null &
    echo $! >"$STATE/pid"
    echo "started (pid $!): collect with scripts/gpu_build_proof.sh $out --collect 560"
else
    "${bench[@]}" 2>&1 | tee "$OUT/bench-full.txt"
fi
