"""etc-cpu-copies-to-linalg: `memref.copy` -> `linalg.copy`, so the object never calls MLIR's C runtime.

With strided operands the LLVM lowering of `memref.copy` calls `memrefCopy` from MLIR's
runtime library, which a self-contained object must not depend on; `linalg.copy` becomes
plain loops (vectorized by LLVM where the strides allow).

A copy from an in-place pair's input into its output (`etc.cpu.in_place`: a KV cache copied into
its updated self before the new rows are written) is a copy of a buffer onto itself when the
caller passes one buffer for both, as the program does: it runs only when the two views differ
(base pointer, offset or strides), so an update in place costs its new rows, not the whole cache.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import in_place_arguments
from etc.targets.cpu.ir_query import walk

# Ops whose result is a view of their first operand.
_VIEWS = ("memref.collapse_shape", "memref.expand_shape", "memref.subview", "memref.reinterpret_cast",
          "memref.cast")


def _root(value: ir.Value) -> ir.Value:
    """The buffer `value` is a view of (through view ops)."""
    while not isinstance(value.owner, ir.Block) and value.owner.name in _VIEWS:
        value = value.owner.operands[0]
    return value


def _may_be_one_buffer(module) -> set:
    """(input argument, output argument) pairs of the entry that the caller may pass as one buffer."""
    pairs = in_place_arguments(as_operation(module))
    return {(input_arg, output_arg) for output_arg, input_arg in pairs.items()}


def _views_differ(source: ir.Value, target: ir.Value) -> ir.Value:
    """i1: `source` and `target` are not the same elements of one buffer."""
    from torch_mlir.dialects import arith, memref

    def metadata(view):
        rank = ir.MemRefType(view.type).rank
        m = memref.ExtractStridedMetadataOp(view)
        return [memref.extract_aligned_pointer_as_index(view), m.results[1], *m.results[2 + rank:]]

    differ = None
    for a, b in zip(metadata(source), metadata(target)):
        ne = arith.cmpi(arith.CmpIPredicate.ne, a, b)
        differ = ne if differ is None else arith.ori(differ, ne)
    return differ


@function_pass("etc-cpu-copies-to-linalg", "memref.copy -> linalg.copy (loops instead of a C runtime call)")
def copies_to_linalg(module, options=None) -> int:
    from torch_mlir.dialects import linalg, scf

    one_buffer = _may_be_one_buffer(module)
    copies = walk(module, ("memref.copy",))
    with module.context:
        for op in copies:
            source, target = op.operands[0], op.operands[1]
            with ir.InsertionPoint(op), op.location:
                if (_root(source), _root(target)) in one_buffer:
                    guard = scf.IfOp(_views_differ(source, target))
                    with ir.InsertionPoint(guard.then_block):
                        linalg.copy(source, outs=[target])
                        scf.YieldOp([])
                else:
                    linalg.copy(source, outs=[target])
            op.erase()
    return len(copies)
