"""Codegen strategy for the heavy linalg ops of the `cpu` target (the `apply_codegen_strategy` hook).

`codegen.apply_codegen_strategy` imports this module and calls
`apply_codegen_strategy(module, target)` on linalg-on-tensors IR, after elementwise fusion
and before bufferization. What it does, per op, with one transform-dialect script built here
and run by the `transform-interpreter` pass:

  linalg.matmul / linalg.batch_matmul (static f32):
      tile the elementwise consumer (bias, relu, residual add: the single user when it is an
      all-parallel linalg.generic of the same shape) or the matmul itself by [MC, NC] with
      scf.for, fuse the matmul and its init (fill / broadcast) into that loop nest,
      tile the reduction by KC, then register-tile [MR, NR, 1] and vectorize
      (masked, so sizes that are not multiples of the tiles work);
      the MR x NR accumulator is hoisted out of the k loop (loop-carried vectors) and the
      contraction becomes MR broadcast-FMAs of NR-wide vectors per k (`vector.fma`):
      an 8 x 32 f32 microkernel on AVX-512 (16 zmm accumulators), 6 x 16 on AVX2, 8 x 8 on NEON.
  linalg.conv_2d_nchw_fchw / conv_2d_nhwc_hwcf (incl. 1x1, strided, padded input):
      im2col (`convert_conv2d_to_img2col`), then the matmul strategy on the resulting
      contraction (NCHW: out[n, f, p] = W[f, k] col[n, k, p]; vectors along the output pixels).
  everything else (depthwise convs, pooling, elementwise, dynamic shapes, non-f32):
      `codegen.default_codegen_strategy` (generalize + loop interchange for LLVM's vectorizer).

CONTRACT with the pipeline that calls this hook (codegen.py), after bufferization:
  * vector ops must be lowered: the IR this strategy returns contains `vector.*` ops
    (transfer_read/write with masks, fma, broadcast, ...). The pipeline must run
    `VECTOR_LOWERING` (below) before `convert-*-to-llvm`, i.e.
    `func.func(convert-vector-to-scf{full-unroll=true}, lower-affine), convert-vector-to-llvm`.
    `lowers_vectors()` checks `codegen._to_llvm(64)` for it; when it is missing the hook
    falls back to the default strategy (so the pipeline stays correct, only slower).
  * `memref.copy %x, %x` (a slice copied onto itself, left by one-shot-bufferize for the
    tiled loops' insert_slice) is a no-op; `remove_self_copies(module)` erases them
    (otherwise `copies_to_linalg` turns them into loops that copy a tile onto itself).
  * the code references no runtime library: no BLAS, no OpenMP, no malloc (temporaries are
    static-shaped `memref.alloc`s the scratch planner can place).

`etc.targets.cpu.gemm` has a standalone path (linalg text -> this strategy -> bufferize ->
LLVM -> llvmlite JIT, called through ctypes) used by tests and `tools/bench_gemm.py`.
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

    def text(self) -> str:
        body = "\n".join(self.lines)
        return ("module attributes {transform.with_named_sequence} {\n"
                "transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
                f"{body}\n"
                + _CLEANUP +
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


def _contraction_steps(s: _Script, cfg: KernelConfig, handle: str, batch: list[int], m: int, n: int, k: int,
                       init: str | None = None, consumer: str | None = None) -> None:
    """Tile/fuse/vectorize one contraction with leading parallel (batch) dims, then m, n, k.

    Levels: [1.., MC, NC] on the consumer (or the contraction) with the contraction and its init
    fused in; [.., .., KC] on the contraction; [1.., MR, NR, 1] register tiles, vectorized with masks.
    A level whose tile would cover a dimension makes no loop for it (and a level without loops
    fuses nothing: the ops are then tiled one by one)."""
    lead_a = [_level(b, 1) for b in batch]
    top = [_level(m, cfg.mc), _level(n, cfg.nc)]
    m_a = min(m, cfg.mc)
    n_a = min(n, cfg.nc)
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


def _conv_steps(s: _Script, cfg: KernelConfig, handle: str, op, nchw: bool) -> None:
    img, reshaped = s.fresh("img"), s.fresh("res")
    s.emit(f"{img}, {reshaped} = transform.structured.convert_conv2d_to_img2col {handle} "
           f": (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
    mm = s.fresh("mm")
    s.emit(f"{mm} = transform.get_producer_of_operand {reshaped}[0] : (!transform.any_op) -> !transform.any_op")
    x = ir.RankedTensorType(op.operands[0].type).shape
    w = ir.RankedTensorType(op.operands[1].type).shape
    y = ir.RankedTensorType(op.results[0].type).shape
    if nchw:  # (n, f, p, k): out[n,f,p] = W[f,k] col[n,k,p]
        _contraction_steps(s, cfg, mm, [y[0]], y[1], y[2] * y[3], w[1] * w[2] * w[3])
    else:  # (n, p, f, k): out[n,p,f] = col[n,p,k] W[k,f]
        _contraction_steps(s, cfg, mm, [y[0]], y[1] * y[2], y[3], w[0] * w[1] * w[2])


# ------------------------------------------------------------------- driver
def plan(module: ir.Module, cfg: KernelConfig) -> tuple[str, list]:
    """Tag the ops the strategy handles and build the transform script; returns (script, tagged ops)."""
    s = _Script()
    tagged = []
    candidates = []

    def collect(op):
        if op.name in ("linalg.matmul", "linalg.batch_matmul", "linalg.conv_2d_nchw_fchw",
                       "linalg.conv_2d_nhwc_hwcf"):
            candidates.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    next_id = [0]

    def tag(op) -> int:
        next_id[0] += 1
        op.attributes[_ID_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), next_id[0])
        tagged.append(op)
        return next_id[0]

    for op in candidates:
        if not all(_static_f32(v) for v in list(op.operands) + list(op.results)):
            continue
        name = op.name
        if name in ("linalg.matmul", "linalg.batch_matmul"):
            if not _is_plain_matmul(op):
                continue
            a_shape = ir.RankedTensorType(op.operands[0].type).shape
            b_shape = ir.RankedTensorType(op.operands[1].type).shape
            batch = a_shape[:-2]
            consumer = _elementwise_consumer(op)
            init = _init_producer(op)
            if init is not None and consumer is not None:
                _own_empty(init)
            h = s.match_id(tag(op))
            ch = s.match_id(tag(consumer)) if consumer is not None else None
            ih = s.match_id(tag(init)) if init is not None else None
            _contraction_steps(s, cfg, h, batch, a_shape[-2], b_shape[-1], a_shape[-1], ih, ch)
        else:
            if not _unit_dilation(op):
                continue
            h = s.match_id(tag(op))
            _conv_steps(s, cfg, h, op, nchw=name.endswith("nchw_fchw"))
    return (s.text() if tagged else ""), tagged


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


def _strip_tags(module: ir.Module) -> None:
    def visit(op):
        if _ID_ATTR in op.attributes:
            del op.attributes[_ID_ATTR]
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def apply_kernel_strategy(module: ir.Module, target) -> int:
    """The vector strategy for the heavy ops only; returns how many ops it handled."""
    cfg = config_for(target)
    if cfg is None:
        return 0
    with module.context, ir.Location.unknown():
        script, tagged = plan(module, cfg)
        if not tagged:
            return 0
        try:
            run_transform(module, script)
        finally:
            _strip_tags(module)
    return len(tagged)


def apply_codegen_strategy(module: ir.Module, target) -> None:
    """The hook (see the module docstring for what the caller must lower afterwards)."""
    from etc.targets.cpu import codegen

    if lowers_vectors():
        apply_kernel_strategy(module, target)
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
