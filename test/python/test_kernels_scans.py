"""cummax/cummin, logcumsumexp, median/nanmedian, nansum, nan_to_num and aminmax against torch,
with NaN/inf in the data (ATen propagates NaN through cummax and median and reports its
index; the nan* forms skip it), ties (cummax takes the latest index), every dim, a
transposed and a strided view, float/int/bool dtypes."""

import numpy as np
import pytest

from kernel_cases import assert_close, run


def _data(dtype, with_nan, seed=0, shape=(5, 7)):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    x = rng.integers(-3, 4, shape).astype(dtype)  # small ints: many ties
    if dtype.startswith("float"):
        x = x * 0.5
        if with_nan:
            x[rng.random(shape) < 0.15] = np.nan
            x[0, :] = np.nan  # an all-NaN row
        x.flat[3] = np.inf
    return x


def _cases(x):
    cases = []
    for d in (0, 1, -1):
        cases += [("aten::cummax.out", [x, d], {}), ("aten::cummin.out", [x, d], {}),
                  ("aten::median.dim_values", [x, d, False], {}), ("aten::nanmedian.dim_values", [x, d, True], {}),
                  ("aten::aminmax.out", [x], {"dim": d, "keepdim": d == 0})]
        if x.dtype.kind == "f":
            cases.append(("aten::logcumsumexp.out", [x, d], {}))
    cases += [("aten::median.out", [x], {}), ("aten::nanmedian.out", [x], {}), ("aten::aminmax.out", [x], {}),
              ("aten::nansum.out", [x, [1], False], {}), ("aten::nansum.out", [x, None, True], {}),
              ("aten::nan_to_num.out", [x, None, None, None], {}), ("aten::nan_to_num.out", [x, 1.5, 100.0, -7.0], {}),
              ("aten::cummax.out", [x.T, 1], {}), ("aten::median.dim_values", [x[:, ::2], 1, True], {})]
    return cases


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "bool"])
@pytest.mark.parametrize("with_nan", [False, True])
def test_scans_and_order_statistics_against_torch(dtype, with_nan):
    if with_nan and not dtype.startswith("float"):
        pytest.skip("NaN needs a float dtype")
    x = _data(dtype, with_nan)
    checked = 0
    for name, args, kwargs in _cases(x):
        try:
            ours, expected, _ = run(name, args, kwargs)
        except (RuntimeError, NotImplementedError):
            continue  # torch has no kernel for this dtype (e.g. median of bool)
        assert_close(ours, expected)
        checked += 1
    assert checked >= 10


def test_empty_and_zero_dim():
    for name, args in [("aten::cummax.out", [np.zeros((0, 3), np.float32), 0]),
                       ("aten::cummin.out", [np.asarray(2.0, np.float32), 0]),
                       ("aten::logcumsumexp.out", [np.zeros((2, 0), np.float32), 1]),
                       ("aten::median.dim_values", [np.asarray(5, np.int64), 0, False]),
                       ("aten::nansum.out", [np.zeros((0, 4), np.float32), [0], False])]:
        ours, expected, _ = run(name, args)
        assert_close(ours, expected)


def test_aminmax_over_a_full_dim_of_a_tensor_with_an_empty_one():
    ours, expected, _ = run("aten::aminmax.out", [np.zeros((5, 0, 5), np.float32)], {"dim": 0, "keepdim": False})
    assert_close(ours, expected)
