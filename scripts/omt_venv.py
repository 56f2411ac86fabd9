"""The PyPI venv that reference, example and benchmark scripts run in.

    sys.path.insert(0, os.path.join(REPO, "scripts")); import omt_venv
    omt_venv.ensure(__file__, ["torch", "transformers", ...])

creates $HOME/.cache/onnx-mirror/venv-modern (OMT_MODERN_VENV overrides it) with Debian's
/usr/bin/python3 on first use, pip-installs the packages there once (a stamp file per set of
packages marks a finished install, so scripts that share the venv but need more packages
still get them), and re-executes the calling script inside it; inside the venv it returns
at once. A script whose packages cannot share that venv (TensorFlow's pins) names its own:
ensure(__file__, packages, venv=..., check=True) also runs `pip check` after the install.
"""
import hashlib
import os
import subprocess
import sys

VENV = os.environ.get("OMT_MODERN_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "onnx-mirror", "venv-modern"))


def ensure(script, packages, venv=VENV, check=False):
    py = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    wanted = hashlib.sha1(" ".join(sorted(packages)).encode()).hexdigest()[:12]
    stamp = os.path.join(venv, ".omt-complete-" + wanted)
    if not os.path.exists(stamp):
        os.makedirs(os.path.dirname(venv), exist_ok=True)
        if not os.path.exists(py):
            subprocess.check_call(["/usr/bin/python3", "-m", "venv", venv])
        subprocess.check_call([py, "-m", "pip", "install", "--upgrade", "pip"])
        subprocess.check_call([py, "-m", "pip", "install"] + list(packages))
        if check:
            subprocess.check_call([py, "-m", "pip", "check"])
        open(stamp, "w").close()
    os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])
