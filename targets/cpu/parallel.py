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
from etc.targets.cpu.ir_query import constant_index
from etc.targets.cpu.loop_effects import PURE_PREFIXES, THREAD_SPLIT, base, written_bases
from etc.targets.cpu.thread_split_choice import choose_split, has_mark, independent_rest, loop_trips, thread_split_loop

BARRIER_FN = "etc_cpu_barrier"

# Top-level reads of memory: when used after the thread-0 run they sit in, every thread reads again.
_READS = ("memref.load", "vector.load", "vector.transfer_read")


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
            written = [written_bases(op) for op in run]  # per op: the buffers it may write (None: any)

            def repeatable(op, seen=()) -> bool:
                """A read no later op of the run may overwrite, or a view/size/index op, or an
                `scf.if` whose branches only pick a buffer (its writes stay on thread 0; every
                thread selects the same buffer again), whose inputs are repeatable or from before
                the run: after the barrier it gives what it gave."""
                if op.name in _READS:
                    buffer = base(op.operands[0])
                    if any(w is None or buffer in w for w in written[position[op] + 1:]):
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
        beside: set = set()  # top-level ops already moved beside a shared loop (`_beside_split`)
        for at, op in enumerate(ops):
            name = op.name
            if op in beside:
                continue
            pure = name.startswith(PURE_PREFIXES)
            if name == "func.return":
                break
            if pure and not any(v in depends for v in op.operands):
                continue  # every thread computes views, constants and index math
            split = thread_split_loop(op, threads) if name == "scf.for" else None
            if name == "scf.parallel" or split is not None:
                if run:
                    run_on_thread_zero(run)
                    run, depends = [], set()
                last = op
                if split is not None:
                    split, rests = split
                    tail = _beside_split(op, ops[at + 1:], threads) if split == op else None
                    for rest in rests:
                        _run_rest_once(rest, tid, nthreads)
                    _split_for(split, tid, nthreads)
                    if tail:
                        last = _run_tail_once(tail, tid, nthreads)
                        beside.update(tail)
                else:
                    _split_parallel(op, tid, nthreads)
                barrier_after(last)
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

    if has_mark(nest):
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
            trips = loop_trips(op, len(iterators))
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


def _beside_split(loop, following: list, threads: int) -> "list | None":
    """The top-level ops after shared loop `loop` (up to the next nest the threads share) that may run
    on one thread beside it, before its barrier, or None. Proved as for a rest inside a loop body
    (`independent_rest`): a GEMM panel whose row tiles are the top-level loop leaves its peeled
    partial row block (the corner of a partial panel) after it at the top level; that block writes
    rows the loop never writes and reads nothing the loop writes, so it needs no barrier of its own
    (it used to run on thread 0 between two barriers, the other thread waiting). Pure ops that no
    such op feeds stay where they are (every thread computes them)."""
    tail, defined = [], set()
    for op in following:
        name = op.name
        if name == "func.return" or name == "scf.parallel":
            break
        if name.startswith(PURE_PREFIXES) and not any(v in defined for v in op.operands):
            continue
        if name == "scf.for" and thread_split_loop(op, threads) is not None:
            break
        tail.append(op)
        defined.update(op.results)
    if not tail or independent_rest(loop, [loop] + tail) is None:
        return None
    return tail


def _run_tail_once(tail: list, tid, nthreads):
    """Move `tail` (top-level ops, in order) under one `if tid == nthreads - 1` where its last op is
    (pure ops left between them stay above it). Returns the guard."""
    return _on_last_thread(tail, tail[-1], tid, nthreads)


def _run_rest_once(rest: list, tid, nthreads) -> None:
    """Move `rest` (ops of one loop body, in order) under `if tid == nthreads - 1` at the end of
    that body."""
    _on_last_thread(rest, [o.operation for o in rest[0].block.operations][-1], tid, nthreads)


def _on_last_thread(ops: list, before, tid, nthreads):
    """Move `ops` into one `if tid == nthreads - 1` placed before `before`: the last thread, whose
    chunk (ceil-sized chunks) is the smallest. Returns the guard."""
    from torch_mlir.dialects import arith, scf

    with ir.InsertionPoint(before), ops[0].location:
        one = arith.ConstantOp(ir.IndexType.get(), 1).result
        last = arith.SubIOp(nthreads, one).result
        guard = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, tid, last).result)
    with ir.InsertionPoint(guard.then_block):
        end = scf.YieldOp([])
    for op in ops:
        op.move_before(end)
    return guard.operation


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
        lo, hi, st = constant_index(lb), constant_index(ub), constant_index(step)
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
