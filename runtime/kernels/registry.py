"""The kernel registry: operator name -> numpy function.

Names are exactly as a `.pte` Operator table spells them: `name + "." + overload`
("aten::add.out", "aten::slice_copy.Tensor_out", "aten::max.dim_max"). A kernel is
called with the operator's arguments in schema order, the `out=` tensors last
(numpy arrays viewing planned memory); it returns the output array(s) (a tuple
for several outputs), usually built with `common.write_out`.
"""

from __future__ import annotations

import difflib
import functools
from typing import Callable

import numpy as np

from etc.errors import EtcError, ExecutionError, KernelNotFoundError

_KERNELS: dict[str, Callable] = {}


def kernel(*names: str):
    """Register the decorated function under every operator name in `names`."""
    if not names:
        raise TypeError("kernel() needs at least one operator name")
    for name in names:
        if "::" not in name or "." not in name.split("::", 1)[1]:
            raise ValueError(f"kernel name {name!r} is not 'namespace::op.overload'")

    def register(fn: Callable) -> Callable:
        for name in names:
            if name in _KERNELS:
                raise ValueError(f"kernel {name} is registered twice ({_KERNELS[name].__wrapped__.__qualname__}, "
                                 f"{fn.__qualname__})")
            _KERNELS[name] = _guarded(name, fn)
        return fn

    return register


def _guarded(name: str, fn: Callable) -> Callable:
    """`fn` with numpy's warnings silenced (ATen wraps on overflow, gives inf/nan on 0-division)
    and numpy's own exceptions (bad shapes, indices out of range) raised as ExecutionError."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            with np.errstate(all="ignore"):
                for a in args:  # (a plain loop: this runs on every kernel call)
                    if (type(a) is np.ndarray and a.dtype.metadata is not None) or type(a) is list:
                        if _has_bfloat16(a):
                            return _call_in_float32(fn, args, kwargs)
                return fn(*args, **kwargs)
        except EtcError as error:
            if isinstance(error, ExecutionError) and error.operator is None:
                error.operator = name
                error.message = f"{error.message} [operator {name}]"
                error.args = (error.message,)
            raise
        except (ValueError, IndexError, TypeError, ArithmeticError, KeyError) as error:
            raise ExecutionError(f"{type(error).__name__}: {error}", operator=name) from error
    return call


def _has_bfloat16(arg) -> bool:
    from etc.runtime.kernels.common import is_bfloat16
    if type(arg) is np.ndarray:
        return arg.dtype.metadata is not None and is_bfloat16(arg)
    if isinstance(arg, list):
        return any(_has_bfloat16(a) for a in arg)
    return False


def _call_in_float32(fn, args, kwargs):
    """Run `fn` with every bfloat16 tensor as float32; round the results back into their bfloat16 outs."""
    from etc.runtime.kernels.common import bfloat16_to_float32, float32_to_bfloat16, is_bfloat16, resize_out

    originals = []  # (float32 stand-in, bfloat16 original)

    def convert(a):
        if is_bfloat16(a):
            f = bfloat16_to_float32(a).reshape(a.shape)
            originals.append((f, a))
            return f
        if isinstance(a, list):
            return [convert(x) for x in a]
        return a

    result = fn(*[convert(a) for a in args], **kwargs)

    def derives_from(r, f) -> bool:
        """`r` is `f` or a view of it (an empty view shares no memory, so follow its bases)."""
        if r.size:
            return np.shares_memory(r, f)
        while r is not None:
            if r is f:
                return True
            r = r.base
        return False

    def back(r):
        if isinstance(r, (list, tuple)):
            return type(r)(back(x) for x in r)
        if isinstance(r, np.ndarray):
            for f, orig in originals:
                if derives_from(r, f):
                    target = resize_out(orig, r.shape)
                    np.copyto(target, float32_to_bfloat16(r).reshape(r.shape))
                    return target
        return r
    return back(result)


def register_kernel(name: str, fn: Callable, *, replace: bool = False) -> Callable:
    """Register `fn` under `name` (`etc.runtime.register_kernel`): a user's custom operator's kernel
    (`"mylib::twice.out"`, the out variant a program calls), or kernels built from tables. `fn` takes
    the schema's arguments in order, the `out=` tensors last (numpy arrays viewing planned memory),
    and returns the out array(s).

    Registering the same kernel again is accepted (a notebook re-running the cell that defines and
    registers it: the same function object, or the same definition, module, name and code); another
    kernel under a name that has one is an error unless `replace=True` swaps it in. Methods bind
    their kernels at load: a replaced kernel runs in programs loaded after it."""
    if not callable(fn):
        raise TypeError(f"register_kernel({name!r}, ...): the kernel must be callable, got {type(fn).__name__}")
    old = _KERNELS.get(name)
    if old is not None:
        previous = getattr(old, "__wrapped__", old)
        if not replace and not _same_definition(previous, fn):
            raise EtcError(f"register_kernel({name!r}, ...): '{name}' already has a kernel "
                           f"({_describe(previous)}), not {_describe(fn)}",
                           notes=["register_kernel(name, fn, replace=True) swaps it for the new one"])
        del _KERNELS[name]
    return kernel(name)(fn)


def unregister_kernel(name: str) -> Callable:
    """Remove the kernel registered as `name` and return it (the function given, unwrapped);
    KernelNotFoundError if there is none. Methods loaded before keep the kernel they bound."""
    fn = get_kernel(name)
    del _KERNELS[name]
    return getattr(fn, "__wrapped__", fn)


def _same_definition(a: Callable, b: Callable) -> bool:
    """`a` and `b` are one kernel: the same object, or functions of the same module, qualified name and
    code (a cell run again defines a new function object with the same code)."""
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    return (code_a is not None and code_b is not None and a.__module__ == b.__module__
            and a.__qualname__ == b.__qualname__ and code_a.co_code == code_b.co_code
            and code_a.co_consts == code_b.co_consts)


def _describe(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def get_kernel(name: str) -> Callable:
    """The kernel registered as `name`; KernelNotFoundError (with close names) if none is."""
    try:
        return _KERNELS[name]
    except KeyError:
        pass
    close = difflib.get_close_matches(name, list(_KERNELS), n=4, cutoff=0.6)
    base = name.split(".", 1)[0]
    close += [k for k in sorted(_KERNELS) if k.split(".", 1)[0] == base and k not in close][:4]
    notes = [f"did you mean: {', '.join(close)}"] if close else []
    raise KernelNotFoundError(f"no kernel registered for operator '{name}'", operator=name, notes=notes)


def has_kernel(name: str) -> bool:
    return name in _KERNELS


def registered_kernels() -> frozenset[str]:
    """Every registered operator name."""
    return frozenset(_KERNELS)
