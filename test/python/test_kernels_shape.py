"""View-copy and layout kernels against torch (view_copy, permute_copy, slice_copy, split, cat,
pads, ...), plus creation ops, on strided/transposed inputs and several dtypes."""

import numpy as np
import pytest
import torch

from kernel_cases import Case, check_case, param_list

ALL = ("float32", "int64", "bool")


def _cases():
    c = []
    add = c.append
    add(Case("aten::view_copy.out", lambda g: [g.t((4, 6)), [3, -1, 2]], dtypes=ALL))
    add(Case("aten::view_copy.out", lambda g: [g.t((0, 6)), [3, 0, 2]], layouts=("C",), tag="empty"))
    add(Case("aten::view_copy.out", lambda g: [g.t(()), [1, 1]], layouts=("C",), tag="0d"))
    add(Case("aten::permute_copy.out", lambda g: [g.t((2, 3, 5)), [2, 0, -2]], dtypes=ALL))
    add(Case("aten::expand_copy.out", lambda g: [g.t((3, 1)), [2, 3, 4]], dtypes=ALL))
    add(Case("aten::expand_copy.out", lambda g: [g.t((3, 1)), [-1, 5]], tag="-1"))
    for args in ([1, 1, 5, 2], [0, -3, None, 1], [-1, 2, 100, 3], [1, 4, 2, 1], [0, None, None, 1]):
        add(Case("aten::slice_copy.Tensor_out", lambda g, a=args: [g.t((5, 7)), *a], dtypes=("float32", "int64"),
                 tag=str(args)))
    add(Case("aten::select_copy.int_out", lambda g: [g.t((4, 5, 6)), 1, -2], dtypes=ALL))
    add(Case("aten::unsqueeze_copy.out", lambda g: [g.t((4, 5)), -1], dtypes=ALL))
    add(Case("aten::unsqueeze_copy.out", lambda g: [g.t(()), 0], layouts=("C",), tag="0d"))
    add(Case("aten::squeeze_copy.dim_out", lambda g: [g.t((4, 1, 5)), 1]))
    add(Case("aten::squeeze_copy.dim_out", lambda g: [g.t((4, 3, 5)), 1], tag="not1"))
    add(Case("aten::squeeze_copy.dims_out", lambda g: [g.t((1, 4, 1, 5)), [0, 2, 3]]))
    add(Case("aten::squeeze_copy.out", lambda g: [g.t((1, 4, 1, 1))]))
    add(Case("aten::alias_copy.out", lambda g: [g.t((3, 4))], dtypes=ALL))
    add(Case("aten::detach_copy.out", lambda g: [g.t((3, 4))]))
    add(Case("aten::t_copy.out", lambda g: [g.t((3, 4))], dtypes=ALL))
    add(Case("aten::t_copy.out", lambda g: [g.t((4,))], tag="1d"))
    add(Case("aten::transpose_copy.int_out", lambda g: [g.t((2, 3, 4)), 0, -1], dtypes=ALL))
    add(Case("aten::split_with_sizes_copy.out", lambda g: [g.t((7, 4)), [2, 0, 5], 0], dtypes=("float32", "int64")))
    add(Case("aten::split_copy.Tensor_out", lambda g: [g.t((3, 13)), 5, 1], dtypes=("float32", "bool")))
    add(Case("aten::unbind_copy.int_out", lambda g: [g.t((3, 4, 2)), 1]))
    add(Case("aten::diagonal_copy.out", lambda g: [g.t((4, 5, 3)), 1, 0, 1]))
    add(Case("aten::diagonal_copy.out", lambda g: [g.t((4, 5, 3)), -2, 2, 0], tag="neg"))
    add(Case("aten::as_strided_copy.out", lambda g: [g.t((4, 6)), [3, 3], [6, 2], 1], layouts=("C",)))
    add(Case("aten::clone.out", lambda g: [g.t((3, 4))], dtypes=ALL))
    add(Case("aten::copy.out", lambda g: [g.t((3, 4)), g.t((4,))], dtypes=("float32", "int64")))
    add(Case("aten::cat.out", lambda g: [[g.t((2, 3)), g.t((4, 3)), g.t((0, 3))], 0], dtypes=ALL))
    add(Case("aten::cat.out", lambda g: [[g.t((2, 3)), g.t((2, 1))], -1], tag="dim-1"))
    add(Case("aten::cat.out", lambda g: [[g.t((2, 3)), g.t((0,))], 0], layouts=("C",), tag="legacy_empty"))
    add(Case("aten::cat.out", lambda g: [[g.t((2, 3)), g.t((2, 3), "int64")], 1], tag="promote"))
    add(Case("aten::stack.out", lambda g: [[g.t((2, 3)), g.t((2, 3))], 1]))
    add(Case("aten::flip.out", lambda g: [g.t((3, 4, 5)), [0, -1]], dtypes=ALL))
    add(Case("aten::roll.out", lambda g: [g.t((3, 4)), [1, -2], [0, 1]]))
    add(Case("aten::repeat.out", lambda g: [g.t((2, 3)), [2, 1, 3]], dtypes=ALL))
    add(Case("aten::tril.out", lambda g: [g.t((4, 5)), 1]))
    add(Case("aten::triu.out", lambda g: [g.t((4, 5)), -1]))
    add(Case("aten::constant_pad_nd.out", lambda g: [g.t((2, 3, 4)), [1, 2, 0, 1], 1.5], dtypes=("float32", "int64")))
    add(Case("aten::constant_pad_nd.out", lambda g: [g.t((2, 3, 4)), [-1, 2, 1, -1]], tag="crop"))
    for nd in (1, 2, 3):
        shape = (2, 3) + (5,) * nd
        pad = [1, 2] * nd
        add(Case(f"aten::reflection_pad{nd}d.out", lambda g, s=shape, p=pad: [g.t(s), p]))
        if nd > 1:
            add(Case(f"aten::replication_pad{nd}d.out", lambda g, s=shape, p=pad: [g.t(s), p]))
    add(Case("aten::pixel_shuffle.out", lambda g: [g.t((2, 8, 3, 3)), 2]))
    add(Case("aten::pixel_unshuffle.out", lambda g: [g.t((2, 2, 4, 6)), 2]))
    # creation (no dtype argument in the out form: the out tensor's dtype is the result's)
    add(Case("aten::full.out", lambda g: [[2, 3], 1.5], ref=lambda size, v: torch.full(size, v), layouts=("C",)))
    add(Case("aten::full.out", lambda g: [[2, 3], 7], ref=lambda size, v: torch.full(size, v), layouts=("C",),
             tag="int"))
    add(Case("aten::full_like.out", lambda g: [g.t((2, 3)), 4], ref=lambda x, v, mf=None: torch.full_like(x, v),
             dtypes=("float32", "int64")))
    add(Case("aten::zeros.out", lambda g: [[3, 0]], ref=lambda s: torch.zeros(s), layouts=("C",)))
    add(Case("aten::ones_like.out", lambda g: [g.t((2, 3))], ref=lambda x, mf=None: torch.ones_like(x), dtypes=ALL))
    add(Case("aten::scalar_tensor.out", lambda g: [2.5], ref=lambda s: torch.scalar_tensor(s), layouts=("C",)))
    add(Case("aten::fill.Scalar_out", lambda g: [g.t((2, 3)), 3], dtypes=("float32", "int64", "bool")))
    add(Case("aten::arange.start_out", lambda g: [1, 11, 3], ref=lambda a, b, s: torch.arange(a, b, s),
             layouts=("C",)))
    add(Case("aten::arange.start_out", lambda g: [0.5, 2.0, 0.1], ref=lambda a, b, s: torch.arange(a, b, s),
             layouts=("C",), tag="float"))
    add(Case("aten::arange.start_out", lambda g: [10, -3, -2], ref=lambda a, b, s: torch.arange(a, b, s),
             layouts=("C",), tag="neg"))
    add(Case("aten::arange.out", lambda g: [7], ref=lambda e: torch.arange(e), layouts=("C",)))
    for dt in ("float32", "int64", "float16", "bool"):
        add(Case("aten::_to_copy.out", lambda g, dt=dt: [g.t((3, 4)) * 3],
                 ref=lambda x, nb=False, mf=None, dt=dt: x.to(getattr(torch, dt)), dtypes=("float32", "int64"),
                 tag=f"to_{dt}"))
    return c


CASES = _cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_shape_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_view_copy_rejects_bad_sizes():
    from etc.errors import ExecutionError
    from etc.runtime.kernels import get_kernel
    with pytest.raises(ExecutionError, match="invalid for input of size 6"):
        get_kernel("aten::view_copy.out")(np.zeros((2, 3)), [4, 2], np.zeros((4, 2)))
    with pytest.raises(ExecutionError, match="only one dimension"):
        get_kernel("aten::view_copy.out")(np.zeros((2, 3)), [-1, -1], np.zeros((6,)))
    with pytest.raises(ExecutionError, match="out of range"):
        get_kernel("aten::select_copy.int_out")(np.zeros((2, 3)), 1, 3, np.zeros((2,)))
