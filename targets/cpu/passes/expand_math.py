"""etc-cpu-expand-math: vectorizable replacements for the libm calls of generated loops (exp, erf).

LLVM turns `math.exp` and `math.erf` into one `expf`/`erff` call per element, which stops
the loop vectorizer: softmax, sigmoid, SiLU, attention and GELU spend their time there.
Here f32 `math.exp` (scalar, or a vector the window kernels' epilogues compute) becomes
straight-line arithmetic that vectorizes:

    exp(x) = 2^k * p(r),  k = roundeven(x * log2(e)),  r = x - k*ln2 (two-constant Cody-Waite)

with p the degree-6 Taylor polynomial on |r| <= ln2/2 (relative error about
1e-7, ~1 ulp) and 2^k built in two halves from exponent bits, so that
k in [-126, 128] never overflows an exponent field. Inputs below -87.5 give 0,
above 88.72 give +inf, NaN gives NaN, as libm does.

and f32 `math.erf` becomes x * P(x^2) / Q(x^2) on x clamped to [-4, 4] (the
rational fit the portable kernel uses, relative error ~4e-7), +-1 from |x| >= 3.92 where
float32 erf rounds to +-1 exactly, NaN kept;

and f32 `math.tanh` (GPT-2's GELU, `gelu(approximate="tanh")`, which ran 2.5x slower than the
erf GELU as one tanhf call per element) becomes

    tanh(x) = x (1 + x^2 (c3 + x^2 (c5 + ... + x^2 c13)))   |x| < 0.4 (Taylor; next term < 2e-9)
            = copysign(1 - 2 / (exp(2 min(|x|, 10)) + 1), x) otherwise (no cancellation past 0.4)

with the exp above: relative error ~2e-7, +-1 past 10 (f32 tanh rounds to +-1 from 9.01), -0.0 and
NaN kept.
"""

from __future__ import annotations

import math as pymath

from torch_mlir import ir

from etc.passes.pass_api import function_pass

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125  # ln(2) split so that k * LN2_HI is exact for |k| < 2^11
LN2_LO = 1.4286068203094172e-06
LOW, HIGH = -87.5, 88.72283935546875


@function_pass("etc-cpu-expand-math",
               "f32 math.exp/math.erf/math.tanh -> vectorizable arithmetic (no libm call per element)")
def expand_math(module, options=None) -> int:
    """Replace every f32 `math.exp`, `math.erf` and `math.tanh` under `module`, scalar (the
    loops LLVM vectorizes) or vector (the GEMM and window kernels' GELU/SiLU epilogues, which
    LLVM would otherwise scalarize into one libm call per lane); returns how many."""
    expansions = {"math.exp": _exp_f32, "math.erf": _erf_f32, "math.tanh": _tanh_f32}
    found = []

    def collect(op):
        if op.name in expansions and _is_f32(op.result.type):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(collect)
    with module.context:
        for op in found:
            with ir.InsertionPoint(op), op.location:
                new = expansions[op.name](op.operands[0])
            op.result.replace_all_uses_with(new)
            op.erase()
    return len(found)


def _is_f32(t) -> bool:
    """f32, or a fixed-size vector of f32."""
    if isinstance(t, ir.VectorType):
        return str(ir.VectorType(t).element_type) == "f32" and not any(ir.VectorType(t).scalable_dims)
    return str(t) == "f32"


def _like(t, element):
    """`element` (a scalar type) in the shape of `t` (a scalar or vector type)."""
    return ir.VectorType.get(ir.VectorType(t).shape, element) if isinstance(t, ir.VectorType) else element


def _constant(t, value):
    """A constant of type `t` (scalar or vector: a splat)."""
    from torch_mlir.dialects import arith

    if isinstance(t, ir.VectorType):
        element = ir.VectorType(t).element_type
        scalar = ir.FloatAttr.get(element, float(value)) if isinstance(element, ir.F32Type) else \
            ir.IntegerAttr.get(element, int(value))
        return arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(t, scalar)).result
    return arith.ConstantOp(t, float(value) if isinstance(t, ir.F32Type) else int(value)).result


def _erf_f32(x):
    from torch_mlir.dialects import arith, math

    from etc.runtime.kernels.elementwise import erf32_coefficients  # one fit for both paths

    f32 = _like(x.type, ir.F32Type.get())
    erf32_p, erf32_q = erf32_coefficients()

    def c(v):
        return _constant(f32, v)

    clamped = arith.MinimumFOp(arith.MaximumFOp(x, c(-4.0)).result, c(4.0)).result
    u = arith.MulFOp(clamped, clamped).result

    def horner(coefficients):
        acc = c(coefficients[0])
        for coefficient in coefficients[1:]:
            acc = math.FmaOp(acc, u, c(coefficient)).result
        return acc

    ratio = arith.DivFOp(arith.MulFOp(clamped, horner(erf32_p)).result, horner(erf32_q)).result
    saturated = arith.CmpFOp(arith.CmpFPredicate.OGE, math.AbsFOp(x).result, c(3.92)).result
    return arith.SelectOp(saturated, math.CopySignOp(c(1.0), x).result, ratio).result


def _exp_f32(x):
    from torch_mlir.dialects import arith, math

    f32 = _like(x.type, ir.F32Type.get())
    i32 = _like(x.type, ir.IntegerType.get_signless(32))

    def c(v):
        return _constant(f32, v)

    def ci(v):
        return _constant(i32, v)

    clamped = arith.MinimumFOp(arith.MaximumFOp(x, c(LOW)).result, c(HIGH)).result
    k = math.RoundEvenOp(arith.MulFOp(clamped, c(LOG2E)).result).result
    r = math.FmaOp(k, c(-LN2_HI), clamped).result
    r = math.FmaOp(k, c(-LN2_LO), r).result
    # Horner: 1 + r(1 + r(1/2 + r(1/6 + r(1/24 + r(1/120 + r/720)))))
    p = c(1.0 / 720)
    for coefficient in (1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0):
        p = math.FmaOp(p, r, c(coefficient)).result
    ki = arith.FPToSIOp(i32, k).result
    half = arith.ShRSIOp(ki, ci(1)).result
    rest = arith.SubIOp(ki, half).result

    def pow2(e):
        bits = arith.ShLIOp(arith.AddIOp(e, ci(127)).result, ci(23)).result
        return arith.BitcastOp(f32, bits).result

    value = arith.MulFOp(arith.MulFOp(p, pow2(half)).result, pow2(rest)).result
    under = arith.CmpFOp(arith.CmpFPredicate.OLT, x, c(LOW)).result
    value = arith.SelectOp(under, c(0.0), value).result
    over = arith.CmpFOp(arith.CmpFPredicate.OGT, x, c(HIGH)).result
    value = arith.SelectOp(over, c(pymath.inf), value).result
    nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
    return arith.SelectOp(nan, x, value).result


# tanh's odd Taylor coefficients x^3 .. x^13: the series on |x| < TANH_SMALL.
_TANH_TAYLOR = (-1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925, 21844.0 / 6081075)
TANH_SMALL, TANH_ONE = 0.4, 10.0


def _tanh_f32(x):
    from torch_mlir.dialects import arith, math

    f32 = _like(x.type, ir.F32Type.get())

    def c(v):
        return _constant(f32, v)

    x2 = arith.MulFOp(x, x).result
    p = c(_TANH_TAYLOR[-1])
    for coefficient in reversed(_TANH_TAYLOR[:-1]):
        p = math.FmaOp(p, x2, c(coefficient)).result
    small = arith.MulFOp(x, math.FmaOp(x2, p, c(1.0)).result).result  # x (1 + x^2 p): keeps -0.0
    a = math.AbsFOp(x).result
    e = _exp_f32(arith.MulFOp(arith.MinimumFOp(a, c(TANH_ONE)).result, c(2.0)).result)
    large = arith.SubFOp(c(1.0), arith.DivFOp(c(2.0), arith.AddFOp(e, c(1.0)).result).result).result
    is_small = arith.CmpFOp(arith.CmpFPredicate.OLT, a, c(TANH_SMALL)).result
    return arith.SelectOp(is_small, small, math.CopySignOp(large, x).result).result
