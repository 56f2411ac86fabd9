#!/usr/bin/python3
"""A small GPT-2 and a byte-level token set for the README's language-model example.

    /usr/bin/python3 examples/gpt2_bytes/make_gpt2.py TEXT_FILE OUT_DIR

Writes OUT_DIR/gpt2.onnx: transformers' GPT2LMHeadModel (vocab 256 = one token per byte,
64 positions, 4 layers, 4 heads, width 128, dropout 0, seeded random init) exported with
torch's default (dynamo) exporter, batch dimension symbolic; and OUT_DIR/train.npz and
OUT_DIR/val.npz: the file's bytes cut into windows of 64 tokens (input_ids uint8 [N, 64];
the last tenth of the file is the validation set). No labels: `--shift-labels` makes them.
The same tokens also go to OUT_DIR/train.bin and OUT_DIR/val.bin as nanoGPT writes them (flat
little-endian uint16 ids, no header), which `train --seq-len 64` cuts into the same windows.
Uses the venv of tests/reference/modern/make_modern.py ($HOME/.cache/onnx-mirror/venv-modern).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import omt_venv  # noqa: E402


def main(text_file, out):
    import warnings

    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    warnings.filterwarnings("ignore")
    os.makedirs(out, exist_ok=True)
    seq = 64

    class GPT2(GPT2LMHeadModel):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    torch.manual_seed(0)
    model = GPT2(GPT2Config(vocab_size=256, n_positions=seq, n_embd=128, n_layer=4, n_head=4, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0)).eval()
    ids = torch.zeros(2, seq, dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=4096)
    torch.onnx.export(model, (ids,), os.path.join(out, "gpt2.onnx"), dynamo=True,
                      dynamic_shapes={"input_ids": {0: batch}}, input_names=["input_ids"],
                      output_names=["logits"], external_data=False)
    data = np.frombuffer(open(text_file, "rb").read(), np.uint8)
    windows = data[: len(data) // seq * seq].reshape(-1, seq)
    split = len(windows) * 9 // 10
    np.savez(os.path.join(out, "train.npz"), input_ids=windows[:split])
    np.savez(os.path.join(out, "val.npz"), input_ids=windows[split:])
    windows[:split].astype("<u2").tofile(os.path.join(out, "train.bin"))
    windows[split:].astype("<u2").tofile(os.path.join(out, "val.bin"))
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; {split} training and "
          f"{len(windows) - split} validation windows of {seq} bytes from {text_file}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    omt_venv.ensure(__file__, ["torch", "transformers", "onnx", "onnxscript", "numpy"])
    main(sys.argv[1], sys.argv[2])
