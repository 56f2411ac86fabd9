"""make_keras.py's model: the Keras CNN, its layers, seeded perturbation and BatchNorm folding."""
# Imported by make_keras.py inside its venv only (TensorFlow from PyPI).
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
L = keras.layers

BATCH = 16
HWC = (16, 16, 3)
CLASSES = 10
INPUT = "image"


def make_affine():
    class Affine(L.Layer):
        """Inference BatchNormalization as the file computes it: y = x * scale + shift."""

        def build(self, input_shape):
            c = input_shape[-1]
            self.scale = self.add_weight(shape=(c,), name="scale", initializer="ones")
            self.shift = self.add_weight(shape=(c,), name="shift", initializer="zeros")

        def call(self, x):
            return x * self.scale + self.shift
    return Affine


# conv2 has no bias, as is usual before a BatchNormalization (tf2onnx then folds bn2 into it)
STACK = [
    ("conv", dict(filters=8, kernel_size=3, activation="relu", name="conv1")),
    ("bn", dict(name="bn1")),
    ("pool", dict(pool_size=2, name="pool1")),
    ("conv", dict(filters=16, kernel_size=3, use_bias=False, name="conv2")),
    ("bn", dict(name="bn2")),
    ("relu", dict(name="relu2")),
    ("flatten", dict(name="flatten")),
    ("dropout", dict(rate=0.25, name="dropout")),
    ("dense", dict(units=CLASSES, name="logits")),
]


def layers(dtype, modes=None, stack=None):
    """The layer stack. modes[bn name]: 'bn' (BatchNormalization, the default), 'affine'
    (y = x * scale + shift) or 'conv' (folded into the Conv before it, which gets a bias)."""
    modes = modes or {}
    stack = [(k, dict(kw)) for k, kw in (stack or STACK)]
    for i, (k, kw) in enumerate(stack):
        if k == "bn" and modes.get(kw["name"]) == "conv":
            assert stack[i - 1][0] == "conv" and stack[i - 1][1].get("activation") is None, kw["name"]
            stack[i - 1][1]["use_bias"] = True
    make = {"conv": L.Conv2D, "bn": L.BatchNormalization, "pool": L.MaxPooling2D, "relu": L.ReLU,
            "flatten": L.Flatten, "dropout": L.Dropout, "dense": L.Dense}
    out = []
    for k, kw in stack:
        mode = modes.get(kw["name"], "bn") if k == "bn" else None
        if mode == "conv":
            continue
        out.append((make_affine() if mode == "affine" else make[k])(dtype=dtype, **kw))
    return out


def build(dtype="float32", modes=None, stack=None):
    inp = keras.Input(HWC, name=INPUT, dtype=dtype)
    x = inp
    for layer in layers(dtype, modes, stack):
        x = layer(x)
    return keras.Model(inp, x, name="keras_cnn")


def build_sequential():
    return keras.Sequential([keras.Input(HWC, name=INPUT)] + layers("float32"), name="keras_cnn_seq")


def perturb(model, rng):
    """Keras' biases start at 0 and BN at gamma 1, beta 0, mean 0, variance 1: seeded noise so
    that nothing is constant (tf2onnx drops a zero bias and folds constant BN away)."""
    for v in model.weights:
        leaf = v.path.split("/")[-1]
        a = v.numpy()
        if leaf in ("bias", "beta"):
            a = rng.normal(0.0, 0.1, a.shape)
        elif leaf == "gamma":
            a = 1.0 + rng.normal(0.0, 0.1, a.shape)
        elif leaf == "moving_mean":
            a = rng.uniform(-0.2, 0.2, a.shape)
        elif leaf == "moving_variance":
            a = rng.uniform(0.5, 1.5, a.shape)
        v.assign(a.astype(np.float32))


def bn_layers(model):
    return [l for l in model.layers if isinstance(l, L.BatchNormalization)]


def bn_fold(bn_vals, eps):
    """(s, t) of an inference BatchNormalization, float64: y = x * s + t."""
    g, b, m, v = (np.asarray(bn_vals[k], np.float64) for k in ("gamma", "beta", "moving_mean", "moving_variance"))
    s = g / np.sqrt(v + eps)
    return s, b - m * s


def var_values(model):
    return {v.path: v.numpy() for v in model.weights}


