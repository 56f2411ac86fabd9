#!/usr/bin/python3
"""Summarises an `onnx-mirror-train train --trace t.json` Chrome trace (the profile in
docs/BENCHMARKS.md). Per replica thread: steps (a step starts at each occurrence of the
thread's first event name), time inside traced events (kernels, bucket waits) by name, time
inside a step but between events (Session::run overhead: feed checks, per-node context and
output allocation, releases), and time between steps (the driver: row gather, metrics).

  /usr/bin/python3 bench/trace_summary.py t.json [--skip 5] [--top 15]
"""
import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--skip", type=int, default=5, help="warm-up steps left out")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    raw = json.load(open(args.trace))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in raw if e.get("ph") == "M"}
    by_tid = collections.defaultdict(list)
    for e in raw:
        if e.get("ph") == "X":
            by_tid[e["tid"]].append(e)
    for tid in sorted(by_tid):
        evs = sorted(by_tid[tid], key=lambda e: e["ts"])
        if names.get(tid, "").startswith("communication"):
            per = collections.Counter()
            for e in evs:
                per[e["name"].rstrip("0123456789 ")] += e["dur"]
            print("%s: %s" % (names[tid], ", ".join("%s %.1f ms" % (n, us / 1e3) for n, us in per.most_common())))
            continue
        first = evs[0]["name"]
        steps, cur = [], []
        for e in evs:
            if e["name"] == first and cur:
                steps.append(cur)
                cur = []
            cur.append(e)
        steps.append(cur)
        steps = steps[args.skip:] or steps
        n = len(steps)
        per, count = collections.Counter(), collections.Counter()
        inside = gaps = 0.0
        for s in steps:
            span = s[-1]["ts"] + s[-1]["dur"] - s[0]["ts"]
            busy = sum(e["dur"] for e in s)
            inside += span
            gaps += span - busy
            for e in s:
                per[e["name"]] += e["dur"]
                count[e["name"]] += 1
        period = (steps[-1][0]["ts"] - steps[0][0]["ts"]) / max(1, n - 1) if n > 1 else inside
        print("%s: %d steps; per step: %.2f ms from step to step, %.2f ms first to last event, "
              "%.2f ms of it between events (%.0f%%), %.2f ms between steps"
              % (names.get(tid, tid), n, period / 1e3, inside / n / 1e3, gaps / n / 1e3,
                 100 * gaps / inside, (period - inside / n) / 1e3))
        for name, us in per.most_common(args.top):
            print("  %7.3f ms/step %5.1f%%  %s" % (us / n / 1e3, 100.0 * us / n / period, name))


if __name__ == "__main__":
    main()
