#!/usr/bin/python3
"""Peak memory of fine-tuning a BERT-mini-sized export (issue 16, "Memory bounded by the batch").

    /usr/bin/python3 bench/bert_mini_memory.py [--cli build/tools/onnx-mirror-train] [--samples 10000]

Exports a transformers BertForSequenceClassification with BERT-mini's shape (4 layers, hidden
256, 4 heads, intermediate 1024, vocab 8192, 5.3M parameters) at sequence length 128 with
torch's default (dynamo) exporter, writes 10,000 random training sequences of uneven length
(three inputs: input_ids, attention_mask, token_type_ids; two classes) and 1,000 validation
ones, then runs

    onnx-mirror-train train bert_mini.onnx --data train.npz --val val.npz --global-batch 32
        --epochs 1 --replicas 2 --optimizer adamw --lr 5e-5 --metrics run.jsonl

and prints the run's peak resident memory (the summary line and the JSONL's peak_rss_mb)
next to the size of the data and the parameters. A benchmark, not a test: nothing is
asserted. Everything is written to a temporary folder (or --work DIR). Uses the venv of
tests/reference/modern/make_modern.py ($HOME/.cache/onnx-mirror/venv-modern, OMT_MODERN_VENV).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402


def main():
    import warnings

    import numpy as np
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "tools", "onnx-mirror-train"))
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    work = args.work or tempfile.mkdtemp(prefix="omt-bert-mini-")
    os.makedirs(work, exist_ok=True)
    seq, vocab = 128, 8192

    class Bert(BertForSequenceClassification):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).logits

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=seq, num_labels=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = Bert(cfg).eval()
    params = sum(p.numel() for p in model.parameters())

    def data(n, g):
        ids = torch.randint(1, vocab, (n, seq), generator=g)
        lengths = torch.randint(16, seq + 1, (n,), generator=g)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
        ids = ids * mask
        types = torch.zeros(n, seq, dtype=torch.int64)
        labels = (ids[:, 1] % 2).to(torch.int64)  # learnable from the first token
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, labels

    g = torch.Generator().manual_seed(1)
    feeds, _ = data(2, g)
    onnx_path = os.path.join(work, "bert_mini.onnx")
    batch = torch.export.Dim("batch", min=1, max=4096)
    torch.onnx.export(model, tuple(feeds.values()), onnx_path, dynamo=True,
                      dynamic_shapes={k: {0: batch} for k in feeds}, input_names=list(feeds),
                      output_names=["logits"], external_data=False)
    for name, n in (("train", args.samples), ("val", args.samples // 10)):
        x, y = data(n, g)
        np.savez(os.path.join(work, name + ".npz"), **{k: v.numpy() for k, v in x.items()}, labels=y.numpy())
    data_mb = os.path.getsize(os.path.join(work, "train.npz")) / 2**20
    cmd = [args.cli, "train", onnx_path, "--data", os.path.join(work, "train.npz"), "--val",
           os.path.join(work, "val.npz"), "--global-batch", "32", "--epochs", "1", "--replicas", str(args.replicas),
           "--optimizer", "adamw", "--lr", "5e-5", "--metrics", os.path.join(work, "run.jsonl")]
    print("$", " ".join(cmd), flush=True)
    start = time.time()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.time() - start
    lines = out.stdout.splitlines()
    print("\n".join(line for line in lines if not line.startswith("epoch 1/1 ") or "%" in line[-12:])[-3000:])
    summary = {}
    with open(os.path.join(work, "run.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if j["type"] == "summary":
                summary = j
    print()
    print("| model | parameters | samples | train.npz | replicas | wall | peak RSS | final accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| BERT-mini-sized (4x256, seq {seq}, batch 32) | {params / 1e6:.2f}M | {args.samples} | {data_mb:.0f} MiB | "
          f"{args.replicas} | {seconds:.0f} s | {summary.get('peak_rss_mb', float('nan')):.0f} MiB | "
          f"{100 * summary.get('final_accuracy', float('nan')):.2f}% |")
    print(f"exit code {out.returncode}; files in {work}")
    return out.returncode


if __name__ == "__main__":
    omt_venv.ensure(__file__, PACKAGES)
    sys.exit(main())
