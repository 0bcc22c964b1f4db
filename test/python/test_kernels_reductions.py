"""Reductions, scans, sort/topk and matrix products against torch."""

import numpy as np
import pytest

from kernel_cases import Case, check_case, param_list

FLOATS = ("float32", "float64")


def _cases():
    c = []
    add = c.append
    for dim, keep in (([1], False), ([0, 2], True), ([], False), ([-1], True)):
        tag = f"{dim}-{keep}"
        add(Case("aten::sum.IntList_out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)), d, k],
                 dtypes=FLOATS + ("int64", "int32", "bool"), tag=tag, rtol=1e-5, atol=1e-5))
        add(Case("aten::mean.out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)), d, k], dtypes=FLOATS + ("float16",),
                 tag=tag))
        add(Case("aten::amax.out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)), d, k], dtypes=FLOATS + ("int64", "bool"),
                 tag=tag))
        add(Case("aten::amin.out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)), d, k], dtypes=("float32", "int64"), tag=tag))
        add(Case("aten::var.correction_out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)), d, 1, k], dtypes=FLOATS, tag=tag))
        add(Case("aten::any.dims_out", lambda g, d=dim, k=keep: [g.t((3, 4, 5)) > 1.0, d, k], tag=tag))
    add(Case("aten::sum.IntList_out", lambda g: [g.t((3, 4)), [1], False, 6], dtypes=("int64",), tag="dtype"))
    add(Case("aten::sum.IntList_out", lambda g: [g.t((0, 4)), [0], False], tag="empty"))
    add(Case("aten::sum.IntList_out", lambda g: [g.t((6, 7)), None], dtypes=("float16",), tag="half"))
    add(Case("aten::mean.out", lambda g: [g.t((3, 4)), [1], False, 7], dtypes=("int64", "float32"), tag="dtype"))
    add(Case("aten::mean.dtype_out", lambda g: [g.t((3, 4)), None]))
    add(Case("aten::prod.int_out", lambda g: [g.t((3, 5)), 1, True], dtypes=FLOATS + ("int64",)))
    add(Case("aten::prod.out", lambda g: [g.t((3, 5)) / 2 + 1], dtypes=("float32",)))
    add(Case("aten::var.correction_out", lambda g: [g.t((3, 4)), [1], 0, False], tag="corr0"))
    add(Case("aten::var.correction_out", lambda g: [g.t((3, 4)), None, 2, True], tag="corr2"))
    add(Case("aten::var.out", lambda g: [g.t((3, 4)), [0], False, True]))
    add(Case("aten::std.correction_out", lambda g: [g.t((3, 4)), [1], 1, False]))
    for name in ("max.dim_max", "min.dim_min"):
        add(Case(f"aten::{name}", lambda g: [g.distinct((4, 5, 6)), 1, False], dtypes=FLOATS + ("int64",)))
        add(Case(f"aten::{name}", lambda g: [g.distinct((4, 5)), -1, True], tag="keep"))
        add(Case(f"aten::{name}", lambda g: [np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 2.0, 1.0, 0.0]], g.dtype), 1],
                 layouts=("C",), tag="nan_ties"))
    for name in ("argmax.out", "argmin.out"):
        add(Case(f"aten::{name}", lambda g: [g.t((4, 7)), 1, False], dtypes=("float32", "int64")))
        add(Case(f"aten::{name}", lambda g: [g.t((4, 7)), None, False], tag="flat"))
        add(Case(f"aten::{name}", lambda g: [np.array([[3, 1, 3, 1]], g.dtype), 1, True], dtypes=("int64",),
                 layouts=("C",), tag="ties"))
    add(Case("aten::any.all_out", lambda g: [g.t((3, 4))], dtypes=("bool", "float32")))
    add(Case("aten::any.out", lambda g: [g.t((3, 4)), 1, True], dtypes=("bool", "int64")))
    add(Case("aten::all.all_out", lambda g: [g.t((3, 4))], dtypes=("bool", "float32")))
    add(Case("aten::all.dims_out", lambda g: [g.t((3, 4), "bool"), [0], False]))
    add(Case("aten::cumsum.out", lambda g: [g.t((4, 6)), 1], dtypes=FLOATS + ("int32", "bool"), rtol=1e-5, atol=1e-5))
    add(Case("aten::cumsum.out", lambda g: [g.t((4, 6)), 0, 7], dtypes=("int64",), tag="dtype"))
    add(Case("aten::cumprod.out", lambda g: [g.t((4, 6)) / 2 + 1, -1]))
    add(Case("aten::logsumexp.out", lambda g: [g.t((4, 6)) * 20, [1], False], dtypes=FLOATS))
    for desc in (False, True):
        add(Case("aten::sort.values", lambda g, d=desc: [g.distinct((4, 9)), -1, d], dtypes=FLOATS + ("int64",),
                 tag=str(desc)))
        add(Case("aten::sort.values_stable", lambda g, d=desc: [g.t((6, 9), "int64", low=0, high=3), True, 1, d],
                 dtypes=("int64",), tag=f"ties-{desc}"))
        add(Case("aten::sort.values_stable", lambda g, d=desc: [np.array([3.0, np.nan, -np.inf, 1.0, np.nan, 2.0],
                                                                         g.dtype), True, 0, d],
                 layouts=("C",), tag=f"nan-{desc}"))
    for largest in (True, False):
        add(Case("aten::topk.values", lambda g, lg=largest: [g.distinct((5, 8)), 3, 1, lg, True],
                 dtypes=FLOATS + ("int64",), tag=str(largest)))
    add(Case("aten::topk.values", lambda g: [g.distinct((5, 8)), 2, 0], tag="dim0"))
    # matrix products
    add(Case("aten::mm.out", lambda g: [g.t((7, 13)), g.t((13, 5))], dtypes=FLOATS + ("int64",), rtol=1e-5, atol=1e-5))
    add(Case("aten::mm.out", lambda g: [g.t((0, 3)), g.t((3, 4))], layouts=("C",), tag="empty"))
    add(Case("aten::mm.out", lambda g: [g.t((4, 0)), g.t((0, 3))], layouts=("C",), tag="empty_k"))
    add(Case("aten::mm.out", lambda g: [g.t((7, 13)), g.t((13, 5))], dtypes=("float16",), rtol=5e-3, atol=5e-3,
             tag="half"))
    add(Case("aten::bmm.out", lambda g: [g.t((3, 4, 5)), g.t((3, 5, 2))], dtypes=FLOATS, rtol=1e-5, atol=1e-5))
    add(Case("aten::addmm.out", lambda g: [g.t((5,)), g.t((3, 4)), g.t((4, 5)), 0.5, 2.0], dtypes=FLOATS,
             rtol=1e-5, atol=1e-5))
    add(Case("aten::addmm.out", lambda g: [np.full((3, 5), np.nan, g.dtype), g.t((3, 4)), g.t((4, 5)), 0, 1],
             layouts=("C",), tag="beta0_ignores_nan", rtol=1e-5, atol=1e-5))
    add(Case("aten::baddbmm.out", lambda g: [g.t((3, 1, 2)), g.t((3, 4, 5)), g.t((3, 5, 2)), 2, 1], rtol=1e-5,
             atol=1e-5))
    add(Case("aten::_cdist_forward.out", lambda g: [g.t((2, 4, 3)), g.t((2, 5, 3)), 2.0, None], rtol=1e-5, atol=1e-5))
    add(Case("aten::_cdist_forward.out", lambda g: [g.t((4, 3)), g.t((5, 3)), 1.0, None], tag="p1", rtol=1e-5,
             atol=1e-5))
    add(Case("aten::_pdist_forward.out", lambda g: [g.t((5, 3)), 2.0], rtol=1e-5, atol=1e-5))
    return c


CASES = _cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_reduction_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_scalar_returning_kernels():
    from etc.runtime.kernels import get_kernel
    x = np.zeros((2, 5, 3), np.float32)
    assert get_kernel("aten::sym_size.int")(x, -2) == 5
    assert get_kernel("aten::sym_numel.default")(x) == 30
    assert get_kernel("aten::sym_stride.int")(x, 0) == 15
    assert get_kernel("aten::_local_scalar_dense.default")(np.array([2.5], np.float32)) == 2.5


def test_reducing_an_empty_dim_without_identity_is_an_execution_error():
    from etc.errors import ExecutionError
    from etc.runtime.kernels import get_kernel
    with pytest.raises(ExecutionError, match="size 0"):
        get_kernel("aten::amax.out")(np.zeros((0, 3), np.float32), [0], False, np.zeros(3, np.float32))


_M = np.stack([np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 1e30, -1e-30, 3.0], np.float32),
               np.array([1.0, np.nan, 0.0, -np.inf, np.inf, -0.5, 2.5, -1e30, 3.0, 0.5], np.float32)])
NAN_CASES = [
    ("aten::sum.IntList_out", [_M, [1]]), ("aten::mean.out", [_M, [1]]), ("aten::amax.out", [_M, [1]]),
    ("aten::amin.out", [_M, [1]]), ("aten::argmax.out", [_M, 1]), ("aten::argmin.out", [_M, 1]),
    ("aten::max.dim_max", [_M, 1]), ("aten::min.dim_min", [_M, 1]), ("aten::cumsum.out", [_M, 1]),
    ("aten::_softmax.out", [_M, 1, False]), ("aten::_log_softmax.out", [_M, 1, False]),
    ("aten::var.correction_out", [_M, [1], 1]), ("aten::sort.values_stable", [_M, True, 1, False]),
    ("aten::sort.values_stable", [_M, True, 1, True]), ("aten::topk.values", [_M, 3, 1]),
    ("aten::logsumexp.out", [_M, [1]]), ("aten::prod.int_out", [_M, 1]),
    ("aten::max_pool2d_with_indices.out", [_M[None, None], [2, 2]]), ("aten::where.self_out", [_M > 0, _M, -_M]),
]


@pytest.mark.parametrize("name, args", NAN_CASES, ids=[f"{n.split('::')[1]}-{i}" for i, (n, _) in enumerate(NAN_CASES)])
def test_reductions_propagate_nan_like_torch(name, args):
    from kernel_cases import assert_close, run
    ours, expected, _ = run(name, args)
    assert_close(ours, expected)
