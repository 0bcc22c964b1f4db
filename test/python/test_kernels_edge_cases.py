"""Kernel edge cases found by differential fuzzing against torch's OpInfo samples: ATen's
integer arange, reflection/replication padding with negative (cropping) pads and empty
batches, 0-d tensors through the index_* family and kthvalue, im2col of an empty batch,
bool scatter_reduce without self."""

import numpy as np
import pytest
import torch

from kernel_cases import assert_close, run
from etc.runtime.kernels import get_kernel

ARANGES = [(0.0, -8.000001, -4.0), (1.0, 5.000001, 2.0), (0.5, 5, 1.5), (-0.5, 5.5, 1.7), (2.9, -3.2, -0.9),
           (0, 10, 3), (10, 0, -3), (0, 0, 1), (3, -5, -1), (0, 1, 0.3)]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("start,end,step", ARANGES)
def test_arange_matches_aten_for_integral_and_floating_outputs(start, end, step, dtype):
    try:
        expected = torch.arange(start, end, step, dtype=dtype).numpy()
    except (RuntimeError, ValueError):
        with pytest.raises(Exception, match="nonzero|inconsistent"):
            get_kernel("aten::arange.start_out")(start, end, step, np.empty(64, torch.empty(0, dtype=dtype).numpy().dtype))
        return
    out = np.empty(expected.size + 3, expected.dtype)  # an upper-bound planned buffer
    ours = get_kernel("aten::arange.start_out")(start, end, step, out)
    assert ours.shape == expected.shape and np.shares_memory(ours, out) or not ours.size
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


PADS = [(-2, 3, 1, -1), (4, -3, 2, 2), (0, 0, -4, 4), (-3, -2, 0, 1), (1, 2, 3, 0)]


@pytest.mark.parametrize("kind", ["reflection", "replication"])
@pytest.mark.parametrize("nd", [1, 2])
@pytest.mark.parametrize("pad", PADS)
def test_reflection_and_replication_pad_with_cropping_pads(kind, nd, pad):
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 6)).astype(np.float32)
    x = x if nd == 2 else x[0]
    pad = list(pad[:2 * nd])
    ours, expected, _ = run(f"aten::{kind}_pad{nd}d.out", [x[..., ::-1], pad])  # a negatively strided view
    assert_close(ours, expected)


@pytest.mark.parametrize("kind", ["reflection", "replication"])
def test_pad_of_an_empty_batch(kind):
    x = np.zeros((0, 3, 3, 3), np.float32)
    ours, expected, _ = run(f"aten::{kind}_pad2d.out", [x, [0, 2, 0, 1]])
    assert_close(ours, expected)


def test_reflection_pad_refuses_padding_as_large_as_the_dim():
    with pytest.raises(Exception, match="smaller than the input"):
        get_kernel("aten::reflection_pad1d.out")(np.zeros((2, 3), np.float32), [3, 0], np.zeros((2, 6), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_index_family_on_zero_dim_tensors(dtype):
    x = np.asarray(3, dtype)
    idx = np.array([0], np.int64)
    for name, args in [("aten::index_select.out", [x, 0, idx]),
                       ("aten::index_fill.int_Scalar_out", [x, 0, idx, 1]),
                       ("aten::index_add.out", [x, -1, idx, np.asarray(1, dtype)])]:
        if name == "aten::index_add.out" and dtype == np.bool_:
            continue
        ours, expected, _ = run(name, args)
        assert_close(ours, expected)


def test_kthvalue_of_a_zero_dim_tensor_and_k_out_of_range():
    ours, expected, _ = run("aten::kthvalue.values", [np.asarray(2.5, np.float32), 1, 0, False])
    assert_close(ours, expected)
    with pytest.raises(Exception, match="out of range"):
        get_kernel("aten::kthvalue.values")(np.zeros((2, 3), np.float32), 4, 1, False,
                                            np.zeros(2, np.float32), np.zeros(2, np.int64))


def test_im2col_of_an_empty_batch():
    ours, expected, _ = run("aten::im2col.out", [np.zeros((0, 1, 5, 5), np.float32), [2, 2], [1, 1], [0, 0], [1, 2]])
    assert_close(ours, expected)


@pytest.mark.parametrize("reduce", ["amin", "amax"])
@pytest.mark.parametrize("include_self", [False, True])
def test_bool_scatter_reduce_min_max(reduce, include_self):
    rng = np.random.default_rng(1)
    x, src = rng.random((6, 5)) < 0.5, rng.random((4, 5)) < 0.5
    index = rng.integers(0, 6, (4, 5))
    ours, expected, _ = run("aten::scatter_reduce.two_out", [x, 0, index, src, reduce, include_self])
    assert_close(ours, expected)


def test_index_add_alpha_wraps_in_unsigned_dtypes():
    rng = np.random.default_rng(2)
    x, src = rng.integers(0, 200, (5, 4)).astype(np.uint8), rng.integers(0, 200, (3, 4)).astype(np.uint8)
    ours, expected, _ = run("aten::index_add.out", [x, 0, np.array([4, 0, 4]), src, -1])
    assert_close(ours, expected)


@pytest.mark.parametrize("size,align_corners", [((130, 130), False), ((3, 3), True), ((23, 9), False)])
def test_uint8_bilinear_upsampling_rounds_each_pass_as_aten(size, align_corners):
    """ATen's uint8 kernel interpolates width then height, rounding after each; its fixed-point
    weights may still move a rare element by one."""
    x = np.random.default_rng(3).integers(0, 256, (1, 3, 270, 270) if size[0] == 130 else (2, 3, 10, 17)).astype(np.uint8)
    ours, expected, _ = run("aten::upsample_bilinear2d.vec_out", [x, list(size), align_corners, None])
    diff = np.abs(ours[0].astype(np.int64) - expected[0])
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def _misc_cases():
    rng = np.random.default_rng(4)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    idx = lambda high, *s: rng.integers(0, high, s)  # noqa: E731
    return {
        "index_put_impl_accumulate": ("aten::_index_put_impl.out",
                                      [f(5, 4), [idx(5, 6), None], f(6, 4), True, False]),
        "index_put_impl_replace": ("aten::_index_put_impl.out", [f(5, 4), [np.array([1, 3]), np.array([0, 2])],
                                                                 f(2), False, False]),
        "avg_pool1d": ("aten::avg_pool1d.out", [f(2, 3, 11), [3], [2], [1], True, False]),
        "avg_pool1d_ceil": ("aten::avg_pool1d.out", [f(2, 3, 10), [4], [3], [0], False, True]),
        "adaptive_avg_pool2d": ("aten::adaptive_avg_pool2d.out", [f(2, 3, 7, 9), [3, 4]]),
        "adaptive_avg_pool3d": ("aten::_adaptive_avg_pool3d.out", [f(1, 2, 5, 6, 7), [2, 3, 4]]),
        "adaptive_max_pool2d": ("aten::adaptive_max_pool2d.out", [f(2, 3, 7, 9), [3, 4]]),
        "scatter_value_reduce_add": ("aten::scatter.value_reduce_out", [f(4, 5), 1, idx(5, 4, 3), 2.5, "add"]),
        "scatter_value_reduce_mul": ("aten::scatter.value_reduce_out", [f(4, 5), 0, idx(4, 2, 5), -1.5, "multiply"]),
        "cdist": ("aten::_cdist_forward.out", [f(2, 5, 3), f(2, 4, 3), 2.0, None]),
        "cdist_p1": ("aten::_cdist_forward.out", [f(5, 3), f(4, 3), 1.0, None]),
        "pdist": ("aten::_pdist_forward.out", [f(6, 3), 2.0]),
    }


@pytest.mark.parametrize("case", sorted(_misc_cases()))
def test_less_common_kernels_against_torch(case):
    name, args = _misc_cases()[case]
    ours, expected, _ = run(name, args)
    assert_close(ours, expected, rtol=1e-5, atol=1e-5)


def test_float32_erf_and_gelu_track_torch_over_the_whole_range():
    """The float32 erf is a rational fit evaluated in float32 blocks: within 4e-7 of torch
    everywhere, exactly +-1 from |x| = 3.92, NaN/inf/-0 kept; strided and 0-d inputs too."""
    x = np.concatenate([np.linspace(-7, 7, 20001), np.logspace(-9, 0.7, 300), -np.logspace(-9, 0.7, 300),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.92, -3.92, 3.9]]).astype(np.float32)
    for name, args in [("aten::erf.out", [x]), ("aten::erf.out", [x[::3]]), ("aten::erf.out", [np.asarray(0.3, np.float32)]),
                       ("aten::gelu.out", [x[:20600].reshape(-1, 4)[:, ::2], "none"])]:
        ours, expected, _ = run(name, args)
        # gelu's 1 + erf(x) cancels for x << 0: a few ulps of erf become ~1e-6 absolute
        assert_close(ours, expected, rtol=4e-7, atol=4e-7 if "erf" in name else 2e-6)
    ours, _, _ = run("aten::erf.out", [x])
    assert np.all(np.abs(ours[0][np.abs(x) >= 3.92]) == 1)


@pytest.mark.parametrize("shape,size", [((2, 3, 10), [4]), ((3, 7), [3]), ((1, 2, 5), [5])])
def test_adaptive_avg_pool1d(shape, size):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    ours, expected, _ = run("aten::adaptive_avg_pool1d.out", [x, size])
    assert_close(ours, expected)


def test_sym_is_contiguous():
    from etc.runtime.kernels import get_kernel
    assert get_kernel("aten::sym_is_contiguous.default")(np.zeros((2, 3)), None) is True
    assert get_kernel("aten::sym_is_contiguous.default")(np.zeros((2, 3)).T, None) is False


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("k,s,p,d,ceil", [([3, 3], [2, 2], [1, 1], [1, 1], False), ([2, 3], [1, 2], [0, 1], [2, 1], True),
                                          ([3, 3], [3, 3], [0, 0], [1, 1], True)])
def test_max_pool_indices_with_ties_and_nans(dtype, k, s, p, d, ceil):
    """The tap scan: the first maximum of a window wins a tie, the last NaN wins over everything."""
    rng = np.random.default_rng(6)
    x = rng.integers(0, 3, (2, 3, 11, 10)).astype(dtype)  # many ties
    if dtype == np.float32:
        x[rng.random(x.shape) < 0.05] = np.nan
    ours, expected, _ = run("aten::max_pool2d_with_indices.out", [x[..., ::-1], k, s, p, d, ceil])
    assert_close(ours, expected)
