// The onnx-mirror embedding API: load an ONNX model, predict across local replicas, and
// fine-tune the same model in place. Link onnx_mirror::onnx_mirror (find_package(onnx_mirror)).
// These headers include only the standard library; every error is an onnx_mirror::Error.
#pragma once

#include "onnx_mirror/arrays.h"
#include "onnx_mirror/collectives_bench.h"
#include "onnx_mirror/data.h"
#include "onnx_mirror/errors.h"
#include "onnx_mirror/files.h"
#include "onnx_mirror/metrics.h"
#include "onnx_mirror/model.h"
#include "onnx_mirror/model_info.h"
#include "onnx_mirror/tensor.h"
#include "onnx_mirror/trainer.h"
