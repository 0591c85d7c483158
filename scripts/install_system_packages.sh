#!/usr/bin/env bash
# System packages the test suite needs beyond Python: headless Chromium and its WebDriver for
# tests/test_render_browser.py (`chatids render --html` opened in a real browser).
# Idempotent: installs with apt-get only what is missing; does nothing when all are present.
# Debian/Ubuntu; run as root (or with sudo available). Usage: scripts/install_system_packages.sh
set -euo pipefail

packages=(chromium chromium-driver)
# The executable each package provides, to tell whether it is already there.
declare -A provides=([chromium]=chromium [chromium-driver]=chromedriver)

missing=()
for pkg in "${packages[@]}"; do
  if command -v "${provides[$pkg]}" >/dev/null 2>&1 || dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "install_system_packages: $pkg already installed"
  else
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_packages: apt-get not found; install ${missing[*]} by hand" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install_system_packages: need root (or sudo) to install ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install_system_packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
