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

BARRIER_FN = "etc_cpu_barrier"

# Top-level ops that are pure (views, constants, index math): every thread runs them.
_PURE_PREFIXES = ("arith.", "affine.apply", "memref.expand_shape", "memref.collapse_shape", "memref.subview",
                  "memref.reinterpret_cast", "memref.cast", "memref.view", "memref.extract_strided_metadata",
                  "ub.poison")


def _const_index(value):
    owner = value.owner
    op = owner.operation if hasattr(owner, "operation") else owner
    if isinstance(owner, ir.Block) or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def partition_top_level_loops(fn) -> int:
    """Rewrite `fn` (memref form, top-level loop nests already `scf.parallel`) for the threaded ABI.

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
        for op in ops:
            name = op.name
            if name == "func.return" or name.startswith(_PURE_PREFIXES):
                continue
            if name == "scf.parallel":
                _split_parallel(op, tid, nthreads)
            else:
                if len(op.results):
                    raise LoweringError(f"cpu codegen: cannot run top-level '{name}' with results on one thread")
                with ir.InsertionPoint(op):
                    zero = arith.ConstantOp(index, 0).result
                    is_first = arith.CmpIOp(arith.CmpIPredicate.eq, tid, zero).result
                    guard = scf.IfOp(is_first)
                with ir.InsertionPoint(guard.then_block):
                    scf.YieldOp([])
                op.move_before(guard.then_block.operations[0])
                op = guard.operation
            call_ip = _after(op)
            with call_ip:
                func_d.CallOp([], ir.FlatSymbolRefAttr.get(BARRIER_FN), [barrier, nthreads])
            barriers += 1
    return barriers


def _after(op):
    nxt = op.next_sibling if hasattr(op, "next_sibling") else None
    if nxt is not None:
        return ir.InsertionPoint(nxt)
    ops = list(op.block.operations)
    i = [o.operation for o in ops].index(op)
    return ir.InsertionPoint(ops[i + 1])


def _split_parallel(op, tid, nthreads) -> None:
    """Give this thread a contiguous chunk of one parallel dimension of `op`."""
    from torch_mlir.dialects import arith

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
        lb, ub, step = lbs[dim], ubs[dim], steps[dim]
        span = arith.SubIOp(ub, lb).result
        trips_v = arith.CeilDivSIOp(span, step).result
        per = arith.CeilDivSIOp(trips_v, nthreads).result
        chunk = arith.MulIOp(per, step).result
        start = arith.AddIOp(lb, arith.MulIOp(tid, chunk).result).result
        start = arith.MinSIOp(start, ub).result
        end = arith.MinSIOp(arith.AddIOp(start, chunk).result, ub).result
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
