#!/usr/bin/env bash
# Installs what the project needs and builds it; runs the unit tests under ASan + UBSan and
# each fuzz target briefly (scripts/test-sanitize.sh); then the whole test suite (CTest) on
# the release build, whose summary is the last thing printed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/test-sanitize.sh
cd build
ctest --output-on-failure --parallel "$(nproc)" --timeout 900
