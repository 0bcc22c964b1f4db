"""Elementwise kernels against torch: unary math, binary arithmetic with broadcasting and
Scalars, comparisons, logical/bitwise, where, clamp, activations; strided/transposed
inputs, empty and 0-d tensors, several dtypes."""

import numpy as np
import pytest
import torch

from kernel_cases import Case, check_case, param_list, run, assert_close

FLOATS = ("float32", "float64")
SHAPES = [(7, 13), (0, 5), (), (1,)]

# name: (low, high) domain for random floats (None: standard normal)
UNARY_FLOAT = {
    "sqrt": (0.01, 10), "rsqrt": (0.01, 10), "exp": None, "expm1": None, "log": (0.01, 10), "log2": (0.01, 10),
    "log10": (0.01, 10), "log1p": (-0.9, 10), "sin": None, "cos": None, "tan": (-1.5, 1.5), "asin": (-0.99, 0.99),
    "acos": (-0.99, 0.99), "atan": None, "sinh": None, "cosh": None, "tanh": None, "asinh": None,
    "acosh": (1.01, 10), "atanh": (-0.99, 0.99), "sigmoid": (-30, 30), "erf": (-4, 4), "reciprocal": (0.1, 4),
}
UNARY_SAME = ["abs", "neg", "sign", "floor", "ceil", "round", "trunc", "relu", "frac"]


def _unary_cases():
    cases = []
    for name, dom in UNARY_FLOAT.items():
        lo, hi = dom or (None, None)
        for shape in SHAPES:
            cases.append(Case(f"aten::{name}.out", lambda g, s=shape, lo=lo, hi=hi: [g.t(s, low=lo, high=hi)],
                              dtypes=FLOATS + ("float16",) if shape == (7, 13) else ("float32",), tag=str(shape),
                              layouts=("C", "T", "S") if len(shape) == 2 else ("C",)))
        # integral input promotes to the default float
        lo_i = int(np.ceil(lo)) if lo is not None else -3
        hi_i = int(np.floor(hi)) + 1 if hi is not None else 4
        cases.append(Case(f"aten::{name}.out", lambda g, lo=lo_i, hi=hi_i: [g.t((5, 6), "int64", low=lo, high=hi)],
                          dtypes=("int64",), layouts=("C",), tag="int"))
    for name in UNARY_SAME:
        dts = FLOATS + (("int64", "int32") if name not in ("frac",) else ())
        cases.append(Case(f"aten::{name}.out", lambda g: [g.t((7, 13)) * 3], dtypes=dts))
        cases.append(Case(f"aten::{name}.out", lambda g: [g.t((0, 3))], tag="empty", layouts=("C",)))
    cases.append(Case("aten::round.out", lambda g: [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, np.nan, np.inf],
                                                             g.dtype)], dtypes=FLOATS, layouts=("C",), tag="half_even"))
    cases.append(Case("aten::round.decimals_out", lambda g: [g.t((4, 5)) * 100, 2], dtypes=FLOATS, rtol=1e-4))
    cases.append(Case("aten::bitwise_not.out", lambda g: [g.t((5, 7))], dtypes=("int64", "int8", "bool")))
    cases.append(Case("aten::logical_not.out", lambda g: [g.t((5, 7))], dtypes=("float32", "int64", "bool")))
    for name in ("isnan", "isinf"):
        cases.append(Case(f"aten::{name}.out", lambda g: [np.array([1.0, np.nan, np.inf, -np.inf, 0.0], g.dtype)],
                          dtypes=FLOATS, layouts=("C",)))
        cases.append(Case(f"aten::{name}.out", lambda g: [g.t((3, 4))], dtypes=("int64",), tag="int"))
    return cases


def _binary(g, kind):
    """(self, other) pairs: broadcasting shapes, a Python scalar, a 0-d tensor, empty."""
    if kind == "bcast":
        return g.t((4, 1, 5)), g.t((3, 5))
    if kind == "same":
        return g.t((7, 13)), g.t((7, 13))
    if kind == "zero_dim":
        return g.t((3, 4)), np.asarray(g.t((1,))[0])
    if kind == "empty":
        return g.t((0, 4)), g.t((1, 4))
    raise ValueError(kind)


def _nonzero(x):
    x = np.array(x)
    if x.dtype.kind in "iu":
        x[x == 0] = 3
    elif x.dtype.kind == "f":
        x[np.abs(x) < 0.1] = 0.5
    return x


def _binary_cases():
    cases = []
    kinds = ("bcast", "same", "zero_dim", "empty")
    for op, extra, dts in [
        ("aten::add.out", [2], FLOATS + ("int64", "int32", "bool")),
        ("aten::sub.out", [1], FLOATS + ("int64",)),
        ("aten::mul.out", [], FLOATS + ("int64", "bool", "int8")),
        ("aten::div.out", [], FLOATS + ("int64",)),
        ("aten::maximum.out", [], FLOATS + ("int64", "bool")),
        ("aten::minimum.out", [], FLOATS + ("int64",)),
        ("aten::atan2.out", [], FLOATS),
        ("aten::remainder.Tensor_out", [], FLOATS + ("int64",)),
        ("aten::fmod.Tensor_out", [], FLOATS + ("int64",)),
        ("aten::eq.Tensor_out", [], FLOATS + ("int64", "bool")),
        ("aten::ne.Tensor_out", [], FLOATS + ("int64",)),
        ("aten::lt.Tensor_out", [], FLOATS + ("int64",)),
        ("aten::le.Tensor_out", [], ("float32", "int64")),
        ("aten::gt.Tensor_out", [], ("float32", "int64")),
        ("aten::ge.Tensor_out", [], ("float32", "int64")),
        ("aten::logical_and.out", [], ("float32", "bool")),
        ("aten::logical_or.out", [], ("float32", "bool")),
        ("aten::logical_xor.out", [], ("int64", "bool")),
        ("aten::bitwise_and.Tensor_out", [], ("int64", "bool", "uint8")),
        ("aten::bitwise_or.Tensor_out", [], ("int64", "bool")),
        ("aten::bitwise_xor.Tensor_out", [], ("int32", "bool")),
    ]:
        needs_nonzero = op.split("::")[1].split(".")[0] in ("div", "remainder", "fmod")
        for kind in kinds:
            def build(g, kind=kind, extra=extra, nz=needs_nonzero):
                a, b = _binary(g, kind)
                if nz:
                    b = _nonzero(b)
                return [a, b, *extra]
            cases.append(Case(op, build, dtypes=dts if kind == "bcast" else dts[:1],
                              layouts=("C", "T", "S") if kind in ("bcast", "same") else ("C",), tag=kind))
    # mixed dtypes: promotion int + float, int32 + int64, bool + int
    for op in ("aten::add.out", "aten::mul.out", "aten::div.out", "aten::lt.Tensor_out", "aten::maximum.out"):
        cases.append(Case(op, lambda g, op=op: [g.t((3, 4), "int32"), g.t((4,), "float32")] + ([1] if "add" in op else []),
                          dtypes=("float32",), tag="int32+float32"))
        cases.append(Case(op, lambda g, op=op: [g.t((3, 4), "int32"), _nonzero(g.t((4,), "int64"))] + ([1] if "add" in op else []),
                          dtypes=("int32",), tag="int32+int64"))
        cases.append(Case(op, lambda g, op=op: [g.t((3, 4), "bool"), _nonzero(g.t((4,), "int64"))] + ([1] if "add" in op else []),
                          dtypes=("bool",), layouts=("C",), tag="bool+int64"))
    # Scalar overloads: Python int / float / bool scalars don't promote a tensor's category unless higher
    for op, extra in [("aten::add.Scalar_out", [1]), ("aten::sub.Scalar_out", [2]), ("aten::mul.Scalar_out", []),
                      ("aten::div.Scalar_out", []), ("aten::remainder.Scalar_out", []),
                      ("aten::fmod.Scalar_out", []), ("aten::eq.Scalar_out", []), ("aten::lt.Scalar_out", []),
                      ("aten::ge.Scalar_out", []), ("aten::pow.Tensor_Scalar_out", [])]:
        for scalar in (3, 2.5, -2):
            if "pow" in op and scalar == -2:
                scalar = -2.0
            cases.append(Case(op, lambda g, s=scalar, extra=extra: [g.t((5, 6)), s, *extra],
                              dtypes=("float32", "int64", "int8"), tag=f"scalar={scalar}"))
    cases.append(Case("aten::add.out", lambda g: [g.t((3, 4)), g.t((3, 4)), 2.5], tag="alpha_float"))
    cases.append(Case("aten::add.out", lambda g: [g.t((3, 4)), g.t((3, 4)), 3], dtypes=("int64",), tag="alpha_int"))
    cases.append(Case("aten::rsub.Scalar_out", lambda g: [g.t((3, 4)), 2, 3], dtypes=("float32", "int64")))
    # bitwise with scalars
    for op in ("aten::bitwise_and.Scalar_out", "aten::bitwise_or.Scalar_out", "aten::bitwise_xor.Scalar_out"):
        cases.append(Case(op, lambda g: [g.t((4, 5)), 6], dtypes=("int64", "int32")))
    # integer division rounding modes (negative operands), division by float zero
    for mode in (None, "trunc", "floor"):
        cases.append(Case("aten::div.out_mode", lambda g, m=mode: [g.t((6, 7)) * 5, _nonzero(g.t((7,))), m],
                          dtypes=FLOATS + ("int64", "int32"), tag=str(mode)))
        cases.append(Case("aten::div.Scalar_mode_out", lambda g, m=mode: [g.t((6, 7)) * 5, -3, m],
                          dtypes=("float32", "int64"), tag=str(mode)))
        cases.append(Case("aten::div.out_mode", lambda g, m=mode: [np.array([1.0, -1.0, 0.0, np.nan, 5.0], g.dtype),
                                                                   np.zeros(5, g.dtype), m],
                          dtypes=("float32",), layouts=("C",), tag=f"{mode}-by-zero"))
    # pow
    cases.append(Case("aten::pow.Tensor_Tensor_out", lambda g: [np.abs(g.t((5, 6))) + 0.1, g.t((6,))], dtypes=FLOATS))
    cases.append(Case("aten::pow.Tensor_Tensor_out", lambda g: [g.t((5, 6), low=-3, high=4), g.t((6,), low=-2, high=5)],
                      dtypes=("int64",), tag="int_neg_exp"))
    cases.append(Case("aten::pow.Tensor_Scalar_out", lambda g: [g.t((5, 6)), 3], dtypes=("float32", "int64", "int32"),
                      tag="int_exp"))
    cases.append(Case("aten::pow.Tensor_Scalar_out", lambda g: [np.abs(g.t((5, 6))), 0.5], tag="sqrt"))
    cases.append(Case("aten::pow.Scalar_out", lambda g: [2, g.t((5, 6), low=0, high=6)], dtypes=("float32", "int64")))
    cases.append(Case("aten::pow.Scalar_out", lambda g: [2.5, g.t((5, 6))], dtypes=("float32", "int64"), tag="float"))
    # NaN propagation in maximum / minimum
    cases.append(Case("aten::maximum.out", lambda g: [np.array([1.0, np.nan, 3.0], g.dtype),
                                                      np.array([np.nan, 2.0, 1.0], g.dtype)], layouts=("C",), tag="nan"))
    cases.append(Case("aten::minimum.out", lambda g: [np.array([1.0, np.nan, 3.0], g.dtype),
                                                      np.array([np.nan, 2.0, 1.0], g.dtype)], layouts=("C",), tag="nan"))
    # integer overflow wraps
    cases.append(Case("aten::add.out", lambda g: [np.array([2**31 - 1, -2**31], np.int32), np.array([1, -1], np.int32), 1],
                      dtypes=("int32",), layouts=("C",), tag="wrap"))
    cases.append(Case("aten::mul.out", lambda g: [np.array([2**62, 3], np.int64), np.array([4, 5], np.int64)],
                      dtypes=("int64",), layouts=("C",), tag="wrap"))
    # float16
    for op in ("aten::add.out", "aten::mul.out", "aten::div.out"):
        cases.append(Case(op, lambda g, op=op: [g.t((4, 6)), _nonzero(g.t((6,)))] + ([1] if "add" in op else []),
                          dtypes=("float16",), tag="half"))
    return cases


def _misc_cases():
    cases = []
    cases.append(Case("aten::where.self_out", lambda g: [g.t((4, 1, 5), "bool"), g.t((3, 5)), g.t((1, 5))],
                      dtypes=FLOATS + ("int64", "bool")))
    cases.append(Case("aten::where.self_out", lambda g: [g.t((3, 5), "bool"), g.t((3, 5), "int32"), g.t((5,), "float32")],
                      layouts=("C",), tag="promote"))
    cases.append(Case("aten::clamp.out", lambda g: [g.t((6, 7)), -0.5, 0.5], dtypes=FLOATS))
    cases.append(Case("aten::clamp.out", lambda g: [g.t((6, 7)), None, 3], dtypes=("int64", "float32"), tag="max_only"))
    cases.append(Case("aten::clamp.out", lambda g: [g.t((6, 7)), -2, None], dtypes=("int64",), tag="min_only"))
    cases.append(Case("aten::clamp.out", lambda g: [g.t((6, 7)), 0.5, None], dtypes=("int64",), tag="float_bound"))
    cases.append(Case("aten::clamp.out", lambda g: [np.array([np.nan, 1.0, -3.0], g.dtype), -1.0, 1.0],
                      layouts=("C",), tag="nan"))
    cases.append(Case("aten::clamp.Tensor_out", lambda g: [g.t((6, 7)), g.t((7,)) - 1, g.t((6, 1)) + 1],
                      dtypes=FLOATS + ("int64",)))
    cases.append(Case("aten::hardtanh.out", lambda g: [g.t((6, 7)) * 2, -1.0, 1.0], dtypes=FLOATS))
    cases.append(Case("aten::leaky_relu.out", lambda g: [g.t((6, 7)), 0.2], dtypes=FLOATS))
    cases.append(Case("aten::elu.out", lambda g: [g.t((6, 7)), 1.5, 1.0, 1.0], dtypes=FLOATS))
    for approx in ("none", "tanh"):
        cases.append(Case("aten::gelu.out", lambda g, a=approx: [g.t((6, 7)) * 3, a], dtypes=FLOATS + ("float16",),
                          tag=approx))
    cases.append(Case("aten::hardswish.out", lambda g: [g.t((6, 7)) * 4]))
    cases.append(Case("aten::hardsigmoid.out", lambda g: [g.t((6, 7)) * 4]))
    cases.append(Case("aten::silu.out", lambda g: [g.t((6, 7)) * 4]))
    cases.append(Case("aten::masked_fill.Scalar_out", lambda g: [g.t((4, 5)), g.t((5,), "bool"), -1.5],
                      dtypes=FLOATS + ("int64",)))
    cases.append(Case("aten::masked_fill.Scalar_out", lambda g: [g.t((4, 5)), g.t((4, 5), "bool"), float("-inf")],
                      tag="-inf"))
    cases.append(Case("aten::sigmoid.out", lambda g: [np.array([-1000.0, -50, 0, 50, 1000], g.dtype)], dtypes=FLOATS,
                      layouts=("C",), tag="extreme"))
    cases.append(Case("aten::exp.out", lambda g: [np.array([np.nan, np.inf, -np.inf, 100.0], g.dtype)],
                      layouts=("C",), tag="special"))
    return cases


CASES = _unary_cases() + _binary_cases() + _misc_cases()


@pytest.mark.parametrize("case, dtype, layout", param_list(CASES))
def test_elementwise_matches_torch(case, dtype, layout):
    check_case(case, dtype, layout)


def test_dynamic_output_reviews_planned_storage():
    # the out storage is an upper bound: a smaller result is written at its front, in place
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours, expected, outs = run("aten::add.out", [a, a, 1], out_extra=10)
    assert_close(ours, expected, check_storage=outs)
    assert ours[0].shape == (2, 3) and ours[0].base is not None


def test_integer_division_by_zero_is_an_execution_error():
    from etc.errors import ExecutionError
    from etc.runtime.kernels import get_kernel
    with pytest.raises(ExecutionError, match="division by zero"):
        get_kernel("aten::div.out_mode")(np.array([1, 2]), np.array([1, 0]), "floor", np.zeros(2, np.int64))
    with pytest.raises(ExecutionError, match="rounding mode"):
        get_kernel("aten::div.out_mode")(np.array([1.0]), np.array([1.0]), "ceil", np.zeros(1, np.float32))


def test_erf_is_accurate_in_double():
    import math
    from etc.runtime.kernels.elementwise import erf
    x = np.linspace(-7, 7, 2001)
    x = np.concatenate([x, [1e-300, -1e-10, 5.9999999, 6.0, -0.0]])
    np.testing.assert_allclose(erf(x), [math.erf(v) for v in x], rtol=1e-14, atol=0)
    assert np.isnan(erf(np.array([np.nan]))[0]) and erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    _ = torch


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 1e30, -1e-30, 3.0], np.float32)
SPECIAL2 = np.array([1.0, np.nan, 0.0, -np.inf, np.inf, -0.0, 2.5, -1e30, 3.0, 0.5], np.float32)
# (gelu is left out: ATen's vectorized CPU gelu gives NaN at +inf, the formula (and ExecuTorch's
# portable kernel) gives +inf; both give NaN at -inf.)
SPECIAL_CASES = (
    [(f"aten::{n}.out", [SPECIAL]) for n in list(UNARY_FLOAT) + UNARY_SAME + ["isnan", "isinf", "hardtanh",
                                                                              "leaky_relu", "elu", "silu", "hardswish"]]
    + [(f"aten::{n}", [SPECIAL, SPECIAL2]) for n in ("mul.out", "div.out", "maximum.out", "minimum.out", "atan2.out",
                                                      "remainder.Tensor_out", "fmod.Tensor_out",
                                                      "pow.Tensor_Tensor_out", "eq.Tensor_out", "lt.Tensor_out")]
    + [("aten::add.out", [SPECIAL, SPECIAL2, 1]), ("aten::div.out_mode", [SPECIAL, SPECIAL2, "trunc"]),
       ("aten::div.out_mode", [SPECIAL, SPECIAL2, "floor"]), ("aten::clamp.out", [SPECIAL, -1.0, 1.0])]
)


@pytest.mark.parametrize("name, args", SPECIAL_CASES, ids=[f"{n.split('::')[1]}-{i}" for i, (n, _) in
                                                           enumerate(SPECIAL_CASES)])
def test_nan_inf_and_signed_zero_match_torch(name, args):
    ours, expected, _ = run(name, args)
    assert_close(ours, expected)
