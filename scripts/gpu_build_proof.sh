#!/usr/bin/env bash
# The full-arch build proof (issue 16) on the lent GPU box, from the repository root:
#
#   scripts/gpu_build_proof.sh OUTDIR [--package causal-conv1d|mamba-ssm] [--runs ours|ours,learned|upstream,ours|none]
#                              [--suite] [--detach] [--work DIR]
#   scripts/gpu_build_proof.sh OUTDIR --collect SECONDS [--work DIR]
#
# It fills the cache from .carry as scripts/gpu_acceptance.sh does (its preflight and carry stages), then runs
# scripts/bench_build.py's full-arch mode against the box's torch 2.11.0+cu130 and Python 3.12, with the same
# 9-arch list as upstream's release (sm_103 included, for this comparison only): upstream's released build and/or
# ours (the nvcc core pool and the split TU), one after the other, each bounded; `learned` builds ours' job again
# from scratch with ours' ledger beside it, so the pool orders by the costs ours measured (a farm's later builds).
# OUTDIR/bench-full.txt gets wall, CPU-seconds of the whole process tree, cores-bound, the archs each wheel holds,
# the ratios, and for each of ours' builds where its compile phase's wall went (its timeline, read back); the
# timelines themselves land in OUTDIR/timelines/RUN-JOB.timeline.jsonl. A command may run
# 600 s at most: `ours` alone fits (359 s on 2026-12-01); upstream's build (670 s measured there) needs --detach, and a
# later --collect. --suite then runs the GPU acceptance suite on ours' wheel (gpu_acceptance.sh --skip-build of
# ours' output, which holds the one package: causal-conv1d's stages install,doctor,upstream; mamba-ssm's
# install,doctor) into OUTDIR/suite, within what is left of the command's 570 s; --runs none --suite runs only it,
# on the output an earlier command's ours left.
set -euo pipefail

out="" package=causal-conv1d runs=ours detach=0 collect="" work="" suite=0
while [ $# -gt 0 ]; do
    case "$1" in
        --package) package=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --suite) suite=1; shift ;;
        --detach) detach=1; shift ;;
        --collect) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "ERROR --collect wants seconds, not '${2:-}'" >&2; exit 2; }
                   collect=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        -*) echo "ERROR unknown option: $1" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "ERROR OUTDIR is required (--help shows the usage)" >&2; exit 2; }
case "$package" in
    causal-conv1d) suite_stages=install,doctor,upstream ;;
    mamba-ssm) suite_stages=install,doctor ;;  # its kernel stage (mamba) also needs a causal-conv1d wheel
    *) echo "ERROR --package wants causal-conv1d or mamba-ssm, not '$package'" >&2; exit 2 ;;
esac
if [ "$suite" -eq 1 ] && [ "$detach" -eq 1 ]; then
    echo "ERROR --suite needs ours' wheel: not with --detach (run --runs none --suite after --collect)" >&2; exit 2
fi
if [ "$runs" = none ] && [ "$suite" -eq 0 ]; then
    echo "ERROR --runs none builds nothing: give --suite, or runs to build" >&2; exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "$out" && cd "$out" && pwd)
WORK=$(mkdir -p "${work:-$ROOT/.gpu-work}" && cd "${work:-$ROOT/.gpu-work}" && pwd)
STATE=$WORK/build-proof       # the detached run's pid and console, kept between commands
BENCH=$WORK/bench-full-$package
mkdir -p "$STATE"
cd "$ROOT"

# each run's compile timeline (logs/JOB.timeline.jsonl in its output, builder/steps/timeline.py) into OUTDIR
keep_timelines() {
    local kept
    mkdir -p "$OUT/timelines"
    for kept in "$BENCH"/*/out/logs/*.timeline.jsonl; do
        [ -f "$kept" ] || continue
        cp "$kept" "$OUT/timelines/$(basename "$(dirname "$(dirname "$(dirname "$kept")")")")-$(basename "$kept")"
    done
}

if [ -n "$collect" ]; then  # wait for a detached run, at most SECONDS, then report what it printed
    pid=$(cat "$STATE/pid" 2>/dev/null || true)
    for _ in $(seq "$collect"); do
        { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || break
        sleep 1
    done
    [ -f "$STATE/bench-full.txt" ] || { echo "ERROR no detached run in $STATE: start one with --detach" >&2; exit 1; }
    cp "$STATE/bench-full.txt" "$OUT/bench-full.txt"
    keep_timelines
    cat "$OUT/bench-full.txt"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "still running: --collect again"; exit 4; fi
    exit 0
fi

# suite: gpu_acceptance.sh on ours' wheelhouse, then the verdict of the stages it ran (the others were not picked,
# so its own exit status says "incomplete")
suite() {
    local wheelhouse=$BENCH/ours/out left=$((570 - SECONDS))
    if [ ! -f "$wheelhouse/ledger.sqlite" ]; then
        echo "ERROR no ours output in $wheelhouse: run --runs ours first" >&2
        return 1
    fi
    if [ "$left" -lt 120 ]; then
        echo "suite: not started, ${left}s left of 570: run scripts/gpu_build_proof.sh $out --package $package --runs none --suite"
        return 4
    fi
    local status=0
    bash scripts/gpu_acceptance.sh "$OUT/suite" --work "$WORK" --skip-build "$wheelhouse" --stages "$suite_stages" \
        --deadline "$left" || status=$?
    [ "$status" -eq 0 ] || [ "$status" -eq 4 ] || return "$status"
    python3 - "$OUT/suite/summary.json" "$suite_stages" <<'EOF'
import json, sys
stages = json.load(open(sys.argv[1]))["stages"]
ran = {name: entry["status"] for name, entry in stages.items()}
picked = sys.argv[2].split(",")
ok = all(ran.get(name) in ("passed", "reused") for name in ran) and all(ran.get(name) == "passed" for name in picked)
print(f"suite on ours' full-arch wheel: {'passed' if ok else 'FAILED'} ("
      + ", ".join(f"{name} {status}" for name, status in ran.items()) + ")")
sys.exit(0 if ok else 1)
EOF
}

if [ "$runs" = none ]; then
    suite
    exit
fi

# the carried wheels into .gpu-work/ww-site, sdists into the cache; exit 4 only says the later stages were not picked
carried=0
bash scripts/gpu_acceptance.sh "$OUT/carry" --stages carry --work "$WORK" || carried=$?
[ "$carried" -eq 0 ] || [ "$carried" -eq 4 ] || { echo "ERROR the carry stage failed (exit $carried): $OUT/carry" >&2; exit 1; }
export PYTHONUNBUFFERED=1 WHEELWRIGHT_CACHE=$WORK/cache PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_FIND_LINKS="$ROOT/.carry/build-wheels $ROOT/.carry/wheels"
export WHEELWRIGHT_COMPILE_MEMORY_GB=${WHEELWRIGHT_COMPILE_MEMORY_GB:-1}  # as gpu_acceptance.sh: MemAvailable starts low
bench=(env PYTHONPATH="$WORK/ww-site:$ROOT" PATH="$WORK/ww-site/bin:$PATH"
       python3 scripts/bench_build.py --full-arch "$package" --runs "$runs" --torch 2.11.0 --python 3.12
       --limit 1500 --workdir "$BENCH")
rm -rf "$BENCH"
if [ "$detach" -eq 1 ]; then
    setsid nohup "${bench[@]}" >"$STATE/bench-full.txt" 2>&1 </dev/null &
    echo $! >"$STATE/pid"
    echo "started (pid $!): collect with scripts/gpu_build_proof.sh $out --collect 560"
else
    status=0
    "${bench[@]}" 2>&1 | tee "$OUT/bench-full.txt" || status=$?
    keep_timelines  # a failed build's timeline says where it stood
    [ "$status" -eq 0 ] || exit "$status"
    if [ "$suite" -eq 1 ]; then suite; fi
fi
