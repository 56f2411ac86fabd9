#!/usr/bin/python3
"""tests/data/dead_taps/conv_on_1x1.onnx: x [N, 4, 1, 1] -> Conv w [8, 4, 3, 3] + b, pads 1 ->
Flatten -> logits [N, 8]. On a 1x1 map only each kernel's centre tap reads input, so the
trainer trains w cropped to it (Note [Kernel taps that read only padding]); the API test
ApiTest.CroppedWeightsReachTheStoreWhenRead reads the store through the embedding API.

  /usr/bin/python3 tests/reference/dead_taps/make_conv_on_1x1.py   (re-executes in the PyPI venv)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402

omt_venv.ensure(__file__, ["onnx", "numpy"])
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OUT = os.path.join(REPO, "tests", "data", "dead_taps", "conv_on_1x1.onnx")

rng = np.random.default_rng(7)
w = (0.3 * rng.standard_normal((8, 4, 3, 3))).astype(np.float32)
b = (0.1 * rng.standard_normal(8)).astype(np.float32)
conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
flat = helper.make_node("Flatten", ["c"], ["logits"])
graph = helper.make_graph(
    [conv, flat], "conv_on_1x1",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 1, 1])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 8])],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", 8, 1, 1])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 7
onnx.checker.check_model(model)
os.makedirs(os.path.dirname(OUT), exist_ok=True)
onnx.save(model, OUT)
print("wrote", os.path.normpath(OUT))
