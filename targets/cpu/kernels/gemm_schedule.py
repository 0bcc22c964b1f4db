"""The GEMM kernels' tiling: a transform-dialect script, and the im2col's contiguous row loads.

After etc-cpu-gemm-regions has defined every kernel with its init and epilogue and
etc-cpu-tile-gemm-kernels has inlined them, `transform_script` (applied with the transform
interpreter, `kernel_ir.apply_transform_script`) tiles each one: its epilogue into (batch, column
panel, row block of mr) with the contraction and the init fused in, the contraction into single
k steps vectorized into mr broadcasts, nr/lanes loads and mr*nr/lanes FMAs, the accumulator
hoisted into registers. `contiguous_row_loads` then turns the vector gathers of a per-panel
im2col into masked contiguous loads where the stride allows.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import ANY_OP
from etc.targets.cpu.kernels.gemm_match import KernelConfig
from etc.targets.cpu.parallel import THREAD_SPLIT  # marks the loop over column panels

# Marks the loop over k of each register tile (its accumulators the loop's vector results):
# etc-cpu-prefetch-gemm-tiles finds the tiles' stores after it.
GEMM_K_LOOP = "etc.cpu.gemm_k_loop"


def _second_level(emit, fuse_into, sfx: str, panel: str, tag: str, rows: int, epilogue: bool, init: bool, kc: int,
                  K: int, cfg: KernelConfig, vector_ops: str, wide: bool = True) -> None:
    """The rows of one column-panel loop `panel` (unit dimensions folded): find its ops again
    (exactly the contraction, its init and its epilogue were fused into it), tag them, and tile
    the rows (see `transform_script`). `wide`: the panel has more than one column (a single
    column folds away like a single row)."""
    cols = ", 0" if wide else ""
    tile = f"({ANY_OP}) -> ({ANY_OP}, {ANY_OP})"
    emit(f"%all{sfx} = transform.structured.match ops{{[{vector_ops}]}} in {panel} : ({ANY_OP}) -> {ANY_OP}",
         f"transform.annotate %all{sfx} \"{tag}_v\" : {ANY_OP}",
         f"%g{sfx} = transform.collect_matching @gemm_step in {panel} : ({ANY_OP}) -> {ANY_OP}",
         f"transform.annotate %g{sfx} \"{tag}_g\" : {ANY_OP}")
    ep = ini = None
    if epilogue or init:
        emit(f"%el{sfx} = transform.collect_matching @elementwise in {panel} : ({ANY_OP}) -> {ANY_OP}")
        if epilogue and init:  # walk order: the init, then the epilogue
            emit(f"%in{sfx}, %ep{sfx} = transform.split_handle %el{sfx} : ({ANY_OP}) -> ({ANY_OP}, {ANY_OP})")
            ep, ini = f"%ep{sfx}", f"%in{sfx}"
        elif epilogue:
            ep = f"%el{sfx}"
        else:
            ini = f"%el{sfx}"
    if rows < 0:  # roles the peeled row block finds its ops by (peel below)
        for handle, role in ((f"%g{sfx}", "g"), (ep, "ep"), (ini, "in")):
            if handle:
                emit(f"transform.annotate {handle} \"{tag}_{role}\" : {ANY_OP}")
    dynamic = rows < 0  # a run-time row count: whole blocks of mr, the rest one row at a time
    tr = cfg.mr if dynamic else min(cfg.mr, rows)

    def peel(loop, name, ops=()):
        """Peel the partial row block; with dynamic rows, tile it again one row at a time (static
        1 x nr tiles, which vectorize like the full ones). `ops`: (root, fused producers...) of
        the loop body, found again in the peeled loop by the matchers."""
        if not dynamic and not rows % tr:
            return
        emit(f"%{name}f = transform.cast {loop} : {ANY_OP} to !transform.op<\"scf.for\">",
             f"%{name}p, %{name}q = transform.loop.peel %{name}f : (!transform.op<\"scf.for\">) "
             f"-> ({ANY_OP}, {ANY_OP})")
        if not dynamic:
            return
        # Fusion leaves dead clones of the fused producers in the loop: gone, each role is one op.
        emit(f"transform.apply_dce to %{name}q : {ANY_OP}")
        found = {}
        for role in ops:  # the clones the peel made keep the roles' tags
            emit(f"%{name}m{role} = transform.structured.match ops{{[\"linalg.generic\"]}} attributes "
                 f"{{{tag}_{role}}} in %{name}q : ({ANY_OP}) -> {ANY_OP}")
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
        # Row tiles are independent as well: with few column panels (a convolution over 14x14
        # pixels: 3 and a partial one) the threaded entry shares the rows (parallel.choose_split).
        emit(f"transform.annotate {loop} \"{THREAD_SPLIT}\" : {ANY_OP}")
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
    tile = f"({ANY_OP}) -> ({ANY_OP}, {ANY_OP})"
    lines = ["module attributes {transform.with_named_sequence} {"]
    for matcher, dims in (("gemm_step", "%s[-1] {reduction}"), ("elementwise", "%s[all] {parallel}")):
        lines += [f"  transform.named_sequence @{matcher}(%op: {ANY_OP} {{transform.readonly}}) -> {ANY_OP} {{",
                  f"    transform.match.operation_name %op [\"linalg.generic\"] : {ANY_OP}",
                  f"    transform.match.structured %op : {ANY_OP} {{",
                  f"    ^bb0(%s: {ANY_OP}):",
                  f"      transform.match.structured.dim {dims} : {ANY_OP}",
                  "      transform.match.structured.yield",
                  "    }",
                  f"    transform.yield %op : {ANY_OP}",
                  "  }"]
    lines += [f"  transform.named_sequence @__transform_main(%root: {ANY_OP} {{transform.readonly}}) {{",
              f"    %f = transform.structured.match ops{{[\"func.func\"]}} in %root : ({ANY_OP}) -> {ANY_OP}"]

    def emit(*more):
        lines.extend("    " + m for m in more)

    panels = []

    def match(name, attr, where="%root", ops='"linalg.generic"'):
        emit(f"{name} = transform.structured.match ops{{[{ops}]}} attributes {{{attr}}} in {where} "
             f": ({ANY_OP}) -> {ANY_OP}")

    vector_ops = '"linalg.generic", "linalg.fill", "linalg.broadcast", "linalg.copy"'
    fuse = f"({ANY_OP}, {ANY_OP}) -> ({ANY_OP}, {ANY_OP})"

    def fuse_into(producers: list, loop: str, name: str) -> str:
        """Fuse each of `producers` (in order) into `loop`; returns the loop's last handle."""
        for m, producer in enumerate(producers):
            emit(f"%{name}{m}, %{name}c{m} = transform.structured.fuse_into_containing_op {producer} into {loop} "
                 f": {fuse}")
            loop = f"%{name}c{m}"
        return loop

    for n, (tag, rows, epilogue, init, kc, K, split, cols, col, mc) in enumerate(kernels):
        # Batch and column panels: the epilogue's (b, i, jb, j) or (b, i, n), or the contraction's
        # (b, jb, i, j, k): loops b, then panels; with a row block (`gemm_match.row_block`) loops
        # b, blocks of mc rows, then panels.
        match(f"%e{n}", f"{tag}_epi" if epilogue else tag)
        tn = min(cfg.nr, cols)
        if not split:
            sizes = f"[1, {mc}, {tn}]" if mc else f"[1, 0, {tn}] interchange = [0, 2, 1]"
        elif epilogue:
            sizes = f"[1, {mc}, 1, 0]" if mc else "[1, 0, 1, 0] interchange = [0, 2, 1, 3]"
        else:
            sizes = f"[1, 1, {mc}, 0, 0] interchange = [0, 2, 1, 3, 4]" if mc else "[1, 1, 0, 0, 0]"
        blocks = f"%lm{n}, " if mc else ""
        emit(f"%t{n}, %lb{n}, {blocks}%lj{n} = transform.structured.tile_using_for %e{n} tile_sizes {sizes} "
             f": ({ANY_OP}) -> ({ANY_OP}, {ANY_OP}, {ANY_OP}{', ' + ANY_OP if mc else ''})")
        # Batches are independent too (attention's heads): the threaded entry may share them
        # instead of the panels (parallel.choose_split; a batch of one folds away).
        emit(f"transform.annotate %lb{n} \"{THREAD_SPLIT}\" : {ANY_OP}")
        if mc:  # so are the blocks of rows (each writes its own rows; a per-panel gather is per thread)
            emit(f"transform.annotate %lm{n} \"{THREAD_SPLIT}\" : {ANY_OP}")
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
                 # its k rows are independent (the partial panel's gather, peeled out of the panel
                 # loop, is a loop of its own the threads may share)
                 f"transform.annotate %cl{n} \"{THREAD_SPLIT}\" : {ANY_OP}",
                 f"transform.structured.vectorize %ct{n} vector_sizes [1, 1, {tn}] {{vectorize_nd_extract}} "
                 f": {ANY_OP}",
                 # its buffer: the panel's slice of a whole-size tensor.empty, made panel-sized; the
                 # partial panel's masks onto the gather and the store themselves (a vector.mask
                 # region around a store does not survive the canonicalization after the peel)
                 f"transform.apply_patterns to %cp{n} {{ transform.apply_patterns.tensor.fold_tensor_empty "
                 f"transform.apply_patterns.vector.lower_masked_transfers }} : {ANY_OP}")
            panel = f"%cp{n}"
        # Column panels are independent (each writes its own columns): the threaded entry
        # gives each thread a chunk of them (parallel.py).
        emit(f"transform.annotate {panel} \"{THREAD_SPLIT}\" : {ANY_OP}")
        panels.append(panel)
    # The rows the column-panel loop covers: a row block's (dynamic when the last one is shorter).
    kernels = [k[:1] + ((k[9] if not k[1] % k[9] else -1) if k[9] else k[1],) + k[2:] for k in kernels]
    for n, (tag, rows, epilogue, init, kc, K, split, cols, col, mc) in enumerate(kernels):
        # Unit dimensions folded inside this panel loop only: the rest of the function (a
        # depthwise convolution's tensor.pad, its consumers) stays as the next passes match it.
        # A partial panel's width is dynamic until peeling: the slices folding unit dimensions
        # read it back through tensor.dim; resolved, each extract of an insert folds away.
        emit(f"transform.apply_patterns to {panels[n]} {{ "
             f"transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices }} : {ANY_OP}",
             f"transform.apply_patterns to %f {{ "
             f"transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims "
             f"transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice }} : {ANY_OP}")
        _second_level(emit, fuse_into, f"{n}", panels[n], tag, rows, epilogue, init, kc, K, cfg, vector_ops,
                      wide=split or cols > 1)
        tn = min(cfg.nr, cols)
        if not split and cols % tn:
            # The partial column panel, peeled once everything inside is tiled: after
            # canonicalization both panels have static widths (nr and cols % nr).
            emit(f"%pc{n} = transform.cast {panels[n]} : {ANY_OP} to !transform.op<\"scf.for\">",
                 f"%pm{n}, %pr{n} = transform.loop.peel %pc{n} : (!transform.op<\"scf.for\">) -> ({ANY_OP}, {ANY_OP})")
            if _split_partial_panel(cols % tn, cfg):  # found again after canonicalization (below)
                match(f"%pg{n}", f"{tag}_g", where=f"%pr{n}")
                emit(f"transform.annotate %pg{n} \"{tag}_pg\" : {ANY_OP}")
    # The K-block loops carry the accumulator with the width the panel had when they were
    # tiled (dynamic in a partial panel of B read in place, until the peel): the sizes read back
    # through them (tensor.dim of a loop result) resolve to the static widths the loops start from.
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.canonicalization "
         f"transform.apply_patterns.linalg.tiling_canonicalization "
         f"transform.apply_patterns.scf.for_loop_canonicalization }} : {ANY_OP}")
    for n, (tag, rows, epilogue, init, kc, K, split, cols, col, mc) in enumerate(kernels):
        width = 0 if split else cols % min(cfg.nr, cols)
        if _split_partial_panel(width, cfg):
            # Its contraction is split into whole vectors and the rest, each accumulated over K on its own.
            match(f"%kp{n}", f"{tag}_pg")
            emit(f"transform.foreach %kp{n} : {ANY_OP} {{", f"^bb0(%rest0: {ANY_OP}):")
            for c in range(-(-width // cfg.vector_width) - 1):
                emit(f"  %split{c} = transform.structured.split %rest{c} after {cfg.vector_width} "
                     f"{{dimension = {int(rows > 1 or rows < 0)}}} : {ANY_OP}",
                     f"  %chunk{c}, %rest{c + 1} = transform.split_handle %split{c} : ({ANY_OP}) -> ({ANY_OP}, {ANY_OP})")
            emit("}")
        match(f"%s{n}", f"{tag}_g")
        lead = "0, " * (int(rows > 1 or rows < 0) + int(split or cols > 1))
        emit(f"%k{n}, %lk{n} = transform.structured.tile_using_for %s{n} tile_sizes [{lead}1] : {tile}",
             f"transform.annotate %lk{n} \"{GEMM_K_LOOP}\" : {ANY_OP}",
             f"transform.structured.vectorize %k{n} : {ANY_OP}")
        match(f"%o{n}", f"{tag}_v", ops=vector_ops)
        emit(f"transform.structured.vectorize %o{n} : {ANY_OP}")
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.vector.transfer_permutation_patterns "
         f"transform.apply_patterns.vector.reduction_to_contract }} : {ANY_OP}",
         f"transform.apply_patterns to %f {{ transform.apply_patterns.vector.lower_contraction lowering_strategy = "
         f"\"outerproduct\" transform.apply_patterns.vector.lower_outerproduct }} : {ANY_OP}")
    for n, _ in enumerate(kernels):
        emit(f"transform.loop.hoist_loop_invariant_subsets %lk{n} : {ANY_OP}")
    emit(f"transform.apply_patterns to %f {{ transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice "
         f"transform.apply_patterns.tensor.fold_tensor_subset_ops }} : {ANY_OP}",
         "transform.yield")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"



# ------------------------------------------------------------------ the im2col's row loads

# A panel row whose columns come from at most this many input rows is loaded as that many masked
# contiguous loads, merged; from more (a stride > 1 along the width), it stays one vector gather.
MAX_ROW_LOADS = 8


def _constant_values(value) -> "list | None":
    op = defining_op(value, "arith.constant")
    if op is None:
        return None
    try:
        return list(ir.DenseIntElementsAttr(op.attributes["value"]))
    except ValueError:  # not a dense integer attribute
        return None


def contiguous_row_loads(module_op) -> int:
    """Each full panel row of a per-panel im2col (`gemm_operands.im2col_gather`, vectorized into one nr-wide
    vector.gather per k) as masked contiguous loads instead: with stride 1 along the width, the
    panel's columns n0 + j read X[koff[k] + noff[n0] + j + shift_j], shift_j constant per column
    (the input row the column falls in, times the input's extra width), so the row is one masked
    load per distinct shift, merged (an AVX-512 merge-masked load each) instead of a gather of
    about 8 cycles per 16 lanes (ResNet's 3x3 64@56: 2.08 -> 1.88 ms). With stride 2 (ResNet's
    7x7 stem, its downsampling 3x3s), X[... + 2j + shift_j]: per distinct shift, 2*lanes
    contiguous inputs and one permute keeping the even ones. The partial panel (its mask a
    constant_mask) keeps its gather. Returns how many gathers were replaced."""
    from torch_mlir.dialects import arith, tensor, vector

    done = 0
    for gather in walk(module_op, ("vector.gather",)):
        if len(gather.operands) != 6:  # base[i0, i1] (an image flattened per batch), indices, mask, pass-through
            continue
        base, i0, i1, idx, mask, _ = list(gather.operands)
        vtype = ir.VectorType(gather.results[0].type)
        width = vtype.shape[-1]
        if defining_op(mask, "arith.constant") is None or any(d != 1 for d in vtype.shape[:-1]):
            continue
        cast = defining_op(idx, "arith.index_cast")
        add = cast and defining_op(cast.operands[0], "arith.addi")
        if add is None:
            continue
        reads = {}
        for v in add.operands:  # broadcast(koff[k]: vector<1>) and shape_cast(noff[n0:n0 + width])
            op = defining_op(v, "vector.broadcast") or defining_op(v, "vector.shape_cast")
            read = op and defining_op(op.operands[0], "vector.transfer_read")
            if read is not None:
                reads[op.name] = read
        if set(reads) != {"vector.broadcast", "vector.shape_cast"}:
            continue
        koff_read, noff_read = reads["vector.broadcast"], reads["vector.shape_cast"]
        noff = _constant_values(noff_read.operands[0])
        if noff is None or len(noff_read.operands) != 3 or len(noff) < width:
            continue
        full = len(noff) // width * width
        # the column stride: consecutive columns of one output row are `stride` inputs apart
        stride = noff[1] - noff[0] if len(noff) > 1 else 1
        if stride not in (1, 2):
            continue
        shift = [noff[n] - noff[n - n % width] - stride * (n % width) for n in range(full)]
        shifts = sorted(set(shift))
        if len(shifts) > MAX_ROW_LOADS or shifts[0] < 0:
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
            wide_type = ir.VectorType.get([stride * width], vtype.element_type)
            base_map = ir.AffineMap.get_minor_identity(ir.RankedTensorType(base.type).rank, 1)
            merged = None
            for s in shifts:
                s_vec = arith.ConstantOp(flat, ir.DenseElementsAttr.get_splat(flat, ir.IntegerAttr.get(element, s)))
                m = arith.CmpIOp(arith.CmpIPredicate.eq, column_shift, s_vec.result).result
                at = arith.AddIOp(arith.AddIOp(i1, start).result,
                                  arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr.get(ir.IndexType.get(), s)).result
                                  ).result
                pad_f = arith.ConstantOp(vtype.element_type, ir.FloatAttr.get(vtype.element_type, 0.0)).result
                if stride == 1:
                    row = vector.TransferReadOp(row_type, base, [i0, at], base_map, pad_f, [True], mask=m).result
                else:
                    # 2*width contiguous inputs from this shift's first column, the even ones kept
                    # (one two-source permute); bounded by the image's end, not masked: the
                    # columns of other shifts read inputs of this image and are not selected
                    wide = vector.TransferReadOp(wide_type, base, [i0, at], base_map, pad_f, [False]).result
                    row = vector.ShuffleOp(wide, wide, [stride * j for j in range(width)]).result
                merged = row if merged is None else arith.SelectOp(m, row, merged).result
            out = vector.ShapeCastOp(vtype, merged).result
        gather.results[0].replace_all_uses_with(out)
        gather.erase()
        done += 1
    return done
