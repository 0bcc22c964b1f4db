"""Indexing kernels: index, index_put, index_select, gather, scatter*, select/slice_scatter,
masked_scatter/select, nonzero."""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import BOOL, INT64, apply_alpha, category, normalize_dim, to_dtype, write_out
from etc.runtime.kernels.registry import kernel
from etc.runtime.kernels.shape import slice_indices


def _check_index_dtype(index, op):
    if category(index.dtype) != 1:
        raise ExecutionError(f"{op}: index must be an integer tensor, got {index.dtype}")


def _bounds(index, size, op):
    if index.size and (index.min() < -size or index.max() >= size):
        raise ExecutionError(f"{op}: index out of range for a dimension of size {size}")


def _index_tuple(self, indices, op):
    key = []
    dim = 0
    for idx in indices:
        if idx is None:
            key.append(slice(None))
            dim += 1
            continue
        if idx.dtype == BOOL or idx.dtype == np.uint8:
            idx = idx.astype(BOOL, copy=False)
            if tuple(idx.shape) != tuple(self.shape[dim:dim + idx.ndim]):
                raise ExecutionError(f"{op}: mask of shape {list(idx.shape)} doesn't match the indexed dims "
                                     f"{list(self.shape[dim:dim + idx.ndim])}")
            key.append(idx)
            dim += idx.ndim
            continue
        _check_index_dtype(idx, op)
        if dim >= self.ndim:
            raise ExecutionError(f"{op}: too many indices for a tensor of rank {self.ndim}")
        _bounds(idx, self.shape[dim], op)
        key.append(idx)
        dim += 1
    if dim > self.ndim:
        raise ExecutionError(f"{op}: too many indices for a tensor of rank {self.ndim}")
    return tuple(key)


@kernel("aten::index.Tensor_out")
def index_tensor_out(self, indices, out=None):
    return write_out(out, self[_index_tuple(self, list(indices), "index")])


@kernel("aten::_index_put_impl.out")
def index_put_impl_out(self, indices, values, accumulate=False, unsafe=False, out=None):
    return index_put_out(self, indices, values, accumulate, out)


@kernel("aten::index_put.out")
def index_put_out(self, indices, values, accumulate=False, out=None):
    key = _index_tuple(self, list(indices), "index_put")
    vals = to_dtype(values, self.dtype)
    # out = self, then the new rows into out. When out already is self's storage (a buffer updated
    # in place, see passes/in_place_state.py) write_out copies nothing. `values` never shares out's
    # storage: the planner gives a result memory no live operand uses.
    res = write_out(out, self)
    if accumulate:
        np.add.at(res, key, np.broadcast_to(vals, res[key].shape))
    else:
        res[key] = vals
    return res


@kernel("aten::index_select.out")
def index_select_out(self, dim, index, out=None):
    _check_index_dtype(index, "index_select")
    if index.ndim > 1:
        raise ExecutionError("index_select: index must be 0-D or 1-D")
    if self.ndim == 0:
        _bounds(index, 1, "index_select")
        if index.size != 1:
            raise ExecutionError(f"index_select: a 0-d tensor takes one index, got {index.size}")
        return write_out(out, self.reshape(1)[index.reshape(-1)].reshape(()))
    axis = normalize_dim(dim, self.ndim)
    _bounds(index, self.shape[axis], "index_select")
    return write_out(out, np.take(self, index.reshape(-1), axis=axis))


def _full_index(index, dim):
    """Coordinate tuple addressing self for every element of index (index's values along dim)."""
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


def _check_scatter_shapes(self, index, dim, src, op):
    if index.ndim != max(self.ndim, 1) and index.size:
        raise ExecutionError(f"{op}: index must have the same rank as the tensor ({self.ndim}), got {index.ndim}")
    for d in range(index.ndim):
        if d != dim and index.shape[d] > (self.shape[d] if self.ndim else 1):
            raise ExecutionError(f"{op}: index {list(index.shape)} is larger than self {list(self.shape)} at dim {d}")
        if src is not None and index.shape[d] > src.shape[d]:
            raise ExecutionError(f"{op}: index {list(index.shape)} is larger than src {list(src.shape)} at dim {d}")


@kernel("aten::gather.out")
def gather_out(self, dim, index, sparse_grad=False, out=None):
    _check_index_dtype(index, "gather")
    if self.ndim == 0:
        _bounds(index, 1, "gather")
        return write_out(out, np.broadcast_to(self, index.shape))
    axis = normalize_dim(dim, self.ndim)
    if index.size == 0:
        return write_out(out, np.zeros(index.shape, self.dtype))
    _check_scatter_shapes(self, index, axis, None, "gather")
    _bounds(index, self.shape[axis], "gather")
    return write_out(out, self[_full_index(index, axis)])


def _src_part(src, index):
    return src[tuple(slice(0, n) for n in index.shape)]


_REDUCE_UFUNC = {"sum": np.add, "add": np.add, "prod": np.multiply, "multiply": np.multiply,
                 "amax": np.maximum, "amin": np.minimum}


def _scatter(self, dim, index, src, reduce, op, include_self=True):
    _check_index_dtype(index, op)
    if self.ndim == 0:
        res = self.reshape(1).copy()
        axis = 0
        index = index.reshape(-1)
        src = src.reshape(-1) if isinstance(src, np.ndarray) else src
    else:
        res = self.copy()
        axis = normalize_dim(dim, self.ndim)
    if index.size == 0:
        return res.reshape(self.shape)
    _check_scatter_shapes(res, index, axis, src if isinstance(src, np.ndarray) else None, op)
    _bounds(index, res.shape[axis], op)
    key = _full_index(index, axis)
    vals = _src_part(src, index) if isinstance(src, np.ndarray) else np.full(index.shape, src)
    vals = to_dtype(vals, res.dtype)
    if reduce is None:
        res[key] = vals
    elif reduce == "mean":
        acc = res.astype(np.float64) if include_self else np.zeros(res.shape, np.float64)
        cnt = np.ones(res.shape, np.int64) if include_self else np.zeros(res.shape, np.int64)
        touched = np.zeros(res.shape, BOOL)
        touched[key] = True
        if not include_self:
            acc = np.where(touched, 0, res.astype(np.float64))
        np.add.at(acc, key, vals.astype(np.float64))
        np.add.at(cnt, key, 1)
        mean = acc / np.maximum(cnt, 1)
        if category(res.dtype) < 2:
            mean = np.floor(mean)
        res = np.where(touched, mean, res).astype(res.dtype)
    else:
        ufunc = _REDUCE_UFUNC.get(reduce)
        if ufunc is None:
            raise ExecutionError(f"{op}: unknown reduction {reduce!r}")
        if not include_self:
            touched = np.zeros(res.shape, BOOL)
            touched[key] = True
            identity = {np.add: 0, np.multiply: 1}.get(ufunc)
            if identity is None:
                ident = np.asarray(ufunc is np.minimum, res.dtype)  # bool: True is the min's identity
                if category(res.dtype) >= 2:
                    ident = np.asarray(-np.inf if ufunc is np.maximum else np.inf, res.dtype)
                elif res.dtype != BOOL:
                    info = np.iinfo(res.dtype)
                    ident = np.asarray(info.min if ufunc is np.maximum else info.max, res.dtype)
                identity = ident
            res = np.where(touched, np.asarray(identity, res.dtype), res)
        ufunc.at(res, key, vals)
    return res.reshape(self.shape)


@kernel("aten::scatter.src_out")
def scatter_src_out(self, dim, index, src, out=None):
    return write_out(out, _scatter(self, dim, index, src, None, "scatter"))


@kernel("aten::scatter.value_out")
def scatter_value_out(self, dim, index, value, out=None):
    return write_out(out, _scatter(self, dim, index, value, None, "scatter"))


@kernel("aten::scatter.reduce_out")
def scatter_reduce_legacy_out(self, dim, index, src, reduce, out=None):
    return write_out(out, _scatter(self, dim, index, src, reduce, "scatter"))


@kernel("aten::scatter.value_reduce_out")
def scatter_value_reduce_out(self, dim, index, value, reduce, out=None):
    return write_out(out, _scatter(self, dim, index, value, reduce, "scatter"))


@kernel("aten::scatter_add.out")
def scatter_add_out(self, dim, index, src, out=None):
    return write_out(out, _scatter(self, dim, index, src, "sum", "scatter_add"))


@kernel("aten::scatter_reduce.two_out")
def scatter_reduce_two_out(self, dim, index, src, reduce, include_self=True, out=None):
    return write_out(out, _scatter(self, dim, index, src, reduce, "scatter_reduce", include_self))


@kernel("aten::select_scatter.out")
def select_scatter_out(self, src, dim, index, out=None):
    axis = normalize_dim(dim, self.ndim)
    n = self.shape[axis]
    index = int(index)
    if not -n <= index < n:
        raise ExecutionError(f"select_scatter: index {index} out of range for dimension {axis} of size {n}")
    res = self.copy()
    key = [slice(None)] * self.ndim
    key[axis] = index % n
    res[tuple(key)] = src
    return write_out(out, res)


@kernel("aten::slice_scatter.out")
def slice_scatter_out(self, src, dim=0, start=None, end=None, step=1, out=None):
    axis = normalize_dim(dim, self.ndim)
    res = self.copy()
    key = [slice(None)] * self.ndim
    key[axis] = slice_indices(self.shape[axis], start, end, step)
    if res[tuple(key)].shape != src.shape:
        raise ExecutionError(f"slice_scatter: src of shape {list(src.shape)} doesn't fit the slice "
                             f"{list(res[tuple(key)].shape)}")
    res[tuple(key)] = src
    return write_out(out, res)


@kernel("aten::diagonal_scatter.out")
def diagonal_scatter_out(self, src, offset=0, dim1=0, dim2=1, out=None):
    res = self.copy()
    d1, d2 = normalize_dim(dim1, self.ndim), normalize_dim(dim2, self.ndim)
    view = np.diagonal(res, offset=int(offset), axis1=d1, axis2=d2)
    view.setflags(write=True)
    view[...] = src
    return write_out(out, res)


@kernel("aten::masked_scatter.out")
def masked_scatter_out(self, mask, source, out=None):
    shape = np.broadcast_shapes(self.shape, mask.shape)
    res = np.broadcast_to(self, shape).copy()
    m = np.broadcast_to(mask.astype(BOOL, copy=False), shape)
    count = int(m.sum())
    if count > source.size:
        raise ExecutionError(f"masked_scatter: the mask selects {count} elements but source has {source.size}")
    res[m] = source.reshape(-1)[:count]
    return write_out(out, res)


@kernel("aten::masked_select.out")
def masked_select_out(self, mask, out=None):
    shape = np.broadcast_shapes(self.shape, mask.shape)
    return write_out(out, np.broadcast_to(self, shape)[np.broadcast_to(mask.astype(BOOL, copy=False), shape)])


@kernel("aten::nonzero.out")
def nonzero_out(self, out=None):
    if self.ndim == 0:
        return write_out(out, np.zeros((1 if self.item() else 0, 0), INT64))
    return write_out(out, np.stack(np.nonzero(self), axis=1).astype(INT64))


@kernel("aten::index_add.out")
def index_add_out(self, dim, index, source, alpha=1, out=None):
    axis = normalize_dim(dim, self.ndim)
    if self.ndim == 0:  # a 0-d tensor indexes as a 1-element vector
        res = index_add_out(self.reshape(1), 0, index.reshape(-1), np.reshape(source, -1), alpha, out.reshape(1))
        return write_out(out, res.reshape(()))
    _bounds(index, self.shape[axis], "index_add")
    res = self.copy()
    key = [slice(None)] * self.ndim
    key[axis] = index
    np.add.at(res, tuple(key), apply_alpha(to_dtype(source, res.dtype), alpha, res.dtype))  # alpha wraps as res.dtype
    return write_out(out, res)


@kernel("aten::index_fill.int_Scalar_out")
def index_fill_out(self, dim, index, value, out=None):
    axis = normalize_dim(dim, self.ndim)
    if self.ndim == 0:
        res = index_fill_out(self.reshape(1), 0, index.reshape(-1), value, out.reshape(1))
        return write_out(out, res.reshape(()))
    _bounds(index, self.shape[axis], "index_fill")
    res = self.copy()
    key = [slice(None)] * self.ndim
    key[axis] = index
    res[tuple(key)] = to_dtype(value, res.dtype)
    return write_out(out, res)
