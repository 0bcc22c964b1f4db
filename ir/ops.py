"""Walking and rewiring ops, for any stage: the nested ops of a region-holding op, and operands
replaced through a value map (what a clone or a move into another function needs)."""

from __future__ import annotations

from torch_mlir import ir


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

    def rewire(inner):
        for i, value in enumerate(inner.operands):
            if value in mapping:
                inner.operands[i] = mapping[value]
        return ir.WalkResult.ADVANCE

    op.walk(rewire)
