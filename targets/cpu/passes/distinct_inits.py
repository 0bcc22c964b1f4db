"""etc-cpu-distinct-inits: an op never takes one `tensor.empty` as two of its operands.

CSE merges identical `tensor.empty` ops (they are pure), so a kernel that carries two scratch
tensors of the same type through a loop (the fused attention's [rows, 128] scores and its
accumulators when the value dim is 128) starts both iter_args from one value. One-shot-bufferize
then gives both iter_args the one buffer and bufferizes both in place: the loop's writes to one
clobber the other, and the program computes a wrong answer without a word. Before bufferization,
this pass gives every repeated operand its own `tensor.empty` (its contents are undefined, so a
copy of the op is the same value; bufferization allocates each, and plan-scratch packs them).
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.passes.pass_api import function_pass


@function_pass("etc-cpu-distinct-inits",
               "Before one-shot-bufferize: an op taking one tensor.empty twice gets a tensor.empty per operand")
def distinct_inits(module, options=None) -> int:
    ops = []

    def visit(op):
        if len(op.operands) > 1:  # an op can repeat an operand only if it has two
            ops.append(op)
        return ir.WalkResult.ADVANCE
    module.walk(visit)
    split = 0
    for op in ops:
        seen = set()
        for i, value in enumerate(list(op.operands)):
            empty = defining_op(value, "tensor.empty")
            if empty is None:
                continue
            if value in seen:
                with op.context, ir.InsertionPoint(op), empty.location:
                    fresh = ir.Operation.create("tensor.empty", results=[value.type],
                                                operands=list(empty.operands))
                op.operands[i] = fresh.result
                split += 1
            seen.add(value)
    return split
