"""Portable kernels of the quantization ops of PT2E and torchao programs.

Named as ExecuTorch's quantized kernel library names them (`quantized_decomposed::
quantize_per_tensor.out`, `...Tensor_out`), so that an ExecuTorch quantized portable program
runs here and ours run there; the ops ExecuTorch has no kernel for (torchao's affine ops, the
per-channel-group ops, `tensor2` overloads: `etc_only` in `dialects/quantized_ops.py`) use the
same naming scheme. Each computes what the op's reference implementation in torch.ao
(`torch/ao/quantization/fx/_decomposed.py`) or torchao (`quant_primitives.py`) computes, in
the same float precision and order (multiply by the reciprocal scale in float32, round half to
even, add the zero point, clamp), so that results are bit-exact where torch's are defined
(tests compare against torch on random inputs).
"""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import dtype_arg, normalize_dim, write_out
from etc.runtime.kernels.registry import kernel

_F32 = np.float32


def _scalar(t, cast):
    """A 0-d/1-element scale or zero-point tensor as a Python number."""
    t = np.asarray(t)
    if t.size != 1:
        raise ExecutionError(f"expected a single quantization parameter, got a tensor of shape {list(t.shape)}")
    return cast(t.reshape(-1)[0])


def _quantize(x, inv_scale, zero_point, quant_min, quant_max):
    """clamp(round(x * (1/scale)) + zero_point): x and the reciprocal in float32, as torch."""
    q = np.round(x.astype(_F32) * inv_scale) + zero_point
    return np.clip(q, int(quant_min), int(quant_max))


# ----------------------------------------------------------------- per tensor
@kernel("quantized_decomposed::quantize_per_tensor.out")
def quantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out=None):
    return write_out(out, _quantize(input, _F32(1.0 / float(scale)), int(zero_point), quant_min, quant_max))


@kernel("quantized_decomposed::quantize_per_tensor.Tensor_out")
def quantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out=None):
    return quantize_per_tensor_out(input, _scalar(scale, float), _scalar(zero_point, int), quant_min, quant_max,
                                   dtype, out)


@kernel("quantized_decomposed::quantize_per_tensor.tensor2_out")
def quantize_per_tensor_tensor2_out(input, scale, zero_point, quant_min, quant_max, dtype, out=None):
    return quantize_per_tensor_out(input, _scalar(scale, float), _scalar(zero_point, int), _scalar(quant_min, int),
                                   _scalar(quant_max, int), dtype, out)


@kernel("quantized_decomposed::dequantize_per_tensor.out")
def dequantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None, out=None):
    return write_out(out, (input.astype(np.int32) - int(zero_point)).astype(_F32) * _F32(scale))


@kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out")
def dequantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None,
                                     out=None):
    return dequantize_per_tensor_out(input, _scalar(scale, float), _scalar(zero_point, int), quant_min, quant_max,
                                     dtype, out_dtype, out)


@kernel("quantized_decomposed::dequantize_per_tensor.tensor2_out")
def dequantize_per_tensor_tensor2_out(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None,
                                      out=None):
    return dequantize_per_tensor_out(input, _scalar(scale, float), _scalar(zero_point, int), quant_min, quant_max,
                                     dtype, out_dtype, out)


def _affine_qparams(min_val, max_val, quant_min, quant_max, eps, symmetric, dtype=None):
    """torch.ao's `determine_qparams` (per tensor): scale in float64 from float32 min/max."""
    min_neg = np.minimum(min_val, _F32(0))
    max_pos = np.maximum(max_val, _F32(0))
    if symmetric:
        max_pos = np.maximum(-min_neg, max_pos)
        scale = np.maximum(max_pos / _F32((quant_max - quant_min) / 2), _F32(eps))
        zero_point = np.zeros_like(scale, dtype=np.int64)
        if dtype is not None and np.dtype(dtype) == np.uint8:
            zero_point[...] = 128
    else:
        scale = np.maximum((max_pos - min_neg) / _F32(quant_max - quant_min), _F32(eps))
        zero_point = quant_min - np.round(min_neg / scale).astype(np.int32)
        zero_point = np.clip(zero_point, quant_min, quant_max).astype(np.int64)
    return scale.astype(np.float64), zero_point


def _choose_qparams(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out, symmetric):
    if input.size == 0:
        raise ExecutionError("choose_qparams: the input is empty (no range to quantize)")
    x = input.astype(_F32)
    scale, zero_point = _affine_qparams(x.min(), x.max(), int(quant_min), int(quant_max), float(eps), symmetric,
                                        dtype_arg(dtype))
    return write_out(scale_out, np.reshape(scale, (1,))), write_out(zero_point_out, np.reshape(zero_point, (1,)))


@kernel("quantized_decomposed::choose_qparams.Tensor_out")
def choose_qparams_tensor_out(input, quant_min, quant_max, eps, dtype, scale_out=None, zero_point_out=None):
    return _choose_qparams(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out, symmetric=False)


@kernel("quantized_decomposed::choose_qparams_symmetric.Tensor_out")
def choose_qparams_symmetric_tensor_out(input, quant_min, quant_max, eps, dtype, scale_out=None,
                                        zero_point_out=None):
    return _choose_qparams(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out, symmetric=True)


# ---------------------------------------------------------------- per channel
def _channel_shape(input, axis):
    shape = [1] * input.ndim
    shape[axis] = input.shape[axis]
    return shape


@kernel("quantized_decomposed::quantize_per_channel.out")
def quantize_per_channel_out(input, scales, zero_points, axis, quant_min, quant_max, dtype, out=None):
    axis = normalize_dim(axis, input.ndim)
    shape = _channel_shape(input, axis)
    inv = (1.0 / scales.astype(np.float64)).astype(_F32).reshape(shape)
    return write_out(out, _quantize(input, inv, zero_points.reshape(shape).astype(np.int64), quant_min, quant_max))


@kernel("quantized_decomposed::dequantize_per_channel.out")
def dequantize_per_channel_out(input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None,
                               out=None):
    axis = normalize_dim(axis, input.ndim)
    shape = _channel_shape(input, axis)
    zp = zero_points.reshape(shape).astype(np.int32) if zero_points is not None else 0
    return write_out(out, (input.astype(np.int32) - zp).astype(_F32) * scales.astype(_F32).reshape(shape))


# ------------------------------------------------------ per token / per group
@kernel("quantized_decomposed::choose_qparams_per_token_asymmetric.out")
def choose_qparams_per_token_asymmetric_out(input, dtype, scale_out=None, zero_point_out=None):
    """XNNPACK's per-row rule (torch.ao's `_choose_qparams_per_token_asymmetric_impl`)."""
    qmin, qmax = -128, 127
    x = input.astype(_F32)
    min_neg = np.minimum(x.min(axis=-1, keepdims=True), _F32(0))
    max_pos = np.maximum(x.max(axis=-1, keepdims=True), _F32(0))
    scale = np.maximum((max_pos - min_neg) / _F32(qmax - qmin), np.finfo(_F32).eps).astype(_F32)
    descaled_min, descaled_max = min_neg / scale, max_pos / scale
    zero_point = np.where((qmin + descaled_min) + (qmax + descaled_max) > 0, qmin - descaled_min,
                          qmax - descaled_max)
    zero_point = np.round(np.clip(zero_point, qmin, qmax))
    return write_out(scale_out, scale.astype(np.float64)), write_out(zero_point_out, zero_point.astype(np.int64))


@kernel("quantized_decomposed::quantize_per_token.out")
def quantize_per_token_out(input, scales, zero_points, quant_min, quant_max, dtype, out=None):
    # torch: input.mul(1.0 / scales) with float64 scales promotes to float64.
    q = np.round(input.astype(np.float64) * (1.0 / scales.astype(np.float64)) + zero_points.astype(np.float64))
    return write_out(out, np.clip(q, int(quant_min), int(quant_max)))


@kernel("quantized_decomposed::dequantize_per_token.out")
def dequantize_per_token_out(input, scales, zero_points, quant_min, quant_max, dtype, output_dtype, out=None):
    res = (input.astype(np.int64) - zero_points.astype(np.int64)) * scales.astype(np.float64)
    return write_out(out, res.astype(dtype_arg(output_dtype, _F32)))


def _groups(input, scales, group_size, op):
    group_size = int(group_size)
    if input.ndim != 2:
        raise ExecutionError(f"{op}: the input must be 2-dimensional, got shape {list(input.shape)}")
    if group_size > input.shape[-1] and scales.shape[-1] == 1:
        group_size = input.shape[-1]
    if group_size <= 1 or input.shape[-1] % group_size:
        raise ExecutionError(f"{op}: group size {group_size} does not divide the row length {input.shape[-1]}")
    return input.reshape(-1, group_size), scales.reshape(-1, 1)


@kernel("quantized_decomposed::quantize_per_channel_group.out")
def quantize_per_channel_group_out(input, scales, zero_points, quant_min, quant_max, dtype, group_size, out=None):
    grouped, sc = _groups(input, scales, group_size, "quantize_per_channel_group")
    q = np.round(grouped.astype(_F32) * (1.0 / sc.astype(_F32)) + zero_points.reshape(-1, 1).astype(_F32))
    return write_out(out, np.clip(q, int(quant_min), int(quant_max)).reshape(input.shape))


@kernel("quantized_decomposed::dequantize_per_channel_group.out")
def dequantize_per_channel_group_out(input, scales, zero_points, quant_min, quant_max, dtype, group_size,
                                     output_dtype, out=None):
    grouped, sc = _groups(input, scales, group_size, "dequantize_per_channel_group")
    zp = zero_points.reshape(-1, 1) if zero_points is not None else np.int32(0)
    res = (grouped - zp) * sc
    return write_out(out, res.reshape(input.shape).astype(dtype_arg(output_dtype, _F32)))


# ------------------------------------------------------------------- torchao
def _blocks(shape, block_size, op):
    """torchao's `_get_reduction_params`: the input viewed as (blocks, block) per dim, and the dims reduced."""
    if len(block_size) != len(shape):
        raise ExecutionError(f"{op}: block_size {list(block_size)} does not match the input rank {len(shape)}")
    view, reduce = [], []
    for size, block in zip(shape, block_size):
        block = int(block)
        if block != size and block > 1:
            if size % block:
                raise ExecutionError(f"{op}: block size {block} does not divide the dimension {size}")
            view += [size // block, block]
            reduce.append(len(view) - 1)
        else:
            view.append(size)
            if block != 1:
                reduce.append(len(view) - 1)
    kept = [1 if i in reduce else s for i, s in enumerate(view)]
    return view, tuple(reduce), kept


_QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767),
           np.dtype(np.int32): (-2 ** 31, 2 ** 31 - 1)}


def _qrange(dtype, quant_min, quant_max, op):
    dtype = dtype_arg(dtype)
    if dtype not in _QRANGE:
        raise ExecutionError(f"{op}: quantized dtype {dtype} is not supported (int8, uint8, int16, int32)")
    lo, hi = _QRANGE[dtype]
    return (lo if quant_min is None else int(quant_min)), (hi if quant_max is None else int(quant_max))


@kernel("torchao::quantize_affine.out")
def quantize_affine_out(input, block_size, scale, zero_point, output_dtype, quant_min=None, quant_max=None,
                        out=None):
    lo, hi = _qrange(output_dtype, quant_min, quant_max, "quantize_affine")
    view, _, kept = _blocks(input.shape, block_size, "quantize_affine")
    x = input.reshape(view)
    inv = (1.0 / scale.reshape(kept)).astype(np.result_type(x.dtype, scale.dtype))
    q = np.round(x * inv)
    if zero_point is not None and zero_point.size:
        q = q + zero_point.reshape(kept)
    return write_out(out, np.clip(q, lo, hi).reshape(input.shape))


@kernel("torchao::dequantize_affine.out")
def dequantize_affine_out(input, block_size, scale, zero_point, input_dtype, quant_min=None, quant_max=None,
                          output_dtype=6, out=None):
    view, _, kept = _blocks(input.shape, block_size, "dequantize_affine")
    dtype = dtype_arg(output_dtype, _F32)
    x = input.reshape(view).astype(dtype)
    if zero_point is not None:
        x = x - zero_point.reshape(kept).astype(dtype)
    return write_out(out, (x * scale.reshape(kept)).astype(dtype).reshape(input.shape))


@kernel("torchao::choose_qparams_affine.out")
def choose_qparams_affine_out(input, mapping_type, block_size, target_dtype, quant_min=None, quant_max=None,
                              eps=None, scale_dtype=None, zero_point_dtype=None, keepdim=False, scale_out=None,
                              zero_point_out=None):
    lo, hi = _qrange(target_dtype, quant_min, quant_max, "choose_qparams_affine")
    view, reduce, _ = _blocks(input.shape, block_size, "choose_qparams_affine")
    x = input.reshape(view)
    reduce = reduce or None  # as torch.amin: an empty dim list reduces everything
    zero = np.zeros((), x.dtype)
    min_neg = np.minimum(x.min(axis=reduce, keepdims=keepdim), zero)
    max_pos = np.maximum(x.max(axis=reduce, keepdims=keepdim), zero)
    eps = np.finfo(x.dtype).tiny if eps is None else eps
    if mapping_type == "SYMMETRIC":
        scale = np.maximum(-min_neg, max_pos) / x.dtype.type((hi - lo) / 2)
        zero_point = np.full_like(scale, int((hi + lo + 1) / 2))
        scale = np.maximum(scale, x.dtype.type(eps))
    elif mapping_type == "SYMMETRIC_NO_CLIPPING_ERR":
        smin, smax = min_neg / x.dtype.type(lo), max_pos / x.dtype.type(hi)
        scale = np.maximum(np.where(smin > smax, smin, smax), x.dtype.type(eps))
        zero_point = np.full_like(scale, int((hi + lo + 1) / 2))
    elif mapping_type == "ASYMMETRIC":
        scale = np.maximum((max_pos - min_neg) / x.dtype.type(hi - lo), x.dtype.type(eps))
        zero_point = np.clip(lo - np.round(min_neg / scale), lo, hi)
    else:
        raise ExecutionError(f"choose_qparams_affine: mapping type {mapping_type!r} is not supported "
                             "(SYMMETRIC, SYMMETRIC_NO_CLIPPING_ERR, ASYMMETRIC)")
    if keepdim:  # torchao: one entry per block, in the input's rank
        blocks = [int(size) // int(block) for size, block in zip(input.shape, block_size)]
        scale, zero_point = scale.reshape(blocks), zero_point.reshape(blocks)
    return write_out(scale_out, scale), write_out(zero_point_out, zero_point)


# ------------------------------------------------------ ExecuTorch's fused ones
@kernel("quantized_decomposed::add.out")
def add_out(a, a_scale, a_zero_point, a_quant_min, a_quant_max, b, b_scale, b_zero_point, b_quant_min, b_quant_max,
            out_scale, out_zero_point, out_quant_min, out_quant_max, out=None):
    """ExecuTorch's quantized add: dequantize both, add in float32, requantize."""
    x = (a.astype(np.int32) - int(a_zero_point)).astype(_F32) * _F32(a_scale)
    y = (b.astype(np.int32) - int(b_zero_point)).astype(_F32) * _F32(b_scale)
    return write_out(out, _quantize(x + y, _F32(1.0 / float(out_scale)), int(out_zero_point), out_quant_min,
                                    out_quant_max))


@kernel("quantized_decomposed::embedding_byte.out")
def embedding_byte_out(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                       out=None):
    return write_out(out, _embedding_byte(weight, weight_scales, weight_zero_points, indices, None))


@kernel("quantized_decomposed::embedding_byte.dtype_out")
def embedding_byte_dtype_out(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                             dtype=None, out=None):
    return write_out(out, _embedding_byte(weight, weight_scales, weight_zero_points, indices, dtype))


def _embedding_byte(weight, scales, zero_points, indices, dtype):
    """Rows of an int8 table dequantized per row (scales (R,)) or per group (scales (R, G))."""
    idx = indices.astype(np.int64)
    rows = weight[idx].astype(_F32)
    sc = scales.astype(_F32)
    sc = sc[:, None] if sc.ndim == 1 else sc
    groups = sc.shape[1]
    d = weight.shape[1]
    if d % groups:
        raise ExecutionError(f"embedding_byte: {groups} scale groups don't divide the embedding size {d}")
    sc = np.repeat(sc, d // groups, axis=1)[idx]
    if zero_points is not None:
        zp = zero_points.astype(_F32)
        zp = zp[:, None] if zp.ndim == 1 else zp
        rows = rows - np.repeat(zp, d // groups, axis=1)[idx]
    res = rows * sc
    return res.astype(dtype_arg(dtype)) if dtype is not None else res


# ------------------------------------------- etc's folded ops (passes/fold_quantized.py)
def pack_int4(values: np.ndarray) -> np.ndarray:
    """int8 values in [-8, 7], shape (N, K) with K even -> uint8 (N, K/2): element 2j in the
    low nibble, 2j+1 in the high one (two's complement nibbles)."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), values.dtype)], axis=-1)
    nibbles = (values.astype(np.int16) & 0xF).astype(np.uint8)
    return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed: np.ndarray, k: int) -> np.ndarray:
    """Inverse of `pack_int4`: uint8 (N, ceil(K/2)) -> int8 (N, K)."""
    low = (packed & 0xF).astype(np.int8)
    high = (packed >> 4).astype(np.int8)
    both = np.stack([low, high], axis=-1).reshape(packed.shape[:-1] + (-1,))[..., :k]
    return np.where(both > 7, both - 16, both).astype(np.int8)


def int4_column_sums(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """C[n] = sum_k w[n, k] * scales[n, k / group] of int4 weights packed as `pack_int4` ((N, K/2)
    uint8, K = 2 * its columns) with float32 group scales (N, G): each group's integer sum (exact)
    times its scale in float64, added group after group in order, then float32. The one definition
    the cpu target's 8da4w lowering and its blob loaders (etc's runtime, and the C++ ExecuTorch
    backend, runtime/executorch_backend/cpu_backend.cpp) compute, to the same bits: hence the
    explicit order (numpy's `sum` adds 8 or more terms pairwise, which a loop in C++ would not)."""
    n, groups = scales.shape
    k = 2 * packed.shape[1]
    w = unpack_int4(packed.view(np.uint8), k).astype(np.float64)
    products = w.reshape(n, groups, k // groups).sum(axis=2) * scales.astype(np.float64)
    total = np.zeros(n)
    for g in range(groups):
        total = total + products[:, g]
    return total.astype(np.float32)


# Reference kernels: each computes what the dq -> op -> q computation it replaced computes
# (integer accumulation exact in float64, then one requantization), so that the folded
# program and the unfolded one agree (within a rounding tie); int8 back ends implement them fast.
def _requantize(y, output_scale, output_zero_point, output_min, output_max):
    return _quantize(y.astype(_F32), _F32(1.0 / float(output_scale)), int(output_zero_point), output_min, output_max)


def _centered(x, zero_point):
    return x.astype(np.float64) - int(zero_point)


@kernel("etc_quantized::conv2d.out")
def etc_quantized_conv2d_out(input, input_scale, input_zero_point, weight, weight_scales, bias, stride, padding,
                             dilation, groups, output_scale, output_zero_point, output_min, output_max, out=None):
    from etc.runtime.kernels.convolution import conv_nd

    acc = conv_nd(_centered(input, input_zero_point), weight.astype(np.float64), None, stride, padding, dilation,
                  groups)
    y = acc * (float(input_scale) * weight_scales.astype(np.float64).reshape(1, -1, 1, 1))
    if bias is not None:
        y = y + bias.astype(np.float64).reshape(1, -1, 1, 1)
    return write_out(out, _requantize(y, output_scale, output_zero_point, output_min, output_max))


@kernel("etc_quantized::linear.out")
def etc_quantized_linear_out(input, input_scale, input_zero_point, weight, weight_scales, bias, output_scale,
                             output_zero_point, output_min, output_max, out=None):
    acc = _centered(input, input_zero_point) @ weight.astype(np.float64).T
    y = acc * (float(input_scale) * weight_scales.astype(np.float64))
    if bias is not None:
        y = y + bias.astype(np.float64)
    return write_out(out, _requantize(y, output_scale, output_zero_point, output_min, output_max))


@kernel("etc_quantized::add.out")
def etc_quantized_add_out(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                          output_min, output_max, out=None):
    x = (a.astype(np.int32) - int(a_zero_point)).astype(_F32) * _F32(a_scale)
    y = (b.astype(np.int32) - int(b_zero_point)).astype(_F32) * _F32(b_scale)
    return write_out(out, _requantize(x + y, output_scale, output_zero_point, output_min, output_max))


def _dynamic_activation(x, granularity, eps):
    """The activation as its dynamic quantization sees it: quantized per tensor (PT2E's
    choose_qparams) or per row (torchao's ASYMMETRIC [1, K] blocks), dequantized back."""
    x = x.astype(_F32)
    if granularity == "none":
        return x
    if granularity == "per_tensor":
        scale, zp = _affine_qparams(x.min(), x.max(), -128, 127, float(eps), symmetric=False)
        scale, zp = float(scale), int(zp)
        q = _quantize(x, _F32(1.0 / scale), zp, -128, 127)
        return ((q - zp).astype(_F32) * _F32(scale)).astype(_F32)
    if granularity == "per_row":
        lo = np.minimum(x.min(axis=-1, keepdims=True), _F32(0))
        hi = np.maximum(x.max(axis=-1, keepdims=True), _F32(0))
        scale = np.maximum((hi - lo) / _F32(255), np.finfo(_F32).tiny).astype(_F32)
        zp = np.clip(-128 - np.round(lo / scale), -128, 127).astype(_F32)
        q = np.clip(np.round(x * (_F32(1) / scale)) + zp, -128, 127)
        return ((q - zp) * scale).astype(_F32)
    raise ExecutionError(f"linear_dynamic: activation granularity {granularity!r} is not supported "
                         "(none, per_tensor, per_row)")


@kernel("etc_quantized::linear_dynamic.out")
def etc_quantized_linear_dynamic_out(input, activation_granularity, activation_eps, weight, weight_bits, group_size,
                                     weight_scales, weight_zero_points, bias, out=None):
    k = input.shape[-1]
    w = unpack_int4(weight, k) if int(weight_bits) == 4 else weight
    n = w.shape[0]
    groups = k // int(group_size)
    wf = w.astype(_F32).reshape(n, groups, int(group_size))
    if weight_zero_points is not None:
        wf = wf - weight_zero_points.astype(_F32).reshape(n, groups, 1)
    wf = (wf * weight_scales.astype(_F32).reshape(n, groups, 1)).reshape(n, k)
    y = _dynamic_activation(input, activation_granularity, activation_eps) @ wf.T
    if bias is not None:
        y = y + bias.astype(_F32)
    return write_out(out, y)
