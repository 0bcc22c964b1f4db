"""Kernels on tensors with a 0-size dimension (reductions over non-empty dims, 0-length
indices, zero batches) give torch's (empty or identity) results."""

import numpy as np
import pytest

from kernel_cases import assert_close, run

f = np.float32
E = np.zeros((0, 4), f)
E2 = np.zeros((3, 0), f)
I0 = np.zeros((0,), np.int64)

CASES = [
    ("aten::sum.IntList_out", [E, [1], False]), ("aten::sum.IntList_out", [E, [0], True]),
    ("aten::mean.out", [E2, [0], False]), ("aten::amax.out", [E, [1], False]),
    ("aten::argmax.out", [E, 1, False]), ("aten::argmin.out", [E2, 0, True]), ("aten::cumsum.out", [E, 0]),
    ("aten::sort.values", [E, 1, False]), ("aten::topk.values", [E2, 0, 1]), ("aten::_softmax.out", [E, 1, False]),
    ("aten::_log_softmax.out", [E2, 1, False]), ("aten::max.dim_max", [E, 1, False]),
    ("aten::min.dim_min", [E2, 0, False]), ("aten::var.correction_out", [E, [1], 1, False]),
    ("aten::logsumexp.out", [E, [1], False]), ("aten::any.all_out", [E]), ("aten::prod.out", [E]),
    ("aten::mm.out", [E2, np.zeros((0, 5), f)]), ("aten::bmm.out", [np.zeros((0, 2, 3), f), np.zeros((0, 3, 4), f)]),
    ("aten::linear.out", [E, np.zeros((5, 4), f), None]), ("aten::where.self_out", [E > 0, E, E]),
    ("aten::clamp.out", [E, 0, 1]), ("aten::gather.out", [np.zeros((3, 4), f), 1, np.zeros((3, 0), np.int64)]),
    ("aten::index.Tensor_out", [np.zeros((3, 4), f), [I0]]), ("aten::embedding.out", [np.zeros((3, 4), f), I0]),
    ("aten::index_select.out", [E, 1, np.array([0, 1])]),
    ("aten::scatter_add.out", [np.zeros((3, 4), f), 1, np.zeros((3, 0), np.int64), np.zeros((3, 0), f)]),
    ("aten::cat.out", [[E, E], 0]), ("aten::stack.out", [[E, E], 1]), ("aten::repeat.out", [np.zeros((2, 3), f), [0, 1]]),
    ("aten::expand_copy.out", [np.zeros((1, 3), f), [0, 3]]), ("aten::permute_copy.out", [E, [1, 0]]),
    ("aten::constant_pad_nd.out", [E, [1, 1], 0.0]), ("aten::split_copy.Tensor_out", [E, 2, 0]),
    ("aten::flip.out", [E, [0]]), ("aten::unbind_copy.int_out", [E2, 1]), ("aten::nonzero.out", [E]),
    ("aten::max_pool2d_with_indices.out", [np.zeros((0, 2, 4, 4), f), [2, 2]]),
    ("aten::avg_pool2d.out", [np.zeros((0, 2, 4, 4), f), [2, 2]]),
    ("aten::upsample_nearest2d.vec_out", [np.zeros((0, 2, 4, 4), f), [8, 8], None]),
    ("aten::_adaptive_avg_pool2d.out", [np.zeros((0, 2, 4, 4), f), [2, 2]]),
    ("aten::native_group_norm.out", [np.zeros((0, 4, 3), f), None, None, 0, 4, 3, 2, 1e-5]),
]


@pytest.mark.parametrize("name, args", CASES, ids=[f"{n.split('::')[1]}-{i}" for i, (n, _) in enumerate(CASES)])
def test_empty_tensors_match_torch(name, args):
    ours, expected, outs = run(name, args)
    assert_close(ours, expected)
