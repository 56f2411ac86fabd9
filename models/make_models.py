#!/usr/bin/python3
"""Generates the small models in models/ and the PyTorch reference outputs the tests compare
against. Run with Debian's python3-torch:  /usr/bin/python3 models/make_models.py
The C++ build and tests never run Python; the outputs of this script are committed.

Models (input 'input' float32[batch,1,28,28], output 'logits' float32[batch,10]):
  mlp.onnx  784-512-256-10 ReLU MLP
  cnn.onnx  conv 1->32 3x3, relu, maxpool 2, conv 32->64 3x3, relu, maxpool 2, fc 128, fc 10
and, for the GPU benchmark (tools/gpu-check.sh), a regression model:
  transformer_d256.onnx  one nn.TransformerEncoderLayer (d_model 256, 8 heads, feed-forward
                         1024, no dropout, batch first): input float32[batch,64,256] ->
                         output float32[batch,64,256], trained with mse (3.2 MB)
"""
import gzip
import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
FMNIST = os.environ.get("OMT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
OPSET = 17


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.flatten(x)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        return self.fc2(x)


def export(model, path, opset=OPSET):
    model.eval()
    dummy = torch.zeros(2, 1, 28, 28)
    torch.onnx.export(model, dummy, path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=opset, do_constant_folding=True)


def test_images(count):
    with gzip.open(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")) as f:
        data = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    return (data[:count].astype(np.float32) / 255.0).copy()


class SmallBN(nn.Module):
    """Conv + BatchNorm, exported in training mode (the opset-13 five-output BatchNorm form)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def write_test_models(test_dir):
    """Small models for the import tests (tests/data)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    os.makedirs(test_dir, exist_ok=True)
    torch.manual_seed(0)
    export(CNN(), os.path.join(test_dir, "cnn_opset13.onnx"), opset=13)
    torch.manual_seed(0)
    bn = SmallBN()
    bn.train()
    torch.onnx.export(bn, torch.zeros(2, 1, 8, 8), os.path.join(test_dir, "bn_train_opset13.onnx"),
                      input_names=["input"], output_names=["y"], opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    # A valid model with an op the runtime has no kernel for (Det) next to a supported one.
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["d"], name="det_node"),
         helper.make_node("Relu", ["d"], ["y"], name="relu_node")],
        "unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(test_dir, "unsupported_det.onnx"))
    # A trainable model through ops that have CPU kernels but no gradient rule yet.
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 2, 3, 3)).astype(np.float32), "deconv.weight"),
             numpy_helper.from_array(np.ones(2, np.float32), "norm.scale"),
             numpy_helper.from_array(np.zeros(2, np.float32), "norm.bias"),
             numpy_helper.from_array(rng.standard_normal((2, 10)).astype(np.float32), "fc.weight")]
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["input", "deconv.weight"], ["up"], name="deconv"),
         helper.make_node("InstanceNormalization", ["up", "norm.scale", "norm.bias"], ["normed"], name="norm"),
         helper.make_node("GlobalAveragePool", ["normed"], ["pooled"], name="pool"),
         helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
         helper.make_node("MatMul", ["flat", "fc.weight"], ["logits"], name="fc")],
        "no_grad_ops", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(test_dir, "no_gradient_ops.onnx"))


def write_transformer(path):
    """The encoder layer of gpu-check.sh's PyTorch row, exported as the tests' reference
    Transformer is (tests/reference/make_reference.py): eval mode, no constant folding."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0,
                                       batch_first=True)
    # torch's exporter merges initializers with equal values (LayerNorm's ones and zeros
    # would become one tensor shared by both norms): perturb them apart.
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.01 * torch.randn_like(p))
    layer.eval()
    torch.onnx.export(layer, (torch.zeros(2, 64, 256),), path, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      opset_version=OPSET, do_constant_folding=False)
    print("wrote", path)


def main():
    images = test_images(64)
    for name, cls in (("mlp", MLP), ("cnn", CNN)):
        torch.manual_seed(0)
        model = cls()
        path = os.path.join(HERE, name + ".onnx")
        export(model, path)
        with torch.no_grad():
            logits = model(torch.from_numpy(images)).numpy()
        np.savez(os.path.join(HERE, "reference", name + "_predict.npz"), input=images, logits=logits)
        print("wrote", path)
    write_test_models(os.path.join(HERE, "..", "tests", "data"))
    write_transformer(os.path.join(HERE, "transformer_d256.onnx"))


if __name__ == "__main__":
    main()
