"""Neural-network kernels other than convolution (`convolution.py`), pooling (`pooling.py`) and
normalization (`normalization.py`): softmax, embedding, dropout, upsampling, grid sampling.
"""

from __future__ import annotations

import math

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import BOOL, INT64, category, float_type, normalize_dim, write_out
from etc.runtime.kernels.linalg import compute_dtype
from etc.runtime.kernels.normalization import stat_dtype
from etc.runtime.kernels.registry import kernel


# --------------------------------------------------------------------------- softmax


def _softmax_input(self, dim, half_to_float):
    acc = stat_dtype(float_type(self.dtype))
    x = self.astype(acc, copy=False)
    if self.ndim == 0:
        return x, None, acc
    return x, normalize_dim(dim, self.ndim), acc


@kernel("aten::_softmax.out")
def softmax_out(self, dim, half_to_float=False, out=None):
    x, axis, acc = _softmax_input(self, dim, half_to_float)
    if axis is None:
        return write_out(out, np.ones((), acc))
    if x.size == 0:
        return write_out(out, x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    if out.shape == x.shape and out.dtype == x.dtype and out.flags.c_contiguous and not np.may_share_memory(out, x):
        # in place in the output: no temporaries, no final copy
        np.subtract(x, m, out=out)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return out
    e = np.exp(x - m)
    return write_out(out, e / e.sum(axis=axis, keepdims=True))


@kernel("aten::_log_softmax.out")
def log_softmax_out(self, dim, half_to_float=False, out=None):
    x, axis, acc = _softmax_input(self, dim, half_to_float)
    if axis is None:
        return write_out(out, np.zeros((), acc))
    if x.size == 0:
        return write_out(out, x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    shifted = x - m
    return write_out(out, shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True)))


# --------------------------------------------------------------------------- embedding / dropout


@kernel("aten::embedding.out")
def embedding_out(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False, out=None):
    if category(indices.dtype) != 1:
        raise ExecutionError(f"embedding: indices must be an integer tensor, got {indices.dtype}")
    n = weight.shape[0]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise ExecutionError(f"embedding: index out of range for a table of {n} rows")
    return write_out(out, np.take(weight, indices, axis=0))


@kernel("aten::_embedding_bag.out")
def embedding_bag_out(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                      per_sample_weights=None, include_last_offset=False, padding_idx=-1,
                      out0=None, out1=None, out2=None, out3=None):
    indices = indices.reshape(-1).astype(INT64)
    offsets = offsets.reshape(-1).astype(INT64)
    n_idx = indices.shape[0]
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    ends = np.append(offsets[1:], n_idx) if not include_last_offset else offsets[1:]
    starts = offsets[:bags]
    ends = ends[:bags]
    offset2bag = np.zeros(n_idx, INT64)
    dim = weight.shape[1]
    outputs = np.zeros((bags, dim), weight.dtype)
    bag_size = np.zeros(bags, INT64)
    max_indices = np.zeros((bags, dim) if mode == 2 else (bags,), INT64)
    for b in range(bags):
        lo, hi = int(starts[b]), int(ends[b])
        offset2bag[lo:hi] = b
        idx = indices[lo:hi]
        keep = idx != padding_idx if padding_idx is not None and padding_idx >= 0 else np.ones(len(idx), bool)
        rows = weight[idx[keep]]
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.reshape(-1)[lo:hi][keep][:, None]
        bag_size[b] = int(keep.sum())
        if rows.shape[0] == 0:
            continue
        if mode == 0:
            outputs[b] = rows.sum(0)
        elif mode == 1:
            outputs[b] = rows.sum(0) / rows.shape[0]
        else:
            a = rows.argmax(0)
            outputs[b] = rows[a, np.arange(dim)]
            max_indices[b] = idx[keep][a]
    if mode == 0:
        # sum mode: ATen leaves the bookkeeping outputs empty / zero
        offset2bag = np.zeros((0,), INT64)
        bag_size = np.zeros(bags, INT64)
        max_indices = np.zeros(bags, INT64)
    elif mode == 1:
        max_indices = bag_size.copy()
    return write_out(out0, outputs), write_out(out1, offset2bag), write_out(out2, bag_size), write_out(out3, max_indices)


@kernel("aten::native_dropout.out")
def native_dropout_out(input, p, train, out0=None, out1=None):
    if not train or p == 0:
        return write_out(out0, input), write_out(out1, np.ones(input.shape, BOOL))
    if p >= 1:
        return write_out(out0, np.zeros_like(input)), write_out(out1, np.zeros(input.shape, BOOL))
    mask = np.random.default_rng().random(input.shape) >= p
    return write_out(out0, input * mask * (1.0 / (1 - p))), write_out(out1, mask)


# --------------------------------------------------------------------------- upsampling / grid sampling


def upsample_scale(in_size, out_size, scale, align_corners):
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _out_sizes(input, output_size, scale_factors, nd, name):
    if output_size is not None and len(output_size):
        sizes = [int(s) for s in output_size]
        scales = [None] * nd
    elif scale_factors is not None:
        scales = [float(s) for s in scale_factors]
        sizes = [int(math.floor(n * s)) for n, s in zip(input.shape[-nd:], scales)]
    else:
        raise ExecutionError(f"{name}: either output_size or scale_factors must be given")
    if len(sizes) != nd:
        raise ExecutionError(f"{name}: expected {nd} output sizes, got {sizes}")
    return sizes, scales


@kernel("aten::upsample_nearest2d.vec_out")
def upsample_nearest2d_vec_out(input, output_size=None, scale_factors=None, out=None):
    sizes, scales = _out_sizes(input, output_size, scale_factors, 2, "upsample_nearest2d")
    res = input
    for i, (o, sc) in enumerate(zip(sizes, scales)):
        axis = input.ndim - 2 + i
        n = input.shape[axis]
        scale = upsample_scale(n, o, sc, False)
        src = np.minimum(np.floor(np.arange(o, dtype=np.float32) * np.float32(scale)).astype(np.int64), n - 1)
        res = np.take(res, src, axis=axis)
    return write_out(out, res)


@kernel("aten::upsample_nearest2d.out")
def upsample_nearest2d_out(self, output_size, scales_h=None, scales_w=None, out=None):
    scales = None if scales_h is None or scales_w is None else [scales_h, scales_w]
    sizes, _ = _out_sizes(self, output_size, None, 2, "upsample_nearest2d")
    res = self
    for i, o in enumerate(sizes):
        axis = self.ndim - 2 + i
        n = self.shape[axis]
        scale = upsample_scale(n, o, scales[i] if scales else None, False)
        src = np.minimum(np.floor(np.arange(o, dtype=np.float32) * np.float32(scale)).astype(np.int64), n - 1)
        res = np.take(res, src, axis=axis)
    return write_out(out, res)


def linear_interpolation_matrix(n_in, n_out, scale_factor, align_corners, dtype):
    """(n_out, n_in) interpolation matrix of linear upsampling along one dim."""
    scale = upsample_scale(n_in, n_out, scale_factor, align_corners)
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = dst * scale
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    m = np.zeros((n_out, n_in), np.float64)
    np.add.at(m, (np.arange(n_out), i0), 1 - lam)
    np.add.at(m, (np.arange(n_out), i1), lam)
    return m.astype(dtype)


def _bilinear(input, sizes, scales, align_corners):
    integral = category(input.dtype) < 2
    acc = np.dtype(np.float64) if integral else compute_dtype(float_type(input.dtype))
    res = input.astype(acc, copy=False)
    passes = list(enumerate(zip(sizes, scales)))
    if integral:
        # uint8 images: ATen's separable kernel interpolates the width, rounds to the
        # nearest integer, then the height, rounding again
        passes.reverse()
        info = np.iinfo(input.dtype)
    for i, (o, sc) in passes:
        axis = input.ndim - 2 + i
        m = linear_interpolation_matrix(input.shape[axis], o, sc, align_corners, acc)
        res = np.moveaxis(np.tensordot(res, m, axes=([axis], [1])), -1, axis)
        if integral:
            res = np.clip(np.floor(res + 0.5), info.min, info.max)
    return res


@kernel("aten::upsample_bilinear2d.vec_out")
def upsample_bilinear2d_vec_out(input, output_size=None, align_corners=False, scale_factors=None, out=None):
    sizes, scales = _out_sizes(input, output_size, scale_factors, 2, "upsample_bilinear2d")
    return write_out(out, _bilinear(input, sizes, scales, align_corners))


@kernel("aten::upsample_bilinear2d.out")
def upsample_bilinear2d_out(self, output_size, align_corners, scales_h=None, scales_w=None, out=None):
    sizes, _ = _out_sizes(self, output_size, None, 2, "upsample_bilinear2d")
    return write_out(out, _bilinear(self, sizes, [scales_h, scales_w], align_corners))


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, lo2, hi2):
    """Reflect coordinates into [lo2/2, hi2/2] (ATen's reflect_coordinates, twice-scaled bounds)."""
    if lo2 == hi2:
        return np.zeros_like(coord)
    mn = lo2 / 2
    span = (hi2 - lo2) / 2
    c = np.abs(coord - mn)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(flips % 2 == 0, extra + mn, span - extra + mn)


def _pad_coord(c, size, padding_mode, align_corners):
    if padding_mode == 1:  # border
        c = np.clip(c, 0, size - 1)
    elif padding_mode == 2:  # reflection
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = np.clip(c, 0, size - 1)
    return c


def _source_coord(coord, size, padding_mode, align_corners):
    return _pad_coord(_unnormalize(coord, size, align_corners), size, padding_mode, align_corners)


def _cubic_weights(t, a=-0.75):
    """The 4 cubic-convolution weights (ATen's A = -0.75) for taps at -1, 0, 1, 2 from floor."""
    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@kernel("aten::grid_sampler_2d.out")
def grid_sampler_2d_out(input, grid, interpolation_mode, padding_mode, align_corners, out=None):
    if interpolation_mode not in (0, 1, 2):
        raise ExecutionError(f"grid_sampler_2d: unknown interpolation mode {interpolation_mode}")
    n, c, h, w = input.shape
    acc = compute_dtype(float_type(input.dtype))
    inp = input.astype(acc, copy=False)
    batch = np.arange(n)[:, None, None]

    def sample(iy, ix):
        valid = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
        cy, cx = np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)
        vals = inp[batch, :, cy, cx]  # (N, OH, OW, C)
        return vals * valid[..., None]

    if interpolation_mode == 2:
        # bicubic: 4x4 taps around the unpadded source point, each tap padded on its own
        x = _unnormalize(grid[..., 0].astype(acc), w, align_corners)
        y = _unnormalize(grid[..., 1].astype(acc), h, align_corners)
        x0, y0 = np.floor(x), np.floor(y)
        wx, wy = _cubic_weights(x - x0), _cubic_weights(y - y0)
        res = 0
        for i in range(4):
            row = 0
            ty = _pad_coord(y0 - 1 + i, h, padding_mode, align_corners)
            for j in range(4):
                tx = _pad_coord(x0 - 1 + j, w, padding_mode, align_corners)
                row = row + sample(ty.astype(np.int64), tx.astype(np.int64)) * wx[j][..., None]
            res = res + row * wy[i][..., None]
        return write_out(out, np.moveaxis(res, -1, 1).astype(input.dtype))
    x = _source_coord(grid[..., 0].astype(acc), w, padding_mode, align_corners)
    y = _source_coord(grid[..., 1].astype(acc), h, padding_mode, align_corners)

    if interpolation_mode == 1:
        res = sample(np.round(y).astype(np.int64), np.round(x).astype(np.int64))
    else:
        x0, y0 = np.floor(x), np.floor(y)
        wx, wy = (x - x0)[..., None], (y - y0)[..., None]
        x0i, y0i = x0.astype(np.int64), y0.astype(np.int64)
        res = (sample(y0i, x0i) * (1 - wx) * (1 - wy) + sample(y0i, x0i + 1) * wx * (1 - wy)
               + sample(y0i + 1, x0i) * (1 - wx) * wy + sample(y0i + 1, x0i + 1) * wx * wy)
    return write_out(out, np.moveaxis(res, -1, 1).astype(input.dtype))
