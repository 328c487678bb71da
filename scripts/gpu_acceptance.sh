#!/usr/bin/env bash
# GPU acceptance, run on the lent GPU box in one command from the repository root (docs/gpu-acceptance.md):
# wheelwright builds causal-conv1d and mamba-ssm against the box's own torch, indexes and serves them on loopback,
# pip installs them from that index into a venv that sees the box's torch, and scripts/gpu_acceptance.py checks them
# on the GPU. The box is offline: scripts/prepare_gpu_carry.sh fills .carry/ beforehand, and it travels along.
# Everything printed also goes to OUTDIR/acceptance.log; OUTDIR/summary.json holds each stage's result as it ends.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/gpu_acceptance.sh OUTDIR [--skip-build WHEELHOUSE] [--quick] [--work DIR] [--carry DIR]
                                        [--workers N] [--port N] [--deadline SECONDS]

  OUTDIR                  the log, the summary JSON, the build logs and pytest's output go here (at most 8 files)
  --skip-build WHEELHOUSE reuse an earlier run's build output (its dist/ and ledger.sqlite) and only test
  --quick                 run a subset of causal-conv1d's suite (its counts are then not compared with upstream's)
  --work DIR              scratch folder: wheelhouse, venvs, cache (default: .gpu-work, kept for --skip-build)
  --carry DIR             what scripts/prepare_gpu_carry.sh filled (default: .carry)
  --workers N             pytest-xdist workers for causal-conv1d's suite (default: 16)
  --port N                the index server's loopback port (default: a free one)
  --deadline SECONDS      no optional stage starts past this many seconds into the run (default: 570)

exit status: 0 every stage passed, 1 a stage failed or was cut short, 2 bad arguments, 3 no CUDA device
EOF
}

die_usage() {
    echo "ERROR $*" >&2
    echo "(scripts/gpu_acceptance.sh --help shows the usage)" >&2
    exit 2
}

is_count() { [[ $1 =~ ^[0-9]+$ ]]; }

parse_args() {  # sets the options' globals; bad arguments exit 2 with a message
    outdir="" wheelhouse_reuse="" quick=0 work="" carry="" workers=16 port=0 deadline=570
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --quick) quick=1; shift ;;
            --skip-build|--work|--carry|--workers|--port|--deadline)
                [ $# -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"
                case "$1" in
                    --skip-build) wheelhouse_reuse=$2 ;;
                    --work) work=$2 ;;
                    --carry) carry=$2 ;;
                    --workers) is_count "$2" && [ "$2" -ge 1 ] || die_usage "--workers wants a positive number, not '$2'"; workers=$2 ;;
                    --port) is_count "$2" && [ "$2" -le 65535 ] || die_usage "--port wants 0..65535, not '$2'"; port=$2 ;;
                    --deadline) is_count "$2" && [ "$2" -ge 60 ] || die_usage "--deadline wants seconds >= 60, not '$2'"; deadline=$2 ;;
                esac
                shift 2 ;;
            -*) die_usage "unknown option: $1" ;;
            *) [ -z "$outdir" ] || die_usage "one OUTDIR only (got '$outdir' and '$1')"; outdir=$1; shift ;;
        esac
    done
    [ -n "$outdir" ] || die_usage "OUTDIR is required"
    if [ -n "$wheelhouse_reuse" ]; then
        [ -f "$wheelhouse_reuse/ledger.sqlite" ] && [ -d "$wheelhouse_reuse/dist" ] \
            || die_usage "--skip-build $wheelhouse_reuse: no dist/ and ledger.sqlite there (a wheelwright build output)"
    fi
}

setup() {  # absolute paths, the log, and the environment every stage shares
    # paths given are taken from where the script was started; the defaults live in the repository
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    OUTDIR=$(mkdir -p "$outdir" && cd "$outdir" && pwd)
    WORK=$(mkdir -p "${work:-$ROOT/.gpu-work}" && cd "${work:-$ROOT/.gpu-work}" && pwd)
    CARRY=$(mkdir -p "${carry:-$ROOT/.carry}" && cd "${carry:-$ROOT/.carry}" && pwd)
    WH=$WORK/wheelhouse
    if [ -n "$wheelhouse_reuse" ]; then WH=$(cd "$wheelhouse_reuse" && pwd); fi
    cd "$ROOT"
    PY=${PYTHON:-python3}
    SUMMARY=$OUTDIR/summary.json
    LOG=$OUTDIR/acceptance.log
    WW_SITE=$WORK/ww-site          # the carried wheels, on wheelwright's path only
    VENV=$WORK/venv                # where pip installs our wheels; sees the box's torch
    LABEL=$("$PY" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["label"])' scripts/data/gpu_acceptance.toml)
    rm -f "$SUMMARY" "$OUTDIR"/build-*.log "$OUTDIR"/build-status.txt "$OUTDIR/upstream-pytest.log" "$OUTDIR/pip-report.json"
    : >"$LOG"
    exec > >(tee -a "$LOG") 2>&1
    tee_pid=$!

    export PYTHONUNBUFFERED=1
    export WHEELWRIGHT_CACHE=$WORK/cache
    # the build environments' pip installs come from the carry, never from the network
    export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_FIND_LINKS="$CARRY/build-wheels $CARRY/wheels"
    # the box's MemAvailable starts far below its 128 GiB and grows with use; sized by it, the build would run half
    # the compiles it can (16 translation units at causal-conv1d's 3.4 GB peak fit easily)
    export WHEELWRIGHT_COMPILE_MEMORY_GB=${WHEELWRIGHT_COMPILE_MEMORY_GB:-1}
}

# the scripts are a package of the checkout (scripts/__init__.py): run as modules with the checkout's root on the path
py() { PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m scripts.gpu_acceptance --summary "$SUMMARY" "$@"; }
vpy() { env PYTHONPATH="$ROOT" "$VENV/bin/python" -m scripts.gpu_acceptance --summary "$SUMMARY" "$@"; }
ww() { PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" "$PY" -m builder.cli.main "$@"; }
remaining() { echo $((deadline - SECONDS)); }
say() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }

cleanup() {
    local status=$?
    if [ -f "$WORK/serve.pid" ]; then
        kill "$(cat "$WORK/serve.pid")" 2>/dev/null || true
        rm -f "$WORK/serve.pid"
    fi
    exec >&- 2>&-  # tee sees the end of its input, writes the last lines, and exits
    wait "$tee_pid" 2>/dev/null || true
    exit "$status"
}

# run_stage NAME FUNCTION: FUNCTION runs in a subshell where its first failing command ends it; the stage is timed
# and recorded (a result the Python part recorded stands; only the time is the whole stage's). Never fails itself:
# $stage_status says how it went.
run_stage() {
    local name=$1 fn=$2 start=$EPOCHREALTIME status=passed
    say "=== stage $name"
    rm -f "$WORK/stage-detail"
    set +e
    (set -e; "$fn")
    stage_status=$?
    set -e
    [ "$stage_status" -eq 0 ] || status=failed
    local detail
    detail=$(cat "$WORK/stage-detail" 2>/dev/null || true)
    [ "$stage_status" -eq 0 ] || detail="exit $stage_status${detail:+; $detail}"
    py record --stage "$name" --status "$status" --seconds "$(awk "BEGIN {print $EPOCHREALTIME - $start}")" \
        --detail "$detail" --keep-result
    say "=== stage $name: $status (exit $stage_status)"
}

stop_here() {  # stop_here SKIP-REST-ARGS...: the stages without a result are skipped, for the reason given
    py skip-rest "$@"
    finish
}

finish() {
    say "=== results"
    collect
    local status=0
    py finish || status=$?
    exit "$status"
}

collect() {  # copies of the build logs and the ledger's table, next to the summary
    if [ -f "$WH/ledger.sqlite" ]; then
        COLUMNS=200 ww status --output "$WH" >"$OUTDIR/build-status.txt" 2>&1 || true
    fi
    local log name
    for log in "$WH"/logs/*.log; do
        [ -f "$log" ] || continue
        name=$(basename "$log")
        cp "$log" "$OUTDIR/build-${name//+/_}"
    done
    if [ -f "$WORK/pip-report.json" ]; then cp "$WORK/pip-report.json" "$OUTDIR/pip-report.json"; fi
    if [ -f "$WORK/serve.log" ]; then
        echo "--- wheelwright serve's log"
        tail -n 40 "$WORK/serve.log"
    fi
}

detect_cuda_home() {  # $CUDA_HOME, else the toolkit nvcc on PATH belongs to, else /usr/local/cuda*
    local candidates=("${CUDA_HOME:-}") nvcc
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] || candidates+=("$(dirname "$(dirname "$(readlink -f "$nvcc")")")")
    candidates+=(/usr/local/cuda /usr/local/cuda-*)
    for home in "${candidates[@]}"; do
        if [ -n "$home" ] && [ -x "$home/bin/nvcc" ] && [ -f "$home/include/cuda_runtime_api.h" ]; then
            echo "$home"
            return
        fi
    done
}

# -- stages -----------------------------------------------------------------------------------------------------

stage_carry() {
    local wheels=("$CARRY"/wheels/*.whl)
    [ -f "${wheels[0]}" ] || { echo "no wheels in $CARRY/wheels: run scripts/prepare_gpu_carry.sh here first" >"$WORK/stage-detail"; return 1; }
    rm -rf "$WW_SITE"
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target "$WW_SITE" "${wheels[@]}"
    mkdir -p "$WHEELWRIGHT_CACHE/sdists"
    cp "$CARRY"/cache/sdists/*.tar.gz "$WHEELWRIGHT_CACHE/sdists/"
    # informational: the image's own packages stand in for the rest, maybe at other versions than pinned
    PYTHONPATH="$WW_SITE:$ROOT" "$PY" -m scripts.gpu_carry satisfied || say "could not compare the requirements"
    ww plan --profile gpu-box --format json >"$WORK/plan.json"
    "$PY" - "$WORK/plan.json" "$LABEL" "${#wheels[@]}" >"$WORK/stage-detail" <<'EOF'
import json, sys
jobs = json.load(open(sys.argv[1]))["include"]
labels = {job["label"] for job in jobs}
print(f"{sys.argv[3]} carried wheels installed; gpu-box plans {len(jobs)} jobs: {', '.join(job['id'] for job in jobs)}")
sys.exit(0 if labels == {sys.argv[2]} and len(jobs) == 2 else 1)
EOF
}

stage_build() {
    local budget=$(($(remaining) - 60)) status=0 start=$EPOCHREALTIME
    [ "$budget" -gt 60 ] || budget=60
    say "wheelwright build --profile gpu-box --parallel 2 (stopped after ${budget}s)"
    timeout --kill-after=15 "$budget" env PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" COLUMNS=160 \
        "$PY" -m builder.cli.main build --profile gpu-box --output "$WH" --parallel 2 --objcache off || status=$?
    # one Python per job here, so the object cache has nothing to share
    py build-report --wheelhouse "$WH" --exit-code "$status" --seconds "$(awk "BEGIN {print $EPOCHREALTIME - $start}")"
}

stage_index() {
    ww index --output "$WH" --base-url "$URL"
    [ -f "$WH/site/whl/$LABEL.html" ] || { echo "no find-links page whl/$LABEL.html in $WH/site" >"$WORK/stage-detail"; return 1; }
    echo "$WH/site/whl/$LABEL.html" >"$WORK/stage-detail"
}

stage_serve() {
    ww serve --site "$WH/site" --host 127.0.0.1 --port "$PORT" >"$WORK/serve.log" 2>&1 &
    echo $! >"$WORK/serve.pid"
    "$PY" - "$URL/whl/$LABEL.html" <<'EOF'
import sys, time, urllib.request
for _ in range(60):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as page:
            sys.exit(0 if b".whl" in page.read() else 1)
    except OSError:
        time.sleep(0.5)
sys.exit(f"{sys.argv[1]} did not answer within 30 s")
EOF
    echo "$URL/whl/$LABEL.html answers" >"$WORK/stage-detail"
}

stage_install() {
    # python3 on the box is itself a venv, so `venv --system-site-packages` would expose its base interpreter's
    # packages, not torch: a .pth file adds python3's own site-packages (torch, triton, pytest) instead
    rm -rf "$VENV"
    "$PY" -m venv --without-pip "$VENV"
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PY" -c 'import site, sys; print("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages()))' \
        >"$site/box-site-packages.pth"
    env -u PIP_FIND_LINKS "$PY" -m pip --python "$VENV/bin/python" install --no-index --no-deps --no-cache-dir \
        --find-links "$URL/whl/$LABEL.html" --report "$WORK/pip-report.json" causal-conv1d mamba-ssm
    vpy installed --report "$WORK/pip-report.json" --index-url "$URL" --dist "$WH/dist"
}

stage_seed() { vpy seed; }

stage_upstream() {
    local budget=$(($(remaining) - 90))
    [ "$budget" -gt 60 ] || budget=60
    vpy upstream --sdist-dir "$WHEELWRIGHT_CACHE/sdists" --workers "$workers" --timeout "$budget" \
        --log "$OUTDIR/upstream-pytest.log" ${quick_flag:+--quick}
}

stage_mamba() { vpy mamba; }

stage_bench() { vpy bench; }

# -- the run ----------------------------------------------------------------------------------------------------

main() {
    parse_args "$@"
    setup
    trap cleanup EXIT
    quick_flag=$([ "$quick" -eq 1 ] && echo 1 || true)
    CUDA_HOME=$(detect_cuda_home || true)
    export CUDA_HOME
    say "gpu acceptance: out $OUTDIR, work $WORK, carry $CARRY, CUDA_HOME ${CUDA_HOME:-none}, deadline ${deadline}s"

    say "=== stage preflight"
    preflight=0
    py preflight ${quick_flag:+--quick} || preflight=$?
    case "$preflight" in
        0) ;;
        3) stop_here --reason-of preflight ;;  # no CUDA device: every stage says so
        *) stop_here --reason "skipped: the preflight failed" ;;
    esac

    run_stage carry stage_carry
    [ "$stage_status" -eq 0 ] || stop_here --reason "skipped: the carry stage failed"

    if [ -n "$wheelhouse_reuse" ]; then
        say "=== stage build: reusing $WH"
        py build-report --wheelhouse "$WH" --exit-code 0 --reused || true  # a failed job shows in the summary
    else
        run_stage build stage_build
    fi
    [ -n "$(ls "$WH"/dist/*.whl 2>/dev/null)" ] || stop_here --reason "skipped: no wheels were built"

    if [ "$port" -eq 0 ]; then
        port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    PORT=$port
    URL=http://127.0.0.1:$PORT
    for stage in index serve install; do
        run_stage "$stage" "stage_$stage"
        [ "$stage_status" -eq 0 ] || stop_here --reason "skipped: the $stage stage failed"
    done

    run_stage seed stage_seed
    run_stage upstream stage_upstream
    for stage in mamba:40 bench:25; do  # name:seconds it needs at least
        if [ "$(remaining)" -ge "${stage#*:}" ]; then
            run_stage "${stage%%:*}" "stage_${stage%%:*}"
        else
            py record --stage "${stage%%:*}" --status skipped --detail "skipped: $(remaining)s left of the ${deadline}s deadline"
        fi
    done
    finish
}

# sourced (by a test, say), it only defines the functions; not `[ ] || main`, where errexit would not apply
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
