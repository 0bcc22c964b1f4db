"""Helpers shared by the kernels: writing outputs, ATen type promotion, dims.

Conventions: tensors are numpy arrays (any strides), Scalars are Python
bool/int/float, ScalarType arguments are ints (`etc.schema.ScalarType`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from etc.errors import ExecutionError
from etc.schema import to_numpy_dtype

BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)
FLOAT32 = np.dtype(np.float32)
DEFAULT_FLOAT = FLOAT32  # torch's default dtype: what a Python float becomes


# --------------------------------------------------------------------------- outputs

def write_out(out: np.ndarray, value) -> np.ndarray:
    """Copy `value` (cast to out.dtype) into out's storage; return it viewed with value's shape.

    `out` is a contiguous view of planned memory with the tensor's current (or
    upper-bound) shape. A result with fewer elements re-views the first
    `value.size` elements (dynamic shapes); a larger one is an ExecutionError.
    """
    value = np.asarray(value)
    if value.shape == out.shape:
        target = out
    else:
        if value.size > out.size:
            raise ExecutionError(
                f"result of shape {list(value.shape)} ({value.size} elements) does not fit the output "
                f"tensor of shape {list(out.shape)} ({out.size} elements)")
        target = resize_out(out, value.shape)
    if (value.dtype == target.dtype and value.size and value.flags.c_contiguous and target.flags.c_contiguous
            and value.__array_interface__["data"][0] == target.__array_interface__["data"][0]):
        return target  # the result already is these bytes (a view the planner placed on its input)
    if value.dtype.kind == "f" and target.dtype.kind in "iub":
        with np.errstate(all="ignore"):  # NaN/inf to integer: unspecified values, as in C++
            np.copyto(target, value, casting="unsafe")
    else:
        np.copyto(target, value, casting="unsafe")
    return target


def resize_out(out: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A view of out's storage with `shape` (which must not hold more elements than out)."""
    shape = tuple(int(s) for s in shape)
    if shape == out.shape:
        return out
    n = int(np.prod(shape, dtype=np.int64))
    if n > out.size:
        raise ExecutionError(f"output of shape {list(shape)} does not fit the output tensor of shape {list(out.shape)}")
    if not out.flags.c_contiguous:
        raise ExecutionError(f"cannot resize a non-contiguous output tensor of shape {list(out.shape)} to {list(shape)}")
    return out.reshape(-1)[:n].reshape(shape)


def write_outs(outs: Sequence[np.ndarray], values: Sequence) -> tuple:
    return tuple(write_out(o, v) for o, v in zip(outs, values))


# --------------------------------------------------------------------------- dtypes

def category(dtype) -> int:
    """0 bool, 1 integral, 2 floating, 3 complex (ATen's promotion categories)."""
    kind = np.dtype(dtype).kind
    return {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}.get(kind, 1)


def is_float(dtype) -> bool:
    return category(dtype) >= 2


def is_integral(dtype, include_bool: bool = False) -> bool:
    c = category(dtype)
    return c == 1 or (include_bool and c == 0)


def promote_types(a, b) -> np.dtype:
    """torch.promote_types: the higher category wins outright (int64 + float16 = float16)."""
    if a is None:
        return np.dtype(b)
    if b is None:
        return np.dtype(a)
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def _is_python_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.ndarray)


def scalar_dtype(x) -> np.dtype:
    """The dtype a wrapped Python number takes in promotion."""
    if isinstance(x, (bool, np.bool_)):
        return BOOL
    if isinstance(x, (int, np.integer)):
        return INT64
    if isinstance(x, complex):
        return np.dtype(np.complex64)
    return DEFAULT_FLOAT


def _combine(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) >= 2:
        return higher
    if higher == BOOL or category(lower) >= 2:
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> np.dtype:
    """ATen's result_type over tensors (numpy arrays) and Python scalars.

    Tensors with dims decide; zero-dim tensors and then Python scalars only
    matter when of a higher category (bool < integral < floating).
    """
    if len(operands) == 2:
        a, b = operands
        # fast path: two tensors with dims of one dtype
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.ndim and b.ndim:
            return a.dtype
    dim = zero = wrapped = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if x.ndim == 0:
                zero = promote_types(zero, x.dtype)
            else:
                dim = promote_types(dim, x.dtype)
        elif isinstance(x, np.generic):
            zero = promote_types(zero, x.dtype)
        else:
            wrapped = promote_types(wrapped, scalar_dtype(x))
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise ExecutionError("result_type of no operands")
    return result


def float_type(dtype) -> np.dtype:
    """The dtype of a floating op's result: integral/bool inputs give the default float."""
    dtype = np.dtype(dtype)
    return dtype if category(dtype) >= 2 else DEFAULT_FLOAT


_BFLOAT16_SCALAR_TYPE = 15  # etc.schema.ScalarType.BFLOAT16


def dtype_arg(scalar_type, default=None) -> np.dtype | None:
    """A `ScalarType?` argument as a numpy dtype (None stays `default`).

    bfloat16 is float32 here: a kernel touching bfloat16 runs on float32 stand-ins (the
    registry converts its tensors and rounds its outs back), so `sum(x, dtype=bfloat16)`
    must compute a float, not cast to bfloat16's uint16 bits."""
    if scalar_type is None:
        return None if default is None else np.dtype(default)
    if int(scalar_type) == _BFLOAT16_SCALAR_TYPE:
        return np.dtype(np.float32)
    return np.dtype(to_numpy_dtype(int(scalar_type)))


def to_dtype(x, dtype) -> np.ndarray:
    """`x` (array or scalar) as an array of `dtype` (no copy when it already is)."""
    dtype = np.dtype(dtype)
    if isinstance(x, np.ndarray):
        if x.dtype == dtype:
            return x
        with np.errstate(all="ignore"):
            return x.astype(dtype)
    with np.errstate(all="ignore"):
        if category(dtype) < 2 and isinstance(x, float) and not np.isfinite(x):
            return np.asarray(x).astype(dtype)
        if category(dtype) == 1 and isinstance(x, float):
            return np.asarray(int(x)).astype(dtype)
        return np.asarray(x).astype(dtype)


def check_can_cast(value_dtype, out_dtype, op: str):
    """ATen refuses to write a result into an out of a lower category (float result -> int out)."""
    if category(value_dtype) > category(out_dtype):
        raise ExecutionError(f"{op}: result type {np.dtype(value_dtype)} can't be cast to the output "
                             f"dtype {np.dtype(out_dtype)}")


# --------------------------------------------------------------------------- scalars

def apply_alpha(other, alpha, dtype):
    """`other * alpha` computed in `dtype` (alpha=1 is free)."""
    if alpha is None or (alpha == 1 and not isinstance(alpha, bool)) or alpha is True:
        return other
    if category(dtype) == 0:
        return np.logical_and(other, bool(alpha))
    return np.multiply(other, to_dtype(alpha, dtype), dtype=dtype)


# --------------------------------------------------------------------------- dims

def normalize_dim(dim: int, ndim: int) -> int:
    """Wrap a possibly negative dim into [0, ndim) (a 0-d tensor accepts 0 and -1)."""
    dim = int(dim)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise ExecutionError(f"dimension {dim} out of range for a tensor of rank {ndim}")
    return dim + n if dim < 0 else dim


def normalize_dims(dims: Iterable[int] | int | None, ndim: int, empty_means_all: bool = True) -> tuple[int, ...]:
    """A tuple of distinct wrapped dims; None (or [] with `empty_means_all`) means every dim."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, np.integer)):
        dims = [dims]
    dims = list(dims)
    if not dims and empty_means_all:
        return tuple(range(ndim))
    out = []
    for d in dims:
        d = normalize_dim(d, ndim)
        if d in out:
            raise ExecutionError(f"dimension {d} appears twice in the dim list")
        out.append(d)
    if ndim == 0:
        return ()
    return tuple(out)


def sizes(shape) -> tuple[int, ...]:
    return tuple(int(s) for s in shape)


# --------------------------------------------------------------------------- bfloat16 bits

# bfloat16 tensors as a runtime may hand them to kernels: uint16 bits, tagged in the dtype's
# metadata. The registry computes kernels on such tensors in float32 and rounds the outs back.
BFLOAT16 = np.dtype(np.uint16, metadata={"etc_scalar_type": "bfloat16"})


def is_bfloat16(x) -> bool:
    return type(x) is np.ndarray and x.dtype.metadata is not None and \
        x.dtype.metadata.get("etc_scalar_type") == "bfloat16"


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 data carried as uint16 bits (exact: bfloat16 is float32's top half)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_values(array: np.ndarray, element: str) -> np.ndarray:
    """float32 values of a constant whose MLIR element type is `element`: bfloat16 constants are
    held as their uint16 bits, which astype would read as integers."""
    if element == "bf16":
        return bfloat16_to_float32(np.asarray(array).view(np.uint16))
    return np.asarray(array).astype(np.float32)


def float32_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """uint16 bits of the bfloat16 nearest to each float32 (ties to even; NaN stays a quiet NaN)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = np.isnan(f)
    return np.where(nan, (u >> 16) | np.uint32(0x0040), rounded).astype(np.uint16)
