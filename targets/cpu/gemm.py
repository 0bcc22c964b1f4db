"""Packed, register-tiled GEMM kernels for contractions (the library behind `etc-cpu-gemm-kernels`).

Every static f32 contraction big enough to pay for it becomes one *GEMM kernel*
(a private function built as text, called, then inlined):

    A  [M, K]            read in place (row blocks of mr; the partial block is peeled, not padded)
    Bp [NB, K, nr]       B packed into column panels of nr = a few vector widths (zero padded to
                         a multiple of nr), or read in place through expand_shape when N % nr == 0
                         and its rows are not a multiple of 2 KiB apart
    C  [M, NB, nr]       the output itself, seen through expand_shape (no copy unless N % nr)

and a transform-dialect script (built here as text, applied with the transform
interpreter) tiles it Goto-style: batch, K blocks of kc (a divisor of K near 128:
the kc x nr B micro-panel stays in L1), column panels, row blocks of mr, single
k steps. The mr x nr x 1 step is vectorized, turned into `vector.contract`,
lowered to outer products and those to `vector.fma` on nr-wide vectors; the
mr x nr accumulator (6 x 64 f32 = 24 zmm registers on AVX-512; see isa.py) is
hoisted out of the k loop, so the inner loop is a register-tiled FMA microkernel:
mr broadcasts, nr/lanes loads and mr*nr/lanes FMAs per k step.

Recognized: matmul-like `linalg.generic`s (named matmuls are generalized first; B read
through a transposing generic, as torch-mlir lowers linear layers, is packed straight
from the weight), `linalg.conv_2d_nchw_fchw` (any stride and dilation, padding already
materialized) as filter[F, C*KH*KW] x im2col[C*KH*KW, OH*OW] per image (the im2col is an
affine gather; 1x1 stride-1 convolutions read the input in place), or transposed,
im2col^T x filter^T, when the output has few pixels and many filters (`transpose_conv`).
`why_not(op, ...)` says why a contraction is not taken; the pass records it.
The code calls no library (no BLAS, no OpenMP).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch_mlir import ir

from etc.targets.cpu.parallel import THREAD_SPLIT  # marks the loop over column panels
from etc.targets.cpu.passes._util import defining_op

# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class KernelConfig:
    """Register tile mr x nr (nr a multiple of the vector width), K block kc (isa.py's row)."""

    vector_width: int  # f32 lanes
    mr: int
    nr: int
    kc: int
    min_flops: int = 2 * 32 * 32 * 32  # smaller contractions run as plain loops (a recorded decision)


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


def _is_f32(v) -> bool:
    return isinstance(v.type, ir.RankedTensorType) and str(ir.RankedTensorType(v.type).element_type) == "f32" and \
        ir.RankedTensorType(v.type).has_static_shape


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
    if not all(_is_f32(v) for v in op.operands):
        return None, "not static f32"
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
    g = Gemm(op, batch, M, N, K, a_val, bool(a_b), b_val, layout, bool(b_b), op.operands[2], op.results[0].type)
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


def _t(shape) -> str:
    return "tensor<" + "x".join(str(s) for s in shape) + "xf32>"


class _Text:
    def __init__(self):
        self.lines = []
        self.n = 0

    def fresh(self, stem="v") -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)


def _pad(t: _Text, value: str, shape: list, high: list) -> tuple[str, list]:
    if not any(high):
        return value, shape
    new = [s + h for s, h in zip(shape, high)]
    out = t.fresh("pad")
    idx = ", ".join(f"%i{i}: index" for i in range(len(shape)))
    t.emit(f"{out} = tensor.pad {value} low[{', '.join('0' for _ in shape)}] high[{', '.join(map(str, high))}] {{")
    t.emit(f"^bb0({idx}):")
    t.emit("  tensor.yield %zero : f32")
    t.emit(f"}} : {_t(shape)} to {_t(new)}")
    return out, new


def _reshape(t: _Text, kind: str, value: str, src: list, dst: list, groups: list) -> str:
    out = t.fresh("r")
    g = "[" + ", ".join("[" + ", ".join(map(str, grp)) + "]" for grp in groups) + "]"
    if kind == "expand":
        t.emit(f"{out} = tensor.expand_shape {value} {g} output_shape [{', '.join(map(str, dst))}] "
               f": {_t(src)} into {_t(dst)}")
    else:
        t.emit(f"{out} = tensor.collapse_shape {value} {g} : {_t(src)} into {_t(dst)}")
    return out


def _transpose(t: _Text, value: str, src: list, perm: list) -> tuple[str, list]:
    dst = [src[p] for p in perm]
    e, out = t.fresh("e"), t.fresh("tr")
    t.emit(f"{e} = tensor.empty() : {_t(dst)}")
    t.emit(f"{out} = linalg.transpose ins({value} : {_t(src)}) outs({e} : {_t(dst)}) permutation = [{', '.join(map(str, perm))}]")
    return out, dst


def _im2col(t: _Text, x: str, g: Gemm) -> tuple[str, list]:
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


def kernel_function(g: Gemm, cfg: KernelConfig, name: str, tag: str) -> str:
    """Text of `func.func private @name(A, B, C) -> result` computing `g` in the packed form.

    A is read in place, row blocks of mr with the partial one peeled. (Packing A into
    [M/mr, K, mr] micro-panels measured within 3% of in-place A on Zen 5 at M=N=K=1024 and
    512x1024x512, and costs an M*K copy: not done.)"""
    nr = cfg.nr
    Mp = g.M  # in place: a partial row block is peeled, not padded
    Np = -(-g.N // nr) * nr
    NB = Np // nr
    t = _Text()
    t.emit("%zero = arith.constant 0.0 : f32")
    a_shape = list(ir.RankedTensorType(g.a.type).shape)
    b_shape = list(ir.RankedTensorType(g.b.type).shape)
    c_shape = list(ir.RankedTensorType(g.c.type).shape)
    r_shape = list(ir.RankedTensorType(g.result_type).shape)

    # A -> [B?, Mp, K]
    a = "%A"
    if g.conv is not None:  # filter [F, C, KH, KW] -> [F, CKK]
        a = _reshape(t, "collapse", a, a_shape, [g.M, g.K], [[0], [1, 2, 3]])
        a_shape = [g.M, g.K]

    # B -> packed
    b = "%B"
    lead = [g.batch] if g.b_batched else []
    if g.b_layout in ("kn", "im2col"):
        if g.b_layout == "im2col":
            b, b_shape = _im2col(t, b, g)
        elif g.conv is not None:  # 1x1: X [N, C, H, W] -> [N, C, H*W]
            b = _reshape(t, "collapse", b, b_shape, [g.batch, g.K, g.N], [[0], [1], [2, 3]])
            b_shape = [g.batch, g.K, g.N]
        b_direct = Np == g.N and not _should_pack(g, cfg)
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 1) + [Np - g.N])
        b = _reshape(t, "expand", b, b_shape, lead + [g.K, NB, nr], [[i] for i in range(len(lead))] +
                     [[len(lead)], [len(lead) + 1, len(lead) + 2]])
        if not b_direct:
            n = len(lead)
            b, _ = _transpose(t, b, lead + [g.K, NB, nr], list(range(n)) + [n + 1, n, n + 2])
    else:  # "nk": [B?, N, K]
        b, b_shape = _pad(t, b, b_shape, [0] * (len(b_shape) - 2) + [Np - g.N, 0])
        n = len(lead)
        b = _reshape(t, "expand", b, b_shape, lead + [NB, nr, g.K], [[i] for i in range(n)] + [[n, n + 1], [n + 2]])
        b, _ = _transpose(t, b, lead + [NB, nr, g.K], list(range(n)) + [n, n + 2, n + 1])
        b_direct = False

    # C -> [Bc, Mp, NB, nr]: pad in its own rank first (so a pad of a fill folds into a bigger fill)
    c = "%C"
    if g.conv is not None:  # [N, F, OH, OW] -> [N, F, P]
        c = _reshape(t, "collapse", c, c_shape, [g.batch, g.M, g.N], [[0], [1], [2, 3]])
        c_shape = [g.batch, g.M, g.N]
    c, c_shape = _pad(t, c, c_shape, [0] * (len(c_shape) - 2) + [Mp - g.M, Np - g.N])
    if len(c_shape) == 2:
        c = _reshape(t, "expand", c, c_shape, [1, Mp, Np], [[0, 1], [2]])
    c4 = _reshape(t, "expand", c, [g.batch, Mp, Np], [g.batch, Mp, NB, nr], [[0], [1], [2, 3]])

    # the kernel: dims (b, jb, i, j, k)
    ab = "b, " if g.a_batched else ""
    bb = "b, " if g.b_batched else ""
    bmap = f"({bb}k, jb, j)" if b_direct else f"({bb}jb, k, j)"
    b_type = _t(lead + ([g.K, NB, nr] if b_direct else [NB, g.K, nr]))
    a_type = _t(([g.batch] if g.a_batched else []) + [Mp, g.K])
    c_type = _t([g.batch, Mp, NB, nr])
    out = _mul_add_generic(t, "b, jb, i, j, k", (f"({ab}i, k)", bmap, "(b, i, jb, j)"), (a, b, c4),
                           (a_type, b_type, c_type), tag)

    # back to the result type
    r = _reshape(t, "collapse", out, [g.batch, Mp, NB, nr], [g.batch, Mp, Np], [[0], [1], [2, 3]])
    if Mp != g.M or Np != g.N:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {g.M}, {g.N}] [1, 1, 1] "
               f": {_t([g.batch, Mp, Np])} to {_t([g.batch, g.M, g.N])}")
        r = s
    if g.conv is not None:
        r = _reshape(t, "expand", r, [g.batch, g.M, g.N], r_shape, [[0], [1], [2, 3]])
    elif len(r_shape) == 2:
        r = _reshape(t, "collapse", r, [1, g.M, g.N], r_shape, [[0, 1], [2]])
    t.emit(f"return {r} : {_t(r_shape)}")
    a0 = ir.RankedTensorType(g.a.type)
    head = (f"func.func private @{name}(%A: {a0}, %B: {g.b.type}, %C: {g.c.type}) -> {g.result_type} {{")
    return head + "\n" + "\n".join(t.lines) + "\n}\n"


def _mul_add_generic(t: _Text, dims: str, maps: tuple, values: tuple, types: tuple, tag: str) -> str:
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

    Column panels are nr wide and zero padded: a late MobileNet layer (P = OH*OW = 9 output
    pixels, F = 256 filters) would fill 9 of 64 lanes. Transposed, the filters run along the
    vector (F padded to nr) and the pixels become rows (a peeled partial row block, not padded).
    Chosen when the padded work shrinks by a quarter or more: the transposes of the im2col and
    the output cost P*(K+F) moves against P*F*K FMAs."""
    if g.conv is None:
        return False
    padded = g.M * (-(-g.N // cfg.nr) * cfg.nr)
    padded_t = g.N * (-(-g.M // cfg.nr) * cfg.nr)
    return padded_t * 5 <= padded * 4


def transposed_conv_kernel(g: Gemm, cfg: KernelConfig, name: str, tag: str) -> str:
    """Text of `func.func private @name(filter, X, C) -> result` for a transposed convolution:
    A = im2col^T [b, P, K] (read in place), B = filter [F, K] packed as in the "nk" layout,
    C = C^T [b, P, F] padded to whole column panels. Same loop nest as `kernel_function`."""
    nr, P, F, K, geo = cfg.nr, g.N, g.M, g.K, g.conv
    Fp = -(-F // nr) * nr
    NB = Fp // nr
    t = _Text()
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
    # C: [b, F, OH, OW] -> [b, F, P] -> [b, P, F] -> padded [b, P, Fp] -> [b, P, NB, nr].
    c = _reshape(t, "collapse", "%C", [g.batch, F, geo["oh"], geo["ow"]], [g.batch, F, P], [[0], [1], [2, 3]])
    c, _ = _transpose(t, c, [g.batch, F, P], [0, 2, 1])
    c, _ = _pad(t, c, [g.batch, P, F], [0, 0, Fp - F])
    c4 = _reshape(t, "expand", c, [g.batch, P, Fp], [g.batch, P, NB, nr], [[0], [1], [2, 3]])
    c_type = _t([g.batch, P, NB, nr])
    out = _mul_add_generic(t, "b, jb, i, j, k", ("(b, i, k)", "(jb, k, j)", "(b, i, jb, j)"), (a, b, c4),
                           (_t([g.batch, P, K]), _t([NB, K, nr]), c_type), tag)
    r = _reshape(t, "collapse", out, [g.batch, P, NB, nr], [g.batch, P, Fp], [[0], [1], [2, 3]])
    if Fp != F:
        s = t.fresh("s")
        t.emit(f"{s} = tensor.extract_slice {r}[0, 0, 0] [{g.batch}, {P}, {F}] [1, 1, 1] "
               f": {_t([g.batch, P, Fp])} to {_t([g.batch, P, F])}")
        r = s
    r, _ = _transpose(t, r, [g.batch, P, F], [0, 2, 1])
    r_shape = list(ir.RankedTensorType(g.result_type).shape)
    r = _reshape(t, "expand", r, [g.batch, F, P], r_shape, [[0], [1], [2, 3]])
    t.emit(f"return {r} : {_t(r_shape)}")
    head = f"func.func private @{name}(%A: {g.a.type}, %B: {g.b.type}, %C: {g.c.type}) -> {g.result_type} {{"
    return head + "\n" + "\n".join(t.lines) + "\n}\n"


def _should_pack(g: Gemm, cfg: KernelConfig) -> bool:
    """Pack B when its rows are a multiple of 2 KiB apart (the kc rows of a micro-panel would share
    few L1 sets) and the copy (N*K moves) is small against the work (M*N*K FMAs). Measured: packing
    costs 15% on the MobileNet 1x1 convolution (K=32) and is within noise at 512..1024."""
    row_bytes = g.N * 4
    return g.M >= 256 and g.K >= 256 and row_bytes % 2048 == 0


# ------------------------------------------------------------------ transform script


def k_block(K: int, cfg: KernelConfig) -> int:
    """The K block: a divisor of K near cfg.kc (static tiles: no partial block), else cfg.kc."""
    if K <= cfg.kc + cfg.kc // 2:
        return K
    divisors = [d for d in range(cfg.kc // 2, cfg.kc + cfg.kc // 4 + 1) if K % d == 0]
    return max(divisors) if divisors else cfg.kc


def transform_script(tags: list, cfg: KernelConfig, rows: list, kcs: list) -> str:
    """The tiling/vectorization script for the kernels tagged `tags` (rows[i]: M; kcs[i]: K block)."""
    any_op = "!transform.any_op"
    tile = f"({any_op}) -> ({any_op}, {any_op})"
    lines = ["module attributes {transform.with_named_sequence} {",
             f"  transform.named_sequence @__transform_main(%root: {any_op} {{transform.readonly}}) {{",
             f"    %f = transform.structured.match ops{{[\"func.func\"]}} in %root : ({any_op}) -> {any_op}"]

    def emit(*more):
        lines.extend("    " + m for m in more)

    def patterns(*names):
        emit("transform.apply_patterns to %f {", *["  transform.apply_patterns." + n for n in names],
             f"}} : {any_op}")

    def sizes(*values):
        return "[" + ", ".join(map(str, values)) + "]"

    for i, tag in enumerate(tags):
        z = [0] * 5
        b_, kb, jb = list(z), list(z), list(z)
        b_[0], kb[-1], jb[1] = 1, kcs[i], 1
        emit(f"%g{i} = transform.structured.match ops{{[\"linalg.generic\"]}} attributes {{{tag}}} in %root : ({any_op}) -> {any_op}",
             f"%a{i}, %lb{i} = transform.structured.tile_using_for %g{i} tile_sizes {sizes(*b_)} : {tile}",
             f"%b{i}, %lc{i} = transform.structured.tile_using_for %a{i} tile_sizes {sizes(*kb)} : {tile}",
             f"%c{i}, %lj{i} = transform.structured.tile_using_for %b{i} tile_sizes {sizes(*jb)} : {tile}",
             # Column panels are independent (each writes its own C columns, across all K blocks):
             # the threaded entry gives each thread a chunk of them (parallel.py).
             f"transform.annotate %lj{i} \"{THREAD_SPLIT}\" : {any_op}")
    patterns("linalg.fold_unit_extent_dims_via_slices")  # (1, 1, M, nr, kc) -> (M, nr, kc)
    for i, tag in enumerate(tags):
        emit(f"%d{i} = transform.structured.match ops{{[\"linalg.generic\"]}} in %lj{i} : ({any_op}) -> {any_op}")
        if rows[i] == 1:  # the row dim folded away
            emit(f"transform.annotate %d{i} \"{tag}_rows\" : {any_op}")
            continue
        emit(f"%e{i}, %li{i} = transform.structured.tile_using_for %d{i} tile_sizes [{cfg.mr}, 0, 0] : {tile}",
             f"transform.annotate %e{i} \"{tag}_rows\" : {any_op}")
        if rows[i] % cfg.mr:
            emit(f"%lf{i} = transform.cast %li{i} : {any_op} to !transform.op<\"scf.for\">",
                 f"%p{i}, %q{i} = transform.loop.peel %lf{i} : (!transform.op<\"scf.for\">) -> ({any_op}, {any_op})")
    patterns("canonicalization", "linalg.tiling_canonicalization")
    for i, tag in enumerate(tags):
        emit(f"%h{i} = transform.structured.match ops{{[\"linalg.generic\"]}} attributes {{{tag}_rows}} in %root : ({any_op}) -> {any_op}",
             f"%v{i}, %lk{i} = transform.structured.tile_using_for %h{i} tile_sizes "
             f"[{'0, ' if rows[i] > 1 else ''}0, 1] : {tile}",
             f"transform.structured.vectorize %v{i} : {any_op}")
    patterns("vector.transfer_permutation_patterns", "vector.reduction_to_contract")
    patterns("vector.lower_contraction lowering_strategy = \"outerproduct\"", "vector.lower_outerproduct")
    for i, _ in enumerate(tags):
        emit(f"transform.loop.hoist_loop_invariant_subsets %lk{i} : {any_op}")
    patterns("tensor.merge_consecutive_insert_extract_slice", "tensor.fold_tensor_subset_ops")
    emit("transform.yield")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the strategy


def _flops(g: Gemm) -> int:
    return 2 * g.batch * g.M * g.N * g.K


def skip_reason(g: Gemm, cfg: KernelConfig, min_flops: int | None) -> "tuple[str, str] | None":
    """None when the GEMM kernel takes `g`; else (path, reason) for the decision record.

    K >= 2 always (a unit K has no reduction loop to tile); unless forced (min_flops=0), enough
    work and enough rows/columns that zero padding to the register tile does not dominate.
    A single row (M = 1: one-token decode, a classifier on a pooled vector) is a GEMV: memory
    bound, it streams the weight once through plain loops whose reduction LLVM vectorizes."""
    rows, cols = (g.N, g.M) if g.transposed else (g.M, g.N)
    if g.K < 2:
        return "small", "K = 1: an outer product, no reduction to tile"
    if min_flops == 0:
        return None
    if rows < cfg.mr // 2 and not g.transposed:
        return "gemv", f"{rows} row(s) of output: a matrix-vector product, memory bound"
    limit = cfg.min_flops if min_flops is None else min_flops
    if _flops(g) < limit:
        return "small", f"{_flops(g)} flops, below the {limit} that pay for packing"
    if rows < cfg.mr // 2 or cols < cfg.nr // 2:
        return "small", f"{rows}x{cols} output is smaller than half the {cfg.mr}x{cfg.nr} register tile"
    return None


_COUNTER = [0]


def _rewrite_list(module_op, cfg, gemms: list, kind: str) -> list[str]:
    """Replace each contraction of `gemms` by a call to its kernel function (added to the module);
    returns the tags of the kernels' contractions for `transform_script`."""
    from torch_mlir.dialects import func as func_d

    body = module_op.regions[0].blocks[0]
    tags = []
    for position, g in enumerate(gemms):
        _COUNTER[0] += 1
        name = f"etc_gemm_{kind}{_COUNTER[0]}"
        tag = f"etc.{name}"
        if g.transposed:
            text = transposed_conv_kernel(g, cfg, name, tag)
        else:
            text = kernel_function(g, cfg, name, tag)
        kernel = ir.Module.parse(text, module_op.context)
        fn = kernel.body.operations[0]
        fn.operation.detach_from_parent()
        body.append(fn)
        with ir.InsertionPoint(g.op), g.op.location:
            call = func_d.CallOp([g.result_type], ir.FlatSymbolRefAttr.get(name), [g.a, g.b, g.c])
        g.op.results[0].replace_all_uses_with(call.results[0])
        # A later contraction may read this one's result (MobileNetV2's projection 1x1 feeding
        # the next expansion): point it at the call before the op, and its value, are freed.
        for later in gemms[position + 1:]:
            for field_name in ("a", "b", "c"):
                if getattr(later, field_name) == g.op.results[0]:
                    setattr(later, field_name, call.results[0])
        g.op.erase()
        tags.append(tag)
    return tags


def _apply_script(module_op, script: str) -> None:
    from torch_mlir.dialects.transform import interpreter

    library = ir.Module.parse(script, module_op.context)
    entry = library.body.operations[0]
    interpreter.apply_named_sequence(module_op, entry, library)
