"""What a loop nest of the threaded entry touches, for the modules that decide how threads share it.

The small vocabulary both `thread_split_choice.py` (which loop of a nest the threads share) and
`parallel.py` (what each top-level op runs as, and the code that splits it) read: the mark the
kernels put on loops with independent iterations, the ops every thread may repeat, the buffer a
view is of and the buffers an op may write.
"""

from __future__ import annotations

from torch_mlir import ir


THREAD_SPLIT = "etc.thread_split"  # the kernels mark their loops whose iterations are independent

# Top-level ops that are pure (views, constants, index math): every thread runs them. So it does a
# stack allocation (a GEMM kernel's panel buffer, etc-cpu-plan-scratch): each thread gets its own.
# Vector values made from constants or sizes (a row kernel's tail mask, which canonicalization
# hoists out of its loops to the top level) are such constants too.
PURE_PREFIXES = ("arith.", "affine.apply", "memref.get_global", "memref.alloca", "memref.expand_shape",
                  "memref.collapse_shape",
                  "memref.subview", "memref.reinterpret_cast", "memref.cast", "memref.view", "memref.extract_strided_metadata",
                  "ub.poison",
                  "vector.constant_mask", "vector.create_mask", "vector.broadcast", "vector.splat", "vector.step")

VIEWS = ("memref.expand_shape", "memref.collapse_shape", "memref.subview", "memref.reinterpret_cast",
         "memref.cast", "memref.view")
STORES = ("memref.store", "vector.store", "vector.transfer_write", "vector.maskedstore", "memref.copy")


def base(value):
    """The buffer a memref value views (an argument, an allocation)."""
    while not isinstance(value.owner, ir.Block) and value.owner.name in VIEWS:
        value = value.owner.operands[0]
    return value


def written_bases(op):
    """The buffers `op` (and what it nests) may write, or None when it cannot tell (a call)."""
    bases, unknown = set(), [False]

    def visit(inner):
        name = inner.name
        if name in STORES:
            bases.add(base(inner.operands[1]))
        elif name.startswith("linalg."):
            if "operandSegmentSizes" in inner.attributes:  # destination-style: its inits are written
                sizes = list(ir.DenseI32ArrayAttr(inner.attributes["operandSegmentSizes"]))
                bases.update(base(v) for v in list(inner.operands)[sizes[0]:sizes[0] + sizes[1]])
            else:
                unknown[0] = True
        elif name in ("func.call", "llvm.call"):
            unknown[0] = True
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return None if unknown[0] else bases
