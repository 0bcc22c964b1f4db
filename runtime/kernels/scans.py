"""Running and order-statistic kernels outside the Core opset that programs exported without
full decomposition still call: cummax/cummin, logcumsumexp, median/nanmedian, nansum,
nan_to_num, aminmax.

NaN follows ATen: cummax/cummin and median propagate it (its index is reported), the
nan* variants skip it. Ties in median's index come out as a stable sort orders them.
"""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (INT64, category, dtype_arg, float_type, normalize_dim, normalize_dims,
                                        write_out)
from etc.runtime.kernels.registry import kernel


def _cumulative_extreme(self, dim, ufunc, values, indices, op):
    if self.ndim == 0:
        return write_out(values, self), write_out(indices, np.zeros((), INT64))
    axis = normalize_dim(dim, self.ndim)
    if self.shape[axis] == 0:
        return write_out(values, self), write_out(indices, np.zeros(self.shape, INT64))
    run = ufunc.accumulate(self, axis=axis)  # np.maximum/np.minimum carry NaN forward as ATen does
    # ATen moves the index on every element equal to the running extreme (ties: the latest),
    # and on every NaN once the run is NaN; the last such position is the index
    hit = self == run
    if category(self.dtype) >= 2:
        hit |= np.isnan(self) & np.isnan(run)
    pos = np.arange(self.shape[axis], dtype=INT64).reshape((-1,) + (1,) * (self.ndim - axis - 1))
    idx = np.maximum.accumulate(np.where(hit, pos, -1), axis=axis)
    return write_out(values, run), write_out(indices, idx)


@kernel("aten::cummax.out")
def cummax_out(self, dim, values=None, indices=None):
    return _cumulative_extreme(self, dim, np.maximum, values, indices, "cummax")


@kernel("aten::cummin.out")
def cummin_out(self, dim, values=None, indices=None):
    return _cumulative_extreme(self, dim, np.minimum, values, indices, "cummin")


@kernel("aten::logcumsumexp.out")
def logcumsumexp_out(self, dim, out=None):
    x = self.astype(float_type(self.dtype), copy=False)
    if x.ndim == 0 or x.size == 0:
        return write_out(out, x)
    axis = normalize_dim(dim, x.ndim)
    # logaddexp accumulates stably (no overflow for large inputs, -inf stays -inf)
    return write_out(out, np.logaddexp.accumulate(x, axis=axis))


def _median_along(x, axis, ignore_nan):
    """(values, indices) of the lower median along `axis` (ATen: the ((n-1)//2)-th of the sorted
    values; a NaN makes the median NaN, reporting the NaN's index, unless `ignore_nan`)."""
    n = x.shape[axis]
    order = np.argsort(x, axis=axis, kind="stable")  # NaNs sort last
    if category(x.dtype) >= 2:
        nans = np.isnan(x).sum(axis=axis, keepdims=True)
    else:
        nans = np.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], INT64)
    if ignore_nan:
        valid = n - nans
        k = np.maximum((valid - 1) // 2, 0)  # all-NaN slices read the first NaN (the result is NaN)
    else:
        k = np.where(nans > 0, n - nans, (n - 1) // 2)  # the first NaN, or the lower median
    idx = np.take_along_axis(order, k.astype(INT64), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


def _median_dim(self, dim, keepdim, values, indices, ignore_nan, op):
    if self.ndim == 0:
        return write_out(values, self), write_out(indices, np.zeros((), INT64))
    axis = normalize_dim(dim, self.ndim)
    if self.shape[axis] == 0:
        raise ExecutionError(f"{op}: cannot take the median of an empty dimension {axis}")
    v, i = _median_along(self, axis, ignore_nan)
    if not keepdim:
        v, i = np.squeeze(v, axis), np.squeeze(i, axis)
    return write_out(values, v), write_out(indices, i)


def _median_all(self, out, ignore_nan, op):
    if self.size == 0:
        if category(self.dtype) < 2:
            raise ExecutionError(f"{op}: median of an empty integral tensor")
        return write_out(out, np.asarray(np.nan, self.dtype))
    v, _ = _median_along(self.reshape(-1), 0, ignore_nan)
    return write_out(out, v.reshape(()))


@kernel("aten::median.dim_values")
def median_dim_values(self, dim, keepdim=False, values=None, indices=None):
    return _median_dim(self, dim, keepdim, values, indices, False, "median")


@kernel("aten::nanmedian.dim_values")
def nanmedian_dim_values(self, dim, keepdim=False, values=None, indices=None):
    return _median_dim(self, dim, keepdim, values, indices, True, "nanmedian")


@kernel("aten::median.out")
def median_out(self, out=None):
    return _median_all(self, out, False, "median")


@kernel("aten::nanmedian.out")
def nanmedian_out(self, out=None):
    return _median_all(self, out, True, "nanmedian")


@kernel("aten::nansum.out")
def nansum_out(self, dim=None, keepdim=False, dtype=None, out=None):
    target = dtype_arg(dtype) or (INT64 if category(self.dtype) < 2 else self.dtype)
    x = self.astype(target, copy=False)
    if category(target) >= 2:
        x = np.where(np.isnan(x), np.zeros((), target), x)
    axes = normalize_dims(dim, self.ndim)
    return write_out(out, np.sum(x, axis=axes, keepdims=bool(keepdim), dtype=target))


@kernel("aten::nan_to_num.out")
def nan_to_num_out(self, nan=None, posinf=None, neginf=None, out=None):
    if category(self.dtype) < 2:
        return write_out(out, self)
    info = np.finfo(self.dtype)
    res = np.where(np.isnan(self), np.asarray(0.0 if nan is None else nan, self.dtype), self)
    res = np.where(res == np.inf, np.asarray(info.max if posinf is None else posinf, self.dtype), res)
    res = np.where(res == -np.inf, np.asarray(info.min if neginf is None else neginf, self.dtype), res)
    return write_out(out, res)


@kernel("aten::aminmax.out")
def aminmax_out(self, dim=None, keepdim=False, min=None, max=None):
    if dim is None and self.size == 0 or dim is not None and self.ndim and self.shape[normalize_dim(dim, self.ndim)] == 0:
        raise ExecutionError("aminmax: cannot reduce an empty dimension (no identity)")
    if dim is None:
        lo, hi = np.min(self), np.max(self)  # NaN propagates, as in ATen
        if keepdim:
            lo, hi = np.reshape(lo, (1,) * self.ndim), np.reshape(hi, (1,) * self.ndim)
        return write_out(min, lo), write_out(max, hi)
    axis = normalize_dim(dim, self.ndim)
    if self.ndim == 0:
        return write_out(min, self), write_out(max, self)
    return (write_out(min, np.min(self, axis=axis, keepdims=bool(keepdim))),
            write_out(max, np.max(self, axis=axis, keepdims=bool(keepdim))))
