"""Writes tests/reference/attention_einsum_resize.onnx and .npz for
tests/integration/op_model_test.cc: a small model whose exported graph holds the standard
opset-23 Attention (GQA, is_causal), Einsum and Resize (bilinear) nodes that torch.onnx
(dynamo) writes for scaled_dot_product_attention, einsum and interpolate, with torch's
float32 MSE loss and parameter gradients. Run by hand in a venv with torch >= 2.9,
onnxscript and onnx (tests/reference/modern/make_modern.py makes one):

    $HOME/.cache/onnx-mirror/venv-modern/bin/python tests/reference/make_op_model.py

The committed files came from torch 2.15.0."""
import os

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = torch.nn.Parameter(torch.randn(8, 8) * 0.3)
        self.wk = torch.nn.Parameter(torch.randn(8, 4) * 0.3)
        self.wv = torch.nn.Parameter(torch.randn(8, 4) * 0.3)
        self.w = torch.nn.Parameter(torch.randn(8, 6) * 0.3)
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x, img):
        b, s, _ = x.shape
        q = (x @ self.wq).view(b, s, 4, 2).transpose(1, 2)  # 4 query heads
        k = (x @ self.wk).view(b, s, 2, 2).transpose(1, 2)  # 2 KV heads (GQA)
        v = (x @ self.wv).view(b, s, 2, 2).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        e = torch.einsum("bsi,ij->bsj", a.transpose(1, 2).reshape(b, s, 8), self.w)
        r = torch.nn.functional.interpolate(self.conv(img), scale_factor=2, mode="bilinear", align_corners=False)
        return e.sum(dim=1) + r.mean(dim=(1, 2, 3)).unsqueeze(1)


m = Model()
x, img = torch.randn(3, 5, 8), torch.randn(3, 1, 4, 4)
path = os.path.join(HERE, "attention_einsum_resize.onnx")
torch.onnx.export(m, (x, img), path, opset_version=23, dynamo=True, input_names=["x", "img"],
                  output_names=["y"], external_data=False)
ops = sorted({n.op_type for n in onnx.load(path).graph.node})
assert {"Attention", "Einsum", "Resize"} <= set(ops), ops
y = m(x, img)
target = torch.randn_like(y)
loss = torch.nn.functional.mse_loss(y, target)
loss.backward()
out = {"feed/x": x.numpy(), "feed/img": img.numpy(), "target": target.numpy(), "loss": loss.detach().numpy()}
out.update({"grad/" + n: p.grad.numpy() for n, p in m.named_parameters()})
np.savez(os.path.join(HERE, "attention_einsum_resize.npz"), **out)
print("ops:", ops, "loss:", loss.item())
