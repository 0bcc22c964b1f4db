"""Elementwise kernels: unary math, binary arithmetic, comparisons, logical/bitwise, where, clamp.

Data-driven: each table row names the out-variant operators and the numpy
function; the wrappers do ATen's type promotion (compute in the promoted dtype,
cast to the out tensor's dtype on write).
"""

from __future__ import annotations

import functools

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (BOOL, apply_alpha, category, float_type, result_type,
                                        to_dtype, write_out)
from etc.runtime.kernels.registry import kernel, register_kernel

# --------------------------------------------------------------------------- special functions


# erf(a)/a (even, smooth, 2/sqrt(pi) at 0) as piecewise polynomials on [0, 6): Chebyshev
# interpolants of math.erf, fitted on first use (at import they were a fifth of a second of every
# process's start, etc-opt's included); beyond 6, erf is +-1 in double.
_ERF_HI, _ERF_WIDTH, _ERF_DEG = 6.0, 0.25, 11


@functools.cache
def _erf_table():
    import math

    count = int(_ERF_HI / _ERF_WIDTH)
    k = np.arange(_ERF_DEG + 1)
    nodes = np.cos(np.pi * (k + 0.5) / (_ERF_DEG + 1))
    rows = []
    for i in range(count):
        center, half = (i + 0.5) * _ERF_WIDTH, _ERF_WIDTH / 2
        values = [math.erf(v) / v for v in center + half * nodes]
        poly = np.polynomial.chebyshev.cheb2poly(np.polynomial.chebyshev.chebfit(nodes, values, _ERF_DEG))
        rows.append(np.pad(poly, (0, _ERF_DEG + 1 - len(poly))))
    return np.ascontiguousarray(np.array(rows).T), (np.arange(count) + 0.5) * _ERF_WIDTH


@functools.cache
def erf32_coefficients() -> tuple[list, list]:
    """erf(x)/x ~ P(x^2)/Q(x^2) on [0, 4] (beyond, float32 erf is +-1): our own fit to math.erf,
    linearized least squares reweighted by the denominator (Loeb), relative error ~4e-7."""
    import math

    n_p, n_q, m = 6, 5, 2000
    x = np.maximum(4 * (0.5 - 0.5 * np.cos(np.pi * (np.arange(m) + 0.5) / m)), 1e-6)
    u = x * x
    f = np.array([math.erf(v) / v for v in x])
    w = np.ones_like(u)
    for _ in range(6):
        a = np.concatenate([np.vander(u, n_p + 1, increasing=True),
                            -f[:, None] * np.vander(u, n_q + 1, increasing=True)[:, 1:]], 1) * (w / f)[:, None]
        coef = np.linalg.lstsq(a, w, rcond=None)[0]
        p, q = coef[:n_p + 1], np.concatenate([[1.0], coef[n_p + 1:]])
        w = 1 / np.abs(np.polyval(q[::-1], u))
    return [np.float32(c) for c in p[::-1]], [np.float32(c) for c in q[::-1]]


_BLOCK = 8192  # elements per cache-resident block of the float32 path
_ERF32_ONE = np.float32(3.92)


def _erf32(x: np.ndarray) -> np.ndarray:
    """float32 erf: x * P(x^2) / Q(x^2) on x clamped to [-4, 4], evaluated in float32 over
    cache-sized blocks (each of the ~25 passes stays in L2), a few float32 ulps from ATen."""
    flat = np.ascontiguousarray(x, np.float32).reshape(-1)
    res = np.empty_like(flat)
    four = np.float32(4)
    erf32_p, erf32_q = erf32_coefficients()
    for start in range(0, flat.size, _BLOCK):
        xb = np.clip(flat[start:start + _BLOCK], -four, four)
        u = xb * xb
        num = np.full_like(u, erf32_p[0])
        for c in erf32_p[1:]:
            num *= u
            num += c
        den = np.full_like(u, erf32_q[0])
        for c in erf32_q[1:]:
            den *= u
            den += c
        num *= xb
        num /= den
        # from |x| = 3.92, float32 erf rounds to +-1 exactly (erfc < half an ulp of 1)
        np.copyto(num, np.sign(xb), where=np.abs(xb) >= _ERF32_ONE)
        np.clip(num, -1, 1, out=res[start:start + _BLOCK])  # (NaN passes through clip)
    return res.reshape(np.shape(x))


def erf(x: np.ndarray) -> np.ndarray:
    """erf without scipy, to ~1e-15 relative: x * P_i(|x|) on 0.25-wide pieces (no masks, only gathers)."""
    x = np.asarray(x)
    if x.dtype == np.float32:
        return _erf32(x)
    dtype = x.dtype if category(x.dtype) >= 2 else np.dtype(np.float64)
    xd = x.astype(np.float64)
    a = np.fmin(np.abs(xd), _ERF_HI - 1e-9)  # NaN -> any piece; x * P stays NaN
    idx = (a * (1 / _ERF_WIDTH)).astype(np.intp)
    coefs, centers = _erf_table()
    t = (a - np.take(centers, idx)) * (2 / _ERF_WIDTH)
    p = np.take(coefs[_ERF_DEG], idx)
    for k in range(_ERF_DEG - 1, -1, -1):
        p *= t
        p += np.take(coefs[k], idx)
    return np.where(np.abs(xd) >= _ERF_HI, np.sign(xd), xd * p).astype(dtype)


def sigmoid_values(x):
    # exp of the negative magnitude only: no overflow for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _rsqrt(x):
    return (1 / np.sqrt(x)).astype(x.dtype)


def _reciprocal(x):
    return (1 / x).astype(x.dtype)


# --------------------------------------------------------------------------- unary tables

# Ops whose result is floating: integral/bool inputs are computed as the default float.
_UNARY_FLOAT = {
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "sigmoid": sigmoid_values,
    "erf": erf, "reciprocal": _reciprocal,
}


def _make_unary_float(fn, name):
    def unary_float(self, out):
        x = to_dtype(self, float_type(self.dtype))
        return write_out(out, fn(x))
    unary_float.__name__ = name
    return unary_float


for _name, _fn in _UNARY_FLOAT.items():
    register_kernel(f"aten::{_name}.out", _make_unary_float(_fn, _name))


def _round_int_passthrough(fn):
    """floor/ceil/round/trunc are the identity on integral tensors."""
    def op(x):
        return x if category(x.dtype) < 2 else fn(x)
    return op


def _sign(x):
    if x.dtype == BOOL:
        return x
    if category(x.dtype) >= 2:
        return np.where(np.isnan(x), np.zeros((), x.dtype), np.sign(x))  # ATen: sign(NaN) = 0
    return np.sign(x)


def _abs(x):
    return x if x.dtype == BOOL else np.abs(x)


def _neg(x):
    if x.dtype == BOOL:
        raise ExecutionError("neg: negation of a bool tensor is not supported, use logical_not")
    return np.negative(x)


def _relu(x):
    if x.dtype == BOOL:
        return x
    # where keeps NaN (as ATen's clamp_min(0) does)
    return np.where(x < 0, np.zeros((), x.dtype), x)


def _bitwise_not(x):
    if category(x.dtype) >= 2:
        raise ExecutionError("bitwise_not: only integral and bool tensors are supported")
    return np.logical_not(x) if x.dtype == BOOL else np.invert(x)


# Ops that keep the input dtype.
_UNARY_SAME = {
    "abs": _abs, "neg": _neg, "sign": _sign, "floor": _round_int_passthrough(np.floor),
    "ceil": _round_int_passthrough(np.ceil), "trunc": _round_int_passthrough(np.trunc),
    "frac": lambda x: x - np.trunc(x), "relu": _relu, "bitwise_not": _bitwise_not,
    "sgn": _sign,
}


def _make_unary_same(fn, name):
    def unary_same(self, out):
        return write_out(out, fn(self))
    unary_same.__name__ = name
    return unary_same


for _name, _fn in _UNARY_SAME.items():
    register_kernel(f"aten::{_name}.out", _make_unary_same(_fn, _name))


@kernel("aten::round.out")
def round_out(self, out):
    # np.round rounds half to even, as ATen's nearbyint does
    return write_out(out, self if category(self.dtype) < 2 else np.round(self))


@kernel("aten::round.decimals_out")
def round_decimals_out(self, decimals, out):
    if category(self.dtype) < 2:
        return write_out(out, self)
    scale = 10.0 ** int(decimals)
    if decimals >= 0:
        return write_out(out, (np.round(self * np.asarray(scale, self.dtype)) / np.asarray(scale, self.dtype)))
    scale = 10.0 ** -int(decimals)
    return write_out(out, np.round(self / np.asarray(scale, self.dtype)) * np.asarray(scale, self.dtype))


# Predicates: bool result.
_UNARY_BOOL = {
    "isnan": lambda x: np.isnan(x) if category(x.dtype) >= 2 else np.zeros(x.shape, BOOL),
    "isinf": lambda x: np.isinf(x) if category(x.dtype) >= 2 else np.zeros(x.shape, BOOL),
    "isposinf": lambda x: np.isposinf(x) if category(x.dtype) >= 2 else np.zeros(x.shape, BOOL),
    "isneginf": lambda x: np.isneginf(x) if category(x.dtype) >= 2 else np.zeros(x.shape, BOOL),
    "signbit": lambda x: np.signbit(x) if x.dtype != BOOL else np.zeros(x.shape, BOOL),
    "logical_not": np.logical_not,
}

for _name, _fn in _UNARY_BOOL.items():
    register_kernel(f"aten::{_name}.out", _make_unary_same(_fn, _name))


# --------------------------------------------------------------------------- binary arithmetic


def _binary_operands(a, b):
    dtype = result_type(a, b)
    return dtype, to_dtype(a, dtype), to_dtype(b, dtype)


def _add(self, other, alpha, out):
    dtype, a, b = _binary_operands(self, other)
    if isinstance(alpha, float) and category(dtype) < 2:
        raise ExecutionError(f"add/sub: alpha {alpha!r} cannot be applied to a {dtype} result")
    b = apply_alpha(b, alpha, dtype)
    if dtype == BOOL:
        return write_out(out, np.logical_or(a, b))
    return write_out(out, np.add(a, b, dtype=dtype))


def _sub(self, other, alpha, out):
    dtype, a, b = _binary_operands(self, other)
    if dtype == BOOL:
        raise ExecutionError("sub: subtraction of bool tensors is not supported, use logical_xor")
    b = apply_alpha(b, alpha, dtype)
    return write_out(out, np.subtract(a, b, dtype=dtype))


@kernel("aten::add.out", "aten::add.Scalar_out")
def add_out(self, other, alpha=1, out=None):
    return _add(self, other, alpha, out)


@kernel("aten::sub.out", "aten::sub.Scalar_out")
def sub_out(self, other, alpha=1, out=None):
    return _sub(self, other, alpha, out)


@kernel("aten::rsub.Scalar_out", "aten::rsub.Tensor_out")
def rsub_out(self, other, alpha=1, out=None):
    dtype, a, b = _binary_operands(self, other)
    a = apply_alpha(a, alpha, dtype)
    return write_out(out, np.subtract(b, a, dtype=dtype))


@kernel("aten::mul.out", "aten::mul.Scalar_out")
def mul_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    if dtype == BOOL:
        return write_out(out, np.logical_and(a, b))
    return write_out(out, np.multiply(a, b, dtype=dtype))


def _int_zero_check(b, op):
    if np.any(np.asarray(b) == 0):
        raise ExecutionError(f"{op}: integer division by zero")


def _trunc_div_int(a, b):
    q = np.floor_divide(a, b)
    r = np.subtract(a, np.multiply(q, b))
    fix = (r != 0) & ((a < 0) != (b < 0))
    return np.where(fix, q + np.ones((), q.dtype), q).astype(q.dtype)


def _floor_div_float(a, b):
    # ATen's div_floor_floating: fmod-based, nearest integer correction
    with np.errstate(all="ignore"):
        mod = np.fmod(a, b)
        div = (a - mod) / b
        fix = (mod != 0) & ((b < 0) != (mod < 0))
        div = np.where(fix, div - 1, div)
        fl = np.floor(div)
        fl = np.where(div - fl > 0.5, fl + 1, fl)
        res = np.where(div == 0, np.copysign(np.zeros((), div.dtype), a / b), fl)
        return np.where(b == 0, a / b, res).astype(div.dtype)


def divide(self, other, rounding_mode=None):
    dtype = result_type(self, other)
    if rounding_mode is None:
        ft = float_type(dtype)
        a, b = to_dtype(self, ft), to_dtype(other, ft)
        return np.true_divide(a, b, dtype=ft)
    a, b = to_dtype(self, dtype), to_dtype(other, dtype)
    if dtype == BOOL:
        a, b = a.astype(np.int64), b.astype(np.int64)
    if rounding_mode == "trunc":
        if category(dtype) >= 2:
            return np.trunc(np.true_divide(a, b)).astype(dtype)
        _int_zero_check(b, "div")
        return _trunc_div_int(a, b).astype(dtype)
    if rounding_mode == "floor":
        if category(dtype) >= 2:
            return _floor_div_float(a, b)
        _int_zero_check(b, "div")
        return np.floor_divide(a, b).astype(dtype)
    raise ExecutionError(f"div: unknown rounding mode {rounding_mode!r} (expected None, 'trunc' or 'floor')")


@kernel("aten::div.out", "aten::div.Scalar_out")
def div_out(self, other, out=None):
    return write_out(out, divide(self, other))


@kernel("aten::div.out_mode", "aten::div.Scalar_mode_out")
def div_mode_out(self, other, rounding_mode=None, out=None):
    return write_out(out, divide(self, other, rounding_mode))


@kernel("aten::floor_divide.out", "aten::floor_divide.Scalar_out")
def floor_divide_out(self, other, out=None):
    return write_out(out, divide(self, other, "floor"))


@kernel("aten::remainder.Tensor_out", "aten::remainder.Scalar_out", "aten::remainder.Scalar_Tensor_out")
def remainder_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    if category(dtype) < 2:
        _int_zero_check(b, "remainder")
    return write_out(out, np.remainder(a, b))


@kernel("aten::fmod.Tensor_out", "aten::fmod.Scalar_out")
def fmod_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    if category(dtype) < 2:
        _int_zero_check(b, "fmod")
    return write_out(out, np.fmod(a, b))


def _int_pow(a, b):
    """ATen's integer pow: negative exponents give 0 except for bases 1 and -1."""
    neg = b < 0
    if not np.any(neg):
        return np.power(a, b)
    safe_b = np.where(neg, 0, b)
    res = np.power(a, safe_b)
    odd = (np.abs(b) % 2) == 1
    neg_val = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(res.dtype)
    return np.where(neg, neg_val, res)


@kernel("aten::pow.Tensor_Tensor_out", "aten::pow.Tensor_Scalar_out", "aten::pow.Scalar_out")
def pow_out(self, exponent, out=None):
    dtype, a, b = _binary_operands(self, exponent)
    if dtype == BOOL:
        return write_out(out, np.logical_or(a, np.logical_not(b)))
    if category(dtype) < 2:
        if not isinstance(exponent, np.ndarray) and exponent < 0:
            raise ExecutionError("pow: integers to negative integer powers are not allowed")
        return write_out(out, _int_pow(a, b))
    return write_out(out, np.power(a, b))


@kernel("aten::float_power.Tensor_Tensor_out", "aten::float_power.Tensor_Scalar_out",
        "aten::float_power.Scalar_out")
def float_power_out(self, exponent, out=None):
    return write_out(out, np.power(to_dtype(self, np.float64), to_dtype(exponent, np.float64)))


def _maximum(a, b):
    return np.maximum(a, b)


@kernel("aten::maximum.out")
def maximum_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    return write_out(out, np.maximum(a, b))


@kernel("aten::minimum.out")
def minimum_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    return write_out(out, np.minimum(a, b))


@kernel("aten::fmax.out")
def fmax_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    return write_out(out, np.fmax(a, b))


@kernel("aten::fmin.out")
def fmin_out(self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    return write_out(out, np.fmin(a, b))


@kernel("aten::atan2.out")
def atan2_out(self, other, out=None):
    ft = float_type(result_type(self, other))
    return write_out(out, np.arctan2(to_dtype(self, ft), to_dtype(other, ft)))


@kernel("aten::hypot.out")
def hypot_out(self, other, out=None):
    ft = float_type(result_type(self, other))
    return write_out(out, np.hypot(to_dtype(self, ft), to_dtype(other, ft)))


@kernel("aten::copysign.out", "aten::copysign.Scalar_out")
def copysign_out(self, other, out=None):
    ft = float_type(result_type(self, other))
    return write_out(out, np.copysign(to_dtype(self, ft), to_dtype(other, ft)))


# --------------------------------------------------------------------------- bitwise / logical / comparisons


def _make_bitwise(fn, name):
    def bitwise(self, other, out=None):
        dtype, a, b = _binary_operands(self, other)
        if category(dtype) >= 2:
            raise ExecutionError(f"{name}: only integral and bool tensors are supported, got {dtype}")
        return write_out(out, fn(a, b))
    bitwise.__name__ = name
    return bitwise


for _name, _fn in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                   "bitwise_xor": np.bitwise_xor}.items():
    for _ov in ("Tensor_out", "Scalar_out", "Scalar_Tensor_out"):
        register_kernel(f"aten::{_name}.{_ov}", _make_bitwise(_fn, _name))


def _make_logical(fn, name):
    def logical(self, other, out=None):
        return write_out(out, fn(self, other))
    logical.__name__ = name
    return logical


for _name, _fn in {"logical_and": np.logical_and, "logical_or": np.logical_or,
                   "logical_xor": np.logical_xor}.items():
    register_kernel(f"aten::{_name}.out", _make_logical(_fn, _name))


def _make_compare(fn, name):
    def compare(self, other, out=None):
        dtype, a, b = _binary_operands(self, other)
        return write_out(out, fn(a, b))
    compare.__name__ = name
    return compare


for _name, _fn in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                   "gt": np.greater, "ge": np.greater_equal}.items():
    for _ov in ("Tensor_out", "Scalar_out"):
        register_kernel(f"aten::{_name}.{_ov}", _make_compare(_fn, _name))


# --------------------------------------------------------------------------- where / clamp / activations


@kernel("aten::where.self_out")
def where_out(condition, self, other, out=None):
    dtype, a, b = _binary_operands(self, other)
    return write_out(out, np.where(condition.astype(BOOL, copy=False), a, b))


def _clamp(x, lo, hi, dtype):
    x = to_dtype(x, dtype)
    if lo is not None:
        x = np.maximum(x, to_dtype(lo, dtype))
    if hi is not None:
        x = np.minimum(x, to_dtype(hi, dtype))
    return x


@kernel("aten::clamp.out", "aten::clamp.Tensor_out")
def clamp_out(self, min=None, max=None, out=None):
    if min is None and max is None:
        raise ExecutionError("clamp: at least one of 'min' or 'max' must not be None")
    dtype = result_type(self, *(v for v in (min, max) if v is not None))
    return write_out(out, _clamp(self, min, max, dtype))


@kernel("aten::clamp_min.out", "aten::clamp_min.Tensor_out")
def clamp_min_out(self, min, out=None):
    return write_out(out, _clamp(self, min, None, result_type(self, min)))


@kernel("aten::clamp_max.out", "aten::clamp_max.Tensor_out")
def clamp_max_out(self, max, out=None):
    return write_out(out, _clamp(self, None, max, result_type(self, max)))


@kernel("aten::hardtanh.out")
def hardtanh_out(self, min_val=-1, max_val=1, out=None):
    return write_out(out, _clamp(self, min_val, max_val, self.dtype))


@kernel("aten::leaky_relu.out")
def leaky_relu_out(self, negative_slope=0.01, out=None):
    slope = to_dtype(negative_slope, self.dtype)
    return write_out(out, np.where(self > 0, self, self * slope))


@kernel("aten::elu.out")
def elu_out(self, alpha=1, scale=1, input_scale=1, out=None):
    dt = self.dtype
    neg = np.expm1(self * np.asarray(input_scale, dt)) * np.asarray(alpha, dt)
    return write_out(out, np.where(self > 0, self, neg) * np.asarray(scale, dt))


@kernel("aten::gelu.out")
def gelu_out(self, approximate="none", out=None):
    x = self
    if category(x.dtype) < 2:
        raise ExecutionError("gelu: only floating tensors are supported")
    compute = np.float64 if x.dtype == np.float64 else np.float32
    xc = x.astype(compute)
    if approximate == "tanh":
        k = np.sqrt(2.0 / np.pi)
        y = 0.5 * xc * (1 + np.tanh(k * (xc + 0.044715 * xc * xc * xc)))
    elif approximate == "none":
        y = 0.5 * xc * (1 + erf(xc * np.asarray(1 / np.sqrt(2.0), compute)))
    else:
        raise ExecutionError(f"gelu: unknown approximation {approximate!r} (expected 'none' or 'tanh')")
    return write_out(out, y)


@kernel("aten::hardsigmoid.out")
def hardsigmoid_out(self, out=None):
    return write_out(out, np.clip(self / 6 + 0.5, 0, 1).astype(self.dtype))


@kernel("aten::hardswish.out")
def hardswish_out(self, out=None):
    return write_out(out, (self * np.clip(self + 3, 0, 6) / 6).astype(self.dtype))


@kernel("aten::silu.out")
def silu_out(self, out=None):
    return write_out(out, self * sigmoid_values(self))


@kernel("aten::logit.out")
def logit_out(self, eps=None, out=None):
    x = to_dtype(self, float_type(self.dtype))
    if eps is not None:
        x = np.clip(x, eps, 1 - eps)
    return write_out(out, np.log(x / (1 - x)))


@kernel("aten::masked_fill.Scalar_out")
def masked_fill_scalar_out(self, mask, value, out=None):
    if isinstance(value, float) and category(self.dtype) < 2 and not np.isfinite(value):
        raise ExecutionError("masked_fill: value cannot be converted to the tensor's dtype without overflow")
    return write_out(out, np.where(mask.astype(BOOL, copy=False), to_dtype(value, self.dtype), self))


@kernel("aten::masked_fill.Tensor_out")
def masked_fill_tensor_out(self, mask, value, out=None):
    if value.ndim != 0:
        raise ExecutionError("masked_fill: the value tensor must be 0-dimensional")
    return write_out(out, np.where(mask.astype(BOOL, copy=False), value.astype(self.dtype), self))


__all__ = ["erf", "divide"]
