"""etc-cpu-widen-bf16: bfloat16 arithmetic computed in f32 and rounded to bf16 after every op, as torch does.

No CPU the cpu target compiles for computes in bf16, and LLVM's x86 back end cannot legalize the
vector bf16 arithmetic its loop vectorizer makes of scalar bf16 code: `fmul <4 x bfloat>` hits an
assertion in LegalizeDAG that aborts the whole process (a ReLU -> Linear -> ReLU -> `*0.75 + 0.5`
bf16 model did). So every bf16 arith op becomes `extf` to f32, the op in f32, `truncf` back to
bf16 (upstream `arith-emulate-unsupported-floats`), and every bf16 math op is computed in f32
(upstream `math-extend-to-supported-types`, which f16 math gets too: libm has no f16).

Torch computes each bf16 op in float and rounds its result to bf16, so `x * 0.75 + 0.5` rounds
twice, and rounds as c10's `round_to_nearest_even` does: add 0x7FFF plus the lowest kept bit to the
f32 bits, keep the high half; every NaN becomes 0x7FC0. The conversions are spelled here in those
integer terms, not as `arith.extf`/`arith.truncf`, because:
  - the upstream emulation marks its conversions `fastmath<contract>`, which lets canonicalization
    fold `extf(truncf(y))` to `y` and keep a chain in f32 (one rounding at the end, not torch's);
  - LLVM narrows `fptrunc(fadd(fpext a, c))` back to a bf16 `fadd` (exact for one op), which
    brings the illegal vector bf16 arithmetic back;
  - x86's native conversion (vcvtneps2bf16) flushes subnormals to zero, torch does not; and
    targets without one would call a compiler-rt function the object cannot link.
bf16 <-> f64 goes through f32 (as torch's double -> BFloat16 conversion does).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith

from etc.errors import PassError
from etc.passes.pass_api import function_pass
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import run_upstream


def _is_bf16(type_) -> bool:
    text = str(type_)
    return text == "bf16" or text.endswith("xbf16>")


@function_pass("etc-cpu-widen-bf16",
               "bf16 arith/math ops -> f32 ops with their results rounded to bf16 one by one (as torch rounds)")
def widen_bf16(module, options=None) -> int:
    """Rewrite every bf16 arith and math op under `module` into f32 ones; returns how many
    bf16 <-> f32 conversions became integer code."""
    def error(message):
        return PassError(f"etc-cpu-widen-bf16: {message}")

    if not walk_types(module):
        return 0
    run_upstream(module, "builtin.module(func.func(math-extend-to-supported-types{target-type=f32}, "
                         "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}))",
                 "bf16 emulation", error)
    conversions = [op for op in walk(module, ("arith.truncf", "arith.extf"))
                   if _is_bf16(op.results[0].type) or _is_bf16(op.operands[0].type)]
    with module.context:
        for op in conversions:
            with ir.InsertionPoint(op), op.location:
                source, result_type = op.operands[0], op.results[0].type
                if op.name == "arith.extf":
                    new = _extend(source)
                    if _element(result_type) != "f32":  # bf16 -> f64: exact through f32
                        new = arith.ExtFOp(result_type, new).result
                else:
                    if _element(source.type) != "f32":  # f64 -> bf16: through f32, as torch converts
                        source = arith.TruncFOp(_like(source.type, ir.F32Type.get()), source).result
                    new = _round(source)
            op.results[0].replace_all_uses_with(new)
            op.erase()
    return len(conversions)


def walk_types(module) -> bool:
    """Whether any op under `module` has a bf16 operand or result (the pass's fast exit)."""
    found = []

    def visit(op):
        if any(_is_bf16(v.type) for v in list(op.operands) + list(op.results)):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return bool(found)


def _element(t) -> str:
    return str(ir.VectorType(t).element_type) if isinstance(t, ir.VectorType) else str(t)


def _like(t, element):
    return ir.VectorType.get(ir.VectorType(t).shape, element) if isinstance(t, ir.VectorType) else element


def _int_constant(t, value: int):
    if isinstance(t, ir.VectorType):
        element = ir.VectorType(t).element_type
        return arith.ConstantOp(t, ir.DenseElementsAttr.get_splat(t, ir.IntegerAttr.get(element, value))).result
    return arith.ConstantOp(t, value).result


def _extend(x):
    """bf16 -> f32: the 16 bits become the high half (exact)."""
    i16, i32 = _like(x.type, ir.IntegerType.get_signless(16)), _like(x.type, ir.IntegerType.get_signless(32))
    bits = arith.ExtUIOp(i32, arith.BitcastOp(i16, x).result).result
    return arith.BitcastOp(_like(x.type, ir.F32Type.get()), arith.ShLIOp(bits, _int_constant(i32, 16)).result).result


def _round(x):
    """f32 -> bf16, round to nearest even, NaN -> 0x7FC0 (c10::round_to_nearest_even)."""
    i16, i32 = _like(x.type, ir.IntegerType.get_signless(16)), _like(x.type, ir.IntegerType.get_signless(32))
    bits = arith.BitcastOp(i32, x).result
    sixteen = _int_constant(i32, 16)
    lowest_kept = arith.AndIOp(arith.ShRUIOp(bits, sixteen).result, _int_constant(i32, 1)).result
    bias = arith.AddIOp(lowest_kept, _int_constant(i32, 0x7FFF)).result
    high = arith.TruncIOp(i16, arith.ShRUIOp(arith.AddIOp(bits, bias).result, sixteen).result).result
    is_nan = arith.CmpFOp(arith.CmpFPredicate.UNO, x, x).result
    rounded = arith.SelectOp(is_nan, _int_constant(i16, 0x7FC0), high).result
    return arith.BitcastOp(_like(x.type, ir.BF16Type.get()), rounded).result
