#!/usr/bin/env python3
"""Check that what onnx-mirror-train writes is valid ONNX that onnxruntime runs (issue 14).

Run by hand, never by the build or the tests:

    python3 tests/reference/modern/check_onnxruntime.py --cli build/tools/onnx-mirror-train

For every model in tests/data/modern/*.onnx (with its <model>_ref.npz) and models/mlp.onnx,
models/cnn.onnx (random feeds), in a temporary folder:

1. `train MODEL --data train.npz --labels labels --loss L --steps 3 --global-batch B --lr 0.01
   --output trained.onnx`; train.npz is the reference batch repeated 3 times.
2. `export-training-graph MODEL --labels labels --loss L --optimizer sgd --lr 0.01
   --output train_graph.onnx`.
3. onnx.checker.check_model(full_check=True) on both files; onnxruntime (CPU) loads both (the
   training graph holds com.onnx-mirror ops, so a refusal there is expected and recorded) and
   runs trained.onnx on the reference feeds, compared with `predict trained.onnx` (1 and 2
   replicas), rtol 1e-4 atol 1e-5. `predict` on the original file is compared with the
   reference output out/<output> (train_out/<output> too for the *_train exports) and with
   onnxruntime on the original file.
4. Prints a table and writes it to tests/data/modern/onnxruntime_check.md (--md to change,
   --md '' for none). Nothing else is written into the repository.

The venv $HOME/.cache/onnx-mirror/venv-modern (OMT_MODERN_VENV) of scripts/omt_venv.py is
reused (onnx, onnxruntime and numpy are installed into it if missing); the script re-execs
itself inside it.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA = os.path.join(REPO, "tests", "data", "modern")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402
PACKAGES = ["onnx", "onnxruntime", "numpy"]
RTOL, ATOL = 1e-4, 1e-5
STEPS, REPEAT, LR = 3, 3, 0.01


omt_venv.ensure(__file__, PACKAGES)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402


# ----------------------------------------------------------------------------------------
# the CLI, copied with its library so a rebuild of the build folder does not disturb a run

def stage_cli(cli, bindir):
    os.makedirs(bindir, exist_ok=True)
    dst = os.path.join(bindir, os.path.basename(cli))
    shutil.copy2(cli, dst)
    lib = None
    ldd = subprocess.run(["ldd", cli], capture_output=True, text=True).stdout
    for line in ldd.splitlines():
        m = re.match(r"\s*(libonnx_mirror\.so\S*)\s+=>\s+(\S+)", line)
        if m:
            lib = (m.group(1), m.group(2))
    if lib is None:
        for d in (os.path.dirname(cli), os.path.dirname(os.path.dirname(cli))):
            hits = sorted(glob.glob(os.path.join(d, "libonnx_mirror.so*")))
            if hits:
                lib = (os.path.basename(hits[0]), hits[0])
                break
    if lib is not None and os.path.exists(lib[1]):
        shutil.copy2(os.path.realpath(lib[1]), os.path.join(bindir, lib[0]))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = bindir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return dst, env


class Cli:
    def __init__(self, path, env, log):
        self.path, self.env, self.log = path, env, log

    def __call__(self, *args, cwd):
        cmd = [self.path] + [str(a) for a in args]
        try:
            p = subprocess.run(cmd, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=900)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = -1, "", "timed out after 900 s"
        with open(self.log, "a") as f:
            f.write("$ (cd %s && %s)\n%s%s[rc %d]\n\n" % (cwd, " ".join(cmd), out, err, rc))
        return rc, out, err


def error_text(out, err):
    """The CLI's error lines (stderr first), without progress and warning noise."""
    lines = [l.strip() for l in (err + "\n" + out).splitlines() if l.strip()]
    keep = [l for l in lines if re.search(r"error|fail|not |cannot|can't|unsupported|invalid|mismatch|expect",
                                          l, re.I) and not l.lower().startswith("warning")]
    return " | ".join(keep or lines[-3:])[:600]


# ----------------------------------------------------------------------------------------
# models and their data

def cli_loss(kind):
    return {"cross_entropy": "cross-entropy", "token_cross_entropy": "cross-entropy", "mse": "mse"}[kind]


def graph_io(path):
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits], [o.name for o in m.graph.output]


def model_cases(only):
    manifest = json.load(open(os.path.join(DATA, "manifest.json")))["models"]
    bases = sorted(manifest, key=len, reverse=True)
    cases = []
    for path in sorted(glob.glob(os.path.join(DATA, "*.onnx"))):
        stem = os.path.basename(path)[:-5]
        base = next((b for b in bases if stem.startswith(b + "_")), None)
        if base is None:
            continue
        m = manifest[base]
        ref = dict(np.load(os.path.join(DATA, base + "_ref.npz")))
        cases.append(dict(model=base, variant=stem[len(base) + 1:], path=path,
                          feeds={k: ref[k] for k in m["feeds"]}, labels=ref["labels"],
                          loss=m["loss"], ref=ref))
    # The Keras CNN of make_keras.py keeps its facts in its own params json.
    keras = os.path.join(DATA, "keras_cnn.onnx")
    if os.path.exists(keras):
        p = json.load(open(os.path.join(DATA, "keras_cnn_params.json")))
        ref = dict(np.load(os.path.join(DATA, "keras_cnn_ref.npz")))
        feeds = [i["name"] for i in p["inputs"]] if isinstance(p.get("inputs"), list) else ["image"]
        cases.append(dict(model="keras_cnn", variant="tf2onnx", path=keras,
                          feeds={k: ref[k] for k in feeds}, labels=ref["labels"], loss=p["loss"], ref=ref))
    rng = np.random.default_rng(1234)
    for name in ("mlp", "cnn"):
        path = os.path.join(REPO, "models", name + ".onnx")
        if os.path.exists(path):
            cases.append(dict(model=name, variant="models/", path=path,
                              feeds={"input": rng.random((8, 1, 28, 28), dtype=np.float32)},
                              labels=rng.integers(0, 10, 8).astype(np.int64),
                              loss="cross_entropy", ref={}))
    if only:
        cases = [c for c in cases if re.search(only, c["model"] + "_" + c["variant"])]
    return cases


# ----------------------------------------------------------------------------------------
# checks

def compare(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, "shape %s vs %s" % (a.shape, b.shape)
    d = float(np.max(np.abs(a - b))) if a.size else 0.0
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL)), "%.2g" % d


def checker(path):
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        return True, "ok"
    except Exception as e:  # noqa: BLE001
        return False, "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:400] if str(e).strip() else "")


def ort_session(path):
    try:
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"]), "ok"
    except Exception as e:  # noqa: BLE001
        return None, "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:400])


def ort_run(sess, feeds):
    names = [i.name for i in sess.get_inputs()]
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {n: feeds[n] for n in names})))


def type_text(t):
    tt = t.tensor_type
    return "%s[%s]" % (onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name,
                       ",".join(d.dim_param or str(d.dim_value) for d in tt.shape.dim))


def custom_ops(path):
    m = onnx.load(path, load_external_data=False)
    return sorted({"%s:%s" % (n.domain, n.op_type) for n in m.graph.node if n.domain not in ("", "ai.onnx")})


def run_case(c, cli, work):
    d = os.path.join(work, c["model"] + "_" + c["variant"].strip("/").replace("/", "_") or "models")
    os.makedirs(d, exist_ok=True)
    row, notes = {}, []

    def fail(col, msg):
        notes.append((col, msg))
        row[col] = "FAIL [%d]" % len(notes)

    def note(col, text, msg):
        notes.append((col, msg))
        row[col] = "%s [%d]" % (text, len(notes))

    inputs, outputs = graph_io(c["path"])
    out0 = outputs[0]
    feeds = c["feeds"]
    batch = next(iter(feeds.values())).shape[0]
    np.savez(os.path.join(d, "feeds.npz"), **feeds)
    train = {k: np.concatenate([v] * REPEAT) for k, v in feeds.items()}
    train["labels"] = np.concatenate([c["labels"]] * REPEAT)
    np.savez(os.path.join(d, "train.npz"), **train)
    loss = cli_loss(c["loss"])

    # the original file: predict vs the reference and vs onnxruntime
    rc, out, err = cli("predict", c["path"], "--data", "feeds.npz", "--output", "pred_orig.npz", cwd=d)
    if rc != 0:
        fail("orig: predict vs ref", "predict %s: rc %d: %s" % (os.path.basename(c["path"]), rc, error_text(out, err)))
        fail("orig: ort vs predict", "predict failed (see above)")
    else:
        p = np.load(os.path.join(d, "pred_orig.npz"))[out0]
        # *_train exports compute BatchNorm with batch statistics (onnxruntime matched torch's
        # train-mode forward for them): train_out/ first, out/ (eval) for information
        keys = ("train_out/", "out/") if c["variant"].endswith("_train") else ("out/",)
        refs = [k + out0 for k in keys if k + out0 in c["ref"]]
        if refs:
            texts, oks = [], []
            for i, k in enumerate(refs):
                ok, t = compare(p, c["ref"][k])
                oks.append(ok)
                if i == 0:
                    texts.append("%s%s %s" % ("" if ok else "FAIL ", k.split("/")[0], t))
                else:  # the eval output of a train-mode export: for information only
                    texts.append("(%s %s)" % (k.split("/")[0], t))
            row["orig: predict vs ref"] = "; ".join(texts)
            if not oks[0]:
                notes.append(("orig: predict vs ref", "predict on %s differs from the reference %s: max abs %s"
                              % (os.path.basename(c["path"]), refs[0], texts[0].split()[-1])))
                row["orig: predict vs ref"] += " [%d]" % len(notes)
        else:
            row["orig: predict vs ref"] = "(no ref)"
        sess, why = ort_session(c["path"])
        if sess is None:
            fail("orig: ort vs predict", "onnxruntime load %s: %s" % (os.path.basename(c["path"]), why))
        else:
            ok, t = compare(p, ort_run(sess, feeds)[out0])
            row["orig: ort vs predict"] = t if ok else "FAIL " + t

    # 1. train
    rc, out, err = cli("train", c["path"], "--data", "train.npz", "--labels", "labels", "--loss", loss,
                       "--steps", STEPS, "--global-batch", batch, "--lr", LR, "--output", "trained.onnx", cwd=d)
    trained = os.path.join(d, "trained.onnx")
    if rc != 0 or not os.path.exists(trained):
        fail("train", "train --loss %s (labels %s%s): rc %d: %s" % (loss, c["labels"].dtype, list(c["labels"].shape),
                                                                   rc, error_text(out, err)))
        trained = None
    else:
        m = re.findall(r"train loss[^,]*?([0-9.eE+-]+)(?:,|$)", out, re.M)
        row["train"] = "ok" + (" (loss %s)" % m[-1] if m else "")

    # 2. export-training-graph
    rc, out, err = cli("export-training-graph", c["path"], "--labels", "labels", "--loss", loss,
                       "--optimizer", "sgd", "--lr", LR, "--output", "train_graph.onnx", cwd=d)
    graph = os.path.join(d, "train_graph.onnx")
    if rc != 0 or not os.path.exists(graph):
        fail("export", "export-training-graph --loss %s: rc %d: %s" % (loss, rc, error_text(out, err)))
        graph = None
    else:
        lab = [i for i in onnx.load(graph, load_external_data=False).graph.input if i.name == "labels"]
        row["export"] = "ok" + (" (labels %s)" % type_text(lab[0].type) if lab else "")

    # 3. checker and onnxruntime on what was written
    if trained:
        ok, why = checker(trained)
        if ok:
            row["checker trained"] = "ok"
        else:
            fail("checker trained", "checker on trained.onnx: " + why)
        sess, why = ort_session(trained)
        if sess is None:
            fail("ort load trained", "onnxruntime load trained.onnx: " + why)
        else:
            row["ort load trained"] = "ok"
        rc, out, err = cli("predict", "trained.onnx", "--data", "feeds.npz", "--output", "pred.npz", cwd=d)
        rc2, out2, err2 = cli("predict", "trained.onnx", "--data", "feeds.npz", "--output", "pred2.npz",
                              "--replicas", 2, cwd=d)
        p1 = np.load(os.path.join(d, "pred.npz"))[out0] if rc == 0 else None
        if rc != 0:
            fail("trained: ort vs predict", "predict trained.onnx: rc %d: %s" % (rc, error_text(out, err)))
        elif sess is not None:
            try:
                ok, t = compare(ort_run(sess, feeds)[out0], p1)
                if ok:
                    row["trained: ort vs predict"] = t
                else:
                    note("trained: ort vs predict", "FAIL " + t,
                         "onnxruntime vs predict on trained.onnx: max abs %s > rtol %g atol %g" % (t, RTOL, ATOL))
            except Exception as e:  # noqa: BLE001
                fail("trained: ort vs predict", "onnxruntime run trained.onnx: %s: %s"
                     % (type(e).__name__, " ".join(str(e).split())[:400]))
        if rc2 != 0:
            fail("trained: predict r2 vs r1", "predict trained.onnx --replicas 2: rc %d: %s" % (rc2, error_text(out2, err2)))
        elif p1 is not None:
            ok, t = compare(np.load(os.path.join(d, "pred2.npz"))[out0], p1)
            if ok:
                row["trained: predict r2 vs r1"] = t
            else:
                tm = [n for n in onnx.load(trained, load_external_data=False).graph.node
                      if n.op_type == "BatchNormalization"
                      and any(a.name == "training_mode" and a.i == 1 for a in n.attribute)]
                note("trained: predict r2 vs r1", "FAIL " + t,
                     "predict trained.onnx --replicas 2 vs 1: max abs %s%s" % (t, (
                         "; trained.onnx keeps %d BatchNormalization node(s) with training_mode=1 (batch "
                         "statistics), so its outputs depend on how predict splits the batch" % len(tm)) if tm else ""))
    if graph:
        ok, why = checker(graph)
        if ok:
            row["checker graph"] = "ok"
        else:
            fail("checker graph", "checker on train_graph.onnx: " + why)
        sess, why = ort_session(graph)
        ops = custom_ops(graph)
        if sess is None:
            m = re.search(r"com\.onnx-mirror:(\w+)\(-?\d+\) is not a registered function/op", why)
            if m and ops:  # expected: onnxruntime has no com.onnx-mirror ops
                row["ort load graph"] = "refused (%s)" % m.group(1)
                row["_custom_ops"] = ops
                row["_ort_graph_message"] = re.sub(r"from \S+ failed", "from train_graph.onnx failed", why)
            else:
                fail("ort load graph", "onnxruntime load train_graph.onnx: %s (com.onnx-mirror ops: %s)"
                     % (why, ", ".join(ops) or "none"))
        else:
            row["ort load graph"] = "ok"
    return row, notes


COLUMNS = ["train", "export", "checker trained", "checker graph", "ort load trained", "ort load graph",
           "trained: ort vs predict", "trained: predict r2 vs r1", "orig: predict vs ref", "orig: ort vs predict"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True, help="the onnx-mirror-train binary")
    ap.add_argument("--work", help="work folder (default: a new temporary folder, removed unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--only", help="regex on MODEL_VARIANT: check only these")
    ap.add_argument("--md", default=os.path.join(DATA, "onnxruntime_check.md"),
                    help="where the table goes ('' for nowhere)")
    a = ap.parse_args()

    work = a.work or tempfile.mkdtemp(prefix="omt-ort-check-")
    os.makedirs(work, exist_ok=True)
    cli_path, env = stage_cli(os.path.abspath(a.cli), os.path.join(work, "bin"))
    log = os.path.join(work, "cli.log")
    cli = Cli(cli_path, env, log)
    print("work folder %s (CLI log: %s)" % (work, log), flush=True)

    rows = []
    for c in model_cases(a.only):
        print("%s %s ..." % (c["model"], c["variant"]), end=" ", flush=True)
        row, notes = run_case(c, cli, work)
        rows.append((c, row, notes))
        print(", ".join("%s %s" % (k, row.get(k, "-")) for k in COLUMNS[:2]), flush=True)

    # the table; notes numbered globally
    all_notes, lines = [], []
    lines.append("| model | variant | " + " | ".join(COLUMNS) + " |")
    lines.append("|---" * (len(COLUMNS) + 2) + "|")
    for c, row, notes in rows:
        base = len(all_notes)
        all_notes += [(c, col, msg) for col, msg in notes]
        cells = [re.sub(r"\[(\d+)\]", lambda m: "[%d]" % (int(m.group(1)) + base), row.get(k, "-"))
                 for k in COLUMNS]
        lines.append("| %s | %s | %s |" % (c["model"], c["variant"], " | ".join(cells)))
    foot = ["", "[n]: note n below. Tolerance rtol %g atol %g; numbers are max abs differences. "
            "'refused (Op)': onnxruntime cannot load the training graph because it holds com.onnx-mirror "
            "ops (expected; Op is the first it names). '-': not run (an earlier step failed). For the "
            "*_train exports (BatchNorm with batch statistics) the original is compared with train_out/, "
            "and out/ (eval) is shown in parentheses for information." % (RTOL, ATOL), ""]
    foot += ["%d. %s %s, %s: %s" % (i + 1, c["model"], c["variant"], col, msg.replace("|", "/"))
             for i, (c, col, msg) in enumerate(all_notes)]
    refused = [(c, row) for c, row, _ in rows if "_custom_ops" in row]
    if refused:
        c, row = refused[0]
        foot += ["", "onnxruntime's message (%s %s): `%s`" % (c["model"], c["variant"], row["_ort_graph_message"]),
                 "", "com.onnx-mirror ops in the training graphs: " + ", ".join(sorted(
                     {o.split(":", 1)[1] for _, r in refused for o in r["_custom_ops"]})) + "."]
    head = ["# onnxruntime check of the files onnx-mirror-train writes", "",
            "Generated by `tests/reference/modern/check_onnxruntime.py` (run by hand) with onnx %s, "
            "onnxruntime %s, numpy %s. Per model: `train --steps %d --global-batch B --lr %g` on the "
            "reference batch repeated %d times, `export-training-graph --optimizer sgd`, the checker "
            "(full_check) and onnxruntime on both files, onnxruntime vs `predict` (1 and 2 replicas) on "
            "trained.onnx, and `predict` on the original file vs the reference output."
            % (onnx.__version__, ort.__version__, np.__version__, STEPS, LR, REPEAT), ""]
    text = "\n".join(head + lines + foot) + "\n"
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
        print("wrote " + a.md)
    if not a.work and not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print("kept " + work)


if __name__ == "__main__":
    main()
