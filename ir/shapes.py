"""Dynamic dimensions in the IR: the bounds to_edge's importer records on function arguments
(`etc.dim_bounds`) and on ops (`etc.upper_bounds`), and a value's dims at those bounds (what memory
is planned for)."""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation

DIM_BOUNDS_ATTR = "etc.dim_bounds"  # on a func argument: min0, max0, min1, max1, ... (to_edge's importer)
UPPER_BOUNDS_ATTR = "etc.upper_bounds"  # on an op: its results' dims at their upper bounds, concatenated


def upper_bounds(value) -> list[int] | None:
    """The dims of a tensor value with each dynamic dim at its upper bound (what memory is planned
    for): from `etc.dim_bounds` on a function argument or `etc.upper_bounds` on the producing op.
    A static shape is its own bound; None when a dynamic dim has no recorded bound."""
    t = ir.RankedTensorType(value.type)
    sizes = list(t.shape)
    if t.has_static_shape:
        return sizes
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        parent = as_operation(parent)
        if parent is None or "arg_attrs" not in parent.attributes:
            return None
        d = ir.DictAttr(ir.ArrayAttr(parent.attributes["arg_attrs"])[value.arg_number])
        if DIM_BOUNDS_ATTR not in d:
            return None
        b = [int(x) for x in ir.DenseI64ArrayAttr(d[DIM_BOUNDS_ATTR])]
        out = [b[2 * i + 1] if t.is_dynamic_dim(i) else s for i, s in enumerate(sizes)]
    else:
        op = as_operation(owner)
        if UPPER_BOUNDS_ATTR not in op.attributes:
            return None
        flat = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[UPPER_BOUNDS_ATTR])]
        start = sum(ir.RankedTensorType(r.type).rank for r in list(op.results)[: value.result_number]
                    if isinstance(r.type, ir.RankedTensorType))
        out = flat[start: start + len(sizes)]
    return out if len(out) == len(sizes) and all(s >= 0 for s in out) else None
