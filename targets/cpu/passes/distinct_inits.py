"""etc-cpu-distinct-inits: a `tensor.empty` is never shared where sharing its buffer is wrong.

CSE merges identical `tensor.empty` ops (they are pure), and one-shot-bufferize gives every use
of one `tensor.empty` the buffer allocated where it stands. Two ways that computes a wrong
answer without a word:

- One op takes it twice: a kernel that carries two scratch tensors of the same type through a
  loop (the fused attention's [rows, 128] scores and its accumulators when the value dim is 128)
  starts both iter_args from one value; both are bufferized in place into the one buffer, and
  the loop's writes to one clobber the other.
- It stands outside a loop the threads share (`THREAD_SPLIT`) and an op inside uses it: a
  batched GEMM's per-panel B buffer ([1, K, 64]) merged with a weight pack's empty of the same
  type at the top of the function. Its buffer is then planned once in the shared scratch (an
  alloc inside such a loop becomes a per-thread stack buffer: etc-cpu-plan-scratch), and two
  threads copying their panels into it corrupt each other's (a Linear(11, 33) feeding q @ k^T
  over 16 heads: errors up to 5 with two threads; model fuzzer, seed 1617).

Before bufferization, this pass gives each such use its own `tensor.empty` next to it (its
contents are undefined, so a copy of the op is the same value).
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.passes.pass_api import function_pass
from etc.targets.cpu.loop_effects import THREAD_SPLIT


def _shared_loops(op) -> list:
    """The loops the threads share that hold `op`, innermost first."""
    loops, parent = [], as_operation(op).parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.for" and THREAD_SPLIT in parent.attributes:
            loops.append(parent)
        parent = parent.parent
    return loops


def _inside(op, loop) -> bool:
    parent = as_operation(op).parent
    while parent is not None:
        if parent == loop:
            return True
        parent = parent.parent
    return False


@function_pass("etc-cpu-distinct-inits",
               "Before one-shot-bufferize: a tensor.empty per repeated operand, and per use inside a loop the "
               "threads share that it stands outside of")
def distinct_inits(module, options=None) -> int:
    ops = []

    def visit(op):
        if len(op.operands):
            ops.append(op)
        return ir.WalkResult.ADVANCE
    module.walk(visit)
    split = 0
    for op in ops:
        seen, loops = set(), None
        for i, value in enumerate(list(op.operands)):
            empty = defining_op(value, "tensor.empty")
            if empty is None:
                continue
            loops = _shared_loops(op) if loops is None else loops  # once per op, only if it reads an empty
            if value in seen or any(not _inside(empty, loop) for loop in loops):
                with op.context, ir.InsertionPoint(op), empty.location:
                    fresh = ir.Operation.create("tensor.empty", results=[value.type],
                                                operands=list(empty.operands))
                op.operands[i] = fresh.result
                split += 1
            seen.add(value)
    return split
