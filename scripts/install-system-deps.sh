#!/usr/bin/env bash
# System packages the tests need beyond Python: Debian's Chromium for the landing-page test (playwright's own
# browser download is not reachable from CI) and the fonts it renders with; npm (where no Node.js is installed) for
# axe-core, the accessibility engine those tests run, which scripts/install-axe.sh then caches. Idempotent: installs
# only what is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

packages=(chromium fonts-dejavu-core)
command -v npm >/dev/null || packages+=(npm)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages present: ${packages[*]}"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "axe-core: $(bash "$here/install-axe.sh")"
