#!/usr/bin/python3
"""PyTorch reference data for the autodiff and optimizer tests (tests/integration).

For each model (MLP, CNN with training-mode BatchNorm, Transformer encoder layer, GRU
classifier, MSE regression) and each opset (13, 17) it writes tests/reference/<name>_op<k>.onnx
and <name>.npz with: the batch inputs (by ONNX input name), 'labels', the loss and
'grad/<param>' from torch autograd, and the parameters (and BatchNorm running statistics)
after 3 SGD-momentum steps ('sgd/<param>') and after 3 Adam steps ('adam/<param>').
Parameters are exported without constant folding, so ONNX initializer names are torch's
parameter names. Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/make_reference.py
"""
import copy
import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
SGD = dict(lr=0.05, momentum=0.9)
# eps 1e-6 rather than 1e-8: some gradients are exactly zero in theory (a bias before
# BatchNorm, attention key biases) and Adam would otherwise amplify round-off noise in them.
ADAM = dict(lr=0.01, eps=1e-6)
STEPS = 3


class MLP(nn.Module):
    loss = "softmax_cross_entropy"

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

    @staticmethod
    def batch(g):
        return [torch.randn(8, 12, generator=g)], torch.randint(0, 5, (8,), generator=g)


class CNNBN(nn.Module):
    loss = "softmax_cross_entropy"

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))

    @staticmethod
    def batch(g):
        return [torch.randn(6, 1, 8, 8, generator=g)], torch.randint(0, 3, (6,), generator=g)


class Transformer(nn.Module):
    loss = "mse"

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                                dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)

    @staticmethod
    def batch(g):
        return [torch.randn(3, 5, 8, generator=g)], torch.randn(3, 5, 8, generator=g)


class GRUNet(nn.Module):
    loss = "softmax_cross_entropy"

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(input_size=4, hidden_size=6, batch_first=True)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        _, h = self.gru(x)
        return self.fc(h[0])

    @staticmethod
    def batch(g):
        return [torch.randn(5, 7, 4, generator=g)], torch.randint(0, 3, (5,), generator=g)


class Regression(nn.Module):
    loss = "mse"

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.fc2 = nn.Linear(10, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))

    @staticmethod
    def batch(g):
        return [torch.randn(16, 6, generator=g)], torch.randn(16, 1, generator=g)


MODELS = {"mlp": MLP, "cnn_bn": CNNBN, "transformer": Transformer, "gru": GRUNet, "regression": Regression}


def loss_fn(kind, out, labels):
    if kind == "softmax_cross_entropy":
        return nn.functional.cross_entropy(out, labels)
    return nn.functional.mse_loss(out, labels)


def state_arrays(model, prefix):
    out = {prefix + n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    for n, b in model.named_buffers():
        if n.endswith("running_mean") or n.endswith("running_var"):
            out[prefix + n] = b.detach().numpy().copy()
    return out


def run_steps(model, kind, inputs, labels, make_opt):
    m = copy.deepcopy(model)
    m.train()
    opt = make_opt(m.parameters())
    for _ in range(STEPS):
        opt.zero_grad()
        loss_fn(kind, m(*inputs), labels).backward()
        opt.step()
    return m


def restore_buffers(path, model):
    """Tracing in training mode runs the model and moves BatchNorm's running statistics;
    write the untouched values back so the ONNX file starts where torch's reference does."""
    import onnx
    from onnx import numpy_helper

    buffers = {n: b.detach().numpy() for n, b in model.named_buffers()}
    m = onnx.load(path)
    for init in m.graph.initializer:
        if init.name in buffers and buffers[init.name].dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(buffers[init.name], init.name))
    onnx.save(m, path)


def main():
    for name, cls in MODELS.items():
        torch.manual_seed(0)
        model = cls()
        # Perturb every parameter: torch's exporter merges initializers with equal values
        # (LayerNorm's ones and zeros would become one shared tensor in the ONNX file).
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        g = torch.Generator().manual_seed(1)
        inputs, labels = cls.batch(g)
        arrays = {"input": inputs[0].numpy(), "labels": labels.numpy()}
        # Gradients (training mode: BatchNorm uses batch statistics).
        m = copy.deepcopy(model)
        m.train()
        loss = loss_fn(cls.loss, m(*inputs), labels)
        loss.backward()
        arrays["loss"] = np.array(loss.item(), dtype=np.float32)
        for n, p in m.named_parameters():
            arrays["grad/" + n] = p.grad.numpy().copy()
        arrays.update(state_arrays(run_steps(model, cls.loss, inputs, labels,
                                             lambda ps: torch.optim.SGD(ps, **SGD)), "sgd/"))
        arrays.update(state_arrays(run_steps(model, cls.loss, inputs, labels,
                                             lambda ps: torch.optim.Adam(ps, **ADAM)), "adam/"))
        np.savez(os.path.join(HERE, name + ".npz"), **arrays)
        for opset in (13, 17):
            export_model = copy.deepcopy(model)
            training = torch.onnx.TrainingMode.TRAINING if name == "cnn_bn" else torch.onnx.TrainingMode.EVAL
            export_model.train(name == "cnn_bn")
            dynamic = {"input": {0: "batch"}, "output": {0: "batch"}}
            torch.onnx.export(export_model, tuple(inputs), os.path.join(HERE, f"{name}_op{opset}.onnx"),
                              input_names=["input"], output_names=["output"], opset_version=opset,
                              do_constant_folding=False, training=training,
                              dynamic_axes=dynamic if name != "gru" else None)
            restore_buffers(os.path.join(HERE, f"{name}_op{opset}.onnx"), model)
        print("wrote", name)


if __name__ == "__main__":
    main()
