#!/usr/bin/python3
"""Issue 18's benchmark: onnx-mirror against the current PyTorch (PyPI) on the models people
train, side by side in one run.

    /usr/bin/python3 bench/realistic_bench.py [--build build] [--models resnet18,mobilenet_v2,bert_mini,mlp,cnn]
        [--repeats 3] [--steps 30] [--markdown table.md] [--work DIR] [--bf16 resnet18,...]

Re-executes itself in the PyPI venv of scripts/omt_venv.py (torch, torchvision, transformers).
For each model it builds the torch module (seed 0), exports it with torch's default (dynamo)
exporter, and saves its state, so both frameworks start from the same weights; it writes
steps x global-batch random samples (images: normal noise, labels uniform; BERT: token ids of
uneven length), which both read in the same order (onnx-mirror --no-shuffle; PyTorch in order,
each DDP rank the slice onnx-mirror gives the replica of the same rank). SGD, lr 0.01,
momentum 0.9; BatchNorm trains with batch statistics in both; MobileNetV2's and BERT's dropout
are off so the losses are comparable.

Configurations: ours 1 replica x 1 thread, 2 replicas x 1 thread, 2 processes x 1 replica
(Gloo over loopback); PyTorch 1 process x 1 thread, 1 x 2 threads, DDP 2 processes x 1 thread
(Gloo). With --bf16 MODELS, those models also run ours with --precision bf16 (1 and 2 replicas)
and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) (1 x 2 threads, DDP 2 x 1), and a
second ratio table compares them. Every configuration is a fresh process and runs --repeats times, round-robin (A B C ...
A B C ...) so that drift of the shared machine hits all alike; a row is the run with the
median samples/s, and every run's samples/s is listed.

samples/s: global batch over the median step time after 5 warm-up steps (a step: forward,
loss, backward, reduction, update; for DDP the slowest rank's). Step split: ours from the
metrics JSONL (compute = forward + backward + update on the replica, exposed = waiting for
reductions); PyTorch timed around forward, backward (DDP: with its overlapped all-reduce) and
the optimizer step. Peak RSS: the largest process (ours: rank 0's peak_rss_mb; PyTorch:
VmHWM of each rank). Loss: the mean training loss of the last 5 steps. % of peak: FLOPs of
a training step (three times the forward's matmuls and convolutions, counted by
torch.utils.flop_counter) times samples/s, over the FMA peak of the cores the configuration uses,
measured by kernels_bench in the same run: one core's register-only FMA rate for a one-core
configuration, twice the per-core rate with both cores busy for a two-core one. The ratio of those
two (the machine's own "2 cores / 1 core") bounds "2 replicas / 1 replica" for compute-bound work
and is printed with the ratios.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402

PACKAGES = ["torch", "torchvision", "transformers", "onnx", "onnxscript", "onnxruntime", "numpy"]
WARMUP = 5
LR, MOMENTUM = 0.01, 0.9
MODELS = {  # name: (global batch, description)
    "resnet18": (64, "torchvision ResNet-18, 3x32x32, 10 classes"),
    "mobilenet_v2": (64, "torchvision MobileNetV2, 3x64x64, 10 classes"),
    "bert_mini": (32, "BERT-mini (4 layers, hidden 256, 4 heads), seq 128, 2 classes"),
    "mlp": (256, "models/ MLP 784-512-256-10, 1x28x28"),
    "cnn": (256, "models/ CNN (two convolutions), 1x28x28"),
}
BERT_SEQ, BERT_VOCAB = 128, 8192


# ---- models and data (shared by the exporter and the PyTorch workers) ------------------------

def build(name):
    import torch
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    if name == "mobilenet_v2":
        import torchvision
        m = torchvision.models.mobilenet_v2(num_classes=10)
        m.classifier[0].p = 0.0
        return m
    if name == "bert_mini":
        from transformers import BertConfig, BertForSequenceClassification

        class Bert(BertForSequenceClassification):
            def forward(self, input_ids, attention_mask, token_type_ids):
                return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                       token_type_ids=token_type_ids).logits

        cfg = BertConfig(vocab_size=BERT_VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                         intermediate_size=1024, max_position_embeddings=BERT_SEQ, num_labels=2,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return Bert(cfg)
    sys.path.insert(0, os.path.join(REPO, "models"))
    from make_models import CNN, MLP
    return MLP() if name == "mlp" else CNN()


def make_data(name, n):
    """Feature arrays by input name, and int64 labels, as numpy."""
    import numpy as np
    rng = np.random.default_rng(1)
    if name == "bert_mini":
        ids = rng.integers(1, BERT_VOCAB, (n, BERT_SEQ))
        lengths = rng.integers(16, BERT_SEQ + 1, n)
        mask = (np.arange(BERT_SEQ)[None, :] < lengths[:, None]).astype(np.int64)
        return ({"input_ids": ids * mask, "attention_mask": mask,
                 "token_type_ids": np.zeros((n, BERT_SEQ), np.int64)}, (ids[:, 1] % 2).astype(np.int64))
    shape = {"resnet18": (3, 32, 32), "mobilenet_v2": (3, 64, 64)}.get(name, (1, 28, 28))
    return {"input": rng.standard_normal((n,) + shape, dtype=np.float32)}, rng.integers(0, 10, n).astype(np.int64)


def prepare(name, work, steps):
    """Exports the model, saves its state and the data; returns (onnx path, data path, flops per sample)."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    batch = MODELS[name][0]
    onnx_path, data_path = os.path.join(work, name + ".onnx"), os.path.join(work, name + ".npz")
    model = build(name)
    torch.save(model.state_dict(), os.path.join(work, name + ".pt"))
    x, y = make_data(name, steps * batch)
    np.savez(data_path, **x, labels=y)
    feeds = tuple(torch.from_numpy(v[:2]) for v in x.values())
    model.eval()
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()):
        # The dynamo exporter folds eval-mode BatchNorm into the convolutions (onnx-mirror warns
        # "BatchNorm folded"), which would train another, cheaper model than PyTorch's. The
        # legacy exporter without constant folding keeps it; onnx-mirror trains it with batch
        # statistics, as PyTorch's train() does.
        torch.onnx.export(model, feeds, onnx_path, dynamo=False, input_names=list(x), output_names=["logits"],
                          dynamic_axes={k: {0: "batch"} for k in x}, do_constant_folding=False, opset_version=17)
    else:
        dim = torch.export.Dim("batch", min=1, max=1 << 16)
        torch.onnx.export(model, feeds, onnx_path, dynamo=True, input_names=list(x),
                          dynamic_shapes={k: {0: dim} for k in x} if len(x) > 1 else ({0: dim},),
                          output_names=["logits"], external_data=False)
    model.train()
    b = tuple(torch.from_numpy(v[:batch]) for v in x.values())
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(*b)
    # A training step is taken as three forwards (the gradients of the inputs and of the
    # weights cost one each): torch 2.15's counter ignores groups in convolution_backward and
    # counts MobileNetV2's depthwise backward 19 times its forward.
    return onnx_path, data_path, 3 * fc.get_total_flops() / batch


# ---- onnx-mirror ---------------------------------------------------------------------------

def run_ours(args, name, onnx_path, data_path, replicas, nproc, precision="fp32"):
    batch = MODELS[name][0]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "run.jsonl")
        cmd = [args.cli, "train", onnx_path, "--data", data_path, "--labels", "labels", "--steps", str(args.steps),
               "--global-batch", str(batch), "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM),
               "--replicas", str(replicas), "--nproc", str(nproc), "--threads", "1", "--no-shuffle",
               "--metrics", metrics, "--precision", precision]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise SystemExit("onnx-mirror failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-3000:]))
        rows = [json.loads(line) for line in open(metrics)]
    steps = [s for s in rows if s.get("type") == "step"]
    rss = max(s.get("peak_rss_mb", 0) for s in rows if s.get("type") in ("epoch", "summary"))
    warm = steps[WARMUP:] or steps
    step_s = statistics.median(s["seconds"] for s in warm)
    world = replicas * nproc
    return {"framework": "onnx-mirror",
            "config": "%d replica%s x 1 thread%s%s" % (world, "s" if world > 1 else "",
                                                     " (%d processes, gloo)" % nproc if nproc > 1 else "",
                                                     ", bf16" if precision == "bf16" else ""),
            "cores": world, "samples_per_s": batch / step_s,
            "split": "compute %.1f, exposed reduction %.1f" % (statistics.median(s["compute_ms"] for s in warm),
                                                               statistics.median(s["exposed_comm_ms"] for s in warm)),
            "rss_mb": rss, "loss": statistics.mean(s["loss"] for s in steps[-5:])}


# ---- PyTorch -------------------------------------------------------------------------------

def peak_rss_mb():
    """VmHWM: getrusage's ru_maxrss is carried across exec, so a worker would report its parent's."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_worker(argv):
    """One PyTorch configuration in this process (rank `rank` of `world` when DDP); prints JSON."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    p = argparse.ArgumentParser()
    p.add_argument("--model"), p.add_argument("--work"), p.add_argument("--steps", type=int)
    p.add_argument("--threads", type=int), p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1), p.add_argument("--port", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    name, batch = a.model, MODELS[a.model][0]
    model = build(name)
    model.load_state_dict(torch.load(os.path.join(a.work, name + ".pt")))
    model.train()
    if a.world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank, world_size=a.world)
        net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        net = model
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    data = np.load(os.path.join(a.work, name + ".npz"))
    names = [k for k in data.files if k != "labels"]
    xs = [torch.from_numpy(data[k]) for k in names]
    y = torch.from_numpy(data["labels"])
    lo, hi = batch * a.rank // a.world, batch * (a.rank + 1) // a.world  # onnx-mirror's shard of replica r
    times, losses = [], []
    for s in range(a.steps):
        rows = slice(s * batch + lo, s * batch + hi)
        feeds, labels = [x[rows] for x in xs], y[rows]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        if a.bf16:  # mixed precision as torch documents it for the CPU
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(*feeds), labels)
        else:
            loss = F.cross_entropy(net(*feeds), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        times.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2))
        losses.append(float(loss))
    t = torch.tensor(times, dtype=torch.float64)
    if a.world > 1:
        import torch.distributed as dist
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's step
        lt = torch.tensor(losses, dtype=torch.float64)
        dist.all_reduce(lt)
        losses = (lt / a.world).tolist()
        dist.destroy_process_group()
    warm = t[WARMUP:] if len(t) > WARMUP else t
    med = warm.median(dim=0).values.tolist()
    print(json.dumps({"step_s": med[0], "forward_ms": 1e3 * med[1], "backward_ms": 1e3 * med[2],
                      "update_ms": 1e3 * med[3], "loss": statistics.mean(losses[-5:]),
                      "rss_mb": peak_rss_mb()}), flush=True)


def run_torch(args, name, work, threads, world, precision="fp32"):
    base = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", name, "--work", work,
            "--steps", str(args.steps), "--threads", str(threads), "--world", str(world)]
    if precision == "bf16":
        base.append("--bf16")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if world == 1:
        procs = [subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)]
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(base + ["--rank", str(r), "--port", str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for r in range(world)]
    outs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit("PyTorch worker failed (%d): %s" % (p.returncode, err[-3000:]))
        outs.append(json.loads(out.strip().splitlines()[-1]))
    j = outs[0]
    return {"framework": "PyTorch %s" % __import__("torch").__version__.split("+")[0],
            "config": ("DDP %d processes x 1 thread" % world if world > 1 else "1 process x %d thread%s" % (
                threads, "s" if threads > 1 else "")) + (", bf16 autocast" if precision == "bf16" else ""),
            "cores": threads * world, "samples_per_s": MODELS[name][0] / j["step_s"],
            "split": "forward %.1f, backward %.1f, update %.1f" % (j["forward_ms"], j["backward_ms"], j["update_ms"]),
            "rss_mb": max(o["rss_mb"] for o in outs), "loss": j["loss"]}


# ---- the run -------------------------------------------------------------------------------

def peaks(args):
    bench = os.path.join(args.build, "bench", "kernels_bench")
    if not os.path.exists(bench):
        raise SystemExit("%s is missing: build the kernels_bench target (libbenchmark-dev)" % bench)
    r = subprocess.run([bench, "--benchmark_filter=BM_PeakSgemm/2048|BM_PeakMemcpy/67108864|BM_PeakFma",
                        "--benchmark_format=json", "--benchmark_min_time=0.3"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, check=True)
    out = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b["name"].startswith("BM_PeakFma"):
            out["fma%d_gflops" % b["threads"]] = b["GFLOP/s"]
        elif "GFLOP/s" in b:
            out["sgemm_gflops"] = b["GFLOP/s"]
        if "bytes_per_second" in b:
            out["memcpy_gbs"] = b["bytes_per_second"] / 1e9
    return out


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert_mini,mlp,cnn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--markdown", default="")
    ap.add_argument("--work", default="")
    ap.add_argument("--bf16", default="", help="models that also run in bf16: ours --precision bf16 (1 and 2 "
                    "replicas), PyTorch under bf16 autocast (1 x 2 threads, DDP 2 x 1)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.cli = os.path.join(args.build, "tools", "onnx-mirror-train")
    work = args.work or tempfile.mkdtemp(prefix="omt-bench-")
    os.makedirs(work, exist_ok=True)
    import warnings
    warnings.filterwarnings("ignore")
    started, loads = time.time(), [load_average()]
    peak = [peaks(args)]
    lines, ratios, bf16_ratios = [], [], []
    for name in args.models.split(","):
        onnx_path, data_path, flops = prepare(name, work, args.steps)
        configs = [("ours", 1, 1, "fp32"), ("ours", 2, 1, "fp32"), ("ours", 1, 2, "fp32"),
                   ("torch", 1, 1, "fp32"), ("torch", 2, 1, "fp32"), ("torch", 1, 2, "fp32")]
        bf16 = name in args.bf16.split(",")
        if bf16:
            configs += [("ours", 1, 1, "bf16"), ("ours", 2, 1, "bf16"), ("torch", 2, 1, "bf16"), ("torch", 1, 2, "bf16")]
        runs = {}
        for rep in range(args.repeats):
            for kind, a, b, precision in configs:
                r = run_ours(args, name, onnx_path, data_path, a, b, precision) if kind == "ours" else \
                    run_torch(args, name, work, a, b, precision)
                runs.setdefault((r["framework"], r["config"]), []).append(r)
                print(json.dumps({"model": name, **r}), file=sys.stderr, flush=True)
        rows = []
        for key, rs in runs.items():
            rs.sort(key=lambda r: r["samples_per_s"])
            row = dict(rs[len(rs) // 2])
            row["runs"] = [r["samples_per_s"] for r in rs]
            rows.append(row)
        peak.append(peaks(args))
        core_peak = {1: statistics.median(p["fma1_gflops"] for p in peak),
                     2: statistics.median(p["fma2_gflops"] for p in peak)}
        lines.append("")
        lines.append("**%s** (global batch %d, %.1f MFLOP per training sample)" % (
            MODELS[name][1], MODELS[name][0], flops / 1e6))
        lines.append("")
        lines.append("| framework | config | samples/s (median run) | every run | step split (ms) | peak RSS (MiB) "
                     "| loss, last 5 steps | % of FMA peak |")
        lines.append("|---|---|---:|---|---|---:|---:|---:|")
        for r in rows:
            pct = 100 * flops * r["samples_per_s"] / (core_peak[r["cores"]] * 1e9 * r["cores"])
            lines.append("| %s | %s | %.0f | %s | %s | %.0f | %.4f | %.0f%% |" % (
                r["framework"], r["config"], r["samples_per_s"], " / ".join("%.0f" % v for v in r["runs"]),
                r["split"], r["rss_mb"], r["loss"], pct))
        ours = {r["config"]: r for r in rows if r["framework"] == "onnx-mirror"}
        theirs = [r for r in rows if r["framework"] != "onnx-mirror" and "bf16" not in r["config"]]
        if bf16:
            theirs16 = [r for r in rows if r["framework"] != "onnx-mirror" and "bf16" in r["config"]]
            best16 = max(theirs16, key=lambda r: r["samples_per_s"])
            two16 = ours["2 replicas x 1 thread, bf16"]
            bf16_ratios.append("| %s | %.2fx | %.2fx | %.2fx (%s) | %.2fx |" % (
                name, two16["samples_per_s"] / ours["2 replicas x 1 thread"]["samples_per_s"],
                ours["1 replica x 1 thread, bf16"]["samples_per_s"] / ours["1 replica x 1 thread"]["samples_per_s"],
                two16["samples_per_s"] / best16["samples_per_s"], best16["config"],
                two16["samples_per_s"] / ours["1 replica x 1 thread, bf16"]["samples_per_s"]))
        best = max(theirs, key=lambda r: r["samples_per_s"])
        two = ours["2 replicas x 1 thread"]
        ratios.append("| %s | %.2fx (%s) | %.2fx | %.2fx |" % (
            name, two["samples_per_s"] / best["samples_per_s"], best["config"],
            two["samples_per_s"] / ours["1 replica x 1 thread"]["samples_per_s"],
            ours["2 replicas x 1 thread (2 processes, gloo)"]["samples_per_s"] / best["samples_per_s"]))
    loads.append(load_average())
    head = ("One run of `bench/realistic_bench.py %s` on %d cores, %.0f s; load average %s at start, %s at end. "
            "SGD lr %g momentum %g, %d steps, %d repeats interleaved. Peaks (kernels_bench, before and after each model): "
            "FMA %s GFLOP/s on one core alone, %s per core with both busy (2 cores / 1 core: %.2fx); oneDNN sgemm %s "
            "GFLOP/s on one core; memcpy %s GB/s." % (
                " ".join(sys.argv[1:]), os.cpu_count(), time.time() - started, loads[0], loads[1], LR, MOMENTUM,
                args.steps, args.repeats, " / ".join("%.1f" % p["fma1_gflops"] for p in peak),
                " / ".join("%.1f" % p["fma2_gflops"] for p in peak),
                2 * statistics.median(p["fma2_gflops"] for p in peak) / statistics.median(p["fma1_gflops"] for p in peak),
                " / ".join("%.0f" % p["sgemm_gflops"] for p in peak),
                " / ".join("%.1f" % p["memcpy_gbs"] for p in peak)))
    text = "\n".join([head] + lines + ["", "| model | ours 2 replicas / PyTorch best (which) | ours 2 replicas / ours 1 "
                                       "| ours 2 processes / PyTorch best |", "|---|---:|---:|---:|"] + ratios)
    if bf16_ratios:
        text += "\n".join(["", "", "| model | ours bf16 / ours fp32, 2 replicas | the same, 1 replica | ours bf16 2 replicas "
                           "/ PyTorch bf16 autocast best (which) | ours bf16 2 replicas / 1 |",
                           "|---|---:|---:|---:|---:|"] + bf16_ratios)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    if "--torch-worker" in sys.argv:
        sys.argv.remove("--torch-worker")
        torch_worker(sys.argv[1:])
        # Its result is printed and flushed: skip the interpreter's teardown, where a DDP rank's
        # Gloo threads sometimes abort ("terminate called without an active exception",
        # exit -6) after the last collective, which lost a whole run.
        os._exit(0)
    else:
        omt_venv.ensure(__file__, PACKAGES)
        main()
