"""What a window op is to the window kernel: depthwise convolutions and poolings, read as a `Window`.

`analyze` reads a static f32 NCHW `linalg.depthwise_conv_2d_nchw_chw`, `linalg.pooling_nchw_max`
or `linalg.pooling_nchw_sum` (the others are `NotTaken`, with the reason): its geometry, where
the accumulator starts (`Init`: the reduction's identity, a fill value, a per-channel bias, the
outs tensor), the input's `tensor.pad` it can fold (`fold_pad`), and the chain of single-use
elementwise consumers it can apply before the store (`fuse_consumers`, their extra operands
`Operand`s). Each padding and consumer is a decision recorded once the kernel is built.
`global_pool_source` finds the input of a pooling whose one window covers its whole plane.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.targets.cpu.ir_query import constant_index, indexing_maps, iterator_types, map_dims, static_f32_shape, \
    static_shape
from etc.targets.cpu.kernel_ir import element_of

TAKEN = {
    "linalg.depthwise_conv_2d_nchw_chw": "dw",
    "linalg.pooling_nchw_max": "max",
    "linalg.pooling_nchw_sum": "sum",
}
SEEN = (
    "linalg.depthwise_conv_1d_ncw_cw", "linalg.depthwise_conv_1d_nwc_wc", "linalg.depthwise_conv_1d_nwc_wcm",
    "linalg.depthwise_conv_2d_nhwc_hwc", "linalg.depthwise_conv_2d_nhwc_hwcm",
    "linalg.depthwise_conv_2d_nhwc_hwc_q", "linalg.depthwise_conv_2d_nhwc_hwcm_q",
    "linalg.depthwise_conv_3d_ncdhw_cdhw", "linalg.depthwise_conv_3d_ndhwc_dhwc",
    "linalg.pooling_nchw_min", "linalg.pooling_nhwc_max", "linalg.pooling_nhwc_min", "linalg.pooling_nhwc_sum",
    "linalg.pooling_nhwc_max_unsigned", "linalg.pooling_nhwc_min_unsigned",
    "linalg.pooling_ncw_max", "linalg.pooling_ncw_sum", "linalg.pooling_nwc_max", "linalg.pooling_nwc_min",
    "linalg.pooling_nwc_sum", "linalg.pooling_ndhwc_max", "linalg.pooling_ndhwc_min", "linalg.pooling_ndhwc_sum",
)
IDENTITY = {"dw": 0.0, "max": float("-inf"), "sum": 0.0}
# The max pool on int8 (a quantized model's: ResNet's stem keeps int8 through it): its identity,
# the type's least value, pads and starts it.
I8_MAX_IDENTITY = -128


def identity(kind: str, element: str):
    """The value a window of `kind` over `element` pads with and starts from."""
    return I8_MAX_IDENTITY if element == "i8" else IDENTITY[kind]


def static_shape_of(value, element: str) -> list | None:
    """The shape of a statically shaped tensor of `element` ("f32", "i8"), else None."""
    shape = static_shape(value)
    return shape if shape is not None and element_of(value.type) == element else None


ELEMENTWISE_DIALECTS = ("arith.", "math.")


class NotTaken(Exception):
    """Why a window op stays with the default loops (the text goes into `etc.cpu.path`)."""




def pair_attribute(op, name: str) -> list[int]:
    if name not in op.attributes:
        return [1, 1]
    return [int(v) for v in ir.DenseIntElementsAttr(op.attributes[name])]




def _all_parallel(op, rank: int) -> bool:
    its = iterator_types(op)
    return len(its) == rank and all(it == "parallel" for it in its)


def _float_constant(value) -> float | None:
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.FloatAttr) or isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    return None


@dataclass
class Init:
    """Where the accumulator starts: `identity` (the first tap), `scalar` (an f32 value),
    `chan` (a tensor<C> broadcast along n, h, w) or `tensor` (the outs tensor itself)."""

    kind: str
    value: object = None
    producer: object = None  # the fill/broadcast op, erased when the kernel replaced its only user


@dataclass
class Operand:
    """An extra operand of a fused consumer: `full` (same shape as the output, read per block),
    `chan` (tensor<C>), `rank0` (tensor<>) or `scalar` (an SSA scalar captured by a body)."""

    kind: str
    value: object


@dataclass(kw_only=True)
class SlidingWindow:
    """What the window and grouped kernels share: an op whose output pixel (oh, ow) reads input
    rows oh*sh + i*dh and columns ow*sw + j*dw for i < kh, j < kw (x already padded unless a pad
    is folded), where its accumulator starts, and what `fuse_consumers` found after it."""

    op: object
    x: object
    w: object  # the filter (None for a pooling)
    init: Init
    n: int
    h: int
    wd: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    oh: int
    ow: int
    chain: list = field(default_factory=list)  # fused elementwise consumers, in order
    # (op, kind, path, reason) about its padding and consumers, recorded once the kernel is built
    decisions: list = field(default_factory=list)
    operands: list = field(default_factory=list)  # Operand list (function arguments after x, w, init)


@dataclass(kw_only=True)
class Window(SlidingWindow):
    """A depthwise convolution (`dw`) or a pooling (`max`, `sum`) over `c` channels."""

    kind: str
    c: int
    element: str = "f32"  # or "i8": a max pool on int8 (no fused consumers)
    ph: int = 0  # low padding (rows, columns) of a tensor.pad folded into the kernel: x is its source
    pw: int = 0
    pad_op: object = None


def classify_init(value, kind: str, c: int) -> Init:
    producer = defining_op(value)
    if producer is not None:
        name = producer.name
        if name == "linalg.fill":
            scalar = producer.operands[0]
            if isinstance(scalar.type, ir.IntegerType):  # an int8 max pool's: its identity, else read as given
                if kind == "max" and constant_index(scalar) == identity(kind, "i8"):
                    return Init("identity", producer=producer)
                return Init("tensor", value)
            if isinstance(scalar.type, ir.F32Type):
                constant = _float_constant(scalar)
                if constant is not None and constant == IDENTITY[kind] and \
                        (math.copysign(1, constant) == math.copysign(1, IDENTITY[kind])):
                    return Init("identity", producer=producer)
                return Init("scalar", scalar, producer)
        if name == "linalg.broadcast":
            src = producer.operands[0]
            dims = [int(d) for d in ir.DenseI64ArrayAttr(producer.attributes["dimensions"])]
            if dims == [0, 2, 3] and static_f32_shape(src) == [c]:
                return Init("chan", src, producer)
        if name == "linalg.generic" and len(producer.results) == 1 and len(producer.operands) == 2 \
                and _all_parallel(producer, 4):
            maps = indexing_maps(producer)
            block = producer.regions[0].blocks[0]
            body = list(block.operations)
            if map_dims(maps[0]) == [1] and static_f32_shape(producer.operands[0]) == [c] and len(body) == 1 \
                    and body[0].operands[0] == block.arguments[0] and map_dims(maps[1]) == [0, 1, 2, 3]:
                return Init("chan", producer.operands[0], producer)
    return Init("tensor", value)


def uses_of(value) -> list:
    return [(u.owner, u.operand_number) for u in value.uses]


def _body_values(block) -> list:
    """The values a (flat) body defines: its block arguments and its ops' results."""
    values = list(block.arguments)
    for inner in block.operations:
        values += list(inner.results)
    return values


VIEWS = ("tensor.extract_slice", "tensor.insert_slice", "tensor.collapse_shape", "tensor.expand_shape")


def behind_views(value, name: str):
    """(op, view op name) when `value` is an op `name` seen through a chain of reshapes and
    slices (which hide it from the pattern that would fold it), else None."""
    owner, via = defining_op(value), None
    while owner is not None and owner.name in VIEWS:
        via = via or owner.name
        owner = defining_op(owner.operands[0])
    return (owner, via) if owner is not None and owner.name == name and via else None


def ahead_of_views(value, name: str):
    """(op, view op name) when `value`'s single user, seen through single-use reshapes and
    slices, is an op `name`, else None."""
    via = None
    while True:
        uses = uses_of(value)
        if len(uses) != 1:
            return None
        user, number = uses[0]
        if user.name in VIEWS and number == 0:
            via = via or user.name
            value = user.results[0]
            continue
        return (user, via) if user.name == name and via else None


class NotFused(Exception):
    """Why the elementwise consumer of a window op stays a pass of its own (a decision's reason)."""


def fusable_consumer(value, shape, block_of_root):
    """The elementwise `linalg.generic` that is `value`'s only user, with its extra operands;
    None when `value` has no such candidate (several users, or a user that is not a generic);
    NotFused with the reason when the candidate cannot be applied before the store. It must be
    all-parallel over the output's dims (4, or 5 for a grouped convolution's [N, G, F/G, H, W]),
    read `value` once with the identity map, not read its outs argument, and have a body of
    arith/math ops on scalars."""
    uses = uses_of(value)
    if len(uses) != 1:
        return None
    user, number = uses[0]
    if user.name != "linalg.generic" or len(user.results) != 1:
        return None
    iterators = [str(a) for a in ir.ArrayAttr(user.attributes["iterator_types"])]
    if any("reduction" in it for it in iterators):
        return None  # a reduction (a global pool): an op of its own, with its own decision
    rank = len(shape)  # 4 (NCHW), or 5 for a grouped convolution's [N, G, F/G, H, W]
    if not _all_parallel(user, rank):
        raise NotFused(f"elementwise over {len(iterators)} dims, not the output's {rank}")
    if user.operation.block != block_of_root:
        raise NotFused("in another block than the window op")
    n_in = len(user.operands) - 1
    if number >= n_in:
        raise NotFused("reads the window's result as its destination")
    if static_f32_shape(user.results[0]) != shape:
        raise NotFused("its result is not the window's static f32 shape")
    maps = indexing_maps(user)
    identity = list(range(rank))
    channel_dims = [1] if rank == 4 else [1, 2]  # the channel, or the (group, channel in group) pair
    if map_dims(maps[-1]) != identity or map_dims(maps[number]) != identity:
        raise NotFused("reads or writes the window's result through a permutation or broadcast")
    block = user.regions[0].blocks[0]
    if len(list(block.arguments[n_in].uses)) != 0:
        raise NotFused("reads its destination")
    extras = {}
    for i in range(n_in):
        if i == number:
            continue
        operand, dims = user.operands[i], map_dims(maps[i])
        t = operand.type
        if not isinstance(t, ir.RankedTensorType) or not isinstance(t.element_type, ir.F32Type) or dims is None:
            raise NotFused(f"operand {i} is not an f32 tensor read by a projection")
        if operand == value:
            raise NotFused("reads the window's result twice")
        if dims == identity and static_f32_shape(operand) == shape:
            extras[i] = Operand("full", operand)
        elif dims == channel_dims and static_f32_shape(operand) == [shape[d] for d in channel_dims]:
            extras[i] = Operand("chan", operand)
        elif dims == [] and list(t.shape) == []:
            extras[i] = Operand("rank0", operand)
        else:
            raise NotFused(f"operand {i} is neither the output's shape, per channel, nor a scalar tensor")
    body = list(block.operations)
    if len(body[-1].operands) != 1 or not isinstance(body[-1].operands[0].type, ir.F32Type):
        raise NotFused("does not yield one f32")
    for inner in body[:-1]:
        name = inner.operation.name
        if not name.startswith(ELEMENTWISE_DIALECTS) or len(inner.regions) or len(inner.results) != 1:
            raise NotFused(f"its body has {name}, not scalar arith/math")
        for v in list(inner.operands) + list(inner.results):
            if not (isinstance(v.type, ir.FloatType) or isinstance(v.type, ir.IntegerType)):
                raise NotFused(f"its body computes on {v.type}, not scalars")
    inside = _body_values(block)
    for inner in body:
        for v in inner.operands:
            if not any(v == known for known in inside):
                extras[("captured", len(extras))] = Operand("scalar", v)
                inside.append(v)
    return user, number, extras




def analyze(op, *, max_stride: int, fold_pads: bool = True, fuse: bool = True) -> Window:
    """The `Window` of `op`, or NotTaken with the reason."""
    if op.name not in TAKEN:
        layout = "NHWC" if "nhwc" in op.name or "nwc" in op.name else "not 2-D NCHW"
        raise NotTaken(f"{op.name.split('.', 1)[1]}: {layout} window ops are not handled")
    kind = TAKEN[op.name]
    if len(op.results) != 1:
        raise NotTaken("a window op on buffers (no tensor result)")
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    element = "i8" if kind == "max" and element_of(x.type) == "i8" else "f32"
    xs, ys = static_shape_of(x, element), static_shape_of(op.results[0], element)
    if xs is None or ys is None or static_shape_of(init, element) is None:
        raise NotTaken("not static f32 tensors (or an int8 max pool)")
    if kind == "dw":
        ws = static_f32_shape(w)
        if ws is None or len(ws) != 3:
            raise NotTaken("weights are not a static f32 tensor<CxKHxKW>")
        kh, kw = ws[1], ws[2]
    else:
        kt = w.type
        kh, kw = list(ir.ShapedType(kt).shape)
    sh, sw = pair_attribute(op, "strides")
    dh, dw = pair_attribute(op, "dilations")
    n, c, h, wd = xs
    _, _, oh, ow = ys
    if sw > max_stride:
        raise NotTaken(f"column stride {sw} > max-stride {max_stride}")
    if min(oh, ow, kh, kw) < 1:
        raise NotTaken("empty output or window")
    win = Window(op=op, kind=kind, x=x, w=w if kind == "dw" else None, init=classify_init(init, kind, c),
                 n=n, c=c, h=h, wd=wd, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, oh=oh, ow=ow, element=element)
    if fold_pads:
        fold_pad(win)
    if fuse and element == "f32":  # an int8 result's consumers (a requantize, a dequantize) stay passes
        fuse_consumers(win, ys)
    return win


def fold_pad(win: Window) -> None:
    """Read the source of a `tensor.pad` (spatial, static, padding with the reduction's
    identity: 0 for sums and convolutions, -inf for max) instead of a padded copy: taps on
    padding rows are skipped, loads across a row's ends are masked or shifted in registers.
    A pad it cannot fold is a decision (`padding -> copy` with the reason): the copy costs a
    pass over the activation, as much as the window op itself."""
    pad = defining_op(win.x)
    if pad is None or pad.name != "tensor.pad":
        hidden = behind_views(win.x, "tensor.pad")
        if hidden is not None:
            win.decisions.append((hidden[0], "padding", "copy", f"reaches the window through {hidden[1]}"))
        return
    reason = unfoldable_padding(win, pad)
    if reason:
        win.decisions.append((pad, "padding", "copy", reason))
        return
    source = static_shape(pad.operands[0])
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    win.x, win.pad_op = pad.operands[0], pad
    win.h, win.wd = source[2], source[3]
    win.ph, win.pw = low[2], low[3]
    win.decisions.append((pad, "padding", "fused", ""))


def unfoldable_padding(win: Window, pad) -> str:
    """Why the window kernel cannot read `pad`'s source instead of it ('' when it can)."""
    if len(pad.operands) != 1:
        return "dynamic padding amounts"
    low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(pad.attributes["static_high"]))
    if len(low) != 4 or low[:2] != [0, 0] or high[:2] != [0, 0] or min(low + high) < 0:
        return f"pads {low} low, {high} high: not only the spatial dims, or negative"
    yielded = list(pad.regions[0].blocks[0].operations)[-1].operands
    read = _float_constant if win.element == "f32" else constant_index
    value = read(yielded[0]) if len(yielded) == 1 else None
    if value is None:
        return "the padding value is not a constant"
    want = identity(win.kind, win.element)
    if value != want:
        return f"pads with {value}, not the {win.kind} window's identity {want}"
    if static_shape_of(pad.operands[0], win.element) is None:
        return "the padded tensor is not static"
    return ""


def fuse_consumers(win: SlidingWindow, shape: list) -> None:
    """Fuse the chain of single-use elementwise consumers of the window's result (`fusable_consumer`)."""
    value = win.op.results[0]
    block = win.op.operation.block
    index = {}
    while True:
        try:
            found = fusable_consumer(value, shape, block)
        except NotFused as reason:
            win.decisions.append((uses_of(value)[0][0], "epilogue", "second-pass", str(reason)))
            break
        if found is None:
            hidden = ahead_of_views(value, "linalg.generic")
            if hidden is not None:
                win.decisions.append((hidden[0], "epilogue", "second-pass",
                                      f"reads the window's result through {hidden[1]}"))
            break
        win.decisions.append((found[0], "epilogue", "fused", ""))
        user, number, extras = found
        for key, operand in extras.items():
            ident = (operand.kind, operand.value)
            if ident not in index:
                index[ident] = len(win.operands)
                win.operands.append(operand)
            operand.index = index[ident]
        win.chain.append(found)
        value = user.results[0]



def describe(win: Window) -> str:
    """One line about the kernel (`etc.cpu.window` on its outer loop)."""
    what = {"dw": "depthwise", "max": "max pool", "sum": "sum pool"}[win.kind]
    text = f"{what} {win.kh}x{win.kw} stride {win.sh}x{win.sw}"
    if (win.dh, win.dw) != (1, 1):
        text += f" dilation {win.dh}x{win.dw}"
    text += f" on {win.n}x{win.c}x{win.h}x{win.wd}"
    if win.pad_op is not None:
        text += f" padded {win.ph},{win.pw}"
    text += f" -> {win.oh}x{win.ow}"
    if win.chain:
        text += f", {len(win.chain)} consumer(s) fused"
    return text


def global_pool_source(op, kind: str):
    """The tensor a one-window pooling really reduces: its input, or, when that input is a
    `tensor.pad` adding only high-side rows and columns of the reduction's identity (0 for a
    sum, -inf for a max: what torch-mlir makes of `ceil_mode` with a window larger than the
    plane, as EfficientNet's `AvgPool2d(1280, ceil_mode=True)` over 7x7), the pad's source."""
    
    x = op.operands[0]
    producer = defining_op(x)
    if producer is not None and producer.name == "tensor.insert_slice" and len(producer.operands) == 2:
        # canonicalization drops the unit batch dim: pad [C, H, W], inserted whole into [1, C, H', W']
        dest = defining_op(producer.operands[1])
        sizes = list(ir.DenseI64ArrayAttr(producer.attributes["static_sizes"]))
        if dest is not None and dest.name == "tensor.empty" and sizes == static_f32_shape(x) and \
                not any(ir.DenseI64ArrayAttr(producer.attributes["static_offsets"])):
            producer = defining_op(producer.operands[0])
    if producer is None or producer.name != "tensor.pad" or len(producer.operands) != 1:
        return x
    low = list(ir.DenseI64ArrayAttr(producer.attributes["static_low"]))
    high = list(ir.DenseI64ArrayAttr(producer.attributes["static_high"]))
    if any(low) or any(high[:-2]):
        return x
    yields = [o for o in producer.regions[0].blocks[0].operations if o.operation.name == "tensor.yield"]
    value = yields[0].operands[0].owner if yields else None
    if value is None or isinstance(value, ir.Block) or value.name != "arith.constant":
        return x
    pad = float(ir.FloatAttr(value.attributes["value"]).value)
    return producer.operands[0] if pad == IDENTITY["max" if kind == "max" else "sum"] else x
