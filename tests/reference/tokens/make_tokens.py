#!/usr/bin/python3
"""Reference data for token-level losses and multi-input training (issues 14 and 16).

Run by hand, never by the build or the tests (about a minute on 2 cores):

    /usr/bin/python3 tests/reference/tokens/make_tokens.py

It uses (and on the first run creates, scripts/omt_venv.py) the venv of make_modern.py,
$HOME/.cache/onnx-mirror/venv-modern (override with OMT_MODERN_VENV): PyPI's current torch,
transformers, onnx, onnxruntime and onnxscript. It re-executes itself inside the venv.

Two tiny Hugging Face models, seeded random init, dropout 0, exported with the default
(dynamo) exporter and a symbolic batch dimension into tests/data/tokens/:

  gpt2_lm.onnx    GPT2LMHeadModel (vocab 48, 16 positions, 2 layers, tied embeddings);
                  input input_ids [B, 12], output logits [B, 12, 48]
  gpt2_lm_dynamic_seq.onnx  the same model with a symbolic sequence length too: input_ids
                  [B, T] for T up to its 16 positions (`--seq-len` longer than them is refused)
  gpt2_data.npz   input_ids int64 [8, 12], sequences of uneven length padded with token 0;
                  labels int64 [8, 12]: the ids, -100 at the padding
  gpt2_ref.npz    torch's training on the whole batch with the causal-LM loss
                    F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1),
                                    ignore_index=-100, label_smoothing=0.1)
                  (what `--shift-labels --label-smoothing 0.1` computes):
                    loss0                      the loss before any step
                    <opt>/losses [3]           the loss of each of 3 steps
                    <opt>/logits [8, 12, 48]   eval logits after the 3 steps
                  for opt sgd (lr 0.1), sgd_clip (the same with clip_grad_norm_(0.1) before
                  each step; <opt>/grad_norms [3] the norms it returned) and adamw (lr 0.01, weight_decay 0.01 on parameters
                  of rank >= 2 and none on biases and norm weights, as nanoGPT groups them;
                  torch's defaults otherwise), in float64
  bert_cls.onnx   BertForSequenceClassification (vocab 50, hidden 16, 2 layers, 3 labels);
                  inputs input_ids, attention_mask, token_type_ids [B, 8]; output logits [B, 3]
  bert_data.npz   the three inputs [8, 8] (uneven padding, mask 0 there) and labels int64 [8]
  bert_ref.npz    the same keys for F.cross_entropy(logits, labels)

Every sequence's padding differs, so 1, 2 and 4 replicas hold different counts of counted
tokens: the mirrored update equals this whole-batch one only if the loss is normalised by
the global count.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(REPO, "tests", "data", "tokens")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import omt_venv  # noqa: E402

PACKAGES = ["torch", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy"]


SEED = 1234
STEPS = 3
OPTIMIZERS = {"sgd": dict(lr=0.1), "adamw": dict(lr=0.01, weight_decay=0.01), "sgd_clip": dict(lr=0.1)}
CLIP = 0.1  # sgd_clip: torch.nn.utils.clip_grad_norm_(parameters, 0.1) before each step
SMOOTHING = 0.1


def main():
    import copy
    import warnings

    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    import torch.nn.functional as F
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    warnings.filterwarnings("ignore")
    torch.manual_seed(SEED)
    os.makedirs(OUT, exist_ok=True)

    class GPT2(GPT2LMHeadModel):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    class Bert(BertForSequenceClassification):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).logits

    def lm_loss(logits, labels):
        v = logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1), ignore_index=-100,
                               label_smoothing=SMOOTHING)

    def cls_loss(logits, labels):
        return F.cross_entropy(logits, labels)

    def perturb(model, g):
        # LayerNorm weights 1 and biases 0 would hide layout mistakes; give them noise.
        with torch.no_grad():
            for p in model.parameters():
                flat = p.reshape(-1)
                if flat.numel() > 1 and bool((flat == flat[0]).all()):
                    p.add_(0.1 * torch.randn(p.shape, generator=g))

    def reference(model, feeds, labels, loss_fn):
        args = list(feeds.values())
        ref = {}
        m = copy.deepcopy(model).double().train()
        ref["loss0"] = np.array(float(loss_fn(m(*args), labels)))
        for name, kw in OPTIMIZERS.items():
            m = copy.deepcopy(model).double().train()
            if name.startswith("sgd"):
                opt = torch.optim.SGD(m.parameters(), **kw)
            else:  # nanoGPT's groups: no decay for biases and norm weights (`--no-decay auto`)
                decay = [p for p in m.parameters() if p.dim() >= 2]
                rest = [p for p in m.parameters() if p.dim() < 2]
                opt = torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], **kw)
            losses, norms = [], []
            for _ in range(STEPS):
                opt.zero_grad()
                loss = loss_fn(m(*args), labels)
                loss.backward()
                if name == "sgd_clip":
                    norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)))
                opt.step()
                losses.append(float(loss))
            ref[name + "/losses"] = np.array(losses)
            if norms:
                ref[name + "/grad_norms"] = np.array(norms)
            with torch.no_grad():
                ref[name + "/logits"] = m.eval()(*args).numpy()
        return ref

    def export(model, feeds, path, positions=None):
        batch = torch.export.Dim("batch", min=1, max=1024)
        shapes = {k: {0: batch} for k in feeds}
        if positions:  # a symbolic sequence length too, up to the model's positions
            seq = torch.export.Dim("seq", min=2, max=positions)
            shapes = {k: {0: batch, 1: seq} for k in feeds}
        torch.onnx.export(model.eval(), tuple(feeds.values()), path, dynamo=True, dynamic_shapes=shapes,
                          input_names=list(feeds), output_names=["logits"])
        mp = onnx.load(path)
        onnx.checker.check_model(mp, full_check=True)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(None, {k: v.numpy() for k, v in feeds.items()})[0]
        with torch.no_grad():
            want = model.eval()(*feeds.values()).numpy()
        err = float(np.max(np.abs(got - want)))
        print(f"{os.path.basename(path)}: opset {mp.opset_import[0].version}, IR {mp.ir_version}, "
              f"onnxruntime vs torch max |diff| {err:.2e}")
        assert err < 1e-4, err

    g = torch.Generator().manual_seed(SEED)

    # GPT-2 with uneven padding.
    gpt = GPT2(GPT2Config(vocab_size=48, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0,
                          tie_word_embeddings=True))
    perturb(gpt, g)
    lengths = [12, 9, 12, 5, 11, 12, 7, 3]
    ids = torch.randint(1, 48, (8, 12), generator=g)
    labels = ids.clone()
    for i, n in enumerate(lengths):
        ids[i, n:] = 0
        labels[i, n:] = -100
    feeds = {"input_ids": ids}
    export(gpt, feeds, os.path.join(OUT, "gpt2_lm.onnx"))
    export(gpt, feeds, os.path.join(OUT, "gpt2_lm_dynamic_seq.onnx"), positions=16)
    np.savez(os.path.join(OUT, "gpt2_data.npz"), input_ids=ids.numpy(), labels=labels.numpy())
    np.savez(os.path.join(OUT, "gpt2_ref.npz"), **reference(gpt, feeds, labels, lm_loss))

    # BERT with three inputs.
    bert = Bert(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=16, type_vocab_size=2, num_labels=3,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                           pad_token_id=0))
    perturb(bert, g)
    lengths = [8, 6, 8, 3, 7, 5, 8, 4]
    ids = torch.randint(1, 50, (8, 8), generator=g)
    mask = torch.ones(8, 8, dtype=torch.int64)
    types = torch.zeros(8, 8, dtype=torch.int64)
    for i, n in enumerate(lengths):
        ids[i, n:] = 0
        mask[i, n:] = 0
        types[i, n // 2:n] = 1
    cls = torch.randint(0, 3, (8,), generator=g)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    export(bert, feeds, os.path.join(OUT, "bert_cls.onnx"))
    np.savez(os.path.join(OUT, "bert_data.npz"), **{k: v.numpy() for k, v in feeds.items()}, labels=cls.numpy())
    np.savez(os.path.join(OUT, "bert_ref.npz"), **reference(bert, feeds, cls, cls_loss))
    print("torch", torch.__version__, "onnx", onnx.__version__, "onnxruntime", ort.__version__)


if __name__ == "__main__":
    omt_venv.ensure(__file__, PACKAGES)
    main()
