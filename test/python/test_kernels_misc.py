"""The non-Core kernels of runtime/kernels/misc.py against torch: one table of cases
(random seeded inputs; strided views; int/bool where torch accepts them)."""

import numpy as np
import pytest

from kernel_cases import assert_close, run


def _cases():
    rng = np.random.default_rng(7)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    i = lambda *s: rng.integers(-4, 5, s).astype(np.int64)  # noqa: E731
    b = lambda *s: rng.random(s) < 0.5  # noqa: E731
    zeros_some = f(4, 6)
    zeros_some[rng.random((4, 6)) < 0.3] = 0
    nan_y = f(4, 6)
    nan_y[0, 0] = np.nan
    srt = np.sort(f(9))
    return {
        "clip": ("aten::clip.out", [f(4, 6), -0.5, 0.5]),
        "clip_tensor": ("aten::clip.Tensor_out", [f(4, 6), f(1, 6), None]),
        "multiply_int_bool": ("aten::multiply.out", [i(4, 6), b(4, 6)]),
        "true_divide_int": ("aten::true_divide.out", [i(4, 6), i(4, 6) * 2 + 1]),
        "fix": ("aten::fix.out", [f(4, 6).T * 3]),
        "square_f": ("aten::square.out", [f(4, 6)]),
        "square_i": ("aten::square.out", [i(4, 6)]),
        "square_b": ("aten::square.out", [b(4, 6)]),
        "logaddexp": ("aten::logaddexp.out", [f(4, 6) * 30, f(1, 6)]),
        "logaddexp2": ("aten::logaddexp2.out", [f(4, 6) * 30, f(4, 1)]),
        "xlogy": ("aten::xlogy.OutTensor", [zeros_some, np.abs(nan_y)]),
        "xlogy_scalar_self": ("aten::xlogy.OutScalar_Self", [2.0, np.abs(f(4, 6))]),
        "xlogy_scalar_other": ("aten::xlogy.OutScalar_Other", [zeros_some, 3]),
        "xlog1py": ("aten::special_xlog1py.out", [zeros_some, np.abs(f(4, 6))]),
        "heaviside": ("aten::heaviside.out", [zeros_some, f(1, 6)]),
        "heaviside_int": ("aten::heaviside.out", [i(4, 6), i(4, 6)]),
        "nextafter": ("aten::nextafter.out", [f(4, 6), f(4, 6)]),
        "sinc": ("aten::sinc.out", [zeros_some]),
        "deg2rad": ("aten::deg2rad.out", [f(4, 6) * 180]),
        "rad2deg_int": ("aten::rad2deg.out", [i(4, 6)]),
        "i0": ("aten::i0.out", [f(4, 6) * 3]),
        "lerp_scalar": ("aten::lerp.Scalar_out", [f(4, 6), f(4, 6), 0.3]),
        "lerp_tensor": ("aten::lerp.Tensor_out", [f(4, 6), f(1, 6), np.linspace(-1, 2, 6).astype(np.float32)]),
        "addcmul": ("aten::addcmul.out", [f(4, 6), f(4, 1), f(1, 6), 0.5]),
        "addcmul_int": ("aten::addcmul.out", [i(4, 6), i(4, 6), i(4, 6), 2]),
        "addcdiv": ("aten::addcdiv.out", [f(4, 6), f(4, 6), np.abs(f(4, 6)) + 0.5, -2.0]),
        "threshold": ("aten::threshold.out", [f(4, 6), 0.1, 20.0]),
        "hardshrink": ("aten::hardshrink.out", [f(4, 6), 0.5]),
        "softshrink": ("aten::softshrink.out", [f(4, 6), 0.3]),
        "celu": ("aten::celu.out", [f(4, 6) * 3, 0.7]),
        "outer": ("aten::outer.out", [f(5), f(3)]),
        "outer_bool": ("aten::outer.out", [b(5), b(3)]),
        "addr": ("aten::addr.out", [f(5, 3), f(5), f(3), 0.5, 2.0]),
        "addr_beta0": ("aten::addr.out", [np.full((5, 3), np.nan, np.float32), f(5), f(3), 0, 1]),
        "addr_int": ("aten::addr.out", [i(5, 3), i(5), i(3), 2, 3]),
        "trace": ("aten::trace.out", [f(5, 4)]),
        "trace_int": ("aten::trace.out", [i(4, 4)]),
        "kron": ("aten::kron.out", [f(2, 3), f(3, 2)]),
        "linalg_cross": ("aten::linalg_cross.out", [f(4, 3), f(1, 3), -1]),
        "cross": ("aten::cross.out", [f(3, 5), f(3, 5), None]),
        "take": ("aten::take.out", [f(4, 6).T, np.array([[0, -1], [5, 23]])]),
        "take_along_dim": ("aten::take_along_dim.out", [f(4, 6), rng.integers(-6, 6, (4, 2)), 1]),
        "take_along_dim_bcast": ("aten::take_along_dim.out", [f(4, 6), rng.integers(0, 4, (2, 1)), 0]),
        "take_along_dim_flat": ("aten::take_along_dim.out", [f(4, 6), rng.integers(0, 24, (5,)), None]),
        "index_copy": ("aten::index_copy.out", [f(5, 4), 0, np.array([4, 0, 2]), f(3, 4)]),
        "count_nonzero": ("aten::count_nonzero.dim_IntList_out", [zeros_some, [1]]),
        "count_nonzero_all": ("aten::count_nonzero.out", [zeros_some, None]),
        "bucketize": ("aten::bucketize.Tensor_out", [f(4, 6), srt, False, False]),
        "bucketize_right_int32": ("aten::bucketize.Tensor_out", [np.concatenate([srt, srt[:3]]), srt, True, True]),
        "bucketize_scalar": ("aten::bucketize.Scalar_out", [0.1, srt, False, False]),
        "searchsorted": ("aten::searchsorted.Tensor_out", [srt, f(7), False, False, None, None]),
        "searchsorted_2d_side": ("aten::searchsorted.Tensor_out", [np.sort(f(3, 8), axis=1), f(3, 4), False, False,
                                                                    "right", None]),
        "searchsorted_sorter": ("aten::searchsorted.Tensor_out", [srt[::-1].copy(), f(5), False, False, None,
                                                                   np.arange(8, -1, -1)]),
        "tril_indices": ("aten::tril_indices.out", [4, 6, 1]),
        "triu_indices": ("aten::triu_indices.out", [5, 3, -1]),
        "diag_embed": ("aten::diag_embed.out", [f(2, 3), 1, -2, -1]),
        "diag_embed_dims": ("aten::diag_embed.out", [f(2, 3), -1, 0, 2]),
        "rot90": ("aten::rot90.out", [f(3, 4, 2), 1, [0, 1]]),
        "rot90_neg": ("aten::rot90.out", [f(3, 4, 2), -3, [2, 0]]),
        "new_zeros": ("aten::new_zeros.out", [f(2), [3, 4]]),
        "new_full": ("aten::new_full.out", [f(2), [2, 5], 1.5]),
        "vector_norm": ("aten::linalg_vector_norm.out", [f(4, 6), 2, [1], False, None]),
        "vector_norm_inf": ("aten::linalg_vector_norm.out", [f(4, 6), float("inf"), None, True, None]),
        "vector_norm_p3": ("aten::linalg_vector_norm.out", [f(4, 6), 3, [0], False, None]),
        "vector_norm_p0": ("aten::linalg_vector_norm.out", [zeros_some, 0, [1], False, None]),
        "norm_scalar": ("aten::norm.Scalar_out", [f(4, 6), 1]),
        "norm_dim": ("aten::norm.out", [f(4, 6), 2, [0], True]),
        "channel_shuffle": ("aten::channel_shuffle.out", [f(2, 6, 3, 3), 3]),
        "upsample_nearest1d": ("aten::upsample_nearest1d.out", [f(2, 3, 5), [12], None]),
        "upsample_nearest3d": ("aten::upsample_nearest3d.out", [f(1, 2, 3, 4, 5), [5, 3, 9], None, None, None]),
        "upsample_linear1d": ("aten::upsample_linear1d.out", [f(2, 3, 5), [12], False, None]),
        "upsample_linear1d_ac": ("aten::upsample_linear1d.out", [f(2, 3, 5), [3], True, None]),
        "upsample_trilinear3d": ("aten::upsample_trilinear3d.out", [f(1, 2, 3, 4, 5), [5, 3, 9], False, None, None,
                                                                    None]),
    }


@pytest.mark.parametrize("case", sorted(_cases()))
def test_misc_kernel_against_torch(case):
    name, args = _cases()[case]
    ours, expected, _ = run(name, args)
    assert_close(ours, expected, rtol=2e-5, atol=2e-5)
