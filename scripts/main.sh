#!/usr/bin/env bash
# Installs what the project needs, builds it, and runs the main job: the CNN from models/ on
# the Fashion-MNIST test set (Debian's dataset-fashion-mnist), split across 2 CPU replicas.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/tools/onnx-mirror-train inspect models/cnn.onnx
./build/tools/onnx-mirror-train predict models/cnn.onnx --data fashion-mnist:test --replicas 2 \
  --output build/cnn_predictions.npz
