"""make_keras.py's reading of the converted file: export through tf2onnx, onnxruntime, and
which Keras variable (or BatchNorm-folded value) each ONNX initializer holds."""
# Imported by make_keras.py inside its venv only (TensorFlow, tf2onnx & co. from PyPI).
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import collections  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
import tf2onnx.convert  # noqa: E402
from onnx import numpy_helper  # noqa: E402

keras = tf.keras
L = keras.layers

from keras_models import HWC, INPUT, bn_fold, bn_layers, build, var_values  # noqa: E402


def rel(a, b):
    """max |a - b| / max |b| (b the reference)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))




def op_histogram(mp):
    return dict(sorted(collections.Counter(n.op_type for n in mp.graph.node).items()))


def io_desc(vis):
    out = []
    for vi in vis:
        t = vi.type.tensor_type
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
        out.append({"name": vi.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, "shape": dims})
    return out


def export(model, path=None):
    spec = (tf.TensorSpec((None,) + HWC, tf.float32, name=INPUT),)
    mp, _ = tf2onnx.convert.from_keras(model, input_signature=spec)
    if path:
        onnx.save(mp, path)
    return mp


def ort_run(mp, feeds):
    s = ort.InferenceSession(mp.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


BN_KEYS = ("gamma", "beta", "moving_mean", "moving_variance")


def bn_convs(model):
    """bn name -> the Conv2D right before it (no activation), or None."""
    out = {}
    for prev, l in zip(model.layers, model.layers[1:]):
        if isinstance(l, L.BatchNormalization):
            ok = isinstance(prev, L.Conv2D) and prev.activation.__name__ == "linear"
            out[l.name] = prev if ok else None
    return out


def fold_arrays(model_or_vals, bn, conv, eps):
    """The fold candidates of one BatchNormalization, float64, Keras layouts:
    affine scale/shift ([C]) and, with a Conv before it, the folded kernel (HWIO) and bias."""
    vals = model_or_vals
    s, t = bn_fold({k: vals["%s/%s" % (bn, k)] for k in BN_KEYS}, eps)
    out = {"scale": s, "shift": t}
    if conv:
        out["weight"] = np.asarray(vals[conv + "/kernel"], np.float64) * s
        b = np.asarray(vals[conv + "/bias"], np.float64) if (conv + "/bias") in vals else 0.0
        out["bias"] = t + b * s
    return out


FORMULAS = {
    "scale": "gamma / sqrt(moving_variance + eps)",
    "shift": "beta - moving_mean * gamma / sqrt(moving_variance + eps)",
    "weight": "conv kernel * gamma / sqrt(moving_variance + eps) per output channel",
    "bias": "beta + (conv bias - moving_mean) * gamma / sqrt(moving_variance + eps) (conv bias 0 if none)",
}


def candidates(model):
    """(description, array, exact) for every way an initializer could hold the model's variables."""
    vals = var_values(model)
    out = []
    for path, a in vals.items():
        a = a.astype(np.float64)
        out.append(({"keras": [path], "transform": []}, a, True))
        if a.ndim == 4:
            out.append(({"keras": [path], "transform": [{"op": "transpose", "perm": [3, 2, 0, 1]}]},
                        a.transpose(3, 2, 0, 1), True))
        if a.ndim == 1:
            out.append(({"keras": [path], "transform": [{"op": "reshape", "shape": [1, a.shape[0], 1, 1]}]},
                        a.reshape(1, -1, 1, 1), True))
    convs = bn_convs(model)
    for bn in bn_layers(model):
        conv = convs[bn.name].name if convs[bn.name] else None
        bnv = ["%s/%s" % (bn.name, k) for k in BN_KEYS]
        uses = {"scale": [bnv[0], bnv[3]], "shift": bnv}
        if conv:
            uses["weight"] = [conv + "/kernel", bnv[0], bnv[3]]
            uses["bias"] = ([conv + "/bias"] if (conv + "/bias") in vals else []) + bnv
        for part, a in fold_arrays(vals, bn.name, conv, bn.epsilon).items():
            fold = {"op": "bn_fold", "batchnorm": bn.name, "part": part, "formula": FORMULAS[part],
                    "eps": bn.epsilon}
            if part in ("weight", "bias"):
                fold["conv"] = conv
                layouts = [[{"op": "transpose", "perm": [3, 2, 0, 1]}]] if part == "weight" else [[]]
            else:
                layouts = [[], [{"op": "reshape", "shape": [1, a.shape[0], 1, 1]}]]
            for lay in layouts:
                out.append(({"keras": uses[part], "transform": [fold] + lay}, apply_transform(a, lay), False))
    return out


def apply_transform(a, steps):
    for st in steps:
        if st["op"] == "transpose":
            a = a.transpose(st["perm"])
        elif st["op"] == "reshape":
            a = a.reshape(st["shape"])
        elif st["op"] == "bn_fold":
            pass  # handled by the caller (needs several variables)
    return a


def invert_layout(a, steps):
    for st in reversed(steps):
        if st["op"] == "transpose":
            a = a.transpose(np.argsort(st["perm"]))
        elif st["op"] == "reshape":
            a = a.reshape(-1)
    return a


def map_initializers(mp, model32):
    consumers = collections.defaultdict(list)
    for n in mp.graph.node:
        for i, name in enumerate(n.input):
            consumers[name].append((n.op_type, i))
    cands = candidates(model32)
    recs = []
    for t in mp.graph.initializer:
        a = numpy_helper.to_array(t)
        rec = {"name": t.name, "shape": list(a.shape), "dtype": str(a.dtype),
               "consumers": sorted(consumers[t.name])}
        ops = {op for op, _ in consumers[t.name]}
        exact, close = [], []
        if a.dtype.kind == "f":
            for d, c, is_exact in cands:
                if c.shape != a.shape:
                    continue
                if is_exact and np.array_equal(a.astype(np.float64), c):
                    exact.append(d)
                elif not is_exact:
                    err = rel(a, c)
                    if err < 1e-5:
                        close.append(dict(d, max_rel_err=err))
        ev = {"exact_matches": exact, "fold_matches": close}
        # A fold into a Conv is fed to the Conv; an affine fold to a Mul/Add. (The shift of a BN
        # after a bias-free Conv equals that Conv's folded bias: the consumer tells them apart.)
        close = [d for d in close if (d["transform"][0]["part"] in ("weight", "bias")) == ("Conv" in ops)]
        if exact:
            d = exact[0]
            kind = "parameter_view" if d["transform"] else "parameter"
            rec.update(kind=kind, keras=d["keras"][0], transform=d["transform"], trainable=True,
                       method="exact value equality with the Keras variable%s" %
                              (" through the transform" if d["transform"] else ""))
        elif close:
            d = close[0]
            fold = d["transform"][0]
            if fold["part"] in ("weight", "bias"):
                fv = "%s/%s" % (fold["conv"], "kernel" if fold["part"] == "weight" else "bias")
                km = ("bn_folded: %s folded into %s (fuse: kernel*s, bias beta+(b-mean)*s), %s removed; %s "
                      "trainable, holding this file's value" % (fold["batchnorm"], fold["conv"], fold["batchnorm"], fv))
            else:
                fv = "%s/%s" % (fold["batchnorm"], fold["part"])
                km = ("bn_folded: %s replaced by y = x * scale + shift; %s trainable, holding this file's value"
                      % (fold["batchnorm"], fv))
            rec.update(kind="bn_folded", keras=d["keras"], transform=d["transform"], trainable=True,
                       folded=fold, folded_variable=fv, keras_model=km,
                       method="value matching with tolerance (max rel err %.1e) against the BN fold %s, fed to %s"
                              % (d["max_rel_err"], fold["formula"], "/".join(sorted(ops))))
        else:
            rec.update(kind="constant", keras="constant", transform=[], trainable=False,
                       method="matches no Keras variable nor BN fold (%s)" % a.dtype)
            if a.size <= 16:
                rec["value"] = a.tolist()
        rec["evidence"] = ev
        recs.append(rec)
    return recs


def bn_modes(recs):
    return {r["folded"]["batchnorm"]: ("conv" if r["folded"]["part"] in ("weight", "bias") else "affine")
            for r in recs if r["kind"] == "bn_folded"}


def folded_model(dtype, model32, recs, mp):
    """The BN-folded Keras model in `dtype`, its variables holding the file's values."""
    vals = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    fm = build(dtype, bn_modes(recs))
    by_var = {}
    for r in recs:
        if r["kind"] in ("parameter", "parameter_view"):
            by_var[r["keras"]] = r
        elif r["kind"] == "bn_folded":
            by_var[r["folded_variable"]] = r
    src = var_values(model32)
    for v in fm.weights:
        r = by_var.get(v.path)
        if r is None:
            raise RuntimeError("no initializer holds %s: the file is not what this script expects" % v.path)
        steps = r["transform"][1:] if r["kind"] == "bn_folded" else r["transform"]
        a = invert_layout(vals[r["name"]], steps)
        if r["kind"] != "bn_folded":
            assert np.array_equal(a, src[v.path]), v.path
        v.assign(a.astype(dtype))
    return fm


def folded_value(rec, vals):
    """An initializer's value from a dict of (original) Keras variable values."""
    st = rec["transform"]
    if rec["kind"] == "bn_folded":
        f = st[0]
        arrs = fold_arrays(vals, f["batchnorm"], f.get("conv"), f["eps"])
        return apply_transform(arrs[f["part"]], st[1:])
    return apply_transform(np.asarray(vals[rec["keras"]], np.float64), st)


def init_layout(rec, folded_vals):
    """An initializer's array from the BN-folded model's variable values."""
    key = rec["folded_variable"] if rec["kind"] == "bn_folded" else rec["keras"]
    st = rec["transform"][1:] if rec["kind"] == "bn_folded" else rec["transform"]
    return apply_transform(np.asarray(folded_vals[key], np.float64), st)


