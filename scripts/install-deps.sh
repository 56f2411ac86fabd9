#!/usr/bin/env bash
# Installs every Debian package onnx-mirror needs to build, test and run its main job.
# clang and libclang-rt-14-dev (libFuzzer, a "Recommends" that --no-install-recommends skips)
# are for the fuzz targets of scripts/test-sanitize.sh; the ASan/UBSan build uses GCC's.
# Idempotent; run as root (CI and the dev machines are root) or with sudo available.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler python3-venv python3-pip
  libgloo-dev libhiredis-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev libzip-dev libssl-dev
  dataset-fashion-mnist
  redis-server iproute2
  clang libclang-rt-14-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ONNX >= 1.20 from its source release (Debian 12 has 1.12); cached per version.
bash "$(dirname "$0")/install-onnx.sh"
