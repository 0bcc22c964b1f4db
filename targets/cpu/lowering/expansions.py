"""Torch ops torch-mlir does not lower to what the cpu target's codegen takes, as ops it does.

`EXPANSIONS` maps an ATen name to a function `(e, v, op) -> [result values]` that emits, in front
of the torch op `op`, other torch ops computing the same (`Emitter`: every schema argument given,
tensors as torch values), from `v`, its decoded schema values (`torch_ops.decode`). Shapes are
static (or bounded), so each expansion decides its op sequence at compile time:

  aten::view, squeeze, unsqueeze   the row-major reshape they are (`reshape.py`): torch-mlir's view
                                   lowering guessed which dims a dynamic dim merges, and was wrong
  aten::index.Tensor               int32 indices widened to int64 first (torch-mlir compares with i64)
  aten::cumsum                     a Hillis-Steele scan (torch-mlir's tm_tensor.scan does not bufferize)
  aten::gelu (tanh)                its formula (torch-mlir's lowering rounded sqrt(2/pi), 5e-5 off ATen)
  aten::as_strided                 a view chain, or a gather (torch-mlir lacks a lowering)
  aten::index_put                  a loop of row writes (torch-mlir's tm_tensor.scatter does not bufferize)
"""

from __future__ import annotations

import math

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.ir.shapes import upper_bounds
from etc.targets.cpu.lowering.reshape import reshape
from etc.targets.cpu.lowering.torch_ops import (DYNAMIC, TorchBuilder, TorchValues, torch_name_of, torch_operation,
                                                vtensor_element, vtensor_of, vtensor_shape)

# torch name -> function(Emitter, decoded values, torch op) returning the torch values of the op's
# results. Filled in by @expansion below.
EXPANSIONS: dict = {}

_ELEMENT_DTYPE = {"i1": "bool", "i8": "int8", "ui8": "uint8", "i16": "int16", "i32": "int32", "i64": "int64",
                  "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


class Emitter:
    """Builds torch ops at the current insertion point: `e("aten::slice.Tensor", {schema arg: value},
    shape, element)` (every schema argument given; tensors as torch values, element as in the
    builtin type: f32, i64, i1)."""

    def __init__(self):
        self.builder = TorchBuilder()

    def __call__(self, torch_name: str, args: dict, shape, element: str) -> ir.Value:
        from etc.dialects import op_info

        info = op_info(torch_name)
        missing = [a.name for a in info.arguments if a.name not in args]
        if missing:
            raise LoweringError(f"expansion: {torch_name} needs {missing}")
        operands = [self.builder.value(a, args[a.name], TorchValues()) for a in info.arguments]
        name, attributes = torch_operation(torch_name, ir.Context.current)
        return ir.Operation.create(name, results=[vtensor_of(shape, element)], operands=operands,
                                   attributes=attributes).result

    @staticmethod
    def literal(array) -> ir.Value:
        """A constant int64 tensor (index tensors computed at compile time)."""
        array = np.ascontiguousarray(array, dtype=np.int64)
        attr = ir.DenseElementsAttr.get(array, type=ir.IntegerType.get_signed(64))
        return ir.Operation.create("torch.vtensor.literal", results=[vtensor_of(array.shape, "i64")],
                                   attributes={"value": attr}).result

    shape = staticmethod(vtensor_shape)
    element = staticmethod(vtensor_element)

    def permute(self, x, dims):
        if list(dims) == list(range(len(dims))):
            return x
        shape = self.shape(x)
        return self("aten::permute", {"self": x, "dims": list(dims)}, [shape[d] for d in dims], self.element(x))

    def view(self, x, shape, element):
        if self.shape(x) == list(shape):
            return x
        # A dynamic dim (at most one) is torch's -1: the rest of the elements.
        return reshape(x, [d if d >= 0 else -1 for d in shape], shape)

    def size(self, x, dim: int) -> ir.Value:
        """The !torch.int size of dim `dim` of `x` (a dynamic one is known at run time only)."""
        return ir.Operation.create("torch.aten.size.int", results=[ir.Type.parse("!torch.int")],
                                   operands=[x, self.builder.int(dim)]).result

    def scalar(self, x) -> ir.Value:
        """The !torch.int held by a 0-d int64 tensor (read at run time)."""
        return ir.Operation.create("torch.aten.Int.Tensor", results=[ir.Type.parse("!torch.int")],
                                   operands=[x]).result

    def add_int(self, a, b) -> ir.Value:
        return ir.Operation.create("torch.aten.add.int", results=[ir.Type.parse("!torch.int")],
                                   operands=[a, b]).result

    def loop(self, trip_count, init, body) -> ir.Value:
        """A for loop (torch.prim.Loop, an scf.for after lowering) of `trip_count` (!torch.int)
        iterations carrying one tensor: `body(k, carried)` emits an iteration and returns the next."""
        true = self.builder.bool(True)
        loop = ir.Operation.create("torch.prim.Loop", results=[init.type], operands=[trip_count, true, init],
                                   regions=1)
        block = loop.regions[0].blocks.append(ir.Type.parse("!torch.int"), init.type)
        with ir.InsertionPoint(block):
            saved, self.builder.cache = self.builder.cache, {}  # constants made inside stay inside
            try:
                carried = body(block.arguments[0], block.arguments[1])
                ir.Operation.create("torch.prim.Loop.condition", operands=[self.builder.bool(True), carried])
            finally:
                self.builder.cache = saved
        return loop.result

    def slice(self, x, shape, element, dim, start, end, step=1):
        out = list(shape)
        out[dim] = len(range(start, end, step))
        if out == list(shape):
            return x, out
        return self("aten::slice.Tensor", {"self": x, "dim": dim, "start": start, "end": end, "step": step},
                    out, element), out


def tensor_type_of(value) -> tuple[list, str]:
    """(shape, builtin element name) of a torch value."""
    return vtensor_shape(value), vtensor_element(value)


def expansion(torch_name: str):
    def register(fn):
        EXPANSIONS[torch_name] = fn
        return fn
    return register



@expansion("aten::view")
def _expand_view(e: Emitter, v: dict, op) -> list:
    shape, _ = tensor_type_of(op.results[0])
    return [reshape(v["self"], list(v["size"]), shape)]


@expansion("aten::squeeze.dims")
@expansion("aten::squeeze.dim")
@expansion("aten::unsqueeze")
def _expand_squeeze(e: Emitter, v: dict, op) -> list:
    """squeeze/unsqueeze as the reshape they are (the kept dims' sizes from the input)."""
    shape, _ = tensor_type_of(op.results[0])
    source = vtensor_shape(v["self"])
    sizes = [n if n != DYNAMIC else e.size(v["self"], d) for d, n in enumerate(source)]
    if torch_name_of(op) == "aten::unsqueeze":
        sizes.insert(v["dim"] % (len(source) + 1), 1)
    else:
        dims = v["dim"] if isinstance(v["dim"], list) else [v["dim"]]
        dims = {d % max(len(source), 1) for d in dims}
        sizes = [s for d, s in enumerate(sizes) if not (d in dims and source[d] == 1)]
    return [reshape(v["self"], sizes, shape)]


@expansion("aten::index.Tensor")
def _expand_index(e: Emitter, v: dict, op) -> list:
    """index.Tensor as is, its int32 index tensors widened to int64 first (torch-mlir's lowering
    compares them with i64 bounds and fails to verify otherwise)."""
    shape, element = tensor_type_of(op.results[0])
    indices = []
    for index in v["indices"]:
        if index is not None and e.element(index) != "i64" and e.element(index) != "i1":
            index = e("aten::to.dtype", {"self": index, "dtype": "int64", "non_blocking": False, "copy": False,
                                         "memory_format": None}, e.shape(index), "i64")
        indices.append(index)
    return [e("aten::index.Tensor", {"self": v["self"], "indices": indices}, shape, element)]


@expansion("aten::cumsum")
def _expand_cumsum(e: Emitter, v: dict, op) -> list:
    """torch-mlir lowers cumsum to tm_tensor.scan, which our bufferization does not take: a
    Hillis-Steele scan instead, ceil(log2 n) steps of x + (x shifted by 2^k along dim, zero-filled),
    each a slice, a pad and an add that fuse into one loop nest (exact for integers; for floats each
    output sums its prefix as a tree). Over a dynamic dim, n is its upper bound and the shift is
    the pad first, then the first `size` elements (run-time size): right for every size, a shift
    past the end giving zeros. (Its steps once counted the dynamic sentinel: no step, x returned
    as its own cumsum.)"""
    shape, element = tensor_type_of(op.results[0])
    _, in_element = tensor_type_of(op.operands[0])
    x = v["self"]
    if in_element != element:  # cumsum of bool/int32 gives int64 (or `dtype`)
        x = e("aten::to.dtype", {"self": x, "dtype": _ELEMENT_DTYPE[element], "non_blocking": False, "copy": False,
                                 "memory_format": None}, shape, element)
    rank = len(shape)
    if rank == 0:
        return [x]
    dim = v["dim"] % rank
    n = shape[dim]
    dynamic = n == DYNAMIC
    if dynamic:
        bounds = upper_bounds(op.results[0])
        if bounds is None or bounds[dim] < 0:
            raise LoweringError("cumsum over a dynamic dim without an upper bound")
        n, size = bounds[dim], e.size(x, dim)
    zero = 0.0 if element.startswith(("f", "bf")) else 0
    step = 1
    while step < n:
        pad = [0] * (2 * rank)
        pad[2 * (rank - 1 - dim)] = step  # constant_pad_nd's pairs run from the last dim
        if dynamic:
            padded = e("aten::constant_pad_nd", {"self": x, "pad": pad, "value": zero}, shape, element)
            shifted = e("aten::slice.Tensor", {"self": padded, "dim": dim, "start": 0, "end": size, "step": 1},
                        shape, element)
        else:
            head, _ = e.slice(x, shape, element, dim, 0, n - step)
            shifted = e("aten::constant_pad_nd", {"self": head, "pad": pad, "value": zero}, shape, element)
        x = e("aten::add.Tensor", {"self": x, "other": shifted, "alpha": 1}, shape, element)
        step *= 2
    return [x]


@expansion("aten::gelu")
def _expand_gelu(e: Emitter, v: dict, op) -> list:
    """gelu(approximate="tanh") as its formula, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
    torch-mlir's lowering uses 0.797724 for sqrt(2/pi) = 0.7978846 and was 5e-5 off ATen. The
    exact GELU goes as it is (its erf is expanded by etc-cpu-expand-math)."""
    shape, element = tensor_type_of(op.results[0])
    x = v["self"]
    if v["approximate"] != "tanh":
        return [e("aten::gelu", {"self": x, "approximate": v["approximate"]}, shape, element)]

    def times(a, b):
        return e("aten::mul.Tensor", {"self": a, "other": b}, shape, element)

    def scaled(a, c):
        return e("aten::mul.Scalar", {"self": a, "other": c}, shape, element)

    cube = times(times(x, x), x)
    inner = e("aten::add.Tensor", {"self": x, "other": cube, "alpha": 0.044715}, shape, element)
    t = e("aten::tanh", {"self": scaled(inner, math.sqrt(2.0 / math.pi))}, shape, element)
    one_plus = e("aten::add.Scalar", {"self": t, "other": 1.0, "alpha": 1}, shape, element)
    return [times(scaled(x, 0.5), one_plus)]


def _strided_box(size, stride, offset, numel):
    """as_strided(size, stride, offset) of a flat buffer as slices of a reshape, when its dims do not
    overlap: the non-trivial dims sorted by stride (outermost first) must each fit inside the next
    larger stride, which it divides. Returns (pad, view shape, slice ends, sorted dims) or None."""
    dims = [d for d in range(len(size)) if size[d] > 1 and stride[d] > 0]
    dims.sort(key=lambda d: -stride[d])
    if not dims:
        return None
    for outer, inner in zip(dims, dims[1:]):
        if stride[outer] % stride[inner] or size[inner] * stride[inner] > stride[outer]:
            return None
    extent = size[dims[0]] * stride[dims[0]]
    shape = [size[dims[0]]] + [stride[a] // stride[b] for a, b in zip(dims, dims[1:])] + [stride[dims[-1]]]
    ends = [size[d] for d in dims] + [1]
    return max(0, offset + extent - numel), shape, ends, dims


@expansion("aten::as_strided")
def _expand_as_strided(e: Emitter, v: dict, op) -> list:
    """as_strided reads the input's contiguous storage (the portable kernel's semantics). Static
    sizes and strides make it a view chain (flatten, slice at the offset, reshape into a box,
    slices, permute, broadcast) when its dims do not overlap, and a gather with a constant index
    tensor otherwise (sliding windows)."""
    in_shape, element = tensor_type_of(op.operands[0])
    out_shape, _ = tensor_type_of(op.results[0])
    if DYNAMIC in in_shape or DYNAMIC in out_shape:  # the view chain below is computed from static sizes
        raise LoweringError("as_strided of or to a dynamically shaped tensor (the cpu target takes static ones)")
    size, stride = list(v["size"]), list(v["stride"])
    offset = v.get("storage_offset") or 0
    numel = int(np.prod(in_shape)) if in_shape else 1
    flat = e.view(v["self"], [numel], element)
    box = _strided_box(size, stride, offset, numel) if numel else None
    if box is None or int(np.prod(out_shape)) == 0:
        index = np.full(size, offset, dtype=np.int64)
        for d, (n, st) in enumerate(zip(size, stride)):
            index = index + (np.arange(n) * st).reshape([n if i == d else 1 for i in range(len(size))])
        gathered = e("aten::index_select", {"self": flat, "dim": 0, "index": e.literal(index.reshape(-1))},
                     [index.size], element)
        return [e.view(gathered, out_shape, element)]
    pad, shape, ends, dims = box
    length = numel
    if pad:  # the box runs past the storage's end, where nothing is read
        flat = e("aten::constant_pad_nd", {"self": flat, "pad": [0, pad], "value": 0}, [numel + pad], element)
        length += pad
    extent = int(np.prod(shape))
    x, _ = e.slice(flat, [length], element, 0, offset, offset + extent)
    x = e.view(x, shape, element)
    for d, end in enumerate(ends):
        x, shape = e.slice(x, shape, element, d, 0, end)
    shape = [size[d] for d in dims]
    x = e.view(x, shape, element)
    order = sorted(range(len(dims)), key=lambda i: dims[i])  # back to the output's dim order
    if order != list(range(len(dims))):
        shape = [shape[i] for i in order]
        x = e("aten::permute", {"self": x, "dims": order}, shape, element)
    kept = [size[d] if d in dims else 1 for d in range(len(size))]
    if kept != shape:
        x = e.view(x, kept, element)
    if kept != list(out_shape):  # stride-0 dims broadcast
        x = e("aten::expand", {"self": x, "size": list(out_shape), "implicit": False}, out_shape, element)
    return [x]


@expansion("aten::index_put")
def _expand_index_put(e: Emitter, v: dict, op) -> list:
    """torch-mlir lowers index_put to tm_tensor.scatter, which our bufferization does not take: a
    loop over the K index tuples instead, each writing its row of values into x (accumulate: adding
    it), in order, so a position named twice takes its last write (ATen's CPU kernel does the same)
    or the sum of all. x is viewed as [pre, P, post] with its P indexed positions in the middle
    (adjacent indexed dims need no copy for that; others are permuted to the front), the values
    as [pre, K, post], the index tuples linearized to K positions. A KV-cache update
    (cache[:, :, pos] = k) writes its new rows only: after bufferization it is a copy of the cache
    into the result (none when the delegate computes the cache in place: etc-cpu-copies-to-linalg)
    and K slice writes, where a select over the whole cache read and wrote every element."""
    shape, element = tensor_type_of(op.results[0])
    rank = len(shape)
    indices = list(v["indices"]) + [None] * (rank - len(v["indices"]))
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        return [v["self"]]
    if any(e.element(indices[d]) == "i1" for d in dims):
        raise LoweringError("index_put with a boolean mask index has a data-dependent shape")
    if DYNAMIC in shape:  # the [pre, P, post] view below multiplies static sizes
        raise LoweringError("index_put into a dynamically shaped tensor (the cpu target's scatter is built for "
                            "static sizes; a dynamic number of indices into a static tensor is taken)")
    rest = [d for d in range(rank) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    index_shapes = [e.shape(indices[d]) for d in dims]
    if any(DYNAMIC in ishape for ishape in index_shapes):  # a dynamic count of indices (a prompt's positions)
        if len(dims) != 1 or len(index_shapes[0]) != 1:
            raise LoweringError("index_put with a dynamic number of indices takes one 1-D index tensor")
        bshape, n_idx = list(index_shapes[0]), DYNAMIC
    else:
        bshape = list(np.broadcast_shapes(*[tuple(ishape) for ishape in index_shapes]))
        n_idx = int(np.prod(bshape))
    n_pos = int(np.prod([shape[d] for d in dims]))
    if adjacent:  # x[indices] keeps the index dims where the indexed dims were
        pre, post = int(np.prod(shape[:dims[0]])), int(np.prod(shape[dims[-1] + 1:]))
        sub = shape[:dims[0]] + bshape + shape[dims[-1] + 1:]
        x = e.view(v["self"], [pre, n_pos, post], element)
    else:  # x[indices] puts them first
        pre, post = 1, int(np.prod([shape[d] for d in rest]))
        sub = bshape + [shape[d] for d in rest]
        x = e.view(e.permute(v["self"], dims + rest), [1, n_pos, post], element)
    values = v["values"]
    if e.shape(values) != sub:
        values = e("aten::expand", {"self": values, "size": sub, "implicit": False}, sub, element)
    values = e.view(values, [pre, n_idx, post], element)
    # Linear position of each index tuple: sum_j (index_j mod size_j) * stride_j, broadcast to [K].
    linear = None
    stride = n_pos
    for d in dims:
        stride //= shape[d]
        index = indices[d]
        ishape = e.shape(index)
        if e.element(index) != "i64":
            index = e("aten::to.dtype", {"self": index, "dtype": "int64", "non_blocking": False, "copy": False,
                                         "memory_format": None}, ishape, "i64")
        index = e("aten::remainder.Scalar", {"self": index, "other": shape[d]}, ishape, "i64")  # -1 -> size-1
        if stride != 1:
            index = e("aten::mul.Scalar", {"self": index, "other": stride}, ishape, "i64")
        if linear is None:
            linear = index
        else:
            out = list(np.broadcast_shapes(tuple(e.shape(linear)), tuple(ishape)))
            linear = e("aten::add.Tensor", {"self": linear, "other": index, "alpha": 1}, out, "i64")
    if e.shape(linear) != bshape:
        linear = e("aten::expand", {"self": linear, "size": bshape, "implicit": False}, bshape, "i64")
    linear = e.view(linear, [n_idx], "i64")
    out = e.loop(e.size(linear, 0) if n_idx == DYNAMIC else e.builder.int(n_idx), x,
                 lambda k, acc: _scatter_row(e, acc, values, linear, k, bool(v["accumulate"])))
    if adjacent:
        return [e.view(out, shape, element)]
    out = e.view(out, [shape[d] for d in dims + rest], element)
    return [e.permute(out, sorted(range(rank), key=lambda i: (dims + rest)[i]))]


def _scatter_row(e: Emitter, acc, values, linear, k, accumulate: bool):
    """acc[:, linear[k], :] = values[:, k, :] (accumulate: +=), on [pre, P, post] and [pre, K, post]."""
    pre, _, post = e.shape(acc)
    element = e.element(acc)
    one = e.builder.int(1)
    position = e("aten::select.int", {"self": linear, "dim": 0, "index": k}, [], "i64")
    p = e.scalar(position)
    p_end = e.add_int(p, one)
    row = e("aten::slice.Tensor", {"self": values, "dim": 1, "start": k, "end": e.add_int(k, one), "step": 1},
            [pre, 1, post], element)
    if accumulate:
        old = e("aten::slice.Tensor", {"self": acc, "dim": 1, "start": p, "end": p_end, "step": 1},
                [pre, 1, post], element)
        row = e("aten::add.Tensor", {"self": old, "other": row, "alpha": 1}, [pre, 1, post], element)
    return e("aten::slice_scatter", {"self": acc, "src": row, "dim": 1, "start": p, "end": p_end, "step": 1},
             e.shape(acc), element)
