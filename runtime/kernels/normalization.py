"""Normalization kernels: layer norm, group norm, batch norm (inference and training)."""

from __future__ import annotations


import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import float_type, write_out
from etc.runtime.kernels.registry import kernel


# --------------------------------------------------------------------------- normalization


def stat_dtype(dtype):
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def row_mean(x, axis, acc):
    """The mean over `axis`, summed in float64 and rounded once to `acc`: exact for a row of equal
    values (a float32 sum of three equal x rounds 3x, and the mean is then off x by an ulp, which
    a normalization's rsqrt(eps) turns into 1e-6 where torch gives 0)."""
    return x.mean(axis=axis, keepdims=True, dtype=np.float64).astype(acc, copy=False)


@kernel("aten::native_layer_norm.out")
def native_layer_norm_out(input, normalized_shape, weight, bias, eps, out0=None, out1=None, out2=None):
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != tuple(int(s) for s in normalized_shape):
        raise ExecutionError(f"native_layer_norm: normalized_shape {list(normalized_shape)} doesn't match the input's "
                             f"trailing dims {list(input.shape)}")
    acc = stat_dtype(float_type(input.dtype))
    x = input.astype(acc, copy=False)
    axes = tuple(range(input.ndim - k, input.ndim))
    if x.size:
        mean = row_mean(x, axes, acc)
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
    acc = stat_dtype(float_type(input.dtype))
    x = input.astype(acc, copy=False).reshape(n, g, (c // g) * int(HxW))
    if x.size:
        mean = row_mean(x, -1, acc)
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
    acc = stat_dtype(float_type(input.dtype))
    invstd = 1 / np.sqrt(running_var.astype(acc) + acc.type(eps))
    y = _bn_apply(input, running_mean.astype(acc), invstd, weight, bias, acc)
    empty = np.zeros((0,), acc)
    return write_out(out0, y), write_out(out1, empty), write_out(out2, empty)


def _bn_train(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):
    acc = stat_dtype(float_type(input.dtype))
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
        acc = stat_dtype(float_type(input.dtype))
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
