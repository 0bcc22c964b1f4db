"""Row-major reshapes of torch values as `tensor.collapse_shape` / `tensor.expand_shape` on builtin
tensors: what `aten.view` (and squeeze, unsqueeze) lower to in the cpu target (`reshape`)."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.lowering.context import load_torch
from etc.targets.cpu.lowering.torch_ops import DYNAMIC, vtensor_element, vtensor_of, vtensor_shape


def reassociation(source: list, target: list) -> list:
    """Groups (source dims, target dims) of a row-major reshape from `source` to `target` (ints;
    DYNAMIC for a size known at run time), finest first: dims are matched from both ends while
    the static sizes on each side multiply to the same number; what is left in the middle (where a
    dynamic size makes the match unprovable) is one group. Every group's sizes then multiply to
    the same number at run time, whatever the dynamic sizes are: the element count is equal, and
    so is every matched group's."""
    def scan(src, tgt):
        groups, i, j = [], 0, 0
        while i < len(src) and j < len(tgt):
            a, b = [i], [j]
            pa, pb = src[i], tgt[j]
            if pa == DYNAMIC or pb == DYNAMIC:
                break
            while pa != pb:
                if pa < pb and a[-1] + 1 < len(src) and src[a[-1] + 1] != DYNAMIC:
                    a.append(a[-1] + 1)
                    pa *= src[a[-1]]
                elif pb < pa and b[-1] + 1 < len(tgt) and tgt[b[-1] + 1] != DYNAMIC:
                    b.append(b[-1] + 1)
                    pb *= tgt[b[-1]]
                else:
                    return groups
            groups.append((a, b))
            i, j = a[-1] + 1, b[-1] + 1
        return groups

    head = scan(source, target)
    i = head[-1][0][-1] + 1 if head else 0
    j = head[-1][1][-1] + 1 if head else 0
    n, m = len(source) - i, len(target) - j
    tail = [([n - 1 - d for d in reversed(a)], [m - 1 - d for d in reversed(b)])
            for a, b in scan(source[i:][::-1], target[j:][::-1])]
    tail = [([i + d for d in a], [j + d for d in b]) for a, b in reversed(tail)]
    k = tail[0][0][0] if tail else len(source)
    l = tail[0][1][0] if tail else len(target)
    middle = [(list(range(i, k)), list(range(j, l)))] if (k > i or l > j) else []
    groups = head + middle + tail
    # A group with no dims on one side holds only static 1s on the other: join it to a neighbour.
    joined = []
    for a, b in groups:
        if (not a or not b) and joined:
            joined[-1] = (joined[-1][0] + a, joined[-1][1] + b)
        elif joined and (not joined[-1][0] or not joined[-1][1]):
            joined[-1] = (joined[-1][0] + a, joined[-1][1] + b)
        else:
            joined.append((a, b))
    return joined


def reshape(x, sizes: list, shape: list) -> ir.Value:
    """The torch value `x` (!torch.vtensor) reshaped to `sizes` (ints, !torch.int values for sizes
    known at run time, at most one -1 for "the rest"), of static shape `shape` (DYNAMIC where
    unknown), as tensor.collapse_shape / tensor.expand_shape on builtin tensors.

    Why not torch-mlir's aten.view lowering: with two or more dynamic dims it guesses which input
    dims a dynamic output dim merges, and guesses wrong ([b, t, 64] -> [b*t, 64] became a cast of
    [b, t, 64] to [b, 1, 64]: NaN and writes out of bounds, torch-mlir issues 3852 and 4743). The
    groups here are provably right at every size (`_reassociation`), and an ambiguous middle is
    collapsed to one dim and expanded again, which is right whatever the sizes are. The
    dynamic sizes of the result are the view's own size values."""
    from torch_mlir.dialects import arith
    from torch_mlir.dialects import tensor as tensor_d

    load_torch(x.context)
    source_shape = vtensor_shape(x)
    element = vtensor_element(x)
    builtin_element = ir.Type.parse(element if element != "ui8" else "i8")
    in_type = ir.RankedTensorType.get(source_shape, builtin_element)
    value = ir.Operation.create("torch_c.to_builtin_tensor", results=[in_type], operands=[x]).result
    index = ir.IndexType.get()

    def run_time(size) -> ir.Value:
        as_i64 = ir.Operation.create("torch_c.to_i64", results=[ir.IntegerType.get_signless(64)],
                                     operands=[size]).result
        return arith.IndexCastOp(index, as_i64).result

    def source_size(d: int) -> ir.Value:
        if source_shape[d] != DYNAMIC:
            return arith.ConstantOp(index, source_shape[d]).result
        return tensor_d.DimOp(value, arith.ConstantOp(index, d).result).result

    target = [s if isinstance(s, int) and s >= 0 else (shape[d] if shape[d] != DYNAMIC else DYNAMIC)
              for d, s in enumerate(sizes)]
    groups = reassociation(source_shape, target)
    # Run-time sizes of the target's dynamic dims: the view's size values; a -1 is what its group's
    # source elements leave over the group's other sizes.
    runtime: dict = {}
    for a, b in groups:
        for d in b:
            if target[d] != DYNAMIC:
                continue
            if isinstance(sizes[d], ir.Value):
                runtime[d] = run_time(sizes[d])
                continue
            total = None
            for s in a:
                total = source_size(s) if total is None else arith.MulIOp(total, source_size(s)).result
            total = total if total is not None else arith.ConstantOp(index, 1).result
            for o in b:
                if o != d:
                    other = (arith.ConstantOp(index, target[o]).result if target[o] != DYNAMIC else
                             run_time(sizes[o]) if isinstance(sizes[o], ir.Value) else None)
                    if other is None:
                        raise LoweringError(f"reshape to {sizes}: two sizes to infer in one group")
                    total = arith.DivUIOp(total, other).result
            runtime[d] = total

    def group_size(dims, shape_of):
        sizes_ = [shape_of[d] for d in dims]
        return DYNAMIC if DYNAMIC in sizes_ else int(np.prod(sizes_, dtype=np.int64))

    def attr(groups_):
        return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)
                                                   for d in g]) for g in groups_])

    out_type = ir.RankedTensorType.get(target, builtin_element)
    if not target:  # to a scalar: every source dim is a 1
        ones = ir.RankedTensorType.get([1] * len(source_shape), builtin_element)
        value = tensor_d.CastOp(ones, value).result if source_shape != [1] * len(source_shape) else value
        value = tensor_d.CollapseShapeOp(out_type, value, attr([])).result
    elif not source_shape:  # from a scalar
        value = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([1] * len(target), builtin_element), value,
                                       attr([]), [], [1] * len(target)).result
        if target != [1] * len(target):
            value = tensor_d.CastOp(out_type, value).result
    elif source_shape != target or any(len(a) != 1 or len(b) != 1 for a, b in groups):
        if any(len(a) > 1 for a, _ in groups):
            collapsed = [group_size(a, source_shape) for a, _ in groups]
            value = tensor_d.CollapseShapeOp(ir.RankedTensorType.get(collapsed, builtin_element), value,
                                             attr([a for a, _ in groups])).result
        if any(len(b) > 1 for _, b in groups):
            value = tensor_d.ExpandShapeOp(out_type, value, attr([b for _, b in groups]),
                                           [runtime[d] for d in range(len(target)) if target[d] == DYNAMIC],
                                           target).result
        elif ir.RankedTensorType(value.type) != out_type:  # one group per dim, sizes the types disagree on
            value = tensor_d.CastOp(out_type, value).result
    result = ir.RankedTensorType.get(shape, builtin_element)
    if value.type != result:
        value = tensor_d.CastOp(result, value).result
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor_of(shape, element)],
                               operands=[value]).result
