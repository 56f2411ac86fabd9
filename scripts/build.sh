#!/usr/bin/env bash
# Configures and builds onnx-mirror into ./build (Release, warnings as errors).
# Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DOMT_WERROR=ON "$@"
cmake --build build --parallel "$(nproc)"
