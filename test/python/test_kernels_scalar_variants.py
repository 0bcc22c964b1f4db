"""Scalar overloads of the binary kernels (`.Scalar_out`, `.Scalar_Tensor_out`,
`.Tensor_Scalar_out`) and the remaining binary/unary forms, over a grid of tensor dtypes x
Python scalars (int, negative int, float, bool, zero) against torch: ATen's promotion of
wrapped numbers, integer rounding of division/remainder, shifts past the bit width.

One test per operator runs its whole grid (cheap); a combination torch itself refuses
(bitwise ops on floats, integer division by zero) is skipped, any other difference fails."""

import itertools

import numpy as np
import pytest
import torch

from kernel_cases import assert_close, run

DTYPES = ["float32", "float64", "int64", "int32", "int8", "uint8", "bool"]
SCALARS = [2, -3, 2.5, -0.5, True, False, 0]


def _tensor(rng, dtype, shape=(4, 6)):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int64", "int32", "int8"):
        return rng.integers(-9, 10, shape).astype(dtype)
    if dtype == "uint8":
        return rng.integers(0, 10, shape).astype(dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _strided(x):
    """The same values as a transposed view (kernels must accept non-contiguous inputs)."""
    return np.ascontiguousarray(x.T).T if x.ndim == 2 else x


def _check_grid(name, arg_lists, kwargs=None):
    checked, failures = 0, []
    for args in arg_lists:
        try:
            ours, expected, _ = run(name, args, kwargs or {})
        except (RuntimeError, NotImplementedError, ZeroDivisionError):
            continue  # torch refuses this combination (e.g. bitwise_and on floats)
        except Exception as error:  # ours raised where torch did not
            failures.append(f"{[getattr(a, 'dtype', a) for a in args]}: {type(error).__name__}: {error}")
            continue
        try:
            assert_close(ours, expected)
            checked += 1
        except AssertionError as error:
            failures.append(f"{[getattr(a, 'dtype', a) for a in args]}: {str(error)[:300]}")
    assert not failures, f"{name}: {len(failures)} mismatches:\n" + "\n".join(failures[:5])
    assert checked, f"{name}: torch accepted no combination"


def _rng(name):
    return np.random.default_rng(abs(hash(name)) % (2 ** 32))


TENSOR_SCALAR = ["add.Scalar_out", "sub.Scalar_out", "mul.Scalar_out", "div.Scalar_out", "remainder.Scalar_out",
                 "fmod.Scalar_out", "floor_divide.Scalar_out", "pow.Tensor_Scalar_out", "float_power.Tensor_Scalar_out",
                 "bitwise_and.Scalar_out", "bitwise_or.Scalar_out", "bitwise_xor.Scalar_out", "eq.Scalar_out",
                 "ne.Scalar_out", "lt.Scalar_out", "le.Scalar_out", "gt.Scalar_out", "ge.Scalar_out",
                 "clamp_max.out", "clamp_min.out"]
SCALAR_TENSOR = ["pow.Scalar_out", "float_power.Scalar_out", "remainder.Scalar_Tensor_out",
                 "bitwise_and.Scalar_Tensor_out", "bitwise_or.Scalar_Tensor_out", "bitwise_xor.Scalar_Tensor_out"]


@pytest.mark.parametrize("op", TENSOR_SCALAR)
def test_tensor_scalar_overloads(op):
    rng = _rng(op)
    grid = [[_strided(_tensor(rng, d)), s] for d, s in itertools.product(DTYPES, SCALARS)]
    _check_grid(f"aten::{op}", grid)


@pytest.mark.parametrize("op", SCALAR_TENSOR)
def test_scalar_tensor_overloads(op):
    rng = _rng(op)
    grid = [[s, _strided(_tensor(rng, d))] for d, s in itertools.product(DTYPES, SCALARS)]
    _check_grid(f"aten::{op}", grid)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_scalar_mode_and_tensor_mode(mode):
    rng = _rng(f"div{mode}")
    _check_grid("aten::div.Scalar_mode_out", [[_tensor(rng, d), s] for d, s in itertools.product(DTYPES, SCALARS)],
                {"rounding_mode": mode})
    pairs = [[_tensor(rng, a), _tensor(rng, b, (1, 6))] for a, b in itertools.product(DTYPES, DTYPES)]
    _check_grid("aten::div.out_mode", pairs, {"rounding_mode": mode})


TENSOR_TENSOR = ["pow.Tensor_Tensor_out", "float_power.Tensor_Tensor_out", "remainder.Tensor_out", "fmod.Tensor_out",
                 "floor_divide.out", "maximum.out", "minimum.out", "atan2.out", "copysign.out",
                 "logical_and.out", "logical_or.out", "logical_xor.out", "bitwise_and.Tensor_out",
                 "bitwise_or.Tensor_out", "bitwise_xor.Tensor_out", "eq.Tensor_out", "lt.Tensor_out"]


@pytest.mark.parametrize("op", TENSOR_TENSOR)
def test_tensor_tensor_promotion_grid(op):
    """Every dtype pair, with broadcasting (4, 6) x (1, 6)."""
    rng = _rng(op)
    pairs = [[_tensor(rng, a), _tensor(rng, b, (1, 6))] for a, b in itertools.product(DTYPES, DTYPES)]
    _check_grid(f"aten::{op}", pairs)


@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift"])
def test_shifts_including_past_the_bit_width(op):
    rng = _rng(op)
    grid = []
    for d, s in itertools.product(["int64", "int32", "uint8", "int8"], [0, 1, 3, 7, 31, 63, 70]):
        grid.append((f"aten::{op}.Tensor_Scalar_out", [_tensor(rng, d), s]))
        grid.append((f"aten::{op}.Scalar_Tensor_out", [s, np.abs(_tensor(rng, d)).astype(d)]))
        grid.append((f"aten::{op}.Tensor_out", [_tensor(rng, d), np.full((4, 6), s, d if s < 127 else "int64")]))
    for name in sorted({n for n, _ in grid}):
        _check_grid(name, [a for n, a in grid if n == name])


@pytest.mark.parametrize("op", ["isinf.out", "isnan.out", "std.out", "var.out", "max.out", "min.out", "fill.Tensor_out"])
def test_remaining_forms(op):
    rng = _rng(op)
    grid = []
    for d in DTYPES:
        x = _tensor(rng, d)
        if op in ("std.out", "var.out"):
            if d.startswith("float"):
                grid += [[x, dim, unbiased, keep] for dim in (None, [0], [1], [0, 1]) for unbiased in (True, False)
                         for keep in (False, True)]
        elif op in ("max.out", "min.out"):
            grid.append([x, _tensor(rng, d)])
        elif op == "fill.Tensor_out":
            grid.append([x, np.asarray(_tensor(rng, d, (1,))[0])])
        else:
            grid.append([x])
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    if op in ("isinf.out", "isnan.out"):
        grid.append([x])
    _check_grid(f"aten::{op}", grid)
