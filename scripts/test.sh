#!/usr/bin/env bash
# Installs what the project needs, builds it, and runs the whole test suite (CTest); then the
# unit tests again under ASan + UBSan and each fuzz target briefly (scripts/test-sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
cd ..
bash scripts/test-sanitize.sh
