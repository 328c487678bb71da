#!/usr/bin/env bash
# usage: scripts/timed.sh PART COMMAND...
# Runs COMMAND as one part of `make test` (system packages, venv, unit, ...) and prints the seconds it took; with
# WHEELWRIGHT_TIMINGS set, also appends "PART SECONDS EXIT" to that file (.ci/run sums them against its budget).
# It also says how much disk was free where the tests write before and after the part: a part that fills the disk
# fails in whatever test runs next (a compile, a torch install), and this line tells that from a real failure.
# Under GitHub Actions the part's output is one collapsible log group.
set -uo pipefail
free_gb() {  # free space where temporary files go, in GB; "?" where df cannot tell
    df -Pk "${TMPDIR:-/tmp}" 2>/dev/null | awk 'NR == 2 { printf "%.1f", $4 / 1048576; found = 1 } END { if (!found) printf "?" }'
}
part=$1
shift
[ "${GITHUB_ACTIONS:-}" = "true" ] && echo "::group::$part"
free_before=$(free_gb)
start=$(date +%s.%N)
"$@"
status=$?
seconds=$(awk -v start="$start" -v end="$(date +%s.%N)" 'BEGIN { printf "%.1f", end - start }')
[ "${GITHUB_ACTIONS:-}" = "true" ] && echo "::endgroup::"
echo "time: $part ${seconds}s (exit $status), free in ${TMPDIR:-/tmp}: ${free_before} -> $(free_gb) GB"
if [ -n "${WHEELWRIGHT_TIMINGS:-}" ]; then
    echo "$part $seconds $status" >>"$WHEELWRIGHT_TIMINGS"
fi
exit "$status"
