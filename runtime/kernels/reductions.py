"""Reductions (sum, mean, prod, amax/amin, max/min.dim, argmax/argmin, any/all, var/std),
scans (cumsum, cumprod) and ordering (sort, topk)."""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (BOOL, INT64, category, dtype_arg, float_type, normalize_dim,
                                        normalize_dims, to_dtype, write_out)
from etc.runtime.kernels.registry import kernel


def _acc(dtype) -> np.dtype:
    """Accumulation dtype: half in float32, integers in int64 (ATen's sum/prod of ints give int64)."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float32)
    return dtype


def _sum_dtype(self, dtype):
    if dtype is not None:
        return dtype_arg(dtype)
    return INT64 if category(self.dtype) < 2 else self.dtype


def _axes(self, dim):
    return normalize_dims(dim, self.ndim)


def _nonempty_check(self, axes, op):
    for a in axes:
        if self.shape[a] == 0:
            raise ExecutionError(f"{op}: cannot reduce over dimension {a} of size 0 (no identity)")
    if not axes and self.size == 0 and self.ndim == 0:
        raise ExecutionError(f"{op}: empty input")


@kernel("aten::sum.IntList_out")
def sum_out(self, dim=None, keepdim=False, dtype=None, out=None):
    rt = _sum_dtype(self, dtype)
    x = to_dtype(self, rt)
    res = np.sum(x, axis=_axes(self, dim), keepdims=bool(keepdim), dtype=_acc(rt))
    return write_out(out, np.asarray(res).astype(rt, copy=False))


@kernel("aten::sum.out")
def sum_all_out(self, dtype=None, out=None):
    return sum_out(self, None, False, dtype, out)


def reduce_mean(self, dim, keepdim, dtype):
    rt = dtype_arg(dtype) if dtype is not None else self.dtype
    if category(rt) < 2:
        raise ExecutionError(f"mean: could not infer output dtype; input is {self.dtype}, pass a floating dtype")
    x = to_dtype(self, rt)
    axes = _axes(self, dim)
    res = np.mean(x, axis=axes, keepdims=bool(keepdim), dtype=_acc(rt))
    return np.asarray(res).astype(rt, copy=False)


@kernel("aten::mean.out")
def mean_out(self, dim=None, keepdim=False, dtype=None, out=None):
    return write_out(out, reduce_mean(self, dim, keepdim, dtype))


@kernel("aten::mean.dtype_out")
def mean_dtype_out(self, dtype=None, out=None):
    return write_out(out, reduce_mean(self, None, False, dtype))


@kernel("aten::prod.out")
def prod_out(self, dtype=None, out=None):
    rt = _sum_dtype(self, dtype)
    return write_out(out, np.prod(to_dtype(self, rt), dtype=_acc(rt)).astype(rt))


@kernel("aten::prod.int_out")
def prod_int_out(self, dim, keepdim=False, dtype=None, out=None):
    rt = _sum_dtype(self, dtype)
    axis = normalize_dim(dim, self.ndim)
    x = to_dtype(self, rt)
    if self.ndim == 0:
        return write_out(out, x)
    return write_out(out, np.prod(x, axis=axis, keepdims=bool(keepdim), dtype=_acc(rt)).astype(rt))


def _minmax_reduce(fn, name):
    def reduce(self, dim=(), keepdim=False, out=None):
        axes = _axes(self, dim)
        _nonempty_check(self, axes, name)
        if self.ndim == 0:
            return write_out(out, self)
        return write_out(out, fn(self, axis=axes, keepdims=bool(keepdim)))
    reduce.__name__ = name
    return reduce


kernel("aten::amax.out")(_minmax_reduce(np.max, "amax"))
kernel("aten::amin.out")(_minmax_reduce(np.min, "amin"))


@kernel("aten::max.unary_out")
def max_unary_out(self, out=None):
    _nonempty_check(self, tuple(range(self.ndim)), "max")
    if self.size == 0:
        raise ExecutionError("max: empty input")
    return write_out(out, np.max(self))


@kernel("aten::min.unary_out")
def min_unary_out(self, out=None):
    if self.size == 0:
        raise ExecutionError("min: empty input")
    return write_out(out, np.min(self))


@kernel("aten::max.out")
def max_other_out(self, other, out=None):
    from etc.runtime.kernels.elementwise import maximum_out
    return maximum_out(self, other, out)


@kernel("aten::min.out")
def min_other_out(self, other, out=None):
    from etc.runtime.kernels.elementwise import minimum_out
    return minimum_out(self, other, out)


def _arg_reduce(self, dim, keepdim, fn, name):
    """(values, indices) of the first max/min along dim; NaN wins (as ATen's max.dim)."""
    if self.ndim == 0:
        return self.copy(), np.zeros((), INT64)
    axis = normalize_dim(dim, self.ndim)
    if self.shape[axis] == 0:
        raise ExecutionError(f"{name}: cannot reduce over dimension {axis} of size 0")
    x = self.astype(np.int8) if self.dtype == BOOL else self
    idx = fn(x, axis=axis, keepdims=True)
    values = np.take_along_axis(self, idx, axis=axis)
    if not keepdim:
        idx, values = np.squeeze(idx, axis), np.squeeze(values, axis)
    return values, idx.astype(INT64)


@kernel("aten::max.dim_max")
def max_dim_out(self, dim, keepdim=False, max=None, max_values=None):
    values, idx = _arg_reduce(self, dim, keepdim, np.argmax, "max.dim")
    return write_out(max, values), write_out(max_values, idx)


@kernel("aten::min.dim_min")
def min_dim_out(self, dim, keepdim=False, min=None, min_indices=None):
    values, idx = _arg_reduce(self, dim, keepdim, np.argmin, "min.dim")
    return write_out(min, values), write_out(min_indices, idx)


def _arg_out(fn, name):
    def arg(self, dim=None, keepdim=False, out=None):
        if dim is None:
            if self.size == 0:
                raise ExecutionError(f"{name}: empty input")
            flat = self.reshape(-1)
            x = flat.astype(np.int8) if flat.dtype == BOOL else flat
            res = np.asarray(fn(x), INT64)
            if keepdim:
                res = res.reshape((1,) * self.ndim)
            return write_out(out, res)
        return write_out(out, _arg_reduce(self, dim, keepdim, fn, name)[1])
    arg.__name__ = name
    return arg


kernel("aten::argmax.out")(_arg_out(np.argmax, "argmax"))
kernel("aten::argmin.out")(_arg_out(np.argmin, "argmin"))


def _bool_reduce(fn, name):
    def all_out(self, out=None):
        return write_out(out, fn(self))

    def dim_out(self, dim=None, keepdim=False, out=None):
        # any.dims: None reduces every dim, [] none of them
        axes = normalize_dims(dim, self.ndim, empty_means_all=False)
        if self.ndim == 0:
            return write_out(out, self.astype(BOOL))
        return write_out(out, fn(self, axis=axes, keepdims=bool(keepdim)))
    all_out.__name__ = name + "_all"
    dim_out.__name__ = name + "_dim"
    return all_out, dim_out


for _name, _fn in (("any", np.any), ("all", np.all)):
    _all, _dim = _bool_reduce(_fn, _name)
    kernel(f"aten::{_name}.all_out")(_all)
    kernel(f"aten::{_name}.out", f"aten::{_name}.dims_out")(_dim)


def reduce_var(self, dim, correction, keepdim):
    if category(self.dtype) < 2:
        raise ExecutionError(f"var/std: only floating tensors are supported, got {self.dtype}")
    axes = _axes(self, dim)
    acc = _acc(self.dtype)
    x = self.astype(acc, copy=False)
    n = int(np.prod([self.shape[a] for a in axes], dtype=np.int64)) if axes else (1 if self.ndim == 0 else self.size)
    mean = np.mean(x, axis=axes, keepdims=True) if n else np.zeros((1,) * self.ndim, acc)
    sq = np.sum(np.square(x - mean), axis=axes, keepdims=bool(keepdim))
    denom = max(n - correction, 0)
    with np.errstate(all="ignore"):
        res = np.asarray(sq / acc.type(denom) if denom else sq * np.nan)
    if not n:
        res = np.full(res.shape, np.nan, acc)
    return res.astype(self.dtype, copy=False)


@kernel("aten::var.correction_out")
def var_correction_out(self, dim=None, correction=None, keepdim=False, out=None):
    return write_out(out, reduce_var(self, dim, 1 if correction is None else correction, keepdim))


@kernel("aten::var.out")
def var_out(self, dim=None, unbiased=True, keepdim=False, out=None):
    return write_out(out, reduce_var(self, dim, 1 if unbiased else 0, keepdim))


@kernel("aten::std.correction_out")
def std_correction_out(self, dim=None, correction=None, keepdim=False, out=None):
    return write_out(out, np.sqrt(reduce_var(self, dim, 1 if correction is None else correction, keepdim)))


@kernel("aten::std.out")
def std_out(self, dim=None, unbiased=True, keepdim=False, out=None):
    return write_out(out, np.sqrt(reduce_var(self, dim, 1 if unbiased else 0, keepdim)))


@kernel("aten::logsumexp.out")
def logsumexp_out(self, dim, keepdim=False, out=None):
    x = to_dtype(self, float_type(self.dtype))
    axes = _axes(self, dim)
    if self.ndim == 0:
        return write_out(out, x)
    m = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros((1,) * x.ndim, x.dtype)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    res = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    if not keepdim:
        res = np.squeeze(res, axis=axes)
    return write_out(out, res)


# --------------------------------------------------------------------------- scans


def _scan(fn, name):
    def scan(self, dim, dtype=None, out=None):
        rt = dtype_arg(dtype) if dtype is not None else (INT64 if category(self.dtype) < 2 else self.dtype)
        if self.ndim == 0:
            return write_out(out, to_dtype(self, rt))
        axis = normalize_dim(dim, self.ndim)
        return write_out(out, fn(to_dtype(self, rt), axis=axis, dtype=_acc(rt)).astype(rt, copy=False))
    scan.__name__ = name
    return scan


kernel("aten::cumsum.out")(_scan(np.cumsum, "cumsum"))
kernel("aten::cumprod.out")(_scan(np.cumprod, "cumprod"))


# --------------------------------------------------------------------------- sort / topk


def argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort with ATen's NaN order (NaN is the largest value)."""
    if x.dtype == BOOL:
        x = x.astype(np.int8)
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    if category(x.dtype) >= 2:
        # NaN first, then values descending; ties keep their order
        key = np.where(np.isnan(x), -np.inf, -x.astype(np.float64))
        nan_rank = ~np.isnan(x)
        moved_key, moved_nan = np.moveaxis(key, axis, -1), np.moveaxis(nan_rank, axis, -1)
        order = np.lexsort((moved_key, moved_nan), axis=-1) if moved_key.size else np.zeros(moved_key.shape, np.intp)
        return np.moveaxis(order, -1, axis)
    return np.argsort(np.invert(x), axis=axis, kind="stable")


def sort_values_indices(self, dim, descending):
    if self.ndim == 0:
        return self.copy(), np.zeros((), INT64)
    axis = normalize_dim(dim, self.ndim)
    idx = argsort(self, axis, bool(descending))
    return np.take_along_axis(self, idx, axis=axis), idx.astype(INT64)


@kernel("aten::sort.values")
def sort_values(self, dim=-1, descending=False, values=None, indices=None):
    v, i = sort_values_indices(self, dim, descending)
    return write_out(values, v), write_out(indices, i)


@kernel("aten::sort.values_stable")
def sort_values_stable(self, stable=None, dim=-1, descending=False, values=None, indices=None):
    return sort_values(self, dim, descending, values, indices)


@kernel("aten::topk.values")
def topk_values(self, k, dim=-1, largest=True, sorted=True, values=None, indices=None):
    k = int(k)
    if self.ndim == 0:
        if k > 1:
            raise ExecutionError(f"topk: k ({k}) is out of range for a 0-d tensor")
        return write_out(values, self), write_out(indices, np.zeros((), INT64))
    axis = normalize_dim(dim, self.ndim)
    if not 0 <= k <= self.shape[axis]:
        raise ExecutionError(f"topk: k ({k}) is out of range for dimension {axis} of size {self.shape[axis]}")
    idx = argsort(self, axis, bool(largest))
    idx = np.take(idx, np.arange(k), axis=axis)
    return write_out(values, np.take_along_axis(self, idx, axis=axis)), write_out(indices, idx.astype(INT64))


@kernel("aten::kthvalue.values")
def kthvalue_values(self, k, dim=-1, keepdim=False, values=None, indices=None):
    axis = normalize_dim(dim, self.ndim)
    if self.ndim == 0:  # a 0-d tensor is its own 1st value
        if int(k) != 1:
            raise ExecutionError(f"kthvalue: k ({k}) out of range for a 0-d tensor")
        return write_out(values, self), write_out(indices, np.zeros((), INT64))
    if not 1 <= int(k) <= self.shape[axis]:
        raise ExecutionError(f"kthvalue: k ({k}) out of range for a dimension of size {self.shape[axis]}")
    idx = argsort(self, axis, False)
    idx = np.take(idx, [int(k) - 1], axis=axis)
    v = np.take_along_axis(self, idx, axis=axis)
    if not keepdim:
        v, idx = np.squeeze(v, axis), np.squeeze(idx, axis)
    return write_out(values, v), write_out(indices, idx.astype(INT64))


@kernel("aten::_local_scalar_dense.default")
def local_scalar_dense(self):
    if self.size != 1:
        raise ExecutionError(f"_local_scalar_dense: expected one element, got {self.size}")
    return self.reshape(()).item()


@kernel("aten::sym_size.int")
def sym_size(self, dim):
    return int(self.shape[normalize_dim(dim, self.ndim)])


@kernel("aten::sym_numel.default")
def sym_numel(self):
    return int(self.size)


@kernel("aten::sym_is_contiguous.default")
def sym_is_contiguous(self, memory_format=None):
    # runtime tensors are dense in their dim order; a strided numpy view passed in directly
    # (tests, delegates) answers for itself
    return bool(self.flags.c_contiguous or self.size <= 1)


@kernel("aten::sym_stride.int")
def sym_stride(self, dim):
    # a runtime tensor is contiguous: its strides are those of its shape
    d = normalize_dim(dim, self.ndim)
    return int(np.prod(self.shape[d + 1:], dtype=np.int64))


@kernel("aten::sym_storage_offset.default")
def sym_storage_offset(self):
    return 0
