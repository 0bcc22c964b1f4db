"""Non-Core operators with out variants that programs exported without full decomposition
(or hand-written edge programs) may still call: aliases (clip, multiply, true_divide, fix,
square), more elementwise math (logaddexp, xlogy, lerp, addcmul/addcdiv, heaviside, sinc,
shrinks, celu, i0, ...), small linear algebra (outer, addr, trace, kron, cross), index
helpers (take, take_along_dim, index_copy, bucketize/searchsorted, tril/triu_indices),
new_* creation, vector norms, channel_shuffle, 1-d/3-d upsampling.

Semantics follow ATen (checked against torch in test_kernels_misc.py); promotion goes
through `common.result_type` like the Core kernels.
"""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (BOOL, INT64, apply_alpha, category, dtype_arg, float_type, normalize_dim,
                                        normalize_dims, result_type, sizes, to_dtype, write_out)
from etc.runtime.kernels.elementwise import clamp_out, div_out, mul_out, pow_out
from etc.runtime.kernels.registry import get_kernel, kernel

# --------------------------------------------------------------------------- aliases


@kernel("aten::clip.out", "aten::clip.Tensor_out")
def clip_out(self, min=None, max=None, out=None):
    return clamp_out(self, min, max, out)


@kernel("aten::multiply.out")
def multiply_out(self, other, out=None):
    return mul_out(self, other, out)


@kernel("aten::true_divide.out")
def true_divide_out(self, other, out=None):
    return div_out(self, other, out)


@kernel("aten::fix.out")
def fix_out(self, out=None):
    return get_kernel("aten::trunc.out")(self, out)


@kernel("aten::square.out")
def square_out(self, out=None):
    if self.dtype == BOOL:  # torch.square(bool) is bool ** 2 in int64
        return pow_out(self.astype(INT64), 2, out)
    return pow_out(self, 2, out)


# --------------------------------------------------------------------------- elementwise math


def _float_operands(*xs):
    ft = float_type(result_type(*xs))
    return ft, [to_dtype(x, ft) for x in xs]


@kernel("aten::logaddexp.out")
def logaddexp_out(self, other, out=None):
    _, (a, b) = _float_operands(self, other)
    return write_out(out, np.logaddexp(a, b))


@kernel("aten::logaddexp2.out")
def logaddexp2_out(self, other, out=None):
    _, (a, b) = _float_operands(self, other)
    return write_out(out, np.logaddexp2(a, b))


def _xlog(x, y, log):
    _, (a, b) = _float_operands(x, y)
    res = a * log(b)
    # 0 * log(anything but NaN) is 0 (also for y = 0 or inf)
    return np.where((a == 0) & ~np.isnan(b), np.zeros((), res.dtype), res)


@kernel("aten::xlogy.OutTensor", "aten::xlogy.OutScalar_Self", "aten::xlogy.OutScalar_Other")
def xlogy_out(self, other, out=None):
    return write_out(out, _xlog(self, other, np.log))


@kernel("aten::special_xlog1py.out", "aten::special_xlog1py.self_scalar_out",
        "aten::special_xlog1py.other_scalar_out")
def xlog1py_out(self, other, out=None):
    return write_out(out, _xlog(self, other, np.log1p))


@kernel("aten::heaviside.out")
def heaviside_out(self, values, out=None):
    dtype = result_type(self, values)
    x, v = to_dtype(self, dtype), to_dtype(values, dtype)
    res = np.where(x == 0, v, (x > 0).astype(dtype))
    if category(dtype) >= 2:
        res = np.where(np.isnan(x), x, res)
    return write_out(out, res)


@kernel("aten::nextafter.out")
def nextafter_out(self, other, out=None):
    dtype = result_type(self, other)
    return write_out(out, np.nextafter(to_dtype(self, dtype), to_dtype(other, dtype)))


@kernel("aten::sinc.out")
def sinc_out(self, out=None):
    _, (x,) = _float_operands(self)
    return write_out(out, np.sinc(x))


@kernel("aten::deg2rad.out")
def deg2rad_out(self, out=None):
    _, (x,) = _float_operands(self)
    return write_out(out, x * x.dtype.type(np.pi / 180))


@kernel("aten::rad2deg.out")
def rad2deg_out(self, out=None):
    _, (x,) = _float_operands(self)
    return write_out(out, x * x.dtype.type(180 / np.pi))


@kernel("aten::i0.out")
def i0_out(self, out=None):
    ft, (x,) = _float_operands(self)
    return write_out(out, np.i0(x.astype(np.float64)).astype(ft))


@kernel("aten::lerp.Scalar_out", "aten::lerp.Tensor_out")
def lerp_out(self, end, weight, out=None):
    ft, (a, b, w) = _float_operands(self, end, weight)
    diff = b - a
    # ATen's two-sided form: exact at both ends
    return write_out(out, np.where(np.abs(w) < 0.5, a + w * diff, b - diff * (1 - w)))


@kernel("aten::addcmul.out")
def addcmul_out(self, tensor1, tensor2, value=1, out=None):
    dtype = result_type(self, tensor1, tensor2)
    a, b, c = to_dtype(self, dtype), to_dtype(tensor1, dtype), to_dtype(tensor2, dtype)
    if dtype == BOOL:
        return write_out(out, a | (b & c & bool(value)))
    return write_out(out, a + apply_alpha(b * c, value, dtype))


@kernel("aten::addcdiv.out")
def addcdiv_out(self, tensor1, tensor2, value=1, out=None):
    dtype = result_type(self, tensor1, tensor2)
    if category(to_dtype(tensor1, result_type(tensor1, tensor2)).dtype) < 2:
        raise ExecutionError("addcdiv: integer division of tensors is not supported, use a float tensor")
    a, b, c = to_dtype(self, dtype), to_dtype(tensor1, dtype), to_dtype(tensor2, dtype)
    return write_out(out, a + apply_alpha(b / c, value, dtype))


@kernel("aten::threshold.out")
def threshold_out(self, threshold, value, out=None):
    return write_out(out, np.where(self <= threshold, to_dtype(value, self.dtype), self))


@kernel("aten::hardshrink.out")
def hardshrink_out(self, lambd=0.5, out=None):
    return write_out(out, np.where((self >= -lambd) & (self <= lambd), np.zeros((), self.dtype), self))


@kernel("aten::softshrink.out")
def softshrink_out(self, lambd=0.5, out=None):
    lam = self.dtype.type(lambd)
    res = np.where(self > lam, self - lam, np.where(self < -lam, self + lam, np.zeros((), self.dtype)))
    return write_out(out, np.where(np.isnan(self), self, res))


@kernel("aten::celu.out")
def celu_out(self, alpha=1.0, out=None):
    x = self
    a = x.dtype.type(alpha)
    return write_out(out, np.where(x > 0, x, a * np.expm1(np.minimum(x, 0) / a)))


# --------------------------------------------------------------------------- small linear algebra


@kernel("aten::outer.out")
def outer_out(self, vec2, out=None):
    dtype = result_type(self, vec2)
    a, b = to_dtype(self, dtype), to_dtype(vec2, dtype)
    return write_out(out, np.logical_and.outer(a, b) if dtype == BOOL else np.multiply.outer(a, b))


@kernel("aten::addr.out")
def addr_out(self, vec1, vec2, beta=1, alpha=1, out=None):
    dtype = result_type(self, vec1, vec2)
    a, b = to_dtype(vec1, dtype), to_dtype(vec2, dtype)
    if dtype == BOOL:
        prod = np.logical_and.outer(a, b) & bool(alpha)
        return write_out(out, prod if not beta else prod | to_dtype(self, dtype))
    prod = apply_alpha(np.multiply.outer(a, b), alpha, dtype)
    if beta == 0:  # beta = 0 ignores self (NaN included)
        return write_out(out, np.broadcast_to(prod, prod.shape))
    return write_out(out, apply_alpha(to_dtype(self, dtype), beta, dtype) + prod)


@kernel("aten::trace.out")
def trace_out(self, out=None):
    if self.ndim != 2:
        raise ExecutionError(f"trace: expected a matrix, got a tensor of rank {self.ndim}")
    dtype = INT64 if category(self.dtype) < 2 else self.dtype
    return write_out(out, np.trace(self, dtype=dtype))


@kernel("aten::kron.out")
def kron_out(self, other, out=None):
    dtype = result_type(self, other)
    return write_out(out, np.kron(to_dtype(self, dtype), to_dtype(other, dtype)))


def _cross(a, b, dim):
    dtype = result_type(a, b)
    a, b = np.broadcast_arrays(to_dtype(a, dtype), to_dtype(b, dtype))
    if dim is None:
        dims = [i for i, s in enumerate(a.shape) if s == 3]
        if not dims:
            raise ExecutionError(f"cross: no dimension of size 3 in {list(a.shape)}")
        dim = dims[0]
    axis = normalize_dim(dim, a.ndim)
    if a.shape[axis] != 3:
        raise ExecutionError(f"cross: dimension {axis} has size {a.shape[axis]}, expected 3")
    return np.cross(a, b, axisa=axis, axisb=axis, axisc=axis)


@kernel("aten::linalg_cross.out")
def linalg_cross_out(self, other, dim=-1, out=None):
    return write_out(out, _cross(self, other, dim))


@kernel("aten::cross.out")
def cross_out(self, other, dim=None, out=None):
    return write_out(out, _cross(self, other, dim))


# --------------------------------------------------------------------------- indices


def _wrap_index(index, n, op):
    index = np.asarray(index, INT64)
    if index.size and (index.min() < -n or index.max() >= n):
        raise ExecutionError(f"{op}: index out of range for {n} elements")
    return np.where(index < 0, index + n, index)


@kernel("aten::take.out")
def take_out(self, index, out=None):
    flat = self.reshape(-1)
    return write_out(out, flat[_wrap_index(index, flat.size, "take")])


@kernel("aten::take_along_dim.out")
def take_along_dim_out(self, indices, dim=None, out=None):
    if dim is None:
        return take_out(self, indices, out)
    axis = normalize_dim(dim, self.ndim)
    shape = list(np.broadcast_shapes(tuple(s if i != axis else 1 for i, s in enumerate(self.shape)),
                                     tuple(s if i != axis else 1 for i, s in enumerate(indices.shape))))
    src = np.broadcast_to(self, tuple(shape[:axis] + [self.shape[axis]] + shape[axis + 1:]))
    idx = np.broadcast_to(indices, tuple(shape[:axis] + [indices.shape[axis]] + shape[axis + 1:]))
    return write_out(out, np.take_along_axis(src, _wrap_index(idx, self.shape[axis], "take_along_dim"), axis=axis))


@kernel("aten::index_copy.out")
def index_copy_out(self, dim, index, source, out=None):
    res = self.copy()
    if self.ndim == 0:
        res = res.reshape(1)
        source = np.reshape(source, 1)
        axis = 0
    else:
        axis = normalize_dim(dim, self.ndim)
    key = [slice(None)] * res.ndim
    key[axis] = _wrap_index(index.reshape(-1), res.shape[axis], "index_copy")
    res[tuple(key)] = to_dtype(source, res.dtype)
    return write_out(out, res.reshape(self.shape))


@kernel("aten::count_nonzero.out", "aten::count_nonzero.dim_IntList_out")
def count_nonzero_out(self, dim=None, out=None):
    axes = normalize_dims(dim, self.ndim)
    return write_out(out, np.count_nonzero(self, axis=axes).astype(INT64) if self.ndim else
                     np.asarray(int(self != 0), INT64))


def _search(boundaries, values, right, out_int32, side=None):
    side = side or ("right" if right else "left")
    dtype = np.int32 if out_int32 else INT64
    if boundaries.ndim <= 1:
        return np.searchsorted(boundaries, values, side=side).astype(dtype)
    # one sorted row per leading index
    b = boundaries.reshape(-1, boundaries.shape[-1])
    v = np.asarray(values).reshape(b.shape[0], -1)
    res = np.stack([np.searchsorted(b[i], v[i], side=side) for i in range(b.shape[0])])
    return res.reshape(np.shape(values)).astype(dtype)


@kernel("aten::bucketize.Tensor_out", "aten::bucketize.Scalar_out")
def bucketize_out(self, boundaries, out_int32=False, right=False, out=None):
    return write_out(out, _search(boundaries, self, right, out_int32))


@kernel("aten::searchsorted.Tensor_out", "aten::searchsorted.Scalar_out")
def searchsorted_out(sorted_sequence, self, out_int32=False, right=False, side=None, sorter=None, out=None):
    seq = sorted_sequence
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter, axis=-1)
    return write_out(out, _search(seq, self, right, out_int32, side))


@kernel("aten::tril_indices.out")
def tril_indices_out(row, col, offset=0, out=None):
    return write_out(out, np.stack(np.tril_indices(int(row), int(offset), int(col))).astype(INT64).reshape(2, -1))


@kernel("aten::triu_indices.out")
def triu_indices_out(row, col, offset=0, out=None):
    return write_out(out, np.stack(np.triu_indices(int(row), int(offset), int(col))).astype(INT64).reshape(2, -1))


@kernel("aten::diag_embed.out")
def diag_embed_out(self, offset=0, dim1=-2, dim2=-1, out=None):
    n = self.shape[-1] + abs(int(offset))
    nd = self.ndim + 1
    d1, d2 = normalize_dim(dim1, nd), normalize_dim(dim2, nd)
    if d1 == d2:
        raise ExecutionError("diag_embed: dim1 and dim2 can't be the same")
    res = np.zeros(self.shape[:-1] + (n, n), self.dtype)
    i = np.arange(self.shape[-1])
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    res[..., rows, cols] = self
    # the two new dims sit last; move them to (dim1, dim2)
    rest = list(range(nd - 2))
    order = [None] * nd
    order[d1], order[d2] = nd - 2, nd - 1
    it = iter(rest)
    order = [o if o is not None else next(it) for o in order]
    return write_out(out, np.transpose(res, order))


@kernel("aten::rot90.out")
def rot90_out(self, k=1, dims=(0, 1), out=None):
    dims = [normalize_dim(d, self.ndim) for d in dims]
    if len(dims) != 2 or dims[0] == dims[1]:
        raise ExecutionError(f"rot90: dims must be two different dims, got {list(dims)}")
    return write_out(out, np.rot90(self, int(k), axes=tuple(dims)))


# --------------------------------------------------------------------------- creation / norms / layout


@kernel("aten::new_zeros.out")
def new_zeros_out(self, size, out=None):
    return write_out(out, np.zeros(sizes(size), out.dtype))


@kernel("aten::new_ones.out")
def new_ones_out(self, size, out=None):
    return write_out(out, np.ones(sizes(size), out.dtype))


@kernel("aten::new_full.out")
def new_full_out(self, size, fill_value, out=None):
    return write_out(out, np.full(sizes(size), to_dtype(fill_value, out.dtype)))


@kernel("aten::new_empty.out")
def new_empty_out(self, size, out=None):
    from etc.runtime.kernels.common import resize_out
    return resize_out(out, sizes(size))


def _vector_norm(x, ord, axes, keepdim):
    a = np.abs(x)
    if ord == np.inf:
        return np.max(a, axis=axes, keepdims=keepdim) if a.size else np.zeros(
            np.sum(a, axis=axes, keepdims=keepdim).shape, a.dtype)
    if ord == -np.inf:
        return np.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return np.sum(a != 0, axis=axes, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return np.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return np.sqrt(np.sum(a * a, axis=axes, keepdims=keepdim))
    return np.power(np.sum(np.power(a, ord), axis=axes, keepdims=keepdim), 1.0 / ord).astype(a.dtype)


@kernel("aten::linalg_vector_norm.out")
def linalg_vector_norm_out(self, ord=2, dim=None, keepdim=False, dtype=None, out=None):
    target = dtype_arg(dtype) or float_type(self.dtype)
    if category(self.dtype) < 2 and dtype is None:
        raise ExecutionError(f"linalg_vector_norm: expected a floating point input, got {self.dtype}")
    x = self.astype(target, copy=False)
    axes = normalize_dims(dim, self.ndim)
    return write_out(out, _vector_norm(x, float(ord), axes, bool(keepdim)))


def _norm(self, p, dim, keepdim, dtype, out):
    p = 2 if p is None else p
    x = self.astype(dtype_arg(dtype) or float_type(self.dtype), copy=False)
    return write_out(out, _vector_norm(x, float(p), normalize_dims(dim, self.ndim), bool(keepdim)))


@kernel("aten::norm.Scalar_out")
def norm_scalar_out(self, p=2, out=None):
    return _norm(self, p, None, False, None, out)


@kernel("aten::norm.out")
def norm_dim_out(self, p, dim, keepdim=False, out=None):
    return _norm(self, p, dim, keepdim, None, out)


@kernel("aten::norm.ScalarOpt_dtype_out")
def norm_scalaropt_dtype_out(self, p, dtype, out=None):
    return _norm(self, p, None, False, dtype, out)


@kernel("aten::norm.dtype_out")
def norm_dtype_out(self, p, dim, keepdim, dtype, out=None):
    return _norm(self, p, dim, keepdim, dtype, out)


@kernel("aten::channel_shuffle.out")
def channel_shuffle_out(self, groups, out=None):
    n, c = self.shape[:2]
    g = int(groups)
    if g <= 0 or c % g:
        raise ExecutionError(f"channel_shuffle: {c} channels don't split into {g} groups")
    res = self.reshape((n, g, c // g) + self.shape[2:]).swapaxes(1, 2)
    return write_out(out, res.reshape(self.shape))


# --------------------------------------------------------------------------- 1-d / 3-d upsampling


def _nearest_axis(x, axis, o, scale):
    from etc.runtime.kernels.nn import upsample_scale
    n = x.shape[axis]
    s = upsample_scale(n, o, scale, False)
    src = np.minimum(np.floor(np.arange(o, dtype=np.float32) * np.float32(s)).astype(np.int64), n - 1)
    return np.take(x, src, axis=axis)


def _linear_axis(x, axis, o, scale, align_corners):
    from etc.runtime.kernels.nn import linear_interpolation_matrix
    m = linear_interpolation_matrix(x.shape[axis], o, scale, align_corners, x.dtype)
    return np.moveaxis(np.tensordot(x, m, axes=([axis], [1])), -1, axis)


def _upsample(x, output_size, scales, mode, align_corners=False):
    nd = len(output_size)
    if x.ndim != nd + 2:
        raise ExecutionError(f"upsample: expected a {nd + 2}-d input, got {list(x.shape)}")
    scales = list(scales) + [None] * (nd - len(scales))
    res = x if mode == "nearest" else x.astype(float_type(x.dtype), copy=False)
    for i, (o, sc) in enumerate(zip(output_size, scales)):
        axis = 2 + i
        res = _nearest_axis(res, axis, int(o), sc) if mode == "nearest" else \
            _linear_axis(res, axis, int(o), sc, align_corners)
    return res


@kernel("aten::upsample_nearest1d.out")
def upsample_nearest1d_out(self, output_size, scales=None, out=None):
    return write_out(out, _upsample(self, output_size, [scales], "nearest"))


@kernel("aten::upsample_nearest3d.out")
def upsample_nearest3d_out(self, output_size, scales_d=None, scales_h=None, scales_w=None, out=None):
    return write_out(out, _upsample(self, output_size, [scales_d, scales_h, scales_w], "nearest"))


@kernel("aten::upsample_linear1d.out")
def upsample_linear1d_out(self, output_size, align_corners, scales=None, out=None):
    return write_out(out, _upsample(self, output_size, [scales], "linear", align_corners))


@kernel("aten::upsample_trilinear3d.out")
def upsample_trilinear3d_out(self, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None,
                             out=None):
    return write_out(out, _upsample(self, output_size, [scales_d, scales_h, scales_w], "linear", align_corners))
