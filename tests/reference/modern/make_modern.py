#!/usr/bin/python3
"""Reference data for issue 14 ("Train what today's exporters write").

Run by hand, never by the build or the tests (about 4 minutes on 2 cores):

    /usr/bin/python3 tests/reference/modern/make_modern.py                 # all models
    /usr/bin/python3 tests/reference/modern/make_modern.py resnet gru      # only some
    /usr/bin/python3 tests/reference/modern/make_modern.py probe           # only the dedup probe

The first run creates a venv at $HOME/.cache/onnx-mirror/venv-modern (override with
OMT_MODERN_VENV) with Debian's /usr/bin/python3 and pip-installs the current torch,
torchvision, transformers, onnx, onnxruntime, onnxscript and numpy from PyPI (torch's
default Linux wheel pulls the CUDA libraries, several GB; only the CPU is used). Later runs
reuse it. The script then re-executes itself inside the venv. Versions go to manifest.json.

Models (small, seeded random init, dropout 0): a torchvision ResNet (BasicBlock, BatchNorm),
MobileNetV3-small and EfficientNet-B0 at reduced width, a torchvision ViT, HF BERT and
GPT-2 from tiny configs, nn.TransformerEncoder (norm_first, gelu), a bidirectional GRU.
Each is exported into tests/data/modern/ as <model>_<variant>.onnx with the variants
  dynamo        torch.onnx.export(model.eval(), ..., dynamo=True) (default opset, optimize=True)
  legacy        torch.onnx.export(model.eval(), ..., dynamo=False, opset_version=17)
and, for the BatchNorm models, legacy_train (model.train(), training=TrainingMode.TRAINING,
do_constant_folding=False); the ResNet also gets dynamo_noopt (optimize=False) and tries
dynamo_train (model.train()); a file identical to another one is not kept. Where an exporter
folded BatchNorm into Conv (dynamo optimize=True, legacy eval), the references are those of
the BN-fused torch model (torch.nn.utils.fusion.fuse_conv_bn_eval with the file's values). The batch
dimension is symbolic (dynamic_shapes / dynamic_axes). It writes
  <model>_ref.npz                 feeds (by ONNX input name), labels, loss, outputs, and the
                                  gradient and 3-SGD-step references keyed by ONNX initializer
  <model>_<variant>_params.json   every initializer: name, shape, dtype, kind, trainable, the
                                  torch tensor(s) it holds, the transform, how that was found
                                  (what the file says, or value matching), its npz keys
  manifest.json                   versions, conventions, per model the float32-vs-float64
                                  difference, per file: export call and errors, checker,
                                  onnxruntime vs torch, opset, IR version, op histogram,
                                  inputs/outputs, BatchNorm handling, what the file records,
                                  a mapping check (the stepped values written into the file
                                  through the mapping, run in onnxruntime, against torch)

npz keys (float64 unless said):
  <input name>            the feed, float32 / int64, exactly as the ONNX graph input is named
  labels                  int64 class labels, or the float32 target of an MSE loss
  loss, loss32            the training-mode loss in float64 and in float32
  out/<output>, out32/<output>   eval-mode forward output in float64 / float32
  train_out/<output>      train-mode forward output (BatchNorm models: batch statistics)
  grad/<init>             d loss / d initializer, in the initializer's layout (a transposed
                          copy gets the transposed gradient; tied copies get the tied total)
  sgd/<init>              the initializer after 3 plain SGD steps (lr 0.1) on the same batch,
                          BatchNorm running statistics included
  grad_partial/<init>     for tied copies: the gradient through this copy's use alone
  A key is shared by every variant whose initializer of that name holds the same array; a
  variant whose array differs gets <variant>/grad/<init> etc. ref_keys in params.json says.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(REPO, "tests", "data", "modern")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402
PACKAGES = ["torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"]


# ----------------------------------------------------------------------------------------
# Everything below runs inside the venv (load_libs() imports torch & co. as globals).

import collections
import contextlib
import copy
import io
import json
import re
import time
import traceback
import warnings

SEED = 1234
LR = 0.1        # plain SGD, no momentum, no weight decay
STEPS = 3       # SGD steps on the same batch
VARIANTS_PLAIN = ["dynamo", "legacy"]
# legacy_train first: its references (the torch model as it trains) claim the shared npz keys
VARIANTS_BN = ["legacy_train", "dynamo", "legacy"]

# dynamo value_info metadata keys (see the report in manifest.json "what_the_files_record")
K_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
K_ORIG = "pkg.torch.onnx.original_node_name"
K_FOLDED = "pkg.onnxscript.optimizer.folded_from"
K_SIG = "pkg.torch.export.ExportedProgram.graph_signature"
K_RULE = "pkg.onnxscript.rewriter.rule_name"


def load_libs():
    global np, torch, nn, F, onnx, numpy_helper, ort
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
    from torch import nn


# ---------------------------------------------------------------------------- the models

class Spec:
    """One model: how to build it, its batch, its loss, the ONNX input/output names."""

    def __init__(self, name, build, batch, loss, inputs, outputs, has_bn=False, untie=None, note="",
                 legacy_workaround=None):
        self.name, self.build, self.batch, self.loss = name, build, batch, loss
        self.legacy_workaround = legacy_workaround  # (what, fn(model) -> model) tried if legacy fails
        self.inputs, self.outputs, self.has_bn, self.untie, self.note = inputs, outputs, has_bn, untie, note
        self.variants = VARIANTS_BN if has_bn else VARIANTS_PLAIN
        if name == "resnet":
            self.variants = ["legacy_train", "dynamo_noopt", "dynamo", "legacy", "dynamo_train"]


def image_batch(n, classes, hw=32):
    def batch(g):
        x = torch.randn(n, 3, hw, hw, generator=g)
        return collections.OrderedDict(input=x), torch.randint(0, classes, (n,), generator=g)
    return batch


def build_resnet():
    """torchvision's ResNet/BasicBlock/_make_layer/forward with widths 4-8-8-16 (6.5k params)."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class SmallResNet(ResNet):
        def __init__(self, widths=(4, 8, 8, 16), num_classes=10):
            nn.Module.__init__(self)  # ResNet.__init__ hard-codes 64..512 channels
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = widths[0], 1, 1, 64
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, widths[0], 1)
            self.layer2 = self._make_layer(BasicBlock, widths[1], 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, widths[2], 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, widths[3], 1, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)

    return SmallResNet()


def build_mobilenet():
    from torchvision.models import mobilenet_v3_small
    return mobilenet_v3_small(width_mult=0.1, reduced_tail=True, num_classes=10, dropout=0.0)


def build_efficientnet():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.1, depth_mult=0.25)
    return EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10, last_channel=last_channel)


def build_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                             dropout=0.0, attention_dropout=0.0, num_classes=10)


def build_bert():
    from transformers import BertConfig, BertForSequenceClassification

    class Bert(BertForSequenceClassification):  # a subclass keeps the parameter names
        def forward(self, input_ids, attention_mask, token_type_ids):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).logits

    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, type_vocab_size=2, num_labels=3,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                     pad_token_id=0)
    return Bert(cfg)


def bert_batch(g):
    ids = torch.randint(1, 50, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0          # the second sequence has 3 padding positions
    ids[1, 5:] = 0
    tt = torch.zeros(2, 8, dtype=torch.int64)
    tt[:, 4:] = 1
    tt[1, 5:] = 0
    feeds = collections.OrderedDict(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    return feeds, torch.randint(0, 3, (2,), generator=g)


def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    class GPT2(GPT2LMHeadModel):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    cfg = GPT2Config(vocab_size=48, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0,
                     tie_word_embeddings=True)
    return GPT2(cfg)


def gpt2_batch(g):
    seq = torch.randint(0, 48, (2, 9), generator=g)
    return collections.OrderedDict(input_ids=seq[:, :8]), seq[:, 1:].contiguous()


def gpt2_untie(m):
    """Give lm_head its own copy of the embedding, so the two uses' gradients come apart."""
    m.lm_head.weight = nn.Parameter(m.transformer.wte.weight.detach().clone())
    # which torch use each ONNX consumer op stands for
    return {"Gather": "transformer.wte.weight", "MatMul": "lm_head.weight", "Gemm": "lm_head.weight"}


def gpt2_ones_mask(m):
    """Pass attention_mask=ones: transformers then skips find_packed_sequence_indices, whose
    torch.diff the legacy exporter cannot export. Same function, same parameter names."""
    import types
    base = type(m).__mro__[1]  # GPT2LMHeadModel

    def forward(self, input_ids):
        return base.forward(self, input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                            use_cache=False).logits

    m.forward = types.MethodType(forward, m)
    return m


def build_encoder():
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def seq_batch(shape, target_shape):
    def batch(g):
        return (collections.OrderedDict(input=torch.randn(*shape, generator=g)),
                torch.randn(*target_shape, generator=g))
    return batch


def build_gru():
    class GRUHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(8, 16, batch_first=True, bidirectional=True)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            y, _ = self.gru(x)
            return self.head(y)

    return GRUHead()


def specs():
    return [
        # Input sizes: with BatchNorm in train mode on 1x1 maps of a few samples, 3 SGD steps at
        # lr 0.1 become chaotic (float32 and float64 runs part by up to 50% for EfficientNet at
        # 4x32x32); these sizes keep them within ~1e-5 of each other (manifest f32_vs_f64).
        Spec("resnet", build_resnet, image_batch(4, 10, 48), "cross_entropy", ["input"], ["logits"], has_bn=True,
             note="torchvision ResNet(BasicBlock) code, layers [1,1,1,1], widths 4-8-8-16"),
        Spec("mobilenet_v3_small", build_mobilenet, image_batch(4, 10), "cross_entropy", ["input"], ["logits"],
             has_bn=True, note="torchvision mobilenet_v3_small(width_mult=0.1, reduced_tail=True, dropout=0)"),
        Spec("efficientnet_b0", build_efficientnet, image_batch(8, 10, 48), "cross_entropy", ["input"], ["logits"],
             has_bn=True, note="torchvision EfficientNet(_efficientnet_conf('efficientnet_b0', width_mult=0.1, "
                               "depth_mult=0.25): one MBConv per stage, stage 1 residual), dropout=0, stochastic_depth_prob=0"),
        Spec("vit", build_vit, image_batch(2, 10), "cross_entropy", ["input"], ["logits"],
             note="torchvision VisionTransformer(image 32, patch 8, 2 layers, 2 heads, hidden 16, mlp 32)"),
        Spec("bert", build_bert, bert_batch, "cross_entropy", ["input_ids", "attention_mask", "token_type_ids"],
             ["logits"], note="transformers BertForSequenceClassification, tiny BertConfig, default attention"),
        Spec("gpt2", build_gpt2, gpt2_batch, "token_cross_entropy", ["input_ids"], ["logits"], untie=gpt2_untie,
             legacy_workaround=("forward passes attention_mask=torch.ones_like(input_ids) (transformers then skips "
                                "the torch.diff of find_packed_sequence_indices)", gpt2_ones_mask),
             note="transformers GPT2LMHeadModel, tiny GPT2Config, tied embeddings, default attention"),
        Spec("transformer_encoder", build_encoder, seq_batch((2, 8, 16), (2, 8, 16)), "mse", ["input"], ["output"],
             note="nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0, gelu, batch_first, "
                  "norm_first), 2 layers)"),
        Spec("gru", build_gru, seq_batch((2, 6, 8), (2, 6, 4)), "mse", ["input"], ["output"],
             note="nn.GRU(8, 16, batch_first, bidirectional) + nn.Linear(32, 4) on every step"),
    ]


LOSSES = {
    "cross_entropy": "torch.nn.functional.cross_entropy(logits, labels) (mean over the batch; int64 labels)",
    "token_cross_entropy": "cross_entropy(logits.reshape(-1, V), labels.reshape(-1)), mean over all B*T tokens; "
                           "labels[b, t] = seq[b, t + 1] where input_ids = seq[:, :T] (the next-token convention "
                           "of HF's GPT2LMHeadModel(labels=...), pre-shifted so every position has a target and "
                           "no ignore_index is needed)",
    "mse": "torch.nn.functional.mse_loss(output, labels) (mean over all elements; float32 target)",
}


def loss_fn(kind, out, labels):
    if kind == "cross_entropy":
        return F.cross_entropy(out, labels)
    if kind == "token_cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
    return F.mse_loss(out, labels)


def perturb(model, g):
    """Random init is often constant (LayerNorm/BatchNorm weight 1, biases 0, BN statistics 0/1).
    Constant tensors make value matching ambiguous, let the optimizer merge equal initializers
    and hide BN folding, so they get seeded noise; so do parameters equal to another one
    (nn.TransformerEncoder deep-copies its layer: both layers start equal, and both exporters
    then store the two layers' weights once, see manifest "dedup_probe")."""
    with torch.no_grad():
        seen = set()
        for _, p in model.named_parameters():
            flat = p.reshape(-1)
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            if p.detach().numpy().tobytes() in seen:
                p.add_(0.01 * torch.randn(p.shape, generator=g))
            seen.add(p.detach().numpy().tobytes())
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.2, 0.2, generator=g)
                mod.running_var.uniform_(0.5, 1.5, generator=g)


# ------------------------------------------------------------------------ torch references

def to_dtype(t, dtype):
    return t.to(dtype) if t.is_floating_point() else t


def torch_refs(spec, model32, feeds, labels, dtype, train_mode=None):
    """Eval outputs, train-mode loss and gradients, 3 SGD steps; all in `dtype`."""
    args = [to_dtype(v, dtype) for v in feeds.values()]
    lab = to_dtype(labels, dtype)
    fresh = lambda: copy.deepcopy(model32).to(dtype)  # noqa: E731
    if train_mode is None:  # BN models train with batch statistics; the others have no dropout left
        train_mode = spec.has_bn
    r = {}
    with torch.no_grad():
        r["out_eval"] = fresh().eval()(*args)
    m = fresh().train(train_mode)
    out = m(*args)
    loss = loss_fn(spec.loss, out, lab)
    named = dict(m.named_parameters())  # tied parameters appear once
    r["train_out"] = out.detach()
    r["loss"] = loss.detach()
    r["grads"] = dict(zip(named, [g.detach() for g in torch.autograd.grad(loss, list(named.values()))]))
    if spec.untie:
        mu = fresh().train(train_mode)
        r["use_map"] = spec.untie(mu)
        named_u = dict(mu.named_parameters())
        lu = loss_fn(spec.loss, mu(*args), lab)
        r["partial_grads"] = dict(zip(named_u, [g.detach() for g in torch.autograd.grad(lu, list(named_u.values()))]))
    m = fresh().train(train_mode)
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    r["step_losses"] = []
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss = loss_fn(spec.loss, m(*args), lab)
        step_loss.backward()
        opt.step()
        r["step_losses"].append(float(step_loss))
    r["sgd"] = {k: v.detach().clone() for k, v in m.state_dict(keep_vars=False).items()}
    with torch.no_grad():
        r["stepped_out_eval"] = copy.deepcopy(m).eval()(*args)
        r["stepped_out_train"] = copy.deepcopy(m).train()(*args)
    return r


def rel(a, b):
    """max |a - b| / max |b| (b the reference)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def f32_vs_f64(r32, r64):
    # Gradients that are zero in exact arithmetic (a bias before a train-mode BatchNorm, BERT's
    # attention key bias) are round-off in both runs: listed apart, left out of the worst case.
    scale = max(float(v.abs().max()) for v in r64["grads"].values())
    zero = sorted(k for k, v in r64["grads"].items() if float(v.abs().max()) < 1e-10 * scale)
    worst_g = max(((rel(r32["grads"][k], v), k) for k, v in r64["grads"].items() if k not in zero),
                  key=lambda t: t[0])
    worst_s = max(((rel(r32["sgd"][k], v), k) for k, v in r64["sgd"].items() if v.is_floating_point()),
                  key=lambda t: t[0])
    return {
        "output_eval_max_abs": float((r32["out_eval"].double() - r64["out_eval"]).abs().max()),
        "output_eval_rel": rel(r32["out_eval"], r64["out_eval"]),
        "output_train_rel": rel(r32["train_out"], r64["train_out"]),
        "loss_f32": float(r32["loss"]), "loss_f64": float(r64["loss"]),
        "loss_rel": abs(float(r32["loss"]) - float(r64["loss"])) / abs(float(r64["loss"])),
        "grad_rel_worst": worst_g[0], "grad_rel_worst_param": worst_g[1],
        "zero_gradients_in_theory": {k: float(r64["grads"][k].abs().max()) for k in zero},
        "sgd_step_losses_f64": r64["step_losses"], "sgd_step_losses_f32": r32["step_losses"],
        "grad_rel_median": float(np.median([rel(r32["grads"][k], v) for k, v in r64["grads"].items()
                                            if k not in zero])),
        "sgd3_rel_worst": worst_s[0], "sgd3_rel_worst_tensor": worst_s[1],
        "note": "rel = max|f32 - f64| / max|f64| per tensor; grads per parameter, worst over parameters",
    }


# ------------------------------------------------------------------------------ exporting

def export(spec, model32, feeds, variant, path):
    """Export a copy of the model; returns a record of what was asked and what happened."""
    m = copy.deepcopy(model32)
    args = tuple(feeds.values())
    rec = {"variant": variant}
    log = io.StringIO()
    t0 = time.time()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        warnings.simplefilter("always")
        if variant.startswith("dynamo"):
            m.train(variant == "dynamo_train")
            kw = dict(dynamo=True, optimize=(variant != "dynamo_noopt"), external_data=False,
                      input_names=spec.inputs, output_names=spec.outputs)
            rec["call"] = ("torch.onnx.export(model.%s(), args, f, dynamo=True, optimize=%s, external_data=False, "
                           "input_names=..., output_names=..., dynamic_shapes=({0: Dim('batch')}, ...))"
                           % ("train" if variant == "dynamo_train" else "eval", kw["optimize"]))
            try:
                ds = tuple({0: torch.export.Dim("batch")} for _ in args)
                torch.onnx.export(m, args, path, dynamic_shapes=ds, **kw)
                rec["batch"] = "symbolic (dynamic_shapes)"
            except Exception as e:  # noqa: BLE001
                rec["dynamic_batch_error"] = "%s: %s" % (type(e).__name__, str(e)[:2000])
                if os.path.exists(path):
                    os.remove(path)
                torch.onnx.export(m, args, path, **kw)
                rec["batch"] = "fixed (dynamic_shapes failed, see dynamic_batch_error)"
        else:
            train = variant == "legacy_train"
            m.train(train)
            dyn = {n: {0: "batch"} for n in spec.inputs + spec.outputs}
            rec["call"] = ("torch.onnx.export(model.%s(), args, f, dynamo=False, opset_version=17, input_names=..., "
                           "output_names=..., dynamic_axes={every input and output: {0: 'batch'}}%s)"
                           % ("train" if train else "eval",
                              ", training=TrainingMode.TRAINING, do_constant_folding=False" if train else ""))
            kw = dict(dynamo=False, opset_version=17, input_names=spec.inputs, output_names=spec.outputs,
                      dynamic_axes=dyn, do_constant_folding=not train,
                      training=torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL)
            try:
                torch.onnx.export(m, args, path, **kw)
            except Exception as e:  # noqa: BLE001
                if not spec.legacy_workaround:
                    raise
                rec["plain_export_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:500])
                rec["workaround"] = spec.legacy_workaround[0]
                m = spec.legacy_workaround[1](copy.deepcopy(model32).train(train))
                torch.onnx.export(m, args, path, **kw)
            rec["batch"] = "symbolic (dynamic_axes)"
    rec["seconds"] = round(time.time() - t0, 1)
    msgs = sorted(set(str(w.message).split("\n")[0][:200] for w in caught))
    rec["warnings"] = msgs[:8] + (["... %d more" % (len(msgs) - 8)] if len(msgs) > 8 else [])
    return rec, m


# ----------------------------------------------------------------------- reading the files

def all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(a.g)
            for g in a.graphs:
                yield from all_nodes(g)


def shape_of(vi):
    tt = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in tt.shape.dim]
    return {"name": vi.name, "dtype": onnx.TensorProto.DataType.Name(tt.elem_type).lower(), "shape": dims}


def parse_signature(mp):
    """graph.metadata_props[K_SIG]: lines 'p_fc_weight: PARAMETER target='fc.weight''."""
    text = {p.key: p.value for p in mp.graph.metadata_props}.get(K_SIG, "")
    sig = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+): (\w+)(?: target='([^']*)')?", line.strip())
        if m and m.group(3):
            sig[m.group(1)] = (m.group(2), m.group(3))
    return sig


def parse_list(s):
    return re.findall(r"'([^']*)'", s or "")


# --------------------------------------------------------------------- mapping by values

def apply_transform(x, steps):
    x = np.asarray(x)
    for s in steps:
        if s["op"] == "transpose":
            x = np.transpose(x, s["perm"])
        elif s["op"] == "slice":
            x = np.take(x, np.arange(s["start"], s["end"]), axis=s["axis"])
        elif s["op"] == "reshape":
            x = x.reshape(s["shape"])
        else:
            raise ValueError(s)
    return x


def realize(rec, values):
    """The initializer's value computed from torch tensors `values` (name -> array) through the
    record's transform: the same function maps parameters, gradients and SGD results."""
    steps = rec["transform"]
    if steps and steps[0]["op"] == "pack":
        out = np.zeros(rec["shape"], np.asarray(next(iter(values.values()))).dtype)
        for pc in steps[0]["pieces"]:
            d, a, b = pc["dst"]
            out[d, a:b] = np.asarray(values[pc["torch"]])[pc["src"][0]:pc["src"][1]]
        return out
    return apply_transform(values[rec["torch_name"]], steps)


def rnn_pack_candidates(model32):
    """ONNX GRU packing of torch nn.GRU weights: W = [dirs, 3H, in] from weight_ih, R = [dirs, 3H, H]
    from weight_hh, B = [dirs, 6H] = [bias_ih | bias_hh]; gates reordered from torch's (r, z, n)
    to ONNX's (z, r, h). One candidate per layer and tensor."""
    out = []
    for mn, m in model32.named_modules():
        if not isinstance(m, nn.GRU):
            continue
        H = m.hidden_size
        order = [(H, 2 * H), (0, H), (2 * H, 3 * H)]  # ONNX gate k takes torch rows order[k]
        dirs = ["", "_reverse"] if m.bidirectional else [""]
        pre = mn + "." if mn else ""
        for layer in range(m.num_layers):
            for what, names in (("W", ["weight_ih"]), ("R", ["weight_hh"]), ("B", ["bias_ih", "bias_hh"])):
                pieces = []
                for d, sfx in enumerate(dirs):
                    for j, base in enumerate(names):
                        tn = "%s%s_l%d%s" % (pre, base, layer, sfx)
                        for k, (a, b) in enumerate(order):
                            pieces.append({"torch": tn, "src": [a, b], "dst": [d, 3 * H * j + k * H,
                                                                               3 * H * j + (k + 1) * H]})
                vals = {pc["torch"]: getattr(m, pc["torch"][len(pre):]).detach().numpy() for pc in pieces}
                first = vals[pieces[0]["torch"]]
                shape = [len(dirs), 3 * H * len(names)] + list(first.shape[1:])
                rec = {"shape": shape, "transform": [{"op": "pack", "layout": "onnx GRU %s" % what,
                                                      "gates": "torch r,z,n -> onnx z,r,h", "pieces": pieces}]}
                out.append((sorted(vals), rec, realize(rec, vals)))
    return out


def value_matches(a, cands):
    """(torch name, transform steps) for every candidate tensor whose data the initializer equals
    exactly, directly or as a transpose, a reshape, a leading-axis slice, or a transposed slice."""
    out = []
    if a.dtype.kind != "f":
        return [(n, []) for n, p in cands.items() if p.dtype == a.dtype and p.shape == a.shape
                and np.array_equal(p, a)]
    flat = a.ravel()
    for n, p in cands.items():
        if p.dtype.kind != "f" or p.size < a.size or a.size == 0:
            continue
        if p.shape == a.shape and np.array_equal(p, a):
            out.append((n, []))
            continue
        if p.size == a.size:
            if np.array_equal(p.ravel(), flat):
                out.append((n, [{"op": "reshape", "shape": list(a.shape)}]))
            elif p.ndim == 2 and a.shape == p.T.shape and np.array_equal(p.T, a):
                out.append((n, [{"op": "transpose", "perm": [1, 0]}]))
            continue
        if a.size < 2 or p.ndim < 1:
            continue
        rows = p.reshape(p.shape[0], -1)
        rowsize = rows.shape[1]
        if a.size % rowsize == 0:  # a is p[s:s+k] (reshaped)
            k = a.size // rowsize
            for s in np.nonzero(rows[:, 0] == flat[0])[0]:
                if s + k <= p.shape[0] and np.array_equal(rows[s:s + k].ravel(), flat):
                    st = [{"op": "slice", "axis": 0, "start": int(s), "end": int(s + k)}]
                    if list(a.shape) != [k] + list(p.shape[1:]):
                        st.append({"op": "reshape", "shape": list(a.shape)})
                    out.append((n, st))
                    break
        if p.ndim == 2 and a.ndim == 2 and a.shape[0] == p.shape[1]:  # a is p[s:s+k].T
            k = a.shape[1]
            for s in np.nonzero(p[:, 0] == a[0, 0])[0]:
                if s + k <= p.shape[0] and np.array_equal(p[s:s + k].T, a):
                    out.append((n, [{"op": "slice", "axis": 0, "start": int(s), "end": int(s + k)},
                                    {"op": "transpose", "perm": [1, 0]}]))
                    break
    return out


def bn_fold_candidates(model32):
    """For each BatchNorm and each Conv with as many output channels: the folded weight/bias."""
    convs = [(n, m) for n, m in model32.named_modules() if isinstance(m, nn.Conv2d)]
    out = []
    for bn_name, bn in model32.named_modules():
        if not isinstance(bn, nn.BatchNorm2d):
            continue
        scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
        for cn, conv in convs:
            if conv.out_channels != bn.num_features:
                continue
            w = conv.weight.detach().double() * scale.reshape(-1, 1, 1, 1)
            b0 = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(scale)
            b = bn.bias.detach().double() + (b0 - bn.running_mean.double()) * scale
            out.append((cn, bn_name, w.numpy(), b.numpy()))
    return out


def bn_fused_model(model32, recs, mp):
    """The torch model the BN-folded file computes: each folded Conv+BatchNorm pair replaced by
    torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn) carrying the file's folded values, the
    BatchNorm by nn.Identity. Turns the bn_folded records into trainable ones of that model."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    fused = copy.deepcopy(model32).eval()
    vals = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    # A folded bias does not depend on the Conv (bias-free Convs), so value matching cannot tell
    # which Conv it belongs to: take the pair from the weight fed to the same Conv node.
    by_name = {r["name"]: r for r in recs}
    for n in all_nodes(mp.graph):
        if n.op_type == "Conv" and len(n.input) > 2 and by_name.get(n.input[2], {}).get("kind") == "bn_folded":
            w, b = by_name[n.input[1]]["transform"][0], by_name[n.input[2]]["transform"][0]
            b["conv"], b["batchnorm"] = w["conv"], w["batchnorm"]
            by_name[n.input[2]]["torch_name"] = w["batchnorm"] + ".bias"
    pairs = collections.defaultdict(dict)
    for r in recs:
        if r["kind"] == "bn_folded":
            st = r["transform"][0]
            pairs[(st["conv"], st["batchnorm"])][st["part"]] = r

    def put_module(name, mod):
        parent, _, leaf = name.rpartition(".")
        setattr(fused.get_submodule(parent) if parent else fused, leaf, mod)

    for (cn, bn), parts in pairs.items():
        new = fuse_conv_bn_eval(fused.get_submodule(cn), fused.get_submodule(bn))
        with torch.no_grad():
            for part, r in parts.items():
                getattr(new, part).copy_(torch.from_numpy(vals[r["name"]]))
        for p in new.parameters():  # a bias made up for a bias-free Conv comes back frozen
            p.requires_grad_(True)
        put_module(cn, new)
        put_module(bn, nn.Identity())
        for part, r in parts.items():
            r["folded"] = r["transform"][0]
            r.update(transform=[], torch_name="%s.%s" % (cn, part), trainable=True,
                     torch_model="bn_fused: %s = fuse_conv_bn_eval(%s, %s), %s = Identity" % (cn, cn, bn, bn))
    bn_left = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in fused.modules())
    return fused, bn_left


# ------------------------------------------------------------------------ initializer map

def map_initializers(mp, model32, spec, folds):
    """One record per initializer: what it is, which torch tensor it holds, how we know."""
    packs = rnn_pack_candidates(model32)
    aliases = {}  # every torch name (tied duplicates too) -> canonical named_parameters() name
    canon_by_id = {}
    for n, p in model32.named_parameters(remove_duplicate=False):
        canon_by_id.setdefault(id(p), n)
        aliases[n] = canon_by_id[id(p)]
    params = {n: p.detach().numpy() for n, p in model32.named_parameters()}
    buffers = {n: b.detach().numpy() for n, b in model32.named_buffers()}
    cands = dict(params)
    cands.update(buffers)
    vi_meta = {v.name: {q.key: q.value for q in v.metadata_props} for v in mp.graph.value_info}
    sig = parse_signature(mp)
    consumers = collections.defaultdict(list)
    for n in all_nodes(mp.graph):
        for i in n.input:
            consumers[i].append(n.op_type)
    recs = []
    for t in mp.graph.initializer:
        a = numpy_helper.to_array(t)
        meta = vi_meta.get(t.name, {})
        rec = {"name": t.name, "shape": list(a.shape), "dtype": str(a.dtype),
               "consumers": sorted(collections.Counter(consumers[t.name]).items())}
        ev = {}
        if meta:
            ev["value_info.metadata_props"] = meta
        if t.metadata_props:
            ev["TensorProto.metadata_props"] = {q.key: q.value for q in t.metadata_props}
        if t.doc_string:
            ev["TensorProto.doc_string"] = t.doc_string
        kind_meta, orig = meta.get(K_KIND), meta.get(K_ORIG)
        if orig in sig:
            ev["graph_signature"] = "%s: %s target='%s'" % (orig, sig[orig][0], sig[orig][1])
        folded = parse_list(meta.get(K_FOLDED))
        matches = value_matches(a, cands)
        ev["value_matches"] = [{"torch": n, "transform": st} for n, st in matches]
        torch_name, transform, kind, method = None, None, "constant", None

        def pick(prefer):
            for n, st in matches:
                if n in prefer:
                    return n, st
            return None

        claimed = None
        if kind_meta and orig in sig:
            claimed = sig[orig][1]
        elif kind_meta:
            claimed = t.name
        if claimed is not None:
            c = aliases.get(claimed, claimed)
            hit = pick({c})
            if hit and hit[1] == []:
                torch_name, transform = hit
                kind = {"PARAMETER": "parameter", "BUFFER": "buffer"}.get(kind_meta, kind_meta.lower())
                method = ("file: value_info[%r].metadata_props %s=%s and %s=%s -> graph_signature target %r; "
                          "confirmed by exact value equality" % (t.name, K_KIND, kind_meta, K_ORIG, orig, claimed))
            else:
                ev["conflict"] = "metadata names %r but the value differs" % claimed
        if torch_name is None and folded:
            srcs = {aliases.get(s, s) for s in folded} & set(cands)
            hit = pick(srcs)
            if hit:
                torch_name, transform = hit
                kind = "parameter_view" if torch_name in params else "buffer_view"
                method = ("file: value_info[%r].metadata_props %s=%s names the source; transform %s found by "
                          "value matching" % (t.name, K_FOLDED, meta[K_FOLDED][:120],
                                              [s["op"] for s in transform] or "identity"))
            elif srcs:
                ev["conflict"] = "folded_from names %s but no transform of it matches the value" % sorted(srcs)
        if torch_name is None and not meta:
            c = aliases.get(t.name)
            hit = pick({c}) if c else None
            if hit and hit[1] == []:
                torch_name, transform = hit
                kind = "parameter" if c in params else "buffer"
                method = "name equals the torch name (the file records nothing else); exact value equality"
            elif t.name in buffers and pick({t.name}):
                torch_name, transform = pick({t.name})
                kind = "buffer"
                method = "name equals the torch buffer name; exact value equality"
            elif matches:
                torch_name, transform = matches[0]
                kind = ("parameter" if torch_name in params else "buffer") + ("_view" if transform else "")
                method = "value matching only (exact equality%s); the file records no provenance" % (
                    ", transform " + "+".join(s["op"] for s in transform) if transform else "")
                if len(matches) > 1:
                    ev["ambiguous"] = True
        if torch_name is None and a.dtype.kind == "f":
            for names, prec, v in packs:
                if list(v.shape) == list(a.shape) and np.array_equal(v, a):
                    torch_name, transform, kind = names, prec["transform"], "parameter_pack"
                    named = sorted({aliases.get(s, s) for s in folded} & set(names))
                    method = (("file: value_info[%r].metadata_props %s names %s; " % (t.name, K_FOLDED, named)
                               if named else "") + "layout found by exact value matching against the ONNX GRU "
                              "packing of the torch weights (gates reordered r,z,n -> z,r,h; B = [b_ih | b_hh])")
                    break
        if torch_name is None and a.dtype.kind == "f" and a.ndim in (1, 4):
            for cn, bn, w, b in folds:
                for part, v in (("weight", w), ("bias", b)):
                    if v.shape == a.shape and np.allclose(a, v, rtol=1e-4, atol=1e-6):
                        torch_name = cn + ".weight" if part == "weight" else bn + ".bias"
                        kind = "bn_folded"
                        transform = [{"op": "bn_fold", "part": part, "conv": cn, "batchnorm": bn,
                                      "formula": "W*g/sqrt(v+eps) per output channel" if part == "weight"
                                      else "beta + (b - mean)*g/sqrt(v+eps)"}]
                        method = ("value matching with tolerance against Conv+BatchNorm folding"
                                  + ("; the initializer keeps the torch name %r but NOT its value" % t.name
                                     if t.name in aliases else ""))
                        break
                if torch_name:
                    break
        if torch_name is None:
            method = ("file: folded_from lists only non-parameter values" if folded else
                      "no metadata, no torch tensor equals it") + "; a constant of the graph"
            if kind_meta:
                method = "file says %s=%s; no value match" % (K_KIND, kind_meta)
        rec.update(kind=kind, torch_name=torch_name, transform=transform or [],
                   torch_aliases=sorted(k for k, v in aliases.items() if v == torch_name and k != torch_name)
                   if isinstance(torch_name, str) else [],
                   trainable=kind in ("parameter", "parameter_view", "parameter_pack"), method=method,
                   evidence=ev)
        recs.append(rec)
    # shared torch tensors: which initializers hold (views of) the same parameter
    by_param = collections.defaultdict(list)
    for r in recs:
        if r["trainable"] and isinstance(r["torch_name"], str):
            by_param[r["torch_name"]].append(r)
    for tn, rs in by_param.items():
        if len(rs) < 2:
            continue
        full = [r for r in rs if not any(s["op"] == "slice" for s in r["transform"])]
        spans = [(s["start"], s["end"]) for r in rs for s in r["transform"] if s["op"] == "slice"]
        overlap = len(full) > 1 or (full and spans) or any(
            a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for (b0, b1) in spans[i + 1:])
        for r in rs:
            r["shares_torch_param_with"] = [o["name"] for o in rs if o is not r]
            r["tied"] = bool(overlap)
    held = set()
    for r in recs:
        if r["trainable"]:
            held.update([r["torch_name"]] if isinstance(r["torch_name"], str) else r["torch_name"])
    missing = sorted(set(params) - held)
    return recs, missing


# ------------------------------------------------------------------------------- checking

def summarize_file(mp, path, recs):
    nodes = list(all_nodes(mp.graph))
    hist = collections.Counter((n.domain + "::" if n.domain else "") + n.op_type for n in nodes)
    bn = [n for n in nodes if n.op_type == "BatchNormalization"]
    fused = [n.name for n in nodes if any(q.key == K_RULE and "BatchNorm" in q.value for q in n.metadata_props)]
    vi_keys = collections.Counter(q.key for v in mp.graph.value_info for q in v.metadata_props)
    node_keys = collections.Counter(q.key for n in nodes for q in n.metadata_props)
    sig_text = {p.key: p.value for p in mp.graph.metadata_props}.get(K_SIG, "")
    ex = {}
    for r in recs:
        k = r["kind"] + ("_tied" if r.get("tied") else "")
        if k not in ex:
            ex[k] = {"name": r["name"], "shape": r["shape"], "torch_name": r["torch_name"],
                     "transform": r["transform"], "method": r["method"],
                     "value_info.metadata_props": r["evidence"].get("value_info.metadata_props", {})}
    node_ex = {}
    for n in nodes:
        if n.metadata_props and n.op_type not in node_ex and n.op_type in ("Conv", "Gemm", "MatMul", "Gather"):
            node_ex[n.op_type] = {q.key: q.value[:300] for q in n.metadata_props if "stack_trace" not in q.key}
    return {
        "file": os.path.basename(path), "bytes": os.path.getsize(path),
        "ir_version": mp.ir_version,
        "opset_import": {o.domain or "ai.onnx": o.version for o in mp.opset_import},
        "producer": "%s %s" % (mp.producer_name, mp.producer_version),
        "inputs": [shape_of(v) for v in mp.graph.input],
        "outputs": [shape_of(v) for v in mp.graph.output],
        "op_histogram": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "op_types": sorted(hist),
        "functions": [f.domain + "::" + f.name for f in mp.functions],
        "batchnorm": {
            "BatchNormalization_nodes": len(bn),
            "training_mode": dict(collections.Counter(
                next((a.i for a in n.attribute if a.name == "training_mode"), 0) for n in bn)),
            "outputs_per_node": dict(collections.Counter(len([o for o in n.output if o]) for n in bn)),
            "conv_nodes_marked_FuseBatchNormIntoConv": len(fused),
            "bn_folded_initializers": [r["name"] for r in recs if r["kind"] == "bn_folded"],
        },
        "initializers": dict(collections.Counter(r["kind"] + ("(tied)" if r.get("tied") else "") for r in recs)),
        "what_the_file_records": {
            "model.metadata_props": {q.key: q.value[:200] for q in mp.metadata_props},
            "graph.metadata_props keys": [q.key for q in mp.graph.metadata_props],
            "graph_signature (first lines)": sig_text.strip().splitlines()[:4],
            "value_info entries": len(mp.graph.value_info),
            "value_info.metadata_props keys (count)": dict(vi_keys),
            "TensorProto.metadata_props on initializers": sum(len(t.metadata_props) for t in mp.graph.initializer),
            "TensorProto.doc_string on initializers": sum(1 for t in mp.graph.initializer if t.doc_string),
            "node.metadata_props keys (count)": dict(node_keys),
            "node metadata example": node_ex,
            "initializer examples by kind": ex,
        },
    }


def same_graph(mp, other_path):
    if not os.path.exists(other_path):
        return False
    o = onnx.load(other_path)
    # node and initializer names (val_N) may differ between two exports of the same graph
    ops = lambda m: [n.op_type for n in m.graph.node]  # noqa: E731
    vals = lambda m: sorted(numpy_helper.to_array(t).tobytes() for t in m.graph.initializer)  # noqa: E731
    return ops(mp) == ops(o) and vals(mp) == vals(o)


def ort_run(model_bytes, feeds_np):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return s.run(None, {i.name: feeds_np[i.name] for i in s.get_inputs()})[0]


def check_file(mp, path, feeds_np, r32, r64, train_semantics):
    res = {}
    try:
        onnx.checker.check_model(mp, full_check=True)
        res["checker"] = "ok (full_check=True)"
    except Exception as e:  # noqa: BLE001
        res["checker"] = "FAILED: %s: %s" % (type(e).__name__, str(e)[:1000])
    try:
        y = ort_run(mp.SerializeToString(), feeds_np)
        ref32 = (r32["train_out"] if train_semantics else r32["out_eval"]).numpy()
        ref64 = (r64["train_out"] if train_semantics else r64["out_eval"]).numpy()
        res["onnxruntime"] = {
            "compared_with": "torch %s-mode forward" % ("train" if train_semantics else "eval"),
            "max_abs_vs_torch_f32": float(np.max(np.abs(y - ref32))), "rel_vs_torch_f32": rel(y, ref32),
            "rel_vs_torch_f64": rel(y, ref64),
            "rel_vs_other_mode_f64": rel(y, (r64["out_eval"] if train_semantics else r64["train_out"]).numpy()),
            "shape": list(y.shape)}
    except Exception as e:  # noqa: BLE001
        res["onnxruntime"] = "FAILED: %s: %s" % (type(e).__name__, str(e)[:1000])
    return res


def stepped_check(mp, recs, r64, feeds_np, train_semantics):
    """Write the torch values after 3 SGD steps into the mapped initializers (through their
    transforms), run onnxruntime, compare with torch's stepped model: this checks the mapping."""
    m2 = copy.deepcopy(mp)
    done = 0
    for t in m2.graph.initializer:
        r = next(x for x in recs if x["name"] == t.name)
        if r["trainable"] or r["kind"] in ("buffer", "buffer_view"):
            v = realize(r, {k: x.numpy() for k, x in r64["sgd"].items()})
            t.CopyFrom(numpy_helper.from_array(v.astype(numpy_helper.to_array(t).dtype), t.name))
            done += 1
    y = ort_run(m2.SerializeToString(), feeds_np)
    ref = (r64["stepped_out_train"] if train_semantics else r64["stepped_out_eval"]).numpy()
    return {"initializers_replaced": done, "rel_vs_torch_f64_after_3_steps": rel(y, ref),
            "rel_of_initial_output_vs_stepped": rel((r64["train_out"] if train_semantics else r64["out_eval"]).numpy(),
                                                    ref)}


def write_references(npz, variant, recs, rv):
    """grad/sgd (and grad_partial) arrays for every trainable initializer, and the stepped BN
    statistics, in the initializer's layout. A key '<what>/<initializer>' is shared across the
    variants of a model while they agree on the array; a variant that differs gets
    '<variant>/<what>/<initializer>'. Each record's ref_keys says which."""
    def put(what, r, arr):
        key = "%s/%s" % (what, r["name"])
        if key in npz and not (npz[key].shape == arr.shape and np.array_equal(npz[key], arr)):
            key = "%s/%s/%s" % (variant, what, r["name"])
        npz[key] = arr
        r.setdefault("ref_keys", {})[what] = key

    grads = {k: v.numpy() for k, v in rv["grads"].items()}
    sgd = {k: v.numpy() for k, v in rv["sgd"].items()}
    for r in recs:
        if r["trainable"]:
            put("grad", r, realize(r, grads))
            put("sgd", r, realize(r, sgd))
            if r.get("tied") and "partial_grads" in rv:
                ops = {op for op, _ in r["consumers"]}
                use = next((rv["use_map"][op] for op in ops if op in rv["use_map"]), None)
                if use:
                    put("grad_partial", r, apply_transform(rv["partial_grads"][use].numpy(), r["transform"]))
                    r["partial_gradient"] = ("grad_partial holds the gradient through this use alone (torch "
                                             "untied, %s); grad holds the tied total" % use)
        elif r["kind"] in ("buffer", "buffer_view") and r["dtype"].startswith("float") and r["torch_name"] in sgd:
            put("sgd", r, realize(r, sgd))


# ------------------------------------------------------------------------------------ main

def write_params_json(f, doc):
    """Indented header, one initializer per line."""
    recs = doc.pop("initializers")
    head = json.dumps(doc, indent=1)
    f.write(head[:-2] + ',\n "initializers": [\n')
    f.write(",\n".join("  " + json.dumps(r, default=str) for r in recs))
    f.write("\n ]\n}\n")


def versions():
    import importlib.metadata as md
    v = {"python": sys.version.split()[0]}
    for p in ["torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript", "onnx_ir", "numpy"]:
        try:
            v[p] = md.version(p)
        except md.PackageNotFoundError:
            v[p] = None
    return v


def run_model(spec, idx, manifest):
    print("== %s" % spec.name, flush=True)
    torch.manual_seed(SEED + idx)
    g = torch.Generator().manual_seed(SEED + idx)
    model32 = spec.build().float()
    perturb(model32, g)
    model32.eval()
    feeds, labels = spec.batch(g)
    feeds_np = {k: v.numpy() for k, v in feeds.items()}
    r64 = torch_refs(spec, model32, feeds, labels, torch.float64)
    r32 = torch_refs(spec, model32, feeds, labels, torch.float32)
    entry = {"note": spec.note, "parameters": sum(p.numel() for p in model32.parameters()),
             "torch_parameters": {n: list(p.shape) for n, p in model32.named_parameters()},
             "torch_tied_aliases": sorted(set(n for n, _ in model32.named_parameters(remove_duplicate=False))
                                          - set(n for n, _ in model32.named_parameters())),
             "feeds": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds_np.items()},
             "labels": {"shape": list(labels.shape), "dtype": str(labels.dtype).replace("torch.", "")},
             "loss": spec.loss, "loss_definition": LOSSES[spec.loss],
             "reference_mode": ("train(): BatchNorm uses batch statistics, running statistics updated with "
                                "each module's momentum (ResNet 0.1, MobileNetV3/EfficientNet 0.01) and the "
                                "unbiased batch variance" if spec.has_bn else
                                "eval() == train() here (all dropout 0)"),
             "f32_vs_f64": f32_vs_f64(r32, r64), "variants": {}}
    npz = {k: v for k, v in feeds_np.items()}
    npz["labels"] = labels.numpy()
    npz["loss"] = np.array(float(r64["loss"]), np.float64)
    npz["loss32"] = np.array(float(r32["loss"]), np.float32)
    out = spec.outputs[0]
    npz["out/" + out] = r64["out_eval"].numpy()
    npz["out32/" + out] = r32["out_eval"].numpy()
    if spec.has_bn:
        npz["train_out/" + out] = r64["train_out"].numpy()
    folds = bn_fold_candidates(model32) if spec.has_bn else []
    for variant in spec.variants:
        path = os.path.join(OUT, "%s_%s.onnx" % (spec.name, variant))
        print("   %s" % variant, flush=True)
        try:
            rec, exported = export(spec, model32, feeds, variant, path)
        except Exception as e:  # noqa: BLE001
            entry["variants"][variant] = {"export_error": "%s: %s" % (type(e).__name__, str(e)[:3000]),
                                          "traceback_tail": traceback.format_exc()[-3000:]}
            if os.path.exists(path):
                os.remove(path)
            print("      export FAILED: %s" % str(e).splitlines()[0][:200], flush=True)
            continue
        mp = onnx.load(path)
        # The legacy exporter traces by running the model: in train() mode that updates the
        # BatchNorm running statistics of the copy it exports, and the file holds those.
        mutated = [k for k, v in exported.state_dict().items()
                   if not torch.equal(v, model32.state_dict()[k])]
        src, rv = model32, r64
        if mutated:
            rec["export_mutated_buffers"] = ("%d buffers differ from the model's before export (the exporter ran "
                                             "a train-mode forward); the file and this variant's references start "
                                             "from the mutated values: %s" % (len(mutated), mutated[:4]))
            src = copy.deepcopy(exported).float().eval()
            rv = torch_refs(spec, src, feeds, labels, torch.float64)
        recs, missing = map_initializers(mp, src, spec, folds)
        if variant == "dynamo_train" and "dynamo" in entry["variants"] and same_graph(mp, path.replace("_train", "")):
            rec["identical_to"] = "%s_dynamo.onnx (same nodes and initializer values); file not kept" % spec.name
        train_sem = any(next((a.i for a in n.attribute if a.name == "training_mode"), 0)
                        for n in all_nodes(mp.graph) if n.op_type == "BatchNormalization")
        info = dict(export=rec, **summarize_file(mp, path, recs))
        info.update(check_file(mp, path, feeds_np, r32, r64, train_sem))
        info["torch_parameters_not_held_by_any_initializer"] = missing
        folded = [r["name"] for r in recs if r["kind"] == "bn_folded"]
        if folded:
            src, bn_left = bn_fused_model(src, recs, mp)
            rv = torch_refs(spec, src, feeds, labels, torch.float64, train_mode=bn_left)
            info["references_model"] = (
                "%d initializers are Conv weights/biases with BatchNorm folded in (eval-mode statistics baked "
                "in): the file cannot be trained the way torch trains the original model (batch statistics). Its "
                "references are those of the BN-fused torch model: torch.nn.utils.fusion.fuse_conv_bn_eval per "
                "Conv+BatchNorm pair, loaded with the file's folded values, BatchNorm -> Identity; %s"
                % (len(folded), "BatchNorm left in train mode" if bn_left else "no BatchNorm left"))
        info["references"] = ("%s_ref.npz: grad/<initializer> and sgd/<initializer>, or %s/grad/..., %s/sgd/... "
                              "where this variant's array under that name differs from an earlier variant's; each "
                              "record's ref_keys in %s_%s_params.json names its keys"
                              % (spec.name, variant, variant, spec.name, variant))
        write_references(npz, variant, recs, rv)
        try:
            info["mapping_check_after_3_sgd_steps"] = stepped_check(mp, recs, rv, feeds_np, train_sem)
        except Exception as e:  # noqa: BLE001
            info["mapping_check_after_3_sgd_steps"] = "FAILED: %s: %s" % (type(e).__name__, str(e)[:500])
        pj = os.path.join(OUT, "%s_%s_params.json" % (spec.name, variant))
        with open(pj, "w") as f:
            write_params_json(f, {"model": spec.name, "variant": variant, "file": os.path.basename(path),
                       "kinds": {
                           "parameter": "holds a torch parameter as is (trainable)",
                           "parameter_view": "holds a transform of a torch parameter (transpose/slice/reshape); "
                                             "trainable: its gradient is the transform of torch's gradient",
                           "parameter_pack": "holds pieces of several torch parameters (ONNX GRU W/R/B); "
                                             "trainable: its gradient is the same packing of torch's gradients",
                           "buffer": "holds a torch buffer (BatchNorm running statistics: state, not trained)",
                           "bn_folded": "a Conv weight/bias with a BatchNorm folded in (see 'folded'): no tensor "
                                        "of the original model; trainable as the fused Conv of the BN-fused "
                                        "torch model the references use (see 'torch_model')",
                           "constant": "a constant of the graph (shapes, scalars, masks): not trainable"},
                       "initializers": recs})
        entry["variants"][variant] = info
        if "identical_to" in rec:
            os.remove(path)
            os.remove(pj)
            info["file"] = None
        bo = info.get("onnxruntime")
        print("      opset %s, %d initializers %s, ort %s" % (
            info["opset_import"], len(recs), info["initializers"],
            "%.2e" % bo["rel_vs_torch_f32"] if isinstance(bo, dict) else bo), flush=True)
    np.savez(os.path.join(OUT, "%s_ref.npz" % spec.name), **npz)
    manifest["models"][spec.name] = entry


def dedup_probe(manifest):
    """Export GPT-2 at HF's plain random init (LayerNorm weights all 1, biases all 0) and the
    TransformerEncoder at torch's (both layers deep copies, so equal) without perturb(), to see
    what the exporters do with parameters that happen to be equal."""
    manifest["dedup_probe"] = {}
    path = os.path.join(OUT, "_probe.onnx")
    for name, variant in (("gpt2", "dynamo"), ("transformer_encoder", "dynamo"), ("transformer_encoder", "legacy")):
        idx, spec = next((i, s) for i, s in enumerate(specs()) if s.name == name)
        torch.manual_seed(SEED + idx)
        m = spec.build().float().eval()
        feeds, _ = spec.batch(torch.Generator().manual_seed(SEED + idx))
        try:
            export(spec, m, feeds, variant, path)
            mp = onnx.load(path)
            recs, missing = map_initializers(mp, m, spec, [])
            manifest["dedup_probe"]["%s_%s" % (name, variant)] = {
                "what": "%s exported as variant %s at the library's own init, without perturb()" % (name, variant),
                "torch_parameters": len(list(m.parameters())),
                "initializers_holding_a_parameter": sum(1 for r in recs if r["trainable"]),
                "torch_parameters_without_an_initializer_of_their_own": missing,
                "examples": [{"initializer": r["name"], "consumers": r["consumers"],
                              "equal_torch_tensors": [x["torch"] for x in r["evidence"]["value_matches"]]}
                             for r in recs if r["trainable"] and len(r["evidence"]["value_matches"]) > 1][:3]}
        except Exception as e:  # noqa: BLE001
            manifest["dedup_probe"]["%s_%s" % (name, variant)] = "FAILED: %s" % e
        if os.path.exists(path):
            os.remove(path)


def main(argv):
    load_libs()
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    only = [a for a in argv if not a.startswith("-")]
    mpath = os.path.join(OUT, "manifest.json")
    manifest = {"models": {}}
    if only and os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    manifest.update({
        "generated_by": "tests/reference/modern/make_modern.py (run by hand)",
        "versions": versions(),
        "conventions": {
            "seed": SEED, "sgd": {"lr": LR, "momentum": 0, "steps": STEPS, "batch": "the same batch each step"},
            "parameter_init": "the library's random init, then seeded noise on constant tensors (see perturb())",
            "<model>_ref.npz": "feeds by ONNX input name (float32/int64), labels, loss (f64), loss32, "
                               "out/<output> (f64 eval), out32/<output> (f32 eval), train_out/<output> (f64 "
                               "train-mode, BN models); grad/<init>, sgd/<init> (f64, in the initializer's "
                               "layout; sgd also holds BN running statistics after the 3 steps), grad_partial/<init> "
                               "for tied copies. A key is shared by all variants whose initializer of that name "
                               "holds the same array; where a later variant's differs it is stored as "
                               "<variant>/grad/<init> etc. Each params.json record's ref_keys names its keys.",
            "variants": {"dynamo": "dynamo=True, default opset, optimize=True, model.eval()",
                         "dynamo_noopt": "dynamo=True, optimize=False, model.eval()",
                         "dynamo_train": "dynamo=True, optimize=True, model.train()",
                         "legacy": "dynamo=False, opset_version=17, model.eval(), do_constant_folding=True",
                         "legacy_train": "dynamo=False, opset_version=17, model.train(), "
                                         "training=TrainingMode.TRAINING, do_constant_folding=False"},
        }})
    for idx, spec in enumerate(specs()):
        if only and spec.name not in only:
            continue
        try:
            run_model(spec, idx, manifest)
        except Exception as e:  # noqa: BLE001
            manifest["models"][spec.name] = {"error": "%s: %s" % (type(e).__name__, e),
                                             "traceback_tail": traceback.format_exc()[-3000:]}
            print("   FAILED: %s" % e, flush=True)
    if not only or "probe" in only:
        dedup_probe(manifest)
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1, default=str)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print("wrote %s (%d files, %.2f MB)" % (OUT, len(os.listdir(OUT)), total / 1e6))

if __name__ == "__main__":
    omt_venv.ensure(__file__, PACKAGES)
    if "--setup-only" in sys.argv:
        sys.exit(0)
    main(sys.argv[1:])
