#!/usr/bin/env bash
# Note [Fuzzing and sanitizers] in docs/ARCHITECTURE.md. Builds onnx-mirror with ASan + UBSan
# (GCC, CUDA off) into ./build-asan and runs the unit tests there, every finding fatal; then
# builds the libFuzzer targets with clang into ./build-fuzz and fuzzes each for
# a fixed count of seeded inputs from the committed corpus. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
jobs="$(nproc)"

cmake -S . -B build-asan "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DOMT_WITH_CUDA=OFF \
  -DOMT_SANITIZE=ON
cmake --build build-asan --parallel "$jobs"

# halt_on_error: the first report ends the test (UBSan's too, with -fno-sanitize-recover);
# leaks fail it as well. No test is excluded.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
(cd build-asan && ctest -L unit --output-on-failure --parallel "$jobs" --timeout 900)

cmake -S . -B build-fuzz "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DOMT_WITH_CUDA=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DOMT_FUZZ=ON -DOMT_BUILD_TESTS=OFF
cmake --build build-fuzz --target omt_fuzz --parallel "$jobs"
(cd build-fuzz && ctest -L fuzz --output-on-failure)
