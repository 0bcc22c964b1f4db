"""Backward kernels of the Core ATen opset (training graphs): convolution, pooling,
normalization and embedding gradients. Outputs whose `output_mask` entry is False are
left untouched (ATen returns undefined tensors for them)."""

from __future__ import annotations

import itertools

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import INT64, write_out
from etc.runtime.kernels.linalg import compute_dtype
from etc.runtime.kernels.convolution import col2im_nd, conv_nd, expand_to, pad_spatial, windows
from etc.runtime.kernels.pooling import adaptive_pool_matrix, avg_pool_divisors
from etc.runtime.kernels.registry import kernel


def _acc(dtype):
    return compute_dtype(dtype)


@kernel("aten::embedding_dense_backward.out")
def embedding_dense_backward_out(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq, out=None):
    idx = indices.reshape(-1).astype(INT64)
    dim = grad_output.shape[-1]
    grad = grad_output.reshape(-1, dim).astype(_acc(grad_output.dtype))
    keep = idx != padding_idx
    if scale_grad_by_freq:
        counts = np.bincount(idx[idx >= 0], minlength=int(num_weights))
        grad = grad / counts[idx][:, None]
    res = np.zeros((int(num_weights), dim), grad.dtype)
    np.add.at(res, idx[keep], grad[keep])
    return write_out(out, res)


def _pool2d_geometry(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode):
    k = expand_to(kernel_size, 2, "kernel_size")
    s = expand_to(stride, 2, "stride", None) if stride else list(k)
    p = expand_to(padding, 2, "padding", 0)
    d = expand_to(dilation, 2, "dilation", 1)
    outs = list(grad_output.shape[-2:])
    return k, s, p, d, outs


@kernel("aten::avg_pool2d_backward.grad_input")
def avg_pool2d_backward_out(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override, grad_input=None):
    k, s, p, d, outs = _pool2d_geometry(grad_output, self, kernel_size, stride, padding, None, ceil_mode)
    acc = _acc(grad_output.dtype)
    sizes = self.shape[-2:]
    if divisor_override:
        g = grad_output.astype(acc) / acc.type(divisor_override)
    else:
        g = grad_output.astype(acc) / avg_pool_divisors(sizes, outs, k, s, p, ceil_mode, count_include_pad).astype(acc)
    full = [max(n + 2 * pp, (o - 1) * ss + kk) for n, pp, o, ss, kk in zip(sizes, p, outs, s, k)]
    res = np.zeros(self.shape[:-2] + tuple(full), acc)
    for i, j in itertools.product(range(k[0]), range(k[1])):
        res[..., i:i + s[0] * (outs[0] - 1) + 1:s[0], j:j + s[1] * (outs[1] - 1) + 1:s[1]] += g
    res = res[..., p[0]:p[0] + sizes[0], p[1]:p[1] + sizes[1]]
    return write_out(grad_input, res)


@kernel("aten::max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward_out(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                                         indices, grad_input=None):
    h, w = self.shape[-2:]
    lead = int(np.prod(self.shape[:-2], dtype=np.int64))
    res = np.zeros((lead, h * w), _acc(grad_output.dtype))
    rows = np.repeat(np.arange(lead), int(np.prod(grad_output.shape[-2:])))
    np.add.at(res, (rows, indices.reshape(-1).astype(INT64)), grad_output.reshape(-1))
    return write_out(grad_input, res.reshape(self.shape))


@kernel("aten::_adaptive_avg_pool2d_backward.out")
def adaptive_avg_pool2d_backward_out(grad_output, self, out=None):
    acc = _acc(grad_output.dtype)
    res = grad_output.astype(acc)
    for i in range(2):
        axis = self.ndim - 2 + i
        m = adaptive_pool_matrix(self.shape[axis], grad_output.shape[axis], acc)  # (out, in)
        res = np.moveaxis(np.tensordot(res, m, axes=([axis], [0])), -1, axis)
    return write_out(out, res)


def _im2col(x, k, stride, padding, dilation, groups):
    """x (N, C, *S) -> cols (N, G, Cg*K, P) and the output spatial shape."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    win = windows(pad_spatial(x, padding), k, stride, dilation)
    out_sp = win.shape[2:2 + nd]
    win = win.reshape((n, groups, c // groups) + win.shape[2:])
    perm = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
    cols = np.ascontiguousarray(win.transpose(perm)).reshape(n, groups, (c // groups) * int(np.prod(k)),
                                                             int(np.prod(out_sp)))
    return cols, out_sp


@kernel("aten::convolution_backward.out")
def convolution_backward_out(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                             output_padding, groups, output_mask, out0=None, out1=None, out2=None):
    nd = input.ndim - 2
    stride, padding = expand_to(stride, nd, "stride", 1), expand_to(padding, nd, "padding", 0)
    dilation = expand_to(dilation, nd, "dilation", 1)
    g = int(groups)
    acc = _acc(grad_output.dtype)
    go, x, w = grad_output.astype(acc), input.astype(acc), weight.astype(acc)
    k = w.shape[2:]
    kk = int(np.prod(k))
    n = x.shape[0]
    results = [out0, out1, out2]
    if not transposed:
        o, cg = w.shape[:2]
        gom = go.reshape(n, g, o // g, -1)  # (N, G, Og, P)
        if output_mask[0]:
            cols = np.matmul(w.reshape(g, o // g, cg * kk).transpose(0, 2, 1), gom)  # (N, G, Cg*K, P)
            cols = cols.reshape((n, g * cg) + tuple(k) + tuple(go.shape[2:]))
            results[0] = write_out(out0, col2im_nd(cols, x.shape[2:], k, stride, padding, dilation))
        if output_mask[1]:
            cols, _ = _im2col(x, k, stride, padding, dilation, g)
            gw = np.einsum("ngop,ngcp->goc", gom, cols).reshape(w.shape)
            results[1] = write_out(out1, gw)
    else:
        cin, og = w.shape[:2]
        if output_mask[0]:
            # the gradient of a transposed convolution's input is a plain convolution of grad_output
            results[0] = write_out(out0, conv_nd(go, w, None, stride, padding, dilation, g))
        if output_mask[1]:
            full = [o + 2 * p for o, p in zip(go.shape[2:], padding)]
            cols, _ = _im2col(go, k, stride, padding, dilation, g)  # (N, G, Og*K, P_in)
            if cols.shape[-1] != int(np.prod(x.shape[2:])):
                raise ExecutionError(f"convolution_backward: grad_output {list(go.shape)} doesn't match input "
                                     f"{list(x.shape)} (padded {full})")
            xm = x.reshape(n, g, cin // g, -1)
            gw = np.einsum("ngcp,ngkp->gck", xm, cols).reshape(w.shape)
            results[1] = write_out(out1, gw)
    if output_mask[2]:
        results[2] = write_out(out2, go.sum(axis=(0,) + tuple(range(2, go.ndim))))
    return tuple(results)


@kernel("aten::native_layer_norm_backward.out")
def native_layer_norm_backward_out(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask,
                                   out0=None, out1=None, out2=None):
    k = len(normalized_shape)
    acc = _acc(input.dtype)
    axes = tuple(range(input.ndim - k, input.ndim))
    batch_axes = tuple(range(input.ndim - k))
    x, go = input.astype(acc), grad_out.astype(acc)
    xhat = (x - mean.astype(acc)) * rstd.astype(acc)
    results = [out0, out1, out2]
    if output_mask[0]:
        gx = go * weight.astype(acc) if weight is not None else go
        m1 = gx.mean(axis=axes, keepdims=True) if gx.size else gx
        m2 = (gx * xhat).mean(axis=axes, keepdims=True) if gx.size else gx
        results[0] = write_out(out0, rstd.astype(acc) * (gx - m1 - xhat * m2))
    if output_mask[1] and weight is not None:
        results[1] = write_out(out1, (go * xhat).sum(axis=batch_axes))
    if output_mask[2] and bias is not None:
        results[2] = write_out(out2, go.sum(axis=batch_axes))
    return tuple(results)


@kernel("aten::native_group_norm_backward.out")
def native_group_norm_backward_out(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask,
                                   out0=None, out1=None, out2=None):
    n, c, g = int(N), int(C), int(group)
    acc = _acc(input.dtype)
    x = input.astype(acc).reshape(n, g, c // g, -1)
    go = grad_out.astype(acc).reshape(n, g, c // g, -1)
    m, r = mean.astype(acc).reshape(n, g, 1, 1), rstd.astype(acc).reshape(n, g, 1, 1)
    xhat = (x - m) * r
    results = [out0, out1, out2]
    if output_mask[0]:
        gx = go * weight.astype(acc).reshape(1, g, c // g, 1) if weight is not None else go
        m1 = gx.mean(axis=(2, 3), keepdims=True)
        m2 = (gx * xhat).mean(axis=(2, 3), keepdims=True)
        results[0] = write_out(out0, (r * (gx - m1 - xhat * m2)).reshape(input.shape))
    if output_mask[1]:
        results[1] = write_out(out1, (go * xhat).sum(axis=(0, 3)).reshape(c))
    if output_mask[2]:
        results[2] = write_out(out2, go.sum(axis=(0, 3)).reshape(c))
    return tuple(results)

