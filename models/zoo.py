"""A model zoo of representative edge models, with random weights.

Each entry is a factory returning a `ZooModel`: the eval-mode module, example
inputs, the `dynamic_shapes` for torch.export (or None) and, for models with
several methods, the extra methods to export. Sizes are small so that the whole
zoo compiles and runs on the portable (numpy) runtime within CI's budget, while
keeping each architecture's characteristic ops (depthwise convs, residuals,
attention with masks, rotary embeddings, recurrent cells, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F


@dataclass
class ZooModel:
    name: str
    module: nn.Module
    example_inputs: tuple
    dynamic_shapes: object = None
    # Extra methods: name -> (callable module, example inputs). Exported as their own programs.
    methods: dict = field(default_factory=dict)
    is_cnn: bool = False

    def export(self) -> dict:
        """Export every method; returns {method name: ExportedProgram}."""
        programs = {"forward": torch.export.export(self.module, self.example_inputs,
                                                   dynamic_shapes=self.dynamic_shapes)}
        for name, (module, inputs) in self.methods.items():
            programs[name] = torch.export.export(module, inputs)
        return programs


def _seeded(fn: Callable[[], ZooModel]) -> Callable[[], ZooModel]:
    def make() -> ZooModel:
        torch.manual_seed(0)
        model = fn()
        model.module.eval()
        for module, _ in model.methods.values():
            module.eval()
        return model
    make.__name__ = fn.__name__
    make.__doc__ = fn.__doc__
    return make


ZOO: dict[str, Callable[[], ZooModel]] = {}
# Models too large for CI's portable runs, measured by `make bench` only.
BENCH_ONLY: dict[str, Callable[[], ZooModel]] = {}


def register(fn):
    ZOO[fn.__name__] = _seeded(fn)
    return fn


def register_bench_only(fn):
    BENCH_ONLY[fn.__name__] = _seeded(fn)
    return fn


# --------------------------------------------------------------------------- MLP
class MLP(nn.Module):
    def __init__(self, sizes=(32, 64, 64, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


@register
def mlp():
    """A three-layer perceptron."""
    return ZooModel("mlp", MLP(), (torch.randn(4, 32),))


# ------------------------------------------------------------------ small CNN
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def _randomize_bn(module: nn.Module) -> nn.Module:
    """Give batch-norm layers non-trivial statistics so that folding bugs show."""
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return module


@register
def small_cnn():
    """Conv + batch norm + ReLU + max pool + global average pool + linear."""
    return ZooModel("small_cnn", _randomize_bn(SmallCNN()), (torch.randn(1, 3, 16, 16),), is_cnn=True)


# ------------------------------------------------------- MobileNetV2 blocks
class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_residual else y


class MobileNetV2Tiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 1),
            InvertedResidual(16, 24, 2, 4),
            InvertedResidual(24, 24, 1, 4),
            InvertedResidual(24, 32, 2, 4),
        )
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


@register
def mobilenet_v2():
    """MobileNetV2-style inverted residuals with depthwise convolutions and ReLU6."""
    return ZooModel("mobilenet_v2", _randomize_bn(MobileNetV2Tiny()), (torch.randn(1, 3, 32, 32),), is_cnn=True)


# ------------------------------------------------------------ MobileNetV1
class MobileNetV1(nn.Module):
    """MobileNetV1 with a width multiplier (0.25 in MLPerf Tiny's visual wake words)."""

    def __init__(self, alpha=0.25, num_classes=2):
        super().__init__()
        def c(n):
            return max(8, int(n * alpha))
        cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
        layers = [nn.Conv2d(3, c(32), 3, 2, 1, bias=False), nn.BatchNorm2d(c(32)), nn.ReLU()]
        cin = c(32)
        for cout, stride in cfg:
            layers += [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
                       nn.Conv2d(cin, c(cout), 1, bias=False), nn.BatchNorm2d(c(cout)), nn.ReLU()]
            cin = c(cout)
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


@register
def mobilenet_v1_025():
    """MobileNetV1-0.25 at 96x96 (MLPerf Tiny visual wake words)."""
    return ZooModel("mobilenet_v1_025", _randomize_bn(MobileNetV1()), (torch.randn(1, 3, 96, 96),), is_cnn=True)


# --------------------------------------------------------------- ResNet-8
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet8(nn.Module):
    """ResNet-8 for 32x32 images (MLPerf Tiny image classification)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stages = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@register
def resnet8():
    """ResNet-style residual blocks (ResNet-8, 32x32)."""
    return ZooModel("resnet8", _randomize_bn(ResNet8()), (torch.randn(1, 3, 32, 32),), is_cnn=True)


class ResNet18(nn.Module):
    """ResNet-18 for 224x224 ImageNet images (the torchvision layout, written out)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        widths, blocks, cin = (64, 128, 256, 512), [], 64
        for i, width in enumerate(widths):
            blocks += [BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)]
            cin = width
        self.stages = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@register_bench_only
def resnet18():
    """ResNet-18 at 224x224: the large-CNN point of the benchmarks (1.8 GFLOP)."""
    return ZooModel("resnet18", _randomize_bn(ResNet18()), (torch.randn(1, 3, 224, 224),), is_cnn=True)


# ------------------------------------------------------ keyword spotting
class DSCNN(nn.Module):
    """DS-CNN for keyword spotting on 49x10 MFCC features (MLPerf Tiny)."""

    def __init__(self, channels=64, num_classes=12):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, (10, 4), (2, 2), (5, 1)), nn.BatchNorm2d(channels), nn.ReLU())
        blocks = []
        for _ in range(4):
            blocks += [nn.Conv2d(channels, channels, 3, 1, 1, groups=channels), nn.BatchNorm2d(channels), nn.ReLU(),
                       nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels), nn.ReLU()]
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = F.avg_pool2d(x, kernel_size=x.shape[2:])
        return self.fc(x.flatten(1))


@register
def kws_dscnn():
    """Keyword-spotting audio CNN (DS-CNN) on a 49x10 spectrogram."""
    return ZooModel("kws_dscnn", _randomize_bn(DSCNN()), (torch.randn(1, 1, 49, 10),), is_cnn=True)


# ------------------------------------------------- transformer encoder
class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class EncoderLayer(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.ff(self.ln2(x))


class TransformerEncoder(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, padding_mask):
        mask = padding_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


@register
def transformer_encoder():
    """Transformer encoder: attention with a padding mask (masked_fill), layernorm, GELU, softmax."""
    x = torch.randn(2, 8, 32)
    padding = torch.zeros(2, 8, dtype=torch.bool)
    padding[1, 6:] = True
    return ZooModel("transformer_encoder", TransformerEncoder(), (x, padding))


# ------------------------------------------------------ decoder-only LM
class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, max_len=64):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, x):
        t = x.shape[-2]
        cos, sin = self.cos[:t], self.sin[:t]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.rope = RotaryEmbedding(dim // heads)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim, bias=False)
        self.gate = nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q), self.rope(k)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        scores = scores.masked_fill(causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.out(y)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


@register
def decoder_lm():
    """Decoder-only LM: embeddings, causal mask, rotary embeddings, SiLU-gated MLP."""
    return ZooModel("decoder_lm", TinyLM(), (torch.randint(0, 64, (1, 12)),))


# ------------------------------------------------------------ recurrent
class LSTMClassifier(nn.Module):
    def __init__(self, features=16, hidden=32, classes=5):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


@register
def lstm():
    """A single-layer LSTM over a short sequence, classifying its last state."""
    return ZooModel("lstm", LSTMClassifier(), (torch.randn(2, 6, 16),))


class GRUTagger(nn.Module):
    def __init__(self, features=12, hidden=24, tags=4):
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, tags)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.fc(y)


@register
def gru():
    """A GRU sequence tagger."""
    return ZooModel("gru", GRUTagger(), (torch.randn(1, 5, 12),))


# --------------------------------------------------------- two methods
class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(16, 8), nn.Tanh())
        self.dec = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid())

    def forward(self, x):
        return self.dec(self.enc(x))


class _Encode(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.enc(x)


@register
def two_methods():
    """An autoencoder with two methods: `forward` and `encode`, sharing weights."""
    model = AutoEncoder()
    return ZooModel("two_methods", model, (torch.randn(3, 16),), methods={"encode": (_Encode(model), (torch.randn(3, 16),))})


# ---------------------------------------------------------- dynamic batch
@register
def dynamic_batch():
    """An MLP whose batch dimension is dynamic (torch.export.Dim, 1..32)."""
    batch = torch.export.Dim("batch", min=1, max=32)
    return ZooModel("dynamic_batch", MLP((16, 32, 4)), (torch.randn(5, 16),), dynamic_shapes=({0: batch},))
