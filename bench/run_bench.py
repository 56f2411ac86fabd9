#!/usr/bin/python3
"""Issue 8's side-by-side benchmark: onnx-mirror (1 replica x 1 thread, 2 replicas x 1 thread)
and PyTorch (bench/pytorch_bench.py: 1x1, 1x2, DDP 2x1) train the same models with the same
hyper-parameters in one run; prints a Markdown table and the ratios the issue's acceptance
criteria name.

  /usr/bin/python3 bench/run_bench.py [--build build-bench] [--mlp-epochs 1] [--cnn-epochs 1]
      [--openblas DIR [--netlib]] [--nproc] [--repeats 3] [--markdown out.md]

--openblas DIR runs PyTorch with OpenBLAS's libblas.so.3 from DIR on LD_LIBRARY_PATH instead of
as installed: Debian's python3-torch calls whatever libblas.so.3 the alternatives system
picks, which on this machine is netlib's reference BLAS (about 5 GFLOP/s). Fetch OpenBLAS
without installing:
  apt-get download libopenblas0-pthread && dpkg-deb -x libopenblas0-pthread_*.deb /tmp/obl
  --openblas /tmp/obl/usr/lib/x86_64-linux-gnu/openblas-pthread
--netlib (with --openblas) adds one run of PyTorch as installed. --nproc adds onnx-mirror with
2 processes x 1 replica (Gloo over loopback, like DDP). Every configuration runs --repeats
times, interleaved; each row is its median run, with every run's samples/s listed.

Every run is a fresh process (peak RSS is its own). samples/s: global batch over the median
step time after 5 warm-up steps (a step: forward, backward, gradient reduction, update; the
batch gather is outside it in both frameworks). Epoch time: wall time of the last epoch.
Accuracy: the 10k test set after the last epoch.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = 5


def sh(cmd, env=None):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit("command failed with exit status %d: %s" % (r.returncode, " ".join(cmd)))
    return r


def run_ours(args, model, epochs, replicas, nproc):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "run.jsonl")
        cmd = ["/usr/bin/time", "-v", os.path.join(args.build, "tools", "onnx-mirror-train"), "train",
               "models/%s.onnx" % model, "--data", "fashion-mnist", "--epochs", str(epochs),
               "--global-batch", str(args.global_batch), "--lr", str(args.lr), "--momentum", str(args.momentum),
               "--optimizer", "sgd", "--replicas", str(replicas), "--nproc", str(nproc), "--threads", "1",
               "--seed", "0", "--metrics", metrics]
        r = sh(cmd)
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
        rows = [json.loads(line) for line in open(metrics)]
    steps = [x for x in rows if x.get("type") == "step"]
    epochs_rows = [x for x in rows if x.get("type") == "epoch"]
    summary = [x for x in rows if x.get("type") == "summary"]
    rates = [s["samples"] / s["seconds"] for s in steps if s.get("seconds")]
    warm = rates[WARMUP:] or rates
    accuracy = summary[-1]["accuracy"] if summary else epochs_rows[-1]["val_accuracy"]
    world = replicas * nproc
    return {"framework": "onnx-mirror", "model": model,
            "config": "%d replica%s x 1 thread" % (world, "s" if world > 1 else "") +
                      (" (%d processes, gloo)" % nproc if nproc > 1 else ""),
            "samples_per_s": statistics.median(warm), "epoch_s": epochs_rows[-1]["seconds"],
            # GNU time reports the largest process of the tree; replicas share a process.
            "rss_mb": rss_kb / 1024.0, "rss_per_replica_mb": rss_kb / 1024.0 / replicas,
            "accuracy": accuracy, "steps": len(steps), "world": world}


def run_pytorch(args, model, epochs, blas_dir):
    env = dict(os.environ)
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    r = sh(["/usr/bin/python3", os.path.join(ROOT, "bench", "pytorch_bench.py"), "--model", model,
            "--epochs", str(epochs), "--global-batch", str(args.global_batch), "--lr", str(args.lr),
            "--momentum", str(args.momentum), "--warmup", str(WARMUP)], env=env)
    out = []
    names = {"1x1": "1 proc x 1 thread", "1x2": "1 proc x 2 threads", "ddp2x1": "DDP 2 procs x 1 thread"}
    for line in r.stdout.splitlines():
        j = json.loads(line)
        blas = {"openblas": "OpenBLAS", "netlib": "netlib BLAS"}.get(j["blas"], j["blas"])
        out.append({"framework": "PyTorch %s (%s)" % (j["framework"].split("-", 1)[1], blas), "model": model,
                    "config": names[j["config"]],
                    "samples_per_s": j["samples_per_s"], "epoch_s": j["epoch_s"][-1],
                    "rss_mb": max(j["peak_rss_mb"]), "rss_per_replica_mb": max(j["peak_rss_mb"]),
                    "accuracy": j["accuracy"], "steps": j["steps"], "world": j["processes"]})
    return out


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def table(args, results, epochs_of, started, loads, wall):
    lines = []
    lines.append("Global batch %d, SGD lr %g momentum %g, Fashion-MNIST (60k train, 10k test), %s; "
                 "one run of `%s` on %d cores, load average %s at start and %s at end, %.0f s in all."
                 % (args.global_batch, args.lr, args.momentum,
                    ", ".join("%s %d epoch%s" % (m.upper(), e, "s" if e > 1 else "") for m, e in epochs_of.items()),
                    " ".join(["bench/run_bench.py"] + sys.argv[1:]), os.cpu_count(), loads[0], loads[1], wall))
    lines.append("")
    lines.append("| model | framework | config | samples/s (median run) | samples/s of each run | epoch time (s) "
                 "| peak RSS per process (MiB) | peak RSS per replica (MiB) | test accuracy |")
    lines.append("|---|---|---|---:|---|---:|---:|---:|---:|")
    for r in results:
        lines.append("| %s | %s | %s | %.0f | %s | %.1f | %.0f | %.0f | %.2f%% |" % (
            r["model"].upper(), r["framework"], r["config"], r["samples_per_s"],
            " / ".join("%.0f" % v for v in r["runs"]), r["epoch_s"], r["rss_mb"],
            r["rss_per_replica_mb"], 100 * r["accuracy"]))
    lines.append("")
    lines.append("| model | ours 2 replicas / PyTorch DDP | ours 2 replicas / PyTorch best (which) "
                 "| ours 2 replicas / ours 1 replica | accuracy ours 2r - PyTorch DDP (points) "
                 "| RSS per replica ours 2r / PyTorch DDP |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for model in epochs_of:
        rs = [r for r in results if r["model"] == model]
        ours1 = next(r for r in rs if r["framework"] == "onnx-mirror" and r["world"] == 1)
        ours2 = next(r for r in rs if r["framework"] == "onnx-mirror" and r["config"] == "2 replicas x 1 thread")
        torch_rows = [r for r in rs if r["framework"].startswith("PyTorch")]
        ddp = [r for r in torch_rows if r["config"].startswith("DDP")]
        ddp_best = max(ddp, key=lambda r: r["samples_per_s"])
        best = max(torch_rows, key=lambda r: r["samples_per_s"])
        lines.append("| %s | %.2fx (vs %s) | %.2fx (%s, %s) | %.2fx | %+.2f | %.2f |" % (
            model.upper(), ours2["samples_per_s"] / ddp_best["samples_per_s"], ddp_best["framework"],
            ours2["samples_per_s"] / best["samples_per_s"], best["framework"], best["config"],
            ours2["samples_per_s"] / ours1["samples_per_s"], 100 * (ours2["accuracy"] - ddp_best["accuracy"]),
            ours2["rss_per_replica_mb"] / ddp_best["rss_per_replica_mb"]))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build-bench"), help="CMake build folder")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--mlp-epochs", type=int, default=1)
    p.add_argument("--cnn-epochs", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--openblas", default="", help="folder with OpenBLAS's libblas.so.3: PyTorch runs with it")
    p.add_argument("--netlib", action="store_true",
                   help="with --openblas, also run PyTorch as installed (netlib BLAS; slow, no repeats)")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per configuration, interleaved; the table shows the median run")
    p.add_argument("--nproc", action="store_true", help="also run onnx-mirror as 2 processes x 1 replica")
    p.add_argument("--markdown", default="", help="also write the table to this file")
    args = p.parse_args()
    args.build = os.path.abspath(args.build)

    started = time.time()
    loads = [load_average()]
    epochs_of = {m: getattr(args, m + "_epochs") for m in args.models.split(",")}
    results = []
    for model, epochs in epochs_of.items():
        # Every configuration runs --repeats times, round-robin so that slow phases of the shared
        # machine hit all of them alike; each row is the run with the median samples/s.
        runs = {}
        def add(rows):
            for r in rows:
                runs.setdefault((r["framework"], r["config"]), []).append(r)
        for rep in range(args.repeats):
            add([run_ours(args, model, epochs, 1, 1)])
            add([run_ours(args, model, epochs, 2, 1)])
            if args.nproc:
                add([run_ours(args, model, epochs, 1, 2)])
            if not args.openblas or (args.netlib and rep == 0):
                add(run_pytorch(args, model, epochs, ""))
            if args.openblas:
                add(run_pytorch(args, model, epochs, args.openblas))
        for key, rows in runs.items():
            rows.sort(key=lambda r: r["samples_per_s"])
            best = dict(rows[len(rows) // 2])
            best["runs"] = [r["samples_per_s"] for r in rows]
            results.append(best)
            print(json.dumps(best), file=sys.stderr, flush=True)
    loads.append(load_average())
    text = table(args, results, epochs_of, started, loads, time.time() - started)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
