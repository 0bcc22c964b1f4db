"""etc-cpu-expand-exp: Vectorizable replacements for libm calls in generated loops.

LLVM turns `math.exp` into one `expf` call per element, which stops the loop
vectorizer: softmax, sigmoid, SiLU and attention spend their time there. Here
`math.exp` on f32 becomes straight-line arithmetic that vectorizes:

    exp(x) = 2^k * p(r),  k = roundeven(x * log2(e)),  r = x - k*ln2 (two-constant Cody-Waite)

with p the degree-6 Taylor polynomial on |r| <= ln2/2 (relative error about
1e-7, ~1 ulp) and 2^k built in two halves from exponent bits, so that
k in [-126, 128] never overflows an exponent field. Inputs below -87.5 give 0,
above 88.72 give +inf, NaN gives NaN, as libm does.
"""

from __future__ import annotations

import math as pymath

from torch_mlir import ir

from etc.passes.pass_api import function_pass

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125  # ln(2) split so that k * LN2_HI is exact for |k| < 2^11
LN2_LO = 1.4286068203094172e-06
LOW, HIGH = -87.5, 88.72283935546875


@function_pass("etc-cpu-expand-exp", "f32 math.exp -> vectorizable polynomial arithmetic (no libm call per element)")
def expand_exp(module, options=None) -> int:
    """Replace every scalar f32 `math.exp` under `module` (the loops LLVM vectorizes); returns how many."""
    exps = []

    def collect(op):
        if op.name == "math.exp" and str(op.result.type) == "f32":
            exps.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(collect)
    with module.context:
        for op in exps:
            with ir.InsertionPoint(op), op.location:
                new = _exp_f32(op.operands[0])
            op.result.replace_all_uses_with(new)
            op.erase()
    return len(exps)


def _exp_f32(x):
    from torch_mlir.dialects import arith, math

    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)

    def c(v):
        return arith.ConstantOp(f32, float(v)).result

    def ci(v):
        return arith.ConstantOp(i32, int(v)).result

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
