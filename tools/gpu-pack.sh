#!/usr/bin/env bash
# gpu-pack.sh BUILD_DIR OUT_DIR: packs what tools/gpu-check.sh needs on a GPU machine without a
# package manager into OUT_DIR/gpu-bundle.tar.gz: stripped onnx-mirror-train and cuda_tests
# (as build/...), the shared libraries they need that such a machine lacks (libs/, by
# shared/device/collect-libs.sh, libonnx_mirror.so among them) and device-env.sh. Uncompressed
# these are about 70 MB, over the device tool's 64 MiB carry limit (oneDNN alone is 40 MB), so
# they travel as one gzip file. OUT_DIR should be a folder git ignores (build-gpu/). Unpack
# there with `tar xzf OUT_DIR/gpu-bundle.tar.gz -C DIR`, then run
# `tools/gpu-check.sh DIR/build DIR/libs` from the repository root.
set -euo pipefail
BUILD=${1:?usage: tools/gpu-pack.sh BUILD_DIR OUT_DIR}
OUTDIR=${2:?usage: tools/gpu-pack.sh BUILD_DIR OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
COLLECT=$ROOT/shared/device/collect-libs.sh
[[ -f $COLLECT ]] || COLLECT=$ROOT/../shared/device/collect-libs.sh
[[ -f $COLLECT ]] || { echo "gpu-pack: shared/device/collect-libs.sh not found" >&2; exit 2; }
for f in "$BUILD/tools/onnx-mirror-train" "$BUILD/tests/cuda/cuda_tests"; do
  [[ -x $f ]] || { echo "gpu-pack: $f is missing; build with CUDA (scripts/build.sh) first" >&2; exit 2; }
done
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/build/tools" "$STAGE/build/tests/cuda" "$STAGE/libs"
cp "$BUILD/tools/onnx-mirror-train" "$STAGE/build/tools/"
cp "$BUILD/tests/cuda/cuda_tests" "$STAGE/build/tests/cuda/"
bash "$COLLECT" "$STAGE/libs" "$BUILD/tools/onnx-mirror-train" "$BUILD/tests/cuda/cuda_tests" >/dev/null
cp "$(dirname "$COLLECT")/device-env.sh" "$STAGE/libs/"
chmod u+w "$STAGE"/libs/* "$STAGE"/build/tools/* "$STAGE"/build/tests/cuda/*
strip --strip-unneeded "$STAGE"/build/tools/onnx-mirror-train "$STAGE"/build/tests/cuda/cuda_tests \
  "$STAGE"/libs/*.so* 2>/dev/null || true
mkdir -p "$OUTDIR"
tar czf "$OUTDIR/gpu-bundle.tar.gz.tmp" -C "$STAGE" build libs
mv "$OUTDIR/gpu-bundle.tar.gz.tmp" "$OUTDIR/gpu-bundle.tar.gz"
size=$(stat -c %s "$OUTDIR/gpu-bundle.tar.gz")
echo "gpu-pack: $OUTDIR/gpu-bundle.tar.gz, $((size / 1048576)) MiB ($(du -sh "$STAGE" | cut -f1) unpacked)"
if (( size > 60 * 1048576 )); then
  echo "gpu-pack: over 60 MiB, too close to the device tool's 64 MiB carry limit" >&2
  exit 1
fi
