"""etc-cpu-prefetch-gemm-tiles: a GEMM register tile's output lines prefetched for writing before
its k loop, its B panel rows prefetched ahead inside it, a packed weight's next panel into L2,
and a weight A's next row tile into L1.

A tile (`kernels/gemm_schedule.py`) accumulates over K in registers and then stores its mr x nr
block of C once: mr rows, each nr f32 (4 cache lines at 6 x 64), a row of C apart. C is written
fresh by every call and is rarely still in cache (Whisper-tiny's 1500x1536 result is 9 MB), so
each of those stores misses and waits for the line to be read for ownership, while the next
tile's k loop cannot start until the store buffer drains. A `memref.prefetch` (write, into L1)
of each line before the k loop (`GEMM_K_LOOP`, marked by the tiling) fetches them while the tile
computes. Measured on this machine (Emerald Rapids VM, one thread, the kernel with and without
in one process, called in turn, medians): Whisper-tiny's 1500x384x1536 +1-7%, 2048x256x2048
+2-6%, MobileNet's 1x1 32->64 @48 +3%, ResNet's 3x3 64@56 +1-3%, ViT-B's 197x768x3072 and
BERT's 128x768x768 +-2%; 256^3, whose 256 KB of C stays in L2, -2% (the 24 prefetches of a tile
over K = 256 cost more than the misses they hide).

Inside the k loop, each k step reads one nr-wide row of the B panel (4 lines), which the panel
(192 KiB at ViT-B's K = 768) streams from L2 for every row block; the L1's own prefetchers
leave part of that latency exposed. A prefetch of the same lines B_AHEAD = 16 rows (4 KiB)
ahead: ViT-B's 197x768x3072 +3-8% (8 to 64 rows ahead measured alike, 4 less), 384^3 +4-5%,
1024^3 +2-12%, BERT's 128x768x768 +1-2%, 256^3 and ResNet's 3x3 +-2%, 2048x256x2048 -2%.

A K block's k loop (its row read at kb + k) gets the same prefetches: ResNet-50's 3x3 512@7
(computed transposed, K = 4608 in two blocks of 2304) +2%, 1024x4608x512 +9%, 256x6144x256 +12%.

A packed weight (B a function argument [panels, K, nr]) is read from memory once, by the first
row block of each panel (or K block): with few row blocks that first pass is most of the panel's
time and waits on DRAM (ResNet-50's 7x7 stage streams 9.4 MB filters through 9 row blocks). So
each k step also prefetches, into L2, one line of the block the loop nest reads next (the next
panel, or K block: the same memref, T rows further for a k loop of T steps), spread over the row
blocks so that every tile of the current panel fetches its share while it computes
(`_prefetch_next_block`). Measured as above: the 3x3 512@7 as a 49x4608x512 GEMM +8-17%, its
1x1 512->2048 and 2048->512 +6-9%, ViT-B's 197x768x3072 +3-4%, 197x3072x768 +3%, BERT's
128x768x768 +2%, 577 and 1500 rows +-1%; ResNet-50 as a whole 3% faster.

A weight read as A (a convolution's filter [F, C*KH*KW]: each tile's rows are mr filters, read
one column per k step as mr broadcasts) streams from memory too: ResNet-50's 1x1 convolutions
at 14x14 ran 123-132 GFLOP/s with the filter cold against 217-224 warm. The mr rows of the next
row tile follow the current tile's in memory (mr * K contiguous f32), so each k step prefetches,
into L1, one element mr further along them (`_prefetch_next_rows`): the whole next tile by the
end of the k loop, one line every 16 / mr steps, after the last tile the first (the next column
panel's). Measured on Zen 5 (one thread, the models compiled with and without in one process,
called in turn): ResNet-50 0.93x the time, EfficientNet-B0 0.95x; into L1 rather than L2 0.99x,
two tiles ahead instead of one 1.01x.

The int8 kernel's k loop (`int8_kernel.INT8_K_LOOP`) gets only the last of these, for its filter
read as 4-byte groups (`_prefetch_next_row_groups`): ResNet-50 int8 0.95x the time with the
packing epilogue; the others as well cost 1.5%.

All of the f32 tile's prefetches are one decision of the ISA row (`Isa.gemm_prefetch`, the option
`f32-tiles`): they were measured on AVX-512 cores (Emerald Rapids, Zen 5), whose 6 x 64 tile does
24 FMAs per k step. On an AVX2 core (Zen 3) the 6 x 16 tile's k step is 12 FMAs, and the
prefetches with their address arithmetic (a clamp per prefetch) made it issue-bound: without any
of them 1024^3 (B packed) went 65 -> 87 GFLOP/s, ViT-B's 197x3072x768 69 -> 93, Whisper's
1500x384x1536 57 -> 79, and whole models took 0.70x the time (BERT-4L), 0.82x (Llama-15M), 0.89x
(EfficientNet-B0), 0.90x (MobileNetV2), ResNet-50 0.99x; keeping only the stores' lines, or only the
next row tile's, was slower than none. The int8 kernel's one prefetch stays (its k step is many
more operations; with and without it on Zen 3: ResNet-18 int8 1.03x, MobileNetV2 0.98x: noise).

Runs after bufferization (the tile's destination and the panel are memrefs there); a store
under a mask (a partial column panel) is not prefetched: the lines past its columns may be
another thread's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.passes.pass_api import function_pass, option
from etc.targets.cpu.ir_query import constant_index, ops_after, walk
from etc.targets.cpu.kernels.gemm_schedule import GEMM_K_LOOP
from etc.targets.cpu.kernels.int8_kernel import INT8_K_LOOP
from etc.targets.cpu.kernels.int8_match import GROUP

LINE_BYTES = 64  # the cache line: one prefetch per line of a stored row
B_AHEAD = 16  # rows of the B panel (k steps) a prefetch runs ahead of the tile's reads


def _defined_before(value, loop) -> bool:
    """Is `value` available at `loop`: a block argument of an enclosing block, or the result of
    an op before `loop` (or before the enclosing op of `loop`) in the same block?"""
    owner = value.owner
    if isinstance(owner, ir.Block):
        block, defining = owner, None
    else:
        defining = owner.operation
        block = defining.block
    current = loop
    while current is not None and current.name != "func.func":  # (a module has no block to ask)
        if current.block == block:
            if defining is None:
                return True
            for op in block.operations:  # in order: the defining op must come first
                if op.operation == defining:
                    return True
                if op.operation == current:
                    return False
            return False
        current = current.parent
    return False


def _tile_stores(loop) -> list:
    """The vector stores after `loop` in its block (its epilogue between), up to the next loop."""
    stores = []
    for op in ops_after(loop):
        if op.name == "scf.for":  # the next tile's (or another nest's)
            break
        if op.name == "vector.transfer_write":
            stores.append(op)
    return stores


def _prefetch_lines(store, loop) -> int:
    """Prefetch, before `loop`, every line `store` (a vector.transfer_write to a memref) writes;
    returns how many."""
    from torch_mlir.dialects import arith, memref

    operands = list(store.operands)
    mem = operands[1]
    if not isinstance(mem.type, ir.MemRefType):
        return 0
    mtype = ir.MemRefType(mem.type)
    vtype = ir.VectorType(operands[0].type)
    indices = operands[2:2 + mtype.rank]
    if len(operands) != 2 + mtype.rank:  # a mask: a partial panel
        return 0
    amap = ir.AffineMapAttr(store.attributes["permutation_map"]).value
    if amap != ir.AffineMap.get_minor_identity(mtype.rank, vtype.rank) or vtype.rank > 2:
        return 0
    if not all(_defined_before(v, loop) for v in [mem] + indices):
        return 0
    per_line = LINE_BYTES // (mtype.element_type.width // 8)
    rows = vtype.shape[0] if vtype.rank == 2 else 1
    index = ir.IndexType.get()
    count = 0
    with ir.InsertionPoint(loop), loop.location:
        def shifted(value, by):
            if by == 0:
                return value
            return arith.AddIOp(value, arith.ConstantOp(index, ir.IntegerAttr.get(index, by)).result).result

        for r in range(rows):
            for c in range(0, vtype.shape[-1], per_line):
                at = list(indices)
                if vtype.rank == 2:
                    at[-2] = shifted(at[-2], r)
                at[-1] = shifted(at[-1], c)
                memref.PrefetchOp(mem, at, True, 3, True)
                count += 1
    return count


def _prefetch_ahead(loop) -> int:
    """In the body of k loop `loop`: for each read of a row of the B panel (a vector.transfer_read
    at row k, the loop's variable, or k plus a K block's start, of a vector wider than one
    element), a prefetch of the same lines B_AHEAD rows further, clamped to the memref's last row (an
    index past it is out of bounds, though a prefetch would not fault). Returns how many."""
    from torch_mlir.dialects import arith, memref

    body = loop.regions[0].blocks[0]
    k = body.arguments[0]
    count = 0
    for op in list(body.operations):
        op = op.operation
        if op.name != "vector.transfer_read":
            continue
        operands = list(op.operands)
        mem = operands[0]
        if not isinstance(mem.type, ir.MemRefType):
            continue
        mtype = ir.MemRefType(mem.type)
        vtype = ir.VectorType(op.results[0].type)
        indices = operands[1:1 + mtype.rank]
        if mtype.rank < 2 or not _k_row_offset(indices[-2], k) or vtype.shape[-1] < 2 or \
                any(d != 1 for d in vtype.shape[:-1]) or \
                ir.AffineMapAttr(op.attributes["permutation_map"]).value != \
                ir.AffineMap.get_minor_identity(mtype.rank, vtype.rank):
            continue
        per_line = LINE_BYTES // (mtype.element_type.width // 8)
        index = ir.IndexType.get()
        with ir.InsertionPoint(op), op.location:
            def constant(value):
                return arith.ConstantOp(index, ir.IntegerAttr.get(index, value)).result

            # clamped to the last row: past it the index would leave the memref's bounds
            last = constant(mtype.shape[-2] - 1) if mtype.shape[-2] != ir.ShapedType.get_dynamic_size() else \
                arith.SubIOp(memref.DimOp(mem, constant(mtype.rank - 2)).result, constant(1)).result
            at = list(indices)
            at[-2] = arith.MinUIOp(arith.AddIOp(indices[-2], constant(B_AHEAD)).result, last).result
            for c in range(0, vtype.shape[-1], per_line):
                line = list(at)
                if c:
                    line[-1] = arith.AddIOp(at[-1], constant(c)).result
                memref.PrefetchOp(mem, line, False, 3, True)
                count += 1
    return count


def _identity_layout(mtype) -> bool:
    """A contiguous row-major memref (its rows one after another: the next block's rows are
    where the read's index, moved on by the block's length, says)."""
    return isinstance(mtype.layout, ir.AffineMapAttr) and \
        ir.AffineMapAttr(mtype.layout).value == ir.AffineMap.get_identity(mtype.rank)


def _argument_reads(loop, min_rank: int):
    """(read, memref type, indices, vector type) for each vector.transfer_read in the body of
    `loop` from a function argument of at least `min_rank` dims, statically shaped and contiguous
    row-major (a weight: where a read at one index is, the elements after it follow)."""
    for op in loop.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "vector.transfer_read":
            continue
        operands = list(op.operands)
        mem = operands[0]
        if not isinstance(mem, ir.BlockArgument) or not isinstance(mem.type, ir.MemRefType):
            continue
        mtype = ir.MemRefType(mem.type)
        if mtype.rank < min_rank or not mtype.has_static_shape or not _identity_layout(mtype):
            continue
        owner = mem.owner.owner
        if owner is None or owner.operation.name != "func.func":
            continue
        yield op, mtype, operands[1:1 + mtype.rank], ir.VectorType(op.results[0].type)


def _k_row_offset(index, k) -> bool:
    """Is `index` the k loop's variable `k`, or k plus a value defined outside the loop (a K
    block's start: `affine.apply (s0 + s1)` or `arith.addi`)?"""
    if index == k:
        return True
    owner = index.owner
    if isinstance(owner, ir.Block):
        return False
    op = owner.operation
    if op.name == "arith.addi":
        return k in list(op.operands)
    if op.name == "affine.apply":
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        return str(amap) == "()[s0, s1] -> (s0 + s1)" and k in list(op.operands)
    return False


def _packed_weight_reads(loop) -> list:
    """The reads, in k loop `loop`, of a row of a packed weight: a function argument [..., K, nr]
    (contiguous, statically shaped) read as one whole nr-wide row at row k (or k plus a K block's start)."""
    k = loop.regions[0].blocks[0].arguments[0]
    found = []
    for op, mtype, indices, vtype in _argument_reads(loop, 3):
        if _k_row_offset(indices[-2], k) and constant_index(indices[-1]) == 0 and \
                list(vtype.shape) == [1, mtype.shape[-1]]:
            found.append(op)
    return found


def _why_no_next_block(loop, reads) -> "str | None":
    """Why the next-block prefetch cannot be placed around k loop `loop`: None when it can, "" when
    it does not apply (no loop of two or more row blocks around the k loop: the prefetch spreads a
    panel's lines over the row blocks, so a GEMM of one row block has none to spread them over),
    else the reason, which the caller records."""
    rows_loop = loop.parent
    if rows_loop is None or rows_loop.name != "scf.for":
        return ""
    row = rows_loop.regions[0].blocks[0].arguments[0]
    body_reads = [op.operation for op in loop.regions[0].blocks[0].operations
                  if op.operation.name == "vector.transfer_read"]
    # the loop around is the row blocks': A's reads (a column of the tile's rows) start at its variable
    if not any(len(op.operands) >= 4 and op.operands[-3] == row for op in body_reads):
        return ""
    bounds = [constant_index(v) for v in list(loop.operands)[:3]]
    row_bounds = [constant_index(v) for v in list(rows_loop.operands)[:3]]
    if None in bounds or bounds[2] != 1 or bounds[1] <= bounds[0]:
        return "the k loop's bounds are not constants with step 1"
    if None in row_bounds or row_bounds[2] <= 0:
        return "the row blocks' loop bounds are not constants"
    if -(-(row_bounds[1] - row_bounds[0]) // row_bounds[2]) < 2:
        return ""
    return None


def _flat_view(mem):
    """`mem` (a function argument: contiguous, statically shaped) as a 1-D memref, made once at the
    function's entry."""
    from torch_mlir.dialects import memref

    block = mem.owner
    for op in block.operations:
        op = op.operation
        if op.name == "memref.collapse_shape" and op.operands[0] == mem:
            return op.results[0]
    mtype = ir.MemRefType(mem.type)
    size = 1
    for d in mtype.shape:
        size *= d
    flat = ir.MemRefType.get([size], mtype.element_type, memory_space=mtype.memory_space)
    i64 = ir.IntegerType.get_signless(64)
    groups = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in range(mtype.rank)])])
    with ir.InsertionPoint.at_block_begin(block), mem.owner.owner.operation.location:
        return memref.CollapseShapeOp(flat, mem, groups).result


def _prefetch_next_block(loop) -> int:
    """In the body of k loop `loop` over a packed weight (B a function argument whose rows are
    one nr-wide panel row each, the k loop reading T of them): prefetches (into L2) of the T
    rows the kernel reads after these, the next panel (or K block), spread over the row blocks
    of the loop around it: row block r of R fetches lines [r, r + 1) * 4T/R of the next block,
    one line (or ceil(lines per row / R)) per k step. A k loop over a packed weight where that
    cannot be placed records why (`etc.cpu.decisions`). Returns how many prefetch ops it made."""
    from torch_mlir.dialects import arith, memref

    from etc.targets.cpu import decisions

    reads = _packed_weight_reads(loop)
    if not reads:
        return 0
    why = _why_no_next_block(loop, reads)
    if why:
        decisions.record(loop, "prefetch", "no-next-panel", f"a packed weight's next panel is not prefetched: {why}")
    if why is not None:
        return 0
    rows_loop = loop.parent
    k_lo, k_hi, _ = [constant_index(v) for v in list(loop.operands)[:3]]
    r_lo, r_hi, r_step = [constant_index(v) for v in list(rows_loop.operands)[:3]]
    trip, blocks = k_hi - k_lo, -(-(r_hi - r_lo) // r_step)
    k = loop.regions[0].blocks[0].arguments[0]
    row = rows_loop.regions[0].blocks[0].arguments[0]
    count = 0
    for op in reads:
        operands = list(op.operands)
        mem = operands[0]
        mtype = ir.MemRefType(mem.type)
        indices = operands[1:1 + mtype.rank]
        per_line = LINE_BYTES // (mtype.element_type.width // 8)
        nr = mtype.shape[-1]
        lines = -(-nr // per_line)  # per panel row
        per_step = -(-lines // blocks)
        strides, size = [], 1
        for d in reversed(mtype.shape):
            strides.insert(0, size)
            size *= d
        flat = _flat_view(mem)
        index = ir.IndexType.get()
        with ir.InsertionPoint(op), op.location:
            def constant(value):
                return arith.ConstantOp(index, ir.IntegerAttr.get(index, value)).result

            # Line `first + j` of the next block at k step s of row block r: first = r*S + s*p
            # (S = ceil(lines*T/R) lines per row block, p = ceil(lines/R) per step), as an offset
            # into the weight seen flat (1-D: the next block's lines follow the row this k step
            # reads, moved back to the block's first and on by T rows), so the address stays
            # linear in k (no division in the loop); clamped to the weight's last element, past
            # which the last block's next one would be.
            block = arith.DivUIOp(arith.SubIOp(row, constant(r_lo)).result, constant(r_step)).result
            step = arith.SubIOp(k, constant(k_lo)).result
            first = arith.AddIOp(arith.MulIOp(block, constant(-(-lines * trip // blocks))).result,
                                 arith.MulIOp(step, constant(per_step)).result).result
            at_row = arith.AddIOp(arith.SubIOp(indices[-2], step).result, constant(trip)).result
            base = arith.MulIOp(at_row, constant(strides[-2])).result
            for i in range(mtype.rank - 2):
                base = arith.AddIOp(base, arith.MulIOp(indices[i], constant(strides[i])).result).result
            for j in range(per_step):
                line = arith.AddIOp(first, constant(j)).result if j else first
                at = arith.AddIOp(base, arith.MulIOp(line, constant(per_line)).result).result
                memref.PrefetchOp(flat, [arith.MinUIOp(at, constant(size - 1)).result], False, 2, True)
                count += 1
    return count


def _prefetch_next_rows(loop) -> int:
    """In the body of k loop `loop`, for each read of A's column for the tile's r rows (a
    vector<r x 1> read at [row, k] of a contiguous weight argument [..., M, K], `row` defined
    outside the loop, the loop over the whole row: 0 to K, step 1; a convolution's filter [F, C],
    the tile's rows one filter each): prefetches (into L1) of the r rows the next row tile reads,
    one line every 16 / r k steps. The next tile's rows follow these in memory (r * K contiguous
    f32), so k step s prefetches the element at ((row + r) mod M) * K + s * r: linear in s, the
    whole next tile by the loop's end; after the last tile the rows wrap to the first (the next
    column panel starts there again). Returns how many prefetch ops it made."""
    from torch_mlir.dialects import arith, memref

    count = 0
    k = loop.regions[0].blocks[0].arguments[0]
    bounds = [constant_index(v) for v in list(loop.operands)[:3]]
    index = ir.IndexType.get()

    def constant(value):
        return arith.ConstantOp(index, ir.IntegerAttr.get(index, value)).result

    for op, mtype, indices, vtype in list(_argument_reads(loop, 2)):
        M, K = mtype.shape[-2], mtype.shape[-1]
        if vtype.rank != 2 or vtype.shape[1] != 1 or indices[-1] != k or bounds != [0, K, 1] or \
                not _defined_before(indices[-2], loop):
            continue
        rows = vtype.shape[0]
        flat = _flat_view(op.operands[0])
        with ir.InsertionPoint(loop), loop.location:  # the tile's invariant start, before its k loop
            next_row = arith.RemUIOp(arith.AddIOp(indices[-2], constant(rows)).result, constant(M)).result
            start, stride = arith.MulIOp(next_row, constant(K)).result, M * K
            for i in reversed(range(mtype.rank - 2)):  # leading (batch) dims
                start = arith.AddIOp(start, arith.MulIOp(indices[i], constant(stride)).result).result
                stride *= mtype.shape[i]
        with ir.InsertionPoint(op), op.location:
            at = arith.AddIOp(start, arith.MulIOp(k, constant(rows)).result).result
            memref.PrefetchOp(flat, [arith.MinUIOp(at, constant(stride - 1)).result], False, 3, True)
            count += 1
    return count


def _k_times(index, k, factor: int) -> bool:
    """Is `index` k * factor (an `arith.muli` of the k loop's variable by the constant)?"""
    owner = index.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.muli":
        return False
    a, b = list(owner.operation.operands)
    return (a == k and constant_index(b) == factor) or (b == k and constant_index(a) == factor)


def _prefetch_next_row_groups(loop) -> int:
    """The int8 kernel's `_prefetch_next_rows` (its k loop, marked `INT8_K_LOOP`, gets only this
    one: with the others too, B's rows ahead, the next panel and the stores' lines, ResNet-50 int8
    took 1.5% longer): its k loop reads, for each of the tile's r rows, one group of G = 4 bytes of
    the packed filter (a function argument seen as rows [M, KB * 4]): a vector<4 x i8> at
    [row, kb * 4]. So k step s
    prefetches (into L1) the byte at ((row0 + r) mod M) * KB * G + s * r * G: the next tile's r rows
    (contiguous, r * KB * G bytes) by the loop's end."""
    from torch_mlir.dialects import arith, memref

    k = loop.regions[0].blocks[0].arguments[0]
    if constant_index(list(loop.operands)[0]) != 0:
        return 0
    index = ir.IndexType.get()

    def constant(value):
        return arith.ConstantOp(index, ir.IntegerAttr.get(index, value)).result

    groups = {}
    for op, mtype, indices, vtype in list(_argument_reads(loop, 2)):
        if mtype.rank == 2 and vtype.rank == 1 and vtype.shape[0] == GROUP and \
                _defined_before(indices[0], loop) and _k_times(indices[1], k, GROUP):
            groups.setdefault(op.operands[0], []).append((op, indices[0]))
    count = 0
    for mem, reads in groups.items():
        M, K4 = ir.MemRefType(mem.type).shape
        size, KB = M * K4, K4 // GROUP
        if constant_index(list(loop.operands)[1]) != KB:
            continue
        rows, first_op, first_row = len(reads), reads[0][0], reads[0][1]
        flat = _flat_view(mem)
        with ir.InsertionPoint(loop), loop.location:
            next_row = arith.RemUIOp(arith.AddIOp(first_row, constant(rows)).result, constant(M)).result
            start = arith.MulIOp(next_row, constant(KB * GROUP)).result
        with ir.InsertionPoint(first_op), first_op.location:
            at = arith.AddIOp(start, arith.MulIOp(k, constant(rows * GROUP)).result).result
            memref.PrefetchOp(flat, [arith.MinUIOp(at, constant(size - 1)).result], False, 3, True)
            count += 1
    return count


@dataclass
class PrefetchOptions:
    f32_tiles: bool = option(True, help="prefetch for the f32 GEMM tiles (false: only the int8 kernel's filter rows)")


@function_pass("etc-cpu-prefetch-gemm-tiles",
               "Prefetch each GEMM register tile's output lines before its k loop, its B rows ahead in it, "
               "a packed weight's next panel and a weight A's next row tile (the int8 kernel's too)",
               PrefetchOptions)
def prefetch_gemm_tiles(module, options=None) -> int:
    """See the module docstring; returns the number of prefetches made."""
    f32_tiles = options.f32_tiles if options is not None else True
    done = 0
    with module.context, ir.Location.unknown():
        for loop in walk(module, ("scf.for",)):
            if INT8_K_LOOP in loop.attributes:
                done += _prefetch_next_row_groups(loop)
            if GEMM_K_LOOP not in loop.attributes or not f32_tiles:
                continue
            for store in _tile_stores(loop):
                done += _prefetch_lines(store, loop)
            done += _prefetch_ahead(loop)
            done += _prefetch_next_block(loop)
            done += _prefetch_next_rows(loop)
    return done
