"""Shared machinery of the kernel tests: call a kernel with the out-variant convention
(arguments in schema order, preallocated out arrays last) and compare it to torch.

Not a test module itself (test_kernels_*.py import it).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch

from etc.runtime.kernels import get_kernel
from etc.schema import to_torch_dtype

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int64": np.int64,
             "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "int16": np.int16}


class Gen:
    """Random inputs of one dtype and memory layout: C (contiguous), T (transposed), S (strided)."""

    def __init__(self, seed: int, dtype: str, layout: str):
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(NP_DTYPES[dtype])
        self.layout = layout

    def _layout(self, make, shape):
        shape = tuple(shape)
        if self.layout == "T" and len(shape) >= 2:
            return make(shape[::-1]).T
        if self.layout == "S" and len(shape) >= 1:
            return make(shape[:-1] + (shape[-1] * 2,))[..., ::2]
        return make(shape)

    def t(self, shape, dtype=None, low=None, high=None):
        """A tensor: normal floats (or uniform in [low, high)), ints in [-9, 10), random bools."""
        dtype = np.dtype(NP_DTYPES.get(dtype, dtype)) if dtype is not None else self.dtype

        def make(s):
            if dtype == np.bool_:
                return self.rng.random(s) < 0.5
            if dtype.kind in "iu":
                lo = (0 if dtype.kind == "u" else -9) if low is None else low
                hi = 10 if high is None else high
                return self.rng.integers(lo, hi, size=s).astype(dtype)
            if low is not None:
                return self.rng.uniform(low, high, size=s).astype(dtype)
            return self.rng.standard_normal(s).astype(dtype)
        return self._layout(make, shape)

    def distinct(self, shape):
        """Floats (of the test dtype) without ties: a permutation, scaled."""
        def make(s):
            n = int(np.prod(s))
            return (self.rng.permutation(n).reshape(s) - n / 2).astype(self.dtype)
        return self._layout(make, shape)

    def idx(self, shape, high, low=0):
        return self._layout(lambda s: self.rng.integers(low, high, size=s).astype(np.int64), shape)


def _schema(name: str):
    ns, rest = name.split("::")
    op, overload = rest.split(".") if "." in rest else (rest, "default")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)._schema


def _key(schema):
    drop = {"dtype", "layout", "device", "pin_memory"}
    return [(a.name, str(a.type)) for a in schema.arguments if not a.is_out and a.name not in drop]


def functional_of(name: str):
    """The functional overload of an out variant (same packet, same arguments, no out)."""
    schema = _schema(name)
    packet = getattr(torch.ops.aten, schema.name.split("::")[1])
    for overload in packet.overloads():
        op = getattr(packet, overload)
        if not any(a.is_out for a in op._schema.arguments) and _key(op._schema) == _key(schema):
            return op
    raise LookupError(f"no functional overload for {name}")


def to_torch(value, arg_type: str = ""):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True, order="C"))
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, np.ndarray) for v in value):
        return [to_torch(v) for v in value]
    if "ScalarType" in arg_type and value is not None:
        return to_torch_dtype(value)
    return value


def full_args(name: str, args, kwargs):
    """The non-out arguments in schema order, defaults filled in."""
    schema = _schema(name)
    values = []
    args = list(args)
    for a in schema.arguments:
        if a.is_out:
            continue
        if args:
            values.append(args.pop(0))
        elif a.name in kwargs:
            values.append(kwargs[a.name])
        elif a.has_default_value():
            values.append(a.default_value)
        else:
            raise TypeError(f"{name}: missing argument {a.name}")
    return schema, values


def _as_list(x):
    if isinstance(x, torch.Tensor):
        return [x], False
    return list(x), True


def run(name: str, args, kwargs=None, ref: Callable | None = None, out_extra: int = 0):
    """(ours, expected): our kernel's outputs and torch's, as lists of numpy arrays.

    `ref(*torch_args)` replaces the functional torch op; `out_extra` enlarges each out
    storage (a dynamic-shape upper bound) to check the result re-views it.
    """
    schema, values = full_args(name, args, kwargs or {})
    types = [str(a.type) for a in schema.arguments if not a.is_out]
    t_args = [to_torch(v, t) for v, t in zip(values, types)]
    if ref is not None:
        result = ref(*t_args)
    else:
        fn = functional_of(name)
        names = [a.name for a in schema.arguments if not a.is_out]
        pos, kw = [], {}
        for a in fn._schema.arguments:
            if a.name not in names:
                continue
            v = t_args[names.index(a.name)]
            if a.kwarg_only:
                kw[a.name] = v
            else:
                pos.append(v)
        result = fn(*pos, **kw)
    expected, is_list = _as_list(result)
    expected = [e.numpy() if isinstance(e, torch.Tensor) else (None if e is None else np.asarray(e))
                for e in expected]
    outs = [np.zeros(0, np.float32) if e is None else
            np.zeros(e.size + out_extra, e.dtype) if out_extra else np.zeros(e.shape, e.dtype) for e in expected]
    out_schema = [a for a in schema.arguments if a.is_out]
    out_args = [outs] if len(out_schema) == 1 and ("[]" in str(out_schema[0].type) or "List" in str(out_schema[0].type)) else outs
    result = get_kernel(name)(*values, *out_args)
    ours, _ = _as_list(result) if not isinstance(result, np.ndarray) else ([result], False)
    return ours, expected, outs


def assert_close(ours, expected, rtol=None, atol=None, check_storage=None):
    assert len(ours) == len(expected), (len(ours), len(expected))
    for i, (o, e) in enumerate(zip(ours, expected)):
        if e is None:  # an output torch leaves undefined (output_mask False)
            continue
        o = np.asarray(o)
        assert o.shape == e.shape, f"output {i}: shape {o.shape} != {e.shape}"
        assert o.dtype == e.dtype, f"output {i}: dtype {o.dtype} != {e.dtype}"
        if check_storage is not None and o.size:
            assert np.shares_memory(o, check_storage[i]), f"output {i} is not in the out storage"
        if e.dtype.kind in "fc":
            tol = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-5, 2e-6),
                   np.dtype(np.float64): (1e-10, 1e-12)}[e.dtype]
            r = rtol if rtol is not None else tol[0]
            a = atol if atol is not None else tol[1]
            if e.dtype == np.float16:  # half: a few ulps apart from torch's rounding order is fine
                r, a = max(r, 4e-3), max(a, 4e-3)
            np.testing.assert_allclose(o.astype(np.float64), e.astype(np.float64), rtol=r, atol=a, equal_nan=True,
                                       err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(o, e, err_msg=f"output {i}")


@dataclasses.dataclass
class Case:
    """One kernel test: `build(g) -> args` or `(args, kwargs)`; run for every dtype x layout."""

    op: str
    build: Callable
    dtypes: tuple = ("float32",)
    layouts: tuple = ("C", "T", "S")
    rtol: float | None = None
    atol: float | None = None
    ref: Callable | None = None
    tag: str = ""

    def params(self):
        # every layout with the first dtype; further dtypes contiguous only (keeps the run short)
        for i, d in enumerate(self.dtypes):
            for layout in (self.layouts if i == 0 else self.layouts[:1]):
                yield self, d, layout

    @property
    def id(self):
        return self.op.replace("aten::", "") + (f"[{self.tag}]" if self.tag else "")


def check_case(case: Case, dtype: str, layout: str, seed: int = 0):
    g = Gen(seed, dtype, layout)
    built = case.build(g)
    args, kwargs = built if isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], dict) else (built, {})
    ours, expected, outs = run(case.op, args, kwargs, ref=case.ref)
    assert_close(ours, expected, case.rtol, case.atol, check_storage=outs)


def param_list(cases):
    import pytest
    return [pytest.param(c, d, lay, id=f"{c.id}-{d}-{lay}") for case in cases for c, d, lay in case.params()]
