"""Pre-pack constant operands at compile time (the weights' layout changes the strategies make).

The GEMM strategy reads its B operand as column panels [NB, K, nr] and the transposed
convolution reads the filter transposed: when that operand is a weight, the pad / reshape /
transpose chain from the constant function argument to the kernel would run on every call
(MobileNet's last 1x1 convolution spent two thirds of its time re-packing a 256 KiB filter).
The weight is known when the blob is built, so this step evaluates such chains with numpy and
hands the kernel a new constant argument already in the packed layout, as XNNPACK packs its
weights once at init.

    fold_constant_arguments(module, arg_kinds, constants) -> new arg_kinds

runs on linalg-on-tensors (after the codegen strategy, before bufferization) on the module's
single function. A value is foldable when it is computed only from constant arguments by
layout ops: `tensor.collapse_shape`, `tensor.expand_shape`, `tensor.extract_slice` (static),
`tensor.pad` (static, a constant pad value), `linalg.transpose` and a `linalg.generic` that
only permutes its input into a `tensor.empty`. Each foldable value with a user outside the
chain becomes a new argument `("constant", "<fqn>#packed<i>")` whose array is added to
`constants`; arguments left unused are dropped. A chain whose result would be much larger than
its sources (a broadcast-like pad) is left to run at call time.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

# Folded arrays may grow (zero padding to whole panels) but not explode.
MAX_GROWTH = 2.0
_LAYOUT_OPS = frozenset({"tensor.collapse_shape", "tensor.expand_shape", "tensor.extract_slice", "tensor.pad",
                         "linalg.transpose", "linalg.generic", "tensor.empty"})


def _shape(value) -> list[int]:
    return list(ir.RankedTensorType(value.type).shape)


def _dense_ints(op, name) -> list[int]:
    return [int(v) for v in ir.DenseI64ArrayAttr(op.attributes[name])]


def _perm_of_copy(op) -> list[int] | None:
    """For `out[d...] = in[perm-map(d...)]` generics (torch-mlir's and the strategies' transposes):
    the numpy transpose taking the input to the output, else None."""
    if len(op.operands) != 2 or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if len(ops) != 1 or ops[0].operation.name != "linalg.yield" or len(ops[0].operands) != 1:
        return None
    if ops[0].operands[0] != block.arguments[0]:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    in_map, out_map = maps
    try:
        in_dims = [ir.AffineDimExpr(e).position for e in in_map.results]
        out_dims = [ir.AffineDimExpr(e).position for e in out_map.results]
    except ValueError:
        return None
    n = in_map.n_dims
    if sorted(in_dims) != list(range(n)) or out_dims != list(range(n)):
        return None
    # out[d0..dn] = in[d_{in_dims[0]}, ...]: output axis i is input axis in_dims.index(i).
    return [in_dims.index(i) for i in range(n)]


def _pad_value(op):
    yields = [o for o in op.regions[0].blocks[0].operations if o.operation.name == "tensor.yield"]
    if len(yields) != 1:
        return None
    value = yields[0].operands[0]
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    return float(ir.FloatAttr(owner.attributes["value"]).value)


def _evaluate(op, inputs: list):
    """numpy value of layout op `op` given its tensor operands' values (None for tensor.empty)."""
    name = op.name
    result_shape = _shape(op.results[0])
    if name == "tensor.empty":
        return None
    if any(v is None for v in inputs[:1]):  # a view of an empty tensor is shape only, like the tensor
        return None if name in ("tensor.collapse_shape", "tensor.expand_shape", "tensor.extract_slice") \
            else NotImplemented
    if name in ("tensor.collapse_shape", "tensor.expand_shape"):
        return inputs[0].reshape(result_shape)
    if name == "tensor.extract_slice":
        offsets, sizes, strides = (_dense_ints(op, k) for k in ("static_offsets", "static_sizes", "static_strides"))
        if len(op.operands) != 1:
            return NotImplemented  # dynamic offsets
        src = inputs[0]
        index = tuple(slice(o, o + s * st, st) for o, s, st in zip(offsets, sizes, strides))
        return src[index].reshape(result_shape)
    if name == "tensor.pad":
        if len(op.operands) != 1:
            return NotImplemented
        value = _pad_value(op)
        if value is None:
            return NotImplemented
        low, high = _dense_ints(op, "static_low"), _dense_ints(op, "static_high")
        if min(low + high) < 0:
            return NotImplemented
        return np.pad(inputs[0], list(zip(low, high)), constant_values=value)
    if name == "linalg.transpose":
        return np.transpose(inputs[0], _dense_ints(op, "permutation"))
    if name == "linalg.generic":
        perm = _perm_of_copy(op)
        if perm is None or inputs[0] is None:
            return NotImplemented
        return np.transpose(inputs[0], perm)
    return NotImplemented


def fold_constant_arguments(module: ir.Module, arg_kinds: list, constants: dict) -> list:
    """Evaluate layout chains on constant arguments at compile time (see the module docstring).
    Returns the new `arg_kinds`; `constants` gains the packed arrays."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1 or not any(kind == "constant" for kind, _ in arg_kinds):
        return list(arg_kinds)
    fn = funcs[0]
    block = fn.regions[0].blocks[0]
    values: dict = {}  # ir.Value -> numpy array (None: a tensor.empty)
    origin: dict = {}  # ir.Value -> fqn it derives from
    for arg, (kind, name) in zip(block.arguments, arg_kinds):
        if kind == "constant" and name in constants:
            values[arg] = np.asarray(constants[name])
            origin[arg] = name
    folded_ops = []
    for op in block.operations:
        op = op.operation
        if op.name not in _LAYOUT_OPS or len(op.results) != 1:
            continue
        tensor_operands = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
        if op.name != "tensor.empty" and not (tensor_operands and all(v in values for v in tensor_operands)):
            continue
        if len(tensor_operands) != len(op.operands):
            continue  # index operands: dynamic offsets or sizes
        try:
            result = _evaluate(op, [values[v] for v in tensor_operands])
        except Exception:  # noqa: BLE001 - an op this evaluator misreads is simply left to run
            continue
        if result is NotImplemented:
            continue
        sources = [values[v] for v in tensor_operands if values[v] is not None]
        if result is not None:
            if list(result.shape) != _shape(op.results[0]):
                continue
            if result.nbytes > MAX_GROWTH * sum(s.nbytes for s in sources) + 4096:
                continue
            origin[op.results[0]] = next(origin[v] for v in tensor_operands if v in origin)
        values[op.results[0]] = result
        folded_ops.append(op)

    # Roots: folded arrays read by something that is not folded itself.
    folded = set(folded_ops)
    roots = []
    for op in folded_ops:
        result = op.results[0]
        if values[result] is None:
            continue
        if any(_owner(use) not in folded for use in result.uses):
            roots.append(result)
    if not roots:
        return list(arg_kinds)

    kinds = list(arg_kinds)
    counter = 0
    for root in roots:
        array = np.ascontiguousarray(values[root])
        base = origin[root]
        while f"{base}#packed{counter}" in constants:
            counter += 1
        name = f"{base}#packed{counter}"
        constants[name] = array
        new_arg = block.add_argument(root.type, fn.location)
        kinds.append(("constant", name))
        for use in list(root.uses):
            if _owner(use) not in folded:
                use.owner.operands[use.operand_number] = new_arg
    for op in reversed(folded_ops):
        if all(not list(r.uses) for r in op.results):
            op.erase()
    # Drop the arguments nothing reads any more (their bytes would ship for nothing).
    for index in reversed(range(len(block.arguments))):
        if kinds[index][0] == "constant" and not list(block.arguments[index].uses):
            block.erase_argument(index)
            del kinds[index]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    fn.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results)))
    return kinds


def _owner(use):
    owner = use.owner
    return owner.operation if hasattr(owner, "operation") else owner
