#!/usr/bin/env python3
"""Two onnx-mirror-train binaries side by side: 2-replica training throughput on the models/
MLP and CNN (Fashion-MNIST), runs interleaved A B A B ... so that drift on a shared machine
hits both, and a table of every run, the medians and their ratio B/A.

    python3 bench/ab_train.py --a OLD/onnx-mirror-train --b build/tools/onnx-mirror-train

Throughput is what `train` reports (median samples/s over its steps). Standard library only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, model, steps, batch, replicas):
    cmd = [binary, "train", os.path.join(ROOT, "models", model + ".onnx"), "--data", "fashion-mnist",
           "--replicas", str(replicas), "--steps", str(steps), "--global-batch", str(batch), "--val",
           "fashion-mnist:test"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"throughput: (\d+) samples/s", out)
    if not m:
        sys.exit("no throughput line in the output of " + " ".join(cmd) + ":\n" + out)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the binary before the change")
    ap.add_argument("--b", required=True, help="the binary after the change")
    ap.add_argument("--pairs", type=int, default=7, help="A B pairs per model")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    print("| model | A samples/s (median) | B samples/s (median) | B / A | every A run | every B run |")
    print("|---|---|---|---|---|---|")
    for model in args.models.split(","):
        a, b = [], []
        for _ in range(args.pairs):
            a.append(run(args.a, model, args.steps, args.global_batch, args.replicas))
            b.append(run(args.b, model, args.steps, args.global_batch, args.replicas))
        ma, mb = statistics.median(a), statistics.median(b)
        print("| %s | %.0f | %.0f | %.3f | %s | %s |" % (model, ma, mb, mb / ma, " ".join("%.0f" % v for v in a),
                                                      " ".join("%.0f" % v for v in b)), flush=True)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
