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
            = copysign((1 - e) / (1 + e), x) otherwise, e = exp(-2 min(|x|, 10))

(no cancellation past 0.4; e is the sigmoid's short exp below, the quotient its division): relative
error ~2e-7, +-1 past 10 (f32 tanh rounds to +-1 from 9.01), -0.0 and NaN kept;

and the sigmoid torch-mlir writes, `1 / (1 + exp(-x))` (SiLU is x times it: EfficientNet's
activation, in every GEMM and window epilogue), becomes one expression on e = exp(-|x|) in (0, 1]:

    sigmoid(x) = (x > 0 ? 1 : e) / (1 + e)

Its exp needs no overflow test (the argument is <= 0) and builds 2^k in one step (as does any
`math.exp` marked `etc.nonpositive` by the kernel that made it: the fused attention's exp(s - max),
half the operations of the general expansion; the whole attention kernel 1.07-1.09x faster, same
process, on Whisper's, ViT-384's and a causal 512-token shape): the argument
clamped at -104 (below it sigmoid rounds to 0), k = round(z log2 e) comes out of one fma with a
magic constant whose low bits also hold k + 191, so a shift gives 2^(k+64) and the degree-5
minimax polynomial carries the 2^-64 (denormal sigmoids, from -87.3 down, round once, as torch's
1 / (1 + exp(-x)) does). The denominator is in [1, 2] (no inf, no zero, no denormal). In a kernel's
vector epilogue (GEMM, window) the division is a reciprocal (`fastmath<arcp, ninf, contract>`:
LLVM's estimate and Newton step, vrcp14ps + 2 fma on AVX-512, a division where the target has no
estimate) and one correction of the quotient; a scalar one, in a loop LLVM vectorizes, stays a
division. Measured in one run (EfficientNet-B0, 1x1 + BN + SiLU, SiLU alone): the estimate took
EfficientNet from 0.95x to 0.91x of XNNPACK where a division in the epilogues did not, while a
vectorized loop ran 15-30% faster with the division. On AVX2 the estimate is vrcpps + 2 fma
and the correction 2 more, five operations where a 256-bit division is one: with
`reciprocal-estimates=false` (the ISA row's `reciprocal_estimates`) every division stays one.
Measured on a Zen 3 (same process, in turn), the SiLU GEMM epilogues with the division: 1x1
24->144 @56 0.86x the time, 40->240 @28 0.91x, 16->96 @112 0.93x, 112->672 @14 0.92x, the stem
3x3 0.90x; EfficientNet-B0 0.99x, BERT-4L 0.98x, Llama-15M 1.00x. Relative error ~3e-7 over the
whole range, sigmoid(0) = 0.5 and sigmoid(+inf) = 1 exactly, NaN propagates, -inf gives 0.
"""

from __future__ import annotations

import functools
import math as pymath
from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.passes.pass_api import function_pass, option
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import LATENCY_BOUND, NONPOSITIVE

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125  # ln(2) split so that k * LN2_HI is exact for |k| < 2^11
LN2_LO = 1.4286068203094172e-06
LOW, HIGH = -87.5, 88.72283935546875


@dataclass
class ExpandMathOptions:
    reciprocal_estimates: bool = option(True, help="a vector division (sigmoid, tanh) as a reciprocal estimate and "
                                                   "corrections, not one division (see the module docstring)")


@function_pass("etc-cpu-expand-math",
               "f32 math.exp/math.erf/math.tanh and sigmoids -> vectorizable arithmetic (no libm call per element)",
               ExpandMathOptions)
def expand_math(module, options=None) -> int:
    """Replace every f32 sigmoid (`1 / (1 + exp(-x))`), then every other f32 `math.exp`,
    `math.erf` and `math.tanh` under `module`, scalar (the loops LLVM vectorizes) or vector (the
    GEMM and window kernels' GELU/SiLU epilogues, which LLVM would otherwise scalarize into one
    libm call per lane); returns how many."""
    estimate = options.reciprocal_estimates if options is not None else True
    expansions = {"math.exp": _exp_f32, "math.erf": _erf_f32,
                  "math.tanh": functools.partial(_tanh_f32, estimate=estimate)}
    replaced = _expand_sigmoids(module, estimate)
    found = [op for op in walk(module, tuple(expansions)) if _is_f32(op.result.type)]
    with module.context:
        for op in found:
            expand = expansions[op.name]
            if op.name == "math.exp" and NONPOSITIVE in op.attributes:
                expand = functools.partial(_exp_nonpositive_f32, subnormal=False)
            with ir.InsertionPoint(op), op.location:
                new = expand(op.operands[0])
            op.result.replace_all_uses_with(new)
            op.erase()
    return replaced + len(found)


def _is_splat(value, number: float) -> bool:
    """`value` is the constant `number`: a scalar arith.constant, a splat vector constant, or a
    vector.broadcast of a scalar one (how the window kernels splat an epilogue's constants)."""
    owner = defining_op(value)
    if owner is not None and owner.name == "vector.broadcast":
        owner = defining_op(owner.operands[0])
    if owner is None or owner.name != "arith.constant":
        return False
    attr = owner.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value == number
    if isinstance(attr, ir.DenseFPElementsAttr) and ir.DenseElementsAttr(attr).is_splat:
        return ir.FloatAttr(ir.DenseElementsAttr(attr).get_splat_value()).value == number
    return False


def _sigmoid_input(div):
    """x when `div` is `1 / (1 + exp(-x))` (either order of the add), every link but the division
    used once, f32; else None."""
    if not _is_f32(div.result.type) or not _is_splat(div.operands[0], 1.0):
        return None
    add = defining_op(div.operands[1], "arith.addf")
    if add is None or len(list(add.result.uses)) != 1:
        return None
    one, other = add.operands[0], add.operands[1]
    if not _is_splat(one, 1.0):
        one, other = other, one
    exp = defining_op(other, "math.exp")
    if exp is None or not _is_splat(one, 1.0) or len(list(exp.result.uses)) != 1:
        return None
    neg = defining_op(exp.operands[0], "arith.negf")
    return None if neg is None else neg.operands[0]


def _expand_sigmoids(module, estimate: bool) -> int:
    """Every f32 `1 / (1 + exp(-x))` -> `_sigmoid_f32(x)`, its division a reciprocal estimate when
    `estimate` and not `LATENCY_BOUND`; the dead chain erased. Returns how many."""
    divisions = walk(module, ("arith.divf",))
    count = 0
    with module.context:
        for div in divisions:
            x = _sigmoid_input(div)
            if x is None:
                continue
            add = defining_op(div.operands[1], "arith.addf")
            exp = defining_op(add.operands[0], "math.exp") or defining_op(add.operands[1], "math.exp")
            neg = defining_op(exp.operands[0], "arith.negf")
            with ir.InsertionPoint(div), div.location:
                new = _sigmoid_f32(x, estimate and LATENCY_BOUND not in div.attributes)
            div.result.replace_all_uses_with(new)
            for dead in (div, add, exp):
                dead.erase()
            if not list(neg.result.uses):
                neg.erase()
            count += 1
    return count


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


def _tanh_f32(x, estimate: bool):
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
    # tanh(a) = (1 - e) / (1 + e), e = exp(-2 min(a, 10)) in [2e-9, 0.45]: no cancellation, a
    # denominator in [1, 2]
    e = _exp_nonpositive_f32(arith.MulFOp(arith.MinimumFOp(a, c(TANH_ONE)).result, c(-2.0)).result)
    large = _divide_in_1_2(arith.SubFOp(c(1.0), e).result, arith.AddFOp(e, c(1.0)).result, estimate)
    is_small = arith.CmpFOp(arith.CmpFPredicate.OLT, a, c(TANH_SMALL)).result
    return arith.SelectOp(is_small, small, math.CopySignOp(large, x).result).result


def _divide_in_1_2(numerator, denominator, estimate: bool):
    """numerator / denominator for a denominator in [1, 2] (never inf, 0 or subnormal): a division
    in a scalar loop (LLVM vectorizes it: its 256-bit divide is the faster there); in a kernel's
    vector epilogue, with `estimate`, a reciprocal estimate LLVM refines once (`arcp`), then one
    correction of the quotient (q + (n - q d) / d), which makes the 12-bit estimates (vrcpps) as
    exact as a division. Without (a window kernel's epilogue, `kernel_ir.LATENCY_BOUND`, or an ISA
    whose division is the faster): a division, one op on the chain instead of five (a 3x3 480@14 +
    BN + SiLU, 4 rows per step: 0.060 ms, 0.081 with the estimate)."""
    from torch_mlir.dialects import arith, math

    if not estimate or not isinstance(numerator.type, ir.VectorType):
        return arith.DivFOp(numerator, denominator).result
    f32 = _like(numerator.type, ir.F32Type.get())
    arcp = ir.Attribute.parse("#arith.fastmath<arcp,ninf,contract>")
    reciprocal = arith.DivFOp(_constant(f32, 1.0), denominator, fastmath=arcp).result
    quotient = arith.MulFOp(numerator, reciprocal).result
    residual = math.FmaOp(arith.NegFOp(quotient).result, denominator, numerator).result
    return math.FmaOp(residual, reciprocal, quotient).result


# exp(r) ~ 1 + r (c1 + r (c2 + r (c3 + r (c4 + r c5)))) on |r| <= ln2/2: a minimax fit of the
# relative error (Lawson's iteration over 4001 Chebyshev points, 9.1e-8; 1.5e-7 in f32 Horner).
_EXP_MINIMAX5 = (0.9999997071857718, 0.49999149523355924, 0.16667636201990452, 0.041897930260840946,
                 0.00829031464218948)
SIGMOID_ZERO = -104.0  # exp(-104) = 6.8e-46 rounds to 0 in f32, as does sigmoid below it
SMALLEST_NORMAL_ARG = -87.33  # exp(-87.33) = 1.19e-38: the smallest normal f32 is 1.175e-38
_SCALE_BIAS = 64  # 2^(k+64) stays a normal float for k >= -150; the polynomial carries 2^-64
# 1.5 * 2^23 + 127 + 64: fma(z, log2 e, this) rounds z log2 e to an integer k (the ulp is 1 there)
# and leaves k + 191 in the low bits, whose shift by 23 is the float 2^(k+64).
_ROUND_MAGIC = 12582912.0 + 127 + _SCALE_BIAS


def _exp_nonpositive_f32(z, subnormal: bool = True):
    """exp(z) for z <= 0 (or NaN): no overflow test, 2^k in one step (see the module docstring);
    z at or below -104 (-inf included) gives 0, NaN gives NaN. `subnormal=False` flushes what
    would be subnormal (z < -87.33) to 0 without computing it: an x86 multiply whose result is
    subnormal or underflows takes a microcode assist of ~100 cycles, and a causal mask's -inf
    scores hit it on every masked lane (measured: the fused attention 1.3x slower than with the
    general exp); a softmax term under 1e-38 cannot change a sum that holds the max's 1."""
    from torch_mlir.dialects import arith, math

    f32 = _like(z.type, ir.F32Type.get())
    i32 = _like(z.type, ir.IntegerType.get_signless(32))

    def c(v):
        return _constant(f32, v)

    x = z
    z = arith.MaximumFOp(z, c(SIGMOID_ZERO if subnormal else SMALLEST_NORMAL_ARG)).result  # NaN kept
    t = math.FmaOp(z, c(LOG2E), c(_ROUND_MAGIC)).result
    k = arith.SubFOp(t, c(_ROUND_MAGIC)).result
    r = math.FmaOp(k, c(-LN2_HI), z).result
    r = math.FmaOp(k, c(-LN2_LO), r).result
    unscale = 2.0 ** -_SCALE_BIAS
    p = c(_EXP_MINIMAX5[-1] * unscale)
    for coefficient in reversed((1.0,) + _EXP_MINIMAX5[:-1]):
        p = math.FmaOp(p, r, c(coefficient * unscale)).result
    scale = arith.BitcastOp(f32, arith.ShLIOp(arith.BitcastOp(i32, t).result, _constant(i32, 23)).result).result
    e = arith.MulFOp(p, scale).result  # subnormals rounded once
    if subnormal:
        return e
    under = arith.CmpFOp(arith.CmpFPredicate.OLT, x, c(SMALLEST_NORMAL_ARG)).result
    return arith.SelectOp(under, c(0.0), e).result


def _sigmoid_f32(x, estimate: bool):
    from torch_mlir.dialects import arith, math

    f32 = _like(x.type, ir.F32Type.get())

    def c(v):
        return _constant(f32, v)

    e = _exp_nonpositive_f32(arith.NegFOp(math.AbsFOp(x).result).result)  # exp(-|x|)
    positive = arith.CmpFOp(arith.CmpFPredicate.OGT, x, c(0.0)).result
    numerator = arith.SelectOp(positive, c(1.0), e).result
    return _divide_in_1_2(numerator, arith.AddFOp(e, c(1.0)).result, estimate)
