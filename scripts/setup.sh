#!/usr/bin/env bash
# Installs every Debian package Strata's build and tests need (idempotent). CUDA/NCCL come with
# the CUDA toolkit already on these machines; without nvcc the CUDA backends are simply skipped.
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config git
      nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3 libeigen3-dev libboost-graph-dev
      catch2 libbenchmark-dev clang libclang-rt-14-dev lld python3
      # strata-gui (Qt6 Widgets, SVG export) and a font for its offscreen rendering in tests
      qt6-base-dev qt6-svg-dev fonts-dejavu-core)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all build dependencies present"
