"""Reading the IR the cpu target's passes match: producers, structured ops' loops and maps, shapes."""

from __future__ import annotations

import re

from torch_mlir import ir


DYNAMIC = ir.ShapedType.get_dynamic_size()


def walk(op, names) -> list:
    """Every op under `op` (itself included) whose name is in `names`, in walk order."""
    found = []

    def visit(inner):
        if inner.name in names:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def top_level(op):
    """The op of its function's body that contains `op` (itself when it is one): the loop nest a
    stack buffer goes in front of."""
    while op.parent is not None and op.parent.name != "func.func":
        op = op.parent
    return op


def ops_after(op) -> list:
    """The operations after `op` in its block, in order (a GEMM tile's epilogue and store follow its k loop)."""
    found, after = [], False
    for other in op.block.operations:
        other = other.operation
        if after:
            found.append(other)
        elif other == op:
            after = True
    return found


def iterator_types(op) -> list[str]:
    """A structured op's loops: "parallel", "reduction" or "window" each."""
    return [re.search(r"parallel|reduction|window", str(a)).group(0)
            for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def indexing_maps(op) -> list:
    """A structured op's indexing maps (`ir.AffineMap`s), inputs then outputs."""
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def map_dims(amap) -> list[int] | None:
    """The loop each result of `amap` reads (a projected permutation), or None."""
    dims = []
    for expr in amap.results:
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(ir.AffineDimExpr(expr).position)
    return dims


# The edge dialect's convolution (aten.convolution), which the cpu pipeline's first passes rewrite.
EDGE_CONVOLUTION = "edge.convolution"


def spatial_pairs(args: dict, *keys: str) -> list:
    """An `edge.convolution`'s per-dimension arguments (`stride`, `padding`, `dilation`, decoded:
    `etc.dialects.decode_op`) for a 2-D convolution, two values each: the schema takes one value
    for both dimensions as well as two (`padding=[0]`)."""
    return [[int(v) for v in args[key]] * (2 // max(1, len(args[key]))) for key in keys]


def input_count(op) -> int:
    """The inputs of a destination-style op (its operands less its outputs)."""
    return len(op.operands) - len(op.results)


def static_shape(value) -> list | None:
    """The shape of a statically shaped ranked tensor, else None."""
    t = value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        return None
    return list(t.shape)


def static_f32_shape(value) -> list | None:
    """The shape of a statically shaped f32 tensor, else None."""
    shape = static_shape(value)
    return shape if shape is not None and isinstance(ir.RankedTensorType(value.type).element_type, ir.F32Type) \
        else None


def constant_index(value) -> int | None:
    """The value of `value` when an `arith.constant` of integer (or index) type defines it, else None."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.operation
    if op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None
