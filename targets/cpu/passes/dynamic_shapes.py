"""etc-cpu-dynamic-shapes: the entry's dynamically shaped buffers become static buffers plus run-time sizes.

A model exported with bounded dynamic dims (`torch.export.Dim("T", max=128)`) reaches the cpu
pipeline with `?` dims on its tensors; every pass before this one works on them as they are
(loop bounds and tiles from `memref.dim`). What cannot stay dynamic is the entry's ABI: the
bare-pointer calling convention passes one pointer per buffer and no sizes. After
bufferization, this pass makes the sizes explicit arguments:

- `dims:in`, a `memref<K x i64>`: the dynamic dims of the inputs (input 0's first, each input's
  in dim order), filled by the runtime. Its `etc.cpu.dim_ranges` holds each one's [lo, hi]
  (from the input's `etc.dim_bounds`): what `index_range` bounds every buffer size by, so that
  scratch is planned at the upper bound (plan-scratch).
- Each dynamic input becomes a flat `memref<N x T>` (N elements at the upper bound) viewed at
  the run-time sizes with `memref.reinterpret_cast` (contiguous, row-major).
- Each dynamic output (an out-parameter that bufferization fills with one `memref.copy`)
  becomes a flat `memref<N x T>` too, viewed at the sizes of the buffer copied into it; the
  code stores those sizes into `dims:out` (`memref<K' x i64>`), which the runtime reads to
  give the output its shape.

Each rewritten argument records its upper-bound shape (`etc.cpu.shape`) and which dims are
dynamic (`etc.cpu.dynamic`); etc-cpu-entry-abi writes both into the ABI. A function with
static shapes only is left unchanged.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import arith, memref

from etc.ir.ops import as_operation
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import (ARG_ATTR, arg_attrs, arg_label, entry_function, set_arg_attrs,
                                        update_function_type)
from etc.targets.cpu.kernel_ir import run_upstream
from etc.targets.cpu.size_ranges import DIM_RANGES_ATTR, index_range

DIM_BOUNDS_ATTR = "etc.dim_bounds"  # on an input: lo0, hi0, lo1, hi1, ... (the compiler's own attribute)
SHAPE_ATTR = "etc.cpu.shape"  # on a rewritten argument: its dims at their upper bounds
# On the entry: each result's dims at torch's upper bounds (empty: unknown), for an output whose size
# the code computes in a way index_range cannot bound (a reshape to sizes built at run time).
RESULT_BOUNDS_ATTR = "etc.cpu.result_bounds"
DYNAMIC_ATTR = "etc.cpu.dynamic"  # ... and which of them are dynamic
_DYNAMIC = ir.ShapedType.get_dynamic_size()


def _i64_array(values) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def view_flat(flat, t: ir.MemRefType, sizes: list) -> ir.Value:
    """`flat` (memref<N x T>) as the identity-layout `t` at `sizes` (ints or index values)."""
    strides, running = [], 1
    for s in reversed(sizes):
        strides.append(running)
        if isinstance(running, int) and isinstance(s, int):
            running *= s
        else:
            running = arith.MulIOp(running if isinstance(running, ir.Value) else _index(running),
                                   s if isinstance(s, ir.Value) else _index(s)).result
    strides.reverse()
    dynamic_sizes = [s for s in sizes if isinstance(s, ir.Value)]
    dynamic_strides = [s for s in strides if isinstance(s, ir.Value)]
    return memref.reinterpret_cast(
        t, flat, [], dynamic_sizes, dynamic_strides, [0],
        [s if isinstance(s, int) else _DYNAMIC for s in sizes],
        [s if isinstance(s, int) else _DYNAMIC for s in strides])


@function_pass("etc-cpu-dynamic-shapes",
               "Dynamically shaped entry buffers -> flat buffers at their upper bound plus dims:in / dims:out sizes")
def dynamic_shapes(module, options=None) -> int:
    from etc.errors import PassError

    fn = entry_function(module)
    block = fn.regions[0].blocks[0]
    attrs = arg_attrs(fn)
    args = list(block.arguments)
    dynamic_inputs = [i for i, a in enumerate(args) if isinstance(a.type, ir.MemRefType)
                      and not ir.MemRefType(a.type).has_static_shape and arg_label(attrs[i]) is not None]
    dynamic_outputs = [i for i, a in enumerate(args) if isinstance(a.type, ir.MemRefType)
                       and not ir.MemRefType(a.type).has_static_shape and arg_label(attrs[i]) is None]
    if not dynamic_inputs and not dynamic_outputs:
        return 0
    i64 = ir.IntegerType.get_signless(64)
    with fn.context, ir.Location.unknown():
        # dims:in: one i64 per dynamic input dim, with its range.
        ranges, positions = [], {}
        for i in dynamic_inputs:
            kind, name = arg_label(attrs[i])
            t = ir.MemRefType(args[i].type)
            if kind != "input":
                raise PassError(f"etc-cpu-dynamic-shapes: {kind} argument {name} has a dynamic shape {t}")
            if DIM_BOUNDS_ATTR not in attrs[i]:
                raise PassError(f"etc-cpu-dynamic-shapes: input {name} ({t}) has no `{DIM_BOUNDS_ATTR}`: "
                                "the cpu target compiles a dynamic dim for its upper bound")
            bounds = [int(x) for x in ir.DenseI64ArrayAttr(attrs[i][DIM_BOUNDS_ATTR])]
            for d in range(t.rank):
                if t.is_dynamic_dim(d):
                    lo, hi = bounds[2 * d], bounds[2 * d + 1]
                    if hi < 0:
                        raise PassError(f"etc-cpu-dynamic-shapes: dim {d} of input {name} has no upper bound")
                    positions[(i, d)] = len(ranges)
                    ranges.append((lo, hi))
        dims_in = None
        if ranges:
            dims_in = block.add_argument(ir.MemRefType.get([len(ranges)], i64), ir.Location.unknown())
            attrs.append({ARG_ATTR: ir.StringAttr.get("dims:in"),
                          DIM_RANGES_ATTR: _i64_array([x for r in ranges for x in r])})
        first = block.operations[0]
        with ir.InsertionPoint(first):
            for i in dynamic_inputs:
                t = ir.MemRefType(args[i].type)
                sizes = []
                for d in range(t.rank):
                    if not t.is_dynamic_dim(d):
                        sizes.append(t.shape[d])
                        continue
                    loaded = memref.LoadOp(dims_in, [_index(positions[(i, d)])]).result
                    sizes.append(arith.IndexCastOp(ir.IndexType.get(), loaded).result)
                upper = [t.shape[d] if not t.is_dynamic_dim(d) else ranges[positions[(i, d)]][1] for d in range(t.rank)]
                args[i].set_type(ir.MemRefType.get([int(np.prod(upper, dtype=np.int64))], t.element_type))
                view = view_flat(args[i], t, sizes)
                args[i].replace_all_uses_except(view, view.owner.operation)
                attrs[i][SHAPE_ATTR] = _i64_array(upper)
                attrs[i][DYNAMIC_ATTR] = _i64_array([d for d in range(t.rank) if t.is_dynamic_dim(d)])
        update_function_type(fn)
        set_arg_attrs(fn, attrs)  # index_range reads the ranges from here
        # Sizes read back through views (memref.dim of a reshape) fold to the values they were made from.
        run_upstream(module, "builtin.module(canonicalize)", "etc-cpu-dynamic-shapes: canonicalize", PassError)
        # dims:out: written where each dynamic output is filled.
        copies, count = [], 0
        for i in dynamic_outputs:
            uses = [u.owner for u in args[i].uses]
            uses = [as_operation(u) for u in uses]
            if len(uses) != 1 or uses[0].name != "memref.copy" or uses[0].operands[1] != args[i]:
                raise PassError(f"etc-cpu-dynamic-shapes: dynamic output argument {i} is not filled by one memref.copy")
            t = ir.MemRefType(args[i].type)
            dynamic = [d for d in range(t.rank) if t.is_dynamic_dim(d)]
            copies.append((i, uses[0], dynamic, count))
            count += len(dynamic)
        dims_out = block.add_argument(ir.MemRefType.get([count], i64), ir.Location.unknown()) if count else None
        if count:
            attrs.append({ARG_ATTR: ir.StringAttr.get("dims:out")})
        recorded = [list(ir.DenseI64ArrayAttr(b)) for b in ir.ArrayAttr(fn.attributes[RESULT_BOUNDS_ATTR])] \
            if RESULT_BOUNDS_ATTR in fn.attributes else []
        outputs = [i for i, a in enumerate(attrs[:len(args)]) if arg_label(a) is None]  # results, in order
        for i, copy, dynamic, start in copies:
            t = ir.MemRefType(args[i].type)
            position = outputs.index(i)
            fallback = recorded[position] if position < len(recorded) and len(recorded[position]) == t.rank else None
            source = copy.operands[0]
            with ir.InsertionPoint(copy):
                sizes, upper = [], []
                for d in range(t.rank):
                    if not t.is_dynamic_dim(d):
                        sizes.append(t.shape[d])
                        upper.append(t.shape[d])
                        continue
                    size = memref.DimOp(source, _index(d)).result
                    bound = index_range(size) or ((0, fallback[d]) if fallback else None)
                    if bound is None:
                        raise PassError(f"etc-cpu-dynamic-shapes: no upper bound for dim {d} of output {i} "
                                        "(its size is not computed from the inputs' sizes)")
                    sizes.append(size)
                    upper.append(bound[1])
                    memref.StoreOp(arith.IndexCastOp(i64, size).result, dims_out, [_index(start + dynamic.index(d))])
                args[i].set_type(ir.MemRefType.get([int(np.prod(upper, dtype=np.int64))], t.element_type))
                view = view_flat(args[i], t, sizes)
            copy.operands[1] = view
            attrs[i][SHAPE_ATTR] = _i64_array(upper)
            attrs[i][DYNAMIC_ATTR] = _i64_array(dynamic)
        update_function_type(fn)
        set_arg_attrs(fn, attrs)
    return len(dynamic_inputs) + len(dynamic_outputs)
