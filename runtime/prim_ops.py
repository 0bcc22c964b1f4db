"""ExecuTorch's primitive operators, registered into the kernel registry.

These are what an emitter produces besides out-variant kernels:

- sizes read at run time: `aten::sym_size.int(Tensor self, int dim) -> SymInt`,
  `aten::sym_numel(Tensor self) -> SymInt` and the scalar of a one-element tensor,
  `aten::_local_scalar_dense(Tensor self) -> Scalar`;
- scalar arithmetic and comparisons on those sizes, `executorch_prim::<op>.Scalar`
  (the ops `executorch.exir.passes.executorch_prim_ops_registry` binds Python's
  operators and `torch.sym_*` to, plus the legacy `.int` overloads);
- `aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False)`, the in-place
  copy ExecuTorch emits to write a mutated buffer back (its default overload, so an
  empty overload name in the program);
- the loop helper `executorch_prim::et_copy_index.tensor(copy_to, copy_from, index)`
  that `torch.map`/`scan` loops stack their per-iteration results with, and
  `executorch_prim::et_view.default(self, size) -> Tensor`, the view ExecuTorch keeps
  for dynamic or unplanned views.

Calling convention: as for kernels, a call's args are the schema arguments then one
return slot, the op returns the value for that slot (a Python number for the scalar
ops). `et_copy_index` is the exception: it has no return slot and writes `copy_to`
(argument 0), which its `etc_result_arg = 0` attribute tells the interpreter.

Overload-less names (`aten::sym_numel`) are registered as `<name>.default`, the
spelling the registry accepts; the runtime tries it for an Operator whose overload
is empty, as ExecuTorch's emitter writes default overloads.
"""

from __future__ import annotations

import math

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.registry import has_kernel, register_kernel

PRIM_OPS: dict = {}


def _prim(*names):
    def register(fn):
        for name in names:
            PRIM_OPS[name] = fn
            if not has_kernel(name):
                register_kernel(name, fn)
        return fn
    return register


# --------------------------------------------------------------------------- sizes

@_prim("aten::sym_size.int")
def sym_size(tensor, dim):
    ndim = tensor.ndim
    if not -ndim <= dim < max(ndim, 1):
        raise ExecutionError(f"sym_size: dimension {dim} out of range for a tensor of rank {ndim}")
    return int(tensor.shape[dim])


@_prim("aten::sym_numel.default")
def sym_numel(tensor):
    return int(tensor.size)


@_prim("aten::sym_storage_offset.default")
def sym_storage_offset(tensor):
    return 0  # .pte tensors always start at their storage (storage_offset must be 0)


@_prim("aten::sym_stride.int")
def sym_stride(tensor, dim):
    return int(tensor.strides[dim] // tensor.itemsize) if tensor.size else 1


@_prim("aten::_local_scalar_dense.default")
def local_scalar_dense(tensor):
    if tensor.size != 1:
        raise ExecutionError(f"_local_scalar_dense: a tensor of {tensor.size} elements has no single value")
    return tensor.reshape(()).item()


# --------------------------------------------------------------------------- scalar arithmetic

def _floordiv(a, b):
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        if b == 0:
            raise ExecutionError("floordiv: integer division by zero")
        return int(a) // int(b)
    return float(math.floor(a / b))


def _mod(a, b):
    if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
        if b == 0:
            raise ExecutionError("mod: integer modulo by zero")
        return int(a) % int(b)  # Python's (floor) semantics, as a traced `x % y` on SymInts
    return a % b


def _truediv(a, b):
    if b == 0:
        raise ExecutionError("truediv: division by zero")
    return a / b


def _number(x):
    """A bool taking part in arithmetic counts as 0/1, as in Python."""
    return int(x) if isinstance(x, bool) else x


_BINARY = {
    "add": lambda a, b: _number(a) + _number(b),
    "sub": lambda a, b: _number(a) - _number(b),
    "mul": lambda a, b: _number(a) * _number(b),
    "floordiv": _floordiv,
    "truediv": _truediv,
    "mod": _mod,
    "sym_max": max,
    "sym_min": min,
    "eq": lambda a, b: bool(a == b),
    "gt": lambda a, b: bool(a > b),
    "lt": lambda a, b: bool(a < b),
    "ge": lambda a, b: bool(a >= b),
    "le": lambda a, b: bool(a <= b),
}

_UNARY = {
    "neg": lambda a: -_number(a),
    "sym_float": float,
    "sym_int": lambda a: int(math.trunc(a)),
    "ceil": lambda a: int(math.ceil(a)),
    "round": lambda a: int(round(a)),
    "trunc": lambda a: int(math.trunc(a)),
    "sym_not": lambda a: not a,
}


def _named(fn, name):
    def prim(*args):
        return fn(*args)
    prim.__name__ = prim.__qualname__ = name
    return prim


for _op, _fn in _BINARY.items():
    _names = [f"executorch_prim::{_op}.Scalar"]
    if _op in ("add", "sub", "mul", "floordiv", "mod"):
        _names.append(f"executorch_prim::{_op}.int")  # the legacy int overloads
    _prim(*_names)(_named(_fn, _op))

for _op, _fn in _UNARY.items():
    _prim(f"executorch_prim::{_op}.Scalar")(_named(_fn, _op))


@_prim("executorch_prim::sym_ite.Scalar")
def sym_ite(condition, if_true, if_false):
    return if_true if condition else if_false


# --------------------------------------------------------------------------- loops and views

def et_copy_index(copy_to, copy_from, index):
    """Write `copy_from` as row `index` of `copy_to`, which grows to `index + 1` rows.

    `copy_to` arrives at its full capacity (the loop's upper bound); rows before
    `index` were written by earlier iterations and stay where they are, since
    row-major rows do not move when the leading dimension changes.
    """
    copy_from = np.asarray(copy_from)
    row_shape = tuple(copy_to.shape[1:])
    if copy_from.shape != row_shape:
        raise ExecutionError(f"et_copy_index: a row of shape {list(copy_from.shape)} does not match the "
                             f"rows {list(row_shape)} of the tensor being built")
    if not 0 <= index < copy_to.shape[0]:
        raise ExecutionError(f"et_copy_index: index {index} is outside the {copy_to.shape[0]} rows planned "
                             "for the loop's output")
    rows = copy_to[:index + 1]
    rows[index] = copy_from
    return rows


et_copy_index.etc_result_arg = 0  # set before registering: the registry's wrapper copies attributes
_prim("executorch_prim::et_copy_index.tensor")(et_copy_index)


@_prim("executorch_prim::et_view.default")
def et_view(tensor, size):
    """`tensor` seen with shape `size` (one -1 is inferred), sharing its data."""
    shape = [int(s) for s in size]
    if shape.count(-1) > 1:
        raise ExecutionError(f"et_view: shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        shape[shape.index(-1)] = tensor.size // known if known else 0
    if int(np.prod(shape, dtype=np.int64)) != tensor.size:
        raise ExecutionError(f"et_view: a tensor of shape {list(tensor.shape)} cannot be viewed as {shape}")
    return tensor.reshape(shape)


# --------------------------------------------------------------------------- buffer write-back

def copy_(tensor, src, non_blocking=False):
    """Write `src` (broadcast, cast) into `tensor` in place; the program's mutable-buffer write-back."""
    src = np.asarray(src)
    try:
        np.copyto(tensor, np.broadcast_to(src, tensor.shape), casting="unsafe")
    except ValueError:
        raise ExecutionError(f"copy_: a source of shape {list(src.shape)} does not broadcast to the "
                             f"destination's {list(tensor.shape)}") from None
    return tensor


_prim("aten::copy_.default")(copy_)
