#!/usr/bin/env bash
# The direction of dependencies (../shared/ARCHITECTURE.md, docs/ARCHITECTURE.md), checked on
# every #include of the project's own headers: a folder may include only the folders listed
# for it, and ONNX's protobuf headers appear only in graph/onnx_io.cc (import and export),
# graph/onnx_guards.{h,cc} (its checks on the protobuf) and graph/torch_parameters.{h,cc}
# (torch parameters its exporters merged or deleted).
# Prints every violation as FILE:LINE: FOLDER may not include TARGET, and exits 1 if any.
# Usage: check_layering.sh SOURCE_DIR
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

declare -A allowed=(
  [common]="common"
  [graph]="common graph"
  [backends]="common backends"
  [collectives]="common collectives"
  [runtime]="common graph backends collectives runtime"
  [api]="common graph backends collectives runtime api onnx_mirror"
  [include/onnx_mirror]="onnx_mirror"
  [tools]="onnx_mirror tools"
)

bad=0
folders=(common graph backends collectives runtime api include/onnx_mirror tools)
for folder in "${folders[@]}"; do
  [[ -d "$folder" ]] || continue
  while IFS=: read -r file line text; do
    target="$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$text")"
    if [[ " ${allowed[$folder]} " != *" $target "* ]]; then
      echo "$file:$line: $folder/ may not include $target/ ($text)"
      bad=1
    fi
  done < <(grep -rnE '^\s*#\s*include "[a-z_]+/' "$folder" --include='*.h' --include='*.cc' \
             --include='*.cu' --include='*.cuh' || true)
done

while IFS=: read -r file line text; do
  if [[ "$file" != graph/onnx_io.cc && "$file" != graph/onnx_guards.[hc]* && "$file" != graph/torch_parameters.[hc]* ]]; then
    echo "$file:$line: ONNX's headers belong in graph/onnx_io.cc, graph/onnx_guards.{h,cc} and graph/torch_parameters.{h,cc} only ($text)"
    bad=1
  fi
done < <(for folder in "${folders[@]}"; do
           [[ -d "$folder" ]] && grep -rnE '^\s*#\s*include <onnx/' "$folder" --include='*.h' --include='*.cc' \
             --include='*.cu' --include='*.cuh'
         done || true)

if [[ $bad == 0 ]]; then echo "layering: every include follows the direction of dependencies"; fi
exit $bad
