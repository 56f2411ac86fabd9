#!/usr/bin/env bash
# Installs what the project needs, builds it, and runs the main job: trains the CNN from
# models/ on Fashion-MNIST (Debian's dataset-fashion-mnist) with 2 CPU replicas, printing
# per-epoch time, steps/s, samples/s, loss and validation accuracy, the confusion matrix,
# per-class precision/recall/F1 and the speed-up against one replica; then evaluates the
# trained model it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
mkdir -p out
./build/tools/onnx-mirror-train train models/cnn.onnx --data fashion-mnist --replicas 2 \
  --epochs 8 --global-batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --lr-schedule cosine \
  --compare-single --metrics out/cnn_run.jsonl --report out/cnn_report.html --output out/cnn_trained.onnx
./build/tools/onnx-mirror-train eval out/cnn_trained.onnx --data fashion-mnist:test --replicas 2
