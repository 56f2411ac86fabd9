#!/usr/bin/python3
"""Note [Rows the loss never reads] (graph/gathered_rows.cc) on an export whose sequence
length is symbolic, as exports for inference usually leave it. Writes to
tests/data/gathered_rows/:

- bert_cls_dynamic_seq.onnx: a tiny transformers BertForSequenceClassification (vocab 50,
  hidden 16, 2 layers, 2 heads, 3 labels, dropout 0, seeded init), the default (dynamo)
  exporter with symbolic batch and sequence dimensions;
- batch.npz: input_ids, attention_mask (uneven padding), token_type_ids [6, 10] and labels;
- ref.npz: torch's loss (F.cross_entropy of the logits) and the gradient of every parameter,
  in float64, for tests/e2e.

    /usr/bin/python3 tests/reference/gathered_rows/make_gathered_rows.py   (re-executes in the PyPI venv)
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402

PACKAGES = ["torch", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"]


def main():
    import numpy as np
    import torch
    import transformers
    out = os.path.join(REPO, "tests", "data", "gathered_rows")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(7)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    class Bert(transformers.BertForSequenceClassification):  # logits only, torch's parameter names
        def forward(self, input_ids, attention_mask, token_type_ids):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).logits

    net = Bert(config).eval()
    n, t = 6, 10
    ids = torch.randint(1, 50, (n, t))
    mask = torch.ones(n, t, dtype=torch.int64)
    for i, length in enumerate([10, 7, 9, 4, 10, 6]):
        mask[i, length:] = 0
        ids[i, length:] = 0
    types = torch.zeros(n, t, dtype=torch.int64)
    labels = torch.tensor([0, 1, 2, 1, 0, 2])
    batch, seq = torch.export.Dim("batch", min=1, max=1024), torch.export.Dim("seq", min=2, max=16)
    shapes = {k: {0: batch, 1: seq} for k in ("input_ids", "attention_mask", "token_type_ids")}
    path = os.path.join(out, "bert_cls_dynamic_seq.onnx")
    torch.onnx.export(net, (ids[:2], mask[:2], types[:2]), path, dynamo=True,
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                      dynamic_shapes=shapes, external_data=False)
    net = net.double()
    loss = torch.nn.functional.cross_entropy(net(ids, mask, types), labels)
    loss.backward()
    ref = {"loss": np.array(loss.item())}
    for name, p in net.named_parameters():
        ref["grad/" + name] = p.grad.numpy()
    np.savez(os.path.join(out, "batch.npz"), input_ids=ids.numpy(), attention_mask=mask.numpy(),
             token_type_ids=types.numpy(), labels=labels.numpy())
    np.savez(os.path.join(out, "ref.npz"), **ref)
    print("wrote", path, "and the reference of", len(ref) - 1, "parameters")


if __name__ == "__main__":
    omt_venv.ensure(__file__, PACKAGES)
    main()
