"""Writes the Note [Data propagation budget] cases of tests/graph/onnx_fuzz_findings_test.cc
into tests/fuzz/corpus/onnx (the fuzz_onnx corpus, which every build replays).
Run with any python that has `onnx`: python3 tests/fuzz/make_propagation_cases.py"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "onnx")


def save(name, nodes, inputs, outputs, inits=(), opset=20, value_info=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits), value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name + ".onnx"))


# Squeeze at opset 10 (axes an attribute) of an int64 input declared 2^40 long: data
# propagation made one dimension per element.
save("oom_squeeze_opset10_input_2p40",
     [helper.make_node("Squeeze", ["x"], ["y"])],
     [helper.make_tensor_value_info("x", TensorProto.INT64, [1 << 40])],
     [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])], opset=10)

# ConstantOfShape of an initializer [2^40]: shape inference alone (no declaration) finds the
# static length, then Cast's data propagation would expand it.
save("oom_cast_of_constantofshape_2p40",
     [helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Cast", ["c"], ["y"], to=TensorProto.INT64)],
     [], [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])],
     inits=[numpy_helper.from_array(np.array([1 << 40], dtype=np.int64), "s")])

# A chain of Concats of a 1,000-element value with itself: each doubles the propagated values.
nodes, prev = [], "x"
for i in range(14):
    nodes.append(helper.make_node("Concat", [prev, prev], [f"c{i}"], axis=0))
    prev = f"c{i}"
save("oom_concat_doubling_chain",
     nodes + [helper.make_node("Cast", [prev], ["y"], to=TensorProto.FLOAT)],
     [helper.make_tensor_value_info("x", TensorProto.INT64, [1000])],
     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])

# Within the bounds: a 1-D float input of 100,000 elements into Add and Cast imports.
save("long_1d_add_within_budget",
     [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=TensorProto.DOUBLE)],
     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [100000]),
      helper.make_tensor_value_info("b", TensorProto.FLOAT, [100000])],
     [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [100000])])
