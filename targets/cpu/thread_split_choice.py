"""Which loop of a nest the threads share (the middle layer of the threaded entry).

`parallel.py` decides what each top-level op runs as (shared by the threads, on thread 0, a
barrier after it) and emits the chunks; this module answers, for one nest, which of its loops
marked `etc.thread_split` the threads divide: `choose_split` takes, of the candidates (outermost
first), the outermost whose contiguous chunks leave at most `MAX_IDLE_SHARE` of the threads' time
idle, else the best balanced; `thread_split_loop` follows a nest's perfectly nested loops down to
its candidates (a GEMM panel's peeled partial row block beside them allowed when
`independent_rest` proves it writes other rows and reads none written); `loop_trips` gives a
linalg op's loop sizes for the same choice before it is lowered.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation
from etc.targets.cpu.ir_query import constant_index
from etc.targets.cpu.loop_effects import PURE_PREFIXES, THREAD_SPLIT, base


def loop_trips(op, n: int) -> list | None:
    """Static trip count of each loop of a linalg.generic on static buffers, from its maps."""
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    trips = [None] * n
    for amap, value in zip(maps, op.operands):
        t = value.type
        if not isinstance(t, (ir.MemRefType, ir.RankedTensorType)) or not t.has_static_shape:
            continue
        for size, expr in zip(t.shape, amap.results):
            try:
                d = ir.AffineDimExpr(expr).position
            except ValueError:
                continue  # d0 * 2 + d1 and such: the loop's size comes from another operand
            if trips[d] is None:
                trips[d] = size
    return None if any(t is None for t in trips) else trips


def static_trips(loop) -> "int | None":
    """The trip count of scf.for `loop` when its bounds and step are constants."""
    lb, ub, step = (constant_index(v) for v in list(loop.operands)[:3])
    return -(-(ub - lb) // step) if None not in (lb, ub, step) and step > 0 else None


def idle_share(trips: "int | None", threads: int) -> float:
    """The share of the threads' time lost waiting when `trips` equal iterations are cut into
    `threads` contiguous chunks (ceil-sized, as `_chunk` cuts them): 0 when they divide evenly;
    a run-time trip count counts as even (it is long, or it is not known)."""
    if trips is None:
        return 0.0
    if trips <= 0:
        return 1.0
    return 1.0 - trips / (threads * -(-trips // threads))



# The most time a split may leave idle before a better-balanced loop (inner, or longer) is
# preferred: 3 iterations over 2 threads lose 25%, 7 lose 12.5%, 197 lose 0.25%.
MAX_IDLE_SHARE = 0.1


def choose_split(trips: list, threads: int) -> "int | None":
    """Which of the candidate loops (outermost first, their trip counts or None when dynamic) the
    threads share: the outermost one whose chunks leave at most `MAX_IDLE_SHARE` of the time
    idle (`idle_share`), else the best balanced (the outermost of equals); None when every
    candidate runs once or never (nothing to share)."""
    useful = [i for i, t in enumerate(trips) if t is None or t >= 2]
    if not useful:
        return None
    for i in useful:
        if idle_share(trips[i], threads) <= MAX_IDLE_SHARE:
            return i
    return min(useful, key=lambda i: (idle_share(trips[i], threads), i))


def thread_split_loop(op, threads: int):
    """(the `etc.thread_split` scf.for at or under top-level loop `op` the threads share, the
    rests to run on one thread: lists of ops beside a loop on the way), or None.

    Loops are followed down while every loop on the way holds only pure ops besides the next
    loop (all threads may run those loops, each doing its chunk of the one marked), or besides
    it a rest proved independent of it (`independent_rest`: a GEMM panel's peeled partial row
    block, which writes rows the loop never touches); of the marked loops met on the way (a
    GEMM's batch, column panels and row tiles, a row kernel's every row dimension, a blocked
    transpose's block loops), `choose_split` picks by balance. A rest inside the loop chosen
    (or above it) is every thread's own work; beside the chosen loop or below, it must run once."""
    marked, rests = [], []  # rests[i]: (the ops beside the i-th loop of the chain, number of marked loops above)
    current = op
    while current.name == "scf.for" and not len(current.results):
        if THREAD_SPLIT in current.attributes:
            marked.append(current)
        body = [o.operation for o in current.regions[0].blocks[0].operations if o.operation.name != "scf.yield"]
        inner = [o for o in body if not o.name.startswith(PURE_PREFIXES)]
        if len(inner) == 1:
            current = inner[0]
            continue
        loops = [o for o in inner if o.name == "scf.for" and not len(o.results) and has_mark(o)]
        rest = independent_rest(loops[0], body) if len(loops) == 1 else None
        if rest is None:
            break
        rests.append((rest, len(marked)))
        current = loops[0]
    if not marked:
        return None
    chosen = choose_split([static_trips(loop) for loop in marked], threads)
    chosen = 0 if chosen is None else chosen
    # a rest in the body of a loop at or below the chosen one (`above`: marked loops at or above
    # it, so more than `chosen`) is in every thread's chunk; one above it runs on one thread
    return marked[chosen], [rest for rest, above in rests if above <= chosen]


def has_mark(loop) -> bool:
    """Is `loop`, or a loop inside it, marked etc.thread_split?"""
    found = []

    def visit(inner):
        if inner.name == "scf.for" and THREAD_SPLIT in inner.attributes:
            found.append(inner)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    loop.walk(visit)
    return bool(found)


_ROW_WRITES = ("vector.transfer_write", "memref.store")
_ROW_READS = ("vector.transfer_read", "memref.load", "vector.load")
# Writes (or what may write) the proof of `independent_rest` cannot place: any of them refutes it.
_OTHER_WRITES = ("vector.store", "vector.maskedstore", "vector.scatter", "memref.copy", "func.call", "llvm.call",
                 "memref.alloc")


def independent_rest(loop, body: list) -> "list | None":
    """The ops of `body` (a loop's) besides `loop` and what it uses, when they are independent
    of `loop`'s iterations, else None. Proved for the shape of a GEMM panel's peeled row block:
    `loop` (static bounds) writes only through `vector.transfer_write`/`memref.store` at
    [iv + c, ...] (a constant c >= 0; the rows written, c to c + the vector's height, within its
    step: a 2-D tile at [iv, ...], an int8 tile's row by row) into views defined outside it; the
    rest writes only into those views at constant rows past the last row `loop` writes; neither
    reads the buffers those views are of; the rest's results are used only by the rest."""
    lb, ub, step = (constant_index(v) for v in list(loop.operands)[:3])
    if None in (lb, ub, step) or step <= 0 or ub <= lb:
        return None
    iv = loop.regions[0].blocks[0].arguments[0]
    position = {o: i for i, o in enumerate(body)}
    needed, stack = set(), [loop]
    while stack:  # the ops of the body `loop` uses, directly or through the ops nested in it
        current = stack.pop()
        operands = []

        def collect(inner):
            operands.extend(inner.operands)
            return ir.WalkResult.ADVANCE

        current.walk(collect)
        for v in operands:
            owner = v.owner
            if isinstance(owner, ir.Block):
                continue
            owner = as_operation(owner)
            if owner in position and owner not in needed and owner != loop:
                if not owner.name.startswith(PURE_PREFIXES):
                    return None
                needed.add(owner)
                stack.append(owner)
    rest = [o for o in body if o != loop and o not in needed]
    if not rest:
        return None
    rest_set = set(rest)
    for o in rest:
        for result in o.results:
            for use in result.uses:
                user = as_operation(use.owner)
                while user not in position and user.parent is not None:
                    user = user.parent
                if user not in rest_set:
                    return None
    views, bad, rows_end = set(), [False], [lb]
    last = lb + ((ub - lb - 1) // step) * step

    def loop_write(inner):
        name = inner.name
        if name in _ROW_WRITES:
            view = inner.operands[1]
            first = list(inner.operands)[2] if len(inner.operands) > 2 else None
            offset = _offset_from(first, iv)
            height = _rows_written(inner)
            if offset is None or offset + height > step or not isinstance(view.owner, ir.Block) \
                    and as_operation(view.owner) in position and as_operation(view.owner) not in needed:
                bad[0] = True
            else:
                rows_end[0] = max(rows_end[0], last + offset + height)
            views.add(view)
        elif name in _OTHER_WRITES or name.startswith("linalg."):
            bad[0] = True
        return ir.WalkResult.ADVANCE

    loop.walk(loop_write)
    if bad[0] or not views:
        return None
    bases = {base(v) for v in views}

    def rest_ok(inner):
        name = inner.name
        if name in _ROW_WRITES:
            row = constant_index(list(inner.operands)[2]) if len(inner.operands) > 2 else None
            if inner.operands[1] not in views or row is None or row < rows_end[0]:
                bad[0] = True
        elif name in _ROW_READS and base(inner.operands[0]) in bases:
            bad[0] = True
        elif name in _OTHER_WRITES or name.startswith("linalg."):
            bad[0] = True
        return ir.WalkResult.ADVANCE

    for o in rest:
        o.walk(rest_ok)

    def loop_reads(inner):
        if inner.name in _ROW_READS and base(inner.operands[0]) in bases:
            bad[0] = True
        return ir.WalkResult.ADVANCE

    loop.walk(loop_reads)
    return None if bad[0] else rest


def _offset_from(index, iv) -> "int | None":
    """c when `index` is `iv` (0) or `arith.addi` of `iv` and the constant c >= 0, else None."""
    if index is None:
        return None
    if index == iv:
        return 0
    owner = index.owner
    if isinstance(owner, ir.Block) or as_operation(owner).name != "arith.addi":
        return None
    a, b = as_operation(owner).operands
    c = constant_index(b) if a == iv else constant_index(a) if b == iv else None
    return c if c is not None and c >= 0 else None


def _rows_written(write) -> int:
    """How many rows (the first index's dimension) a write covers: a vector as tall as it when it
    spans every dimension of the view (a 2-D tile), one when it spans only the inner ones (a row)."""
    if write.name != "vector.transfer_write":
        return 1
    shape = ir.VectorType(write.operands[0].type).shape
    rank = len(list(write.operands)[2:])
    if "permutation_map" in write.attributes:  # a vector laid along other dimensions: unproved
        amap = ir.AffineMapAttr(write.attributes["permutation_map"]).value
        if amap != ir.AffineMap.get_minor_identity(rank, len(shape)):
            return 1 << 30
    return shape[0] if len(shape) == rank else 1
