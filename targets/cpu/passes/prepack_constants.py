"""etc-cpu-prepack-constants: the weights' layout chains become constants packed when the blob is built.

The GEMM kernels read their B operand as column panels [NB, K, nr] and the transposed
convolution reads the filter transposed: when that operand is a weight, the pad / reshape /
transpose chain from the constant argument to the kernel would run on every call
(MobileNet's last 1x1 convolution spent two thirds of its time re-packing a 256 KiB filter).
The weight is known when the blob is built, so, as XNNPACK packs its weights once at init,
this pass cuts each such chain out of the function: the kernel reads a new argument

    {etc.cpu.arg = "constant:<fqn>#packed<i>", etc.cpu.pack = "<func.func @pack(%w) -> packed>"}

whose `etc.cpu.pack` is the chain as a function of the source constant; the cpu target
evaluates it with numpy (`evaluate_pack`) when it writes the blob. Arguments nothing reads
any more are dropped. A value is foldable when it is computed only from constant arguments
by layout ops: `tensor.collapse_shape`, `tensor.expand_shape`, `tensor.extract_slice`
(static), `tensor.pad` (static, a constant pad value), `linalg.transpose`, a
`linalg.generic` that only permutes its input into a `tensor.empty`, and one that only widens
its elements (`arith.sitofp`, `arith.extsi`, `arith.extf`: the int8 depthwise filter the f32
window kernel reads; the blob stores such a constant narrow again, `blob.pack_constants`). A
chain whose result would have many more elements than its source (a broadcast-like pad) is
left to run at call time.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.ir.ops import as_operation, replace_operands, user_op
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import (ARG_ATTR, arg_attrs, arg_label, entry_function, set_arg_attrs,
                                        update_function_type)

PACK_ATTR = "etc.cpu.pack"
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


# Element casts that widen exactly (every source value has its own result value), and the numpy
# types of the elements they read and write. A source is read through its own type's view: the
# same bytes may arrive as uint8 (MLIR's integers are signless); bf16 has no numpy type.
_WIDENING_CASTS = {"arith.sitofp": ("i8", "i16", "i32"), "arith.extsi": ("i8", "i16", "i32"), "arith.extf": ("f16",)}
_NUMPY_ELEMENT = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32,
                  "i16": np.int16, "i8": np.int8}


def _widening_cast(op):
    """For `out[d...] = cast(in[d...])` generics with a widening cast: the (source, result) numpy
    dtypes."""
    if len(op.operands) != 2 or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 2 or ops[0].name not in _WIDENING_CASTS or ops[1].name != "linalg.yield":
        return None
    source = str(ir.RankedTensorType(op.operands[0].type).element_type)
    result = str(ir.RankedTensorType(op.results[0].type).element_type)
    if source not in _WIDENING_CASTS[ops[0].name] or result not in _NUMPY_ELEMENT:
        return None
    if ops[0].operands[0] != block.arguments[0] or ops[1].operands[0] != ops[0].results[0]:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    return np.dtype(_NUMPY_ELEMENT[source]), np.dtype(_NUMPY_ELEMENT[result])


def _pad_value(op):
    yields = [o for o in op.regions[0].blocks[0].operations if o.operation.name == "tensor.yield"]
    if len(yields) != 1:
        return None
    value = yields[0].operands[0]
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    return None


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
        if inputs[0] is None:
            return NotImplemented
        perm = _perm_of_copy(op)
        if perm is not None:
            return np.transpose(inputs[0], perm)
        cast = _widening_cast(op)
        if cast is None:
            return NotImplemented
        source, result = cast
        value = inputs[0]
        if value.dtype != source:  # the stand-ins are float32; data of the source's width is viewed
            value = value.view(source) if value.dtype.itemsize == source.itemsize else value.astype(source)
        return value.astype(result)
    return NotImplemented


@function_pass("etc-cpu-prepack-constants",
               "Layout chains on constant arguments -> new constant arguments packed at blob-build time")
def prepack_constants(module, options=None) -> int:
    """Cut the foldable chains out of the entry function (see the module docstring); returns how many."""
    fn = entry_function(module)
    block = fn.regions[0].blocks[0]
    attrs = arg_attrs(fn)
    shapes: dict = {}  # ir.Value -> stand-in array of its shape (None: a tensor.empty)
    origin: dict = {}  # ir.Value -> the block argument it derives from
    for arg, a in zip(block.arguments, attrs):
        label = arg_label(a)
        if label and label[0] == "constant":
            shapes[arg] = np.zeros(_shape(arg), np.float32)
            origin[arg] = arg
    if not origin:
        return 0
    folded_ops = []
    for op in block.operations:
        op = op.operation
        if op.name not in _LAYOUT_OPS or len(op.results) != 1:
            continue
        tensor_operands = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
        if op.name != "tensor.empty" and not (tensor_operands and all(v in shapes for v in tensor_operands)):
            continue
        if len(tensor_operands) != len(op.operands):
            continue  # index operands: dynamic offsets or sizes
        sources = {origin[v] for v in tensor_operands if v in origin}
        if len(sources) > 1:
            continue  # a pack is a function of one constant
        # NotImplemented: not a layout op this evaluator folds (it then runs at call time); an
        # exception is a bug in the evaluator, reported as such by the pass manager.
        result = _evaluate(op, [shapes[v] for v in tensor_operands])
        if result is NotImplemented:
            continue
        if result is not None:
            if list(result.shape) != _shape(op.results[0]):
                continue
            if result.nbytes > MAX_GROWTH * sum(shapes[s].nbytes for s in sources) + 4096:
                continue
            origin[op.results[0]] = sources.pop()
        shapes[op.results[0]] = result
        folded_ops.append(op)

    folded = set(folded_ops)
    roots = [op.results[0] for op in folded_ops
             if shapes[op.results[0]] is not None and any(user_op(u) not in folded for u in op.results[0].uses)]
    if not roots:
        return 0
    taken = {ir.StringAttr(a[ARG_ATTR]).value for a in attrs if ARG_ATTR in a}
    with fn.context, fn.location:
        for root in roots:
            source = origin[root]
            fqn = arg_label(attrs[source.arg_number])[1]
            counter = 0
            while f"constant:{fqn}#packed{counter}" in taken:
                counter += 1
            label = f"constant:{fqn}#packed{counter}"
            taken.add(label)
            text = _pack_function(root, source, folded_ops)
            new_arg = block.add_argument(root.type, fn.location)
            attrs.append({ARG_ATTR: ir.StringAttr.get(label), PACK_ATTR: ir.StringAttr.get(text),
                          "bufferization.writable": ir.BoolAttr.get(False)})
            for use in list(root.uses):
                if user_op(use) not in folded:
                    use.owner.operands[use.operand_number] = new_arg
        for op in reversed(folded_ops):
            if all(not list(r.uses) for r in op.results):
                op.erase()
        # Drop the constant arguments nothing reads any more (their bytes would ship for nothing).
        for index in reversed(range(len(block.arguments))):
            label = arg_label(attrs[index])
            if label and label[0] == "constant" and not list(block.arguments[index].uses):
                block.erase_argument(index)
                del attrs[index]
        update_function_type(fn)
        set_arg_attrs(fn, attrs)
    return len(roots)


def _pack_function(root, source, folded_ops: list) -> str:
    """The chain from `source` to `root` as `func.func @pack(%w) -> root's type` (text)."""
    from torch_mlir.dialects import func as func_d

    needed, stack = set(), [root]
    while stack:
        value = stack.pop()
        owner = value.owner
        if isinstance(owner, ir.Block):
            continue
        owner = as_operation(owner)
        if owner in needed:
            continue
        needed.add(owner)
        stack.extend(owner.operands)
    # Values the chain's regions read from outside it (tensor.pad's yielded constant).
    outside = []
    for op in folded_ops:
        if op not in needed:
            continue
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    for v in inner.operands:
                        owner = v.owner
                        if isinstance(owner, ir.Block):
                            continue
                        owner = as_operation(owner)
                        if owner.name == "arith.constant" and owner.parent != op and owner not in outside:
                            outside.append(owner)
    holder = ir.Module.create()
    with ir.InsertionPoint(holder.body):
        fn = func_d.FuncOp("pack", ir.FunctionType.get([source.type], [root.type]))
        entry = fn.add_entry_block()
    mapping = {source: entry.arguments[0]}
    with ir.InsertionPoint(entry):
        for const in outside:
            mapping[const.results[0]] = const.clone().results[0]
        for op in folded_ops:
            if op not in needed:
                continue
            clone = op.clone()
            replace_operands(clone, mapping)
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
        func_d.ReturnOp([mapping[root]])
    return str(fn.operation)


def evaluate_pack(text: str, array: np.ndarray) -> np.ndarray:
    """Run a pack function (an `etc.cpu.pack` attribute) on the source constant's data."""
    from etc.targets.cpu.lowering.context import shared_context

    with shared_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        fn = module.body.operations[0]
        block = fn.regions[0].blocks[0]
        values = {block.arguments[0]: np.asarray(array)}
        for op in block.operations:
            op = op.operation
            if op.name == "func.return":
                return np.require(values[op.operands[0]], requirements="C")  # (ascontiguousarray makes a 0-d value 1-d)
            if op.name == "arith.constant":  # a pad value, read by _evaluate from the IR
                continue
            tensor_operands = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
            result = _evaluate(op, [values[v] for v in tensor_operands])
            if result is NotImplemented:
                raise ValueError(f"pack function: cannot evaluate {op.name}")
            values[op.results[0]] = result
    raise ValueError("pack function without a return")
