"""The layer sweep's layers (`python -m etc.bench.layers` measures them): each kind of layer real
models have, as a small pure-torch `nn.Module` at a real size with the ops a real model puts right
before and after it, and `build(name)`, the seeded module and its example inputs. Tests import this
table (every entry takes its tuned path); it imports neither executorch nor transformers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Layer:
    name: str
    what: str  # one line: which model this comes from
    module: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    flops: float = 0.0  # multiply-add = 2 flops; 0 when the layer is memory-bound
    bytes: float = 0.0  # bytes the layer must move at least (GB/s rows)
    gemv: bool = False  # bytes are weight bytes of a decode GEMV: compared with copy bandwidth


def _conv_flops(cin, cout, k, oh, ow, groups=1):
    return 2.0 * cout * oh * ow * (cin // groups) * k * k


class ConvBnAct(nn.Module):
    """conv -> BatchNorm -> activation (MobileNet / EfficientNet / ResNet stem blocks)."""

    def __init__(self, cin, cout, k, stride, groups=1, act="relu6"):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = {"relu6": nn.ReLU6(), "relu": nn.ReLU(), "silu": nn.SiLU()}[act]

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite(nn.Module):
    """Squeeze-excitation (RegNetY, EfficientNet): global avg pool -> 1x1 conv -> ReLU -> 1x1 conv
    -> sigmoid -> channel scale of the input."""

    def __init__(self, c, mid):
        super().__init__()
        self.reduce = nn.Conv2d(c, mid, 1)
        self.expand = nn.Conv2d(mid, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


class RegNetYBlock(nn.Module):
    """RegNetY's bottleneck (group width 8, SE at a quarter of the input width): 1x1 + BN + ReLU,
    grouped 3x3 + BN + ReLU, SE, 1x1 + BN, + x, ReLU."""

    def __init__(self, c, group_width=8):
        super().__init__()
        self.a = ConvBnAct(c, c, 1, 1, act="relu")
        self.b = ConvBnAct(c, c, 3, 1, groups=c // group_width, act="relu")
        self.se = SqueezeExcite(c, c // 4)
        self.c = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.c(self.se(self.b(self.a(x))))) + x)


class ASPP(nn.Module):
    """DeepLabV3's atrous spatial pyramid pooling (torchvision's head on MobileNetV3-Large's 960
    channels): a 1x1 branch, three 3x3 branches of dilations 12, 24 and 36, an image-pool branch
    (global mean, 1x1, upsampled back: a broadcast), each + BN + ReLU, concatenated and projected
    1x1 to 256 + BN + ReLU. At 224x224 the map is 14x14: dilations 24 and 36 read padding only
    outside the centre tap."""

    def __init__(self, c, out=256, rates=(12, 24, 36)):
        super().__init__()
        self.branches = nn.ModuleList([ConvBnAct(c, out, 1, 1, act="relu")] + [
            nn.Sequential(nn.Conv2d(c, out, 3, padding=r, dilation=r, bias=False), nn.BatchNorm2d(out), nn.ReLU())
            for r in rates])
        self.pool = ConvBnAct(c, out, 1, 1, act="relu")
        self.project = ConvBnAct(out * (len(rates) + 2), out, 1, 1, act="relu")

    def forward(self, x):
        pooled = self.pool(x.mean((2, 3), keepdim=True))
        pooled = F.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return self.project(torch.cat([b(x) for b in self.branches] + [pooled], 1))


class Fire(nn.Module):
    """SqueezeNet's fire module: 1x1 squeeze + ReLU, then 1x1 and 3x3 expands (+ ReLU) side by
    side, concatenated along the channels."""

    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.expand1(x)), torch.relu(self.expand3(x))], 1)


class HardSwishBlock(nn.Module):
    """MobileNetV3-Large's block with squeeze-excitation: 1x1 expand + BN + hardswish, depthwise
    3x3 + BN + hardswish, SE (global mean, 1x1 + ReLU, 1x1 + hardsigmoid, channel scale), 1x1
    project + BN, + x."""

    def __init__(self, c, mid):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, 1, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                nn.Hardswish())
        self.reduce = nn.Conv2d(mid, mid // 4, 1)
        self.excite = nn.Conv2d(mid // 4, mid, 1)
        self.project = nn.Sequential(nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.dw(self.expand(x))
        gate = F.hardsigmoid(self.excite(torch.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        return x + self.project(y * gate)


class ResNetConv(nn.Module):
    """ResNet basic block's second half: conv 3x3 -> BN -> + identity -> ReLU."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck: 1x1 reduce + BN + ReLU, 3x3 + BN + ReLU, 1x1 expand + BN, + x, ReLU.
    At 14x14 (stage 3, most of ResNet-50's time) every GEMM has 196 columns: three full panels
    and a partial one, and K long enough to run in blocks."""

    def __init__(self, c, mid):
        super().__init__()
        self.reduce = ConvBnAct(c, mid, 1, 1, act="relu")
        self.conv = ConvBnAct(mid, mid, 3, 1, act="relu")
        self.expand = nn.Conv2d(mid, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.expand(self.conv(self.reduce(x)))) + x)


class InvertedResidual(nn.Module):
    """MobileNetV2's block as `transformers` builds it: 1x1 expand + BN + ReLU6, TensorFlow
    "SAME" padding as an explicit F.pad, depthwise 3x3 + BN + ReLU6, 1x1 project + BN, and the
    residual add at stride 1. The depthwise op between two GEMMs with a pad in front is what the
    single-op layers above do not show: whether its neighbours leave it its tuned path."""

    def __init__(self, cin, cout, stride, expand=6):
        super().__init__()
        mid = cin * expand
        self.stride = stride
        self.expand = ConvBnAct(cin, mid, 1, 1)
        self.dw = nn.Conv2d(mid, mid, 3, stride, 0, groups=mid, bias=False)
        self.dw_bn = nn.BatchNorm2d(mid)
        self.project = nn.Conv2d(mid, cout, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.expand(x)
        h = y.shape[-1]
        pad = max(3 - (self.stride if h % self.stride == 0 else h % self.stride), 0)  # TF "SAME"
        y = F.pad(y, (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2))
        y = F.relu6(self.dw_bn(self.dw(y)))
        y = self.project_bn(self.project(y))
        return x + y if self.residual else y


class ConvNeXtBlock(nn.Module):
    """ConvNeXt: depthwise 7x7 -> permute to channels-last -> LayerNorm -> Linear x4 -> GELU."""

    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, 1, 3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw = nn.Linear(c, 4 * c)

    def forward(self, x):
        x = self.dw(x).permute(0, 2, 3, 1)
        return F.gelu(self.pw(self.norm(x)))


class MaxPool(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 3, 2, 1)


class GapClassifier(nn.Module):
    """Global average pool -> flatten -> Linear (MobileNetV2/EfficientNet classifier)."""

    def __init__(self, c, classes):
        super().__init__()
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))


class RMSNorm(nn.Module):
    """Llama's RMSNorm, written as the HF model writes it (float math, rsqrt, weight)."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class NormLinear(nn.Module):
    def __init__(self, norm, k, n, bias=True):
        super().__init__()
        self.norm = norm
        self.fc = nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return self.fc(self.norm(x))


class EmbedHead(nn.Module):
    """Embedding -> Linear head (Llama vocab 32000, dim 288), untied weights."""

    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.embed(ids))


class LinearAct(nn.Module):
    def __init__(self, k, n, act=None, bias=True):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)
        self.act = act

    def forward(self, x):
        y = self.fc(x)
        return F.gelu(y) if self.act == "gelu" else y


class Upsample(nn.Module):
    """Bilinear resizing to a fixed size (DeepLabV3's decoder: the ASPP output back up, torchvision's
    `F.interpolate(size=..., mode="bilinear")`)."""

    def __init__(self, size, align_corners=False):
        super().__init__()
        self.size, self.align_corners = size, align_corners

    def forward(self, x):
        return F.interpolate(x, size=self.size, mode="bilinear", align_corners=self.align_corners)


class Attention(nn.Module):
    """Scaled dot-product attention as HF eager attention writes it, from the q/k/v
    projections' outputs [B, T, H*D] (view + transpose in) back to [B, T, H*D] (transpose +
    reshape out); causal (Llama) adds a constant mask before the softmax."""

    def __init__(self, heads, head_dim, tokens, causal=False):
        super().__init__()
        self.h, self.d, self.scale = heads, head_dim, head_dim ** -0.5
        mask = torch.full((tokens, tokens), float("-inf")).triu(1) if causal else None
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        b, t, _ = q.shape
        q, k, v = (x.view(b, t, self.h, self.d).transpose(1, 2) for x in (q, k, v))
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        if self.mask is not None:
            scores = scores + self.mask
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, t, self.h * self.d)


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def _attn_flops(h, d, t):
    return 2.0 * 2 * h * t * t * d


def _f32(*shape):
    return lambda: (torch.randn(*shape),)


def _layers() -> list[Layer]:
    L = []

    def add(name, what, module, inputs, **kw):
        L.append(Layer(name, what, module, inputs, **kw))

    # depthwise convolutions (MobileNetV2, EfficientNet)
    add("dw3x3s2_96c112", "MobileNetV2 block 2: dw 3x3/2 96ch@112 + BN + ReLU6",
        lambda: ConvBnAct(96, 96, 3, 2, groups=96), _f32(1, 96, 112, 112),
        flops=_conv_flops(96, 96, 3, 56, 56, 96))
    add("dw3x3s1_144c56", "MobileNetV2: dw 3x3/1 144ch@56 + BN + ReLU6",
        lambda: ConvBnAct(144, 144, 3, 1, groups=144), _f32(1, 144, 56, 56),
        flops=_conv_flops(144, 144, 3, 56, 56, 144))
    add("dw5x5s2_144c56", "EfficientNet-B0: dw 5x5/2 144ch@56 + BN + SiLU",
        lambda: ConvBnAct(144, 144, 5, 2, groups=144, act="silu"), _f32(1, 144, 56, 56),
        flops=_conv_flops(144, 144, 5, 28, 28, 144))
    add("dw5x5s1_240c28", "EfficientNet-B0: dw 5x5/1 240ch@28 + BN + SiLU",
        lambda: ConvBnAct(240, 240, 5, 1, groups=240, act="silu"), _f32(1, 240, 28, 28),
        flops=_conv_flops(240, 240, 5, 28, 28, 240))
    add("dw3x3s1_576c14", "MobileNetV2: dw 3x3/1 576ch@14 + BN + ReLU6",
        lambda: ConvBnAct(576, 576, 3, 1, groups=576), _f32(1, 576, 14, 14),
        flops=_conv_flops(576, 576, 3, 14, 14, 576))
    add("dw3x3s1_960c7", "MobileNetV2: dw 3x3/1 960ch@7 + BN + ReLU6",
        lambda: ConvBnAct(960, 960, 3, 1, groups=960), _f32(1, 960, 7, 7),
        flops=_conv_flops(960, 960, 3, 7, 7, 960))
    add("mbv2_block_s2_24c56", "MobileNetV2 block 2 (transformers): 1x1 24->144, pad, dw 3x3/2, 1x1 144->32",
        lambda: InvertedResidual(24, 32, 2), _f32(1, 24, 56, 56),
        flops=_conv_flops(24, 144, 1, 56, 56) + _conv_flops(144, 144, 3, 28, 28, 144)
        + _conv_flops(144, 32, 1, 28, 28))
    add("mbv2_block_res_64c14", "MobileNetV2 block 7 (transformers): 1x1 64->384, pad, dw 3x3, 1x1 384->64, + x",
        lambda: InvertedResidual(64, 64, 1), _f32(1, 64, 14, 14),
        flops=_conv_flops(64, 384, 1, 14, 14) + _conv_flops(384, 384, 3, 14, 14, 384)
        + _conv_flops(384, 64, 1, 14, 14))
    # dense convolutions
    add("pw1x1_24to144c56", "MobileNetV2 expansion: 1x1 24->144 @56 + BN + ReLU6",
        lambda: ConvBnAct(24, 144, 1, 1), _f32(1, 24, 56, 56),
        flops=_conv_flops(24, 144, 1, 56, 56))
    add("conv3x3_64c56_res", "ResNet: 3x3 64->64 @56 + BN + residual add + ReLU",
        lambda: ResNetConv(64), _f32(1, 64, 56, 56), flops=_conv_flops(64, 64, 3, 56, 56))
    add("bottleneck_1024c14", "ResNet-50 stage 3: 1x1 1024->256, 3x3 256, 1x1 256->1024 (BN, ReLU, + x) @14",
        lambda: Bottleneck(1024, 256), _f32(1, 1024, 14, 14),
        flops=2 * _conv_flops(1024, 256, 1, 14, 14) + _conv_flops(256, 256, 3, 14, 14))
    add("stem7x7s2_3to64c224", "ResNet stem: 7x7/2 3->64 @224 + BN + ReLU",
        lambda: ConvBnAct(3, 64, 7, 2, act="relu"), _f32(1, 3, 224, 224),
        flops=_conv_flops(3, 64, 7, 112, 112))
    add("convnext_96c56", "ConvNeXt-T: dw 7x7 96ch@56 + permute + LayerNorm + Linear 96->384 + GELU",
        lambda: ConvNeXtBlock(96), _f32(1, 96, 56, 56),
        flops=_conv_flops(96, 96, 7, 56, 56, 96) + 2.0 * 56 * 56 * 96 * 384)
    # grouped convolutions (RegNetY-400MF: group width 8; ResNeXt-50 32x4d; ShuffleNet's 1x1 groups)
    for c, g, k, s, hw, what in (
            (48, 6, 3, 1, 56, "RegNetY-400MF stage 1: grouped 3x3 48ch@56, 6 groups of 8"),
            (104, 13, 3, 2, 56, "RegNetY-400MF stage 2 entry: grouped 3x3/2 104ch@56, 13 groups of 8"),
            (208, 26, 3, 1, 14, "RegNetY-400MF stage 3: grouped 3x3 208ch@14, 26 groups of 8"),
            (440, 55, 3, 1, 7, "RegNetY-400MF stage 4: grouped 3x3 440ch@7, 55 groups of 8"),
            (64, 32, 3, 1, 56, "grouped 3x3 64ch@56, 32 groups of 2"),
            (128, 32, 3, 1, 56, "ResNeXt-50 32x4d stage 1: grouped 3x3 128ch@56, 32 groups of 4"),
            (256, 32, 3, 1, 28, "ResNeXt-50 32x4d stage 2: grouped 3x3 256ch@28, 32 groups of 8"),
            (512, 32, 3, 1, 14, "ResNeXt-50 32x4d stage 3: grouped 3x3 512ch@14, 32 groups of 16"),
            (1024, 32, 3, 1, 7, "ResNeXt-50 32x4d stage 4: grouped 3x3 1024ch@7, 32 groups of 32"),
            (256, 4, 3, 1, 28, "ResNeXt 4x64d: grouped 3x3 256ch@28, 4 groups of 64"),
            (240, 3, 1, 1, 28, "ShuffleNet-v1 (g=3): grouped 1x1 240ch@28, 3 groups of 80")):
        oh = hw // s
        add(f"gconv{k}x{k}{'s2' if s == 2 else ''}_g{c // g}_{c}c{hw}", what + " + BN + ReLU",
            lambda c=c, g=g, k=k, s=s: ConvBnAct(c, c, k, s, groups=g, act="relu"), _f32(1, c, hw, hw),
            flops=_conv_flops(c, c, k, oh, oh, g))
    add("se_208c14", "RegNetY-400MF stage 3 squeeze-excitation: pool, 1x1 208->52, ReLU, 1x1 52->208, sigmoid, scale",
        lambda: SqueezeExcite(208, 52), _f32(1, 208, 14, 14), bytes=2 * 4.0 * 208 * 14 * 14)
    add("regnety_block_208c14", "RegNetY-400MF stage 3 block: 1x1, grouped 3x3 (g8), SE, 1x1, + x",
        lambda: RegNetYBlock(208), _f32(1, 208, 14, 14),
        flops=2 * _conv_flops(208, 208, 1, 14, 14) + _conv_flops(208, 208, 3, 14, 14, 26))
    # DeepLabV3's head: dilated 3x3s on a small map (their padding-only taps dropped)
    add("aspp_960to256c14", "DeepLabV3-MobileNetV3 at 224: ASPP on 960ch@14 (1x1, 3x3 dilated 12/24/36, image pool; "
        "project 1280->256); GFLOP/s of all taps",
        lambda: ASPP(960), _f32(1, 960, 14, 14),
        flops=2 * _conv_flops(960, 256, 1, 14, 14) + 3 * _conv_flops(960, 256, 3, 14, 14)
        + _conv_flops(1280, 256, 1, 14, 14))
    for align_corners in (False, True):
        add(f"upsample_bilinear_256c14{'_corners' if align_corners else ''}",
            f"DeepLabV3 decoder: bilinear upsampling 256ch 14x14 -> 28x28, align_corners={align_corners}",
            lambda align_corners=align_corners: Upsample((28, 28), align_corners), _f32(1, 256, 14, 14),
            bytes=4.0 * 256 * (14 * 14 + 28 * 28))
    # SqueezeNet-1.1 and MobileNetV3
    add("fire_128c27", "SqueezeNet-1.1 fire 4: 1x1 128->32, then 1x1 and 3x3 32->128 each, concat @27",
        lambda: Fire(128, 32, 128), _f32(1, 128, 27, 27),
        flops=_conv_flops(128, 32, 1, 27, 27) + _conv_flops(32, 128, 1, 27, 27) + _conv_flops(32, 128, 3, 27, 27))
    add("mbv3_block_se_80c14", "MobileNetV3-Large block: 1x1 80->480 + hardswish, dw 3x3 + hardswish, "
        "SE (hardsigmoid), 1x1 480->80, + x @14",
        lambda: HardSwishBlock(80, 480), _f32(1, 80, 14, 14),
        flops=2 * _conv_flops(80, 480, 1, 14, 14) + _conv_flops(480, 480, 3, 14, 14, 480))
    # pooling
    add("maxpool3x3s2_64c112", "ResNet: max pool 3x3/2 64ch@112",
        MaxPool, _f32(1, 64, 112, 112), bytes=4.0 * 64 * (112 * 112 + 56 * 56))
    add("gap_fc_1280to1000", "MobileNetV2 classifier: global avg pool 1280ch@7 + Linear 1280->1000",
        lambda: GapClassifier(1280, 1000), _f32(1, 1280, 7, 7), flops=2.0 * 1280 * 1000)
    # transformer linears
    add("rmsnorm_head_288to32000_t32", "Llama head: RMSNorm + Linear 288->32000, 32 tokens",
        lambda: NormLinear(RMSNorm(288), 288, 32000, bias=False), _f32(1, 32, 288),
        flops=2.0 * 32 * 288 * 32000)
    add("embed_head_288to32000_t8", "Llama: Embedding(32000, 288) + Linear 288->32000, 8 tokens",
        lambda: EmbedHead(32000, 288), lambda: (torch.randint(0, 32000, (1, 8)),),
        flops=2.0 * 8 * 288 * 32000)
    add("linear_288to32000_t32", "Llama head alone: Linear 288->32000, 32 tokens",
        lambda: LinearAct(288, 32000, bias=False), _f32(1, 32, 288), flops=2.0 * 32 * 288 * 32000)
    add("linear_gelu_256to1024_t128", "BERT-small FFN up: Linear 256->1024 + GELU, 128 tokens",
        lambda: LinearAct(256, 1024, act="gelu"), _f32(1, 128, 256), flops=2.0 * 128 * 256 * 1024)
    add("ln_linear_768_t128", "BERT/GPT-2: LayerNorm + Linear 768->768, 128 tokens",
        lambda: NormLinear(nn.LayerNorm(768), 768, 768), _f32(1, 128, 768), flops=2.0 * 128 * 768 * 768)
    # attention and normalisations
    add("attn_12x64_t128", "BERT/ViT attention: 12 heads x 64, 128 tokens (QK^T, scale, softmax, @V)",
        lambda: Attention(12, 64, 128), lambda: tuple(torch.randn(1, 128, 768) for _ in range(3)),
        flops=_attn_flops(12, 64, 128))
    add("attn_6x48_t32_causal", "Llama stories15M attention: 6 heads x 48, 32 tokens, causal mask",
        lambda: Attention(6, 48, 32, causal=True), lambda: tuple(torch.randn(1, 32, 288) for _ in range(3)),
        flops=_attn_flops(6, 48, 32))
    # long attention: the fused (flash) kernel from 256 keys (etc-cpu-attention-kernels)
    for h, d, t, causal, what in ((6, 64, 1500, False, "Whisper-tiny encoder"), (12, 64, 577, False, "ViT-B/16 at 384"),
                                  (6, 48, 512, True, "Llama stories15M, 512-token prefill")):
        add(f"attn_{h}x{d}_t{t}" + ("_causal" if causal else ""), f"{what} attention: {h} heads x {d}, {t} tokens"
            + (", causal mask" if causal else ""),
            lambda h=h, d=d, t=t, causal=causal: Attention(h, d, t, causal=causal),
            lambda h=h, d=d, t=t: tuple(torch.randn(1, t, h * d) for _ in range(3)), flops=_attn_flops(h, d, t))
    add("softmax_12x128x128", "attention probabilities: softmax over [12,128,128]",
        Softmax, _f32(1, 12, 128, 128), bytes=2 * 4.0 * 12 * 128 * 128)
    add("layernorm_128x768", "BERT/GPT-2: LayerNorm 768, 128 tokens",
        lambda: nn.LayerNorm(768), _f32(1, 128, 768), bytes=2 * 4.0 * 128 * 768)
    add("rmsnorm_32x288", "Llama: RMSNorm 288, 32 tokens",
        lambda: RMSNorm(288), _f32(1, 32, 288), bytes=2 * 4.0 * 32 * 288)
    # decode GEMVs (1 token): weight bytes per call
    for k, n, what in ((288, 768, "Llama FFN up"), (768, 3072, "GPT-2/BERT FFN up"),
                       (288, 32000, "Llama head")):
        add(f"gemv_{k}to{n}", f"decode, 1 token: Linear {k}->{n} ({what})",
            lambda k=k, n=n: LinearAct(k, n, bias=False), _f32(1, 1, k), bytes=4.0 * k * n, gemv=True)
    return L


LAYERS: dict[str, Layer] = {layer.name: layer for layer in _layers()}


def build(name: str) -> tuple[nn.Module, tuple]:
    """The layer's module (eval mode, seeded weights and BN statistics) and example inputs."""
    layer = LAYERS[name]
    torch.manual_seed(0)
    module = layer.module().eval()
    for m in module.modules():  # BN with non-trivial statistics, so folding it is really tested
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return module, layer.inputs()
