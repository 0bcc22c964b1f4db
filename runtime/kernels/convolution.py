"""Convolution kernels (N-d, grouped, dilated, transposed) and im2col/col2im, with the window
helpers the pooling and backward kernels share.

Convolution is im2col by strided windows plus one batched matmul per call (no
Python loops over elements); a transposed convolution is the matmul followed by
a col2im scatter-add over the kernel positions.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import result_type, to_dtype, write_out
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
