#!/usr/bin/python3
"""PyTorch baseline for issue 8: trains models/make_models.py's MLP or CNN on Fashion-MNIST in
three configurations and prints one JSON line per configuration. Run with Debian's torch:

  /usr/bin/python3 bench/pytorch_bench.py --model mlp --epochs 2 [--configs 1x1,1x2,ddp2x1]

Configurations: 1x1 (one process, one thread), 1x2 (one process, two threads), ddp2x1
(DistributedDataParallel over gloo, two processes of one thread each, DistributedSampler,
the global batch split evenly). Every configuration runs in fresh processes so that peak
RSS (getrusage ru_maxrss) is its own.

Timing matches onnx-mirror's: a step is forward + loss + backward (+ DDP all-reduce) +
optimizer update; the batch gather is outside it, as in runtime/fit.cc. samples/s is the
global batch over the median step time after the first --warmup steps; epoch time is wall
time of the whole epoch (gather included, evaluation excluded); accuracy is on the 10k
test set after the last epoch.
"""
import argparse
import gzip
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from make_models import CNN, MLP  # noqa: E402  (same modules, same init as the ONNX files)

FMNIST = os.environ.get("OMT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_split(prefix):
    with gzip.open(os.path.join(FMNIST, prefix + "-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(FMNIST, prefix + "-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    # Pixels scaled to [0, 1], no normalisation: onnx-mirror's default preprocessing.
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


# Note [Same data order]: onnx-mirror's EpochSampler (runtime/sampler.cc) written out in Python,
# so that both frameworks see the same global batches in the same order: epoch e's permutation
# of [0, N) is a Fisher-Yates shuffle driven by std::mt19937_64 seeded with
# splitmix64(seed ^ splitmix64(e)), with rejection sampling for unbiased draws. Global batch b is
# perm[b*B : (b+1)*B]; replica r of W takes the slice [n*r//W, n*(r+1)//W) of it. With the same
# initial weights (make_models.py's seed) the two runs differ only in floating-point rounding.
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class MT19937_64:
    """std::mt19937_64 (the C++ standard's parameters)."""

    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            mt = self.mt
            for i in range(312):
                x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                mt[i] = mt[(i + 156) % 312] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & M64


def omt_permutation(n, seed, epoch):
    gen = MT19937_64(splitmix64((seed ^ splitmix64(epoch)) & M64))
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        rng = i + 1
        reject_below = ((1 << 64) - rng) % rng
        x = gen()
        while x < reject_below:
            x = gen()
        j = x % rng
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def blas_library():
    """The libblas.so.3 this process loaded (Debian's torch calls whichever one is found)."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libblas" in line or "openblas" in line}
    return "openblas" if any("openblas" in p for p in paths) else "netlib" if paths else "none"


def make_model(name):
    torch.manual_seed(0)  # models/make_models.py exports with this seed
    return {"mlp": MLP, "cnn": CNN}[name]()


def worker(rank, args, world, threads, out_dir):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load_split("train")
    model = make_model(args.model)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    local_batch = args.global_batch // world
    if world > 1 and args.order == "torch":
        sampler = torch.utils.data.distributed.DistributedSampler(
            range(len(x)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    def shards(epoch):
        """This rank's batch indices for one epoch, step by step."""
        if args.order == "omt":  # Note [Same data order]
            perm = omt_permutation(len(x), args.seed, epoch)
            for b in range(0, len(perm), args.global_batch):
                gb = perm[b:b + args.global_batch]
                yield torch.tensor(gb[len(gb) * rank // world:len(gb) * (rank + 1) // world])
            return
        if world > 1:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler))
        else:
            order = torch.randperm(len(x), generator=gen)
        for b in range(0, len(order), local_batch):
            yield order[b:b + local_batch]

    step_s, epoch_s, steps = [], [], 0
    for epoch in range(args.epochs):
        batches = list(shards(epoch))  # drawn outside the timed epoch (Python is slow at it)
        t_epoch = time.perf_counter()
        for idx in batches:
            if args.steps and steps >= args.steps:
                break
            xb, yb = x[idx], y[idx]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            opt.step()
            step_s.append(time.perf_counter() - t0)
            steps += 1
        epoch_s.append(time.perf_counter() - t_epoch)
    if world > 1:
        # A step's time is the slowest rank's: every rank waits for it in the all-reduce.
        t = torch.tensor(step_s, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        step_s = t.tolist()

    acc = None
    if rank == 0:
        xt, yt = load_split("t10k")
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
                          for i in range(0, len(xt), 1000))
        acc = correct / len(xt)
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump({"step_s": step_s, "epoch_s": epoch_s, "accuracy": acc,
                   "peak_rss_mb": peak_rss_mb(), "blas": blas_library()}, f)
    if world > 1:
        dist.destroy_process_group()


def run_config(args, config):
    world, threads = {"1x1": (1, 1), "1x2": (1, 2), "ddp2x1": (2, 1)}[config]
    # Thread pools size themselves when their library loads in the spawned process.
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as out_dir:
        os.environ["MASTER_PORT"] = str(29500 + os.getpid() % 1000)
        mp.spawn(worker, args=(args, world, threads, out_dir), nprocs=world, join=True)
        ranks = [json.load(open(os.path.join(out_dir, "rank%d.json" % r))) for r in range(world)]
    r0 = ranks[0]
    warm = r0["step_s"][args.warmup:] or r0["step_s"]
    median = float(np.median(warm))
    return {"framework": "pytorch-" + torch.__version__, "model": args.model, "config": config,
            "processes": world, "threads": threads, "blas": r0["blas"], "global_batch": args.global_batch,
            "lr": args.lr, "momentum": args.momentum, "epochs": args.epochs,
            "steps": len(r0["step_s"]), "samples_per_s": args.global_batch / median,
            "median_step_ms": median * 1e3, "epoch_s": r0["epoch_s"],
            "peak_rss_mb": [r["peak_rss_mb"] for r in ranks], "accuracy": r0["accuracy"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--configs", default="1x1,1x2,ddp2x1")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: whole epochs)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", choices=["omt", "torch"], default="omt",
                   help="omt: onnx-mirror's data order (Note [Same data order]); torch: randperm / "
                        "DistributedSampler")
    args = p.parse_args()
    for config in args.configs.split(","):
        print(json.dumps(run_config(args, config)), flush=True)


if __name__ == "__main__":
    main()
