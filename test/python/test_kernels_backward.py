"""Backward kernels of the Core ATen opset against torch's own backward ops."""

import numpy as np
import pytest

from kernel_cases import Case, check_case, param_list

TOL = dict(rtol=1e-4, atol=1e-5)


def _conv_bwd(x, w, st, pad, dil, transposed, opad, groups, out_shape):
    def build(g):
        return [g.t(out_shape), g.t(x), g.t(w), [out_shape[1]], st, pad, dil, transposed, opad, groups,
                [True, True, True]]
    return build


def _cases():
    c = []
    c.append(Case("aten::convolution_backward.out",
                  _conv_bwd((2, 4, 7, 6), (6, 2, 3, 3), [2, 1], [1, 1], [1, 1], False, [0, 0], 2, (2, 6, 4, 6)),
                  dtypes=("float32", "float64"), tag="grouped", **TOL))
    c.append(Case("aten::convolution_backward.out",
                  _conv_bwd((1, 3, 9), (4, 3, 3), [1], [2], [2], False, [0], 1, (1, 4, 9)), tag="1d_dilated", **TOL))
    c.append(Case("aten::convolution_backward.out",
                  _conv_bwd((2, 4, 4, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1, (2, 3, 8, 9)),
                  tag="transposed", **TOL))
    c.append(Case("aten::avg_pool2d_backward.grad_input",
                  lambda g: [g.t((2, 3, 5, 4)), g.t((2, 3, 9, 8)), [3, 3], [2, 2], [1, 1], False, True, None],
                  **TOL))
    c.append(Case("aten::avg_pool2d_backward.grad_input",
                  lambda g: [g.t((1, 2, 5, 4)), g.t((1, 2, 8, 7)), [3, 2], [2, 2], [1, 1], True, False, None],
                  tag="ceil_excl", **TOL))
    c.append(Case("aten::_adaptive_avg_pool2d_backward.out", lambda g: [g.t((2, 3, 3, 4)), g.t((2, 3, 7, 9))], **TOL))
    c.append(Case("aten::embedding_dense_backward.out", lambda g: [g.t((3, 5, 4)), g.idx((3, 5), 10), 10, 2, False],
                  **TOL))
    c.append(Case("aten::embedding_dense_backward.out", lambda g: [g.t((3, 5, 4)), g.idx((3, 5), 10), 10, -1, True],
                  tag="freq", **TOL))
    c.append(Case("aten::native_layer_norm_backward.out",
                  lambda g: _ln_args(g, (3, 4, 6), [6], True), dtypes=("float32", "float64"), **TOL))
    c.append(Case("aten::native_layer_norm_backward.out",
                  lambda g: _ln_args(g, (3, 4, 6), [4, 6], False), tag="no_affine", **TOL))
    c.append(Case("aten::native_group_norm_backward.out", _gn_args, dtypes=("float32", "float64"), **TOL))
    return c


def _ln_args(g, shape, norm, affine):
    import torch
    x = g.t(shape)
    w, b = (g.t(tuple(norm)), g.t(tuple(norm))) if affine else (None, None)
    _, mean, rstd = torch.ops.aten.native_layer_norm(torch.from_numpy(np.ascontiguousarray(x)), norm,
                                                     None if w is None else torch.from_numpy(w),
                                                     None if b is None else torch.from_numpy(b), 1e-5)
    return [g.t(shape), x, norm, mean.numpy(), rstd.numpy(), w, b, [True, affine, affine]]


def _gn_args(g):
    import torch
    x = g.t((2, 6, 3, 4))
    w = g.t((6,))
    _, mean, rstd = torch.ops.aten.native_group_norm(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(w),
                                                     None, 2, 6, 12, 3, 1e-5)
    return [g.t((2, 6, 3, 4)), x, mean.numpy(), rstd.numpy(), w, 2, 6, 12, 3, [True, True, True]]


CASES = _cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_backward_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_max_pool2d_backward_routes_gradients_to_the_argmax():
    import torch
    from etc.runtime.kernels import get_kernel
    rng = np.random.default_rng(0)
    x = rng.permutation(2 * 3 * 8 * 7).reshape(2, 3, 8, 7).astype(np.float32)
    args = ([3, 3], [2, 2], [1, 1], [1, 1], True)
    vals, idx = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), *args)
    grad = rng.standard_normal(tuple(vals.shape)).astype(np.float32)
    expected = torch.ops.aten.max_pool2d_with_indices_backward(torch.from_numpy(grad), torch.from_numpy(x), *args, idx)
    ours = get_kernel("aten::max_pool2d_with_indices_backward.grad_input")(grad, x, *args, idx.numpy(),
                                                                         np.zeros(x.shape, np.float32))
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-6, atol=1e-6)
