"""make_modern.py's models: how each is built, its batch, its loss and its ONNX names."""
# Imported by make_modern.py inside its venv only (torch & co. from PyPI).
import collections

import torch
import torch.nn.functional as F  # noqa: F401
from torch import nn

VARIANTS_PLAIN = ["dynamo", "legacy"]
# legacy_train first: its references (the torch model as it trains) claim the shared npz keys
VARIANTS_BN = ["legacy_train", "dynamo", "legacy"]


class Spec:
    """One model: how to build it, its batch, its loss, the ONNX input/output names."""

    def __init__(self, name, build, batch, loss, inputs, outputs, has_bn=False, untie=None, note="",
                 legacy_workaround=None):
        self.name, self.build, self.batch, self.loss = name, build, batch, loss
        self.legacy_workaround = legacy_workaround  # (what, fn(model) -> model) tried if legacy fails
        self.inputs, self.outputs, self.has_bn, self.untie, self.note = inputs, outputs, has_bn, untie, note
        self.variants = VARIANTS_BN if has_bn else VARIANTS_PLAIN
        if name == "resnet":
            self.variants = ["legacy_train", "dynamo_noopt", "dynamo", "legacy", "dynamo_train"]


def image_batch(n, classes, hw=32):
    def batch(g):
        x = torch.randn(n, 3, hw, hw, generator=g)
        return collections.OrderedDict(input=x), torch.randint(0, classes, (n,), generator=g)
    return batch


def build_resnet():
    """torchvision's ResNet/BasicBlock/_make_layer/forward with widths 4-8-8-16 (6.5k params)."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class SmallResNet(ResNet):
        def __init__(self, widths=(4, 8, 8, 16), num_classes=10):
            nn.Module.__init__(self)  # ResNet.__init__ hard-codes 64..512 channels
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = widths[0], 1, 1, 64
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, widths[0], 1)
            self.layer2 = self._make_layer(BasicBlock, widths[1], 1, stride=2)
            self.layer3 = self._make_layer(BasicBlock, widths[2], 1, stride=2)
            self.layer4 = self._make_layer(BasicBlock, widths[3], 1, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3], num_classes)

    return SmallResNet()


def build_mobilenet():
    from torchvision.models import mobilenet_v3_small
    return mobilenet_v3_small(width_mult=0.1, reduced_tail=True, num_classes=10, dropout=0.0)


def build_efficientnet():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.1, depth_mult=0.25)
    return EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10, last_channel=last_channel)


def build_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                             dropout=0.0, attention_dropout=0.0, num_classes=10)


def build_bert():
    from transformers import BertConfig, BertForSequenceClassification

    class Bert(BertForSequenceClassification):  # a subclass keeps the parameter names
        def forward(self, input_ids, attention_mask, token_type_ids):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).logits

    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, type_vocab_size=2, num_labels=3,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                     pad_token_id=0)
    return Bert(cfg)


def bert_batch(g):
    ids = torch.randint(1, 50, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0          # the second sequence has 3 padding positions
    ids[1, 5:] = 0
    tt = torch.zeros(2, 8, dtype=torch.int64)
    tt[:, 4:] = 1
    tt[1, 5:] = 0
    feeds = collections.OrderedDict(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    return feeds, torch.randint(0, 3, (2,), generator=g)


def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    class GPT2(GPT2LMHeadModel):
        def forward(self, input_ids):
            return super().forward(input_ids=input_ids, use_cache=False).logits

    cfg = GPT2Config(vocab_size=48, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0, eos_token_id=0,
                     tie_word_embeddings=True)
    return GPT2(cfg)


def gpt2_batch(g):
    seq = torch.randint(0, 48, (2, 9), generator=g)
    return collections.OrderedDict(input_ids=seq[:, :8]), seq[:, 1:].contiguous()


def gpt2_untie(m):
    """Give lm_head its own copy of the embedding, so the two uses' gradients come apart."""
    m.lm_head.weight = nn.Parameter(m.transformer.wte.weight.detach().clone())
    # which torch use each ONNX consumer op stands for
    return {"Gather": "transformer.wte.weight", "MatMul": "lm_head.weight", "Gemm": "lm_head.weight"}


def gpt2_ones_mask(m):
    """Pass attention_mask=ones: transformers then skips find_packed_sequence_indices, whose
    torch.diff the legacy exporter cannot export. Same function, same parameter names."""
    import types
    base = type(m).__mro__[1]  # GPT2LMHeadModel

    def forward(self, input_ids):
        return base.forward(self, input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                            use_cache=False).logits

    m.forward = types.MethodType(forward, m)
    return m


def build_encoder():
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def seq_batch(shape, target_shape):
    def batch(g):
        return (collections.OrderedDict(input=torch.randn(*shape, generator=g)),
                torch.randn(*target_shape, generator=g))
    return batch


def build_gru():
    class GRUHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(8, 16, batch_first=True, bidirectional=True)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            y, _ = self.gru(x)
            return self.head(y)

    return GRUHead()


def specs():
    return [
        # Input sizes: with BatchNorm in train mode on 1x1 maps of a few samples, 3 SGD steps at
        # lr 0.1 become chaotic (float32 and float64 runs part by up to 50% for EfficientNet at
        # 4x32x32); these sizes keep them within ~1e-5 of each other (manifest f32_vs_f64).
        Spec("resnet", build_resnet, image_batch(4, 10, 48), "cross_entropy", ["input"], ["logits"], has_bn=True,
             note="torchvision ResNet(BasicBlock) code, layers [1,1,1,1], widths 4-8-8-16"),
        Spec("mobilenet_v3_small", build_mobilenet, image_batch(4, 10), "cross_entropy", ["input"], ["logits"],
             has_bn=True, note="torchvision mobilenet_v3_small(width_mult=0.1, reduced_tail=True, dropout=0)"),
        Spec("efficientnet_b0", build_efficientnet, image_batch(8, 10, 48), "cross_entropy", ["input"], ["logits"],
             has_bn=True, note="torchvision EfficientNet(_efficientnet_conf('efficientnet_b0', width_mult=0.1, "
                               "depth_mult=0.25): one MBConv per stage, stage 1 residual), dropout=0, stochastic_depth_prob=0"),
        Spec("vit", build_vit, image_batch(2, 10), "cross_entropy", ["input"], ["logits"],
             note="torchvision VisionTransformer(image 32, patch 8, 2 layers, 2 heads, hidden 16, mlp 32)"),
        Spec("bert", build_bert, bert_batch, "cross_entropy", ["input_ids", "attention_mask", "token_type_ids"],
             ["logits"], note="transformers BertForSequenceClassification, tiny BertConfig, default attention"),
        Spec("gpt2", build_gpt2, gpt2_batch, "token_cross_entropy", ["input_ids"], ["logits"], untie=gpt2_untie,
             legacy_workaround=("forward passes attention_mask=torch.ones_like(input_ids) (transformers then skips "
                                "the torch.diff of find_packed_sequence_indices)", gpt2_ones_mask),
             note="transformers GPT2LMHeadModel, tiny GPT2Config, tied embeddings, default attention"),
        Spec("transformer_encoder", build_encoder, seq_batch((2, 8, 16), (2, 8, 16)), "mse", ["input"], ["output"],
             note="nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0, gelu, batch_first, "
                  "norm_first), 2 layers)"),
        Spec("gru", build_gru, seq_batch((2, 6, 8), (2, 6, 4)), "mse", ["input"], ["output"],
             note="nn.GRU(8, 16, batch_first, bidirectional) + nn.Linear(32, 4) on every step"),
    ]


LOSSES = {
    "cross_entropy": "torch.nn.functional.cross_entropy(logits, labels) (mean over the batch; int64 labels)",
    "token_cross_entropy": "cross_entropy(logits.reshape(-1, V), labels.reshape(-1)), mean over all B*T tokens; "
                           "labels[b, t] = seq[b, t + 1] where input_ids = seq[:, :T] (the next-token convention "
                           "of HF's GPT2LMHeadModel(labels=...), pre-shifted so every position has a target and "
                           "no ignore_index is needed)",
    "mse": "torch.nn.functional.mse_loss(output, labels) (mean over all elements; float32 target)",
}


def loss_fn(kind, out, labels):
    if kind == "cross_entropy":
        return F.cross_entropy(out, labels)
    if kind == "token_cross_entropy":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
    return F.mse_loss(out, labels)


def perturb(model, g):
    """Random init is often constant (LayerNorm/BatchNorm weight 1, biases 0, BN statistics 0/1).
    Constant tensors make value matching ambiguous, let the optimizer merge equal initializers
    and hide BN folding, so they get seeded noise; so do parameters equal to another one
    (nn.TransformerEncoder deep-copies its layer: both layers start equal, and both exporters
    then store the two layers' weights once, see manifest "dedup_probe")."""
    with torch.no_grad():
        seen = set()
        for _, p in model.named_parameters():
            flat = p.reshape(-1)
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            if p.detach().numpy().tobytes() in seen:
                p.add_(0.01 * torch.randn(p.shape, generator=g))
            seen.add(p.detach().numpy().tobytes())
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.2, 0.2, generator=g)
                mod.running_var.uniform_(0.5, 1.5, generator=g)


