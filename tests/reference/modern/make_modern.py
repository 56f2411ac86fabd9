#!/usr/bin/python3
"""Reference data for issue 14 ("Train what today's exporters write").

Run by hand, never by the build or the tests:

    /usr/bin/python3 tests/reference/modern/make_modern.py          # all models
    /usr/bin/python3 tests/reference/modern/make_modern.py resnet   # only some

The first run creates a venv at $HOME/.cache/onnx-mirror/venv-modern (override with
OMT_MODERN_VENV) with Debian's python3 and installs the current torch, torchvision,
transformers, onnx, onnxruntime, onnxscript and numpy from PyPI (torch's default Linux
wheel, which pulls the CUDA libraries: several GB; only the CPU is used). Later runs reuse
it. The script then re-executes itself inside the venv.

For each model it exports two ONNX files into tests/data/modern/:
  <model>_dynamo.onnx   torch.onnx.export(..., dynamo=True), default opset, optimize=True
  <model>_legacy.onnx   torch.onnx.export(..., dynamo=False, opset_version=17)
(plus a few variants for the ResNet: train-mode BN, dynamo optimize=False), and writes
  <model>_ref.npz                 feeds (by ONNX input name), float64 torch outputs and loss,
                                  float32 torch outputs and loss, labels/targets
  <model>_<exporter>_params.json  every initializer: name, shape, dtype, trainable, the torch
                                  parameter it holds and the transform, and how that was found
  <model>_<exporter>_ref.npz      grad/<initializer> and sgd3/<initializer> keyed by that
                                  exporter's initializer names
  manifest.json                   versions, per file: checker, onnxruntime vs torch, opset,
                                  IR version, op histogram, inputs/outputs, BN handling, errors

npz key conventions (the C++ tests read these):
  <model>_ref.npz:  feed/<input name>, labels (int64) or target (float), out64/<output>,
                    out32/<output>, loss64, loss32   (outputs named as in the dynamo file;
                    the legacy file's names are in the manifest)
  <model>_<exporter>_ref.npz: grad/<initializer>, param0/<initializer>, sgd3/<initializer>
                    (all float64, already transformed into the initializer's layout)
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(REPO, "tests", "data", "modern")
VENV = os.environ.get("OMT_MODERN_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "onnx-mirror", "venv-modern"))
PACKAGES = ["torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"]


def ensure_venv():
    """Create the venv if needed and re-exec this script inside it."""
    py = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(os.path.join(VENV, ".omt-complete")):
        os.makedirs(os.path.dirname(VENV), exist_ok=True)
        if not os.path.exists(py):
            subprocess.check_call(["/usr/bin/python3", "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "--upgrade", "pip"])
        subprocess.check_call([py, "-m", "pip", "install"] + PACKAGES)
        open(os.path.join(VENV, ".omt-complete"), "w").close()
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


#@@BODY@@

if __name__ == "__main__":
    ensure_venv()
    if "--setup-only" in sys.argv:
        sys.exit(0)
    main(sys.argv[1:])
