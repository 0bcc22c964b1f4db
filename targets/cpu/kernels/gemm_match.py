"""Which contractions the GEMM kernel takes, and how: recognition and strategy.

A *GEMM* is C[b, m, n] (+)= A[b?, m, k] x B[b?, k, n]: a matmul-like `linalg.generic` (named
matmuls are generalized first; B read through a transposing generic, as torch-mlir lowers
linear layers, is taken straight from the weight) or a `linalg.conv_2d_nchw_fchw` (any stride
and dilation, padding already materialized) as filter[F, C*KH*KW] x im2col[C*KH*KW, OH*OW] per
image, or transposed, im2col^T x filter^T, when the output has few pixels and many filters
(`transpose_conv`). What the kernel then does is decided here, once, for every pass that asks:
`skip_reason` (why a contraction is not taken), `b_in_place` (B read where it is, or packed
into column panels), `gather_per_panel` (an im2col, or a matmul's B read by enough row blocks,
gathered per column panel), `blocking` (what the decision records) and
the K block (`in_place_k_block`). `describe`/`from_call` carry a GEMM's geometry on the kernel
call between the passes (`GEMM_ATTR`). The kernel's text is `gemm_kernel.py`, its tiling
`gemm_schedule.py`; the passes are `passes/gemm_kernels.py`, `gemm_regions.py` and
`tile_gemm_kernels.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.targets.cpu.ir_query import DYNAMIC, indexing_maps, iterator_types, map_dims
from etc.targets.cpu.size_ranges import dim_range

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
    l2_bytes: int = 2 << 20  # the per-core L2 (isa.py's `l2_kib`): a K block's panel rows fill at most half


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
    maps = [map_dims(m) for m in indexing_maps(op)]
    if maps == [[1, 0], [0, 1]] or maps == [[0, 1], [1, 0]]:
        return op.operands[0]
    return None


def is_contraction(op) -> bool:
    """A linalg.generic that multiplies values computed from two different inputs and accumulates
    over a reduction loop (what a GEMM kernel computes, maybe with a producer fused into its body;
    a sum of squares of one input is a reduction, not this)."""
    if op.name != "linalg.generic" or "reduction" not in iterator_types(op):
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
        owner = as_operation(owner)
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
    its = iterator_types(op)
    if its.count("reduction") != 1 or len(its) not in (3, 4):
        return None, f"{its.count('reduction')} reduction(s) over {len(its)} loops"
    maps = [map_dims(m) for m in indexing_maps(op)]
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
    maps = indexing_maps(op)
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

# ------------------------------------------------------------------ the strategy


def b_in_place(g: Gemm, cfg: KernelConfig) -> bool:
    """B is read where it is (an activation, a direct 1x1 input, an im2col): the tile's columns are
    then one dimension tiled by nr with a peeled partial panel, never padded (no copies of B or
    C). B packed into panels keeps the [panels, nr] layout, zero padded: a weight (any layout:
    packed when the blob is written, so its panels are contiguous for free), a transposed
    convolution's filter, and a B narrower than one panel (attention over a few tokens: read in
    place, Llama-15M's 32-token attention took 4.4x as long as through one packed panel)."""
    return (g.b_layout in ("kn", "im2col") and not g.transposed and not is_constant_argument(g.b)
            and g.N >= cfg.nr)


# The stack a thread may give one column panel's B buffer (K x nr f32, `gather_per_panel`).
PANEL_STACK_BYTES = 1 << 20


def gather_per_panel(g: Gemm, cfg: KernelConfig) -> bool:
    """Is the B of `g` read in place gathered per column panel, inside the panel loop, into a
    [K, nr] buffer that every row block of the panel then reads (`gemm_operands.panel_gather`)?

    A convolution's im2col, always: whole, it is written to memory and read back once per row
    block, each k row of a tile nr*4 bytes out of a row N*4 long: ResNet's 3x3 64@56 (7.2 MB of
    im2col) spent 0.4 of its 2.24 ms there, as long as the whole GEMM over the same [576, 3136]
    read in place as a 1x1 input. Per panel, the 147 KiB buffer stays in L2 and its rows are
    contiguous: 1.88 ms (torch eager 1.92).

    An activation [K, N] (a matmul's B, a 1x1 convolution's input), when at least
    `PANEL_COPY_ROW_BLOCKS` row blocks read each panel: its panel rows are a row of B apart, and
    read in place they miss the cache and the prefetchers (512^3 at 0.74x of OpenBLAS, ViT-B's
    197x768x3072 0.66x); copied into the contiguous buffer once per panel (a masked vector copy
    per k), 1.0-1.3x more GFLOP/s from 96 rows up, 0.64-0.86x below 48 rows, where too few row
    blocks share the copy. (Packed whole per call instead, B crosses memory twice: ViT-B's shape
    lost 20% to the copy.) A 1x1 convolution's rows are an image plane apart: 196 B at 7x7, 784
    B at 14x14 (a 64-byte panel row then straddles two cache lines), 50 KB at 112x112 (4 KiB
    aliasing, a page per row). Copied by the same rule, on the AVX2 preset's Zen 3 (same
    process, in turn): EfficientNet-B0's 1152->320 @7 0.86x the time, 320->1280 0.87x, 1152->192
    0.87x, 672->112 @14 0.90x, 16->96 @112 + BN + SiLU 0.85x; planes a whole number of lines long
    with many channels (40->240 @28, 24->144 @56) 1.00x; with 4 row blocks instead of 16 240->40
    @28 took 1.10x. Whole models 0.93x (ResNet-50) to 0.99x (RegNetY-400MF).

    The buffer is a stack allocation of the thread running the panel (etc-cpu-plan-scratch: the
    threads share the panel loop), so it is used up to PANEL_STACK_BYTES (K up to 4096 at
    nr = 64); a longer K keeps the whole im2col or reads B in place (a recorded decision)."""
    if g.transposed or not b_in_place(g, cfg) or 4 * g.K * cfg.nr > PANEL_STACK_BYTES:
        return False
    if g.b_layout == "im2col":
        return True
    return g.b_layout == "kn" and not g.dynamic_rows and g.M >= PANEL_COPY_ROW_BLOCKS * cfg.mr


# How many mr-row blocks must read a column panel of an activation B for its copy into a
# contiguous panel buffer to pay (`gather_per_panel`).
PANEL_COPY_ROW_BLOCKS = 16


def is_constant_argument(value) -> bool:
    """`value` is an entry argument labelled `constant:<name>` (a weight in the program)."""
    if not isinstance(value, ir.BlockArgument):
        return False
    fn = value.owner.owner
    if fn is None or "arg_attrs" not in fn.attributes:
        return False
    attrs = ir.DictAttr(ir.ArrayAttr(fn.attributes["arg_attrs"])[value.arg_number])
    return "etc.cpu.arg" in attrs and ir.StringAttr(attrs["etc.cpu.arg"]).value.startswith("constant:")



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




# The K block of a B read in place (`in_place_k_block`), measured on a Sapphire Rapids core
# (48 KiB 12-way L1, 2 MiB 16-way L2), one thread, whole K against blocks of 128. A panel's rows
# are a row of B apart: their offsets within ALIAS_SPAN = 4 KiB (a page, and the L1's sets)
# repeat every 4096 / gcd(stride, 4096) rows, and kb rows crowd into a share of the L2 as though
# each were gcd(stride, 4096) bytes (at least an nr-wide panel row). Up to half the L2
# (`KernelConfig.l2_bytes`, isa.py's `l2_kib`) whole K is faster (512^3 1.08x, 768^3 1.16x, 1000^3 1.06x, 512x1024x768 1.16x,
# 256x256x2048 1.02-1.04x); at 1.5-2x that it evicts itself (384 rows 4 KiB apart 0.78x,
# 512x1024x512 0.70x, 256x512x2048 0.65x, 1024^3 0.65x, 1536^3 0.60x). Rows 8 KiB apart in 2 MiB
# pages (numpy's, whose L2 set bits are all virtual) measured no worse as 4 KiB (N = 2048 in
# blocks of 256 against 128: 0.99-1.04x). Rows that do not alias but span more than REACH_BYTES
# of B in one block (three quarters of the 2048 pages the second-level TLB maps) lose too: 2048
# rows of 4000 bytes 0.82x, 3072 x 4000 0.68x, 1536 x 8000 0.85x, while 768 x 8000 (6 MB) took
# 1.11x. Longer blocks are cut to the longest within both (1024^3 in blocks of 256: 1.05-1.10x
# blocks of 128; 512x1536x1536 in blocks of 512: 1.07x).
ALIAS_SPAN = 4096
REACH_BYTES = 6 << 20


def in_place_k_block(K: int, row_bytes: "int | None", cfg: KernelConfig) -> int:
    """The K block of a kernel whose B panel rows are `row_bytes` apart: None for a contiguous
    panel (a packed weight, a B packed per call, an im2col gathered per panel), read row after
    row: `k_block` at kc, the tile accumulating up to 1.5 kc in registers. B read in place keeps
    that block while its rows neither alias in the cache (half the L2) nor span too many pages
    (REACH_BYTES), else takes the longest block that does: a divisor of K (no partial block)
    down to half of it, else that length; never shorter than `kc_strided`'s block. (An
    activation B read by enough row blocks is copied per panel instead: `gather_per_panel`.) The one
    decision of the K block: etc-cpu-gemm-regions (`kernel_kc`) and etc-cpu-tile-gemm-kernels
    (from the tile layout) both ask it."""
    kb = k_block(K, cfg.kc)
    if row_bytes is None or not cfg.kc_strided:
        return kb
    alias = max(math.gcd(row_bytes, ALIAS_SPAN), 4 * cfg.nr)  # a panel row covers nr f32 at least
    longest = min(cfg.l2_bytes // 2 // alias, REACH_BYTES // row_bytes)
    if kb <= longest:
        return kb
    if longest <= cfg.kc_strided:
        return k_block(K, cfg.kc_strided)
    divisors = [d for d in range(longest // 2, longest + 1) if K % d == 0]
    return max(divisors) if divisors else longest


# The row block of A (`row_block`), measured on this Emerald Rapids VM (2 MiB L2 per core), one
# thread, the kernel with and without it compiled in one process and called in turn (medians of
# 3 x 15 rounds on a busy machine): an A at least as large as the L2 is re-read from L3 for every
# column panel; in blocks of about a quarter of the L2, each block stays in L2 while every panel
# of B passes over it (B re-read once per block instead): 2048x256x2048 (B copied per panel)
# +5-8% (blocks of 516 rows), Whisper-tiny's 1500x384x1536 (B a packed weight) +0-4% (300 rows),
# never slower; an A of 1.5 MB (1024x384x768 in blocks of 258) -1..+1%: left whole. Fewer rows
# per block lose more to B's re-reads than they save (5 calls of 300 rows with A and C hot
# against one of 1500 suggested +10%; 4 x 128 rows of 512x1024x2048 0.9x, 2 x 98 of ViT-B's
# 197x768x3072 0.9x; ViT-B/16 at 384x384, 577 rows: 577x768x3072 in blocks of 288 0.94x, of
# 198 0.97x; 577x3072x768 in blocks of 288 0.92x), hence MIN_ROW_BLOCK.
MIN_ROW_BLOCK = 256


def row_block(rows: int, K: int, kc: int, cfg: KernelConfig) -> int:
    """The rows of A one block of the kernel's loops covers (0: all of them): the loop over row
    blocks outside the loop over column panels, so a block of A stays in the L2 while every
    panel of B passes over it. Only for a kernel whose tile accumulates the whole K (`kc` >= K)
    over static rows. Equal blocks of a multiple of mr rows, the last one maybe shorter."""
    a_bytes = 4 * rows * K
    if rows <= 0 or kc < K or a_bytes < cfg.l2_bytes:
        return 0
    budget = cfg.l2_bytes // 4 // (4 * K)
    if budget < MIN_ROW_BLOCK:
        return 0
    blocks = -(-rows // budget)
    mc = -(-rows // blocks)
    return -(-mc // cfg.mr) * cfg.mr


def kernel_kc(g: Gemm, cfg: KernelConfig) -> int:
    """The K block `g`'s kernel is built with (`in_place_k_block`): B read in place has its
    panel's rows N f32 apart, unless its im2col is gathered per panel."""
    contiguous = not b_in_place(g, cfg) or gather_per_panel(g, cfg)
    return in_place_k_block(g.K, None if contiguous else 4 * g.N, cfg)


def leftover_columns(g: Gemm, cfg: KernelConfig) -> int:
    """How many last columns of a B read in place the kernel computes as dot products along K
    instead of in a partial panel (0: none).

    A partial panel of r < lanes/2 columns is an mr x r tile: one broadcast FMA per row and k,
    r lanes of each used, as slow per k step as a full vector's. A ResNet convolution over 14x14
    pixels (N = 196: three panels and 4 columns) spent 14% of its time on those 4 columns. As
    dot products, A's rows and the r columns transposed (both contiguous along K), an FMA uses
    every lane: 16/r times fewer FMAs. Needs K in whole vectors and static rows, and a full
    panel besides: the dot products read A once more, which a partial panel of its own does
    too, but not the split pieces of one panel narrower than nr (ResNet's 7x7 maps: N = 49,
    whose last column costs less than another pass over a 9 MB filter)."""
    lanes = cfg.vector_width
    r = g.N % lanes
    if g.transposed or g.dynamic_rows or not b_in_place(g, cfg) or g.N <= cfg.nr or g.K % lanes:
        return 0
    return r if r <= lanes // 2 else 0


def blocking(g: Gemm, cfg: KernelConfig) -> str:
    """The reason a GEMM decision records: for a matmul or 1x1 convolution whose B is an
    activation, whether its column panels are copied (`gather_per_panel`) or read in place, and
    why, and the K block when K is split (`kernel_kc`); for any B read in place, how its last
    columns are computed when they are less than half a vector (`leftover_columns`). Empty for
    the default paths (a weight packed when the blob is built, a narrow B packed per call, an
    im2col, a kernel over dynamic rows, which reads B in place), so the report keeps one line
    for them."""
    parts = []
    if g.b_layout == "kn" and not g.dynamic_rows and b_in_place(g, cfg):
        kb = kernel_kc(g, cfg)
        blocks = f", K in blocks of {kb}" if kb < g.K else ""
        mc = row_block(g.M, g.K, kb, cfg)
        blocks += f", rows in blocks of {mc}" if mc else ""
        if gather_per_panel(g, cfg):
            parts.append(f"B copied per column panel ({PANEL_COPY_ROW_BLOCKS}+ row blocks share each copy){blocks}")
        else:
            if g.M >= PANEL_COPY_ROW_BLOCKS * cfg.mr:
                why = f"a K x {cfg.nr} panel buffer exceeds the {PANEL_STACK_BYTES} bytes of stack it may take"
            else:
                why = f"fewer than {PANEL_COPY_ROW_BLOCKS} row blocks to share a panel copy"
            parts.append(f"B read in place ({why}){blocks}")
    r = g.N % cfg.vector_width
    in_place = not (g.transposed or g.dynamic_rows) and b_in_place(g, cfg)
    if in_place and g.N > cfg.nr and 0 < r <= cfg.vector_width // 2:
        parts.append(f"the last {r} columns as dot products along K" if leftover_columns(g, cfg) else
                     f"the last {r} columns in a partial panel (K = {g.K} is not whole vectors of "
                     f"{cfg.vector_width})")
    return ", ".join(parts)


def k_block(K: int, kc: int) -> int:
    """The K block: K itself up to 1.5 kc (one block, accumulated in registers), else a divisor of
    K near kc (static tiles: no partial block), else kc."""
    if K <= kc + kc // 2:
        return K
    divisors = [d for d in range(kc // 2, kc + kc // 4 + 1) if K % d == 0]
    return max(divisors) if divisors else kc



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
    768->3072 within noise). So is a convolution over one pixel, computed transposed (the pixel
    the row, the packed filter B): squeeze-excitation's 1x1 convolutions on the pooled channels,
    which as a scalar loop nest took 20-27 us each at EfficientNet-B0's 1152 <-> 48 channels
    (MobileNetV3's 480 -> 120 -> 480 block: 45 of its 245 us). With an activation as B (attention
    at decode) it is a GEMV: a loop nest whose reduction LLVM vectorizes, nothing to pack.

    Fewer columns than half a panel (enough rows) also go through the kernel, B in one packed
    panel zero padded to nr, except half or one vector of them, which LLVM vectorizes whole in
    the loop nest. Measured (AVX-512, one thread, loops against the padded panel): 4096x256
    times 17, 20, 31 columns 3.0-5.3 ms against 0.55 (the loop nest vectorized with a scalar
    remainder), 12 columns 5.7 ms, 512x512x30 1.25 against 0.15, Winograd's 16 x 256x256x25 3.4
    against 0.58; 16 columns 0.46 against 0.55 and 8 0.48: those stay loops."""
    rows, cols = (g.N, g.M) if g.transposed else (g.M, g.N)
    if g.K < 2:
        return "small", "K = 1: an outer product, no reduction to tile"
    if min_flops == 0:
        return None
    limit = cfg.min_flops if min_flops is None else min_flops
    if rows < cfg.mr // 2 and not g.transposed and not is_constant_argument(g.b):
        return "gemv", f"{rows} row(s) of output times an activation: a matrix-vector product, memory bound"
    if _flops(g) < limit:
        return "small", f"{_flops(g)} flops, below the {limit} that pay for packing"
    if rows < cfg.mr // 2 and cols >= cfg.nr // 2:
        return None  # through a weight (a transposed convolution's B is its filter): see above
    if rows < cfg.mr // 2:
        return "small", f"{rows}x{cols} output is smaller than half the {cfg.mr}x{cfg.nr} register tile"
    if cols < cfg.nr // 2 and cols in (cfg.vector_width // 2, cfg.vector_width):
        return "small", (f"{rows}x{cols} output: {cols} columns, which the loop nest vectorizes whole "
                         f"(narrower than half the {cfg.mr}x{cfg.nr} register tile)")
    return None




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
