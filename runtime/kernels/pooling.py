"""Pooling kernels: max, average and adaptive pooling in 1-3 spatial dimensions."""

from __future__ import annotations

import itertools

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import BOOL, INT64, category, write_out
from etc.runtime.kernels.convolution import expand_to, windows
from etc.runtime.kernels.linalg import compute_dtype
from etc.runtime.kernels.registry import kernel

# --------------------------------------------------------------------------- pooling


def _pool_out_size(size, k, s, p, d, ceil_mode):
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_params(x, nd, kernel_size, stride, padding, dilation, name):
    k = expand_to(kernel_size, nd, f"{name}: kernel_size")
    s = expand_to(stride, nd, f"{name}: stride", None) if stride else list(k)
    p = expand_to(padding, nd, f"{name}: padding", 0)
    d = expand_to(dilation, nd, f"{name}: dilation", 1)
    if x.ndim not in (nd + 1, nd + 2):
        raise ExecutionError(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got shape {list(x.shape)}")
    for kk, pp in zip(k, p):
        if pp > kk // 2:
            raise ExecutionError(f"{name}: padding {pp} should be at most half of the kernel size {kk}")
    return k, s, p, d


def _pool_padded(x, nd, k, s, p, d, ceil_mode, fill):
    """x padded on each side by p (plus enough on the far side for ceil_mode windows) with `fill`."""
    sizes = x.shape[-nd:]
    outs = [_pool_out_size(n, kk, ss, pp, dd, ceil_mode) for n, kk, ss, pp, dd in zip(sizes, k, s, p, d)]
    if any(o <= 0 for o in outs):
        raise ExecutionError(f"pooling: output size {outs} is too small for input {list(sizes)}")
    extra = [max((o - 1) * ss + dd * (kk - 1) + 1 - (n + 2 * pp), 0) for o, n, kk, ss, pp, dd in
             zip(outs, sizes, k, s, p, d)]
    widths = [(0, 0)] * (x.ndim - nd) + [(pp, pp + e) for pp, e in zip(p, extra)]
    xp = np.pad(x, widths, mode="constant", constant_values=fill) if any(p) or any(extra) else x
    win = windows(xp, k, s, d)
    index = (Ellipsis,) + tuple(slice(0, o) for o in outs) + (slice(None),) * nd
    return win[index], outs


def _lowest(dtype):
    dtype = np.dtype(dtype)
    if category(dtype) >= 2:
        return -np.inf
    if dtype == BOOL:
        return False
    return np.iinfo(dtype).min


def max_pool_nd(x, nd, kernel_size, stride, padding, dilation, ceil_mode, name):
    k, s, p, d = _pool_params(x, nd, kernel_size, stride, padding, dilation, name)
    win, outs = _pool_padded(x, nd, k, s, p, d, ceil_mode, _lowest(x.dtype))
    # scan the kernel positions as ATen does (one strided tap of every window per step, no
    # window copy): a strictly larger value wins (ties keep the first), and every NaN met
    # wins (the last NaN of a window)
    taps = itertools.product(*[range(kk) for kk in k])
    values = np.array(win[(Ellipsis,) + next(taps)])
    arg_type = np.int16 if int(np.prod(k)) < 2 ** 15 else np.int32
    arg = np.zeros(values.shape, arg_type)
    step = np.empty_like(arg)
    check_nan = category(x.dtype) >= 2
    for i, pos in enumerate(taps, start=1):
        v = win[(Ellipsis,) + pos]
        better = v > values
        if check_nan:
            better |= np.isnan(v)
        values = np.maximum(values, v)  # (NaN sticks, like the scan)
        # positions only grow: the last update is the max of (i where updated) -- much faster
        # than np.where or a masked copy
        np.multiply(better, arg_type(i), out=step)
        np.maximum(arg, step, out=arg)
    # input coordinates of the winners, flattened over the spatial dims: the window's
    # origin (broadcast over the output grid) plus the winning tap's offset (a tiny table)
    sizes = x.shape[-nd:]
    flat_stride = [int(np.prod(sizes[i + 1:])) for i in range(nd)]
    tap_offset = np.zeros(int(np.prod(k)), INT64)
    for t, pos in enumerate(itertools.product(*[range(kk) for kk in k])):
        tap_offset[t] = sum(pp * dd * fs for pp, dd, fs in zip(pos, d, flat_stride))
    origin = np.zeros((1,) * nd, INT64)
    for i in range(nd):
        shape = [1] * nd
        shape[i] = outs[i]
        origin = origin + ((np.arange(outs[i]) * s[i] - p[i]) * flat_stride[i]).reshape(shape)
    flat_index = np.take(tap_offset, arg)
    flat_index += origin
    return values, flat_index


@kernel("aten::max_pool2d_with_indices.out")
def max_pool2d_with_indices_out(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False,
                                out=None, indices=None):
    v, i = max_pool_nd(self, 2, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    return write_out(out, v), write_out(indices, i)


@kernel("aten::max_pool3d_with_indices.out")
def max_pool3d_with_indices_out(self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False,
                                out=None, indices=None):
    v, i = max_pool_nd(self, 3, kernel_size, stride, padding, dilation, ceil_mode, "max_pool3d")
    return write_out(out, v), write_out(indices, i)


def avg_pool_divisors(sizes, outs, k, s, p, ceil_mode, count_include_pad):
    """Per-dimension divisors of avg pooling, combined by outer product."""
    total = None
    for n, o, kk, ss, pp in zip(sizes, outs, k, s, p):
        start = np.arange(o) * ss - pp
        end = np.minimum(start + kk, n + pp)
        if count_include_pad:
            cnt = end - start
        else:
            cnt = np.minimum(end, n) - np.maximum(start, 0)
        total = cnt if total is None else np.multiply.outer(total, cnt)
    return total


def avg_pool_nd(x, nd, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, name):
    k, s, p, d = _pool_params(x, nd, kernel_size, stride, padding, None, name)
    acc = compute_dtype(x.dtype) if category(x.dtype) >= 2 else np.dtype(np.float64)
    win, outs = _pool_padded(x.astype(acc, copy=False), nd, k, s, p, d, ceil_mode, 0)
    # one strided tap per kernel position, added in window order (summing the window view's
    # small trailing axes directly is several times slower)
    taps = itertools.product(*[range(kk) for kk in k])
    sums = np.array(win[(Ellipsis,) + next(taps)])
    for pos in taps:
        sums += win[(Ellipsis,) + pos]
    if divisor_override:
        res = sums / acc.type(divisor_override)
    else:
        div = avg_pool_divisors(x.shape[-nd:], outs, k, s, p, ceil_mode, count_include_pad)
        res = sums / div.astype(acc)
    if category(x.dtype) < 2:
        # integer avg pooling divides with truncation in ATen
        res = np.trunc(res)
    return res.astype(x.dtype)


@kernel("aten::avg_pool2d.out")
def avg_pool2d_out(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                   divisor_override=None, out=None):
    return write_out(out, avg_pool_nd(self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override, "avg_pool2d"))


@kernel("aten::avg_pool3d.out")
def avg_pool3d_out(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                   divisor_override=None, out=None):
    return write_out(out, avg_pool_nd(self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                      divisor_override, "avg_pool3d"))


@kernel("aten::avg_pool1d.out")
def avg_pool1d_out(self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, out=None):
    return write_out(out, avg_pool_nd(self, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None,
                                      "avg_pool1d"))


def adaptive_pool_matrix(n_in, n_out, dtype):
    """(n_out, n_in) averaging matrix of adaptive pooling (windows floor(i*in/out) .. ceil((i+1)*in/out))."""
    m = np.zeros((n_out, n_in), dtype)
    for i in range(n_out):
        lo = (i * n_in) // n_out
        hi = -(-((i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool_nd(x, output_size, nd):
    output_size = expand_to(output_size, nd, "adaptive_avg_pool: output_size")
    acc = compute_dtype(x.dtype) if category(x.dtype) >= 2 else np.dtype(np.float64)
    res = x.astype(acc, copy=False)
    for i, o in enumerate(output_size):
        axis = x.ndim - nd + i
        m = adaptive_pool_matrix(x.shape[axis], o, acc)
        res = np.moveaxis(np.tensordot(res, m, axes=([axis], [1])), -1, axis)
    return res.astype(x.dtype)


@kernel("aten::adaptive_avg_pool1d.out")
def adaptive_avg_pool1d_out(self, output_size, out=None):
    return write_out(out, adaptive_avg_pool_nd(self, output_size, 1))


@kernel("aten::_adaptive_avg_pool2d.out", "aten::adaptive_avg_pool2d.out")
def adaptive_avg_pool2d_out(self, output_size, out=None):
    return write_out(out, adaptive_avg_pool_nd(self, output_size, 2))


@kernel("aten::_adaptive_avg_pool3d.out", "aten::adaptive_avg_pool3d.out")
def adaptive_avg_pool3d_out(self, output_size, out=None):
    return write_out(out, adaptive_avg_pool_nd(self, output_size, 3))


@kernel("aten::adaptive_max_pool2d.out")
def adaptive_max_pool2d_out(self, output_size, out=None, indices=None):
    oh, ow = expand_to(output_size, 2, "adaptive_max_pool2d: output_size")
    h, w = self.shape[-2:]
    vals = np.empty(self.shape[:-2] + (oh, ow), self.dtype)
    idx = np.empty(self.shape[:-2] + (oh, ow), INT64)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            block = self[..., h0:h1, w0:w1].reshape(self.shape[:-2] + (-1,))
            a = np.argmax(block, axis=-1)
            vals[..., i, j] = np.take_along_axis(block, a[..., None], -1)[..., 0]
            idx[..., i, j] = (h0 + a // (w1 - w0)) * w + w0 + a % (w1 - w0)
    return write_out(out, vals), write_out(indices, idx)
