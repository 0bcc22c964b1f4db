"""Codegen strategy for the heavy linalg ops of the `cpu` target (the `apply_codegen_strategy` hook).

`codegen.apply_codegen_strategy` imports this module and calls `apply_codegen_strategy(module,
target)` on linalg-on-tensors IR, after elementwise fusion and before bufferization. Each part is a
transform-dialect script built here (text) and run by the `transform-interpreter` pass:

  depthwise convolutions, max/sum pooling (NCHW and NHWC, any stride/dilation; static f32):
      rewritten as ONE elementwise linalg.generic over the KH*KW taps (each tap a strided slice of
      the padded input shaped like the output; `math.fma` per tap), tiled to one output row and
      vectorized along the contiguous output dim: ow (NCHW) or 4 pixels x 32 channels (NHWC).
  contractions (matmul, batch_matmul, linear, conv_2d_nchw_fchw / nhwc_hwcf):
      `targets/cpu/strategy.py` (another engineer's packed-B GEMM kernels) when it is importable,
      after this module's im2col has turned NHWC convolutions into matmul-shaped generics (it
      takes NCHW ones itself); this module's own phases otherwise, or with
      ETC_CPU_GEMM_STRATEGY=kernels:
        convs (batch 1): im2col (`convert_conv2d_to_img2col`), batch dim folded away, leaving a
        plain matmul-shaped generic; then every static f32 matmul-shaped op: tile the elementwise
        consumer (bias/relu/residual: its single all-parallel user) by [MC, NC] with scf.for,
        fuse the matmul and its fill/broadcast init into that nest, tile K by KC, register-tile
        [MR, NR, 1] and vectorize with masks (any size); the MR x NR accumulator is hoisted out
        of the k loop and the contraction becomes MR broadcast-FMAs of NR-wide vectors per k
        (`vector.fma`): 8 x 32 f32 on AVX-512 (16 zmm accumulators), 6 x 16 AVX2, 8 x 8 NEON.
  everything else (dynamic shapes, other element types, batch>1 convs, ...):
      `codegen.default_codegen_strategy`.

CONTRACT with the pipeline that calls this hook (codegen.py):
  * after bufferization, vector ops must be lowered: run `VECTOR_LOWERING`
    (`func.func(convert-vector-to-scf{full-unroll=true}, lower-affine), convert-vector-to-llvm`)
    before `convert-scf-to-cf`/`convert-*-to-llvm`. `lowers_vectors()` looks for it in
    `codegen._to_llvm(...)`; without it this hook only runs the default strategy (correct,
    slower). Checked: test_cpu_target.py passes with the hook active once that is added.
  * right after bufferization, `remove_self_copies(module)` (tiled insert_slices leave
    `memref.copy %x, %x`) and `forward_result_copies(module)` (buffer-results-to-out-params
    copies a loop-written result alloc into the out-param instead of hoisting it: a whole extra
    pass over the output, which copies_to_linalg turns into a slow loop) are cheap and safe.
  * no runtime library: no BLAS, no OpenMP, no malloc (temporaries are static-shaped
    `memref.alloc`s for the scratch planner; a fused consumer only with cache blocks that divide
    the output, so they stay static).

`etc.targets.cpu.gemm` is a standalone path (linalg text -> strategy -> bufferize -> LLVM ->
llvmlite JIT -> ctypes) for tests (test_cpu_strategy_kernels.py) and tools/bench_kernels.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch_mlir import ir

from etc.errors import LoweringError

VECTOR_LOWERING = "func.func(convert-vector-to-scf{full-unroll=true}, lower-affine), convert-vector-to-llvm"

_ID_ATTR = "etc.kid"


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes (in elements) for f32 contractions on one target."""

    lanes: int  # f32 per vector register
    mr: int  # microkernel rows (broadcast operand)
    nr: int  # microkernel columns (vector operand): a multiple of lanes
    kc: int  # reduction block (L1/L2)
    mc: int  # row block (L2)
    nc: int  # column block (L2/L3)


def vector_lanes(target) -> int:
    """f32 lanes of the widest vector register the target's features allow (1: no SIMD we use)."""
    feats = set()
    for f in (getattr(target, "features", "") or "").split(","):
        if f.startswith("+"):
            feats.add(f[1:])
    triple = getattr(target, "triple", "") or ""
    if triple.startswith(("x86_64", "i686", "i386")):
        if "avx512f" in feats:
            return 16
        if "avx" in feats or "avx2" in feats:
            return 8
        return 4  # SSE2 is baseline on x86-64
    if triple.startswith(("aarch64", "arm64")):
        return 4
    if "neon" in feats:
        return 4
    return 1


def config_for(target) -> KernelConfig | None:
    lanes = vector_lanes(target)
    if lanes >= 16:  # AVX-512: 32 zmm registers, 16 accumulators
        return KernelConfig(lanes=16, mr=8, nr=32, kc=256, mc=64, nc=256)
    if lanes == 8:  # AVX2: 16 ymm registers, 12 accumulators
        return KernelConfig(lanes=8, mr=6, nr=16, kc=256, mc=48, nc=256)
    if lanes == 4:  # NEON / SSE: 32 (NEON) registers, 16 accumulators
        return KernelConfig(lanes=4, mr=8, nr=8, kc=256, mc=64, nc=128)
    return None


def lowers_vectors() -> bool:
    """Does the calling pipeline (codegen.py) lower vector ops after bufferization?"""
    if os.environ.get("ETC_CPU_FORCE_STRATEGY") == "1":
        return True
    try:
        from etc.targets.cpu import codegen

        return "convert-vector-to-llvm" in codegen._to_llvm(64)
    except Exception:  # noqa: BLE001
        return False


# ------------------------------------------------------------------ analysis
def _static_f32(value) -> bool:
    try:
        t = ir.RankedTensorType(value.type)
    except ValueError:
        return False
    return t.has_static_shape and str(t.element_type) == "f32"


def _iterator_kinds(op) -> list[str]:
    out = []
    for a in ir.ArrayAttr(op.attributes["iterator_types"]):
        s = str(a)
        out.append("parallel" if "parallel" in s else "reduction" if "reduction" in s else s)
    return out


_PLAIN_MAPS = {
    "linalg.matmul": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"],
    "linalg.batch_matmul": ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)",
                            "(d0, d1, d2, d3) -> (d0, d1, d2)"],
}


def _is_plain_matmul(op) -> bool:
    """linalg.matmul / batch_matmul with the default maps (no transposed or broadcast operand)."""
    if "indexing_maps" not in op.attributes:
        return True
    maps = [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return maps == _PLAIN_MAPS[op.name]


def _elementwise_consumer(op):
    """The single user of op's result when it is an all-parallel generic with an identity output map
    of the same shape (what elementwise fusion leaves: bias + relu + residual add in one generic)."""
    result = op.results[0]
    users = [u.owner for u in result.uses]
    if len(users) != 1:
        return None
    user = users[0]
    if not isinstance(user, ir.Operation):
        user = user.operation
    if user.name != "linalg.generic" or len(user.results) != 1:
        return None
    if any(k != "parallel" for k in _iterator_kinds(user)):
        return None
    if ir.RankedTensorType(user.results[0].type).shape != ir.RankedTensorType(result.type).shape:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(user.attributes["indexing_maps"])]
    if maps[-1] != ir.AffineMap.get_identity(len(_iterator_kinds(user))):
        return None
    # The matmul result must be read element for element (identity map), not transposed.
    n_in = len(user.operands) - 1
    for i in range(n_in):
        if user.operands[i] == result and maps[i] != maps[-1]:
            return None
    if not _static_f32(user.results[0]):
        return None
    return user


def _init_producer(op):
    """The op producing the matmul's init operand when it is cheap to recompute per tile."""
    init = op.operands[len(op.operands) - 1]
    owner = init.owner
    if isinstance(owner, ir.Block):
        return None
    owner = owner.operation if not isinstance(owner, ir.Operation) else owner
    if owner.name in ("linalg.fill", "linalg.broadcast"):
        return owner
    return None


def _own_empty(op) -> None:
    """Give op's init its own `tensor.empty` when it shares one (elementwise fusion leaves the
    matmul's fill and its consumer writing into one empty tensor; tiled and fused, that makes
    bufferization copy the output tile into a temporary before every use)."""
    dest = op.operands[len(op.operands) - 1]
    owner = dest.owner
    if isinstance(owner, ir.Block):
        return
    owner = owner.operation if not isinstance(owner, ir.Operation) else owner
    if owner.name != "tensor.empty" or sum(1 for _ in dest.uses) < 2:
        return
    clone = owner.clone(ip=ir.InsertionPoint(op))
    op.operands[len(op.operands) - 1] = clone.results[0]


# ------------------------------------------------------------ script builder
class _Script:
    def __init__(self):
        self.lines: list[str] = []
        self.n = 0

    def fresh(self, stem="h") -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def match_id(self, kid: int) -> str:
        h = self.fresh("op")
        self.emit(f'{h} = transform.structured.match attributes{{{_ID_ATTR} = {kid} : i64}} in %root '
                  f': (!transform.any_op) -> !transform.any_op')
        return h

    def tile(self, handle: str, sizes: list[int]) -> tuple[str, list[str]]:
        n_loops = sum(1 for s in sizes if s)
        t = self.fresh("t")
        loops = [self.fresh("l") for _ in range(n_loops)]
        types = ", ".join(["!transform.any_op"] * (1 + n_loops))
        lhs = ", ".join([t] + loops)
        self.emit(f"{lhs} = transform.structured.tile_using_for {handle} tile_sizes {sizes} "
                  f": (!transform.any_op) -> ({types})")
        return t, loops

    def fuse_into(self, producer: str, loop: str) -> str:
        f, c = self.fresh("f"), self.fresh("c")
        self.emit(f"{f}, {c} = transform.structured.fuse_into_containing_op {producer} into {loop} "
                  f": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)")
        return f

    def vectorize(self, handle: str, sizes: list[int]) -> None:
        self.emit(f"transform.structured.vectorize {handle} vector_sizes {sizes} : !transform.any_op")

    def text(self, cleanup: bool = True) -> str:
        body = "\n".join(self.lines)
        return ("module attributes {transform.with_named_sequence} {\n"
                "transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
                f"{body}\n"
                + (_CLEANUP if cleanup else "") +
                "  transform.yield\n}\n}\n")


# After all ops are vectorized: contractions in canonical form, accumulators hoisted out of the
# k loops (loop-invariant transfer pairs on the same slice become loop-carried vectors), then
# contractions -> outer products -> vector.fma.
_CLEANUP = """
  %func = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
  transform.apply_patterns to %func {
    transform.apply_patterns.vector.reduction_to_contract
    transform.apply_patterns.vector.lower_masked_transfers
    transform.apply_patterns.vector.transfer_permutation_patterns
    transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    transform.apply_patterns.canonicalization
  } : !transform.any_op
  transform.apply_cse to %func : !transform.any_op
  %all_loops = transform.structured.match ops{["scf.for"]} in %func : (!transform.any_op) -> !transform.any_op
  transform.apply_licm to %all_loops : !transform.any_op
  %loops_again = transform.structured.match ops{["scf.for"]} in %func : (!transform.any_op) -> !transform.any_op
  transform.foreach %loops_again : !transform.any_op {
  ^bb0(%loop: !transform.any_op):
    transform.loop.hoist_loop_invariant_subsets %loop : !transform.any_op
  }
  transform.apply_patterns to %func {
    transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
    transform.apply_patterns.vector.lower_outerproduct
    transform.apply_patterns.vector.lower_masks
    transform.apply_patterns.canonicalization
  } : !transform.any_op
"""


def _level(size: int, tile: int) -> int:
    """Tile size for one loop level: 0 (no loop) when the tile would cover the dimension."""
    return tile if size > tile else 0


def _dividing_tile(size: int, tile: int, unit: int) -> int | None:
    """A loop tile for `size` near `tile` that divides it (0: no loop), or None."""
    if size <= tile:
        return 0
    for t in range(tile, tile // 2 - 1, -1):
        if size % t == 0 and t % unit == 0:
            return t
    for t in range(tile + unit, 2 * tile + 1, unit):
        if size % t == 0:
            return t
    return 0 if size <= 4 * tile else None


def _elementwise_steps(s: _Script, cfg: KernelConfig, handle: str, batch: list[int], m: int, n: int) -> None:
    """Register-tile and vectorize an elementwise op shaped like the contraction's output."""
    reg = [_level(m, cfg.mr), _level(n, cfg.nr)]
    lead = [_level(b, 1) for b in batch]
    if any(lead + reg):
        handle, _ = s.tile(handle, lead + reg)
    s.vectorize(handle, [1] * len(batch) + [cfg.mr if reg[0] else m, cfg.nr if reg[1] else n])


def _contraction_steps(s: _Script, cfg: KernelConfig, handle: str, batch: list[int], m: int, n: int, k: int,
                       init: str | None = None, consumer: str | None = None) -> None:
    """Tile/fuse/vectorize one contraction with leading parallel (batch) dims, then m, n, k.

    Levels: [1.., MC, NC] on the consumer (or the contraction) with the contraction and its init
    fused in; [.., .., KC] on the contraction; [1.., MR, NR, 1] register tiles, vectorized with masks.
    A level whose tile would cover a dimension makes no loop for it (and a level without loops
    fuses nothing: the ops are then tiled one by one)."""
    lead_a = [_level(b, 1) for b in batch]
    top = [_level(m, cfg.mc), _level(n, cfg.nc)]
    if consumer is not None:
        # Fused, the matmul tile lives in a temporary that must have a static size: the cache
        # blocks must divide the dims (or cover them); otherwise the consumer is not fused.
        tm, tn = _dividing_tile(m, cfg.mc, cfg.mr), _dividing_tile(n, cfg.nc, cfg.nr)
        if tm is None or tn is None:
            for other in (consumer, init):
                if other is not None:
                    _elementwise_steps(s, cfg, other, batch, m, n)
            consumer = init = None
        else:
            top = [tm, tn]
    m_a = top[0] or m
    n_a = top[1] or n
    reg = [_level(m_a, cfg.mr), _level(n_a, cfg.nr)]
    vec = [cfg.mr if reg[0] else m_a, cfg.nr if reg[1] else n_a]
    lead_v = [1] * len(batch)
    mm = handle
    fused_init = None
    if any(lead_a + top):
        if consumer is not None:
            consumer, loops = s.tile(consumer, lead_a + top)
            mm = s.fuse_into(handle, loops[-1])
            if init is not None:  # (the matmul's own loop passes its init as iter_args: not fusable)
                fused_init, init = s.fuse_into(init, loops[-1]), None
        else:
            mm, loops = s.tile(handle, lead_a + top + [0])
    for other, dims in ((consumer, (m_a, n_a)), (fused_init, (m_a, n_a)), (init, (m, n))):
        if other is None:
            continue
        reg_o = [_level(dims[0], cfg.mr), _level(dims[1], cfg.nr)]
        lead_o = [_level(b, 1) for b in batch] if other is init else [0] * len(batch)
        if any(reg_o + lead_o):
            other, _ = s.tile(other, lead_o + reg_o)
        s.vectorize(other, lead_v + [cfg.mr if reg_o[0] else dims[0], cfg.nr if reg_o[1] else dims[1]])
    if k > cfg.kc:
        mm, _ = s.tile(mm, [0] * len(batch) + [0, 0, cfg.kc])
    k_tile = 1 if k > 1 else 0
    mr, _ = s.tile(mm, [0] * len(batch) + reg + [k_tile]) if any(reg) or k_tile else (mm, [])
    s.vectorize(mr, lead_v + vec + [1])


# ------------------------------------------------------------------- driver
def _walk(module: ir.Module, names) -> list:
    found = []

    def visit(op):
        if op.name in names:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _canonical_contraction_maps(rank: int) -> list[str]:
    """(batch.., m, n, k): A (batch.., m, k), B (batch.., k, n), C (batch.., m, n)."""
    dims = [f"d{i}" for i in range(rank)]
    b = dims[:-3]
    m, n, k = dims[-3:]
    head = f"({', '.join(dims)}) -> "
    return [head + f"({', '.join(b + [m, k])})", head + f"({', '.join(b + [k, n])})",
            head + f"({', '.join(b + [m, n])})"]


def _matmul_like(op):
    """(batch dims, m, n, k) for a static f32 matmul in canonical form: linalg.matmul/batch_matmul with
    default maps, or a linalg.generic with the same maps and a multiply-accumulate body
    (what im2col leaves for a convolution). None otherwise."""
    if not all(_static_f32(v) for v in list(op.operands) + list(op.results)) or len(op.operands) != 3:
        return None
    if op.name in ("linalg.matmul", "linalg.batch_matmul"):
        if not _is_plain_matmul(op):
            return None
    elif op.name == "linalg.generic":
        kinds = _iterator_kinds(op)
        if len(kinds) < 3 or kinds[-1] != "reduction" or any(k != "parallel" for k in kinds[:-1]):
            return None
        maps = [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        if maps != _canonical_contraction_maps(len(kinds)):
            return None
        body = [o.operation.name for o in op.regions[0].blocks[0].operations]
        if body != ["arith.mulf", "arith.addf", "linalg.yield"]:
            return None
    else:
        return None
    a_shape = ir.RankedTensorType(op.operands[0].type).shape
    b_shape = ir.RankedTensorType(op.operands[1].type).shape
    return list(a_shape[:-2]), a_shape[-2], b_shape[-1], a_shape[-1]


class _Tagger:
    def __init__(self):
        self.ops = []

    def __call__(self, op) -> int:
        op.attributes[_ID_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), len(self.ops) + 1)
        self.ops.append(op)
        return len(self.ops)


def plan_convolutions(module: ir.Module, layouts=("nchw", "nhwc")) -> tuple[str, list]:
    """Phase 1: im2col for each static f32 batch-1 conv_2d_nchw_fchw / nhwc_hwcf; the batch dim is
    then folded away so that the contraction is a plain (f, p, k) / (p, f, k) matmul for phase 2."""
    s = _Script()
    tag = _Tagger()
    names = {"nchw": "linalg.conv_2d_nchw_fchw", "nhwc": "linalg.conv_2d_nhwc_hwcf"}
    for op in _walk(module, tuple(names[x] for x in layouts)):
        if not all(_static_f32(v) for v in list(op.operands) + list(op.results)) or not _unit_dilation(op):
            continue
        if ir.RankedTensorType(op.results[0].type).shape[0] != 1:
            continue  # batch > 1: the filter is broadcast over the batch; left to the default
        h = s.match_id(tag(op))
        img, reshaped = s.fresh("img"), s.fresh("res")
        s.emit(f"{img}, {reshaped} = transform.structured.convert_conv2d_to_img2col {h} "
               f": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
    if not tag.ops:
        return "", []
    s.emit('%f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op')
    s.emit("transform.apply_patterns to %f {\n"
           "    transform.apply_patterns.linalg.fold_unit_extent_dims_via_reshapes\n"
           "    transform.apply_patterns.canonicalization\n  } : !transform.any_op")
    return s.text(cleanup=False), tag.ops


def plan(module: ir.Module, cfg: KernelConfig) -> tuple[str, list]:
    """Phase 2: tag the contractions (and their init / elementwise consumer) and build the
    tiling + vectorization script; returns (script, tagged ops)."""
    s = _Script()
    tag = _Tagger()
    for op in _walk(module, ("linalg.matmul", "linalg.batch_matmul", "linalg.generic")):
        shape = _matmul_like(op)
        if shape is None:
            continue
        batch, m, n, k = shape
        consumer = _elementwise_consumer(op)
        init = _init_producer(op)
        if init is not None and consumer is not None:
            _own_empty(init)
        h = s.match_id(tag(op))
        ch = s.match_id(tag(consumer)) if consumer is not None else None
        ih = s.match_id(tag(init)) if init is not None else None
        _contraction_steps(s, cfg, h, batch, m, n, k, ih, ch)
    return (s.text() if tag.ops else ""), tag.ops


def plan_windows(module: ir.Module, cfg: KernelConfig) -> tuple[str, list]:
    """Phase 0: depthwise convolutions and poolings as tap-wise elementwise generics, tiled to one
    output row and vectorized along the contiguous output dimension (ow for NCHW, channels for NHWC)."""
    made = rewrite_window_ops(module, cfg)
    if not made:
        return "", []
    s = _Script()
    vw = 2 * cfg.lanes
    for kid, layout, (n, d1, d2, d3) in made:
        h = s.fresh("op")
        s.emit(f'{h} = transform.structured.match attributes{{{_ID_ATTR} = {kid} : i64}} in %root '
               f': (!transform.any_op) -> !transform.any_op')
        if layout == "nchw":  # (n, c, oh, ow): vectors along ow
            tiles = [_level(n, 1), _level(d1, 1), _level(d2, 1), _level(d3, vw)]
        else:  # (n, oh, ow, c): vectors along c, a few output columns per step (weights reused)
            tiles = [_level(n, 1), _level(d1, 1), _level(d2, 4), _level(d3, vw)]
        vec = [1 if tiles[0] else n, 1 if tiles[1] else d1, (tiles[2] or d2), vw if tiles[3] else d3]
        if any(tiles):
            h, _ = s.tile(h, tiles)
        s.vectorize(h, vec)
    return s.text(), [k for k, _, _ in made]


def _unit_dilation(op) -> bool:
    if "dilations" not in op.attributes:
        return True
    return all(int(x) == 1 for x in ir.DenseIntElementsAttr(op.attributes["dilations"]))


def run_transform(module: ir.Module, script: str) -> None:
    """Parse `script` next to the payload and run the transform interpreter on the module."""
    from torch_mlir.passmanager import PassManager

    with module.context, ir.Location.unknown():
        tmod = ir.Module.parse(script)
        seq = tmod.body.operations[0]
        module.body.append(seq.detach_from_parent())
        had_attr = "transform.with_named_sequence" in module.operation.attributes
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        try:
            PassManager.parse("builtin.module(transform-interpreter, canonicalize, cse)").run(module.operation)
        except Exception as e:  # noqa: BLE001
            notes = "; ".join(str(d) for d in getattr(e, "error_diagnostics", []) or [])
            raise LoweringError(f"cpu codegen: kernel strategy failed: {e} {notes}") from None
        finally:
            for op in list(module.body.operations):
                if op.operation.name.startswith("transform."):
                    op.operation.erase()
            if not had_attr:
                del module.operation.attributes["transform.with_named_sequence"]


def _restore(module: ir.Module, text: str) -> None:
    """Put the module back as it was (its printed form) after a failed phase, keeping the func
    ops themselves (callers hold handles to them): each func's body is replaced by the backup's."""
    fresh = ir.Module.parse(text)
    _KEEP.append(fresh)  # it owns the storage of the ops moved out of it
    backups = {}
    for op in fresh.body.operations:
        if op.operation.name == "func.func":
            backups[ir.StringAttr(op.attributes["sym_name"]).value] = op.operation
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if name not in backups:  # a helper this module added
            op.erase()
            continue
        src = backups[name]
        if len(op.regions[0].blocks) != 1 or len(src.regions[0].blocks) != 1:
            raise LoweringError("cpu codegen: cannot restore a multi-block function after a failed strategy")
        dst_block, src_block = op.regions[0].blocks[0], src.regions[0].blocks[0]
        for a, b in zip(src_block.arguments, dst_block.arguments):
            a.replace_all_uses_with(b)
        for inner in reversed(list(dst_block.operations)):  # users before their producers
            inner.operation.erase()
        for inner in list(src_block.operations):
            dst_block.append(inner.operation.detach_from_parent())


_KEEP: list = []


def run_phase(module: ir.Module, phase) -> int:
    """Run one planning phase and its script; on any failure put the module back and return 0
    (the ops it would have handled go to the default strategy), so a strategy bug costs speed,
    not a compile."""
    import warnings

    backup = str(module)
    try:
        script, tagged = phase(module)
        if tagged:
            try:
                run_transform(module, script)
            finally:
                _strip_tags(module)
        return len(tagged)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"cpu kernel strategy: a phase failed, default strategy instead: {e}", RuntimeWarning)
        _restore(module, backup)
        return 0


def _strip_tags(module: ir.Module) -> None:
    def visit(op):
        if _ID_ATTR in op.attributes:
            del op.attributes[_ID_ATTR]
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def apply_kernel_strategy(module: ir.Module, target) -> int:
    """The vector strategy for the heavy ops only; returns how many contractions it handled."""
    cfg = config_for(target)
    if cfg is None:
        return 0
    handled = 0
    with module.context, ir.Location.unknown():
        for phase in (lambda m: plan_windows(m, cfg), plan_convolutions, lambda m: plan(m, cfg)):
            handled += run_phase(module, phase)
    return handled


def apply_codegen_strategy(module: ir.Module, target) -> None:
    """The hook (see the module docstring for what the caller must lower afterwards).

    Depthwise convolutions and poolings: this module. Contractions (matmul, batch matmul, linear,
    convolutions): `targets/cpu/strategy.py` (B packed into column panels: faster than this
    module's unpacked tiles on large GEMMs) when it is there, else this module's own phases;
    `ETC_CPU_GEMM_STRATEGY=kernels` picks this module's (which fuses the elementwise consumer).
    Then the default strategy for everything left."""
    from etc.targets.cpu import codegen

    cfg = config_for(target)
    if cfg is not None and lowers_vectors():
        with module.context, ir.Location.unknown():
            run_phase(module, lambda m: plan_windows(m, cfg))
        if os.environ.get("ETC_CPU_GEMM_STRATEGY", "strategy") != "kernels":
            # strategy.py takes NCHW convolutions itself; NHWC ones become matmul-shaped generics
            # here first (im2col), which it recognizes.
            with module.context, ir.Location.unknown():
                run_phase(module, lambda m: plan_convolutions(m, ("nhwc",)))
            try:
                from etc.targets.cpu import strategy as packed
                apply = packed.apply_strategy
            except (ImportError, AttributeError):
                apply = None
            if apply is not None:
                try:
                    apply(module, target, vectors_lowered=True)
                except TypeError:  # an older signature: it asks codegen itself
                    apply(module, target)
                return  # (it runs the default strategy on what it leaves)
        with module.context, ir.Location.unknown():
            for phase in (plan_convolutions, lambda m: plan(m, cfg)):
                run_phase(module, phase)
    codegen.default_codegen_strategy(module, target)


def remove_self_copies(module: ir.Module) -> int:
    """Erase `memref.copy %x, %x` (bufferized insert_slice of a slice into itself)."""
    dead = []

    def visit(op):
        if op.name in ("memref.copy", "linalg.copy") and len(op.operands) == 2 and op.operands[0] == op.operands[1]:
            dead.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in dead:
        op.erase()
    return len(dead)


# ------------------------------------------------- depthwise convolutions, pooling
_WINDOW_OPS = {
    # name: (layout, kind)
    "linalg.depthwise_conv_2d_nchw_chw": ("nchw", "dw"),
    "linalg.depthwise_conv_2d_nhwc_hwc": ("nhwc", "dw"),
    "linalg.pooling_nchw_max": ("nchw", "max"),
    "linalg.pooling_nhwc_max": ("nhwc", "max"),
    "linalg.pooling_nchw_sum": ("nchw", "sum"),
    "linalg.pooling_nhwc_sum": ("nhwc", "sum"),
}


def _pair(op, name: str) -> list[int]:
    if name not in op.attributes:
        return [1, 1]
    return [int(x) for x in ir.DenseIntElementsAttr(op.attributes[name])]


def _tensor_type(shape, elem="f32") -> str:
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{elem}>"


def window_as_taps_text(op, fname: str, kid: int) -> str | None:
    """A private func computing a depthwise convolution or pooling `op` as ONE elementwise
    linalg.generic over its KH*KW taps: each tap is a strided slice of the (padded) input shaped
    like the output, so every operand is read along the output's contiguous dimension (ow in
    NCHW, channels in NHWC) and the op vectorizes like an elementwise op:
        y = init;  y = fma(x[tap], w[tap], y)  (depthwise)   |   y = max/add(y, x[tap])  (pooling)"""
    layout, kind = _WINDOW_OPS[op.name]
    x_t = ir.RankedTensorType(op.operands[0].type)
    w_t = ir.RankedTensorType(op.operands[1].type)
    y_t = ir.RankedTensorType(op.results[0].type)
    x, w, y = list(x_t.shape), list(w_t.shape), list(y_t.shape)
    if len(x) != 4 or len(y) != 4:
        return None
    sh, sw = _pair(op, "strides")
    dh, dw = _pair(op, "dilations")
    if kind == "dw":
        if layout == "nchw":
            if len(w) != 3:
                return None
            kh, kw = w[1], w[2]
        else:
            if len(w) != 3:
                return None
            kh, kw = w[0], w[1]
    else:
        kh, kw = w[0], w[1]
    if layout == "nchw":
        n, c, oh, ow = y
    else:
        n, oh, ow, c = y
    xt, yt, wt = _tensor_type(x), _tensor_type(y), _tensor_type(w)
    ct = _tensor_type([c])
    lines = [f"func.func private @{fname}(%x: {xt}, %w: {wt}, %y: {yt}) -> {yt} {{"]
    ins, in_types, maps = [], [], []
    ident = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    chan = "affine_map<(d0, d1, d2, d3) -> (d1)>" if layout == "nchw" else \
        "affine_map<(d0, d1, d2, d3) -> (d3)>"
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    for t, (i, j) in enumerate(taps):
        if layout == "nchw":
            off, size, stride = [0, 0, i * dh, j * dw], [n, c, oh, ow], [1, 1, sh, sw]
        else:
            off, size, stride = [0, i * dh, j * dw, 0], [n, oh, ow, c], [1, sh, sw, 1]
        lines.append(f"  %x{t} = tensor.extract_slice %x{off} {size} {stride} : {xt} to {yt}")
        ins.append(f"%x{t}")
        in_types.append(yt)
        maps.append(ident)
    if kind == "dw":
        for t, (i, j) in enumerate(taps):
            if layout == "nchw":
                off, size = [0, i, j], [c, 1, 1]
            else:
                off, size = [i, j, 0], [1, 1, c]
            lines.append(f"  %w{t} = tensor.extract_slice %w{off} {size} [1, 1, 1] : {wt} to {ct}")
            ins.append(f"%w{t}")
            in_types.append(ct)
            maps.append(chan)
    maps.append(ident)
    args = [f"%a{t}: f32" for t in range(len(taps))]
    if kind == "dw":
        args += [f"%b{t}: f32" for t in range(len(taps))]
    args.append("%acc: f32")
    body = []
    acc = "%acc"
    for t in range(len(taps)):
        nxt = f"%s{t}"
        if kind == "dw":
            body.append(f"    {nxt} = math.fma %a{t}, %b{t}, {acc} : f32")
        elif kind == "max":
            body.append(f"    {nxt} = arith.maximumf {acc}, %a{t} : f32")
        else:
            body.append(f"    {nxt} = arith.addf {acc}, %a{t} : f32")
        acc = nxt
    iters = ", ".join(['"parallel"'] * 4)
    lines += [f"  %r = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}], "
              f"{_ID_ATTR} = {kid} : i64}} ins({', '.join(ins)} : {', '.join(in_types)}) outs(%y : {yt}) {{",
              f"  ^bb0({', '.join(args)}):", *body, f"    linalg.yield {acc} : f32", f"  }} -> {yt}",
              f"  return %r : {yt}", "}"]
    return "\n".join(lines) + "\n"


def _window_pays(op) -> bool:
    """Measured: NCHW poolings with a column stride > 1 read every other element of each vector
    (strided masked transfers, ~30x slower than LLVM's loops on the named op): left to the default.
    NCHW depthwise with stride 2 still gains (9 taps amortize it); NHWC always gains."""
    layout, kind = _WINDOW_OPS[op.name]
    return not (layout == "nchw" and kind != "dw" and _pair(op, "strides")[1] > 1)


def rewrite_window_ops(module: ir.Module, cfg: KernelConfig) -> list:
    """Depthwise convolutions and poolings (static f32) -> tap-wise elementwise generics (inlined);
    returns [(kid, layout, output shape)] of the new generics, tagged for the vectorizing script."""
    from torch_mlir.dialects import func as func_d
    from torch_mlir.passmanager import PassManager

    ops = [op for op in _walk(module, tuple(_WINDOW_OPS))
           if all(_static_f32(v) for v in list(op.operands) + list(op.results)) and _window_pays(op)]
    if not ops:
        return []
    made, helpers, keep = [], [], []
    for op in ops:
        kid = 1000 + len(made)
        layout = _WINDOW_OPS[op.name][0]
        shape = list(ir.RankedTensorType(op.results[0].type).shape)
        fname = f"__etc_window_{kid}"
        text = window_as_taps_text(op, fname, kid)
        if text is None:
            continue
        holder = ir.Module.parse(text)  # keep alive: it owns the op's storage until moved
        keep.append(holder)
        helper = holder.body.operations[0].detach_from_parent()
        module.body.append(helper)
        helpers.append(helper)
        with ir.InsertionPoint(op), op.location:
            call = func_d.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(fname),
                                 [op.operands[0], op.operands[1], op.operands[2]])
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
        made.append((kid, layout, shape))
    names = set()
    for h in helpers:
        names.add(ir.StringAttr(h.attributes["sym_name"]).value)
    helpers.clear()  # the inliner erases callees it made dead: never touch those handles again
    PassManager.parse("builtin.module(inline)", context=module.context).run(module.operation)
    for op in list(module.body.operations):
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value in names:
            op.operation.erase()
    return made


def forward_result_copies(module: ir.Module) -> int:
    """After bufferization: `memref.copy %alloc, %out` (a static, identity-layout alloc copied into an
    out-param that nothing else touches) -> compute into %out directly. buffer-results-to-out-params
    hoists such allocs itself only when no loop uses them; with tiled loop nests it copies instead.
    (Safe because the out-param is never read by the caller before the call returns and aliases no
    input.) Returns how many copies it removed."""
    count = 0
    for fn in _walk(module, ("func.func",)):
        if not fn.regions[0].blocks:
            continue
        block = fn.regions[0].blocks[0]
        args = set()
        for a in block.arguments:
            args.add(a)
        for op in list(block.operations):
            op = op.operation
            if op.name != "memref.copy":
                continue
            src, dst = op.operands[0], op.operands[1]
            if dst not in args or src.type != dst.type:
                continue
            owner = src.owner
            if isinstance(owner, ir.Block):
                continue
            owner = owner if isinstance(owner, ir.Operation) else owner.operation
            if owner.name != "memref.alloc" or owner.parent != fn or len(list(owner.operands)):
                continue
            if sum(1 for _ in dst.uses) != 1:
                continue
            t = ir.MemRefType(src.type)
            if isinstance(t.layout, ir.AffineMapAttr) and t.layout.value != ir.AffineMap.get_identity(t.rank):
                continue
            # every use of the alloc must come before the copy (the copy is its last use)
            later = False
            seen = False
            for other in block.operations:
                if other.operation == op:
                    seen = True
                    continue
                if seen and _uses_value(other.operation, src):
                    later = True
                    break
            if later:
                continue
            op.erase()
            src.replace_all_uses_with(dst)
            owner.erase()
            count += 1
    return count


def _uses_value(op, value) -> bool:
    found = [False]

    def visit(inner):
        for v in inner.operands:
            if v == value:
                found[0] = True
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found[0]
