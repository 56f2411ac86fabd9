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
The models live in modern_models.py, the reading of the exported files (which torch tensor
each initializer holds) in modern_mapping.py; this file exports, checks and writes.

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
import time
import traceback
import warnings

SEED = 1234
LR = 0.1        # plain SGD, no momentum, no weight decay
STEPS = 3       # SGD steps on the same batch


def load_libs():
    global np, torch, nn, F, onnx, numpy_helper, ort
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper
    from torch import nn
    # The models (modern_models.py) and the reading of the files (modern_mapping.py) import
    # torch themselves, so they are imported here, inside the venv.
    global specs, LOSSES, loss_fn, perturb
    global K_RULE, K_SIG, all_nodes, shape_of, realize, apply_transform, bn_fold_candidates, bn_fused_model
    global map_initializers
    from modern_models import LOSSES, loss_fn, perturb, specs
    from modern_mapping import (K_RULE, K_SIG, all_nodes, apply_transform, bn_fold_candidates, bn_fused_model,
                                map_initializers, realize, shape_of)


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
