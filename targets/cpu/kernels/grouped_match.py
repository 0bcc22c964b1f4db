"""What a grouped convolution is to the grouped kernel: `linalg.conv_2d_ngchw_gfchw` read as a `Grouped`.

torch-mlir lowers `nn.Conv2d(groups=G)` (1 < G < channels: RegNet's group width 8, ResNeXt's
32 groups, ShuffleNet's grouped 1x1s) to this op on 5-D views: the (padded) input expanded to
[N, G, C/G, H, W], the filter to [G, F/G, C/G, KH, KW], the init (a bias broadcast, a fill) to
[N, G, F/G, OH, OW], the result collapsed back to [N, F, OH, OW]; etc-cpu-fuse-elementwise
moves those reshapes outward, so the bias broadcast and the elementwise consumers (BN folded
into scale and shift, the activation, a residual add) are 5-D generics on the op's own
tensors. `analyze` reads the geometry, where the accumulator starts (`classify_init`: the
reduction's identity, a fill, a per-channel bias, the outs tensor), the chain of single-use
elementwise consumers it can apply before the store (`window_match.fuse_consumers`), and the
register block: `block_channels` output channels of one group share every input vector they read.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.targets.cpu.ir_query import indexing_maps, iterator_types, map_dims, static_f32_shape
from etc.targets.cpu.kernels.window_match import Init, NotTaken, SlidingWindow, fuse_consumers, pair_attribute
from etc.targets.cpu.kernels.window_match import classify_init as classify_window_init

OP_NAME = "linalg.conv_2d_ngchw_gfchw"


@dataclass(kw_only=True)
class Grouped(SlidingWindow):
    """One grouped convolution: y[n, g*fg + f, oh, ow] = init + sum over c < cg, kh, kw of
    w[g, f, c, kh, kw] * x[n, g, c, oh*sh + kh*dh, ow*sw + kw*dw] (x already padded); x is
    [n, groups, cg, h, w], w [groups, fg, cg, kh, kw]."""

    groups: int
    cg: int  # input channels per group
    fg: int  # output channels per group
    block: int = 1  # output channels per register block (`register_block`)
    lanes: int = 1  # the vector width
    vectors: int = 1  # column vectors per block
    rows: int = 1  # output rows per block

    @property
    def channels(self) -> int:
        return self.groups * self.fg


def _channel_vector(value, groups: int, fg: int):
    """The per-channel tensor a 5-D init broadcasts: [G, F/G] read at (d1, d2) by a copying
    generic (fusion's form of the bias broadcast) or a `linalg.broadcast` over (n, h, w); else None."""
    producer = defining_op(value)
    if producer is None:
        return None
    if producer.name == "linalg.broadcast":
        dims = [int(d) for d in ir.DenseI64ArrayAttr(producer.attributes["dimensions"])]
        src = producer.operands[0]
        return src if dims == [0, 3, 4] and static_f32_shape(src) == [groups, fg] else None
    if producer.name != "linalg.generic" or len(producer.operands) != 2 or len(producer.results) != 1:
        return None
    if iterator_types(producer) != ["parallel"] * 5:
        return None
    block = producer.regions[0].blocks[0]
    body = list(block.operations)
    maps = indexing_maps(producer)
    src = producer.operands[0]
    if len(body) == 1 and body[0].operands[0] == block.arguments[0] and map_dims(maps[0]) == [1, 2] \
            and map_dims(maps[1]) == [0, 1, 2, 3, 4] and static_f32_shape(src) == [groups, fg]:
        return src
    return None


def classify_init(value, groups: int, fg: int) -> Init:
    """Where the accumulator starts: the identity or a scalar (a `linalg.fill`), `chan` (a
    [G, F/G] bias broadcast), else the 5-D outs tensor itself."""
    producer = defining_op(value)
    if producer is not None and producer.name == "linalg.fill":
        return classify_window_init(value, "dw", groups * fg)
    chan = _channel_vector(value, groups, fg)
    if chan is not None:
        return Init("chan", chan, producer)
    return Init("tensor", value)


def block_channels(fg: int, most: int) -> int:
    """Output channels per register block: the largest divisor of the group's `fg` up to `most`."""
    return max(d for d in range(1, min(fg, most) + 1) if fg % d == 0)


def register_block(fg: int, oh: int, ow: int, lanes: int, channels: int, accumulators: int,
                   short_rows: int = 2) -> tuple[int, int, int, int]:
    """(channels per block, vector width, column vectors per row, output rows per block): up to
    `accumulators` vectors in registers. Every input vector loaded feeds all the block's
    channels, every weight broadcast all the block's vectors. A row takes ceil(ow / width)
    vectors, its last one masked (a 28-wide row of 16 lanes: 2): `channels` of a group and as
    many of the row's vectors as fit. A row of one vector (a 7x7 or 14x14 plane) stacks
    `short_rows` output rows instead, so each weight still feeds several vectors; where the
    group has more channels than that leaves room for, the rest are further blocks.
    Measured against the rule before (more channels x one vector where a row had room for one
    whole vector), in one process, one thread, against XNNPACK (bench/layers.py gconv rows):
    ResNeXt's 32x8 at 28 0.45x -> 0.34x, 4x64 at 28 1.07x -> 0.89x, ShuffleNet's 80-wide 1x1 at
    28 0.81x -> 0.58x, RegNetY's 208c14 0.49x -> 0.34x, 32x32 at 7 1.81x -> 1.35x; none of the
    12 rows slower. Three stacked rows measured alike, four spill."""
    width = min(lanes, 1 << (ow - 1).bit_length())
    per_row = -(-ow // width)
    rows = min(short_rows, oh) if per_row == 1 else 1
    block = block_channels(fg, max(channels, accumulators // (per_row * rows)))
    return block, width, max(1, min(accumulators // (block * rows), per_row)), rows


def analyze(op, lanes: int, fuse: bool = True, channels: int = 8, accumulators: int = 16) -> Grouped:
    """The `Grouped` of `op`, or NotTaken with the reason."""
    if len(op.results) != 1:
        raise NotTaken("a grouped convolution on buffers (no tensor result)")
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    xs, ws, ys = static_f32_shape(x), static_f32_shape(w), static_f32_shape(op.results[0])
    if xs is None or ws is None or ys is None or static_f32_shape(init) is None:
        raise NotTaken("not static f32 tensors")
    n, groups, cg, h, wd = xs
    g2, fg, cg2, kh, kw = ws
    _, _, _, oh, ow = ys
    if (g2, cg2) != (groups, cg):
        raise NotTaken(f"filter {ws} does not match the input's {groups} groups of {cg}")
    if min(n, oh, ow, kh, kw, cg, fg) < 1:
        raise NotTaken("empty output, window or group")
    sh, sw = pair_attribute(op, "strides")
    dh, dw = pair_attribute(op, "dilations")
    gc = Grouped(op=op, x=x, w=w, init=classify_init(init, groups, fg), n=n, groups=groups, cg=cg, fg=fg, h=h, wd=wd,
                 kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, oh=oh, ow=ow)
    gc.block, gc.lanes, gc.vectors, gc.rows = register_block(fg, oh, ow, lanes, channels, accumulators)
    if fuse:
        fuse_consumers(gc, ys)  # reads gc.op, fills gc.chain, gc.decisions, gc.operands
    return gc


def describe(gc: Grouped) -> str:
    """One line about the kernel (`etc.cpu.grouped` on its outer loop)."""
    text = (f"grouped {gc.kh}x{gc.kw} stride {gc.sh}x{gc.sw}"
            + (f" dilation {gc.dh}x{gc.dw}" if (gc.dh, gc.dw) != (1, 1) else "")
            + f" {gc.groups} groups of {gc.cg}->{gc.fg} on {gc.n}x{gc.groups * gc.cg}x{gc.h}x{gc.wd}"
            + f" -> {gc.oh}x{gc.ow}, {gc.block} channels x {gc.rows} row(s) x {gc.vectors} vector(s) of {gc.lanes}"
            + " per block")
    if gc.chain:
        text += f", {len(gc.chain)} consumer(s) fused"
    return text
