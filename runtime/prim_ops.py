"""ExecuTorch's primitive operators: sizes and scalar arithmetic computed at run time.

Programs with dynamic shapes compute sizes on the device (`aten::sym_size.int`
of an input, then `executorch_prim::mul.Scalar` and friends); the results are
Int values that IntList arguments refer to. They use the same calling
convention as kernels, except that they return their result instead of
writing an out tensor. The names and overloads are ExecuTorch's, so programs
written by either compiler run here.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from etc.runtime.kernels.registry import has_kernel, register_kernel


def _sym_size(tensor, dim):
    return int(tensor.shape[dim])


def _sym_numel(tensor):
    return int(tensor.size)


def _floordiv(a, b):
    return a // b if isinstance(a, int) and isinstance(b, int) else math.floor(a / b)


def _truediv(a, b):
    return a / b


def _et_copy_index(copy_to, copy_from, index):
    """Write `copy_from` into row `index` of `copy_to` (a list being built in a loop)."""
    copy_to[index] = copy_from
    return copy_to


def _et_view(self, size, out=None):
    """A view with a new shape over the same storage (ExecuTorch's memory-planned view)."""
    shape = list(size)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = self.size // max(known, 1)
    return self.reshape(shape)


_SCALAR_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": _floordiv,
    "truediv": _truediv, "mod": operator.mod, "sym_max": max, "sym_min": min,
    "eq": operator.eq, "gt": operator.gt, "lt": operator.lt, "ge": operator.ge, "le": operator.le,
}

PRIM_OPS = {
    "aten::sym_size.int": _sym_size,
    "executorch_prim::neg.Scalar": operator.neg,
    "executorch_prim::sym_float.Scalar": float,
    "executorch_prim::ceil.Scalar": lambda a: int(math.ceil(a)),
    "executorch_prim::round.Scalar": lambda a: int(round(a)),
    "executorch_prim::trunc.Scalar": lambda a: int(math.trunc(a)),
    "executorch_prim::floordiv.int": _floordiv,
    "executorch_prim::mod.int": operator.mod,
    "executorch_prim::et_copy_index.tensor": _et_copy_index,
    "executorch_prim::et_view.default": _et_view,
    **{f"executorch_prim::{name}.Scalar": fn for name, fn in _SCALAR_BINARY.items()},
}


def register() -> None:
    for name, fn in PRIM_OPS.items():
        if not has_kernel(name):
            register_kernel(name, fn)


register()
