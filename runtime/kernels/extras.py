"""Kernels beyond the Core ATen set that edge programs still contain: ops torch's default
decompositions keep (linear, var_mean), ExecuTorch's dim-order ops (quantization: quantized.py), and
common portable-library ops (glu, softplus, narrow/unfold copies, shifts, erfinv)."""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (category, dtype_arg, float_type, normalize_dim, result_type, sizes,
                                        to_dtype, write_out)
from etc.runtime.kernels.elementwise import erf
from etc.runtime.kernels.linalg import compute_dtype, matmul
from etc.runtime.kernels.reductions import reduce_var
from etc.runtime.kernels.registry import kernel


@kernel("aten::linear.out")
def linear_out(input, weight, bias=None, out=None):
    res = matmul(input, weight.T)
    if bias is not None:
        res = (res.astype(compute_dtype(res.dtype)) + bias).astype(result_type(input, weight, bias))
    return write_out(out, res)


@kernel("aten::var_mean.correction_out")
def var_mean_correction_out(self, dim=None, correction=None, keepdim=False, out0=None, out1=None):
    from etc.runtime.kernels.reductions import reduce_mean
    var = reduce_var(self, dim, 1 if correction is None else correction, keepdim)
    return write_out(out0, var), write_out(out1, reduce_mean(self, dim, keepdim, None))


@kernel("aten::std_mean.correction_out")
def std_mean_correction_out(self, dim=None, correction=None, keepdim=False, out0=None, out1=None):
    from etc.runtime.kernels.reductions import reduce_mean
    var = reduce_var(self, dim, 1 if correction is None else correction, keepdim)
    return write_out(out0, np.sqrt(var)), write_out(out1, reduce_mean(self, dim, keepdim, None))


# --------------------------------------------------------------------------- ExecuTorch dim-order ops


def _check_dim_order(dim_order, ndim, op):
    if dim_order is not None and list(dim_order) != list(range(ndim)):
        raise ExecutionError(f"{op}: only the contiguous dim order is supported, got {list(dim_order)}")


@kernel("dim_order_ops::_empty_dim_order.out")
def empty_dim_order_out(size, dim_order=None, out=None):
    from etc.runtime.kernels.common import resize_out
    _check_dim_order(dim_order, len(size), "_empty_dim_order")
    return resize_out(out, sizes(size))


@kernel("dim_order_ops::_clone_dim_order.out")
def clone_dim_order_out(self, non_blocking=False, dim_order=None, out=None):
    _check_dim_order(dim_order, self.ndim, "_clone_dim_order")
    return write_out(out, self)


# --------------------------------------------------------------------------- portable-library extras


@kernel("aten::glu.out")
def glu_out(self, dim=-1, out=None):
    axis = normalize_dim(dim, self.ndim)
    if self.shape[axis] % 2:
        raise ExecutionError(f"glu: dimension {axis} of size {self.shape[axis]} is not even")
    a, b = np.split(self, 2, axis=axis)
    from etc.runtime.kernels.elementwise import sigmoid_values
    return write_out(out, a * sigmoid_values(b))


@kernel("aten::softplus.out")
def softplus_out(self, beta=1, threshold=20, out=None):
    x = self * np.asarray(beta, self.dtype)
    soft = np.log1p(np.exp(np.minimum(x, np.asarray(threshold, self.dtype)))) / np.asarray(beta, self.dtype)
    return write_out(out, np.where(x > threshold, self, soft))


@kernel("aten::mish.out")
def mish_out(self, out=None):
    sp = np.where(self > 20, self, np.log1p(np.exp(np.minimum(self, 20))))
    return write_out(out, self * np.tanh(sp))


@kernel("aten::softmax.int_out")
def softmax_int_out(self, dim, dtype=None, out=None):
    from etc.runtime.kernels.nn import softmax_out
    x = to_dtype(self, dtype_arg(dtype)) if dtype is not None else self
    return softmax_out(x, dim, False, out)


@kernel("aten::log_softmax.int_out")
def log_softmax_int_out(self, dim, dtype=None, out=None):
    from etc.runtime.kernels.nn import log_softmax_out
    x = to_dtype(self, dtype_arg(dtype)) if dtype is not None else self
    return log_softmax_out(x, dim, False, out)


@kernel("aten::narrow_copy.out")
def narrow_copy_out(self, dim, start, length, out=None):
    axis = normalize_dim(dim, self.ndim)
    n = self.shape[axis]
    start = int(start) + (n if start < 0 else 0)
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise ExecutionError(f"narrow: start {start} and length {length} exceed dimension {axis} of size {n}")
    return write_out(out, np.take(self, np.arange(start, start + int(length)), axis=axis))


@kernel("aten::unfold_copy.out")
def unfold_copy_out(self, dimension, size, step, out=None):
    if self.ndim == 0:
        return write_out(out, self.reshape(1))
    axis = normalize_dim(dimension, self.ndim)
    n = self.shape[axis]
    count = (n - int(size)) // int(step) + 1
    if size > n or step <= 0:
        raise ExecutionError(f"unfold: size {size} / step {step} don't fit dimension {axis} of size {n}")
    starts = np.arange(count) * int(step)
    idx = starts[:, None] + np.arange(int(size))[None, :]
    res = np.take(self, idx, axis=axis)  # (..., count, size, ...)
    return write_out(out, np.moveaxis(res, axis + 1, -1))


def _shift(fn, left):
    def shift(self, other, out=None):
        dtype = result_type(self, other)
        if category(dtype) != 1:
            raise ExecutionError(f"bitwise shift: only integral tensors are supported, got {dtype}")
        a, b = to_dtype(self, dtype), to_dtype(other, dtype)
        bits = np.dtype(dtype).itemsize * 8
        over = (b >= bits) | (b < 0)
        res = fn(a, np.where(over, 0, b).astype(dtype))
        if left:
            res = np.where(over, np.zeros((), dtype), res)
        else:
            fill = np.where(a < 0, -1, 0).astype(dtype) if np.dtype(dtype).kind == "i" else np.zeros((), dtype)
            res = np.where(over, fill, res)
        return write_out(out, res)
    return shift


for _ov in ("Tensor_out", "Tensor_Scalar_out", "Scalar_Tensor_out"):
    kernel(f"aten::bitwise_left_shift.{_ov}")(_shift(np.left_shift, True))
    kernel(f"aten::bitwise_right_shift.{_ov}")(_shift(np.right_shift, False))


def erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse error function: Giles' single-precision approximation refined by Newton steps on erf."""
    y = np.asarray(y)
    yd = y.astype(np.float64)
    with np.errstate(all="ignore"):
        w = -np.log((1.0 - yd) * (1.0 + yd))
        small = w < 5.0
        ws = w - 2.5
        p_small = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941):
            p_small = c + p_small * ws
        wb = np.sqrt(w) - 3.0
        p_big = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                  0.00943887047, 1.00167406, 2.83297682):
            p_big = c + p_big * wb
        x = np.where(small, p_small, p_big) * yd
        for _ in range(3):
            err = erf(x) - yd
            x = x - err / (2.0 / np.sqrt(np.pi) * np.exp(-x * x))
        x = np.where(yd == 1.0, np.inf, np.where(yd == -1.0, -np.inf, x))
        x = np.where(np.abs(yd) > 1.0, np.nan, x)
    return x


@kernel("aten::erfinv.out")
def erfinv_out(self, out=None):
    ft = float_type(self.dtype)
    return write_out(out, erfinv(self).astype(ft))


@kernel("aten::erfc.out")
def erfc_out(self, out=None):
    ft = float_type(self.dtype)
    return write_out(out, (1.0 - erf(self.astype(np.float64))).astype(ft))



