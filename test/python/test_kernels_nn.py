"""NN kernels against torch: convolution (1d/2d/3d, groups, stride, padding, dilation,
transposed), pooling, normalization, softmax, embedding, upsampling, grid sampling."""

import numpy as np
import pytest
import torch

from kernel_cases import Case, check_case, param_list

FLOATS = ("float32", "float64")
TOL = dict(rtol=1e-4, atol=1e-5)


def _conv_cases():
    c = []
    # (input shape, weight shape, bias, stride, padding, dilation, groups)
    for tag, x, w, b, st, pad, dil, grp in [
        ("2d", (2, 3, 9, 8), (4, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], 1),
        ("2d_stride_pad", (1, 4, 13, 7), (6, 2, 3, 2), True, [2, 3], [1, 0], [1, 1], 2),
        ("2d_dilation", (2, 2, 11, 11), (3, 2, 3, 3), False, [1, 2], [2, 1], [2, 3], 1),
        ("depthwise", (2, 6, 7, 7), (6, 1, 3, 3), True, [1, 1], [1, 1], [1, 1], 6),
        ("1d", (2, 3, 17), (5, 3, 4), True, [2], [1], [1], 1),
        ("3d", (1, 2, 5, 6, 7), (3, 2, 2, 3, 2), True, [1, 2, 1], [0, 1, 1], [1, 1, 2], 1),
        ("1x1", (2, 8, 5, 5), (4, 8, 1, 1), False, [1, 1], [0, 0], [1, 1], 1),
        ("empty_batch", (0, 3, 5, 5), (2, 3, 3, 3), True, [1, 1], [0, 0], [1, 1], 1),
    ]:
        def build(g, x=x, w=w, b=b, st=st, pad=pad, dil=dil, grp=grp):
            return [g.t(x), g.t(w), g.t((w[0],)) if b else None, st, pad, dil, False, [0] * len(st), grp]
        c.append(Case("aten::convolution.out", build, dtypes=FLOATS + ("float16",) if tag == "2d" else ("float32",),
                      tag=tag, **TOL))
    # transposed: weight (Cin, Cout/groups, *K)
    for tag, x, w, st, pad, dil, opad, grp in [
        ("t2d", (2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], [1, 0], 1),
        ("t2d_groups", (1, 4, 4, 5), (4, 2, 2, 3), [1, 2], [0, 1], [2, 1], [0, 1], 2),
        ("t1d", (2, 3, 7), (3, 5, 4), [3], [2], [1], [2], 1),
        ("t3d", (1, 2, 3, 4, 3), (2, 2, 2, 2, 3), [2, 1, 2], [0, 0, 1], [1, 1, 1], [1, 0, 0], 1),
    ]:
        def build(g, x=x, w=w, st=st, pad=pad, dil=dil, opad=opad, grp=grp):
            return [g.t(x), g.t(w), g.t((w[1] * grp,)), st, pad, dil, True, opad, grp]
        c.append(Case("aten::convolution.out", build, tag=tag, **TOL))
    return c


def _pool_cases():
    c = []
    for tag, shape, k, s, p, d, ceil in [
        ("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], [1, 1], False),
        ("pad_stride", (1, 2, 9, 7), [3, 3], [2, 1], [1, 1], [1, 1], False),
        ("ceil", (1, 2, 8, 7), [3, 2], [2, 2], [1, 0], [1, 1], True),
        ("dilation", (1, 2, 10, 10), [2, 3], [1, 2], [1, 1], [2, 2], False),
        ("3d_input", (3, 7, 7), [3, 3], [], [0, 0], [1, 1], False),
    ]:
        c.append(Case("aten::max_pool2d_with_indices.out", lambda g, sh=shape, k=k, s=s, p=p, d=d, ce=ceil:
                      [g.distinct(sh), k, s, p, d, ce], dtypes=FLOATS if tag == "basic" else ("float32",), tag=tag))
    c.append(Case("aten::max_pool2d_with_indices.out", lambda g: [g.t((1, 2, 6, 6), "int64"), [2, 2], [2, 2]],
                  dtypes=("int64",), tag="int", layouts=("C",)))
    c.append(Case("aten::max_pool3d_with_indices.out", lambda g: [g.distinct((1, 2, 5, 6, 5)), [2, 3, 2], [2, 2, 1],
                                                                  [1, 1, 0], [1, 1, 1], False]))
    for tag, shape, k, s, p, ceil, cip, div in [
        ("basic", (2, 3, 8, 9), [2, 2], [2, 2], [0, 0], False, True, None),
        ("pad_incl", (1, 2, 9, 7), [3, 3], [2, 1], [1, 1], False, True, None),
        ("pad_excl", (1, 2, 9, 7), [3, 3], [2, 1], [1, 1], False, False, None),
        ("ceil", (1, 2, 8, 7), [3, 2], [2, 2], [1, 0], True, True, None),
        ("ceil_excl", (1, 2, 8, 7), [3, 2], [2, 2], [1, 1], True, False, None),
        ("divisor", (1, 2, 6, 6), [3, 3], [3, 3], [0, 0], False, True, 4),
    ]:
        c.append(Case("aten::avg_pool2d.out", lambda g, sh=shape, k=k, s=s, p=p, ce=ceil, ci=cip, dv=div:
                      [g.t(sh), k, s, p, ce, ci, dv], dtypes=FLOATS if tag == "basic" else ("float32",), tag=tag,
                      **TOL))
    c.append(Case("aten::avg_pool3d.out", lambda g: [g.t((1, 2, 5, 6, 5)), [2, 3, 2], [2, 2, 1], [1, 1, 0], False,
                                                     False, None], **TOL))
    for shape, out in (((2, 3, 8, 8), [4, 4]), ((1, 2, 7, 9), [3, 4]), ((1, 2, 5, 5), [1, 1]), ((2, 6, 6), [7, 3])):
        c.append(Case("aten::_adaptive_avg_pool2d.out", lambda g, sh=shape, o=out: [g.t(sh), o], tag=str(out), **TOL))
    c.append(Case("aten::_adaptive_avg_pool3d.out", lambda g: [g.t((1, 2, 5, 6, 7)), [2, 3, 4]], **TOL))
    return c


def _norm_cases():
    c = []
    c.append(Case("aten::native_layer_norm.out", lambda g: [g.t((2, 5, 8)), [8], g.t((8,)), g.t((8,)), 1e-5],
                  dtypes=FLOATS + ("float16",), **TOL))
    c.append(Case("aten::native_layer_norm.out", lambda g: [g.t((3, 4, 6)), [4, 6], None, None, 1e-6], tag="2dims",
                  **TOL))
    c.append(Case("aten::native_layer_norm.out", lambda g: [g.t((0, 4)), [4], None, None, 1e-5], tag="empty",
                  layouts=("C",)))
    c.append(Case("aten::native_group_norm.out", lambda g: [g.t((2, 6, 4, 3)), g.t((6,)), g.t((6,)), 2, 6, 12, 3,
                                                            1e-5], dtypes=FLOATS, **TOL))
    c.append(Case("aten::_native_batch_norm_legit_no_training.out",
                  lambda g: [g.t((2, 3, 4, 5)), g.t((3,)), g.t((3,)), g.t((3,)), np.abs(g.t((3,))) + 0.5, 0.1, 1e-5],
                  dtypes=FLOATS, **TOL))
    c.append(Case("aten::_native_batch_norm_legit_no_training.out",
                  lambda g: [g.t((4, 3)), None, None, g.t((3,)), np.abs(g.t((3,))) + 0.5, 0.1, 1e-5], tag="2d",
                  **TOL))
    c.append(Case("aten::_native_batch_norm_legit.no_stats_out",
                  lambda g: [g.t((4, 3, 5)), g.t((3,)), g.t((3,)), True, 0.1, 1e-5], **TOL))
    for dim in (1, -1, 0):
        c.append(Case("aten::_softmax.out", lambda g, d=dim: [g.t((3, 4, 5)) * 10, d, False], dtypes=FLOATS + ("float16",),
                      tag=str(dim),
                      **TOL))
        c.append(Case("aten::_log_softmax.out", lambda g, d=dim: [g.t((3, 4, 5)) * 10, d, False], dtypes=FLOATS,
                      tag=str(dim), **TOL))
    c.append(Case("aten::_softmax.out", lambda g: [np.array([[-np.inf, 0.0, 1.0], [1e4, -1e4, 0.0]], g.dtype), 1,
                                                   False], layouts=("C",), tag="extreme", **TOL))
    c.append(Case("aten::embedding.out", lambda g: [g.t((10, 4)), g.idx((3, 5), 10)], dtypes=FLOATS + ("int64",)))
    c.append(Case("aten::embedding.out", lambda g: [g.t((10, 4)), g.idx((), 10)], tag="0d", layouts=("C",)))
    c.append(Case("aten::native_dropout.out", lambda g: [g.t((3, 4)), 0.5, False]))
    return c


def _resize_cases():
    c = []
    for tag, shape, size, scales in [
        ("size_up", (1, 2, 4, 5), [8, 7], None), ("size_down", (2, 1, 9, 8), [4, 3], None),
        ("scale", (1, 2, 3, 5), None, [2.0, 1.5]), ("scale_frac", (1, 1, 7, 6), None, [0.5, 1.7]),
    ]:
        c.append(Case("aten::upsample_nearest2d.vec_out", lambda g, sh=shape, s=size, sc=scales: [g.t(sh), s, sc],
                      dtypes=("float32", "float64") if tag == "size_up" else ("float32",), tag=tag))
        for ac in (False, True):
            c.append(Case("aten::upsample_bilinear2d.vec_out",
                          lambda g, sh=shape, s=size, sc=scales, ac=ac: [g.t(sh), s, ac, sc], tag=f"{tag}-{ac}",
                          **TOL))
    for mode in (0, 1, 2):
        for pad in (0, 1, 2):
            for ac in (False, True):
                c.append(Case("aten::grid_sampler_2d.out",
                              lambda g, m=mode, p=pad, ac=ac: [g.t((2, 3, 5, 6)), g.t((2, 4, 7, 2)) * 0.8, m, p, ac],
                              tag=f"m{mode}-p{pad}-{ac}", layouts=("C", "T"), **TOL))
    c.append(Case("aten::col2im.out", lambda g: [g.t((2, 3 * 4, 8)), [5, 6], [2, 2], [1, 1], [0, 1], [2, 2]], **TOL))
    c.append(Case("aten::im2col.out", lambda g: [g.t((2, 3, 5, 6)), [2, 3], [1, 1], [1, 0], [1, 2]]))
    return c


CASES = _conv_cases() + _pool_cases() + _norm_cases() + _resize_cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_nn_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_convolution_is_fast_enough():
    # im2col + one matmul: a ResNet-ish layer well under a second on a shared core
    import time
    from etc.runtime.kernels import get_kernel
    x = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((64, 64, 3, 3)).astype(np.float32)
    out = np.empty((1, 64, 56, 56), np.float32)
    start = time.perf_counter()
    get_kernel("aten::convolution.out")(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, out)
    assert time.perf_counter() - start < 2.0
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)


EXTRA_CASES = [
    Case("aten::upsample_bilinear2d.out", lambda g: [g.t((1, 2, 3, 5)), [6, 8], False, 2.0, 1.6], **TOL),
    Case("aten::upsample_bilinear2d.out", lambda g: [g.t((1, 2, 3, 5)), [6, 8], True], tag="ac", **TOL),
    Case("aten::upsample_nearest2d.out", lambda g: [g.t((1, 2, 3, 5)), [7, 8]]),
    Case("aten::linear.out", lambda g: [g.t((2, 3, 5)), g.t((4, 5)), g.t((4,))], dtypes=FLOATS + ("float16",), **TOL),
    Case("aten::linear.out", lambda g: [g.t((3, 5)), g.t((4, 5))], tag="nobias", **TOL),
    Case("aten::var_mean.correction_out", lambda g: [g.t((3, 4, 5)), [1], 1, True], dtypes=FLOATS, **TOL),
    Case("aten::glu.out", lambda g: [g.t((3, 8)), -1], **TOL),
    Case("aten::softplus.out", lambda g: [g.t((3, 8)) * 10, 2, 5], **TOL),
    Case("aten::mish.out", lambda g: [g.t((3, 8)) * 5], **TOL),
    Case("aten::softmax.int_out", lambda g: [g.t((3, 8)), 1, None], **TOL),
    Case("aten::log_softmax.int_out", lambda g: [g.t((3, 8)), 0, None], **TOL),
    Case("aten::narrow_copy.out", lambda g: [g.t((5, 8)), 1, -5, 3], dtypes=("float32", "int64")),
    Case("aten::unfold_copy.out", lambda g: [g.t((4, 9)), 1, 3, 2], dtypes=("float32", "int64")),
    Case("aten::bitwise_left_shift.Tensor_out", lambda g: [g.t((4, 5)), g.t((5,), low=0, high=8)],
         dtypes=("int64", "int32")),
    Case("aten::bitwise_right_shift.Tensor_Scalar_out", lambda g: [g.t((4, 5)) * 100, 3], dtypes=("int64", "int8")),
    Case("aten::erfinv.out", lambda g: [g.t((5, 7), low=-0.999, high=0.999)], dtypes=FLOATS, rtol=1e-6, atol=1e-6),
    Case("aten::erfc.out", lambda g: [g.t((5, 7), low=-3, high=3)], dtypes=FLOATS, rtol=1e-6, atol=1e-7),
]


@pytest.mark.parametrize("case, dtype, layout", param_list(EXTRA_CASES))
def test_extra_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_quantize_dequantize_per_tensor_and_channel():
    from etc.runtime.kernels import get_kernel
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    q = get_kernel("quantized_decomposed::quantize_per_tensor.out")(x, 0.02, 3, -128, 127, 1, np.zeros((3, 4), np.int8))
    expected = torch.clamp(torch.round(torch.from_numpy(x) / 0.02) + 3, -128, 127).to(torch.int8).numpy()
    np.testing.assert_array_equal(q, expected)
    dq = get_kernel("quantized_decomposed::dequantize_per_tensor.out")(q, 0.02, 3, -128, 127, 1, None,
                                                                        np.zeros((3, 4), np.float32))
    np.testing.assert_allclose(dq, (expected.astype(np.float32) - 3) * 0.02, rtol=1e-6)
    scales, zps = np.array([0.1, 0.05, 0.2], np.float64), np.array([0, 1, -1], np.int64)
    qc = get_kernel("quantized_decomposed::quantize_per_channel.out")(x, scales, zps, 0, -128, 127, 1,
                                                                       np.zeros((3, 4), np.int8))
    exp_c = torch.fake_quantize_per_channel_affine(torch.from_numpy(x), torch.from_numpy(scales).float(),
                                                   torch.from_numpy(zps).int(), 0, -128, 127)
    deq = get_kernel("quantized_decomposed::dequantize_per_channel.out")(qc, scales, zps, 0, -128, 127, 1, None,
                                                                          np.zeros((3, 4), np.float32))
    np.testing.assert_allclose(deq, exp_c.numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_byte_dequantizes_rows_per_row_and_per_group():
    from etc.runtime.kernels import get_kernel
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, size=(10, 8)).astype(np.int8)
    idx = np.array([[1, 9], [0, 4]])
    scales, zps = rng.random(10).astype(np.float32), rng.integers(-3, 3, size=10)
    ours = get_kernel("quantized_decomposed::embedding_byte.out")(w, scales, zps, -128, 127, idx,
                                                                  np.zeros((2, 2, 8), np.float32))
    np.testing.assert_allclose(ours, (w[idx].astype(np.float32) - zps[idx][..., None]) * scales[idx][..., None],
                               rtol=1e-6)
    gscales = rng.random((10, 2)).astype(np.float32)
    ours = get_kernel("quantized_decomposed::embedding_byte.out")(w, gscales, None, -128, 127, idx,
                                                                  np.zeros((2, 2, 8), np.float32))
    np.testing.assert_allclose(ours, w[idx].astype(np.float32) * np.repeat(gscales, 4, axis=1)[idx], rtol=1e-6)


@pytest.mark.parametrize("width", [3, 5, 6, 7])
def test_normalizing_rows_of_equal_values_gives_exactly_the_bias(width):
    """A row of equal values (an expanded column, the model fuzzer's find) has variance 0, and
    rsqrt(eps) magnifies any error in its mean ~300 times: the mean must be exactly the value, as
    torch's is (a float32 sum of 3 equal x rounds 3x; the mean was then off by an ulp)."""
    from etc.runtime.kernels import get_kernel
    x = torch.randn(64, 1).expand(64, width).contiguous()
    bias = torch.randn(width)
    weight = torch.rand(width) + 0.5
    expected = torch.nn.functional.layer_norm(x, [width], weight, bias, 1e-5)
    ours = get_kernel("aten::native_layer_norm.out")(
        x.numpy(), [width], weight.numpy(), bias.numpy(), 1e-5,
        np.zeros((64, width), np.float32), np.zeros((64, 1), np.float32), np.zeros((64, 1), np.float32))[0]
    np.testing.assert_array_equal(ours, expected.numpy())
    np.testing.assert_array_equal(ours, np.broadcast_to(bias.numpy(), ours.shape))
    planes = x[:8].reshape(2, 4, width, 1).expand(2, 4, width, 2).contiguous()  # each plane one value
    expected = torch.nn.functional.group_norm(planes, 4)  # a group per plane
    ours = get_kernel("aten::native_group_norm.out")(
        planes.numpy(), None, None, 2, 4, width * 2, 4, 1e-5,
        np.zeros((2, 4, width, 2), np.float32), np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32))[0]
    np.testing.assert_array_equal(ours, expected.numpy())
