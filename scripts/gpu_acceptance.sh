#!/usr/bin/env bash
# GPU acceptance, run on the lent GPU box in one command from the repository root (docs/gpu-acceptance.md):
# wheelwright builds causal-conv1d and mamba-ssm against the box's own torch, indexes and serves them on loopback,
# pip installs them from that index into a venv that sees the box's torch, and scripts/gpu_acceptance.py checks them
# on the GPU. The box is offline: scripts/prepare_gpu_carry.sh fills .carry/ beforehand, and it travels along.
# Everything printed also goes to OUTDIR/acceptance.log; OUTDIR/summary.json holds each stage's result as it ends.
# The stages are a registry (scripts/data/gpu_acceptance.toml; each runs the function stage_<name> below). One proof
# may span several commands: the build runs detached (in its own process session), a command leaves what it had no
# time for pending, and the next command's --resume goes on from the summary kept in the work folder.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/gpu_acceptance.sh OUTDIR [--stages LIST] [--resume] [--detach] [--skip-build WHEELHOUSE]
                                        [--quick] [--leak-seconds N] [--work DIR] [--carry DIR] [--workers N]
                                        [--port N] [--deadline SECONDS] [--build-limit SECONDS]
                                        [--variants LIST] [--sass-reference PATH]

  OUTDIR                  the log, the summary JSON, the build logs and pytest's output go here (at most 8 files)
  --stages LIST           run only these stages (comma-separated; the setup stages before them come along)
  --resume                go on with the run an earlier command left in the work folder: its results stand, and
                          the stages it left pending (or a build still running) are run (or collected) now
  --detach                start the build (and the arch builds) and return without waiting (a later --resume
                          collects them)
  --skip-build WHEELHOUSE reuse an earlier run's build output (its dist/ and ledger.sqlite) and only test; one
                          that holds fewer packages (bench_build's full-arch output) has those installed and checked,
                          and the stages testing another are skipped, saying so
  --quick                 run a subset of causal-conv1d's suite (its counts are then not compared with upstream's)
  --leak-seconds N        each of the seed checklist's two leak runs (default: the data file's, 60)
  --work DIR              scratch folder: wheelhouse, venvs, cache, the summary (default: .gpu-work)
  --carry DIR             what scripts/prepare_gpu_carry.sh filled (default: .carry)
  --workers N             pytest-xdist workers for causal-conv1d's suite (default: 16)
  --port N                the index server's loopback port (default: a free one)
  --deadline SECONDS      no stage starts past this many seconds into the command, or with fewer seconds left
                          than it needs (it is left pending for --resume) (default: 570)
  --build-limit SECONDS   the detached build is stopped after this long, across commands (default: 1800)
  --variants LIST         the arch variants to build and collect (comma-separated; default: all of the data file's:
                          fat, ptx, ptx90, sm80)
  --sass-reference PATH   the wheel ptx_speed times the PTX wheels against: a wheel, or a wheelwright output folder
                          holding one causal-conv1d wheel of the label; it must hold SASS for the GPU (default: the
                          main wheelhouse's, installed by the install stage)

stages: preflight carry build index serve install doctor checklist upstream mamba bench arch_build arch_fat arch_ptx
arch_sm80 ptx_speed (setup: preflight carry index serve install, which run again in every command that runs a later
stage). The build stage starts the arch builds (fat, ptx, ptx90, sm80) beside the main one; arch_build collects
them (and starts those not started). ptx_speed times the ptx (compute_80) and ptx90 (compute_90) wheels against the
SASS reference, interleaved, with the SASS wheel against itself as the noise.

exit status: 0 every stage passed, 1 a stage failed, 2 bad arguments, 3 no CUDA device, 4 stages pending: run the
same command again with --resume (the work folder survives between commands while the machine stays warm)
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
    stages="" resume=0 detach_only=0 leak_seconds="" build_limit=1800 variants="" sass_reference=""
    argv=("$@")
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) usage; exit 0 ;;
            --quick) quick=1; shift ;;
            --resume) resume=1; shift ;;
            --detach) detach_only=1; shift ;;
            --skip-build|--work|--carry|--workers|--port|--deadline|--stages|--leak-seconds|--build-limit|--variants|\
            --sass-reference)
                [ $# -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"
                case "$1" in
                    --stages) stages=$2 ;;
                    --variants) variants=$2 ;;
                    --sass-reference) [ -e "$2" ] || die_usage "--sass-reference $2: no such wheel or folder"
                        sass_reference=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") ;;
                    --leak-seconds) is_count "$2" && [ "$2" -ge 1 ] || die_usage "--leak-seconds wants a positive number, not '$2'"; leak_seconds=$2 ;;
                    --build-limit) is_count "$2" && [ "$2" -ge 60 ] || die_usage "--build-limit wants seconds >= 60, not '$2'"; build_limit=$2 ;;
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
    PY=${PYTHON:-python3}
    # the data file first: a bad --variants is refused before any folder is made
    read -r LABEL PACKAGES ARCH_PACKAGE ARCH_NICE ARCH_PARALLEL PTX_LOADING PTX_TIMEOUT PTX_TARGET PTX_CONTROL ARCH_VARIANTS \
        < <("$PY" - "$ROOT/scripts/data/gpu_acceptance.toml" <<'EOF'
import sys, tomllib
data = tomllib.load(open(sys.argv[1], "rb"))
arch, speed = data["arch"], data["ptx_speed"]
variants = ",".join(f"{name}:{v['profile']}" for name, v in arch["variants"].items())
print(data["label"], ",".join(data["packages"]), arch["package"], arch["nice"], arch["build_parallel"], speed["module_loading"], int(speed["timeout_s"]), speed["target"], speed["isa_control"], variants)
EOF
)
    select_variants
    OUTDIR=$(mkdir -p "$outdir" && cd "$outdir" && pwd)
    WORK=$(mkdir -p "${work:-$ROOT/.gpu-work}" && cd "${work:-$ROOT/.gpu-work}" && pwd)
    CARRY=$(mkdir -p "${carry:-$ROOT/.carry}" && cd "${carry:-$ROOT/.carry}" && pwd)
    WH=$WORK/wheelhouse
    if [ -n "$wheelhouse_reuse" ]; then WH=$(cd "$wheelhouse_reuse" && pwd); fi
    cd "$ROOT"
    SUMMARY=$WORK/summary.json     # outlives the command (OUTDIR may not); copied to OUTDIR after every stage
    LOG=$OUTDIR/acceptance.log
    WW_SITE=$WORK/ww-site          # the carried wheels, on wheelwright's path only
    VENV=$WORK/venv                # where pip installs our wheels; sees the box's torch
    BUILD_STATE=$WORK/build-run    # the detached build's pid and exit status (scripts/acceptance/detach.py)
    BUILD_CONSOLE=$WORK/build-console.log
    ARCH=$WORK/arch                # one build folder per arch variant: its dist/, ledger, site, logs and reports
    PKG_ARGS=()  # --packages for the Python part: set by held_packages when a reused wheelhouse holds fewer
    rm -f "$OUTDIR/summary.json" "$OUTDIR"/build-*.log "$OUTDIR"/build-status.txt "$OUTDIR/upstream-pytest.log" "$OUTDIR/pip-report.json" \
        "$OUTDIR/doctor.json" "$OUTDIR/details.tar.gz"
    [ "$resume" -eq 1 ] || rm -f "$SUMMARY"
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
    # the PTX-only wheel's JIT output (every kernel of causal-conv1d, recompiled for sm_90) must fit the driver's JIT
    # cache, or each process compiles it again; its default of 256 MiB may not hold it with the rest
    export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
}

select_variants() {  # --variants: only the arch variants named, in the data file's order; an unknown one is bad usage
    [ -n "$variants" ] || return 0
    local name entry kept=""
    for name in ${variants//,/ }; do
        case ",$ARCH_VARIANTS," in
            *",$name:"*) ;;
            *) die_usage "--variants: no arch variant '$name' (the data file has $(variant_names))" ;;
        esac
    done
    for entry in ${ARCH_VARIANTS//,/ }; do
        case ",$variants," in *",${entry%%:*},"*) kept=${kept:+$kept,}$entry ;; esac
    done
    ARCH_VARIANTS=$kept
}

variant_names() { echo "$ARCH_VARIANTS" | sed 's/:[^,]*//g'; }  # fat:gpu-box-fat,ptx:gpu-box-ptx -> fat,ptx

# the scripts are a package of the checkout (scripts/__init__.py): run as modules with the checkout's root on the path
py() { PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m scripts.gpu_acceptance --summary "$SUMMARY" "${PKG_ARGS[@]}" "$@"; }
vpy() { env PYTHONPATH="$ROOT" "$VENV/bin/python" -m scripts.gpu_acceptance --summary "$SUMMARY" "${PKG_ARGS[@]}" "$@"; }
ww() { PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" "$PY" -m builder.cli.main "$@"; }
# `ww_serve ... &`: the background subshell becomes the server (exec), so $! is the pid that cleanup's kill must end
ww_serve() { PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" exec "$PY" -m builder.cli.main serve "$@"; }
remaining() { echo $((deadline - SECONDS)); }
say() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }

publish_summary() {  # the summary, as it stands, into OUTDIR (what comes back from the machine)
    if [ -f "$SUMMARY" ]; then cp "$SUMMARY" "$OUTDIR/summary.json"; fi
}

cleanup() {
    local status=$?
    publish_summary
    local pidfile
    for pidfile in "$WORK"/serve.pid "$WORK"/serve-*.pid; do  # the main index's server, and an arch stage's
        [ -f "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    done
    exec >&- 2>&-  # tee sees the end of its input, writes the last lines, and exits
    wait "$tee_pid" 2>/dev/null || true
    exit "$status"
}

# run_stage NAME FUNCTION: FUNCTION runs in a subshell where its first failing command ends it; the stage is timed
# and recorded (a result the Python part recorded stands; only the time is the whole stage's). Never fails itself:
# $stage_status says how it went.
run_stage() {
    local name=$1 fn=$2 start=$EPOCHREALTIME status
    say "=== stage $name"
    rm -f "$WORK/stage-detail"
    set +e
    (set -e; "$fn")
    stage_status=$?
    set -e
    case "$stage_status" in 0) status=passed ;; 3) status=skipped ;; 4) status=pending ;; *) status=failed ;; esac
    local detail
    detail=$(cat "$WORK/stage-detail" 2>/dev/null || true)
    [ "$stage_status" -eq 0 ] || detail="exit $stage_status${detail:+; $detail}"
    py record --stage "$name" --status "$status" --seconds "$(awk "BEGIN {print $EPOCHREALTIME - $start}")" \
        --detail "$detail" --keep-result
    publish_summary
    say "=== stage $name: $status (exit $stage_status)"
}

stop_here() {  # stop_here SKIP-REST-ARGS...: the stages without a result are skipped (or pending), for the reason
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
    collect_details
    if [ -f "$WORK/serve.log" ]; then
        echo "--- wheelwright serve's log"
        tail -n 40 "$WORK/serve.log"
    fi
}

collect_details() {  # what only a closer look needs, in one file (8 files at most come back from the box)
    local items=() path
    # reports and logs only: never a wheel (dist/, variant/, quarantine/, tmp/), a site or a ledger
    for path in "$WORK"/{pip-report.json,doctor-cli.json,arch/ptx-speed} \
        "$WORK"/arch/*/{build-console.log,logs,pip-report.json,doctor.json,doctor-cli.json,upstream-pytest.log,build-run}; do
        if [ -e "$path" ]; then items+=("${path#"$WORK"/}"); fi
    done
    [ "${#items[@]}" -gt 0 ] || return 0
    tar -czf "$OUTDIR/details.tar.gz" -C "$WORK" "${items[@]}" || say "could not pack details.tar.gz"
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for_page() {  # wait_for_page URL: the served page answers with a wheel link, within 30 s
    "$PY" - "$1" <<'EOF'
import sys, time, urllib.request
for _ in range(60):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as page:
            sys.exit(0 if b".whl" in page.read() else 1)
    except OSError:
        time.sleep(0.5)
sys.exit(f"{sys.argv[1]} did not answer within 30 s")
EOF
}

download() {  # download URL: its bytes to stdout (urllib: the box may lack curl)
    "$PY" -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=30).read())' "$1"
}

make_venv() {  # make_venv DIR: a clean venv that sees the box's torch
    # python3 on the box is itself a venv, so `venv --system-site-packages` would expose its base interpreter's
    # packages, not torch: a .pth file adds python3's own site-packages (torch, triton, pytest) instead
    rm -rf "$1"
    "$PY" -m venv --without-pip "$1"
    local site
    site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PY" -c 'import site, sys; print("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages()))' \
        >"$site/box-site-packages.pth"
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

stage_preflight() { py preflight ${quick_flag:+--quick}; }

stage_carry() {
    local wheels=("$CARRY"/wheels/*.whl)
    [ -f "${wheels[0]}" ] || { echo "no wheels in $CARRY/wheels: run scripts/prepare_gpu_carry.sh here first" >"$WORK/stage-detail"; return 1; }
    # installed once per set of wheels: a detached build still running from an earlier command imports from it
    local carried
    carried=$(cd "$CARRY/wheels" && ls -- *.whl)
    if [ "$(cat "$WW_SITE/.carried" 2>/dev/null)" != "$carried" ]; then
        rm -rf "$WW_SITE"
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target "$WW_SITE" "${wheels[@]}"
        echo "$carried" >"$WW_SITE/.carried"
    fi
    mkdir -p "$WHEELWRIGHT_CACHE/sdists"
    cp -n "$CARRY"/cache/sdists/*.tar.gz "$WHEELWRIGHT_CACHE/sdists/"  # never rewrites a file a build may read
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

# The build runs detached, in its own process session: it outlives a command that runs out of time, and the next
# command's --resume collects it. Exit 4 from this stage: still running.
stage_build() {
    if [ -n "$wheelhouse_reuse" ]; then
        say "reusing the build in $WH"
        py build-report --wheelhouse "$WH" --exit-code 0 --reused
        return
    fi
    local found
    found=$(py detach-status --state "$BUILD_STATE")
    if [ "$resume" -eq 1 ] && { [ "$found" = running ] || [ "$found" = finished ]; }; then
        say "collecting the build an earlier command started ($found)"
    else
        [ "$found" != running ] || py detach-stop --state "$BUILD_STATE"  # a fresh run does not share the wheelhouse
        start_arch_builds  # first: the main build's own start is then the last thing before it is looked at
        start_build
    fi
    if [ "$detach_only" -eq 0 ]; then
        local wait=$(($(remaining) - 30))
        [ "$wait" -gt 0 ] || wait=0
        py detach-wait --state "$BUILD_STATE" --seconds "$wait" --log "$BUILD_CONSOLE" || [ $? -eq 4 ]
    fi
    local status=0
    py build-report --wheelhouse "$WH" --state "$BUILD_STATE" || status=$?
    if [ "$status" -ne 4 ] && [ -f "$BUILD_CONSOLE" ]; then
        echo "--- wheelwright build's output"
        cat "$BUILD_CONSOLE"
    fi
    return "$status"
}

start_build() {
    say "wheelwright build --profile gpu-box --parallel 2, detached (stopped after ${build_limit}s)"
    rm -f "$BUILD_CONSOLE"
    # one Python per job here, so the object cache has nothing to share
    py detach-start --state "$BUILD_STATE" --log "$BUILD_CONSOLE" --limit "$build_limit" -- \
        env PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" COLUMNS=160 \
        "$PY" -m builder.cli.main build --profile gpu-box --output "$WH" --parallel 2 --objcache off
}

# The arch wheels: same package, version and label as the main build's causal-conv1d, so each builds into a folder
# of its own, and from a build root of its own (WHEELWRIGHT_FIXED_ROOT: one workspace lock per job id would queue
# them behind each other). Niced: the main wheels gate the first command's stages, these only later ones.
start_arch_builds() {
    local entry
    for entry in ${ARCH_VARIANTS//,/ }; do
        py detach-stop --state "$ARCH/${entry%%:*}/build-run"  # a fresh run's, like the main build's
        start_arch_build "${entry%%:*}" "${entry#*:}"
    done
}

start_arch_build() {  # start_arch_build NAME PROFILE
    local out=$ARCH/$1
    mkdir -p "$out"
    rm -f "$out/build-console.log"
    say "wheelwright build --profile $2 --output $out, detached and niced"
    py detach-start --state "$out/build-run" --log "$out/build-console.log" --limit "$build_limit" -- \
        nice -n "$ARCH_NICE" env PYTHONPATH="$WW_SITE:$ROOT" PATH="$WW_SITE/bin:$PATH" COLUMNS=160 \
        WHEELWRIGHT_FIXED_ROOT="/tmp/wheelwright-build-$1" \
        "$PY" -m builder.cli.main build --profile "$2" --output "$out" --parallel "$ARCH_PARALLEL" --objcache off
}

stage_index() {
    ww index --output "$WH" --base-url "$URL"
    [ -f "$WH/site/whl/$LABEL.html" ] || { echo "no find-links page whl/$LABEL.html in $WH/site" >"$WORK/stage-detail"; return 1; }
    echo "$WH/site/whl/$LABEL.html" >"$WORK/stage-detail"
}

stage_serve() {
    ww_serve --site "$WH/site" --host 127.0.0.1 --port "$PORT" >"$WORK/serve.log" 2>&1 &
    echo $! >"$WORK/serve.pid"
    wait_for_page "$URL/whl/$LABEL.html"
    echo "$URL/whl/$LABEL.html answers" >"$WORK/stage-detail"
}

stage_install() {
    make_venv "$VENV"
    env -u PIP_FIND_LINKS "$PY" -m pip --python "$VENV/bin/python" install --no-index --no-deps --no-cache-dir \
        --find-links "$URL/whl/$LABEL.html" --report "$WORK/pip-report.json" ${PACKAGES//,/ }
    vpy installed --report "$WORK/pip-report.json" --index-url "$URL" --dist "$WH/dist"
}

stage_doctor() {
    # the site's standalone doctor.py piped into the venv's python, as `curl -s URL/doctor.py | python -` does
    # (urllib: the box may lack curl), and wheelwright's own subcommand on the same venv; both must say OK
    download "$URL/doctor.py" >"$WORK/doctor.py"
    env -u PYTHONPATH "$VENV/bin/python" - --json <"$WORK/doctor.py" >"$OUTDIR/doctor.json" || true
    ww doctor --python "$VENV/bin/python" --index-url "$URL" --json >"$WORK/doctor-cli.json" || true
    py doctor --report "$OUTDIR/doctor.json" --cli-report "$WORK/doctor-cli.json"
}

stage_checklist() { vpy checklist ${leak_seconds:+--leak-seconds "$leak_seconds"}; }

stage_upstream() {  # started only with [stage_seconds] left; what it leaves is enough to record and finish
    local budget=$(($(remaining) - 20))
    [ "$budget" -gt 60 ] || budget=60
    vpy upstream --sdist-dir "$WHEELWRIGHT_CACHE/sdists" --workers "$workers" --timeout "$budget" \
        --log "$OUTDIR/upstream-pytest.log" ${quick_flag:+--quick}
}

stage_mamba() { vpy mamba; }

stage_bench() { vpy bench; }

# -- the arch wheels' stages (issue #13) --------------------------------------------------------------------------

stage_arch_build() {  # collects the arch builds; starts those this run's build stage did not (--skip-build, --stages)
    local entry state wait
    for entry in ${ARCH_VARIANTS//,/ }; do
        case "$(py detach-status --state "$ARCH/${entry%%:*}/build-run")" in
            running|finished|collected) ;;
            *) start_arch_build "${entry%%:*}" "${entry#*:}" ;;
        esac
    done
    for entry in ${ARCH_VARIANTS//,/ }; do
        [ "$detach_only" -eq 0 ] || break  # --detach: started; a later command's --resume collects them
        state=$ARCH/${entry%%:*}/build-run
        wait=$(($(remaining) - 30))
        [ "$wait" -gt 0 ] || wait=0
        py detach-wait --state "$state" --seconds "$wait" --log "$ARCH/${entry%%:*}/build-console.log" || [ $? -eq 4 ]
    done
    py arch-build-report --root "$ARCH" --main "$WH" --variants "$(variant_names)"
}

avpy() {  # avpy NAME ARGS...: the Python part in the arch variant's venv
    local name=$1
    shift
    env PYTHONPATH="$ROOT" "$WORK/venv-$name/bin/python" -m scripts.gpu_acceptance --summary "$SUMMARY" "${PKG_ARGS[@]}" "$@"
}

arch_ready() {  # arch_ready NAME: 0 when its wheel is there, 4 while its build still runs, 1 when it has none
    local out=$ARCH/$1
    if [ "$(py detach-status --state "$out/build-run")" = running ]; then
        echo "pending: the $1 build is still running; --resume runs it" >"$WORK/stage-detail"
        return 4
    fi
    if [ -z "$(ls "$out"/dist/*.whl 2>/dev/null)" ]; then
        echo "no $1 wheel in $out/dist (the arch_build stage builds it)" >"$WORK/stage-detail"
        return 1
    fi
}

arch_prepare() {  # arch_prepare NAME: its own site, served on its own port; its own clean venv; its wheel from there
    local name=$1 out=$ARCH/$1
    arch_port=$(free_port)
    arch_url=http://127.0.0.1:$arch_port
    ww index --output "$out" --base-url "$arch_url"
    ww_serve --site "$out/site" --host 127.0.0.1 --port "$arch_port" >"$out/serve.log" 2>&1 &
    echo $! >"$WORK/serve-$name.pid"
    wait_for_page "$arch_url/whl/$LABEL.html"
    make_venv "$WORK/venv-$name"
    env -u PIP_FIND_LINKS "$PY" -m pip --python "$WORK/venv-$name/bin/python" install --no-index --no-deps \
        --no-cache-dir --find-links "$arch_url/whl/$LABEL.html" --report "$out/pip-report.json" "$ARCH_PACKAGE"
}

arch_unserve() {  # one arch server at a time
    kill "$(cat "$WORK/serve-$1.pid")" 2>/dev/null || true
    rm -f "$WORK/serve-$1.pid"
}

arch_doctor() {  # arch_doctor NAME: both doctors on its venv, before any of its kernels runs
    local name=$1 out=$ARCH/$1
    download "$arch_url/doctor.py" >"$out/doctor.py"
    env -u PYTHONPATH "$WORK/venv-$name/bin/python" - --json <"$out/doctor.py" >"$out/doctor.json" || true
    ww doctor --python "$WORK/venv-$name/bin/python" --index-url "$arch_url" --json >"$out/doctor-cli.json" || true
    py arch-doctor --variant "$name" --report "$out/doctor.json" --cli-report "$out/doctor-cli.json"
}

# arch_stage NAME suite|kernel-call: install from its own index, doctor's verdict, then the whole upstream suite or
# the one kernel call that must fail (run whatever doctor said: the two together are the proof)
arch_stage() {
    local name=$1 proof=$2 status=0
    arch_ready "$name" || return $?
    arch_prepare "$name"
    avpy "$name" arch-installed --variant "$name" --report "$ARCH/$name/pip-report.json" --index-url "$arch_url" \
        --dist "$ARCH/$name/dist" || status=$?
    if [ "$status" -eq 0 ]; then
        arch_doctor "$name" || status=$?
        if [ "$proof" = suite ]; then
            # one process JIT-compiles (PTX) or loads (SASS) each kernel unit first, timed; the suite's 16 workers
            # then find PTX's JIT output in the cache rather than each compiling the same modules at once
            avpy "$name" jit-warm --variant "$name" || status=$?
            local budget=$(($(remaining) - 20))
            [ "$budget" -gt 60 ] || budget=60
            avpy "$name" upstream --stage "arch_$name" --append --sdist-dir "$WHEELWRIGHT_CACHE/sdists" \
                --workers "$workers" --timeout "$budget" --log "$ARCH/$name/upstream-pytest.log" \
                ${quick_flag:+--quick} || status=$?
        else
            avpy "$name" no-kernel --variant "$name" || status=$?
        fi
    fi
    arch_unserve "$name"
    return "$status"
}

stage_arch_fat() { arch_stage fat suite; }
stage_arch_ptx() { arch_stage ptx suite; }
stage_arch_sm80() { arch_stage sm80 kernel-call; }

# ptx_speed: the JIT's cost (fresh processes, the JIT cache off), then the PTX wheels against the SASS reference once
# JIT-ed, in interleaved rounds with the SASS wheel in a second process as the A/A control (scripts/acceptance/
# interleave.py). The ISA control (PTX for the GPU's own arch) may be missing: the target is then judged alone.
stage_ptx_speed() {
    arch_ready "$PTX_TARGET" || return $?
    local control=$PTX_CONTROL status=0
    arch_ready "$control" || status=$?
    [ "$status" -ne 4 ] || return 4  # its build still runs: the verdict waits for it
    if [ "$status" -ne 0 ]; then
        say "no $control wheel: the $PTX_TARGET PTX is judged without its control"
        control=""
    fi
    sass_venv
    local to=$ARCH/ptx-speed name python arms=() firsts=()
    mkdir -p "$to"
    rm -f "$to"/*.json "$to"/*.log
    for name in "$PTX_TARGET" $control; do
        arch_prepare "$name"  # its venv afresh: this stage may run in a later command than its build
        arch_unserve "$name"
    done
    for name in sass "$PTX_TARGET" $control; do
        python=$WORK/venv-$name/bin/python
        [ "$name" != sass ] || python=$SASS_PYTHON
        env PYTHONPATH="$ROOT" CUDA_CACHE_DISABLE=1 CUDA_MODULE_LOADING="$PTX_LOADING" timeout "$PTX_TIMEOUT" \
            "$python" -m scripts.gpu_acceptance --summary "$SUMMARY" first-call --out "$to/$name-first.json" \
            || say "the $name first call gave no result"
        firsts+=(--first "$name=$to/$name-first.json")
        arms+=(--arm "$name=$python")
        [ "$name" != sass ] || arms+=(--arm "sass-again=$python")
    done
    py ptx-rounds "${arms[@]}" --out "$to/rounds.json" || say "the rounds stopped early ($to/rounds.json says why)"
    py ptx-speed "${firsts[@]}" --rounds "$to/rounds.json" --sass-reference "$SASS_WHEEL"
}

sass_venv() {  # sets SASS_PYTHON and SASS_WHEEL: --sass-reference's wheel in a venv of its own, else the main venv's
    SASS_WHEEL=$(PYTHONPATH="$WW_SITE:$ROOT" "$PY" -m scripts.gpu_acceptance --summary "$SUMMARY" sass-reference \
        --path "${sass_reference:-$WH}") || {
        echo "no SASS reference wheel in ${sass_reference:-$WH} (its ERROR line above says why)" >"$WORK/stage-detail"
        return 1
    }
    say "the SASS reference: $SASS_WHEEL"
    SASS_PYTHON=$VENV/bin/python
    [ -n "$sass_reference" ] || return 0
    SASS_PYTHON=$WORK/venv-sass-ref/bin/python
    make_venv "$WORK/venv-sass-ref"
    env -u PIP_FIND_LINKS "$PY" -m pip --python "$SASS_PYTHON" install --quiet --no-index --no-deps --no-cache-dir \
        "$SASS_WHEEL"
}

# -- the run ----------------------------------------------------------------------------------------------------

# after_stage NAME: what a stage's end means for the rest of this command (returns when the run goes on)
after_stage() {
    local name=$1 setup=$2
    if [ "$stage_status" -eq 4 ] && [ "$name" = build ]; then  # an arch stage's pending build holds up only itself
        stop_here --status pending --reason "pending: the build is still running; --resume collects it"
    elif [ "$name" = build ] && [ -z "$(ls "$WH"/dist/*.whl 2>/dev/null)" ]; then
        stop_here --reason "skipped: no wheels were built"
    elif [ "$stage_status" -eq 3 ] && [ "$name" = preflight ]; then
        stop_here --reason-of preflight  # no CUDA device: every stage says so
    elif [ "$stage_status" -ne 0 ] && [ "$setup" -eq 1 ]; then
        stop_here --reason "skipped: the $name stage failed"
    fi
}

# held_packages: a reused wheelhouse (--skip-build) may hold fewer of the packages than a build makes (bench_build's
# full-arch output holds one): install and doctor then check those, and the stages testing another are skipped
held_packages() {
    [ -n "$wheelhouse_reuse" ] || return 0
    local held
    held=$(py wheelhouse-packages --wheelhouse "$WH") || exit 2  # it said why
    if [ "$held" != "$PACKAGES" ]; then
        say "the reused wheelhouse $WH holds ${held//,/, } (not ${PACKAGES//,/, }): only these are installed and checked"
        PACKAGES=$held
        PKG_ARGS=(--packages "$held")
    fi
}

main() {
    parse_args "$@"
    setup
    trap cleanup EXIT
    held_packages
    quick_flag=$([ "$quick" -eq 1 ] && echo 1 || true)
    CUDA_HOME=$(detect_cuda_home || true)
    export CUDA_HOME
    say "gpu acceptance: out $OUTDIR, work $WORK, carry $CARRY, CUDA_HOME ${CUDA_HOME:-none}, deadline ${deadline}s"

    local plan status=0
    plan=$(py plan ${stages:+--stages "$stages"} $([ "$resume" -eq 1 ] && echo --resume) \
        "--argv=scripts/gpu_acceptance.sh ${argv[*]}") || status=$?
    [ "$status" -eq 0 ] || exit 2  # plan said why
    say "stages this command: $(echo "$plan" | cut -d' ' -f1 | tr '\n' ' ')"
    if [ "$port" -eq 0 ]; then port=$(free_port); fi
    PORT=$port
    URL=http://127.0.0.1:$PORT

    local name setup needs
    while read -r name setup needs; do
        [ -n "$name" ] || continue
        local lacking=""
        [ "${#PKG_ARGS[@]}" -eq 0 ] || lacking=$(py lacks --stage "$name" --wheelhouse "$WH")
        if [ -n "$lacking" ]; then
            say "=== stage $name: $lacking"
            py record --stage "$name" --status skipped --detail "$lacking"
            continue
        fi
        if [ "$(remaining)" -lt "$needs" ]; then
            say "=== stage $name: pending ($(remaining)s left, it needs ${needs}s)"
            py record --stage "$name" --status pending \
                --detail "pending: $(remaining)s were left of the ${deadline}s deadline and it needs ${needs}s; --resume runs it"
            continue
        fi
        run_stage "$name" "stage_$name"
        after_stage "$name" "$setup"
    done <<<"$plan"
    finish
}

# sourced (by a test, say), it only defines the functions; not `[ ] || main`, where errexit would not apply
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
