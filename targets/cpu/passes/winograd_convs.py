"""etc-cpu-winograd-convs: 3x3 stride-1 convolutions computed as Winograd F(2x2, 3x3).

Runs on edge ops, before etc-cpu-edge-to-torch. A 3x3 convolution of stride and dilation 1
computes each 2x2 block of outputs from a 4x4 block of inputs with 36 multiplies per
(input, output) channel pair; Winograd's minimal filtering F(2x2, 3x3) does it with 16, as

    Y = A^T [ (G g G^T) * (B^T d B) ] A        (* elementwise over the 4x4 tile)

where g is a 3x3 filter and d a 4x4 input tile (tiles overlap by 2). Over channels the
elementwise products become 16 matrix products: U[xi] (out x in, the transformed filter,
computed here once from the weight's data) times V[xi] (in x tiles, the transformed input).
So the convolution becomes, in edge ops the rest of the pipeline already compiles well:

    pad           the input to whole tiles (the convolution's padding plus the odd edge)
    input transform   B^T d B: additions of stride-2 slices, first along rows then columns
                      (16 maps of [N, C, TH, TW]), stacked into V [16, C, N*TH*TW]
    bmm           U [16, O, C] x V -> M [16, O, N*TH*TW]   (a batched GEMM kernel)
    output transform  A^T m A: additions of M's 16 planes, interleaved into [N, O, 2TH, 2TW],
                      cropped to the output, plus the bias

The result is the same convolution in exact arithmetic; in float32 it rounds differently
(measured against eager on random ResNet-sized layers: within 2.5e-6, where the direct
kernel's im2col GEMM is within 1.1e-5 of eager's own direct convolution).

Which convolutions: F(2x2, 3x3) trades 2.25x fewer multiplies for the two transforms, whose cost
grows with the channels (C + O) where the saving grows with their product: it pays when
C*O/(C+O) >= `min-channels` over at least `min-tiles` tiles, both from the target's ISA row
(isa.py, where the measurements are; AVX-512: 32, i.e. 64 in and 64 out, over 49 tiles, a
14x14 map). Measured on this machine (AMD EPYC Zen 5, one thread, conv + bias + ReLU, against
the direct GEMM kernel and ExecuTorch+XNNPACK in one process): 64@56 0.82x the direct kernel's
time (0.87x XNNPACK's), 128@28 0.69x (0.75x), 256@14 0.71x (0.76x), 256@28 0.58x, 512@14
0.64x; not taken: 32@56 1.05x, 16@112 1.40x; 25 tiles (a 10x10 map) 1.28-1.46x: the bmm's
columns are the tiles, and under half a GEMM panel they fill under half its FMAs. Each
candidate convolution (3x3, stride 1, dilation 1, one group, float32, static shapes, a constant
weight) gets a decision of kind `convolution`: `winograd`, or `direct` with the reason.

The transformed filter is stored in the program in place of the weight: 16/9 of its bytes.
A target without vector units (ISA row `scalar`: `min-tiles=0`) never takes it: the GEMM would
be loops, and a Cortex-M would pay the transforms' scratch memory (4x the input and output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from etc.passes.constant_table import ConstantTable
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import EDGE_CONVOLUTION, spatial_pairs, static_shape, walk

# G (4x3): the filter transform, U = G g G^T.
FILTER_TRANSFORM = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# B^T (4x4) as sums of two inputs: row i of B^T d is d[a] + sign * d[b].
INPUT_TRANSFORM = ((0, 2, -1), (1, 2, 1), (2, 1, -1), (1, 3, -1))
# A^T (2x4) as sums of three inputs: row i of A^T m is m[a] + s1 * m[b] + s2 * m[c].
OUTPUT_TRANSFORM = ((0, 1, 1, 2, 1), (1, 2, -1, 3, -1))
TILE, OUT = 4, 2  # input tile and output block edge


def transformed_filter(weight: np.ndarray) -> np.ndarray:
    """U [16, O, C] (index xi*4 + nu) = G g G^T for every filter g = weight[o, c] (3x3), in float64
    then rounded once to float32."""
    g = FILTER_TRANSFORM
    u = np.einsum("xa,ocab,yb->xyoc", g, weight.astype(np.float64), g)
    return u.reshape(TILE * TILE, weight.shape[0], weight.shape[1]).astype(np.float32)


@dataclass(frozen=True)
class Tiling:
    """A convolution's output in 2x2 tiles: `th` x `tw` of them cover its `oh` x `ow` outputs
    (the last row and column of tiles cropped when odd); `padding` its (top/bottom, left/right)."""

    th: int
    tw: int
    oh: int
    ow: int
    padding: tuple


def plan(x_shape, w_shape, args: dict, min_channels: int, min_tiles: int) -> "Tiling | str | None":
    """The tiling of a convolution Winograd takes, the reason (a str) for a candidate it does not,
    None for a convolution that is not a candidate (not a 3x3 of stride and dilation 1, one group)."""
    stride, dilation, padding = spatial_pairs(args, "stride", "dilation", "padding")
    if (args["transposed"] or w_shape is None or len(w_shape) != 4 or tuple(w_shape[2:]) != (3, 3)
            or stride != [1, 1] or dilation != [1, 1] or int(args["groups"]) != 1):
        return None
    if x_shape is None:
        return "dynamic input shape"
    o, c = w_shape[0], w_shape[1]
    oh, ow = x_shape[2] + 2 * padding[0] - 2, x_shape[3] + 2 * padding[1] - 2
    th, tw = -(-oh // OUT), -(-ow // OUT)
    if o * c < min_channels * (o + c):
        return (f"{c} -> {o} channels: the transforms cost more than the multiplies saved "
                f"(C*O/(C+O) = {o * c / (o + c):.0f} < {min_channels})")
    if x_shape[0] * th * tw < min_tiles:
        return f"{x_shape[0] * th * tw} output tiles of 2x2 (fewer than {min_tiles}): the batched GEMM is too narrow"
    return Tiling(th, tw, oh, ow, tuple(padding))


class _Builder:
    """Edge ops at the current insertion point, each result typed from its operands."""

    def __init__(self, element):
        from etc.dialects.aten import build_op
        from etc.dialects.edge import OPS

        self._build = lambda name, args, shape: build_op(
            name, args, [ir.RankedTensorType.get(shape, element)], dialect_ops=OPS).results[0]

    @staticmethod
    def shape(value) -> list:
        return list(ir.RankedTensorType(value.type).shape)

    def slice(self, value, dim: int, start: int, count: int, step: int):
        shape = self.shape(value)
        shape[dim] = count
        return self._build("aten::slice.Tensor", {"self": value, "dim": dim, "start": start,
                                                  "end": start + step * (count - 1) + 1, "step": step}, shape)

    def combine(self, a, b, sign: int):
        name = "aten::add.Tensor" if sign > 0 else "aten::sub.Tensor"
        return self._build(name, {"self": a, "other": b, "alpha": 1}, self.shape(a))

    def stack(self, values: list, dim: int):
        dim = dim % (len(self.shape(values[0])) + 1)
        parts = []
        for v in values:
            shape = self.shape(v)
            shape.insert(dim, 1)
            parts.append(self._build("aten::unsqueeze", {"self": v, "dim": dim}, shape))
        shape = self.shape(parts[0])
        shape[dim] = len(parts)
        return self._build("aten::cat", {"tensors": parts, "dim": dim}, shape)

    def view(self, value, shape: list):
        return self._build("aten::view", {"self": value, "size": shape}, shape)

    def permute(self, value, dims: list):
        shape = self.shape(value)
        return self._build("aten::permute", {"self": value, "dims": dims}, [shape[d] for d in dims])

    def select(self, value, dim: int, index: int):
        shape = self.shape(value)
        del shape[dim]
        return self._build("aten::select.int", {"self": value, "dim": dim, "index": index}, shape)

    def pad(self, value, pads: list):
        """pads = [left, right, top, bottom] of the last two dimensions (constant_pad_nd's order)."""
        shape = self.shape(value)
        shape[-1] += pads[0] + pads[1]
        shape[-2] += pads[2] + pads[3]
        return self._build("aten::constant_pad_nd", {"self": value, "pad": pads, "value": 0.0}, shape)

    def bmm(self, a, b):
        return self._build("aten::bmm", {"self": a, "mat2": b}, [*self.shape(a)[:2], self.shape(b)[2]])


def _transform_1d(e: _Builder, pick, rows) -> list:
    """Each row of a transform matrix (INPUT_TRANSFORM or OUTPUT_TRANSFORM) applied to the values
    `pick(i)` returns: a list of the combined values, one per row."""
    picked: dict = {}

    def once(i):
        if i not in picked:
            picked[i] = pick(i)
        return picked[i]

    out = []
    for row in rows:
        acc = once(row[0])
        for at in range(1, len(row), 2):
            acc = e.combine(acc, once(row[at]), row[at + 1])
        out.append(acc)
    return out


def winograd(e: _Builder, x, u, bias, tiling: Tiling):
    """The convolution of `x` [N, C, H, W] by the transformed filter `u` [16, O, C] (module docstring)."""
    n, c, h, w = e.shape(x)
    o = e.shape(u)[1]
    th, tw, oh, ow, padding = tiling.th, tiling.tw, tiling.oh, tiling.ow, tiling.padding
    pads = [padding[1], TILE + OUT * (tw - 1) - w - padding[1], padding[0], TILE + OUT * (th - 1) - h - padding[0]]
    xp = e.pad(x, pads) if any(pads) else x  # [N, C, 2TH + 2, 2TW + 2]
    rows = _transform_1d(e, lambda i: e.slice(xp, 2, i, th, OUT), INPUT_TRANSFORM)  # B^T d: [N, C, TH, W']
    planes = [plane for r in rows for plane in _transform_1d(e, lambda j: e.slice(r, 3, j, tw, OUT), INPUT_TRANSFORM)]
    v = e.stack(planes, 0)  # [16, N, C, TH, TW]
    if n > 1:
        v = e.permute(v, [0, 2, 1, 3, 4])
    m = e.bmm(u, e.view(v, [TILE * TILE, c, n * th * tw]))  # [16, O, N*TH*TW]
    # (images and tile rows as one dimension: a unit one in the middle trips up linalg's fusion)
    m = e.view(m, [TILE, TILE, o, n * th, tw])
    cols = _transform_1d(e, lambda i: e.select(m, 0, i), OUTPUT_TRANSFORM)  # A^T m: 2 x [4, O, N*TH, TW]
    blocks = [e.stack(_transform_1d(e, lambda j: e.select(col, 0, j), OUTPUT_TRANSFORM), -1) for col in cols]
    y = e.stack(blocks, 2)  # [O, N*TH, 2, TW, 2]
    if n > 1:
        y = e.permute(e.view(y, [o, n, OUT * th, OUT * tw]), [1, 0, 2, 3])
    else:
        y = e.view(y, [1, o, OUT * th, OUT * tw])
    if OUT * th != oh:
        y = e.slice(y, 2, 0, oh, 1)
    if OUT * tw != ow:
        y = e.slice(y, 3, 0, ow, 1)
    if bias is not None:
        y = e.combine(y, e.view(bias, [1, o, 1, 1]), 1)
    return y


@register_pass
class WinogradConvs(Pass):
    """Rewrite 3x3 stride-1 convolutions with enough channels as Winograd F(2x2, 3x3) (module docstring)."""

    name = "etc-cpu-winograd-convs"
    summary = "Compute 3x3 stride-1 convolutions as Winograd F(2x2,3x3): transforms around a batched GEMM"

    @dataclass
    class Options:
        min_channels: int = option(32, help="least C*O/(C+O) taken (the transforms' cost against the multiplies saved)")
        min_tiles: int = option(49, help="least number of 2x2 output tiles taken (the batched GEMM's columns); "
                                         "0: none taken (a target without vector units)")

    def run(self, op) -> None:
        if self.options.min_tiles <= 0:
            return
        table = ConstantTable(op)
        for conv in walk(op, (EDGE_CONVOLUTION,)):
            self._one(conv, table)

    def _one(self, conv, table: ConstantTable) -> None:
        from etc.dialects import decode_op

        args = decode_op(conv)
        x, weight, bias = args["input"], args["weight"], args.get("bias")
        x_shape, w_shape = static_shape(x), static_shape(weight)
        tiling = plan(x_shape, w_shape, args, self.options.min_channels, self.options.min_tiles)
        if tiling is None:
            return
        element = ir.RankedTensorType(weight.type).element_type
        data = table.of_value(weight)
        reason = tiling if isinstance(tiling, str) else _operand_reason(element, data, bias)
        if reason:
            decisions.record(conv, "convolution", "direct", reason)
            self.count("not taken")
            return
        with ir.InsertionPoint(conv), conv.location:
            u = table.load("winograd_filter", transformed_filter(np.asarray(data, np.float32)), element)
            y = winograd(_Builder(element), x, u, bias, tiling)
        decisions.record(conv, "convolution", "winograd", f"F(2x2,3x3) over {x_shape[0] * tiling.th * tiling.tw} "
                         f"tiles: {w_shape[1]} -> {w_shape[0]} channels")
        conv.results[0].replace_all_uses_with(y)
        conv.erase()
        self.count("taken")


def _operand_reason(element, data, bias) -> str:
    """Why a convolution the tiling takes still cannot be rewritten ("" when it can)."""
    if str(element) != "f32":
        return f"{element} elements (the transforms are float32)"
    if data is None:
        return "the weight is not a constant with data (its transform is computed when compiling)"
    if bias is not None and static_shape(bias) is None:
        return "dynamic bias shape"
    return ""
