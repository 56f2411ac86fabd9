"""Prints the PyTorch reference values of tests/ops/resize_test.cc and attention_test.cc
(torch.nn.functional.interpolate and scaled_dot_product_attention, forward and backward, in
float64) as C++ initialisers. Run with any PyTorch >= 2.5 (enable_gqa); the committed values
came from torch 2.15.0."""
import math

import torch

torch.set_default_dtype(torch.float64)


def pat(n, f):
    return torch.tensor([f(i + 1) for i in range(n)])


def show(name, t):
    cname = "kTorch" + "".join(p[:1].upper() + p[1:] for p in name.split("_"))
    print(f"const std::vector<double> {cname} = {{" + ", ".join(f"{v:.12g}" for v in t.flatten().tolist()) + "};")


x = pat(12, math.sin).reshape(1, 1, 3, 4).requires_grad_()
for name, kw in [("nearest2", dict(scale_factor=2, mode="nearest")),
                 ("bilinear_ac0", dict(size=(5, 7), mode="bilinear", align_corners=False)),
                 ("bilinear_ac1", dict(size=(5, 7), mode="bilinear", align_corners=True)),
                 ("bilinear_down", dict(size=(2, 3), mode="bilinear", align_corners=False))]:
    x.grad = None
    y = torch.nn.functional.interpolate(x, **kw)
    dy = pat(y.numel(), math.cos).reshape(y.shape)
    (y * dy).sum().backward()
    show(name + "_y", y.detach())
    show(name + "_dx", x.grad)

B, Hq, Hkv, Sq, Skv, D, Dv = 1, 4, 2, 3, 4, 2, 3
q = pat(B * Hq * Sq * D, lambda i: math.sin(0.7 * i)).reshape(B, Hq, Sq, D).requires_grad_()
k = pat(B * Hkv * Skv * D, lambda i: math.cos(0.3 * i)).reshape(B, Hkv, Skv, D).requires_grad_()
v = pat(B * Hkv * Skv * Dv, lambda i: math.sin(0.5 * i + 1)).reshape(B, Hkv, Skv, Dv).requires_grad_()
y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
w = pat(y.numel(), lambda i: math.cos(0.9 * i)).reshape(y.shape)
(y * w).sum().backward()
show("sdpa_y", y.detach())
show("sdpa_dq", q.grad)
show("sdpa_dk", k.grad)
show("sdpa_dv", v.grad)
