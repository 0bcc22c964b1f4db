"""Walking and rewiring ops, for any stage: who produces a value and who uses it, the nested ops of
a region-holding op, and operands replaced through a value map (what a clone or a move into
another function needs).

MLIR loads when one of these runs, not when this module is imported: the partitioner imports it,
and `import etc.targets.cpu` (which a process that only runs programs does) reaches the partitioner.
"""

from __future__ import annotations


def as_operation(op):
    """The `ir.Operation` of an op view (or the operation itself): the bindings hand out either."""
    return op.operation if hasattr(op, "operation") else op


def defining_op(value, name: str | None = None):
    """The operation that produces `value` (None for a block argument); with `name`, only an op
    of that name."""
    from torch_mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    op = as_operation(owner)
    return op if name is None or op.name == name else None


def user_op(use):
    """The operation that holds `use` (an `ir.OpOperand`)."""
    return as_operation(use.owner)


def nested_ops(op) -> list:
    """Every op nested in `op`'s regions (not `op` itself), outer before inner, in block order."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                found.append(inner)
                found.extend(nested_ops(inner))
    return found


def replace_operands(op, mapping: dict) -> None:
    """Replace, in `op` and every op nested in it, each operand that is a key of `mapping` by its
    value (an ir.Value -> ir.Value map)."""
    from torch_mlir import ir

    def rewire(inner):
        for i, value in enumerate(inner.operands):
            if value in mapping:
                inner.operands[i] = mapping[value]
        return ir.WalkResult.ADVANCE

    op.walk(rewire)
