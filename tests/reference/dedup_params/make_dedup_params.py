#!/usr/bin/python3
"""Note [Deduplicated parameters] (graph/onnx_io.cc): both of torch's exporters share
initializers of equal value, so distinct parameters that happen to be equal when the model is
exported (zero biases, unit norm weights, layers deep-copied from one) arrive as one tensor.
Trained as one, they would be tied: one value, the sum of their gradients. Writes to
tests/data/dedup_params/:

- two_bn_legacy.onnx: Conv-BN-ReLU-Conv-BN-ReLU-Linear, fresh init, the legacy exporter
  (eval mode, no constant folding, as torchvision models export): the second BatchNorm's
  weight and bias (and both running statistics) become Identity nodes of the first's.
- blocks_dynamo.onnx: two residual blocks (Linear with zero bias, LayerNorm), the second a
  deep copy of the first, a head that multiplies by the input projection's weight again (a
  real tie: one torch Parameter read twice), the default (dynamo) exporter: the second block's tensors are
  the first's initializers, read by both blocks' nodes.
- batch_*.npz and ref_*.npz: a batch and torch's loss and gradient of every parameter after
  one training-mode step, for tests/e2e.

    /usr/bin/python3 tests/reference/dedup_params/make_dedup_params.py   (re-executes in the PyPI venv)
"""
import collections
import copy
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402


def shared_initializers(path):
    import onnx
    g = onnx.load(path).graph
    inits = {i.name for i in g.initializer}
    readers = collections.Counter(i for n in g.node for i in n.input if i in inits)
    ids = [(n.input[0], n.output[0]) for n in g.node if n.op_type == "Identity" and n.input[0] in inits]
    return [k for k, v in readers.items() if v > 1], ids


def reference(net, loss_fn, feeds, out, tag):
    import numpy as np
    net.train()
    net.zero_grad()
    loss = loss_fn(net(*feeds[:-1]), feeds[-1])
    loss.backward()
    ref = {"loss": np.array(loss.item(), np.float32)}
    for name, p in net.named_parameters():
        ref["grad/" + name] = p.grad.numpy()
    np.savez(os.path.join(out, "ref_" + tag + ".npz"), **ref)
    return sorted(n for n, _ in net.named_parameters())


def main():
    import numpy as np
    import torch
    import torch.nn as nn
    out = os.path.join(REPO, "tests", "data", "dedup_params")
    os.makedirs(out, exist_ok=True)

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                        nn.Flatten(), nn.Linear(4 * 5 * 5, 3))
    x = torch.randn(6, 3, 5, 5)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    path = os.path.join(out, "two_bn_legacy.onnx")
    cnn.eval()
    torch.onnx.export(cnn, (x[:2],), path, dynamo=False, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}}, do_constant_folding=False, opset_version=17)
    shared, ids = shared_initializers(path)
    assert any(o == "4.weight" for _, o in ids), "the legacy exporter no longer shares equal BatchNorm weights"
    np.savez(os.path.join(out, "batch_cnn.npz"), input=x.numpy(), labels=y.numpy())
    names = reference(cnn, nn.functional.cross_entropy, (x, y), out, "cnn")
    print("wrote", path, "Identity nodes:", ids, "parameters:", names)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(8, 8)
            nn.init.zeros_(self.dense.bias)
            self.norm = nn.LayerNorm(8)

        def forward(self, h):
            return self.norm(h + torch.tanh(self.dense(h)))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(6, 8, bias=False)
            first = Block()
            self.blocks = nn.ModuleList([first, copy.deepcopy(first)])
            self.out = nn.Linear(6, 3)

        def forward(self, x):
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            return self.out(h @ self.embed.weight)  # embed.weight read twice: a real tie

    torch.manual_seed(1)
    net = Net()
    x = torch.randn(5, 6)
    y = torch.tensor([0, 1, 2, 1, 0])
    path = os.path.join(out, "blocks_dynamo.onnx")
    net.eval()
    dim = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(net, (x[:2],), path, dynamo=True, input_names=["input"], output_names=["logits"],
                      dynamic_shapes=({0: dim},), external_data=False)
    shared, ids = shared_initializers(path)
    assert "blocks.0.dense.weight" in shared, "the dynamo exporter no longer shares equal initializers: " + str(shared)
    np.savez(os.path.join(out, "batch_blocks.npz"), input=x.numpy(), labels=y.numpy())
    names = reference(net, nn.functional.cross_entropy, (x, y), out, "blocks")
    print("wrote", path, "shared initializers:", shared, "parameters:", names)


if __name__ == "__main__":
    omt_venv.ensure(__file__, ["torch", "onnx", "numpy"])
    main()
