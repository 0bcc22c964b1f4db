"""Packed, register-tiled GEMM kernels for contractions (the library behind the etc-cpu-gemm-* passes).

Every static f32 contraction big enough to pay for it becomes one *GEMM kernel*, the root
of a dispatch region: a private function built as text, called, then inlined and tiled.
On its tile layout (`Layout`) it computes

    init      the accumulator's start: a constant, a broadcast bias, or the C operand
    C += A x B   A [M, K] read in place (row blocks of mr; the partial block is peeled);
                 B an activation (or an im2col, or a 1x1 convolution's input) read in place
                 as [K, N]: the layout is [batch, rows, N], the columns tiled by nr = a few
                 vector widths, the partial panel peeled, nothing padded or copied; B a
                 weight: packed into contiguous column panels [NB, K, nr] (zero padded) when
                 the blob is built, the layout [batch, rows, NB, nr] (`b_in_place`)
    epilogue  the contraction's elementwise consumer (BN, activation, residual add...)

and a transform-dialect script (built here as text, applied with the transform
interpreter) tiles the epilogue into (batch, column panel, row block of mr) with the
contraction and the init fused in: each mr x nr tile is accumulated over the whole K in
registers (6 x 64 f32 = 24 zmm on AVX-512; see isa.py), finished by the epilogue and
stored once. The k step is vectorized into mr broadcasts, nr/lanes loads and
mr*nr/lanes FMAs. (Measured against the Goto-style K blocking this replaced, on this
machine: 1024^3 0.92x of OpenBLAS instead of 0.75x, 256^3 0.99x instead of 1.08x, and no
K blocking leaves the epilogue a single pass in registers.)

Recognized: matmul-like `linalg.generic`s (named matmuls are generalized first; B read
through a transposing generic, as torch-mlir lowers linear layers, is packed straight
from the weight), `linalg.conv_2d_nchw_fchw` (any stride and dilation, padding already
materialized) as filter[F, C*KH*KW] x im2col[C*KH*KW, OH*OW] per image (the im2col gathered
per column panel into a [K, nr] buffer, `gather_per_panel`; 1x1 stride-1 convolutions read the
input in place), or transposed,
im2col^T x filter^T, when the output has few pixels and many filters (`transpose_conv`).
`skip_reason` says why a contraction is not taken; the pass records it.
The code calls no library (no BLAS, no OpenMP).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from etc.targets.cpu.parallel import THREAD_SPLIT  # marks the loop over column panels
from etc.targets.cpu.passes._util import defining_op, dim_range, walk

# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class KernelConfig:
    """Register tile mr x nr (nr a multiple of the vector width), K block kc (isa.py's row)."""

    vector_width: int  # f32 lanes
    mr: int
    nr: int
    kc: int
    min_flops: int = 2 * 32 * 32 * 32  # smaller contractions run as plain loops (a recorded decision)
    kc_strided: int = 0  # the shortest K block of a B read in place (`in_place_k_block`); 0: kc


# ------------------------------------------------------------------ recognition


@dataclass
class Gemm:
    """One contraction to rewrite: C[b, m, n] (+)= A[b?, m, k] * B[b?, k, n] (B maybe transposed or im2col)."""

    op: object  # the linalg op replaced
    batch: int  # 1 when there is none
    M: int
    N: int
    K: int
    a: object  # value
    a_batched: bool
    b: object
    b_layout: str  # "kn" | "nk" | "im2col"
    b_batched: bool
    c: object  # init value
    result_type: object
    conv: dict | None = None  # im2col/conv geometry
    transposed: bool = False  # conv computed as C^T[P, F] = im2col^T x filter^T (see `transpose_conv`)
    # M is dynamic (a bounded dynamic dim: tokens of a prompt); `M` is then its upper bound, the
    # kernel reads the actual rows from A, and its row loop runs to them (partial block peeled).
    dynamic_rows: bool = False


def _maps(op) -> list:
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _dims(amap):
    out = []
    for e in amap.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        out.append(ir.AffineDimExpr(e).position)
    return out


def _iterators(op) -> list[str]:
    return [re.search(r"parallel|reduction|window", str(a)).group(0) for a in ir.ArrayAttr(op.attributes["iterator_types"])]


DYNAMIC = ir.ShapedType.get_dynamic_size()


def _is_f32(v, dynamic_dims=()) -> bool:
    """An f32 tensor, static but for `dynamic_dims` (negative: counted from the end)."""
    if not isinstance(v.type, ir.RankedTensorType) or str(ir.RankedTensorType(v.type).element_type) != "f32":
        return False
    t = ir.RankedTensorType(v.type)
    allowed = {d % t.rank for d in dynamic_dims} if t.rank else set()
    return all(not t.is_dynamic_dim(d) or d in allowed for d in range(t.rank))


def _mul_add_body(op) -> bool:
    """yield(addf(out, mulf(in0, in1))) in either operand order."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 3 or [o.name for o in ops] != ["arith.mulf", "arith.addf", "linalg.yield"]:
        return False
    mul, add, yld = ops
    args = list(block.arguments)
    if set(mul.operands) != {args[0], args[1]} or len(set(mul.operands)) != 2:
        return False
    return set(add.operands) == {mul.result, args[2]} and yld.operands[0] == add.result


def _transpose_source(value):
    """If `value` is a 2-D transpose of another tensor (linalg.transpose or its generic form), that tensor."""
    op = defining_op(value)
    if op is None:
        return None
    if op.name == "linalg.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return op.operands[0] if perm == [1, 0] else None
    if op.name != "linalg.generic" or len(op.operands) != 2:
        return None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 1 or ops[0].operands[0] != block.arguments[0]:
        return None
    maps = [_dims(m) for m in _maps(op)]
    if maps == [[1, 0], [0, 1]] or maps == [[0, 1], [1, 0]]:
        return op.operands[0]
    return None


def is_contraction(op) -> bool:
    """A linalg.generic that multiplies values computed from two different inputs and accumulates
    over a reduction loop (what a GEMM kernel computes, maybe with a producer fused into its body;
    a sum of squares of one input is a reduction, not this)."""
    if op.name != "linalg.generic" or "reduction" not in _iterators(op):
        return False
    block = op.regions[0].blocks[0]
    n_inputs = len(op.operands) - len(op.results)
    inputs = list(block.arguments)[:n_inputs]

    def sources(value, depth=0) -> set:
        if value in inputs:
            return {inputs.index(value)}
        owner = value.owner
        if isinstance(owner, ir.Block) or depth > 16:
            return set()
        owner = owner.operation if hasattr(owner, "operation") else owner
        out = set()
        for v in owner.operands:
            out |= sources(v, depth + 1)
        return out

    for inner in block.operations:
        inner = inner.operation
        if inner.name in ("arith.mulf", "arith.muli") and len(inner.operands) == 2:
            left, right = sources(inner.operands[0]), sources(inner.operands[1])
            if left and right and not (left & right):
                return True
    return False


def match_generic(op) -> "tuple[Gemm | None, str]":
    """A matmul-like linalg.generic: parallel dims (batch?, m, n), one reduction k, mul-add body.
    Returns (the Gemm, "") or (None, why not)."""
    if len(op.results) != 1 or len(op.operands) != 3:
        return None, f"{len(op.operands) - len(op.results)} inputs (a GEMM has two)"
    if not all(_is_f32(v, (-2,)) for v in op.operands):
        return None, "not f32, static but for the rows"
    if not _mul_add_body(op):
        return None, "its body is more than a multiply-add (fused producer or epilogue)"
    its = _iterators(op)
    if its.count("reduction") != 1 or len(its) not in (3, 4):
        return None, f"{its.count('reduction')} reduction(s) over {len(its)} loops"
    maps = [_dims(m) for m in _maps(op)]
    if any(m is None for m in maps):
        return None, "an operand is indexed by an affine expression"
    (d_k,) = [i for i, k in enumerate(its) if k == "reduction"]
    out = maps[2]
    if len(out) != len(its) - 1 or len(set(out)) != len(out):
        return None, "the output is broadcast"
    batch_dims, d_m, d_n = out[:-2], out[-2], out[-1]
    lhs, rhs = maps[0], maps[1]
    a_val, b_val = op.operands[0], op.operands[1]
    if d_m not in lhs:  # operands swapped: C = B^T-ish ... take the one with m as A
        lhs, rhs, a_val, b_val = rhs, lhs, b_val, a_val
    if d_m not in lhs or d_k not in lhs or d_n in lhs or d_n not in rhs or d_k not in rhs or d_m in rhs:
        return None, "operand indexing is not (m, k) x (k, n)"
    a_b = lhs[:-2]
    b_b = rhs[:-2]
    if a_b not in ([], batch_dims) or b_b not in ([], batch_dims) or len(batch_dims) > 1:
        return None, "more than one batch dimension"
    if lhs[-2:] != [d_m, d_k]:
        return None, "A is transposed (k, m)"
    shape = ir.RankedTensorType(op.results[0].type).shape
    batch = shape[0] if batch_dims else 1
    M, N = shape[-2], shape[-1]
    K = ir.RankedTensorType(a_val.type).shape[-1]
    dynamic_rows = M == DYNAMIC
    if dynamic_rows:  # rows up to a bound; A's rows are C's, nothing else may be dynamic
        bound = dim_range(op.operands[2], len(shape) - 2)
        if bound is None:
            return None, "dynamic rows without an upper bound"
        if not _is_f32(b_val) or ir.RankedTensorType(a_val.type).shape[-2] != DYNAMIC:
            return None, "a dynamic dim other than the rows"
        M = bound[1]
    if rhs[-2:] == [d_k, d_n]:
        layout = "kn"
        src = _transpose_source(b_val) if not b_b else None
        if src is not None:
            transposed_operand = list(op.operands).index(b_val)
            b_val, layout = src, "nk"
    elif rhs[-2:] == [d_n, d_k]:
        layout = "nk"
    else:
        return None, "B is indexed neither (k, n) nor (n, k)"
    g = Gemm(op, batch, M, N, K, a_val, bool(a_b), b_val, layout, bool(b_b), op.operands[2], op.results[0].type,
             dynamic_rows=dynamic_rows)
    if layout == "nk" and rhs[-2:] == [d_k, d_n]:
        g.b_through_transpose = transposed_operand
    return g, ""


def read_b_in_place(g: Gemm) -> bool:
    """For a contraction left as loops whose B is a transposed weight (a Linear's W^T[k, n]):
    read W[n, k] itself, the B operand's map turned to (.., n, k), so that the default loop
    order keeps k innermost (a contiguous dot product per output, W streamed once) instead of
    walking the whole output row once per k over a transposed copy. True when it changed."""
    index = getattr(g, "b_through_transpose", None)
    if index is None:
        return False
    op = g.op
    maps = _maps(op)
    amap = maps[index]
    results = list(amap.results)
    results[-2], results[-1] = results[-1], results[-2]
    maps[index] = ir.AffineMap.get(amap.n_dims, amap.n_symbols, results)
    op.operands[index] = g.b
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    return True


def match_conv(op) -> Gemm | None:
    """linalg.conv_2d_nchw_fchw on static f32 tensors -> filter[F, CKK] x im2col."""
    if op.name != "linalg.conv_2d_nchw_fchw" or not all(_is_f32(v) for v in op.operands):
        return None
    x, w, init = op.operands[0], op.operands[1], op.operands[2]
    n, c, h, wd = ir.RankedTensorType(x.type).shape
    f, c2, kh, kw = ir.RankedTensorType(w.type).shape
    _, _, oh, ow = ir.RankedTensorType(init.type).shape
    strides = [int(s) for s in ir.DenseIntElementsAttr(op.attributes["strides"])] if "strides" in op.attributes else [1, 1]
    dil = [int(s) for s in ir.DenseIntElementsAttr(op.attributes["dilations"])] if "dilations" in op.attributes else [1, 1]
    if c != c2:
        return None
    geo = dict(n=n, c=c, h=h, w=wd, f=f, kh=kh, kw=kw, oh=oh, ow=ow, sh=strides[0], sw=strides[1], dh=dil[0], dw=dil[1])
    direct = kh == 1 and kw == 1 and strides == [1, 1] and oh == h and ow == wd
    return Gemm(op, n, f, oh * ow, c * kh * kw, w, False, x, "kn" if direct else "im2col", True, init,
                op.results[0].type, conv=geo)


# ------------------------------------------------------------------ kernel text


def tensor_type(shape, element: str = "f32") -> str:
    """MLIR text of a ranked tensor type (-1: a dynamic dimension)."""
    return "tensor<" + "".join(f"{d if d >= 0 else '?'}x" for d in shape) + element + ">"


# The SSA name of a dynamic kernel's row count (`tensor.dim` of A at the kernel's entry).
ROWS = "%rows"


_t = tensor_type


class Text:
    """MLIR text of a function body, built line by line (the generated kernels of the cpu target):
    fresh SSA names, and index constants (`index(k)`) declared once, ahead of the body (`text()`)."""

    def __init__(self):
        self.lines: list[str] = []
        self.n = 0
        self.indices: dict[int, str] = {}

    def fresh(self, stem: str = "v") -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def const(self, value, type_: str) -> str:
        name = self.fresh("c")
        self.emit(f"{name} = arith.constant {value} : {type_}")
        return name

    def index(self, value: int) -> str:
        return self.indices.setdefault(value, f"%idx{value}")

    def add(self, base: str, k: int) -> str:
        """base + k (index), base itself for 0."""
        if k == 0:
            return base
        return self.addv(base, self.index(k))

    def addv(self, a: str, b: str) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.addi {a}, {b} : index")
        return name

    def mul(self, base: str, k: int) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.muli {base}, {self.index(k)} : index")
        return name

    def text(self) -> str:
        consts = [f"  {name} = arith.constant {value} : index" for value, name in sorted(self.indices.items())]
        return "\n".join(consts + self.lines)


def _pad(t: Text, value: str, shape: list, high: list, element: str = "f32") -> tuple[str, list]:
    if not any(high):
        return value, shape
    if element != "f32":
        raise NotFusable(f"padding a {element} tensor")
    new = [s + h for s, h in zip(shape, high)]
    out = t.fresh("pad")
    idx = ", ".join(f"%i{i}: index" for i in range(len(shape)))
    t.emit(f"{out} = tensor.pad {value} low[{', '.join('0' for _ in shape)}] high[{', '.join(map(str, high))}] {{")
    t.emit(f"^bb0({idx}):")
    t.emit("  tensor.yield %zero : f32")
    t.emit(f"}} : {_t(shape)} to {_t(new)}")
    return out, new


def _reshape(t: Text, kind: str, value: str, src: list, dst: list, groups: list, element: str = "f32") -> str:
    out = t.fresh("r")
    g = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    if kind == "expand":
        sizes = [str(d) if d >= 0 else ROWS for d in dst]
        t.emit(f"{out} = tensor.expand_shape {value} {g} output_shape [{', '.join(sizes)}] "
               f": {_t(src, element)} into {_t(dst, element)}")
    else:
        t.emit(f"{out} = tensor.collapse_shape {value} {g} : {_t(src, element)} into {_t(dst, element)}")
    return out


def _transpose(t: Text, value: str, src: list, perm: list) -> tuple[str, list]:
    dst = [src[p] for p in perm]
    e, out = t.fresh("e"), t.fresh("tr")
    t.emit(f"{e} = tensor.empty() : {_t(dst)}")
    t.emit(f"{out} = linalg.transpose ins({value} : {_t(src)}) outs({e} : {_t(dst)}) permutation = [{', '.join(map(str, perm))}]")
    return out, dst


def _im2col(t: Text, x: str, g: Gemm) -> tuple[str, list]:
    """col[b, c, kh, kw, oh, ow] = X[b, c, oh*sh + kh*dh, ow*sw + kw*dw] (an affine gather, no index
    arithmetic per element), collapsed to the [b, K, P] right-hand side."""
    geo = g.conv
    shape = [g.batch, geo["c"], geo["kh"], geo["kw"], geo["oh"], geo["ow"]]
    e, out = t.fresh("e"), t.fresh("col")
    h = f"d4 * {geo['sh']} + d2 * {geo['dh']}"
    w = f"d5 * {geo['sw']} + d3 * {geo['dw']}"
    par = ", ".join(['"parallel"'] * 6)
    t.emit(f"{e} = tensor.empty() : {_t(shape)}")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, {h}, {w})>, "
           f"affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>], iterator_types = "
           f"[{par}]}} ins({x} : {_t([g.batch, geo['c'], geo['h'], geo['w']])}) "
           f"outs({e} : {_t(shape)}) {{")
    t.emit("^bb0(%in: f32, %o: f32):")
    t.emit("  linalg.yield %in : f32")
    t.emit(f"}} -> {_t(shape)}")
    return _reshape(t, "collapse", out, shape, [g.batch, g.K, g.N], [[0], [1, 2, 3], [4, 5]]), [g.batch, g.K, g.N]


def _im2col_gather(t: Text, x: str, g: Gemm, tag: str) -> str:
    """The im2col as a gather over the [B, K, N] right-hand side itself (tagged `<tag>_col`), which
    the transform script fuses into the column-panel loop (`transform_script`):
    B[b, k, n] = X[b, koff[k] + noff[n]] over X flattened per image, with the offsets constants:
    koff[c*KH*KW + kh*KW + kw] = c*H*W + kh*dh*W + kw*dw and noff[oh*OW + ow] = oh*sh*W + ow*sw
    (a k step broadcasts one offset, an nr-wide panel loads nr)."""
    geo = g.conv
    hw = geo["h"] * geo["w"]
    koff = [c * hw + kh * geo["dh"] * geo["w"] + kw * geo["dw"]
            for c in range(geo["c"]) for kh in range(geo["kh"]) for kw in range(geo["kw"])]
    noff = [oh * geo["sh"] * geo["w"] + ow * geo["sw"] for oh in range(geo["oh"]) for ow in range(geo["ow"])]
    element = "i32" if geo["c"] * hw < 1 << 31 else "i64"
    flat = _reshape(t, "collapse", x, [g.batch, geo["c"], geo["h"], geo["w"]], [g.batch, geo["c"] * hw],
                    [[0], [1, 2, 3]])
    offsets = []
    for values in (koff, noff):
        name = t.fresh("off")
        t.emit(f"{name} = arith.constant dense<[{', '.join(map(str, values))}]> : {_t([len(values)], element)}")
        offsets.append(name)
    shape = [g.batch, g.K, g.N]
    e, out = t.fresh("e"), t.fresh("col")
    t.emit(f"{e} = tensor.empty() : {_t(shape)}")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d1)>, "
           f"affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = "
           f"[\"parallel\", \"parallel\", \"parallel\"]}} ins({offsets[0]}, {offsets[1]} : {_t([g.K], element)}, "
           f"{_t([g.N], element)}) outs({e} : {_t(shape)}) attrs = {{{tag}_col}} {{")
    t.emit(f"^bb0(%ko: {element}, %no: {element}, %o: f32):")
    t.emit("  %b = linalg.index 0 : index")
    t.emit(f"  %s = arith.addi %ko, %no : {element}")
    t.emit(f"  %i = arith.index_cast %s : {element} to index")
    t.emit(f"  %v = tensor.extract {flat}[%b, %i] : {_t([g.batch, geo['c'] * hw])}")
    t.emit("  linalg.yield %v : f32")
    t.emit(f"}} -> {_t(shape)}")
    return out


# ------------------------------------------------------------------ dispatch regions


class NotFusable(Exception):
    """An init or epilogue operand the kernel layout cannot read (the message says why)."""


@dataclass(frozen=True)
class Layout:
    """How a kernel's tile layout [batch, rows, NB, nr] covers its result tensor.

    `groups` are the result's dimensions (batch, rows, columns), each group collapsed into one
    dimension of the tile layout; columns are zero padded to whole nr-wide panels. A
    convolution's rows are its filters and its columns its output pixels (transposed: the
    other way round); a matmul's are M and N."""

    shape: tuple
    groups: tuple  # (batch dims, row dims, column dims) of `shape`
    batch: int
    rows: int
    cols: int
    nr: int
    split: bool = True  # columns as [panels, nr] (B packed in panels) or one dimension (B read in place)
    dynamic_rows: bool = False  # `rows` is the upper bound of the run-time row count

    @property
    def panels(self) -> int:
        return -(-self.cols // self.nr)

    @property
    def tile_shape(self) -> list:
        rows = DYNAMIC if self.dynamic_rows else self.rows
        return [self.batch, rows, self.panels, self.nr] if self.split else [self.batch, rows, self.cols]

    @property
    def dynamic_sizes(self) -> str:
        """The operands of a tensor.empty of `tile_shape`."""
        return f"({ROWS})" if self.dynamic_rows else "()"

    @property
    def dims(self) -> str:
        return "(b, i, jb, j)" if self.split else "(b, i, n)"

    @property
    def col_names(self) -> tuple:
        return ("jb", "j") if self.split else ("n",)


def layout(g: Gemm, cfg: KernelConfig, reshape: "tuple | None" = None) -> Layout:
    """The tile layout of `g` over its result, or over the result seen through `reshape` =
    (kind, reassociation, shape): an expand_shape or collapse_shape that splits or merges
    dimensions within a group (a Linear's [3136, 384] seen as [1, 56, 56, 384]); NotFusable
    when it mixes groups."""
    own = tuple(ir.RankedTensorType(g.result_type).shape)
    if g.conv is not None:
        groups = ((0,), (2, 3), (1,)) if g.transposed else ((0,), (1,), (2, 3))
    elif len(own) == 2:
        groups = ((), (0,), (1,))
    else:
        groups = ((0,), (1,), (2,))
    rows, cols = (g.N, g.M) if g.transposed else (g.M, g.N)
    if reshape is not None:
        if g.dynamic_rows:
            raise NotFusable("the consumer reads the result reshaped, and its rows are dynamic")
        groups = _regroup(own, groups, *reshape)
        own = tuple(reshape[2])
    return Layout(own, groups, g.batch, rows, cols, cfg.nr, split=not b_in_place(g, cfg), dynamic_rows=g.dynamic_rows)


def b_in_place(g: Gemm, cfg: KernelConfig) -> bool:
    """B is read where it is (an activation, a direct 1x1 input, an im2col): the tile's columns are
    then one dimension tiled by nr with a peeled partial panel, never padded (no copies of B or
    C). B packed into panels keeps the [panels, nr] layout, zero padded: a weight (any layout:
    packed when the blob is written, so its panels are contiguous for free), a transposed
    convolution's filter, and a B narrower than one panel (attention over a few tokens: read in
    place, Llama-15M's 32-token attention took 4.4x as long as through one packed panel)."""
    return (g.b_layout in ("kn", "im2col") and not g.transposed and not _is_constant(g.b)
            and g.N >= cfg.nr)


# The stack a thread may give one column panel's im2col buffer (K x nr f32, `gather_per_panel`).
PANEL_STACK_BYTES = 1 << 20


def gather_per_panel(g: Gemm, cfg: KernelConfig) -> bool:
    """Is the im2col of `g` gathered per column panel, inside the panel loop, into a [K, nr]
    buffer that every row block of the panel then reads (`_im2col_gather`)?

    Whole, the im2col is written to memory and read back once per row block, each k row of a
    tile nr*4 bytes out of a row N*4 long: ResNet's 3x3 64@56 (7.2 MB of im2col) spent 0.4 of
    its 2.24 ms there, as long as the whole GEMM over the same [576, 3136] read in place as a 1x1
    input. Per panel, the 147 KiB buffer stays in L2 and its rows are contiguous: 1.88 ms
    (torch eager 1.92). The buffer is a stack allocation of the thread running the panel
    (etc-cpu-plan-scratch: the threads share the panel loop), so it is used up to
    PANEL_STACK_BYTES (K up to 4096 at nr = 64); a longer K keeps the whole im2col (a recorded
    decision)."""
    return (g.b_layout == "im2col" and not g.transposed and b_in_place(g, cfg)
            and 4 * g.K * cfg.nr <= PANEL_STACK_BYTES)


def _is_constant(value) -> bool:
    """`value` is an entry argument labelled `constant:<name>` (a weight in the program)."""
    if not isinstance(value, ir.BlockArgument):
        return False
    fn = value.owner.owner
    if fn is None or "arg_attrs" not in fn.attributes:
        return False
    attrs = ir.DictAttr(ir.ArrayAttr(fn.attributes["arg_attrs"])[value.arg_number])
    return "etc.cpu.arg" in attrs and ir.StringAttr(attrs["etc.cpu.arg"]).value.startswith("constant:")


def _regroup(own: tuple, groups: tuple, kind: str, reassociation: list, shape: tuple) -> tuple:
    """`groups` of `own` carried through a reshape to `shape`."""
    group_of = {d: n for n, dims in enumerate(groups) for d in dims}
    new = {}
    for j, dims in enumerate(reassociation):
        if kind == "expand":  # own dim j -> shape dims `dims`
            for fd in dims:
                new[fd] = group_of[j]
        else:  # own dims `dims` -> shape dim j; unit dims go with any group
            found = {group_of[d] for d in dims if own[d] != 1} or {group_of[dims[0]]}
            if len(found) != 1:
                raise NotFusable("the consumer reads the result with rows and columns merged")
            new[j] = found.pop()
    out = tuple(tuple(fd for fd in range(len(shape)) if new[fd] == n) for n in range(3))
    for dims in out:
        if dims and list(dims) != list(range(dims[0], dims[-1] + 1)):
            raise NotFusable("the consumer reads the result with its dimensions interleaved")
    return out


def _to_result(t: "Text", value: str, extents: list, order: list, lay: Layout) -> str:
    """`value` of shape `extents` (one dimension per group, groups in `order`) -> the result shape."""
    present = [k for k, gid in enumerate(order) if lay.groups[gid]]
    shape = list(extents)
    if len(present) != len(extents):  # an empty group has extent 1: merge it into a neighbour
        assoc, pending = [], []
        for k in range(len(extents)):
            if k in present:
                assoc.append(pending + [k])
                pending = []
            else:
                (assoc[-1] if assoc else pending).append(k)
        if pending:
            assoc[-1].extend(pending)
        shape = [extents[k] for k in present]
        value = _reshape(t, "collapse", value, list(extents), shape, assoc)
    dims = [list(lay.groups[order[k]]) for k in present]
    if [d for grp in dims for d in grp] != list(range(len(lay.shape))):
        raise NotFusable("the result's dimensions are not grouped in order")
    if len(dims) != len(lay.shape):
        value = _reshape(t, "expand", value, shape, list(lay.shape), dims)
    return value


@dataclass
class Extra:
    """A kernel argument the init or the epilogue reads: its tensor type and, per dimension,
    the result dimension it runs along (None: a unit dimension, broadcast)."""

    type: object  # ir.RankedTensorType
    used: list
    groups: "tuple | None" = None  # the result dimensions `used` refers to, when not the kernel's result


@dataclass
class Region:
    """What a GEMM kernel computes around its contraction, in registers.

    init: ("fill", "<literal> : f32") starts the accumulator at a constant, ("broadcast", i)
    at extra i broadcast (a bias), ("copy", i) at extra i itself. The epilogue reads, per
    input, the accumulator ("acc") or an extra (its index), with the block argument types
    `arg_types` (inputs, then the output); its body is moved in from the consumer by
    etc-cpu-gemm-regions (an identity until then)."""

    init: tuple
    extras: list
    inputs: list
    arg_types: list
    body: bool = True  # False: no epilogue (the tile is stored as accumulated)
    kc: int = 1 << 30  # the K block (`kernel_kc`): shorter than K, K is split into blocks of it


def _plan_extra(extra: Extra, lay: Layout) -> tuple:
    """(reassociation collapsing the extra to one dimension per group it runs along, those groups
    in tile order, the same groups in the operand's order). NotFusable when a group is only
    partly present or its dimensions are permuted."""
    groups = extra.groups or lay.groups
    group_of = {d: n for n, dims in enumerate(groups) for d in dims}
    used = [u for u in extra.used if u is not None]
    if used != sorted(used) or len(set(used)) != len(used):
        raise NotFusable("an operand is read transposed")
    present = []
    for n, dims in enumerate(groups):
        mine = [u for u in used if group_of.get(u) == n]
        if mine and mine != list(dims):
            raise NotFusable("an operand broadcasts along part of a collapsed dimension")
        if mine:
            present.append(n)
    order = []
    for u in used:
        if group_of.get(u) is not None and group_of[u] not in order:
            order.append(group_of[u])
    assoc, pending, current = [], [], None
    for k, u in enumerate(extra.used):
        if u is None:
            (assoc[-1] if assoc else pending).append(k)
            continue
        n = group_of[u]
        if assoc and n == current:
            assoc[-1].append(k)
        else:
            assoc.append(pending + [k])
            pending, current = [], n
    if pending and assoc:
        assoc[-1].extend(pending)
    return assoc, present, order


def check_extra(extra: Extra, lay: Layout) -> None:
    """Raise NotFusable when the kernel cannot read `extra` in its tile layout."""
    if not ir.RankedTensorType(extra.type).has_static_shape:
        raise NotFusable("an operand with dynamic dims (only the contraction's own rows may be dynamic)")
    _, present, order = _plan_extra(extra, lay)
    element = str(ir.RankedTensorType(extra.type).element_type)
    if 2 in present and lay.split and lay.panels * lay.nr != lay.cols and element != "f32":
        raise NotFusable(f"a {element} operand would need padding to whole column panels")
    if order != sorted(order) and element != "f32":
        raise NotFusable(f"a {element} operand would need a transpose into the tile layout")


def _adapt_map(extra: Extra, lay: Layout) -> str:
    """The map results over (b, i, jb, j) the adapted `extra` is read with."""
    _, present, _ = _plan_extra(extra, lay)
    names = [("b",), ("i",), lay.col_names]
    return "(" + ", ".join(d for n in present for d in names[n]) + ")"


def _adapt(t: Text, value: str, extra: Extra, lay: Layout) -> tuple[str, str, str]:
    """`value` (an extra) reshaped to the tile layout: (value, its type, its map results over
    (b, i, jb, j)): one dimension per group it runs along (transposed into the tile's group order
    when needed: a residual read by a transposed convolution), the columns padded and split
    into panels."""
    assoc, present, order = _plan_extra(extra, lay)
    rtype = ir.RankedTensorType(extra.type)
    element = str(rtype.element_type)
    shape = list(rtype.shape)
    sizes = [lay.batch, lay.rows, lay.cols]
    collapsed = [sizes[n] for n in order]
    if len(assoc) != len(shape) or any(len(a) != 1 for a in assoc):
        value = _reshape(t, "collapse", value, shape, collapsed, assoc, element)
    shape = collapsed
    if order != present:
        value, shape = _transpose(t, value, shape, [order.index(n) for n in present])
    names = [("b",), ("i",), lay.col_names]
    results = [d for n in present for d in names[n]]
    if 2 in present and lay.split:
        value, shape = _pad(t, value, shape, [0] * (len(shape) - 1) + [lay.panels * lay.nr - lay.cols], element)
        new = shape[:-1] + [lay.panels, lay.nr]
        value = _reshape(t, "expand", value, shape, new, [[i] for i in range(len(shape) - 1)] +
                         [[len(shape) - 1, len(shape)]], element)
        shape = new
    return value, _t(shape, element), "(" + ", ".join(results) + ")"


def _region_text(t: Text, g: Gemm, lay: Layout, region: Region, tag: str, a: str, a_map: str, a_type: str,
                 b: str, b_map: str, b_type: str) -> str:
    """The init, the contraction and the epilogue on the tile layout; returns the epilogue's result."""
    tile = _t(lay.tile_shape)
    dims4 = lay.dims
    extras = [f"%X{n}" for n in range(len(region.extras))]
    empty = t.fresh("e")
    blocked = region.kc < g.K
    if blocked and region.body:
        # K in blocks: each column panel's accumulator lives in memory between the blocks. A
        # tensor.empty would fold into one panel-sized buffer allocated inside the panel loop,
        # which the threads sharing that loop would share; a whole-size buffer gives each
        # panel its own columns.
        t.emit(f"{empty} = bufferization.alloc_tensor{lay.dynamic_sizes} : {tile}")
    else:
        t.emit(f"{empty} = tensor.empty{lay.dynamic_sizes} : {tile}")
    kind, what = region.init
    init = t.fresh("init")
    par = ", ".join(['"parallel"'] * len(lay.tile_shape))
    if kind == "copy" and _adapt_map(region.extras[what], lay) == dims4:
        # C itself: a named copy (an identity generic would be folded away before tiling)
        value, vtype, _ = _adapt(t, extras[what], region.extras[what], lay)
        t.emit(f"{init} = linalg.copy ins({value} : {vtype}) outs({empty} : {tile}) -> {tile}")
    elif kind == "fill":
        # a generic, not linalg.fill: the tiling folds its unit dimensions like the contraction's
        t.emit(f"{init} = linalg.generic {{indexing_maps = [affine_map<{dims4} -> {dims4}>], iterator_types = "
               f"[{par}]}} outs({empty} : {tile}) attrs = {{{tag}_init}} {{")
        t.emit("^bb0(%o: f32):")
        cst = t.fresh("c")
        t.emit(f"  {cst} = arith.constant {what}")
        t.emit(f"  linalg.yield {cst} : f32")
        t.emit(f"}} -> {tile}")
    else:
        value, vtype, vmap = _adapt(t, extras[what], region.extras[what], lay)
        t.emit(f"{init} = linalg.generic {{indexing_maps = [affine_map<{dims4} -> {vmap}>, affine_map<{dims4} -> "
               f"{dims4}>], iterator_types = [{par}]}} ins({value} : {vtype}) outs({empty} : {tile}) "
               f"attrs = {{{tag}_init}} {{")
        t.emit("^bb0(%x: f32, %o: f32):")
        t.emit("  linalg.yield %x : f32")
        t.emit(f"}} -> {tile}")
    loops = "b, jb, i, j, k" if lay.split else "b, i, n, k"
    out = _mul_add_generic(t, loops, (a_map, b_map, dims4), (a, b, init), (a_type, b_type, tile), tag)
    if blocked and not region.body:
        # K in blocks and nothing to finish: the blocks accumulate in the result itself (the init
        # a pass of its own before them); an identity epilogue would copy every panel once more.
        return out
    ins, types, maps = [], [], []
    for source in region.inputs:
        if source == "acc":
            ins.append(out), types.append(tile), maps.append(dims4)
        else:
            value, vtype, vmap = _adapt(t, extras[source], region.extras[source], lay)
            ins.append(value), types.append(vtype), maps.append(vmap)
    e2, result = t.fresh("e"), t.fresh("epi")
    t.emit(f"{e2} = tensor.empty{lay.dynamic_sizes} : {tile}")
    amaps = ", ".join(f"affine_map<{dims4} -> {m}>" for m in maps + [dims4])
    t.emit(f"{result} = linalg.generic {{indexing_maps = [{amaps}], iterator_types = "
           f"[{par}]}} ins({', '.join(ins)} : {', '.join(types)}) "
           f"outs({e2} : {tile}) attrs = {{{tag}_epi}} {{")
    args = ", ".join(f"%p{n}: {ty}" for n, ty in enumerate(region.arg_types))
    t.emit(f"^bb0({args}):")
    t.emit(f"  linalg.yield %p{region.inputs.index('acc')} : f32")
    t.emit(f"}} -> {tile}")
    return result


def _signature(name: str, g: Gemm, region: Region, lay: Layout) -> str:
    args = [f"%A: {g.a.type}", f"%B: {g.b.type}"] + [f"%X{n}: {e.type}" for n, e in enumerate(region.extras)]
    return f"func.func private @{name}({', '.join(args)}) -> {_t(lay.shape)} {{"


def kernel_function(g: Gemm, cfg: KernelConfig, name: str, tag: str, region: Region,
                    reshape: "tuple | None" = None) -> str:
    """Text of `func.func private @name(A, B, extras...) -> result`: `region` around the packed
    contraction of `g`.

    A is read in place, row blocks of mr with the partial one peeled. (Packing A into
    [M/mr, K, mr] micro-panels measured within 3% of in-place A on Zen 5 at M=N=K=1024 and
    512x1024x512, and costs an M*K copy: not done.)"""
    if g.transposed:
        return transposed_conv_kernel(g, cfg, name, tag, region, reshape)
    nr = cfg.nr
    lay = layout(g, cfg, reshape)
    Np = lay.panels * nr
    NB = lay.panels
    t = Text()
    t.emit("%zero = arith.constant 0.0 : f32")
    a_shape = list(ir.RankedTensorType(g.a.type).shape)
    b_shape = list(ir.RankedTensorType(g.b.type).shape)
    M = DYNAMIC if g.dynamic_rows else g.M
    if g.dynamic_rows:
        t.emit(f"%c_rows = arith.constant {len(a_shape) - 2} : index")
        t.emit(f"{ROWS} = tensor.dim %A, %c_rows : {g.a.type}")

    # A -> [B?, M, K]
    a = "%A"
    if g.conv is not None:  # filter [F, C, KH, KW] -> [F, CKK]
        a = _reshape(t, "collapse", a, a_shape, [g.M, g.K], [[0], [1, 2, 3]])

    ab = "b, " if g.a_batched else ""
    bb = "b, " if g.b_batched else ""
    a_type = _t(([g.batch] if g.a_batched else []) + [M, g.K])
    b = "%B"
    lead = [g.batch] if g.b_batched else []
    if not lay.split:  # B read in place as [B?, K, N]: the columns are tiled, never padded
        if gather_per_panel(g, cfg):
            b = _im2col_gather(t, b, g, tag)
        elif g.b_layout == "im2col":  # its panel buffer too large for a thread's stack: whole
            b, b_shape = _im2col(t, b, g)
        elif g.conv is not None:  # 1x1: X [N, C, H, W] -> [N, C, H*W]
            b = _reshape(t, "collapse", b, b_shape, [g.batch, g.K, g.N], [[0], [1], [2, 3]])
        out = _region_text(t, g, lay, region, tag, a, f"({ab}i, k)", a_type, b, f"({bb}k, n)",
                           _t(lead + [g.K, g.N]))
        r = _to_result(t, out, [g.batch, M, g.N], [0, 1, 2], lay)
        t.emit(f"return {r} : {_t(lay.shape)}")
        return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"

    # B packed into panels [B?, NB, K, nr]: a weight (evaluated when the blob is written) or an
    # activation narrower than one panel (`b_in_place`)
    n = len(lead)
    if g.b_layout in ("kn", "im2col"):  # [B?, K, N]
        if g.b_layout == "im2col":
            b, b_shape = _im2col(t, b, g)
        elif g.conv is not None:  # 1x1: X [N, C, H, W] -> [N, C, H*W]
            b = _reshape(t, "collapse", b, b_shape, [g.batch, g.K, g.N], [[0], [1], [2, 3]])
            b_shape = [g.batch, g.K, g.N]
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 1) + [Np - g.N])
        b = _reshape(t, "expand", b, b_shape, lead + [g.K, NB, nr], [[i] for i in range(n)] + [[n], [n + 1, n + 2]])
        b, _ = _transpose(t, b, lead + [g.K, NB, nr], list(range(n)) + [n + 1, n, n + 2])
    else:  # "nk": [B?, N, K]
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 2) + [Np - g.N, 0])
        b = _reshape(t, "expand", b, b_shape, lead + [NB, nr, g.K], [[i] for i in range(n)] + [[n, n + 1], [n + 2]])
        b, _ = _transpose(t, b, lead + [NB, nr, g.K], list(range(n)) + [n, n + 2, n + 1])
    out = _region_text(t, g, lay, region, tag, a, f"({ab}i, k)", a_type, b, f"({bb}jb, k, j)",
                       _t(lead + [NB, g.K, nr]))

    # back to the result type
    r = _reshape(t, "collapse", out, [g.batch, M, NB, nr], [g.batch, M, Np], [[0], [1], [2, 3]])
    if Np != g.N:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {ROWS if g.dynamic_rows else g.M}, {g.N}] "
               f"[1, 1, 1] : {_t([g.batch, M, Np])} to {_t([g.batch, M, g.N])}")
        r = s
    r = _to_result(t, r, [g.batch, M, g.N], [0, 1, 2], lay)
    t.emit(f"return {r} : {_t(lay.shape)}")
    return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"


def _mul_add_generic(t: Text, dims: str, maps: tuple, values: tuple, types: tuple, tag: str) -> str:
    """Emit the GEMM kernel's contraction: C[cmap] += A[amap] * B[bmap] over `dims` (the last
    one the reduction), tagged for the transform script; returns its result."""
    (amap, bmap, cmap), (a, b, c), (a_type, b_type, c_type) = maps, values, types
    n = len(dims.split(","))
    its = ", ".join(['"parallel"'] * (n - 1) + ['"reduction"'])
    out = t.fresh("gemm")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<({dims}) -> {amap}>, "
           f"affine_map<({dims}) -> {bmap}>, affine_map<({dims}) -> {cmap}>], "
           f"iterator_types = [{its}]}} "
           f"ins({a}, {b} : {a_type}, {b_type}) outs({c} : {c_type}) attrs = {{{tag}}} {{")
    t.emit("^bb0(%x: f32, %y: f32, %acc: f32):")
    t.emit("  %m = arith.mulf %x, %y fastmath<contract> : f32")
    t.emit("  %s = arith.addf %acc, %m fastmath<contract> : f32")
    t.emit("  linalg.yield %s : f32")
    t.emit(f"}} -> {c_type}")
    return out


def transpose_conv(g: Gemm, cfg: KernelConfig) -> bool:
    """Compute this convolution as C^T[P, F] = im2col^T[P, K] x filter^T[K, F]?

    B (the input or its im2col) is read in place, its P = OH*OW columns tiled by nr with one
    partial panel: a late layer (7x7: P = 49) would be nothing but that partial panel, 49 odd
    lanes wide. Transposed, the filters run along the vector (the packed filter padded to whole
    panels) and the pixels become rows (a peeled partial row block). Chosen when there is no
    full column panel (P < nr) and the transposed padded work is no larger than the lanes the
    partial panel fills: the transposes of the im2col and the output cost P*(K+F) moves against
    P*F*K FMAs."""
    if g.conv is None or g.N >= cfg.nr:
        return False
    lanes_used = g.M * (-(-g.N // cfg.vector_width) * cfg.vector_width)
    padded_t = g.N * (-(-g.M // cfg.nr) * cfg.nr)
    return padded_t <= lanes_used


def transposed_conv_kernel(g: Gemm, cfg: KernelConfig, name: str, tag: str, region: Region,
                           reshape: "tuple | None" = None) -> str:
    """Text of the kernel of a transposed convolution: A = im2col^T [b, P, K] (read in place),
    B = filter [F, K] packed as in the "nk" layout, the tile layout [b, P, NB, nr] over the
    filters padded to whole column panels. Same loop nest as `kernel_function`."""
    nr, P, F, K, geo = cfg.nr, g.N, g.M, g.K, g.conv
    lay = layout(g, cfg, reshape)
    Fp = lay.panels * nr
    NB = lay.panels
    t = Text()
    t.emit("%zero = arith.constant 0.0 : f32")
    # A: the input as [b, K, P] (im2col, or the input itself for a direct 1x1), transposed.
    if g.b_layout == "im2col":
        col, _ = _im2col(t, "%B", g)
    else:
        col = _reshape(t, "collapse", "%B", [g.batch, geo["c"], geo["h"], geo["w"]], [g.batch, K, P],
                       [[0], [1], [2, 3]])
    a, _ = _transpose(t, col, [g.batch, K, P], [0, 2, 1])
    # B: filter [F, C, KH, KW] -> [F, K] -> padded [Fp, K] -> panels [NB, K, nr].
    w = _reshape(t, "collapse", "%A", [F, geo["c"], geo["kh"], geo["kw"]], [F, K], [[0], [1, 2, 3]])
    w, _ = _pad(t, w, [F, K], [Fp - F, 0])
    w = _reshape(t, "expand", w, [Fp, K], [NB, nr, K], [[0, 1], [2]])
    b, _ = _transpose(t, w, [NB, nr, K], [0, 2, 1])
    out = _region_text(t, g, lay, region, tag, a, "(b, i, k)", _t([g.batch, P, K]), b, "(jb, k, j)",
                       _t([NB, K, nr]))
    r = _reshape(t, "collapse", out, [g.batch, P, NB, nr], [g.batch, P, Fp], [[0], [1], [2, 3]])
    if Fp != F:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {P}, {F}] [1, 1, 1] "
               f": {_t([g.batch, P, Fp])} to {_t([g.batch, P, F])}")
        r = s
    r, _ = _transpose(t, r, [g.batch, P, F], [0, 2, 1])
    r = _to_result(t, r, [g.batch, F, P], [0, 2, 1], lay)
    t.emit(f"return {r} : {_t(lay.shape)}")
    return _signature(name, g, region, lay) + "\n" + t.text() + "\n}\n"


# ------------------------------------------------------------------ transform script

_ANY = "!transform.any_op"


# The K block of a B read in place (`in_place_k_block`), measured on a Sapphire Rapids core
# (48 KiB 12-way L1, 2 MiB 16-way L2), one thread, whole K against blocks of 128. A panel's rows
# are a row of B apart: their offsets within ALIAS_SPAN = 4 KiB (a page, and the L1's sets)
# repeat every 4096 / gcd(stride, 4096) rows, and kb rows crowd into a share of the L2 as though
# each were gcd(stride, 4096) bytes (at least an nr-wide panel row). Up to ALIAS_BYTES (half the
# L2) whole K is faster (512^3 1.08x, 768^3 1.16x, 1000^3 1.06x, 512x1024x768 1.16x,
# 256x256x2048 1.02-1.04x); at 1.5-2x that it evicts itself (384 rows 4 KiB apart 0.78x,
# 512x1024x512 0.70x, 256x512x2048 0.65x, 1024^3 0.65x, 1536^3 0.60x). Rows 8 KiB apart in 2 MiB
# pages (numpy's, whose L2 set bits are all virtual) measured no worse as 4 KiB (N = 2048 in
# blocks of 256 against 128: 0.99-1.04x). Rows that do not alias but span more than REACH_BYTES
# of B in one block (three quarters of the 2048 pages the second-level TLB maps) lose too: 2048
# rows of 4000 bytes 0.82x, 3072 x 4000 0.68x, 1536 x 8000 0.85x, while 768 x 8000 (6 MB) took
# 1.11x. Longer blocks are cut to the longest within both (1024^3 in blocks of 256: 1.05-1.10x
# blocks of 128; 512x1536x1536 in blocks of 512: 1.07x).
ALIAS_SPAN = 4096
ALIAS_BYTES = 1 << 20
REACH_BYTES = 6 << 20


def in_place_k_block(K: int, row_bytes: "int | None", cfg: KernelConfig) -> int:
    """The K block of a kernel whose B panel rows are `row_bytes` apart: None for a contiguous
    panel (a packed weight, a B packed per call, an im2col gathered per panel), read row after
    row: `k_block` at kc, the tile accumulating up to 1.5 kc in registers. B read in place keeps
    that block while its rows neither alias in the cache nor span too many pages (ALIAS_BYTES,
    REACH_BYTES), else takes the longest block that does: a divisor of K (no partial block)
    down to half of it, else that length; never shorter than `kc_strided`'s block. The one
    decision of the K block: etc-cpu-gemm-regions (`kernel_kc`) and etc-cpu-tile-gemm-kernels
    (from the tile layout) both ask it."""
    kb = k_block(K, cfg.kc)
    if row_bytes is None or not cfg.kc_strided:
        return kb
    alias = max(math.gcd(row_bytes, ALIAS_SPAN), 4 * cfg.nr)  # a panel row covers nr f32 at least
    longest = min(ALIAS_BYTES // alias, REACH_BYTES // row_bytes)
    if kb <= longest:
        return kb
    if longest <= cfg.kc_strided:
        return k_block(K, cfg.kc_strided)
    divisors = [d for d in range(longest // 2, longest + 1) if K % d == 0]
    return max(divisors) if divisors else longest


def kernel_kc(g: Gemm, cfg: KernelConfig) -> int:
    """The K block `g`'s kernel is built with (`in_place_k_block`): B read in place has its
    panel's rows N f32 apart, unless its im2col is gathered per panel."""
    contiguous = not b_in_place(g, cfg) or gather_per_panel(g, cfg)
    return in_place_k_block(g.K, None if contiguous else 4 * g.N, cfg)


def k_block(K: int, kc: int) -> int:
    """The K block: K itself up to 1.5 kc (one block, accumulated in registers), else a divisor of
    K near kc (static tiles: no partial block), else kc."""
    if K <= kc + kc // 2:
        return K
    divisors = [d for d in range(kc // 2, kc + kc // 4 + 1) if K % d == 0]
    return max(divisors) if divisors else kc


def _second_level(emit, fuse_into, sfx: str, panel: str, tag: str, rows: int, epilogue: bool, init: bool, kc: int,
                  K: int, cfg: KernelConfig, vector_ops: str, wide: bool = True) -> None:
    """The rows of one column-panel loop `panel` (unit dimensions folded): find its ops again
    (exactly the contraction, its init and its epilogue were fused into it), tag them, and tile
    the rows (see `transform_script`). `wide`: the panel has more than one column (a single
    column folds away like a single row)."""
    cols = ", 0" if wide else ""
    tile = f"({_ANY}) -> ({_ANY}, {_ANY})"
    emit(f"%all{sfx} = transform.structured.match ops{{[{vector_ops}]}} in {panel} : ({_ANY}) -> {_ANY}",
         f"transform.annotate %all{sfx} \"{tag}_v\" : {_ANY}",
         f"%g{sfx} = transform.collect_matching @gemm_step in {panel} : ({_ANY}) -> {_ANY}",
         f"transform.annotate %g{sfx} \"{tag}_g\" : {_ANY}")
    ep = ini = None
    if epilogue or init:
        emit(f"%el{sfx} = transform.collect_matching @elementwise in {panel} : ({_ANY}) -> {_ANY}")
        if epilogue and init:  # walk order: the init, then the epilogue
            emit(f"%in{sfx}, %ep{sfx} = transform.split_handle %el{sfx} : ({_ANY}) -> ({_ANY}, {_ANY})")
            ep, ini = f"%ep{sfx}", f"%in{sfx}"
        elif epilogue:
            ep = f"%el{sfx}"
        else:
            ini = f"%el{sfx}"
    if rows < 0:  # roles the peeled row block finds its ops by (peel below)
        for handle, role in ((f"%g{sfx}", "g"), (ep, "ep"), (ini, "in")):
            if handle:
                emit(f"transform.annotate {handle} \"{tag}_{role}\" : {_ANY}")
    dynamic = rows < 0  # a run-time row count: whole blocks of mr, the rest one row at a time
    tr = cfg.mr if dynamic else min(cfg.mr, rows)

    def peel(loop, name, ops=()):
        """Peel the partial row block; with dynamic rows, tile it again one row at a time (static
        1 x nr tiles, which vectorize like the full ones). `ops`: (root, fused producers...) of
        the loop body, found again in the peeled loop by the matchers."""
        if not dynamic and not rows % tr:
            return
        emit(f"%{name}f = transform.cast {loop} : {_ANY} to !transform.op<\"scf.for\">",
             f"%{name}p, %{name}q = transform.loop.peel %{name}f : (!transform.op<\"scf.for\">) "
             f"-> ({_ANY}, {_ANY})")
        if not dynamic:
            return
        # Fusion leaves dead clones of the fused producers in the loop: gone, each role is one op.
        emit(f"transform.apply_dce to %{name}q : {_ANY}")
        found = {}
        for role in ops:  # the clones the peel made keep the roles' tags
            emit(f"%{name}m{role} = transform.structured.match ops{{[\"linalg.generic\"]}} attributes "
                 f"{{{tag}_{role}}} in %{name}q : ({_ANY}) -> {_ANY}")
            found[role] = f"%{name}m{role}"
        root, producers = ops[0], ops[1:]
        sizes = "[1" + cols + (", 0" if root == "g" else "") + "]"
        emit(f"%{name}u, %{name}l = transform.structured.tile_using_for {found[root]} tile_sizes {sizes} : {tile}")
        fuse_into([found[p] for p in producers], f"%{name}l", f"{name}o")

    if rows == 1:  # the row dimension folded away: the panel is one row tile
        if kc < K:
            emit(f"%kb{sfx}, %lkb{sfx} = transform.structured.tile_using_for %g{sfx} tile_sizes "
                 f"[{cols[2:] + ', ' if wide else ''}{kc}] : {tile}")
        return
    if kc >= K:
        # One K block: the row tile accumulates the whole K in registers, with the init (the
        # accumulator's start) and the epilogue fused around it.
        root = ep or f"%g{sfx}"
        emit(f"%u{sfx}, %li{sfx} = transform.structured.tile_using_for {root} tile_sizes "
             f"[{tr}{cols}{'' if ep else ', 0'}] : {tile}")
        loop = fuse_into(([f"%g{sfx}"] if ep else []) + ([ini] if ini else []), f"%li{sfx}", f"rf{sfx}_")
        peel(loop, f"r{sfx}_", ("ep", "g") + (("in",) if ini else ()) if ep else ("g",) + (("in",) if ini else ()))
        return
    # K blocks of kc (the kc x nr block of B stays in L1 across the row blocks): the panel's
    # accumulator lives in cache between blocks; the init and the epilogue are row loops over
    # the panel before and after them.
    emit(f"%kb{sfx}, %lkb{sfx} = transform.structured.tile_using_for %g{sfx} tile_sizes [0{cols}, {kc}] : {tile}",
         f"%rb{sfx}, %lr{sfx} = transform.structured.tile_using_for %kb{sfx} tile_sizes [{tr}{cols}, 0] : {tile}")
    peel(f"%lr{sfx}", f"r{sfx}_", ("g",))
    for m, (op, role) in enumerate([(x, r) for x, r in ((ini, "in"), (ep, "ep")) if x]):
        emit(f"%w{sfx}_{m}, %lw{sfx}_{m} = transform.structured.tile_using_for {op} tile_sizes [{tr}{cols}] : {tile}")
        peel(f"%lw{sfx}_{m}", f"w{sfx}_{m}_", (role,))


def _split_partial_panel(width: int, cfg: KernelConfig) -> bool:
    """Is a partial column panel `width` wide split into whole vectors?

    One vector<mr x width> whose width is wider than a register and not a power of two (24,
    40, 48, 56 of 64 lanes) is an illegal LLVM vector type carried around the K loop: LLVM
    spills the accumulator and re-assembles it element by element on every k step (a 64->64
    1x1 convolution over 24x5 pixels, B read in place with a 56-wide partial panel: 160 us
    instead of 14). Split into vector-wide pieces, each is a legal register accumulator."""
    return width > cfg.vector_width and bool(width & (width - 1))


def transform_script(kernels: list, cfg: KernelConfig) -> str:
    """The tiling/vectorization script for `kernels` = [(tag, rows, has an epilogue, init is a
    generic, K block, K, columns split into panels, columns, B an im2col gathered per panel)].

    Each kernel's epilogue (tagged `<tag>_epi`; without one, the contraction tagged `<tag>`) is
    the root: tiled into batch and column panels with the contraction and its accumulator init
    fused in, unit dimensions folded, then the rows tiled into blocks of mr the same way (the
    partial block peeled), so that one mr x nr tile is accumulated over the whole K, finished by
    the epilogue in registers and stored once. The contraction is tiled into single k steps and
    vectorized into mr broadcast-FMAs of nr-wide vectors, the accumulator hoisted into registers
    across the k loop. (Folding unit dimensions replaces ops and drops their attributes: the
    ops are found again in their column-panel loop and tagged `<tag>_g` (contraction) and
    `<tag>_v` (everything the tile vectorizes).)"""
    tile = f"({_ANY}) -> ({_ANY}, {_ANY})"
    lines = ["module attributes {transform.with_named_sequence} {"]
    for matcher, dims in (("gemm_step", "%s[-1] {reduction}"), ("elementwise", "%s[all] {parallel}")):
        lines += [f"  transform.named_sequence @{matcher}(%op: {_ANY} {{transform.readonly}}) -> {_ANY} {{",
                  f"    transform.match.operation_name %op [\"linalg.generic\"] : {_ANY}",
                  f"    transform.match.structured %op : {_ANY} {{",
                  f"    ^bb0(%s: {_ANY}):",
                  f"      transform.match.structured.dim {dims} : {_ANY}",
                  "      transform.match.structured.yield",
                  "    }",
                  f"    transform.yield %op : {_ANY}",
                  "  }"]
    lines += [f"  transform.named_sequence @__transform_main(%root: {_ANY} {{transform.readonly}}) {{",
              f"    %f = transform.structured.match ops{{[\"func.func\"]}} in %root : ({_ANY}) -> {_ANY}"]

    def emit(*more):
        lines.extend("    " + m for m in more)

    panels = []

    def match(name, attr, where="%root", ops='"linalg.generic"'):
        emit(f"{name} = transform.structured.match ops{{[{ops}]}} attributes {{{attr}}} in {where} "
             f": ({_ANY}) -> {_ANY}")

    vector_ops = '"linalg.generic", "linalg.fill", "linalg.broadcast", "linalg.copy"'
    fuse = f"({_ANY}, {_ANY}) -> ({_ANY}, {_ANY})"

    def fuse_into(producers: list, loop: str, name: str) -> str:
        """Fuse each of `producers` (in order) into `loop`; returns the loop's last handle."""
        for m, producer in enumerate(producers):
            emit(f"%{name}{m}, %{name}c{m} = transform.structured.fuse_into_containing_op {producer} into {loop} "
                 f": {fuse}")
            loop = f"%{name}c{m}"
        return loop

    for n, (tag, rows, epilogue, init, kc, K, split, cols, col) in enumerate(kernels):
        # Batch and column panels: the epilogue's (b, i, jb, j) or (b, i, n), or the contraction's
        # (b, jb, i, j, k): loops b, then panels.
        match(f"%e{n}", f"{tag}_epi" if epilogue else tag)
        tn = min(cfg.nr, cols)
        if not split:
            sizes = f"[1, 0, {tn}] interchange = [0, 2, 1]"
        else:
            sizes = "[1, 0, 1, 0] interchange = [0, 2, 1, 3]" if epilogue else "[1, 1, 0, 0, 0]"
        emit(f"%t{n}, %lb{n}, %lj{n} = transform.structured.tile_using_for %e{n} tile_sizes {sizes} "
             f": ({_ANY}) -> ({_ANY}, {_ANY}, {_ANY})")
        producers = []
        if epilogue:
            match(f"%gm{n}", tag)
            producers.append(f"%gm{n}")
        if init:
            match(f"%im{n}", f"{tag}_init")
            producers.append(f"%im{n}")
        panel = fuse_into(producers, f"%lj{n}", f"pf{n}_")
        if col:
            # The im2col gathered per column panel into a [K, nr] buffer (in cache while every
            # row block reads it), one nr-wide vector gather per k (masked in the partial panel).
            match(f"%cm{n}", f"{tag}_col")
            emit(f"%cf{n}, %cp{n} = transform.structured.fuse_into_containing_op %cm{n} into {panel} : {fuse}",
                 f"%ct{n}, %cl{n} = transform.structured.tile_using_for %cf{n} tile_sizes [0, 1, 0] : {tile}",
                 f"transform.structured.vectorize %ct{n} vector_sizes [1, 1, {tn}] {{vectorize_nd_extract}} "
                 f": {_ANY}",
                 # its buffer: the panel's slice of a whole-size tensor.empty, made panel-sized; the
                 # partial panel's masks onto the gather and the store themselves (a vector.mask
                 # region around a store does not survive the canonicalization after the peel)
                 f"transform.apply_patterns to %cp{n} {{ transform.apply_patterns.tensor.fold_tensor_empty "
                 f"transform.apply_patterns.vector.lower_masked_transfers }} : {_ANY}")
            panel = f"%cp{n}"
        # Column panels are independent (each writes its own columns): the threaded entry
        # gives each thread a chunk of them (parallel.py).
        emit(f"transform.annotate {panel} \"{THREAD_SPLIT}\" : {_ANY}")
        panels.append(panel)
    for n, (tag, rows, epilogue, init, kc, K, split, cols, col) in enumerate(kernels):
        # Unit dimensions folded inside this panel loop only: the rest of the function (a
        # depthwise convolution's tensor.pad, its consumers) stays as the next passes match it.
        # A partial panel's width is dynamic until peeling: the slices folding unit dimensions
        # read it back through tensor.dim; resolved, each extract of an insert folds away.
        emit(f"transform.apply_patterns to {panels[n]} {{ "
             f"transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices }} : {_ANY}",
             f"transform.apply_patterns to %f {{ "
             f"transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims "
             f"transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice }} : {_ANY}")
        _second_level(emit, fuse_into, f"{n}", panels[n], tag, rows, epilogue, init, kc, K, cfg, vector_ops,
                      wide=split or cols > 1)
        tn = min(cfg.nr, cols)
        if not split and cols % tn:
            # The partial column panel, peeled once everything inside is tiled: after
            # canonicalization both panels have static widths (nr and cols % nr).
            emit(f"%pc{n} = transform.cast {panels[n]} : {_ANY} to !transform.op<\"scf.for\">",
                 f"%pm{n}, %pr{n} = transform.loop.peel %pc{n} : (!transform.op<\"scf.for\">) -> ({_ANY}, {_ANY})")
            if _split_partial_panel(cols % tn, cfg):  # found again after canonicalization (below)
                match(f"%pg{n}", f"{tag}_g", where=f"%pr{n}")
                emit(f"transform.annotate %pg{n} \"{tag}_pg\" : {_ANY}")
    # The K-block loops carry the accumulator with the width the panel had when they were
    # tiled (dynamic in a partial panel of B read in place, until the peel): the sizes read back
    # through them (tensor.dim of a loop result) resolve to the static widths the loops start from.
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.canonicalization "
         f"transform.apply_patterns.linalg.tiling_canonicalization "
         f"transform.apply_patterns.scf.for_loop_canonicalization }} : {_ANY}")
    for n, (tag, rows, epilogue, init, kc, K, split, cols, col) in enumerate(kernels):
        width = 0 if split else cols % min(cfg.nr, cols)
        if _split_partial_panel(width, cfg):
            # Its contraction is split into whole vectors and the rest, each accumulated over K on its own.
            match(f"%kp{n}", f"{tag}_pg")
            emit(f"transform.foreach %kp{n} : {_ANY} {{", f"^bb0(%rest0: {_ANY}):")
            for c in range(-(-width // cfg.vector_width) - 1):
                emit(f"  %split{c} = transform.structured.split %rest{c} after {cfg.vector_width} "
                     f"{{dimension = {int(rows > 1 or rows < 0)}}} : {_ANY}",
                     f"  %chunk{c}, %rest{c + 1} = transform.split_handle %split{c} : ({_ANY}) -> ({_ANY}, {_ANY})")
            emit("}")
        match(f"%s{n}", f"{tag}_g")
        lead = "0, " * (int(rows > 1 or rows < 0) + int(split or cols > 1))
        emit(f"%k{n}, %lk{n} = transform.structured.tile_using_for %s{n} tile_sizes [{lead}1] : {tile}",
             f"transform.structured.vectorize %k{n} : {_ANY}")
        match(f"%o{n}", f"{tag}_v", ops=vector_ops)
        emit(f"transform.structured.vectorize %o{n} : {_ANY}")
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.vector.transfer_permutation_patterns "
         f"transform.apply_patterns.vector.reduction_to_contract }} : {_ANY}",
         f"transform.apply_patterns to %f {{ transform.apply_patterns.vector.lower_contraction lowering_strategy = "
         f"\"outerproduct\" transform.apply_patterns.vector.lower_outerproduct }} : {_ANY}")
    for n, _ in enumerate(kernels):
        emit(f"transform.loop.hoist_loop_invariant_subsets %lk{n} : {_ANY}")
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice "
         f"transform.apply_patterns.tensor.fold_tensor_subset_ops }} : {_ANY}",
         "transform.yield")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the strategy


def _flops(g: Gemm) -> int:
    return 2 * g.batch * g.M * g.N * g.K


def skip_reason(g: Gemm, cfg: KernelConfig, min_flops: int | None) -> "tuple[str, str] | None":
    """None when the GEMM kernel takes `g`; else (path, reason) for the decision record.

    K >= 2 always (a unit K has no reduction loop to tile); unless forced (min_flops=0), enough
    work and enough rows/columns that zero padding to the register tile does not dominate.
    A single row (M = 1: one-token decode, a classifier on a pooled vector) is memory bound.
    Through a weight it is still the GEMM kernel: the weight is packed into contiguous panels
    when the blob is built, streamed once, the row accumulated in registers (measured against
    the loop nest it replaced: Llama's 288->32000 head 1.72 -> 1.33 ms, 288->768 0.90x,
    768->3072 within noise). With an activation as B (attention at decode) it is a GEMV: a
    loop nest whose reduction LLVM vectorizes, nothing to pack."""
    rows, cols = (g.N, g.M) if g.transposed else (g.M, g.N)
    if g.K < 2:
        return "small", "K = 1: an outer product, no reduction to tile"
    if min_flops == 0:
        return None
    limit = cfg.min_flops if min_flops is None else min_flops
    if rows < cfg.mr // 2 and not g.transposed and not _is_constant(g.b):
        return "gemv", f"{rows} row(s) of output times an activation: a matrix-vector product, memory bound"
    if _flops(g) < limit:
        return "small", f"{_flops(g)} flops, below the {limit} that pay for packing"
    if rows < cfg.mr // 2 and not g.transposed and cols >= cfg.nr // 2:
        return None  # through a weight: see above
    if rows < cfg.mr // 2 or cols < cfg.nr // 2:
        return "small", f"{rows}x{cols} output is smaller than half the {cfg.mr}x{cfg.nr} register tile"
    return None


_COUNTER = [0]

# On each kernel call (etc-cpu-gemm-kernels -> etc-cpu-gemm-regions): the contraction it stands for.
GEMM_ATTR = "etc.cpu.gemm"


def _to_attr(value):
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    return ir.DictAttr.get({k: _to_attr(v) for k, v in value.items()})


def _from_attr(attr):
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.StringAttr):
        return attr.value
    d = ir.DictAttr(attr)
    return {d[i].name: _from_attr(d[i].attr) for i in range(len(d))}


def describe(g: Gemm):
    """The geometry of `g` as the dictionary attribute a kernel call carries (`GEMM_ATTR`)."""
    fields = {"batch": g.batch, "M": g.M, "N": g.N, "K": g.K, "a_batched": g.a_batched, "b_layout": g.b_layout,
              "b_batched": g.b_batched, "transposed": g.transposed}
    if g.dynamic_rows:  # M is then the rows' upper bound
        fields["dynamic_rows"] = True
    if g.conv is not None:
        fields["conv"] = g.conv
    return _to_attr(fields)


def from_call(call) -> Gemm:
    """The Gemm a kernel call stands for (its operands A, B, C and its `GEMM_ATTR`)."""
    d = _from_attr(call.attributes[GEMM_ATTR])
    a, b, c = call.operands[0], call.operands[1], call.operands[2]
    return Gemm(None, d["batch"], d["M"], d["N"], d["K"], a, d["a_batched"], b, d["b_layout"], d["b_batched"], c,
                call.results[0].type, conv=d.get("conv"), transposed=d["transposed"],
                dynamic_rows=d.get("dynamic_rows", False))


def _rewrite_list(module_op, cfg, gemms: list, kind: str) -> list[str]:
    """Replace each contraction of `gemms` by a call to its kernel, a private declaration that
    etc-cpu-gemm-regions defines once it knows the kernel's init and epilogue; returns the
    kernels' names."""
    from torch_mlir.dialects import func as func_d

    body = module_op.regions[0].blocks[0]
    names = []
    for position, g in enumerate(gemms):
        _COUNTER[0] += 1
        name = f"etc_gemm_{kind}{_COUNTER[0]}"
        with ir.InsertionPoint(body), ir.Location.unknown():
            fn = func_d.FuncOp(name, ir.FunctionType.get([g.a.type, g.b.type, g.c.type], [g.result_type]),
                               visibility="private")
        del fn
        with ir.InsertionPoint(g.op), g.op.location:
            call = func_d.CallOp([g.result_type], ir.FlatSymbolRefAttr.get(name), [g.a, g.b, g.c])
        call.operation.attributes[GEMM_ATTR] = describe(g)
        g.op.results[0].replace_all_uses_with(call.results[0])
        # A later contraction may read this one's result (MobileNetV2's projection 1x1 feeding
        # the next expansion): point it at the call before the op, and its value, are freed.
        for later in gemms[position + 1:]:
            for field_name in ("a", "b", "c"):
                if getattr(later, field_name) == g.op.results[0]:
                    setattr(later, field_name, call.results[0])
        g.op.erase()
        names.append(name)
    return names


def _apply_script(module_op, script: str) -> None:
    from torch_mlir.dialects.transform import interpreter

    library = ir.Module.parse(script, module_op.context)
    (entry,) = [op for op in library.body.operations if "sym_name" in op.attributes
                and ir.StringAttr(op.attributes["sym_name"]).value == "__transform_main"]
    interpreter.apply_named_sequence(module_op, entry, library)


# ------------------------------------------------------------------ the im2col's row loads

# A panel row whose columns come from at most this many input rows is loaded as that many masked
# contiguous loads, merged; from more (a stride > 1 along the width), it stays one vector gather.
MAX_ROW_LOADS = 8


def _owner(value, name: str):
    op = defining_op(value)
    return op if op is not None and op.name == name else None


def _constant_values(value) -> "list | None":
    op = _owner(value, "arith.constant")
    if op is None:
        return None
    try:
        return list(ir.DenseIntElementsAttr(op.attributes["value"]))
    except ValueError:  # not a dense integer attribute
        return None


def contiguous_row_loads(module_op) -> int:
    """Each full panel row of a per-panel im2col (`_im2col_gather`, vectorized into one nr-wide
    vector.gather per k) as masked contiguous loads instead: with stride 1 along the width, the
    panel's columns n0 + j read X[koff[k] + noff[n0] + j + shift_j], shift_j constant per column
    (the input row the column falls in, times the input's extra width), so the row is one masked
    load per distinct shift, merged (an AVX-512 merge-masked load each) instead of a gather of
    about 8 cycles per 16 lanes (ResNet's 3x3 64@56: 2.08 -> 1.88 ms). The partial panel (its
    mask a constant_mask) keeps its gather. Returns how many gathers were replaced."""
    from torch_mlir.dialects import arith, tensor, vector

    done = 0
    for gather in walk(module_op, ("vector.gather",)):
        if len(gather.operands) != 6:  # base[i0, i1] (an image flattened per batch), indices, mask, pass-through
            continue
        base, i0, i1, idx, mask, _ = list(gather.operands)
        vtype = ir.VectorType(gather.results[0].type)
        width = vtype.shape[-1]
        if _owner(mask, "arith.constant") is None or any(d != 1 for d in vtype.shape[:-1]):
            continue
        cast = _owner(idx, "arith.index_cast")
        add = cast and _owner(cast.operands[0], "arith.addi")
        if add is None:
            continue
        reads = {}
        for v in add.operands:  # broadcast(koff[k]: vector<1>) and shape_cast(noff[n0:n0 + width])
            op = _owner(v, "vector.broadcast") or _owner(v, "vector.shape_cast")
            read = op and _owner(op.operands[0], "vector.transfer_read")
            if read is not None:
                reads[op.name] = read
        if set(reads) != {"vector.broadcast", "vector.shape_cast"}:
            continue
        koff_read, noff_read = reads["vector.broadcast"], reads["vector.shape_cast"]
        noff = _constant_values(noff_read.operands[0])
        if noff is None or len(noff_read.operands) != 3 or len(noff) < width:
            continue
        full = len(noff) // width * width
        shift = [noff[n] - noff[n - n % width] - n % width for n in range(full)]
        shifts = sorted(set(shift))
        if len(shifts) > MAX_ROW_LOADS:
            continue
        element = ir.RankedTensorType(noff_read.operands[0].type).element_type
        with ir.InsertionPoint(gather), gather.location:
            n0 = noff_read.operands[1]
            table_type = ir.RankedTensorType.get([full], element)
            table = arith.ConstantOp(table_type, ir.DenseIntElementsAttr.get(
                np.array(shift, dtype=np.int32 if str(element) == "i32" else np.int64), type=table_type)).result
            flat = ir.VectorType.get([width], element)
            zero_i = arith.ConstantOp(element, ir.IntegerAttr.get(element, 0)).result
            ident = ir.AffineMap.get_minor_identity(1, 1)
            column_shift = vector.TransferReadOp(flat, table, [n0], ident, zero_i, [True]).result
            kv = vector.ExtractOp(koff_read.result, [], [0]).result
            start = arith.AddIOp(kv, tensor.ExtractOp(noff_read.operands[0], [n0]).result).result
            start = arith.IndexCastOp(ir.IndexType.get(), start).result
            row_type = ir.VectorType.get([width], vtype.element_type)
            base_map = ir.AffineMap.get_minor_identity(ir.RankedTensorType(base.type).rank, 1)
            merged = None
            for s in shifts:
                s_vec = arith.ConstantOp(flat, ir.DenseElementsAttr.get_splat(flat, ir.IntegerAttr.get(element, s)))
                m = arith.CmpIOp(arith.CmpIPredicate.eq, column_shift, s_vec.result).result
                at = arith.AddIOp(arith.AddIOp(i1, start).result,
                                  arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr.get(ir.IndexType.get(), s)).result
                                  ).result
                pad_f = arith.ConstantOp(vtype.element_type, ir.FloatAttr.get(vtype.element_type, 0.0)).result
                row = vector.TransferReadOp(row_type, base, [i0, at], base_map, pad_f, [True], mask=m).result
                merged = row if merged is None else arith.SelectOp(m, row, merged).result
            out = vector.ShapeCastOp(vtype, merged).result
        gather.results[0].replace_all_uses_with(out)
        gather.erase()
        done += 1
    return done
