#!/usr/bin/env bash
# usage: scripts/timed.sh PART COMMAND...
# Runs COMMAND as one part of `make test` (system packages, venv, unit, ...) and prints the seconds it took; with
# WHEELWRIGHT_TIMINGS set, also appends "PART SECONDS EXIT" to that file (.ci/run sums them against its budget).
# Under GitHub Actions the part's output is one collapsible log group.
set -uo pipefail
part=$1
shift
[ "${GITHUB_ACTIONS:-}" = "true" ] && echo "::group::$part"
start=$(date +%s.%N)
"$@"
status=$?
seconds=$(awk -v start="$start" -v end="$(date +%s.%N)" 'BEGIN { printf "%.1f", end - start }')
[ "${GITHUB_ACTIONS:-}" = "true" ] && echo "::endgroup::"
echo "time: $part ${seconds}s (exit $status)"
if [ -n "${WHEELWRIGHT_TIMINGS:-}" ]; then
    echo "$part $seconds $status" >>"$WHEELWRIGHT_TIMINGS"
fi
exit "$status"
