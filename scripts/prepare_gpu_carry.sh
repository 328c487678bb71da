#!/usr/bin/env bash
# Fill the carry folder (default .carry/, ignored by git) with what the GPU acceptance run needs on the offline box:
#   wheels/        wheelwright's dependencies the box lacks (scripts.gpu.carry.py works them out from pyproject.toml)
#   build-wheels/  the build environment's pinned tools (builder/data/build-requirements.txt)
#   cache/sdists/  the gpu-box profile's sdists, hash-checked, in the fetch cache's layout
#   uv.xz          the dev venv's pinned uv, xz-compressed (38 MB raw, 12 MB so): the arch_slim stage installs with it
# Run here, where the package registry is reachable, before the remote run; docs/gpu-acceptance.md says the rest.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/prepare_gpu_carry.sh [--carry DIR] [--python PYTHON]

Fills DIR (default .carry) with the wheels and sdists scripts/gpu_acceptance.sh needs on the GPU box, checks it is
complete, and prints its size against the limit of what may travel.

  --carry DIR      the folder to fill (default: .carry)
  --python PYTHON  the dev venv's interpreter (default: .venv/bin/python; `make venv` creates it)
EOF
}

die() {
    echo "ERROR $*" >&2
    exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
carry=$root/.carry
python=$root/.venv/bin/python
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --carry) [ $# -ge 2 ] || die "--carry needs a folder"; carry=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
        --python)
            [ $# -ge 2 ] || die "--python needs an interpreter"
            # absolute, but the venv's bin/python link kept: resolved, it is the base interpreter without the venv
            case "$2" in */*) python=$(realpath -m -s "$2") ;; *) python=$(command -v "$2" || echo "$2") ;; esac
            shift 2 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
cd "$root"
[ -x "$python" ] || die "$python is not an interpreter (run \`make venv\` first, or pass --python)"

# pip download for the box's interpreter and platform, not this machine's; no dependencies, since the list is whole
read -r -a target <<<"$("$python" -m scripts.gpu.carry platforms)"
download() {  # download FOLDER PIN...
    local folder=$1
    shift
    rm -rf "$folder"
    mkdir -p "$folder"
    for pin in "$@"; do
        "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: "${target[@]}" \
            -d "$folder" "$pin"
    done
}

mapfile -t wheels < <("$python" -m scripts.gpu.carry wheels; echo "exit=$?")
[ "${wheels[-1]}" = "exit=0" ] || die "could not work out the wheels to carry"
unset 'wheels[-1]'
mapfile -t build_wheels < <("$python" -m scripts.gpu.carry build-wheels; echo "exit=$?")
[ "${build_wheels[-1]}" = "exit=0" ] || die "could not read the build requirements"
unset 'build_wheels[-1]'

echo "carry: ${#wheels[@]} wheelwright dependencies the box lacks: ${wheels[*]}"
download "$carry/wheels" "${wheels[@]}"
echo "carry: ${#build_wheels[@]} build tools: ${build_wheels[*]}"
download "$carry/build-wheels" "${build_wheels[@]}"
echo "carry: sdists"
"$python" -m scripts.gpu.carry sdists --dest "$carry/cache/sdists"
uv=$(dirname "$python")/uv
[ -x "$uv" ] || die "$uv is missing: the pinned uv comes with \`make venv\`"
echo "carry: uv ($("$uv" --version))"
xz -6 -T1 -c "$uv" >"$carry/uv.xz.part" && mv "$carry/uv.xz.part" "$carry/uv.xz"

# what else travels: the repository's tracked and untracked-but-not-ignored files
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | { xargs -0 -r stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
"$python" -m scripts.gpu.carry check --carry "$carry" --tree-bytes "$tree_bytes"
