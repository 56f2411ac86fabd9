#!/usr/bin/python3
"""Note [Deduplicated statistics] (graph/onnx_io.cc): torch's legacy exporter shares equal
initializers, so a fresh model's BatchNorm running_mean/var become Identity(bias)/Identity(weight).
Writes tests/data/dedup_bn/conv_bn_legacy.onnx (a Conv-BN-ReLU-Linear net, fresh init, legacy
exporter without constant folding, as torchvision models export), a batch, and torch's loss
and gradients of one training-mode step (batch statistics), for tests/e2e.

    /usr/bin/python3 tests/reference/dedup_bn/make_dedup_bn.py   (re-executes in the PyPI venv)
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402


def main():
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    out = os.path.join(REPO, "tests", "data", "dedup_bn")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x = torch.randn(6, 3, 6, 6)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    path = os.path.join(out, "conv_bn_legacy.onnx")
    net.eval()
    torch.onnx.export(net, (x[:2],), path, dynamo=False, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}}, do_constant_folding=False, opset_version=17)
    g = onnx.load(path).graph
    ids = [n for n in g.node if n.op_type == "Identity"]
    assert ids, "the exporter no longer deduplicates: the file does not test what it should"
    net.train()
    loss = nn.functional.cross_entropy(net(x), y)
    loss.backward()
    ref = {"loss": np.array(loss.item(), np.float32)}
    for name, p in net.named_parameters():
        ref["grad/" + name] = p.grad.numpy()
    np.savez(os.path.join(out, "batch.npz"), input=x.numpy(), labels=y.numpy())
    np.savez(os.path.join(out, "ref.npz"), **ref)
    print("wrote", path, "with", len(ids), "Identity nodes:", [(n.input[0], n.output[0]) for n in ids])


if __name__ == "__main__":
    omt_venv.ensure(__file__, ["torch", "onnx", "numpy"])
    main()
