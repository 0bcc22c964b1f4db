"""Indexing kernels against torch: index / index_put (None, bool masks, broadcast indices),
index_select, gather, scatter variants, select/slice_scatter, masked ops, nonzero, embedding_bag."""

import numpy as np
import pytest

from kernel_cases import Case, check_case, param_list, run, assert_close

DT = ("float32", "int64")


def _cases():
    c = []
    add = c.append
    add(Case("aten::index.Tensor_out", lambda g: [g.t((5, 6, 7)), [g.idx((3,), 5), None, g.idx((3,), 7)]], dtypes=DT,
             tag="split_adv"))
    add(Case("aten::index.Tensor_out", lambda g: [g.t((5, 6, 7)), [None, g.idx((2, 4), 6, low=-6)]], tag="neg"))
    add(Case("aten::index.Tensor_out", lambda g: [g.t((5, 6)), [g.idx((4, 1), 5), g.idx((3,), 6)]], tag="bcast"))
    add(Case("aten::index.Tensor_out", lambda g: [g.t((5, 6)), [g.t((5,), "bool")]], tag="mask", dtypes=DT + ("bool",)))
    add(Case("aten::index.Tensor_out", lambda g: [g.t((5, 6)), [g.t((5, 6), "bool")]], tag="mask2d"))
    for acc in (False, True):
        add(Case("aten::index_put.out", lambda g, a=acc: [g.t((5, 6)), [g.idx((4,), 5), g.idx((4,), 6)], g.t((4,)), a],
                 dtypes=DT, tag=f"acc={acc}"))
        add(Case("aten::index_put.out", lambda g, a=acc: [g.t((5, 6)), [np.array([0, 2, 0, 4])], g.t((6,)), a],
                 tag=f"rows-dup-acc={acc}"))
    add(Case("aten::index_put.out", lambda g: [g.t((5, 6)), [g.t((5, 6), "bool")], np.asarray(g.t((1,))[0]), False],
             tag="mask"))
    add(Case("aten::index_select.out", lambda g: [g.t((5, 6, 3)), 1, g.idx((8,), 6)], dtypes=DT + ("bool",)))
    add(Case("aten::index_select.out", lambda g: [g.t((5, 6)), -2, g.idx((0,), 5)], tag="empty", layouts=("C",)))
    add(Case("aten::gather.out", lambda g: [g.t((4, 5, 3)), 1, g.idx((4, 7, 2), 5)], dtypes=DT))
    add(Case("aten::gather.out", lambda g: [g.t((4, 5)), 0, g.idx((2, 3), 4)], tag="smaller"))
    add(Case("aten::scatter.src_out", lambda g: [g.t((4, 5)), 1, np.tile(np.arange(5)[None, :3], (3, 1)), g.t((3, 4))],
             dtypes=DT, layouts=("C",)))
    add(Case("aten::scatter.value_out", lambda g: [g.t((4, 5)), 0, np.array([[0, 1, 2], [3, 2, 1]]), 2.5]))
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            add(Case("aten::scatter_reduce.two_out",
                     lambda g, r=reduce, i=include_self: [g.t((4, 5)), 0, g.idx((6, 5), 4), g.t((6, 5)), r, i],
                     dtypes=("float32",) if reduce == "mean" else DT, tag=f"{reduce}-{include_self}", layouts=("C",)))
    add(Case("aten::scatter_add.out", lambda g: [g.t((4, 5)), 1, g.idx((4, 8), 5), g.t((4, 8))], dtypes=DT))
    add(Case("aten::select_scatter.out", lambda g: [g.t((4, 5, 3)), g.t((4, 3)), 1, -2], dtypes=DT))
    add(Case("aten::slice_scatter.out", lambda g: [g.t((6, 5)), g.t((2, 5)), 0, 1, 5, 2], dtypes=DT))
    add(Case("aten::slice_scatter.out", lambda g: [g.t((6, 5)), g.t((6, 3)), 1, -3, None, 1], tag="neg"))
    add(Case("aten::masked_scatter.out", lambda g: [g.t((4, 5)), g.t((5,), "bool"), g.t((30,))], dtypes=DT))
    add(Case("aten::masked_select.out", lambda g: [g.t((4, 5)), g.t((4, 5), "bool")]))
    add(Case("aten::nonzero.out", lambda g: [g.t((4, 5), "bool")], dtypes=DT + ("bool",)))
    add(Case("aten::diagonal_scatter.out", lambda g: [g.t((4, 5)), g.t((4,)), 1, 0, 1]))
    add(Case("aten::index_add.out", lambda g: [g.t((5, 3)), 0, g.idx((4,), 5), g.t((4, 3)), 2], dtypes=DT))
    for mode in (0, 1, 2):
        add(Case("aten::_embedding_bag.out",
                 lambda g, m=mode: [g.t((10, 3)), g.idx((8,), 10), np.array([0, 3, 3, 5]), False, m],
                 tag=f"mode{mode}", layouts=("C",), rtol=1e-5, atol=1e-6))
    return c


CASES = _cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_indexing_kernels_match_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_nonzero_rewrites_a_dynamic_output_in_place():
    mask = np.array([[True, False], [False, True]])
    ours, expected, outs = run("aten::nonzero.out", [mask], out_extra=6)
    assert_close(ours, expected, check_storage=outs)


def test_out_of_range_indices_are_execution_errors():
    from etc.errors import ExecutionError
    from etc.runtime.kernels import get_kernel
    with pytest.raises(ExecutionError, match="out of range"):
        get_kernel("aten::index_select.out")(np.zeros((3, 2)), 0, np.array([3]), np.zeros((1, 2)))
    with pytest.raises(ExecutionError, match="out of range"):
        get_kernel("aten::embedding.out")(np.zeros((3, 2)), np.array([5]), -1, False, False, np.zeros((1, 2)))
    with pytest.raises(ExecutionError, match="out of range"):
        get_kernel("aten::gather.out")(np.zeros((3, 2)), 1, np.array([[2]]), False, np.zeros((1, 1)))
