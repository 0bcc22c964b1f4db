"""Neural-network kernels: convolution (N-d, grouped, dilated, transposed), pooling,
normalization, softmax, embedding, upsampling, grid sampling, dropout, im2col/col2im.

Convolution is im2col by strided windows plus one batched matmul per call (no
Python loops over elements); a transposed convolution is the matmul followed by
a col2im scatter-add over the kernel positions.
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import BOOL, INT64, category, float_type, normalize_dim, result_type, to_dtype, write_out
from etc.runtime.kernels.linalg import compute_dtype
from etc.runtime.kernels.registry import kernel


def expand_to(values, n, name, default=None):
    values = [int(v) for v in (values if values is not None else [])]
    if not values:
        if default is None:
            raise ExecutionError(f"{name} must have {n} values")
        values = [default]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise ExecutionError(f"{name} has {len(values)} values, expected 1 or {n}")
    return values


def windows(x: np.ndarray, kernel_size, stride, dilation) -> np.ndarray:
    """Sliding windows over the trailing len(kernel_size) dims of x:
    shape (*lead, *out_spatial, *kernel) (a strided view, no copy)."""
    nd = len(kernel_size)
    lead, spatial = x.shape[:-nd], x.shape[-nd:]
    out = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel_size, stride, dilation)]
    if any(o <= 0 for o in out):
        raise ExecutionError(f"window of size {list(kernel_size)} (dilation {list(dilation)}) is larger than the "
                             f"padded input {list(spatial)}")
    strides = x.strides
    lead_strides, sp_strides = strides[:-nd], strides[-nd:]
    new_strides = lead_strides + tuple(s * st for s, st in zip(sp_strides, stride)) + tuple(
        s * d for s, d in zip(sp_strides, dilation))
    return np.lib.stride_tricks.as_strided(x, shape=lead + tuple(out) + tuple(kernel_size), strides=new_strides,
                                           writeable=False)


def pad_spatial(x, padding, value=0):
    nd = len(padding)
    if not any(padding):
        return x
    widths = [(0, 0)] * (x.ndim - nd) + [(p, p) for p in padding]
    return np.pad(x, widths, mode="constant", constant_values=value)


def _conv_out_size(spatial, kernel_size, stride, dilation):
    out = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(spatial, kernel_size, stride, dilation)]
    if any(o <= 0 for o in out):
        raise ExecutionError(f"window of size {list(kernel_size)} (dilation {list(dilation)}) is larger than the "
                             f"padded input {list(spatial)}")
    return out


def _tap(pos, stride, dilation, out_sp):
    """The slices of a padded input read by kernel position `pos` for every output position."""
    return tuple(slice(p * d, p * d + st * (o - 1) + 1, st) for p, d, st, o in zip(pos, dilation, stride, out_sp))


_SCRATCH = threading.local()
_SCRATCH_LIMIT = 1 << 28  # bytes kept between calls at most


def _scratch(shape, dtype) -> np.ndarray:
    """A per-thread work buffer reused across calls (grown on demand), so a convolution's
    columns don't fault in fresh pages every time. Valid until the next _scratch call."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n > _SCRATCH_LIMIT:
        return np.empty(shape, dtype)
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < n:
        buf = np.empty(max(n, 64), np.uint8)
        _SCRATCH.buf = buf
    return buf[:n].view(dtype).reshape(shape)


def im2col_nd(xp, kernel_size, stride, dilation, out_sp, scratch=False):
    """Columns (N, C, *K, *out) of a padded input: one strided block copy per kernel position
    (faster than gathering a 2*nd-dimensional window view in one go)."""
    n, c = xp.shape[:2]
    lead = (slice(None), slice(None))
    if all(k == 1 for k in kernel_size) and all(s == 1 for s in stride):
        return xp.reshape((n, c) + (1,) * len(kernel_size) + xp.shape[2:])  # 1x1, stride 1: the input itself
    shape = (n, c) + tuple(kernel_size) + tuple(out_sp)
    cols = _scratch(shape, xp.dtype) if scratch else np.empty(shape, xp.dtype)
    for pos in itertools.product(*[range(k) for k in kernel_size]):
        cols[lead + pos] = xp[lead + _tap(pos, stride, dilation, out_sp)]
    return cols


def conv_nd(x, w, bias, stride, padding, dilation, groups, out=None):
    """Forward convolution: x (N, C, *S), w (O, C/groups, *K).

    im2col (one block copy per kernel position into a reused scratch buffer), then a 2-D GEMM
    per image, or one stacked matmul over (batch, group) when grouped. The result goes straight
    into `out` when that has the result's exact shape and dtype (C-contiguous)."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    k = tuple(w.shape[2:])
    g = int(groups)
    if g <= 0 or c != cg * g or o % g:
        raise ExecutionError(f"convolution: input with {c} channels, weight {list(w.shape)} and {g} groups don't agree")
    og = o // g
    xp = pad_spatial(x, padding)
    out_sp = tuple(_conv_out_size(xp.shape[2:], k, stride, dilation))
    kk = int(np.prod(k))
    p = int(np.prod(out_sp))
    dtype = np.result_type(x.dtype, w.dtype)
    into_out = (out is not None and out.shape == (n, o) + out_sp and out.dtype == dtype and out.flags.c_contiguous
                and not np.may_share_memory(out, x))
    cols = im2col_nd(xp, k, stride, dilation, out_sp, scratch=True).reshape(n, g, cg * kk, p)
    wm = w.reshape(g, og, cg * kk)
    res = out.reshape(n, g, og, p) if into_out else np.empty((n, g, og, p), dtype)
    if g == 1:  # one big 2-D GEMM per image (numpy's stacked matmul is slower than BLAS on 2-D)
        for b in range(n):
            np.matmul(wm[0], cols[b, 0], out=res[b, 0])
    else:  # grouped / depthwise: many small products, one stacked matmul
        np.matmul(wm, cols, out=res)
    res = res.reshape((n, o) + out_sp)
    if bias is not None:
        res += bias.reshape((1, o) + (1,) * nd)
    return res


def col2im_nd(cols, out_spatial, kernel_size, stride, padding, dilation):
    """Scatter-add cols (N, C, *K, *in) into an image (N, C, *out_spatial) (before cropping padding)."""
    nd = len(kernel_size)
    n, c = cols.shape[:2]
    in_sp = cols.shape[2 + nd:]
    full = [o + 2 * p for o, p in zip(out_spatial, padding)]
    img = np.zeros((n, c) + tuple(full), cols.dtype)
    for pos in itertools.product(*[range(kk) for kk in kernel_size]):
        index = tuple(slice(p * d, p * d + st * (i - 1) + 1, st) for p, d, st, i in zip(pos, dilation, stride, in_sp))
        img[(slice(None), slice(None)) + index] += cols[(slice(None), slice(None)) + pos]
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out_spatial))
    return img[(slice(None), slice(None)) + crop]


def conv_transpose_nd(x, w, bias, stride, padding, dilation, output_padding, groups):
    """Transposed convolution: x (N, Cin, *S), w (Cin, Cout/groups, *K)."""
    nd = x.ndim - 2
    n, cin = x.shape[:2]
    g = int(groups)
    og = w.shape[1]
    k = w.shape[2:]
    if w.shape[0] != cin or cin % g:
        raise ExecutionError(f"convolution (transposed): input with {cin} channels, weight {list(w.shape)} and "
                             f"{g} groups don't agree")
    in_sp = x.shape[2:]
    out_sp = [(i - 1) * st - 2 * p + d * (kk - 1) + op + 1
              for i, st, p, d, kk, op in zip(in_sp, stride, padding, dilation, k, output_padding)]
    kk = int(np.prod(k))
    wm = w.reshape(g, cin // g, og * kk).transpose(0, 2, 1)  # (G, Og*K, Cin_g)
    xm = x.reshape(n, g, cin // g, -1)  # (N, G, Cin_g, P)
    cols = np.matmul(wm, xm).reshape((n, g * og) + tuple(k) + tuple(in_sp))
    # output_padding extends the far side: allocate the image with the extra rows
    full_out = [o for o in out_sp]
    img = col2im_nd(cols, full_out, k, stride, padding, dilation) if all(o > 0 for o in full_out) else \
        np.zeros((n, g * og) + tuple(max(o, 0) for o in full_out), cols.dtype)
    if bias is not None:
        img = img + bias.reshape((1, -1) + (1,) * nd)
    return img


@kernel("aten::convolution.out")
def convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out=None):
    nd = input.ndim - 2
    if nd < 1 or weight.ndim != input.ndim:
        raise ExecutionError(f"convolution: input {list(input.shape)} and weight {list(weight.shape)} ranks don't "
                             f"fit an N-d convolution")
    stride = expand_to(stride, nd, "stride", 1)
    padding = expand_to(padding, nd, "padding", 0)
    dilation = expand_to(dilation, nd, "dilation", 1)
    dtype = result_type(input, weight) if bias is None else result_type(input, weight, bias)
    cd = compute_dtype(dtype)
    x, w = to_dtype(input, cd), to_dtype(weight, cd)
    b = None if bias is None else to_dtype(bias, cd)
    if transposed:
        output_padding = expand_to(output_padding, nd, "output_padding", 0)
        res = conv_transpose_nd(x, w, b, stride, padding, dilation, output_padding, groups)
    else:
        res = conv_nd(x, w, b, stride, padding, dilation, groups, out=out if cd == dtype else None)
        if res is out or (res.shape == out.shape and np.may_share_memory(res, out)):
            return out  # written in place
    return write_out(out, res.astype(dtype, copy=False))


@kernel("aten::_convolution.out")
def _convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
                     benchmark=False, deterministic=False, cudnn_enabled=False, allow_tf32=False, out=None):
    return convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out)


@kernel("aten::col2im.out")
def col2im_out(self, output_size, kernel_size, dilation, padding, stride, out=None):
    nd = 2
    kernel_size = expand_to(kernel_size, nd, "kernel_size")
    dilation, padding, stride = (expand_to(dilation, nd, "dilation", 1), expand_to(padding, nd, "padding", 0),
                                 expand_to(stride, nd, "stride", 1))
    output_size = expand_to(output_size, nd, "output_size")
    batched = self.ndim == 3
    x = self if batched else self[None]
    n, ck, length = x.shape
    kk = int(np.prod(kernel_size))
    c = ck // kk
    blocks = [(o + 2 * p - d * (k - 1) - 1) // s + 1 for o, p, d, k, s in zip(output_size, padding, dilation,
                                                                               kernel_size, stride)]
    if int(np.prod(blocks)) != length:
        raise ExecutionError(f"col2im: {length} blocks don't match the expected {blocks}")
    cols = x.reshape((n, c) + tuple(kernel_size) + tuple(blocks)).astype(compute_dtype(x.dtype))
    img = col2im_nd(cols, output_size, kernel_size, stride, padding, dilation).astype(self.dtype)
    return write_out(out, img if batched else img[0])


@kernel("aten::im2col.out")
def im2col_out(self, kernel_size, dilation, padding, stride, out=None):
    nd = 2
    kernel_size = expand_to(kernel_size, nd, "kernel_size")
    dilation, padding, stride = (expand_to(dilation, nd, "dilation", 1), expand_to(padding, nd, "padding", 0),
                                 expand_to(stride, nd, "stride", 1))
    batched = self.ndim == 4
    x = self if batched else self[None]
    n, c = x.shape[:2]
    win = windows(pad_spatial(x, padding), kernel_size, stride, dilation)  # (N, C, OH, OW, KH, KW)
    blocks = win.shape[2] * win.shape[3]
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * int(np.prod(kernel_size)), blocks)
    return write_out(out, cols if batched else cols[0])


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


# --------------------------------------------------------------------------- normalization


def _stat_dtype(dtype):
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


@kernel("aten::native_layer_norm.out")
def native_layer_norm_out(input, normalized_shape, weight, bias, eps, out0=None, out1=None, out2=None):
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != tuple(int(s) for s in normalized_shape):
        raise ExecutionError(f"native_layer_norm: normalized_shape {list(normalized_shape)} doesn't match the input's "
                             f"trailing dims {list(input.shape)}")
    acc = _stat_dtype(float_type(input.dtype))
    x = input.astype(acc, copy=False)
    axes = tuple(range(input.ndim - k, input.ndim))
    if x.size:
        mean = x.mean(axis=axes, keepdims=True)
        centered = x - mean
        var = np.square(centered).mean(axis=axes, keepdims=True)
    else:
        mean = np.zeros(input.shape[:input.ndim - k] + (1,) * k, acc)
        centered = x
        var = np.zeros_like(mean)
    rstd = 1 / np.sqrt(var + acc.type(eps))
    in_place = out0.shape == x.shape and out0.dtype == acc and out0.flags.c_contiguous
    y = np.multiply(centered, rstd, out=out0 if in_place else None)  # (centered is our own temporary)
    if weight is not None:
        y *= weight.astype(acc, copy=False)
    if bias is not None:
        y += bias.astype(acc, copy=False)
    return (y if in_place else write_out(out0, y)), write_out(out1, mean), write_out(out2, rstd)


@kernel("aten::native_group_norm.out")
def native_group_norm_out(input, weight, bias, N, C, HxW, group, eps, out0=None, out1=None, out2=None):
    n, c, g = int(N), int(C), int(group)
    acc = _stat_dtype(float_type(input.dtype))
    x = input.astype(acc, copy=False).reshape(n, g, (c // g) * int(HxW))
    if x.size:
        mean = x.mean(axis=-1, keepdims=True)
        var = np.square(x - mean).mean(axis=-1, keepdims=True)
    else:
        mean = np.zeros((n, g, 1), acc)
        var = np.zeros_like(mean)
    rstd = 1 / np.sqrt(var + acc.type(eps))
    y = ((x - mean) * rstd).reshape(input.shape)
    shape = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        y = y * weight.astype(acc, copy=False).reshape(shape)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape(shape)
    return write_out(out0, y), write_out(out1, mean.reshape(n, g)), write_out(out2, rstd.reshape(n, g))


def _bn_apply(input, mean, invstd, weight, bias, acc):
    shape = (1, -1) + (1,) * (input.ndim - 2)
    y = (input.astype(acc, copy=False) - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        y = y * weight.astype(acc, copy=False).reshape(shape)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape(shape)
    return y


@kernel("aten::_native_batch_norm_legit_no_training.out")
def native_batch_norm_no_training_out(input, weight, bias, running_mean, running_var, momentum, eps,
                                      out0=None, out1=None, out2=None):
    acc = _stat_dtype(float_type(input.dtype))
    invstd = 1 / np.sqrt(running_var.astype(acc) + acc.type(eps))
    y = _bn_apply(input, running_mean.astype(acc), invstd, weight, bias, acc)
    empty = np.zeros((0,), acc)
    return write_out(out0, y), write_out(out1, empty), write_out(out2, empty)


def _bn_train(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):
    acc = _stat_dtype(float_type(input.dtype))
    axes = (0,) + tuple(range(2, input.ndim))
    x = input.astype(acc, copy=False)
    mean = x.mean(axis=axes)
    var = np.square(x - mean.reshape((1, -1) + (1,) * (input.ndim - 2))).mean(axis=axes)
    invstd = 1 / np.sqrt(var + acc.type(eps))
    y = _bn_apply(input, mean, invstd, weight, bias, acc)
    count = input.size // max(input.shape[1], 1)
    if running_mean is not None:
        running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    if running_var is not None:
        unbiased = var * count / max(count - 1, 1)
        running_var[...] = (1 - momentum) * running_var + momentum * unbiased
    return write_out(out0, y), write_out(out1, mean), write_out(out2, invstd)


@kernel("aten::_native_batch_norm_legit.out")
def native_batch_norm_legit_out(input, weight, bias, running_mean, running_var, training, momentum, eps,
                                out=None, save_mean=None, save_invstd=None):
    if not training:
        acc = _stat_dtype(float_type(input.dtype))
        invstd = 1 / np.sqrt(running_var.astype(acc) + acc.type(eps))
        y = _bn_apply(input, running_mean.astype(acc), invstd, weight, bias, acc)
        empty = np.zeros((0,), acc)
        return write_out(out, y), write_out(save_mean, empty), write_out(save_invstd, empty)
    return _bn_train(input, weight, bias, running_mean, running_var, momentum, eps, out, save_mean, save_invstd)


@kernel("aten::_native_batch_norm_legit.no_stats_out")
def native_batch_norm_legit_no_stats_out(input, weight, bias, training, momentum, eps, out=None, save_mean=None,
                                         save_invstd=None):
    return _bn_train(input, weight, bias, None, None, momentum, eps, out, save_mean, save_invstd)


@kernel("aten::native_batch_norm.out")
def native_batch_norm_out(input, weight, bias, running_mean, running_var, training, momentum, eps,
                          out=None, save_mean=None, save_invstd=None):
    return native_batch_norm_legit_out(input, weight, bias, running_mean, running_var, training, momentum, eps,
                                       out, save_mean, save_invstd)


# --------------------------------------------------------------------------- softmax


def _softmax_input(self, dim, half_to_float):
    acc = _stat_dtype(float_type(self.dtype))
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
