#!/usr/bin/python3
"""Reference data for issue 14, the TensorFlow users' point: a Keras CNN exported with tf2onnx.

Run by hand, never by the build or the tests (about a minute on 2 cores after the install):

    /usr/bin/python3 tests/reference/modern/make_keras.py

The first run creates a venv at $HOME/.cache/onnx-mirror/venv-keras (override with
OMT_KERAS_VENV) with Debian's /usr/bin/python3 and pip-installs the current tensorflow-cpu,
tf2onnx, onnx, onnxruntime and numpy from PyPI (no pins: the newest releases resolve
together and `pip check` is clean; versions go to keras_cnn_params.json). Later runs reuse
it. The script then re-executes itself inside the venv.

The model (Keras 3 functional API, seeded; 5,482 parameters), NHWC input 16x16x3:
  image -> Conv2D(8, 3, relu) conv1 -> BatchNormalization bn1 -> MaxPooling2D(2) pool1
        -> Conv2D(16, 3, use_bias=False) conv2 -> BatchNormalization bn2 -> ReLU -> Flatten
        -> Dropout(0.25) -> Dense(10) logits            (the ONNX output is the logits)
Every bias, BN gamma/beta and moving statistic gets seeded noise: Keras' zero biases and
0/1 BN statistics would be constant-folded away by tf2onnx (see "probes" in the json).
It is exported with tf2onnx's defaults, tf2onnx.convert.from_keras(model,
input_signature=(TensorSpec((None, 16, 16, 3), float32, "image"),)), opset left to tf2onnx.
(A keras.Sequential model does not convert with tf2onnx 1.17 and Keras 3: "probes".)

tf2onnx writes an inference graph: Dropout is gone, and each BatchNormalization, which Keras
traces as x * s + (beta - moving_mean * s) with s = gamma / sqrt(moving_variance + eps), is
constant-folded: bn1 (after a ReLU) into a Mul by s and an Add of t = beta - moving_mean * s,
[1, C, 1, 1] initializers; bn2 (right after the bias-free conv2) into that Conv's weight
(W * s) and bias (t). The references are therefore those of the "BN-folded" Keras model:
the same network with bn1 replaced by y = x * scale + shift and bn2 fused into conv2 (which
gets a bias), these variables trainable and holding the file's values (the convention
make_modern.py uses for torch files with BatchNorm folded into Conv). Gradients of the
other initializers are the same in both models; the original Keras model's gradients
(gamma, beta included) are written too, and the two are checked against each other by the
chain rule. All references use training=False (BatchNorm on moving statistics, Dropout the
identity), as the exported graph does.

tf2onnx is not deterministic from run to run (PYTHONHASHSEED=0 does not help): the names it
makes up (const_fold_opt__N, const_axes__N, Transpose__N) change, so the initializer holding
bn1's shift is const_fold_opt__46 in one run and __47 in the next, and the Flatten's Reshape
shape is sometimes a constant [-1, 400] and sometimes a Shape/Gather/Cast/Slice/Concat/Cast
chain. The values, the npz arrays and the mapping do not change; the three files below are
written together and must be kept together (params.json gives each initializer's keys).

It writes into tests/data/modern/:
  keras_cnn.onnx          the tf2onnx export
  keras_cnn_ref.npz       float64 unless said:
    image                 the input batch, float32 NHWC (the ONNX graph input's name)
    labels                int64 class labels
    loss, loss32          mean sparse categorical cross-entropy of the logits, f64 / f32
    out/logits, out32/logits   the forward output (the ONNX output's name), f64 / f32
    grad/<init>           d loss / d initializer, in the initializer's layout (BN-folded model)
    sgd/<init>            the initializer after 3 plain SGD steps (lr 0.1) on the same batch
                          on the ONNX parametrisation (every trainable initializer trained)
    keras_out/logits, keras_loss    the original Keras model (float64 copy)
    keras_grad/<variable path>      its gradients, Keras layout (HWIO kernels, [C] BN vectors)
    keras_sgd/<init>      3 SGD steps of the original Keras model (kernels, biases, gamma,
                          beta; moving statistics fixed), mapped into the initializer's layout
                          (for folded ones: the fold of the stepped variables)
  keras_cnn_params.json   versions, export call, opset/IR, ops, inputs/outputs, what became
                          of BatchNormalization and Dropout, checks, float32-vs-float64, probes,
                          and one record per initializer (name, shape, dtype, kind, trainable,
                          the Keras variable(s) it holds, the transform, how that was found,
                          its npz keys), in the schema of make_modern.py's *_params.json
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(REPO, "tests", "data", "modern")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402
VENV = os.environ.get("OMT_KERAS_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "onnx-mirror", "venv-keras"))
PACKAGES = ["tensorflow-cpu", "tf2onnx", "onnx", "onnxruntime", "numpy"]




# ----------------------------------------------------------------------------------------
# Everything below runs inside the venv.

import collections
import json
import traceback

SEED = 1234
LR = 0.1        # plain SGD, no momentum, no weight decay
STEPS = 3       # SGD steps on the same batch


def load_libs():
    global np, tf, keras, L, tf2onnx, onnx, numpy_helper, ort
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import numpy as np
    import onnx
    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx
    import tf2onnx.convert
    from onnx import numpy_helper
    keras = tf.keras
    L = keras.layers
    # The model (keras_models.py) and the reading of the file (keras_mapping.py) import
    # TensorFlow themselves, so they are imported here, inside the venv.
    global BATCH, CLASSES, HWC, INPUT, STACK, build, build_sequential, bn_layers, perturb, var_values
    global apply_transform, bn_convs, bn_modes, export, folded_model, folded_value, init_layout, io_desc
    global map_initializers, op_histogram, ort_run, rel
    from keras_models import (BATCH, CLASSES, HWC, INPUT, STACK, bn_layers, build, build_sequential, perturb,
                              var_values)
    from keras_mapping import (apply_transform, bn_convs, bn_modes, export, folded_model, folded_value, init_layout,
                               io_desc, map_initializers, op_histogram, ort_run, rel)


def versions():
    import importlib.metadata as md
    v = {"python": sys.version.split()[0]}
    for p in ["tensorflow-cpu", "tensorflow", "keras", "tf2onnx", "onnx", "onnxruntime", "numpy", "protobuf"]:
        try:
            v[p] = md.version(p)
        except md.PackageNotFoundError:
            v[p] = None
    v["tf.keras"] = keras.__version__ if hasattr(keras, "__version__") else None
    v["tf2onnx_default_opset"] = tf2onnx.constants.PREFERRED_OPSET
    return v


# ---------------------------------------------------------------------------- references

def xent(logits, labels):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def tf_refs(model, x, labels):
    """Forward (training=False), loss, gradients of every trainable variable, 3 SGD steps
    (training=False throughout: BN on moving statistics, Dropout identity). Mutates `model`."""
    dt = np.dtype(model.weights[0].numpy().dtype).name
    xt = tf.constant(x.astype(dt))
    lt = tf.constant(labels)
    tv = model.trainable_variables
    r = {}

    def fwd():
        with tf.GradientTape() as tape:
            out = model(xt, training=False)
            loss = xent(out, lt)
        return out, loss, tape.gradient(loss, tv)

    out, loss, grads = fwd()
    r["out"], r["loss"] = out.numpy(), float(loss.numpy())
    r["grads"] = {v.path: g.numpy() for v, g in zip(tv, grads)}
    r["step_losses"] = []
    for _ in range(STEPS):
        _, loss, grads = fwd()
        r["step_losses"].append(float(loss.numpy()))
        for v, g in zip(tv, grads):
            v.assign_sub(LR * g)
    r["sgd"] = var_values(model)
    r["stepped_out"] = model(xt, training=False).numpy()
    return r



# ---------------------------------------------------------------------------- the file
# ---------------------------------------------------------------------------- probes

def probe_sequential():
    keras.utils.set_random_seed(SEED)
    m = build_sequential()
    perturb(m, np.random.default_rng(SEED))
    try:
        mp = export(m)
        return {"call": "tf2onnx.convert.from_keras(Sequential(...), input_signature=...)", "ok": True,
                "ops": op_histogram(mp), "outputs": io_desc(mp.graph.output)}
    except Exception as e:  # noqa: BLE001
        return {"call": "tf2onnx.convert.from_keras(Sequential(...), input_signature=...)", "ok": False,
                "error": "%s: %s" % (type(e).__name__, e),
                "traceback_tail": traceback.format_exc().strip().splitlines()[-3:],
                "note": "Keras 3 Sequential's output_names are 'keras_tensor_N', which tf2onnx 1.17's "
                        "from_keras looks up in its rename map (KeyError); known as "
                        "onnx/tensorflow-onnx#2448, open. The functional model below (output named after "
                        "its last layer) converts; this script uses it."}


def probe_unperturbed():
    keras.utils.set_random_seed(SEED)
    m = build()
    mp = export(m)
    inits = {t.name: list(t.dims) for t in mp.graph.initializer}
    return {"what": "the same model with Keras' initial values (zero biases, BN gamma 1, beta 0, mean 0, var 1)",
            "ops": op_histogram(mp), "initializers": inits,
            "note": "tf2onnx drops Adds of zeros and Muls by ones after constant folding: zero biases and "
                    "identity BatchNorms leave no initializer, so a freshly initialised export has nothing "
                    "to train there"}


def probe_conv_bias():
    keras.utils.set_random_seed(SEED)
    stack = [(k, dict(kw, use_bias=True) if kw.get("name") == "conv2" else kw) for k, kw in STACK]
    m = build(stack=stack)
    perturb(m, np.random.default_rng(SEED))
    mp = export(m)
    return {"what": "the same model with a bias on conv2 (Conv2D -> BatchNormalization with use_bias=True)",
            "ops": op_histogram(mp), "initializers": {t.name: list(t.dims) for t in mp.graph.initializer},
            "nodes": ["%s(%s)" % (n.op_type, ", ".join(n.input)) for n in mp.graph.node]}


# ---------------------------------------------------------------------------- main

def write_params_json(path, doc):
    """Indented header, one initializer per line."""
    recs = doc.pop("initializers")
    head = json.dumps(doc, indent=1, default=str)
    with open(path, "w") as f:
        f.write(head[:-2] + ',\n "initializers": [\n')
        f.write(",\n".join("  " + json.dumps(r, default=str) for r in recs))
        f.write("\n ]\n}\n")


def main():
    load_libs()
    os.makedirs(OUT, exist_ok=True)
    onnx_path = os.path.join(OUT, "keras_cnn.onnx")
    ver = versions()
    print("versions:", ver, flush=True)

    keras.utils.set_random_seed(SEED)
    model32 = build("float32")
    rng = np.random.default_rng(SEED)
    perturb(model32, rng)
    x = rng.normal(size=(BATCH,) + HWC).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=(BATCH,)).astype(np.int64)

    # ---- export
    mp = export(model32, onnx_path)
    mp = onnx.load(onnx_path)
    checker = "ok"
    try:
        onnx.checker.check_model(mp, full_check=True)
    except Exception as e:  # noqa: BLE001
        checker = "%s: %s" % (type(e).__name__, e)
    out_name = mp.graph.output[0].name
    keras_out32 = model32(x, training=False).numpy()
    ort_out = ort_run(mp, {INPUT: x})[out_name]

    # ---- mapping
    recs = map_initializers(mp, model32)
    fm64 = folded_model("float64", model32, recs, mp)
    fm32 = folded_model("float32", model32, recs, mp)
    km64 = build("float64")
    km64.set_weights([w.astype(np.float64) for w in model32.get_weights()])
    keras_vals64 = var_values(km64)

    r64 = tf_refs(fm64, x, labels)
    r32 = tf_refs(fm32, x, labels)
    rk = tf_refs(km64, x, labels)

    # ---- npz
    npz = collections.OrderedDict()
    npz[INPUT] = x
    npz["labels"] = labels
    npz["loss"] = np.array(r64["loss"], np.float64)
    npz["loss32"] = np.array(r32["loss"], np.float32)
    npz["out/" + out_name] = r64["out"].astype(np.float64)
    npz["out32/" + out_name] = r32["out"].astype(np.float32)
    npz["keras_out/" + out_name] = rk["out"].astype(np.float64)
    npz["keras_loss"] = np.array(rk["loss"], np.float64)
    for path, g in rk["grads"].items():
        npz["keras_grad/" + path] = g.astype(np.float64)
    grads32, sgd32 = {}, {}
    for r in recs:
        if not r["trainable"]:
            continue
        keys = {}
        for what, src64, src32 in (("grad", r64["grads"], r32["grads"]), ("sgd", r64["sgd"], r32["sgd"])):
            key = "%s/%s" % (what, r["name"])
            npz[key] = init_layout(r, src64)
            assert list(npz[key].shape) == r["shape"], (key, npz[key].shape, r["shape"])
            (grads32 if what == "grad" else sgd32)[r["name"]] = init_layout(r, src32)
            keys[what] = key
        key = "keras_sgd/" + r["name"]
        npz[key] = folded_value(r, rk["sgd"])
        keys["keras_sgd"] = key
        if r["kind"] != "bn_folded":
            keys["keras_grad"] = "keras_grad/" + r["keras"]
        else:
            keys["keras_grad"] = ["keras_grad/" + k for k in r["keras"]
                                  if ("keras_grad/" + k) in npz]
        r["ref_keys"] = keys
    np.savez(os.path.join(OUT, "keras_cnn_ref.npz"), **npz)

    # ---- checks
    trainable = [r for r in recs if r["trainable"]]
    # 1. gradients of plain initializers: BN-folded model vs original Keras model
    direct = {r["name"]: rel(npz["grad/" + r["name"]], apply_transform(rk["grads"][r["keras"]], r["transform"]))
              for r in trainable if r["kind"] != "bn_folded"}
    # 2. chain rule between the two parametrisations, s = gamma r, r = 1/sqrt(var + eps):
    #    affine (s, t = beta - mean s):  d/dbeta = d/dt, d/dgamma = r (d/ds - mean d/dt)
    #    conv (Wf = W s, bf = beta + (b - mean) s):  d/dbeta = d/dbf, d/dW = s d/dWf,
    #        d/dgamma = r (sum_hwi W d/dWf + (b - mean) d/dbf), d/db = s d/dbf
    chain = {}
    modes = bn_modes(recs)
    convs = bn_convs(model32)
    for bn in bn_layers(model32):
        n = bn.name
        g = lambda k: keras_vals64["%s/%s" % (n, k)]  # noqa: E731
        r_ = 1.0 / np.sqrt(g("moving_variance") + bn.epsilon)
        s_ = g("gamma") * r_
        if modes.get(n) == "affine":
            ds, dt_ = r64["grads"]["%s/scale" % n], r64["grads"]["%s/shift" % n]
            chain[n] = {"mode": "affine",
                        "beta_rel": rel(dt_, rk["grads"]["%s/beta" % n]),
                        "gamma_rel": rel(r_ * (ds - g("moving_mean") * dt_), rk["grads"]["%s/gamma" % n])}
        elif modes.get(n) == "conv":
            c = convs[n].name
            dwf, dbf = r64["grads"][c + "/kernel"], r64["grads"][c + "/bias"]
            w = keras_vals64[c + "/kernel"]
            b = keras_vals64.get(c + "/bias", 0.0)
            chain[n] = {"mode": "conv", "conv": c,
                        "beta_rel": rel(dbf, rk["grads"]["%s/beta" % n]),
                        "gamma_rel": rel(r_ * ((w * dwf).sum(axis=(0, 1, 2)) + (b - g("moving_mean")) * dbf),
                                         rk["grads"]["%s/gamma" % n]),
                        "kernel_rel": rel(s_ * dwf, rk["grads"][c + "/kernel"])}
            if (c + "/bias") in rk["grads"]:
                chain[n]["bias_rel"] = rel(s_ * dbf, rk["grads"][c + "/bias"])
    # 3. stepped values written into the file through the mapping, run in onnxruntime
    stepped = onnx.load(onnx_path)
    for t in stepped.graph.initializer:
        if ("sgd/" + t.name) in npz:
            t.CopyFrom(numpy_helper.from_array(npz["sgd/" + t.name].astype(np.float32), t.name))
    stepped_ort = ort_run(stepped, {INPUT: x})[out_name]
    # 4. float32 vs float64 (references from the BN-folded model in both precisions)
    f32_vs_f64 = {
        "output_rel": rel(r32["out"], r64["out"]),
        "output_max_abs": float(np.max(np.abs(r32["out"] - r64["out"]))),
        "loss_f32": r32["loss"], "loss_f64": r64["loss"],
        "loss_rel": abs(r32["loss"] - r64["loss"]) / abs(r64["loss"]),
        "grad_rel_per_initializer": {k: rel(grads32[k], npz["grad/" + k]) for k in grads32},
        "sgd3_rel_per_initializer": {k: rel(sgd32[k], npz["sgd/" + k]) for k in sgd32},
        "sgd_step_losses_f64": r64["step_losses"], "sgd_step_losses_f32": r32["step_losses"],
        "note": "rel = max|f32 - f64| / max|f64| per tensor; both runs are TensorFlow (GradientTape) on "
                "the BN-folded Keras model, one built with dtype float32, one with float64",
    }
    f32_vs_f64["grad_rel_worst"] = max(f32_vs_f64["grad_rel_per_initializer"].values())
    f32_vs_f64["sgd3_rel_worst"] = max(f32_vs_f64["sgd3_rel_per_initializer"].values())
    # 5. how would the float32 references pass the repo's test tolerance (rtol 1e-4, atol 1e-5)?
    def excess(a, b):
        return float(np.max(np.abs(np.asarray(a, np.float64) - b) - (1e-5 + 1e-4 * np.abs(b))))
    f32_vs_f64["passes_rtol1e-4_atol1e-5"] = bool(
        all(excess(grads32[k], npz["grad/" + k]) <= 0 for k in grads32)
        and all(excess(sgd32[k], npz["sgd/" + k]) <= 0 for k in sgd32)
        and excess(r32["out"], r64["out"]) <= 0)

    checks = {
        "onnx_checker_full_check": checker,
        "onnxruntime_vs_keras_float32_max_abs": float(np.max(np.abs(ort_out - keras_out32))),
        "onnxruntime_vs_reference_f64_rel": rel(ort_out, r64["out"]),
        "folded_model_vs_keras_model_f64_output_rel": rel(r64["out"], rk["out"]),
        "folded_model_vs_keras_model_loss_rel": abs(r64["loss"] - rk["loss"]) / abs(rk["loss"]),
        "grad_folded_vs_keras_rel_per_plain_initializer": direct,
        "bn_chain_rule_rel": chain,
        "stepped_file_onnxruntime_vs_reference_rel": rel(stepped_ort, r64["stepped_out"]),
        "keras_sgd_vs_sgd_rel_per_initializer": {r["name"]: rel(npz["keras_sgd/" + r["name"]], npz["sgd/" + r["name"]])
                                                 for r in trainable},
        "note": "grad_folded_vs_keras: the two parametrisations give the same gradients for the initializers "
                "that hold a Keras variable (the folded model holds the file's float32 s and t, hence ~1e-7); "
                "keras_sgd differs from sgd because training gamma/beta is not training s/t",
    }

    # ---- json
    bn_notes = {}
    for bn in bn_layers(model32):
        parts = {r["folded"]["part"]: r["name"] for r in recs if r["kind"] == "bn_folded"
                 and r["folded"]["batchnorm"] == bn.name}
        bn_notes[bn.name] = {"epsilon": bn.epsilon, "mode": modes.get(bn.name),
                             "initializers": {p: "%s (%s)" % (nm, "/".join(sorted({op for op, _ in next(
                                 r for r in recs if r["name"] == nm)["consumers"]}))) for p, nm in parts.items()}}
    ops = op_histogram(mp)
    keras_params = {v.path: {"shape": list(v.shape), "trainable": bool(v.trainable)} for v in model32.weights}
    doc = collections.OrderedDict()
    doc["model"] = "keras_cnn"
    doc["file"] = "keras_cnn.onnx"
    doc["generated_by"] = "tests/reference/modern/make_keras.py"
    doc["versions"] = ver
    doc["reproducibility"] = ("tf2onnx's generated names (const_fold_opt__N, ...) and the form of the Flatten "
                              "Reshape shape (constant or a Shape chain) vary between runs of this script; keep "
                              "the .onnx, _ref.npz and _params.json of one run together")
    doc["export_call"] = ("tf2onnx.convert.from_keras(model, input_signature=(tf.TensorSpec((None, 16, 16, 3), "
                          "tf.float32, name='image'),))  # every other argument default, opset=None")
    doc["opset_import"] = {o.domain or "ai.onnx": o.version for o in mp.opset_import}
    doc["ir_version"] = mp.ir_version
    doc["producer"] = "%s %s" % (mp.producer_name, mp.producer_version)
    doc["op_histogram"] = ops
    doc["inputs"] = io_desc(mp.graph.input)
    doc["outputs"] = io_desc(mp.graph.output)
    doc["layout"] = ("the graph input is NHWC as in Keras; tf2onnx inserts Transpose(perm 0,3,1,2) after it and "
                     "runs Conv/Relu/Mul/Add/MaxPool in NCHW, then Transpose(perm 0,2,3,1) back to NHWC before "
                     "the Flatten Reshape (so the Dense kernel keeps Keras' [in, out] order, fed to MatMul)")
    doc["batchnorm"] = ("no BatchNormalization node (Keras 3 on TF traces inference BN as x*s + (beta - mean*s), "
                        "s = gamma*rsqrt(var+eps), which tf2onnx constant-folds): bn1, after conv1's ReLU, became "
                        "Mul by s and Add of t = beta - mean*s, [1,C,1,1] initializers; bn2, right after the "
                        "bias-free conv2, was folded into that Conv (weight W*s, bias t). gamma, beta and the "
                        "moving statistics are not in the file. With a conv2 bias, tf2onnx keeps Conv(bias)+Mul+Add "
                        "instead (probes/conv2_with_bias)")
    doc["batchnorm_initializers"] = bn_notes
    doc["dropout"] = "no Dropout node: traced with training=False it is the identity and tf2onnx removes it"
    doc["keras_model"] = {"parameters": int(model32.count_params()), "variables": keras_params,
                          "layers": [l.name for l in model32.layers]}
    doc["feeds"] = {INPUT: {"shape": list(x.shape), "dtype": "float32", "layout": "NHWC"}}
    doc["labels"] = {"shape": list(labels.shape), "dtype": "int64"}
    doc["loss"] = "cross_entropy"
    doc["loss_definition"] = ("mean over the batch of sparse categorical cross-entropy of the ONNX output, which is "
                              "the logits (Dense without activation): tf.nn.sparse_softmax_cross_entropy_with_logits")
    doc["reference_mode"] = ("training=False throughout (BatchNorm on moving statistics, Dropout identity), as in the "
                             "exported inference graph; grad/ and sgd/ are GradientTape on the BN-folded Keras model "
                             "(each BN replaced by x*scale+shift holding the file's s and t, all initializers "
                             "trained), plain SGD lr %g, %d steps on the same batch" % (LR, STEPS))
    doc["f32_vs_f64"] = f32_vs_f64
    doc["checks"] = checks
    doc["probes"] = {"sequential": probe_sequential(), "unperturbed": probe_unperturbed(),
                     "conv2_with_bias": probe_conv_bias()}
    doc["kinds"] = {
        "parameter": "holds a Keras variable as is (trainable)",
        "parameter_view": "holds a transform of a Keras variable (Conv kernel HWIO -> OIHW transpose); trainable: "
                          "its gradient is the transform of TensorFlow's gradient",
        "bn_folded": "a Mul/Add constant folded from a BatchNormalization's gamma, beta and moving statistics "
                     "(see 'folded'): trainable as scale/shift of the BN-folded Keras model (see 'keras_model')",
        "constant": "a constant of the graph (shapes): not trainable",
    }
    doc["npz_keys"] = __doc__.split("keras_cnn_ref.npz", 1)[1].split("keras_cnn_params.json")[0].strip()
    doc["initializers"] = recs
    write_params_json(os.path.join(OUT, "keras_cnn_params.json"), doc)

    sizes = {f: os.path.getsize(os.path.join(OUT, f)) for f in
             ("keras_cnn.onnx", "keras_cnn_ref.npz", "keras_cnn_params.json")}
    print(json.dumps({"sizes": sizes, "opset": doc["opset_import"], "ir": doc["ir_version"], "ops": ops,
                      "checks": checks, "f32_vs_f64": f32_vs_f64, "probes_sequential_ok": doc["probes"]["sequential"]["ok"]},
                     indent=1, default=str))
    for r in recs:
        print("%-60s %-16s %-15s %s" % (r["name"], r["shape"], r["kind"], r["keras"]))


if __name__ == "__main__":
    omt_venv.ensure(__file__, PACKAGES, venv=VENV, check=True)
    main()
