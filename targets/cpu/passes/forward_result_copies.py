"""etc-cpu-forward-result-copies: results computed straight into the caller's buffers, self copies gone.

After bufferization, `buffer-results-to-out-params` copies a result that loops wrote into
a temporary (`memref.alloc`) into the out-parameter instead of hoisting the alloc, when
tiled loop nests use it: a whole extra pass over the output. This pass computes into the
out-parameter directly when the alloc is static, identity-layout, and the copy is its last
use and the out-parameter's only one (also through one reshape: the alloc becomes the
out-parameter reshaped back) (safe: the caller never reads an output before the
call returns, and outputs alias no input). It also erases `memref.copy %x, %x`, which tiled
`tensor.insert_slice`s leave behind.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import function_pass
from etc.targets.cpu.ir_query import walk


@function_pass("etc-cpu-forward-result-copies",
               "After bufferization: write results into the out-params directly; erase self copies")
def forward_result_copies_pass(module, options=None) -> int:
    return remove_self_copies(module) + forward_result_copies(module)


def remove_self_copies(module: ir.Module) -> int:
    """Erase `memref.copy %x, %x` (bufferized insert_slice of a slice into itself)."""
    dead = []

    def visit(op):
        if op.name in ("memref.copy", "linalg.copy") and len(op.operands) == 2 and op.operands[0] == op.operands[1]:
            dead.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in dead:
        op.erase()
    return len(dead)


def forward_result_copies(module: ir.Module) -> int:
    """After bufferization: `memref.copy %alloc, %out` (a static, identity-layout alloc copied into an
    out-param that nothing else touches) -> compute into %out directly; the alloc may reach the copy
through a reshape, whose other readers then read %out. buffer-results-to-out-params
    hoists such allocs itself only when no loop uses them; with tiled loop nests it copies instead.
    (Safe because the out-param is never read by the caller before the call returns and aliases no
    input.) Returns how many copies it removed."""
    count = 0
    for fn in walk(module, ("func.func",)):
        if not fn.regions[0].blocks:
            continue
        block = fn.regions[0].blocks[0]
        args = set()
        for a in block.arguments:
            args.add(a)
        for op in list(block.operations):
            op = op.operation
            if op.name != "memref.copy":
                continue
            src, dst = op.operands[0], op.operands[1]
            if dst not in args:
                continue
            owner = src.owner
            if isinstance(owner, ir.Block):
                continue
            owner = owner if isinstance(owner, ir.Operation) else owner.operation
            # A GEMM's result in its tile layout ([b, rows, NB, nr]) reaches the out-param
            # through a reshape (an index_put's through two): the alloc becomes the inverse
            # reshapes of the out-param. The reshapes may have other readers (a KV cache's new
            # value is returned and read by the attention before the copy): they read the
            # out-param, reshaped as they were.
            chain = []  # the reshapes from the copy's source down to the alloc, nearest first
            while owner.name in _INVERSE:
                chain.append(owner)
                src = owner.operands[0]
                owner = src.owner
                if isinstance(owner, ir.Block):
                    break
                owner = owner if isinstance(owner, ir.Operation) else owner.operation
            if isinstance(owner, ir.Block):
                continue
            if chain and chain[0].results[0].type != dst.type and sum(1 for _ in chain[0].results[0].uses) != 1:
                continue
            if any(not ir.MemRefType(v.operands[0].type).has_static_shape for v in chain):
                continue  # (an expand_shape to a dynamic shape would need its sizes)
            if owner.name != "memref.alloc" or owner.parent != fn or len(list(owner.operands)):
                continue
            if sum(1 for _ in dst.uses) != 1:
                continue
            t = ir.MemRefType(src.type)
            if not chain and src.type != dst.type:
                continue
            if isinstance(t.layout, ir.AffineMapAttr) and t.layout.value != ir.AffineMap.get_identity(t.rank):
                continue
            # every use of the alloc (and of its reshapes) must come before the copy (its last use)
            values = [src] + [view.results[0] for view in chain]
            later = False
            seen = False
            for other in block.operations:
                if other.operation == op:
                    seen = True
                    continue
                if seen and any(_uses_value(other.operation, v) for v in values):
                    later = True
                    break
            if later:
                continue
            op.erase()
            target, anchor = dst, block.operations[0]
            for view in chain:  # the inverse reshapes, in order, at the top of the function
                if view.results[0].type == target.type:
                    view.results[0].replace_all_uses_with(target)
                with ir.InsertionPoint(anchor), view.location:
                    target = _inverse_reshape(view, target)
                view.erase()
            src.replace_all_uses_with(target)
            owner.erase()
            count += 1
    return count


# A reshape view and the one that undoes it (same reassociation, the other direction).
_INVERSE = {"memref.collapse_shape": "memref.expand_shape", "memref.expand_shape": "memref.collapse_shape"}


def _inverse_reshape(view, dst):
    """`dst` reshaped back to the type of `view`'s source (before `view`'s copy made it `dst`)."""
    source_type = view.operands[0].type
    association = view.attributes["reassociation"]
    if view.name == "memref.collapse_shape":  # the source had more dims: expand dst to it
        shape = list(ir.MemRefType(source_type).shape)
        return ir.Operation.create(
            "memref.expand_shape", results=[source_type], operands=[dst],
            attributes={"reassociation": association,
                        "static_output_shape": ir.DenseI64ArrayAttr.get(shape)}).result
    return ir.Operation.create("memref.collapse_shape", results=[source_type], operands=[dst],
                               attributes={"reassociation": association}).result


def _uses_value(op, value) -> bool:
    found = [False]

    def visit(inner):
        for v in inner.operands:
            if v == value:
                found[0] = True
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found[0]
