#!/usr/bin/env bash
# Builds ONNX (checker, shape inference, version converter) from its official source release
# on PyPI into a per-version prefix, once per machine (Note [ONNX from source] in
# docs/ARCHITECTURE.md). Debian 12's libonnx-dev is 1.12: IR <= 8, opset <= 17, too old for
# what PyTorch's default exporter writes. Idempotent: a finished prefix is reused.
#
#   OMT_ONNX_PREFIX  where to install (default /opt/onnx-mirror/onnx-$VERSION)
#
# Needs Debian's protobuf (libprotobuf-dev, protobuf-compiler), python3-venv, a compiler and
# ninja (scripts/install-deps.sh installs them first). ONNX's CMake wants cmake >= 3.26,
# newer than Debian 12's 3.25, so a venv beside the prefix holds PyPI's cmake.
set -euo pipefail

ONNX_VERSION=1.20.0
ONNX_SHA256=1a93ec69996b4556062d552ed1aa0671978cfd3c17a40bf4c89a1ae169c6a4ad
prefix="${OMT_ONNX_PREFIX:-/opt/onnx-mirror/onnx-${ONNX_VERSION}}"
stamp="$prefix/.onnx-mirror-complete"

if [ -f "$stamp" ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ] && [ ! -w "$(dirname "$prefix")" ]; then SUDO=sudo; fi

start=$(date +%s)
echo "install-onnx: building ONNX ${ONNX_VERSION} into $prefix (once per machine, a few minutes)"
work="$(mktemp -d "${TMPDIR:-/tmp}/omt-onnx-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

tools="$work/venv"
/usr/bin/python3 -m venv "$tools"
"$tools/bin/pip" install --quiet --disable-pip-version-check "cmake>=3.26,<5"

# The source distribution only: no wheel, no dependencies. pip prepares its metadata in an
# isolated environment, which is why setuptools is fetched too; nothing of it is installed.
"$tools/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$work/dist" "onnx==${ONNX_VERSION}"
sdist="$work/dist/onnx-${ONNX_VERSION}.tar.gz"
echo "${ONNX_SHA256}  $sdist" | sha256sum --check --quiet
tar -xzf "$sdist" -C "$work"
src="$work/onnx-${ONNX_VERSION}"

"$tools/bin/cmake" -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DBUILD_SHARED_LIBS=OFF -DONNX_BUILD_PYTHON=OFF -DONNX_BUILD_TESTS=OFF -DONNX_ML=ON \
  -DONNX_USE_PROTOBUF_SHARED_LIBS=ON -DONNX_GEN_PB_TYPE_STUBS=OFF >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
"$tools/bin/cmake" --build "$work/build" --parallel "$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }
$SUDO "$tools/bin/cmake" --install "$work/build" >/dev/null

# ONNX's backend test data (the node tests the suite runs) ships in the same release.
$SUDO mkdir -p "$prefix/share/onnx"
$SUDO cp -r "$src/onnx/backend/test/data" "$prefix/share/onnx/test-data"
echo "$ONNX_VERSION" | $SUDO tee "$stamp" >/dev/null
echo "install-onnx: ONNX ${ONNX_VERSION} installed in $(( $(date +%s) - start )) s"
