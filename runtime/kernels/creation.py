"""Tensor creation kernels: full, zeros, ones, empty, arange, scalar_tensor, fill, random.

Their out-variant schemas carry no dtype: the out tensor's dtype is the result's.
"""

from __future__ import annotations

import math

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import INT64, category, sizes, to_dtype, write_out
from etc.runtime.kernels.registry import kernel


def _fill_value(value, dtype):
    if category(dtype) < 2 and isinstance(value, float) and not math.isfinite(value):
        raise ExecutionError(f"value {value} cannot be converted to {np.dtype(dtype)} without overflow")
    return to_dtype(value, dtype)


@kernel("aten::full.out")
def full_out(size, fill_value, out=None):
    return write_out(out, np.full(sizes(size), _fill_value(fill_value, out.dtype), out.dtype))


@kernel("aten::full_like.out")
def full_like_out(self, fill_value, memory_format=None, out=None):
    return write_out(out, np.full(self.shape, _fill_value(fill_value, out.dtype), out.dtype))


@kernel("aten::zeros.out")
def zeros_out(size, out=None):
    return write_out(out, np.zeros(sizes(size), out.dtype))


@kernel("aten::ones.out")
def ones_out(size, out=None):
    return write_out(out, np.ones(sizes(size), out.dtype))


@kernel("aten::zeros_like.out")
def zeros_like_out(self, memory_format=None, out=None):
    return write_out(out, np.zeros(self.shape, out.dtype))


@kernel("aten::ones_like.out")
def ones_like_out(self, memory_format=None, out=None):
    return write_out(out, np.ones(self.shape, out.dtype))


@kernel("aten::empty.out")
def empty_out(size, memory_format=None, out=None):
    # contents are unspecified; the planned storage is re-viewed with the requested shape
    from etc.runtime.kernels.common import resize_out
    return resize_out(out, sizes(size))


@kernel("aten::empty_like.out")
def empty_like_out(self, memory_format=None, out=None):
    from etc.runtime.kernels.common import resize_out
    return resize_out(out, self.shape)


@kernel("aten::empty_strided.out")
def empty_strided_out(size, stride, out=None):
    from etc.runtime.kernels.common import resize_out
    return resize_out(out, sizes(size))


def arange_length(start, end, step) -> int:
    if step == 0:
        raise ExecutionError("arange: step must be nonzero")
    if not all(math.isfinite(float(v)) for v in (start, end)):
        raise ExecutionError(f"arange: unsupported range {start} -> {end}")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise ExecutionError(f"arange: upper bound and larger bound inconsistent with step sign "
                             f"({start}, {end}, {step})")
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, end, step)):
        return max(-(-(end - start) // step), 0)
    return max(int(math.ceil((float(end) - float(start)) / float(step))), 0)


def _trunc(v) -> int:
    return int(v)  # Python's int() truncates toward zero, as ATen's Scalar.to<int64_t>() does


def arange(start, end, step, dtype):
    """ATen's arange: integral outputs step from the truncated start by the truncated step;
    int64 also counts its length in truncated integers, the others in double."""
    dtype = np.dtype(dtype)
    if category(dtype) < 2:
        if not all(math.isfinite(float(v)) for v in (start, end, step)):
            raise ExecutionError(f"arange: unsupported range {start} -> {end} step {step}")
        istart, istep = _trunc(start), _trunc(step)
        if dtype == INT64:
            if istep == 0:
                raise ExecutionError("arange: step must be nonzero")
            iend = _trunc(end)
            arange_length(istart, iend, istep)  # checks the direction
            num = iend - istart + istep - (1 if istep > 0 else -1)
            n = max(abs(num) // abs(istep) * (1 if (num >= 0) == (istep > 0) else -1), 0)
        else:
            n = arange_length(start, end, step)
        return (np.arange(n, dtype=np.int64) * istep + istart).astype(dtype)
    n = arange_length(start, end, step)
    # computed in double, as ATen accumulates, then cast
    return (float(start) + np.arange(n, dtype=np.float64) * float(step)).astype(dtype)


@kernel("aten::arange.out")
def arange_out(end, out=None):
    return write_out(out, arange(0, end, 1, out.dtype))


@kernel("aten::arange.start_out")
def arange_start_out(start, end, step=1, out=None):
    return write_out(out, arange(start, end, step, out.dtype))


@kernel("aten::linspace.out")
def linspace_out(start, end, steps, out=None):
    return write_out(out, np.linspace(float(start), float(end), int(steps)))


@kernel("aten::scalar_tensor.out")
def scalar_tensor_out(s, out=None):
    return write_out(out, np.asarray(_fill_value(s, out.dtype)).reshape(()))


@kernel("aten::fill.Scalar_out")
def fill_scalar_out(self, value, out=None):
    return write_out(out, np.full(self.shape, _fill_value(value, out.dtype), out.dtype))


@kernel("aten::fill.Tensor_out")
def fill_tensor_out(self, value, out=None):
    if value.ndim != 0:
        raise ExecutionError(f"fill: the value must be a 0-dimensional tensor, got shape {list(value.shape)}")
    return write_out(out, np.broadcast_to(value.astype(out.dtype), self.shape))


_RNG = np.random.default_rng()


@kernel("aten::rand.out")
def rand_out(size, out=None):
    return write_out(out, _RNG.random(sizes(size)))


@kernel("aten::randn.out")
def randn_out(size, out=None):
    return write_out(out, _RNG.standard_normal(sizes(size)))


@kernel("aten::randperm.out")
def randperm_out(n, out=None):
    return write_out(out, _RNG.permutation(int(n)))


@kernel("aten::bernoulli.out")
def bernoulli_out(self, generator=None, out=None):
    return write_out(out, _RNG.random(self.shape) < self)


@kernel("aten::uniform.out")
def uniform_out(self, from_=0.0, to=1.0, generator=None, out=None):
    return write_out(out, _RNG.uniform(from_, to, self.shape))


@kernel("aten::normal.out")
def normal_out(self, mean=0.0, std=1.0, generator=None, out=None):
    return write_out(out, _RNG.normal(mean, std, self.shape))
