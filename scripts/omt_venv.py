"""The PyPI venv that reference, example and benchmark scripts run in.

    sys.path.insert(0, os.path.join(REPO, "scripts")); import omt_venv
    omt_venv.ensure(__file__, ["torch", "transformers", ...])

creates $HOME/.cache/onnx-mirror/venv-modern (OMT_MODERN_VENV overrides it) with Debian's
/usr/bin/python3 on first use, pip-installs the packages there once (a stamp file marks a
finished install), and re-executes the calling script inside it; inside the venv it returns
at once. The venv is the one tests/reference/modern/make_modern.py makes.
"""
import os
import subprocess
import sys

VENV = os.environ.get("OMT_MODERN_VENV",
                      os.path.join(os.path.expanduser("~"), ".cache", "onnx-mirror", "venv-modern"))


def ensure(script, packages):
    py = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(os.path.join(VENV, ".omt-complete")):
        os.makedirs(os.path.dirname(VENV), exist_ok=True)
        if not os.path.exists(py):
            subprocess.check_call(["/usr/bin/python3", "-m", "venv", VENV])
        subprocess.check_call([py, "-m", "pip", "install", "--upgrade", "pip"])
        subprocess.check_call([py, "-m", "pip", "install"] + list(packages))
        open(os.path.join(VENV, ".omt-complete"), "w").close()
    os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])
