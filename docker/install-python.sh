#!/usr/bin/env bash
# Install CPython minors (e.g. `install-python.sh 3.9 3.11`) at /opt/python/cpXY-cpXY, the manylinux layout.
# An interpreter the base already has there (every pytorch/manylinux2_28-builder image) is kept. Otherwise it is
# built from the Debian source package of the suite that ships that minor (3.9 bullseye, 3.11 bookworm, 3.13
# trixie): the orig tarball is CPython's own release, fetched with apt from the base's own mirror, so the image
# needs no host beyond the Debian archive. Built without PGO/LTO (README, "Builder images", has the measured cost).
set -euo pipefail

declare -A suite_of=([3.9]=bullseye [3.11]=bookworm [3.13]=trixie)

install_minor() {
  local minor=$1 tag="cp${1/./}"
  local prefix="/opt/python/${tag}-${tag}"
  if [ -x "${prefix}/bin/python${minor}" ]; then
    echo "python ${minor}: present at ${prefix}"
    ln -sf "${prefix}/bin/python${minor}" "/usr/local/bin/python${minor}"
    return
  fi
  local suite=${suite_of[$minor]:-}
  if [ -z "$suite" ] || ! command -v apt-get >/dev/null; then
    echo "ERROR no Debian source package known for Python ${minor}; use a manylinux base, which ships it" >&2
    exit 1
  fi
  local work
  work=$(mktemp -d)
  # deb-src lines for the source suite, on whatever mirror the base's own sources name
  sed -n "s/^deb \([^ ]*\) [^ ]* \(.*\)$/deb-src \1 ${suite} main/p" /etc/apt/sources.list | head -n1 \
    > /etc/apt/sources.list.d/python-src.list
  apt-get update -qq
  (cd "$work" && apt-get source --download-only -qq "python${minor}")
  local tarball
  tarball=$(find "$work" -maxdepth 1 -name "python${minor}_*.orig.tar.[gx]z" | head -n1)
  tar -xf "$tarball" -C "$work"
  cd "$work"/Python-*/
  ./configure --prefix="$prefix" --with-ensurepip=install --quiet >/dev/null
  make -j"$(nproc)" --quiet >/dev/null
  # CPython's own test suite (100+ MB no build uses) is neither installed nor byte-compiled three times over: the
  # install skips a Lib/ subfolder that is not there, and compiles the rest on every core
  rm -rf Lib/test
  make altinstall COMPILEALL_OPTS=-j0 --quiet >/dev/null
  ln -sf "python${minor}" "${prefix}/bin/python"
  ln -sf "python${minor}" "${prefix}/bin/python3"
  ln -sf "${prefix}/bin/python${minor}" "/usr/local/bin/python${minor}"
  cd /
  rm -rf "$work" /etc/apt/sources.list.d/python-src.list /var/lib/apt/lists/*
  "${prefix}/bin/python${minor}" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib; print("python", __import__("sys").version)'
}

for minor in "$@"; do
  install_minor "$minor"
done
