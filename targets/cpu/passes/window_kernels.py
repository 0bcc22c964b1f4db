"""etc-cpu-window-kernels: depthwise convolutions and poolings as register-blocked vector kernels.

Runs on linalg on tensors (what torch-mlir produces, before or after
`linalg-fuse-elementwise-ops`): every static f32 `linalg.depthwise_conv_2d_nchw_chw`,
`linalg.pooling_nchw_max` and `linalg.pooling_nchw_sum` becomes a loop nest over (n, channels,
output rows, output column blocks) whose body is straight-line vector code:

  * vectors run along the output row (`lanes` f32 lanes; a last partial block uses the next
    power of two, its store masked when that is wider than what is left);
  * a column stride s reads s*lanes contiguous inputs and deinterleaves them with one
    `vector.shuffle` (LLVM: a two-source permute), never a gather; taps whose offsets are equal
    modulo s share the load (3x3 stride 2: two loads per kernel row, three shuffles);
  * the KH*KW taps are unrolled and `rows` output rows are computed per step, so an input row
    loaded once feeds every output row whose window covers it and the accumulators stay in
    registers; windows with more than `unroll-taps` taps (7x7) loop over the kernel rows
    instead, their weights read inside that loop (hoisted, 49 weight vectors spill);
  * the input's `tensor.pad` (spatial, padding with the reduction's identity: 0, or -inf for
    max) is folded: the kernel reads the unpadded tensor, skips taps on padding rows in the
    static border rows, masks loads past a row's end (the transfer's padding value is the pad
    value) and shifts the first block's loads right in registers, the pad value in front;
  * the accumulator starts from the bias (a per-channel `linalg.broadcast` or broadcasting
    generic), a `linalg.fill` value, the outs tensor, or the first tap when the fill is the
    reduction's identity;
  * a chain of single-use elementwise consumers (BN folded to scale+shift, ReLU6, the divide of
    an average pool, a residual add) is applied to the accumulator before the one store.

The result is scf.for loops carrying the output tensor, `vector.transfer_read/write` on
tensors, `vector.shuffle`, `math.fma` and the consumers' arith/math ops on vectors: one-shot-
bufferize writes in place, `convert-vector-to-llvm` lowers the rest; the only temporary is the
output's `tensor.empty`. The channel loop carries `etc.thread_split` (channels are independent).

Every window op the pass sees is a decision: `etc.cpu.path = "window"` on the outer loop of a
kernel it built (with `etc.cpu.window` describing it), `"loops: <reason>"` on an op it left
alone, and the same in the module's `etc.cpu.decisions` (targets/cpu/decisions.py). So are the
input's `tensor.pad` (`padding -> fused`, or `copy` with the reason) and a single elementwise
consumer (`epilogue -> fused`, or `second-pass` with the reason): both cost a pass over the
activation when they stay outside the kernel. Not taken:
NHWC and 1-D/3-D window ops, min pooling, channel multipliers (not a depthwise_conv_2d_nchw_chw),
dynamic shapes, other element types, column strides above `max-stride`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from etc.passes.pass_api import Pass, option, register_pass

# op name -> kind, for the ops taken; the others are window ops reported as not taken.
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
THREAD_SPLIT = "etc.thread_split"  # the loop a threaded entry splits across its threads (parallel.py)
IDENTITY = {"dw": 0.0, "max": float("-inf"), "sum": 0.0}
ELEMENTWISE_DIALECTS = ("arith.", "math.")


class NotTaken(Exception):
    """Why a window op stays with the default loops (the text goes into `etc.cpu.path`)."""


# ------------------------------------------------------------------ analysis


def _ir():
    from torch_mlir import ir

    return ir


def _static_f32(value) -> list | None:
    ir = _ir()
    t = value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape or not isinstance(t.element_type, ir.F32Type):
        return None
    return list(t.shape)


def _pair(op, name: str) -> list[int]:
    ir = _ir()
    if name not in op.attributes:
        return [1, 1]
    return [int(v) for v in ir.DenseIntElementsAttr(op.attributes[name])]


def _maps(op) -> list:
    ir = _ir()
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _map_dims(amap) -> list[int] | None:
    ir = _ir()
    dims = []
    for expr in amap.results:
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(ir.AffineDimExpr(expr).position)
    return dims


def _all_parallel(op, rank: int) -> bool:
    ir = _ir()
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    return len(its) == rank and all("parallel" in it for it in its)


def _owner(value):
    """The op defining `value`, or None for a block argument."""
    ir = _ir()
    if isinstance(value.owner, ir.Block):
        return None
    return value.owner


def _float_constant(value) -> float | None:
    ir = _ir()
    owner = _owner(value)
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


@dataclass
class Window:
    op: object
    kind: str
    x: object
    w: object
    init: Init
    n: int
    c: int
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
    ph: int = 0  # low padding (rows, columns) of a tensor.pad folded into the kernel: x is its source
    pw: int = 0
    pad_op: object = None
    chain: list = field(default_factory=list)  # fused elementwise consumers, in order
    # (op, kind, path, reason) about its padding and consumers, recorded once the kernel is built
    decisions: list = field(default_factory=list)
    operands: list = field(default_factory=list)  # Operand list (function arguments after x, w, init)


def _classify_init(value, kind: str, c: int) -> Init:
    ir = _ir()
    producer = _owner(value)
    if producer is not None:
        name = producer.name
        if name == "linalg.fill":
            scalar = producer.operands[0]
            if isinstance(scalar.type, ir.F32Type):
                constant = _float_constant(scalar)
                if constant is not None and constant == IDENTITY[kind] and \
                        (math.copysign(1, constant) == math.copysign(1, IDENTITY[kind])):
                    return Init("identity", producer=producer)
                return Init("scalar", scalar, producer)
        if name == "linalg.broadcast":
            src = producer.operands[0]
            dims = [int(d) for d in ir.DenseI64ArrayAttr(producer.attributes["dimensions"])]
            if dims == [0, 2, 3] and _static_f32(src) == [c]:
                return Init("chan", src, producer)
        if name == "linalg.generic" and len(producer.results) == 1 and len(producer.operands) == 2 \
                and _all_parallel(producer, 4):
            maps = _maps(producer)
            block = producer.regions[0].blocks[0]
            body = list(block.operations)
            if _map_dims(maps[0]) == [1] and _static_f32(producer.operands[0]) == [c] and len(body) == 1 \
                    and body[0].operands[0] == block.arguments[0] and _map_dims(maps[1]) == [0, 1, 2, 3]:
                return Init("chan", producer.operands[0], producer)
    return Init("tensor", value)


def _uses(value) -> list:
    return [(u.owner, u.operand_number) for u in value.uses]


def _body_values(block) -> list:
    """The values a (flat) body defines: its block arguments and its ops' results."""
    values = list(block.arguments)
    for inner in block.operations:
        values += list(inner.results)
    return values


VIEWS = ("tensor.extract_slice", "tensor.insert_slice", "tensor.collapse_shape", "tensor.expand_shape")


def _behind_views(value, name: str):
    """(op, view op name) when `value` is an op `name` seen through a chain of reshapes and
    slices (which hide it from the pattern that would fold it), else None."""
    owner, via = _owner(value), None
    while owner is not None and owner.name in VIEWS:
        via = via or owner.name
        owner = _owner(owner.operands[0])
    return (owner, via) if owner is not None and owner.name == name and via else None


def _ahead_of_views(value, name: str):
    """(op, view op name) when `value`'s single user, seen through single-use reshapes and
    slices, is an op `name`, else None."""
    via = None
    while True:
        uses = _uses(value)
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


def _fusable_consumer(value, shape, block_of_root):
    """The elementwise `linalg.generic` that is `value`'s only user, with its extra operands;
    None when `value` has no such candidate (several users, or a user that is not a generic);
    NotFused with the reason when the candidate cannot be applied before the store. It must be
    all-parallel over the output's 4 dims, read `value` once with the identity map, not read its
    outs argument, and have a body of arith/math ops on scalars."""
    ir = _ir()
    uses = _uses(value)
    if len(uses) != 1:
        return None
    user, number = uses[0]
    if user.name != "linalg.generic" or len(user.results) != 1:
        return None
    iterators = [str(a) for a in ir.ArrayAttr(user.attributes["iterator_types"])]
    if any("reduction" in it for it in iterators):
        return None  # a reduction (a global pool): an op of its own, with its own decision
    if not _all_parallel(user, 4):
        raise NotFused(f"elementwise over {len(iterators)} dims, not the output's 4")
    if user.operation.block != block_of_root:
        raise NotFused("in another block than the window op")
    n_in = len(user.operands) - 1
    if number >= n_in:
        raise NotFused("reads the window's result as its destination")
    if _static_f32(user.results[0]) != shape:
        raise NotFused("its result is not the window's static f32 shape")
    maps = _maps(user)
    if _map_dims(maps[-1]) != [0, 1, 2, 3] or _map_dims(maps[number]) != [0, 1, 2, 3]:
        raise NotFused("reads or writes the window's result through a permutation or broadcast")
    block = user.regions[0].blocks[0]
    if len(list(block.arguments[n_in].uses)) != 0:
        raise NotFused("reads its destination")
    extras = {}
    for i in range(n_in):
        if i == number:
            continue
        operand, dims = user.operands[i], _map_dims(maps[i])
        t = operand.type
        if not isinstance(t, ir.RankedTensorType) or not isinstance(t.element_type, ir.F32Type) or dims is None:
            raise NotFused(f"operand {i} is not an f32 tensor read by a projection")
        if operand == value:
            raise NotFused("reads the window's result twice")
        if dims == [0, 1, 2, 3] and _static_f32(operand) == shape:
            extras[i] = Operand("full", operand)
        elif dims == [1] and _static_f32(operand) == [shape[1]]:
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


# ------------------------------------------------------------------ code generation


class _Text:
    def __init__(self):
        self.lines: list[str] = []
        self.counter = 0
        self.constants: dict = {}
        self.indent = 2

    def fresh(self, stem: str = "v") -> str:
        self.counter += 1
        return f"%{stem}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append(" " * self.indent + line)

    def index(self, value: int) -> str:
        if value not in self.constants:
            self.constants[value] = f"%c{value}".replace("-", "m")
        return self.constants[value]


def _vt(width: int, elem: str = "f32") -> str:
    return f"vector<{width}x{elem}>"


def _tt(shape: list) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _tap_offsets(win: Window) -> list:
    """(kw, base, phase) per column tap: the tap reads source columns ow*sw + base + phase + sw*i,
    from a load of sw*width inputs starting at ow*sw + base (taps with the same base share it)."""
    out = []
    for j in range(win.kw):
        o = j * win.dw - win.pw
        phase = o % win.sw
        out.append((j, o - phase, phase))
    return out


def _column_blocks(win: Window, lanes: int) -> tuple[int, int, list]:
    """Output column blocks: (first, last) block index of the loop over full blocks whose loads
    all start at or after column 0 and end inside the source row, and the static blocks
    [(start, width, write_in_bounds)] that come before and after it."""
    bases = [base for _, base, _ in _tap_offsets(win)]

    def loopable(start, width):
        return (width == lanes and start * win.sw + min(bases) >= 0
                and start * win.sw + max(bases) + width * win.sw <= win.wd)

    blocks = [(b * lanes, lanes, True) for b in range(win.ow // lanes)]
    rest = win.ow % lanes
    if rest:
        width = _next_pow2(rest)
        blocks.append((win.ow - rest, width, width == rest))
    good = [i for i, (start, width, _) in enumerate(blocks) if loopable(start, width)]
    if len(good) < 2:
        return 0, 0, blocks
    first, last = good[0], good[-1] + 1
    return first, last, blocks[:first] + blocks[last:]


def _interior_rows(win: Window) -> tuple[int, int]:
    """[lo, hi): the output rows whose every tap row lies inside the source (no padding rows)."""
    lo = -(-win.ph // win.sh)
    hi = (win.h - 1 + win.ph - (win.kh - 1) * win.dh) // win.sh + 1
    lo, hi = max(0, min(lo, win.oh)), max(0, min(hi, win.oh))
    return (lo, hi) if hi > lo else (0, 0)



def _scalar_elem(type_) -> str:
    """`f32` for f32 and for tensor<f32>."""
    ir = _ir()
    if isinstance(type_, ir.ShapedType):
        return str(ir.ShapedType(type_).element_type)
    return str(type_)


class _Kernel:
    """The text of one window kernel as a function, spliced in place of the op by the pass."""

    def __init__(self, win: Window, lanes: int, rows: int, unroll_taps: int = 1 << 30):
        self.win, self.lanes, self.rows = win, lanes, max(1, rows)
        self.unroll_taps = unroll_taps
        self.row_base = None  # inside a kernel-row loop: the first input row of this kernel row
        self.t = _Text()
        self.out_t = _tt([win.n, win.c, win.oh, win.ow])
        self.x_t = _tt([win.n, win.c, win.h, win.wd])

    # -- per-channel values, for one vector width
    def channel_values(self, widths: set) -> dict:
        t, win = self.t, self.win
        vals = {}
        for width in sorted(widths):
            if win.kind == "dw":
                for i in range(win.kh):
                    for j in range(win.kw):
                        key = ("w", i, j)
                        if key not in vals:
                            s = t.fresh("ws")
                            t.emit(f"{s} = tensor.extract %w[%ch, {t.index(i)}, {t.index(j)}] : {_tt([win.c, win.kh, win.kw])}")
                            vals[key] = s
                        v = t.fresh("wv")
                        t.emit(f"{v} = vector.broadcast {vals[key]} : f32 to {_vt(width)}")
                        vals[("w", i, j, width)] = v
            if win.init.kind == "chan":
                if "bias" not in vals:
                    s = t.fresh("bs")
                    t.emit(f"{s} = tensor.extract %init[%ch] : {_tt([win.c])}")
                    vals["bias"] = s
                v = t.fresh("bv")
                t.emit(f"{v} = vector.broadcast {vals['bias']} : f32 to {_vt(width)}")
                vals[("bias", width)] = v
            for k, operand in enumerate(win.operands):
                if operand.kind == "chan":
                    if ("e", k) not in vals:
                        s = t.fresh("es")
                        t.emit(f"{s} = tensor.extract %e{k}[%ch] : {_tt([win.c])}")
                        vals[("e", k)] = s
                    v = t.fresh("ev")
                    t.emit(f"{v} = vector.broadcast {vals[('e', k)]} : f32 to {_vt(width)}")
                    vals[("e", k, width)] = v
        return vals

    def global_values(self, widths: set) -> dict:
        t, win = self.t, self.win
        vals = {}
        for width in sorted(widths):
            if win.init.kind == "scalar":
                v = t.fresh("iv")
                t.emit(f"{v} = vector.broadcast %init : f32 to {_vt(width)}")
                vals[("init", width)] = v
            for k, operand in enumerate(win.operands):
                if operand.kind in ("rank0", "scalar"):
                    if ("e", k) not in vals:
                        if operand.kind == "rank0":
                            s = t.fresh("es")
                            t.emit(f"{s} = tensor.extract %e{k}[] : tensor<f32>")
                        else:
                            s = f"%e{k}"
                        vals[("e", k)] = s
                    elem = _scalar_elem(operand.value.type)
                    v = t.fresh("ev")
                    t.emit(f"{v} = vector.broadcast {vals[('e', k)]} : {elem} to {_vt(width, elem)}")
                    vals[("e", k, width)] = v
        return vals

    # -- one block of `nrows` output rows x `width` columns
    def block(self, out: str, oh: str, oh_value: int | None, ow: str, ow_value: int | None, nrows: int, width: int,
              write_ok: bool, chan: dict, glob: dict) -> str:
        """`oh`/`ow`: SSA index values; `*_value`: their value when static (border blocks, where
        taps on padding rows are skipped and loads crossing the row's ends are masked/shifted)."""
        t, win = self.t, self.win
        s = win.sw
        L = width * s
        ih0 = t.fresh("ih")
        t.emit(f"{ih0} = arith.muli {oh}, {t.index(win.sh)} : index")
        iw0 = t.fresh("iw")
        t.emit(f"{iw0} = arith.muli {ow}, {t.index(s)} : index")
        loads, taps = {}, {}
        offsets = {j: (base, phase) for j, base, phase in _tap_offsets(win)}

        def row_inside(d: int) -> bool:
            if oh_value is None:
                return True
            row = oh_value * win.sh + d - win.ph
            return 0 <= row < win.h

        def tap(d: int, j: int) -> str:
            if (d, j) in taps:
                return taps[(d, j)]
            base, phase = offsets[j]
            start = None if ow_value is None else ow_value * s + base
            if (d, base) not in loads:
                ih = t.fresh("r")
                t.emit(f"{ih} = arith.addi {self.row_base or ih0}, {t.index(d - win.ph)} : index")
                if start is not None and start < 0:
                    iw = t.index(0)
                    in_bounds = L <= win.wd
                else:
                    iw = t.fresh("q")
                    t.emit(f"{iw} = arith.addi {iw0}, {t.index(base)} : index")
                    in_bounds = start is None or start + L <= win.wd
                v = t.fresh("ld")
                t.emit(f"{v} = vector.transfer_read %x[%nn, %ch, {ih}, {iw}], %pad "
                       f"{{in_bounds = [{'true' if in_bounds else 'false'}]}} : {self.x_t}, {_vt(L)}")
                loads[(d, base)] = v
            v = loads[(d, base)]
            if start is not None and start < 0:  # the load starts at column 0: shift, padding in front
                lanes = [start + phase + s * i for i in range(width)]
                lanes = ", ".join(str(q) if q >= 0 else str(L) for q in lanes)
                sv = t.fresh("tp")
                t.emit(f"{sv} = vector.shuffle {v}, {glob[('padv', L)]} [{lanes}] : {_vt(L)}, {_vt(L)}")
                v = sv
            elif s > 1:
                lanes = ", ".join(str(phase + s * i) for i in range(width))
                sv = t.fresh("tp")
                t.emit(f"{sv} = vector.shuffle {v}, {v} [{lanes}] : {_vt(L)}, {_vt(L)}")
                v = sv
            taps[(d, j)] = v
            return v

        vt = _vt(width)
        if oh_value is None and win.kh > 1 and win.kh * win.kw > self.unroll_taps:
            return self.block_kh_loop(out, oh, ow, nrows, width, write_ok, chan, glob, ih0, tap, loads, taps)
        for r in range(nrows):
            acc = None
            oh_r = oh
            if r:
                oh_r = t.fresh("o")
                t.emit(f"{oh_r} = arith.addi {oh}, {t.index(r)} : index")
            if win.init.kind == "chan":
                acc = chan[("bias", width)]
            elif win.init.kind == "scalar":
                acc = glob[("init", width)]
            elif win.init.kind == "tensor":
                acc = t.fresh("a")
                t.emit(f"{acc} = vector.transfer_read %init[%nn, %ch, {oh_r}, {ow}], %pad "
                       f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {self.out_t}, {vt}")
            for i in range(win.kh):
                d = r * win.sh + i * win.dh
                if not row_inside(d):
                    continue  # a padding row: the pad value is the reduction's identity
                for j in range(win.kw):
                    v = tap(d, j)
                    nxt = t.fresh("a")
                    if win.kind == "dw":
                        wv = chan[("w", i, j, width)]
                        if acc is None:
                            t.emit(f"{nxt} = arith.mulf {v}, {wv} : {vt}")
                        else:
                            t.emit(f"{nxt} = math.fma {v}, {wv}, {acc} : {vt}")
                    elif acc is None:
                        nxt = v
                    elif win.kind == "max":
                        t.emit(f"{nxt} = arith.maximumf {acc}, {v} : {vt}")
                    else:
                        t.emit(f"{nxt} = arith.addf {acc}, {v} : {vt}")
                    acc = nxt
            if acc is None:  # every tap row is padding
                acc = glob[("padv", width)]
            acc = self.epilogue(acc, width, oh_r, ow, write_ok, chan, glob)
            new = t.fresh("out")
            t.emit(f"{new} = vector.transfer_write {acc}, {out}[%nn, %ch, {oh_r}, {ow}] "
                   f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {vt}, {self.out_t}")
            out = new
        return out

    def block_kh_loop(self, out, oh, ow, nrows, width, write_ok, chan, glob, ih0, tap, loads, taps) -> str:
        """Large windows: the kernel rows are a loop (the KW taps of one row unrolled), its
        weights read inside it: hoisted out of every loop, KH*KW weight vectors would not fit in
        the registers (LLVM spills them, and the input rows kept for the next output row)."""
        t, win = self.t, self.win
        vt = _vt(width)
        inits = []
        oh_rs = []
        for r in range(nrows):
            oh_r = oh
            if r:
                oh_r = t.fresh("o")
                t.emit(f"{oh_r} = arith.addi {oh}, {t.index(r)} : index")
            oh_rs.append(oh_r)
            if win.init.kind == "chan":
                inits.append(chan[("bias", width)])
            elif win.init.kind == "scalar":
                inits.append(glob[("init", width)])
            elif win.init.kind == "tensor":
                a = t.fresh("a")
                t.emit(f"{a} = vector.transfer_read %init[%nn, %ch, {oh_r}, {ow}], %pad "
                       f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {self.out_t}, {vt}")
                inits.append(a)
            else:
                inits.append(glob[("padv", width)])
        loop, kh = t.fresh("kl"), t.fresh("kh")
        carried = [t.fresh("acc") for _ in range(nrows)]
        t.emit(f"{loop}:{nrows} = scf.for {kh} = {t.index(0)} to {t.index(win.kh)} step {t.index(1)} iter_args("
               + ", ".join(f"{c} = {i}" for c, i in zip(carried, inits)) + ") -> (" + ", ".join([vt] * nrows) + ") {")
        t.indent += 2
        row0 = t.fresh("kr")
        t.emit(f"{row0} = arith.muli {kh}, {t.index(win.dh)} : index")
        base_row = t.fresh("kb")
        t.emit(f"{base_row} = arith.addi {ih0}, {row0} : index")
        weights = {}
        if win.kind == "dw":
            for j in range(win.kw):
                ws, wv = t.fresh("ws"), t.fresh("wv")
                t.emit(f"{ws} = tensor.extract %w[%ch, {kh}, {t.index(j)}] : {_tt([win.c, win.kh, win.kw])}")
                t.emit(f"{wv} = vector.broadcast {ws} : f32 to {vt}")
                weights[j] = wv
        accs = list(carried)
        saved = (self.row_base, loads.copy(), taps.copy())
        loads.clear()
        taps.clear()
        self.row_base = base_row
        for r in range(nrows):
            for j in range(win.kw):
                v = tap(r * win.sh, j)
                nxt = t.fresh("a")
                if win.kind == "dw":
                    t.emit(f"{nxt} = math.fma {v}, {weights[j]}, {accs[r]} : {vt}")
                elif win.kind == "max":
                    t.emit(f"{nxt} = arith.maximumf {accs[r]}, {v} : {vt}")
                else:
                    t.emit(f"{nxt} = arith.addf {accs[r]}, {v} : {vt}")
                accs[r] = nxt
        self.row_base = saved[0]
        t.emit("scf.yield " + ", ".join(accs) + " : " + ", ".join([vt] * nrows))
        t.indent -= 2
        t.emit("}")
        for r in range(nrows):
            acc = self.epilogue(f"{loop}#{r}", width, oh_rs[r], ow, write_ok, chan, glob)
            new = t.fresh("out")
            t.emit(f"{new} = vector.transfer_write {acc}, {out}[%nn, %ch, {oh_rs[r]}, {ow}] "
                   f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {vt}, {self.out_t}")
            out = new
        return out

    def epilogue(self, acc: str, width: int, oh: str, ow: str, write_ok: bool, chan: dict, glob: dict) -> str:
        ir = _ir()
        t, win = self.t, self.win
        for user, number, extras in win.chain:
            block = user.regions[0].blocks[0]
            names = {}
            n_in = len(user.operands) - 1
            for i in range(n_in):
                arg = block.arguments[i]
                if i == number:
                    names[arg] = acc
                    continue
                k = extras[i]
                if k.kind == "full":
                    v = t.fresh("f")
                    t.emit(f"{v} = vector.transfer_read %e{k.index}[%nn, %ch, {oh}, {ow}], %pad "
                           f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {self.out_t}, {_vt(width)}")
                    names[arg] = v
                elif k.kind == "chan":
                    names[arg] = chan[("e", k.index, width)]
                else:
                    names[arg] = glob[("e", k.index, width)]
            for key, k in extras.items():
                if isinstance(key, tuple):
                    names[k.value] = glob[("e", k.index, width)]
            body = list(block.operations)
            for inner in body[:-1]:
                op = inner.operation
                result = t.fresh("ep")
                rtype = _vt(width, str(op.results[0].type))
                if op.name == "arith.constant":
                    attr = op.attributes["value"]
                    elem = str(op.results[0].type)
                    scalar = t.fresh("k")
                    t.emit(f"{scalar} = arith.constant {attr}")
                    t.emit(f"{result} = vector.broadcast {scalar} : {elem} to {rtype}")
                else:
                    operands = [names[v] for v in op.operands]
                    types = [_vt(width, str(v.type)) for v in op.operands]
                    attrs = ", ".join(f"{op.attributes[i].name} = {op.attributes[i].attr}"
                                      for i in range(len(op.attributes)))
                    attrs = f" {{{attrs}}}" if attrs else ""
                    t.emit(f'{result} = "{op.name}"({", ".join(operands)}){attrs} : '
                           f'({", ".join(types)}) -> {rtype}')
                names[op.results[0]] = result
            acc = names[body[-1].operation.operands[0]]
        return acc

    # -- the whole function
    def function(self, name: str) -> str:
        t, win = self.t, self.win
        lanes = min(self.lanes, _next_pow2(win.ow))
        first, last, static_blocks = _column_blocks(win, lanes)
        widths = {lanes} if last > first else set()
        widths |= {w for _, w, _ in static_blocks}
        args = [f"%x: {self.x_t}"]
        if win.kind == "dw":
            args.append(f"%w: {_tt([win.c, win.kh, win.kw])}")
        if win.init.kind == "chan":
            args.append(f"%init: {_tt([win.c])}")
        elif win.init.kind == "scalar":
            args.append("%init: f32")
        elif win.init.kind == "tensor":
            args.append(f"%init: {self.out_t}")
        for k, operand in enumerate(win.operands):
            args.append(f"%e{k}: {operand.value.type}")
        body_start = len(t.lines)
        t.emit(f"%pad = arith.constant {_f32(IDENTITY[win.kind])} : f32")
        t.emit(f"%empty = tensor.empty() : {self.out_t}")
        glob = self.global_values(widths)
        for width in sorted(widths | {w * win.sw for w in widths}):
            v = t.fresh("pv")
            t.emit(f"{v} = vector.broadcast %pad : f32 to {_vt(width)}")
            glob[("padv", width)] = v
        res = t.fresh("res")
        t.emit(f"{res} = scf.for %nn = {t.index(0)} to {t.index(win.n)} step {t.index(1)} "
               f"iter_args(%o0 = %empty) -> ({self.out_t}) {{")
        t.indent += 2
        rc = t.fresh("rc")
        t.emit(f"{rc} = scf.for %ch = {t.index(0)} to {t.index(win.c)} step {t.index(1)} "
               f"iter_args(%o1 = %o0) -> ({self.out_t}) {{")
        t.indent += 2
        chan = self.channel_values(widths)

        def row_step(out: str, oh: str, oh_value: int | None, nrows: int) -> str:
            for start, width, write_ok in static_blocks:
                if start >= first * lanes:
                    break
                out = self.block(out, oh, oh_value, t.index(start), start, nrows, width, write_ok, chan, glob)
            if last > first:
                loop = t.fresh("rw")
                iv, acc = t.fresh("ow"), t.fresh("oc")
                t.emit(f"{loop} = scf.for {iv} = {t.index(first * lanes)} to {t.index(last * lanes)} "
                       f"step {t.index(lanes)} iter_args({acc} = {out}) -> ({self.out_t}) {{")
                t.indent += 2
                done = self.block(acc, oh, oh_value, iv, None, nrows, lanes, True, chan, glob)
                t.emit(f"scf.yield {done} : {self.out_t}")
                t.indent -= 2
                t.emit("}")
                out = loop
            for start, width, write_ok in static_blocks:
                if start >= first * lanes:
                    out = self.block(out, oh, oh_value, t.index(start), start, nrows, width, write_ok, chan, glob)
            return out

        lo, hi = _interior_rows(win)
        rows = max(1, min(self.rows, hi - lo))
        main_end = lo + (hi - lo) // rows * rows
        out = "%o1"
        for oh in range(0, lo):  # top rows reading padding
            out = row_step(out, t.index(oh), oh, 1)
        if main_end > lo:
            loop = t.fresh("rh")
            t.emit(f"{loop} = scf.for %oh = {t.index(lo)} to {t.index(main_end)} step {t.index(rows)} "
                   f"iter_args(%o2 = {out}) -> ({self.out_t}) {{")
            t.indent += 2
            done = row_step("%o2", "%oh", None, rows)
            t.emit(f"scf.yield {done} : {self.out_t}")
            t.indent -= 2
            t.emit("}")
            out = loop
        if hi > main_end:
            out = row_step(out, t.index(main_end), None, hi - main_end)
        for oh in range(max(hi, lo), win.oh):  # bottom rows reading padding
            out = row_step(out, t.index(oh), oh, 1)
        t.emit(f"scf.yield {out} : {self.out_t}")
        t.indent -= 2
        t.emit(f"}} {{{THREAD_SPLIT}}}")  # channels are independent: threads take chunks of them
        t.emit(f"scf.yield {rc} : {self.out_t}")
        t.indent -= 2
        t.emit("}")
        t.emit(f"return {res} : {self.out_t}")
        consts = [f"  {n} = arith.constant {v} : index" for v, n in sorted(self.t.constants.items())]
        body = t.lines[body_start:]
        return "\n".join([f"func.func private @{name}({', '.join(args)}) -> {self.out_t} {{", *consts, *body, "}"]) + "\n"


def _f32(value: float) -> str:
    if value == float("-inf"):
        return "0xFF800000"
    return f"{value:e}"


# ------------------------------------------------------------------ the pass


def _record(op, path: str, reason: str = "", kind: str = "window") -> None:
    """The decision in the module's `etc.cpu.decisions`, where the cpu pipeline keeps them."""
    from etc.targets.cpu import decisions

    decisions.record(op, kind, path, reason)


def _global_pool_source(op, kind: str):
    """The tensor a one-window pooling really reduces: its input, or, when that input is a
    `tensor.pad` adding only high-side rows and columns of the reduction's identity (0 for a
    sum, -inf for a max: what torch-mlir makes of `ceil_mode` with a window larger than the
    plane, as EfficientNet's `AvgPool2d(1280, ceil_mode=True)` over 7x7), the pad's source."""
    ir = _ir()
    from etc.targets.cpu.passes._util import defining_op as producer_of

    x = op.operands[0]
    producer = producer_of(x)
    if producer is not None and producer.name == "tensor.insert_slice" and len(producer.operands) == 2:
        # canonicalization drops the unit batch dim: pad [C, H, W], inserted whole into [1, C, H', W']
        dest = producer_of(producer.operands[1])
        sizes = list(ir.DenseI64ArrayAttr(producer.attributes["static_sizes"]))
        if dest is not None and dest.name == "tensor.empty" and sizes == _static_f32(x) and \
                not any(ir.DenseI64ArrayAttr(producer.attributes["static_offsets"])):
            producer = producer_of(producer.operands[0])
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


def _global_pool_text(op, kind: str) -> str | None:
    """A pooling whose one window covers its whole unpadded input plane (a global pool: KWS's
    average over the feature map, `adaptive_avg_pool2d(x, 1)` lowered as a pool, a window larger
    than the plane with `ceil_mode`) as a function
    reducing each contiguous plane: `tensor<NxCxHxW>` seen as `NxCx(H*W)`, a row reduction
    (a kernel of etc-cpu-row-kernels, which records its decision), expanded back to `NxCx1x1`. None when
    `op` is not such a pool."""
    ir = _ir()
    source = _global_pool_source(op, kind)
    xs, ys = _static_f32(source), _static_f32(op.results[0])
    if xs is None or ys is None or len(xs) not in (3, 4) or len(ys) != 4 or ys[2:] != [1, 1] or kind == "dw":
        return None
    if len(xs) == 3:  # the batch dim dropped by canonicalization (batch 1)
        if ys[0] != 1:
            return None
        xs = [1] + xs
    kh, kw = list(ir.ShapedType(op.operands[1].type).shape)
    if kh < xs[2] or kw < xs[3] or _pair(op, "dilations") != [1, 1]:
        return None
    n, c, h, w = xs
    rank3 = len(_static_f32(source)) == 3
    x_t = f"tensor<{c}x{h}x{w}xf32>" if rank3 else f"tensor<{n}x{c}x{h}x{w}xf32>"
    r_t, y_t, p_t = f"tensor<{n}x{c}xf32>", f"tensor<{n}x{c}x1x1xf32>", f"tensor<{n}x{c}x{h * w}xf32>"
    plane = "[[0, 1], [2]]" if rank3 else "[[0], [1], [2, 3]]"
    if rank3:
        x_t2 = f"tensor<{c}x{h * w}xf32>"
    combine = "arith.maximumf %v, %acc" if kind == "max" else "arith.addf %v, %acc"
    return "\n".join([
        f"func.func private @__etc_global_pool(%x: {x_t}, %init: {y_t}) -> {y_t} {{",
        (f"  %flat = tensor.collapse_shape %x [[0], [1, 2]] : {x_t} into {x_t2}\n"
         f"  %plane = tensor.expand_shape %flat [[0, 1], [2]] output_shape [1, {c}, {h * w}] : {x_t2} into {p_t}")
        if rank3 else f"  %plane = tensor.collapse_shape %x {plane} : {x_t} into {p_t}",
        f"  %acc0 = tensor.collapse_shape %init [[0], [1, 2, 3]] : {y_t} into {r_t}",
        "  %r = linalg.generic {indexing_maps = [affine_map<(n, c, p) -> (n, c, p)>, affine_map<(n, c, p) -> (n, c)>],"
        ' iterator_types = ["parallel", "parallel", "reduction"]}',
        f"      ins(%plane : {p_t}) outs(%acc0 : {r_t}) {{",
        "  ^bb0(%v: f32, %acc: f32):",
        f"    %s = {combine} : f32",
        "    linalg.yield %s : f32",
        f"  }} -> {r_t}",
        f"  %y = tensor.expand_shape %r [[0], [1, 2, 3]] output_shape [{n}, {c}, 1, 1] : {r_t} into {y_t}",
        f"  return %y : {y_t}",
        "}"])


@register_pass
class WindowKernels(Pass):
    """Depthwise convolutions and poolings (NCHW, static f32, linalg on tensors) -> vector kernels
    along the output row: taps unrolled, column strides deinterleaved from contiguous loads,
    several output rows per step, the bias/fill as the accumulator's start and the single-use
    elementwise consumers applied before the store. See the module docstring."""

    name = "etc-cpu-window-kernels"
    summary = "Rewrite NCHW depthwise convolutions and poolings into register-blocked vector kernels"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE)")
        rows: int = option(2, help="output rows computed per step (input rows loaded once for all of them)")
        fuse_consumers: bool = option(True, help="apply single-use elementwise consumers before the store")
        max_stride: int = option(4, help="largest column stride taken (a stride s loads s*lanes inputs per vector)")
        unroll_taps: int = option(25, help="windows with more taps loop over the kernel rows (weights read inside the loop)")
        fold_padding: bool = option(True, help="read a tensor.pad's source, the padding handled in the kernel")

    def run(self, op) -> None:
        ir = _ir()
        if self.options.lanes < 1 or self.options.lanes & (self.options.lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two, got {self.options.lanes}", at=op)
        found = []

        def visit(inner):
            if inner.name in TAKEN or inner.name in SEEN:
                found.append(inner)
            return ir.WalkResult.ADVANCE

        op.walk(visit)
        for window_op in found:
            if window_op.name in TAKEN and self.rewrite_global_pool(window_op):
                continue
            try:
                win = self.analyze(window_op)
                text = _Kernel(win, self.options.lanes, self.options.rows,
                               self.options.unroll_taps).function("__etc_window")
            except NotTaken as reason:
                window_op.attributes["etc.cpu.path"] = ir.StringAttr.get(f"loops: {reason}")
                _record(window_op, "loops", str(reason))
                self.count("not taken")
                continue
            _record(window_op, "window")
            for about, kind, path, reason in win.decisions:
                _record(about, path, reason, kind)
            try:
                self.rewrite(win, text)
            except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
                raise self.error(f"{self.name}: building the window kernel failed: {exc}", at=window_op) from exc
            self.count("taken")

    def rewrite_global_pool(self, op) -> bool:
        """A whole-plane pooling becomes a row reduction (`_global_pool_text`); True when it did."""
        ir = _ir()
        text = _global_pool_text(op, TAKEN[op.name])
        if text is None:
            return False
        _record(op, "row-reduction")
        holder = ir.Module.parse(text, op.context)
        entry = holder.body.operations[0].regions[0].blocks[0]
        body_ops = list(entry.operations)
        for inner in body_ops[:-1]:
            inner.operation.move_before(op)
        source = _global_pool_source(op, TAKEN[op.name])
        pad = op.operands[0].owner if source != op.operands[0] else None
        entry.arguments[0].replace_all_uses_with(source)
        entry.arguments[1].replace_all_uses_with(op.operands[2])
        op.results[0].replace_all_uses_with(body_ops[-1].operation.operands[0])
        op.erase()
        # The ceil_mode window's pad (1280x1287x1287 floats for EfficientNet's pooler) and what
        # carried it, now unused: gone before bufferization could give them buffers.
        dead = [pad] if pad is not None else []
        while dead:
            current = dead.pop()
            current = current.operation if hasattr(current, "operation") else current
            if current.name not in ("tensor.pad", "tensor.insert_slice", "tensor.empty") or \
                    any(True for r in current.results for _ in r.uses):
                continue
            operands = [v.owner for v in current.operands if not isinstance(v.owner, ir.Block)]
            current.erase()
            dead.extend(operands)
        self.count("global pools")
        return True

    # -- what an op is
    def analyze(self, op) -> Window:
        ir = _ir()
        if op.name not in TAKEN:
            layout = "NHWC" if "nhwc" in op.name or "nwc" in op.name else "not 2-D NCHW"
            raise NotTaken(f"{op.name.split('.', 1)[1]}: {layout} window ops are not handled")
        kind = TAKEN[op.name]
        if len(op.results) != 1:
            raise NotTaken("a window op on buffers (no tensor result)")
        x, w, init = op.operands[0], op.operands[1], op.operands[2]
        xs, ys = _static_f32(x), _static_f32(op.results[0])
        if xs is None or ys is None or _static_f32(init) is None:
            raise NotTaken("not static f32 tensors")
        if kind == "dw":
            ws = _static_f32(w)
            if ws is None or len(ws) != 3:
                raise NotTaken("weights are not a static f32 tensor<CxKHxKW>")
            kh, kw = ws[1], ws[2]
        else:
            kt = w.type
            kh, kw = list(ir.ShapedType(kt).shape)
        sh, sw = _pair(op, "strides")
        dh, dw = _pair(op, "dilations")
        n, c, h, wd = xs
        _, _, oh, ow = ys
        if sw > self.options.max_stride:
            raise NotTaken(f"column stride {sw} > max-stride {self.options.max_stride}")
        if min(oh, ow, kh, kw) < 1:
            raise NotTaken("empty output or window")
        win = Window(op, kind, x, w if kind == "dw" else None, _classify_init(init, kind, c),
                     n, c, h, wd, kh, kw, sh, sw, dh, dw, oh, ow)
        if self.options.fold_padding:
            self.fold_padding(win)
        if self.options.fuse_consumers:
            self.fuse_chain(win, ys)
        return win

    @staticmethod
    def fold_padding(win: Window) -> None:
        """Read the source of a `tensor.pad` (spatial, static, padding with the reduction's
        identity: 0 for sums and convolutions, -inf for max) instead of a padded copy: taps on
        padding rows are skipped, loads across a row's ends are masked or shifted in registers.
        A pad it cannot fold is a decision (`padding -> copy` with the reason): the copy costs a
        pass over the activation, as much as the window op itself."""
        pad = _owner(win.x)
        if pad is None or pad.name != "tensor.pad":
            hidden = _behind_views(win.x, "tensor.pad")
            if hidden is not None:
                win.decisions.append((hidden[0], "padding", "copy", f"reaches the window through {hidden[1]}"))
            return
        reason = WindowKernels._unfoldable_padding(win, pad)
        if reason:
            win.decisions.append((pad, "padding", "copy", reason))
            return
        source = _static_f32(pad.operands[0])
        low = list(_ir().DenseI64ArrayAttr(pad.attributes["static_low"]))
        win.x, win.pad_op = pad.operands[0], pad
        win.h, win.wd = source[2], source[3]
        win.ph, win.pw = low[2], low[3]
        win.decisions.append((pad, "padding", "fused", ""))

    @staticmethod
    def _unfoldable_padding(win: Window, pad) -> str:
        """Why the window kernel cannot read `pad`'s source instead of it ('' when it can)."""
        ir = _ir()
        if len(pad.operands) != 1:
            return "dynamic padding amounts"
        low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
        high = list(ir.DenseI64ArrayAttr(pad.attributes["static_high"]))
        if len(low) != 4 or low[:2] != [0, 0] or high[:2] != [0, 0] or min(low + high) < 0:
            return f"pads {low} low, {high} high: not only the spatial dims, or negative"
        yielded = list(pad.regions[0].blocks[0].operations)[-1].operands
        value = _float_constant(yielded[0]) if len(yielded) == 1 else None
        if value is None:
            return "the padding value is not a constant"
        if value != IDENTITY[win.kind]:
            return f"pads with {value}, not the {win.kind} window's identity {IDENTITY[win.kind]}"
        if _static_f32(pad.operands[0]) is None:
            return "the padded tensor is not static f32"
        return ""

    def fuse_chain(self, win: Window, shape: list) -> None:
        value = win.op.results[0]
        block = win.op.operation.block
        index = {}
        while True:
            try:
                found = _fusable_consumer(value, shape, block)
            except NotFused as reason:
                win.decisions.append((_uses(value)[0][0], "epilogue", "second-pass", str(reason)))
                break
            if found is None:
                hidden = _ahead_of_views(value, "linalg.generic")
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

    # -- replacing it
    def rewrite(self, win: Window, text: str) -> None:
        """Splice the kernel `text` (a function) in place of the op and its fused consumers."""
        ir = _ir()
        op = win.op
        context = op.context
        holder = ir.Module.parse(text, context)
        fn = holder.body.operations[0]
        entry = fn.regions[0].blocks[0]
        last = win.chain[-1][0] if win.chain else op
        actual = [win.x]
        if win.kind == "dw":
            actual.append(win.w)
        if win.init.kind != "identity":
            actual.append(win.init.value)
        actual += [o.value for o in win.operands]
        anchor = last.operation
        location = op.location
        body_ops = list(entry.operations)
        ret = body_ops[-1]
        for inner in body_ops[:-1]:
            inner.operation.move_before(anchor)
        for arg, value in zip(entry.arguments, actual):
            arg.replace_all_uses_with(value)
        result = ret.operation.operands[0]
        outer = result.owner

        def relocate(inner):
            inner.location = location
            return ir.WalkResult.ADVANCE

        for inner in body_ops[:-1]:
            inner.operation.walk(relocate)
        outer.attributes["etc.cpu.path"] = ir.StringAttr.get("window")
        outer.attributes["etc.cpu.window"] = ir.StringAttr.get(self.describe(win))
        last.results[0].replace_all_uses_with(result)
        for user, _, _ in reversed(win.chain):
            user.operation.erase()
        op.operation.erase()
        for producer in (win.init.producer, win.pad_op):
            if producer is not None and all(len(list(r.uses)) == 0 for r in producer.results):
                producer.operation.erase()

    @staticmethod
    def describe(win: Window) -> str:
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
