#!/usr/bin/env bash
# Installs what the project needs, builds it, and runs the whole test suite (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
