"""Multi-threaded entry points without a threading runtime in the object.

The object must stay self-contained (libc/libm only: no OpenMP, no pthreads
calls), so the threads are the caller's: the runtime calls the same entry from
`nthreads` threads at once, each with its thread index, and the generated code
splits the work and synchronizes itself:

    void entry(void **args, intptr tid, intptr nthreads, int32_t *barrier)

- every top-level loop nest is an `scf.parallel` (linalg lowered with
  `convert-linalg-to-parallel-loops`); each thread runs a contiguous chunk of
  one of its parallel dimensions (the first whose trip count is at least
  `nthreads`, else the longest), so a batch-1 convolution splits its output
  channels and a matmul its rows;
- a top-level `scf.for` nest of the GEMM strategy runs on every thread, each taking
  a chunk of the loop marked `etc.thread_split` (column panels: each writes its own
  output columns through all K blocks, so no barrier is needed inside);
- any other top-level op with effects (a loop that only reduces, a store) runs
  on thread 0 only;
- after each of them all threads meet at a barrier (an atomic counter and a
  generation word in the caller's `barrier` buffer, spinning on the generation
  and, after a while, yielding the core with `sched_yield`: on a loaded machine
  a pure spin lets a preempted thread hold up everyone),
  because the next loop nest reads what the previous one wrote.

Called with `nthreads = 1` the same code runs the whole range, and the barrier
returns at once.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.errors import LoweringError
from etc.ir.ops import as_operation, replace_operands

BARRIER_FN = "etc_cpu_barrier"
THREAD_SPLIT = "etc.thread_split"  # the GEMM kernels mark their loop over independent column panels

# Top-level ops that are pure (views, constants, index math): every thread runs them. So it does a
# stack allocation (a GEMM kernel's panel buffer, etc-cpu-plan-scratch): each thread gets its own.
PURE_PREFIXES = ("arith.", "affine.apply", "memref.get_global", "memref.alloca", "memref.expand_shape",
                  "memref.collapse_shape",
                  "memref.subview", "memref.reinterpret_cast", "memref.cast", "memref.view", "memref.extract_strided_metadata",
                  "ub.poison")

# Top-level reads of memory: when used after the thread-0 run they sit in, every thread reads again.
_READS = ("memref.load", "vector.load", "vector.transfer_read")


_VIEWS = ("memref.expand_shape", "memref.collapse_shape", "memref.subview", "memref.reinterpret_cast",
          "memref.cast", "memref.view")
_STORES = ("memref.store", "vector.store", "vector.transfer_write", "vector.maskedstore", "memref.copy")


def _base(value):
    """The buffer a memref value views (an argument, an allocation)."""
    while not isinstance(value.owner, ir.Block) and value.owner.name in _VIEWS:
        value = value.owner.operands[0]
    return value


def _written_bases(op):
    """The buffers `op` (and what it nests) may write, or None when it cannot tell (a call)."""
    bases, unknown = set(), [False]

    def visit(inner):
        name = inner.name
        if name in _STORES:
            bases.add(_base(inner.operands[1]))
        elif name.startswith("linalg."):
            if "operandSegmentSizes" in inner.attributes:  # destination-style: its inits are written
                sizes = list(ir.DenseI32ArrayAttr(inner.attributes["operandSegmentSizes"]))
                bases.update(_base(v) for v in list(inner.operands)[sizes[0]:sizes[0] + sizes[1]])
            else:
                unknown[0] = True
        elif name in ("func.call", "llvm.call"):
            unknown[0] = True
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return None if unknown[0] else bases


def _yield_chains(if_op):
    """For an `scf.if` whose branches yield buffers computed only by views, sizes and index math
    from values outside it (a cond delegate returning one buffer or the other): (the ops of each
    branch those yields need, the outside values they read). None for any other `scf.if`."""
    needed, outside = [], []
    for region in if_op.regions:
        block = region.blocks[0]
        ops = [o.operation for o in block.operations]
        inside = {v for o in ops for v in o.results}
        producer = {v: o for o in ops for v in o.results}
        keep, stack = set(), list(ops[-1].operands)
        while stack:
            v = stack.pop()
            if v not in inside:
                if not isinstance(v.owner, ir.Block) or v.owner != block:
                    outside.append(v)
                continue
            o = producer[v]
            if o in keep:
                continue
            if len(o.regions) or not (o.name.startswith(PURE_PREFIXES) or o.name == "memref.dim"):
                return None
            keep.add(o)
            stack.extend(o.operands)
        needed.append(keep)
    return needed, outside


def _inputs(op) -> list:
    """The values `op` reads: its operands, plus for an `scf.if` whose results are re-selected
    after a barrier (`_yield_chains`) the outside values its yields are computed from."""
    chains = _yield_chains(op) if op.name == "scf.if" else None
    return list(op.operands) + (chains[1] if chains else [])


def _selection_only(if_op) -> None:
    """Strip a clone of an `scf.if` to the ops its yields need: it selects the buffer again."""
    needed, _ = _yield_chains(if_op)
    for region, keep in zip(if_op.regions, needed):
        ops = [o.operation for o in region.blocks[0].operations]
        for o in reversed(ops[:-1]):
            if o not in keep:
                o.erase()


def _const_index(value):
    owner = value.owner
    op = as_operation(owner)
    if isinstance(owner, ir.Block) or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def partition_top_level_loops(fn, threads: int = 2) -> int:
    """Rewrite `fn` (memref form, top-level loop nests already `scf.parallel`) for the threaded ABI,
    each nest's shared loop chosen for `threads` threads (`choose_split`).

    Appends arguments (barrier: memref<2xi32>, tid: index, nthreads: index); returns the number
    of barriers inserted.
    """
    from torch_mlir.dialects import arith, func as func_d, scf

    block = fn.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    context = fn.context
    with context, ir.Location.unknown():
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)
        barrier_type = ir.MemRefType.get([2], i32)
        barrier = block.add_argument(barrier_type, ir.Location.unknown())
        tid = block.add_argument(index, ir.Location.unknown())
        nthreads = block.add_argument(index, ir.Location.unknown())
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs) + [barrier_type, index, index], list(ftype.results)))
        if "arg_attrs" in fn.attributes:
            attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs + [ir.DictAttr.get({})] * 3)
        module_body = fn.operation.parent.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(module_body):
            decl = func_d.FuncOp(BARRIER_FN, ir.FunctionType.get([barrier_type, index], []))
            decl.attributes["sym_visibility"] = ir.StringAttr.get("private")

        barriers = 0

        def barrier_after(op):
            nonlocal barriers
            with insertion_after(op):
                call = func_d.CallOp([], ir.FlatSymbolRefAttr.get(BARRIER_FN), [barrier, nthreads])
            barriers += 1
            return call

        def run_on_thread_zero(run: list):
            """Move `run` (consecutive top-level ops, in order) under one `if tid == 0`.

            A read in the run whose value is also used after it (a scalar loaded next to a tile's
            tail and broadcast into the next loop nest) is read again by every thread after the
            barrier, where what the run wrote is visible to all, and so are views, sizes and
            index math on such reads (a dynamic model's view at a size it loaded, and its
            `memref.dim`); any other value used after the run is an error (it exists on thread 0
            only)."""
            inside = set(run)
            defined = {v for op in run for v in op.results}
            producer = {v: op for op in run for v in op.results}

            position = {op: i for i, op in enumerate(run)}
            written = [_written_bases(op) for op in run]  # per op: the buffers it may write (None: any)

            def repeatable(op, seen=()) -> bool:
                """A read no later op of the run may overwrite, or a view/size/index op, or an
                `scf.if` whose branches only pick a buffer (its writes stay on thread 0; every
                thread selects the same buffer again), whose inputs are repeatable or from before
                the run: after the barrier it gives what it gave."""
                if op.name in _READS:
                    base = _base(op.operands[0])
                    if any(w is None or base in w for w in written[position[op] + 1:]):
                        return False
                elif op.name == "scf.if":
                    if _yield_chains(op) is None:
                        return False
                elif not (op.name.startswith(PURE_PREFIXES) or op.name == "memref.dim"):
                    return False
                return all(v not in defined or (producer[v] not in seen and repeatable(producer[v], (*seen, op)))
                           for v in _inputs(op))

            again_ops = set()  # the ops every thread repeats after the barrier (with what they read)
            escapes = {}  # op -> [(user, operand index)] outside the run
            for op in run:
                escaping = []
                for result in op.results:
                    for use in result.uses:
                        user = as_operation(use.owner)
                        if _top_level_ancestor(user, block) not in inside:
                            escaping.append((user, use.operand_number))
                if not escaping:
                    continue
                if not repeatable(op):
                    user = escaping[0][0]
                    raise LoweringError(f"cpu codegen: '{op.name}' runs on one thread but its result "
                                        f"is used after it by '{user.name}'")
                escapes[op] = escaping
                stack = [op]
                while stack:
                    current = stack.pop()
                    if current not in again_ops:
                        again_ops.add(current)
                        stack.extend(producer[v] for v in _inputs(current) if v in defined)
            # At the run's last op: index math left in place between its ops stays above the guard.
            with ir.InsertionPoint(run[-1]):
                zero = arith.ConstantOp(index, 0).result
                is_first = arith.CmpIOp(arith.CmpIPredicate.eq, tid, zero).result
                guard = scf.IfOp(is_first)
            with ir.InsertionPoint(guard.then_block):
                terminator = scf.YieldOp([])
            for op in run:
                op.move_before(terminator)
            call = barrier_after(guard.operation)
            with insertion_after(call.operation):
                remap = {}
                for op in [o for o in run if o in again_ops]:  # in order: each after what it reads
                    again = op.clone()
                    if op.name == "scf.if":
                        _selection_only(again)
                    replace_operands(again, remap)
                    remap.update(zip(op.results, again.results))
                for op, escaping in escapes.items():
                    for user, position in escaping:
                        user.operands[position] = remap[user.operands[position]]

        run: list = []
        depends: set = set()  # values computed by the current run
        for op in ops:
            name = op.name
            pure = name.startswith(PURE_PREFIXES)
            if name == "func.return":
                break
            if pure and not any(v in depends for v in op.operands):
                continue  # every thread computes views, constants and index math
            split = _thread_split_loop(op, threads) if name == "scf.for" else None
            if name == "scf.parallel" or split is not None:
                if run:
                    run_on_thread_zero(run)
                    run, depends = [], set()
                if split is not None:
                    split, rests = split
                    for rest in rests:
                        _run_rest_once(rest, tid, nthreads)
                    _split_for(split, tid, nthreads)
                else:
                    _split_parallel(op, tid, nthreads)
                barrier_after(op)
                continue
            # Anything else (a reduction loop, the straight-line tail of a tile, a store) runs on
            # thread 0, with the ops around it that use its results, under one guard and barrier.
            # A loop nest among them is a visible decision (the report says why).
            if name in ("scf.for", "scf.parallel"):
                _record_one_thread(op)
            run.append(op)
            depends.update(op.results)
        if run:
            run_on_thread_zero(run)
    return barriers


def _record_one_thread(nest) -> None:
    """Record that top-level loop nest `nest` runs on thread 0 only, and why (`etc.cpu.decisions`)."""
    from etc.targets.cpu import decisions

    if _has_mark(nest):
        why = ("its loops marked etc.thread_split are not reachable through perfectly nested loops (other "
               "work with effects sits beside them)")
    elif nest.name == "scf.for" and len(nest.results):
        why = "a loop carrying values from one iteration to the next"
    else:
        why = "no loop of the nest is marked etc.thread_split (independent iterations)"
    decisions.record(nest, "threads", "one-thread", f"a loop nest runs on thread 0: {why}")


def _top_level_ancestor(op, block):
    """The op of `block` that is or contains `op`."""
    current = op
    while current.block != block:
        current = current.parent
    return current


def insertion_after(op):
    """The insertion point right after `op`."""
    nxt = op.next_sibling if hasattr(op, "next_sibling") else None
    if nxt is not None:
        return ir.InsertionPoint(nxt)
    ops = list(op.block.operations)
    i = [o.operation for o in ops].index(op)
    return ir.InsertionPoint(ops[i + 1])


def lower_with_thread_splits(module, fn, threads: int = 2) -> int:
    """Lower `fn`'s top-level linalg ops (memref form) to scf.for nests in their own loop order,
    marking in each the loop the threads share: of its leading parallel loops, the one
    `choose_split` picks for `threads` threads. Returns how many nests were marked.

    (`convert-linalg-to-parallel-loops` would put every parallel loop outside the reductions,
    undoing the default strategy's interchange: a convolution's innermost unit-stride column
    loop ended up inside its reductions, and the threaded code ran 2.5x slower on one thread.)"""
    from torch_mlir.passmanager import PassManager

    def run_passes(op, pipeline):
        PassManager.parse(pipeline, context=op.context).run(op)

    module = as_operation(module)
    run_passes(module, "builtin.module(func.func(linalg-generalize-named-ops))")
    block = fn.regions[0].blocks[0]
    lines, tagged = [], 0
    with fn.context, ir.Location.unknown():
        i64 = ir.IntegerType.get_signless(64)
        for op in block.operations:
            op = op.operation
            if op.name != "linalg.generic":
                continue
            iterators = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
            trips = _loop_trips(op, len(iterators))
            if not iterators or trips is None:
                continue
            leading = []
            for d, it in enumerate(iterators):
                if "parallel" not in it:
                    break
                leading.append(d)
            chosen = choose_split([trips[d] for d in leading], threads)
            if chosen is None:
                continue
            op.attributes["etc.split_id"] = ir.IntegerAttr.get(i64, tagged)
            n = len(iterators)
            handles = ", ".join(["!transform.any_op"] * n)
            lines += [f"    %o{tagged} = transform.structured.match attributes{{etc.split_id = {tagged} : i64}} in %root "
                      f": (!transform.any_op) -> !transform.any_op",
                      f"    %l{tagged} = transform.structured.convert_to_loops %o{tagged} "
                      f": (!transform.any_op) -> !transform.any_op"]
            if n == 1:
                lines.append(f"    transform.annotate %l{tagged} \"{THREAD_SPLIT}\" : !transform.any_op")
            else:
                lines += [f"    %s{tagged}:{n} = transform.split_handle %l{tagged} : (!transform.any_op) -> ({handles})",
                          f"    transform.annotate %s{tagged}#{leading[chosen]} \"{THREAD_SPLIT}\" : !transform.any_op"]
            tagged += 1
    if lines:
        from torch_mlir.dialects.transform import interpreter

        script = ("module attributes {transform.with_named_sequence} {\n"
                  "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
                  + "\n".join(lines) + "\n    transform.yield\n  }\n}\n")
        with fn.context, ir.Location.unknown():
            library = ir.Module.parse(script)
            interpreter.apply_named_sequence(module, library.body.operations[0], library)
    run_passes(module, "builtin.module(func.func(convert-linalg-to-loops))")
    return tagged


def _loop_trips(op, n: int) -> list | None:
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


def _static_trips(loop) -> "int | None":
    """The trip count of scf.for `loop` when its bounds and step are constants."""
    lb, ub, step = (_const_index(v) for v in list(loop.operands)[:3])
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


def _thread_split_loop(op, threads: int):
    """(the `etc.thread_split` scf.for at or under top-level loop `op` the threads share, the
    rests to run on one thread: lists of ops beside a loop on the way), or None.

    Loops are followed down while every loop on the way holds only pure ops besides the next
    loop (all threads may run those loops, each doing its chunk of the one marked), or besides
    it a rest proved independent of it (`_independent_rest`: a GEMM panel's peeled partial row
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
        loops = [o for o in inner if o.name == "scf.for" and not len(o.results) and _has_mark(o)]
        rest = _independent_rest(loops[0], body) if len(loops) == 1 else None
        if rest is None:
            break
        rests.append((rest, len(marked)))
        current = loops[0]
    if not marked:
        return None
    chosen = choose_split([_static_trips(loop) for loop in marked], threads)
    chosen = 0 if chosen is None else chosen
    # a rest in the body of a loop at or below the chosen one (`above`: marked loops at or above
    # it, so more than `chosen`) is in every thread's chunk; one above it runs on one thread
    return marked[chosen], [rest for rest, above in rests if above <= chosen]


def _has_mark(loop) -> bool:
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


def _independent_rest(loop, body: list) -> "list | None":
    """The ops of `body` (a loop's) besides `loop` and what it uses, when they are independent
    of `loop`'s iterations, else None. Proved for the shape of a GEMM panel's peeled row block:
    `loop` (static bounds) writes only through `vector.transfer_write`/`memref.store` at
    [iv, ...] (vectors no taller than its step) into views defined outside it; the rest writes
    only into those views at constant rows past the last row `loop` writes; neither reads the
    buffers those views are of; the rest's results are used only by the rest."""
    lb, ub, step = (_const_index(v) for v in list(loop.operands)[:3])
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
            height = ir.VectorType(inner.operands[0].type).shape[0] if name == "vector.transfer_write" else 1
            if first != iv or height > step or not isinstance(view.owner, ir.Block) and as_operation(view.owner) in position \
                    and as_operation(view.owner) not in needed:
                bad[0] = True
            views.add(view)
            rows_end[0] = max(rows_end[0], last + height)
        elif name in ("memref.copy", "func.call", "llvm.call", "memref.alloc") or name.startswith("linalg."):
            bad[0] = True
        return ir.WalkResult.ADVANCE

    loop.walk(loop_write)
    if bad[0] or not views:
        return None
    bases = {_base(v) for v in views}

    def rest_ok(inner):
        name = inner.name
        if name in _ROW_WRITES:
            row = _const_index(list(inner.operands)[2]) if len(inner.operands) > 2 else None
            if inner.operands[1] not in views or row is None or row < rows_end[0]:
                bad[0] = True
        elif name in _ROW_READS and _base(inner.operands[0]) in bases:
            bad[0] = True
        elif name in ("memref.copy", "func.call", "llvm.call", "memref.alloc") or name.startswith("linalg."):
            bad[0] = True
        return ir.WalkResult.ADVANCE

    for o in rest:
        o.walk(rest_ok)

    def loop_reads(inner):
        if inner.name in _ROW_READS and _base(inner.operands[0]) in bases:
            bad[0] = True
        return ir.WalkResult.ADVANCE

    loop.walk(loop_reads)
    return None if bad[0] else rest


def _run_rest_once(rest: list, tid, nthreads) -> None:
    """Move `rest` (ops of one loop body, in order) under `if tid == nthreads - 1` at the end of
    that body: the last thread, whose chunk (ceil-sized chunks) is the smallest."""
    from torch_mlir.dialects import arith, scf

    block_ops = [o.operation for o in rest[0].block.operations]
    terminator = block_ops[-1]
    with ir.InsertionPoint(terminator), rest[0].location:
        one = arith.ConstantOp(ir.IndexType.get(), 1).result
        last = arith.SubIOp(nthreads, one).result
        guard = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, tid, last).result)
    with ir.InsertionPoint(guard.then_block):
        end = scf.YieldOp([])
    for o in rest:
        o.move_before(end)


def _chunk(lb, ub, step, tid, nthreads):
    """(start, end) of this thread's contiguous share of `for i = lb to ub step step`, built at
    the current insertion point."""
    from torch_mlir.dialects import arith

    span = arith.SubIOp(ub, lb).result
    per = arith.CeilDivSIOp(arith.CeilDivSIOp(span, step).result, nthreads).result
    chunk = arith.MulIOp(per, step).result
    start = arith.MinSIOp(arith.AddIOp(lb, arith.MulIOp(tid, chunk).result).result, ub).result
    end = arith.MinSIOp(arith.AddIOp(start, chunk).result, ub).result
    return start, end


def _split_for(loop, tid, nthreads) -> None:
    """Give this thread a contiguous chunk of the iterations of scf.for `loop`."""
    lb, ub, step = list(loop.operands)[:3]
    with ir.InsertionPoint(loop), loop.location:
        start, end = _chunk(lb, ub, step, tid, nthreads)
    loop.operands[0] = start
    loop.operands[1] = end


def _split_parallel(op, tid, nthreads) -> None:
    """Give this thread a contiguous chunk of one parallel dimension of `op`."""
    n = len(op.regions[0].blocks[0].arguments)
    operands = list(op.operands)
    lbs, ubs, steps = operands[:n], operands[n:2 * n], operands[2 * n:3 * n]
    trips = []
    for lb, ub, step in zip(lbs, ubs, steps):
        lo, hi, st = _const_index(lb), _const_index(ub), _const_index(step)
        trips.append((hi - lo + st - 1) // st if None not in (lo, hi, st) and st > 0 else -1)
    # Chosen dim: the first long enough for typical thread counts (4), else the longest known.
    dim = next((d for d, t in enumerate(trips) if t >= 4), max(range(n), key=lambda d: trips[d]))
    with ir.InsertionPoint(op), op.location:
        start, end = _chunk(lbs[dim], ubs[dim], steps[dim], tid, nthreads)
    op.operands[dim] = start
    op.operands[n + dim] = end


def barrier_llvm_ir(index_bits: int) -> str:
    """`void etc_cpu_barrier(ptr state, iN nthreads)`: state[0] counts arrivals, state[1] is the
    generation; the last thread to arrive resets the count and bumps the generation."""
    ix = f"i{index_bits}"
    return f"""
define internal void @{BARRIER_FN}(ptr %state, {ix} %n) {{
entry:
  %genp = getelementptr inbounds i32, ptr %state, i32 1
  %gen = load atomic i32, ptr %genp acquire, align 4
  %old = atomicrmw add ptr %state, i32 1 acq_rel, align 4
  %arrived = add i32 %old, 1
  %n32 = trunc {ix} %n to i32
  %last = icmp sge i32 %arrived, %n32
  br i1 %last, label %release, label %wait
release:
  store atomic i32 0, ptr %state monotonic, align 4
  %bumped = atomicrmw add ptr %genp, i32 1 release, align 4
  ret void
wait:
  %spins = phi i32 [ 0, %entry ], [ %spins.next, %yield ], [ %spins.inc, %spin ]
  %now = load atomic i32, ptr %genp acquire, align 4
  %same = icmp eq i32 %now, %gen
  br i1 %same, label %spin, label %done
spin:
  %spins.inc = add i32 %spins, 1
  %long = icmp ugt i32 %spins, 2000
  br i1 %long, label %yield, label %wait
yield:
  %ignored = call i32 @sched_yield()
  %spins.next = add i32 %spins, 0
  br label %wait
done:
  ret void
}}

declare i32 @sched_yield()
"""
