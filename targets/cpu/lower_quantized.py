"""Int8 ops of the cpu target: the folded quantized edge ops -> linalg on i8 with i32 accumulation.

`etc-fold-quantized` (run by `CpuPartitioner` before it partitions) turns each dq -> op -> q
computation into one `etc_quantized.*` op carrying its scales and zero points. Here each
becomes linalg on builtin tensors (spliced into the torch-dialect function between
`torch_c.to_builtin_tensor` / `from_builtin_tensor`, so torch-mlir's pipelines pass it through):

  conv2d (groups 1), linear   a *qgemm*: an i8 x i8 -> i32 contraction on the layout an int8 dot
                              product instruction reads (`etc.cpu.qgemm` on the generic), then
                              the requantization (`etc.cpu.requant`), which `etc-cpu-int8-kernels`
                              (passes/int8_kernels.py) turns into one register-tiled kernel with
                              the requantization as its epilogue;
  conv2d (depthwise, grouped) a direct convolution generic on i8 with i32 accumulation
                              (`etc.cpu.qwindow`) and its requantization;
  linear_dynamic (8da4w)      the activation quantized per row, an int8 x int4 contraction on the
                              packed nibbles (`etc.cpu.qgemm4`) and its epilogue (`etc.cpu.qdequant`):
                              see `_lower_linear_dynamic`;
  add, quantize_per_tensor,   elementwise generics computing exactly what the portable kernels
  dequantize_per_tensor       compute (the same float32 operations in the same order).

The qgemm layout, C[M, N] = A[M, K] x B[K, N]:
  A  [M, KB, 4]        row m's K values in groups of 4 (K padded with zeros to KB * 4), the
                       operand the kernel broadcasts 4 bytes at a time;
  B  [NB, KB, 16, 4]   16-column panels, each column's 4 K values adjacent: one 64-byte row of
                       a panel is what `vpdpbusd` multiplies against the broadcast group.
The dot product multiplies an unsigned byte by a signed one, so the activation operand holds
x + 128 (x xor 0x80, an unsigned byte) and the weights stay signed. As ExecuTorch's reference
kernels compute sum((x - zx) * w) (symmetric int8 weights), the kernel subtracts
(128 + zx) * sum_k w[c, k] per output channel (computed here from the weight, an i32
constant) before requantizing: y = clamp(roundeven(float(acc - corr[c]) * mult[c] + bias[c] /
s_out) + z_out), mult[c] = s_x * s_w[c] / s_out. Convolutions: A is the filter [F, C*KH*KW]
(packed once when the blob is built: its layout chain is a weight's), B the image's im2col
(an affine gather marked `etc.cpu.im2col`, which etc-cpu-int8-kernels packs per call straight from
the padded image); linear layers: A the activation rows, B the weight (packed once).
"""

from __future__ import annotations

import struct

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.gemm import Text
from etc.targets.cpu.gemm import tensor_type as _t
from etc.targets.cpu.lower import EXPANSIONS, vtensor_type
from etc.targets.cpu.passes._util import defining_op as _owner

DYN = -1  # a dynamic dimension in the shapes of this file (`?` in the text)
PANEL = 16  # columns per B panel: one 512-bit vector of i32 accumulators (two 256-bit ones)
GROUP = 4  # K values per dot-product lane

QGEMM = "etc.cpu.qgemm"  # on the contraction generic: {operand roles}
REQUANT = "etc.cpu.requant"  # on its requantization generic
QWINDOW = "etc.cpu.qwindow"  # on a depthwise/grouped int8 convolution generic
QGEMM4 = "etc.cpu.qgemm4"  # on the int8 x int4 contraction of a dynamic linear (8da4w): {group_size}
QDEQUANT = "etc.cpu.qdequant"  # on its epilogue (activation zero point and scale, bias)
IM2COL = "etc.cpu.im2col"  # on a convolution's im2col gather: {stride, dilation}

_CONV = "etc_quantized::conv2d"
_LINEAR = "etc_quantized::linear"
_ADD = "etc_quantized::add"
_Q = "quantized_decomposed::quantize_per_tensor"
_DQ = "quantized_decomposed::dequantize_per_tensor"
_LINEAR_DYNAMIC = "etc_quantized::linear_dynamic"
LOWERED = (_CONV, _LINEAR, _ADD, _Q, _DQ, _LINEAR_DYNAMIC)


# ------------------------------------------------------------------ support
def _constant_name(value) -> str | None:
    owner = _owner(value)
    if owner is None or owner.name != "ml_program.global_load_const":
        return None
    return ir.FlatSymbolRefAttr(owner.attributes["global"]).value


def _element(value) -> str:
    return str(ir.RankedTensorType(value.type).element_type)


def check(op) -> tuple[bool, str]:
    """Can the cpu target's int8 lowering take `op` (an edge op of `LOWERED`)? No trial lowering:
    these lowerings are ours and need the weights' data, which a lone op has not."""
    from etc.dialects import decode_op, op_info

    name = op_info(op.name).torch_name
    a = decode_op(op)
    if name in (_CONV, _LINEAR):
        for arg in ("weight", "weight_scales") + (("bias",) if a["bias"] is not None else ()):
            if _constant_name(a[arg]) is None:
                return False, f"{name}: its {arg} is not a constant"
        if name == _LINEAR and len(ir.RankedTensorType(a["input"].type).shape) != 2:
            return False, f"{name}: the input is not 2-D"
        if not ir.RankedTensorType(a["input"].type).has_static_shape:
            return False, f"{name}: a dynamically shaped input (the cpu target's int8 GEMMs take static shapes)"
        return True, ""
    if name == _LINEAR_DYNAMIC:
        return _check_linear_dynamic(a, op)
    if name == _Q:
        if _element(op.operands[0]) != "f32" or _element(op.results[0]) != "i8":
            return False, f"{name}: the cpu target quantizes float32 to int8 only"
        return True, ""
    if name == _DQ:
        if _element(op.operands[0]) != "i8" or _element(op.results[0]) != "f32":
            return False, f"{name}: the cpu target dequantizes int8 to float32 only"
        return True, ""
    return True, ""


def portable_reasons(ops) -> dict:
    """Op -> why it stays on portable kernels, for the quantized computations of one block that the
    cpu target cannot run as int8: quantization ops it has no lowering for (dynamic activation
    quantization, per-channel or torchao affine dequantization of a weight that was not folded,
    the dynamic/4-bit linear), and the float ops reading their results (a weight dequantized on
    every call would cost more than the portable int8 computation)."""
    from etc.dialects import op_info
    from etc.dialects.quantized_ops import quantized_pattern_ops, role

    pattern = quantized_pattern_ops(ops)
    reasons = {}
    for op in ops:
        op = op.operation if hasattr(op, "operation") else op
        if op not in pattern or role(op.name) is None:
            continue
        name = op_info(op.name).torch_name
        if name not in LOWERED:
            reasons[op] = (f"{pattern[op]}: {name} has no int8 kernel in the cpu target "
                           "(it takes static int8 conv2d, linear, add and the ops keeping their scales)")
        else:
            ok, why = check(op)
            if not ok:
                reasons[op] = why
    for op in ops:
        op = op.operation if hasattr(op, "operation") else op
        if op in pattern and op not in reasons and role(op.name) is None:
            producers = [_owner(v) for v in op.operands]
            if any(p in reasons for p in producers):
                reasons[op] = f"{pattern[op]}: it reads a value the cpu target leaves on portable int8 kernels"
    return reasons


def fold_for_cpu(module) -> dict:
    """Fold the program's dq -> op -> q computations into `etc_quantized` ops (what this target
    runs as int8); a program without quantization ops is left as it is."""
    from etc.dialects.quantized_ops import role
    from etc.passes.fold_quantized import fold_quantized

    found = []

    def visit(op):
        if op.name.startswith("edge.") and role(op.name) is not None:
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return fold_quantized(module) if found else {}


# ------------------------------------------------------------------ splicing text into the function
def _load_torch_c(context) -> None:
    """The torch_c dialect (builtin <-> torch tensor casts) is loaded by the torch-mlir passes that
    use it; load it before building its ops (a pass on an empty module loads its dialects)."""
    if context.is_registered_operation("torch_c.to_builtin_tensor"):
        return
    from torch_mlir.passmanager import PassManager

    with context:
        empty = ir.Module.create()
        PassManager.parse("builtin.module(torch-func-backend-type-conversion)").run(empty.operation)


def _builtin(value) -> tuple[ir.Value, list, str]:
    """torch value -> (builtin tensor value, shape, element)."""
    text = str(value.type)
    import re

    found = re.match(r"!torch\.vtensor<\[([^\]]*)\],(\w+)>", text)
    shape = [DYN if d == "?" else int(d) for d in found.group(1).split(",")] if found.group(1) else []
    element = {"si8": "i8", "si32": "i32", "si64": "i64", "ui8": "ui8"}.get(found.group(2), found.group(2))
    ttype = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size() if d == DYN else d for d in shape],
                                    ir.Type.parse(element if element != "ui8" else "i8"))
    cast = ir.Operation.create("torch_c.to_builtin_tensor", results=[ttype], operands=[value])
    return cast.result, shape, element


def _splice(op, inputs: list, body: str, result_type: str) -> ir.Value:
    """Parse `body` as a function of `inputs` (builtin tensors, `%arg<i>`) returning `%result`, move
    its ops to the insertion point with the edge op's location, return the torch value of the
    result (edge result type)."""
    _load_torch_c(op.context)
    values, types = [], []
    for v in inputs:
        b, shape, element = _builtin(v)
        values.append(b)
        types.append(_t(shape, "i8" if element == "ui8" else element))
    signature = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(types))
    text = f"func.func private @splice({signature}) -> {result_type} {{\n{body}\n  return %result : {result_type}\n}}"
    try:
        parsed = ir.Module.parse(text)
    except Exception as e:  # noqa: BLE001 - text we generate: a failure is a compiler bug
        raise LoweringError(f"int8 lowering: generated IR does not parse: {e}\n{text}") from None
    func = parsed.body.operations[0]
    block = func.regions[0].blocks[0]
    for arg, value in zip(block.arguments, values):
        arg.replace_all_uses_with(value)
    location = op.location
    ops = [o.operation for o in block.operations]
    result = ops[-1].operands[0]
    point = ir.InsertionPoint.current
    for inner in ops[:-1]:
        inner.detach_from_parent()
        point.insert(inner)
        _relocate(inner, location)
    ops[-1].erase()
    out = ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor_type(op.results[0].type)],
                              operands=[result])
    return out.result


def _relocate(op, location) -> None:
    def visit(inner):
        inner.location = location
        return ir.WalkResult.ADVANCE

    op.walk(visit)


def _parallel(n: int) -> str:
    return ", ".join(['"parallel"'] * n)


def _f32(x: float) -> str:
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]


def _dense(array: np.ndarray, element: str) -> str:
    array = np.ascontiguousarray(array)
    return f'dense<"0x{array.tobytes().hex().upper()}"> : {_t(list(array.shape), element)}'


def _requant_body(t: Text, acc: str, corr: str | None, mult: str, bias: str) -> str:
    """Block ops: the accumulator -> i8 (see the module docstring); `acc` is i32 less `corr`, or
    (corr None) already the f32 accumulator. Reads %zp, %lo, %hi (`_requant_constants`)."""
    if corr is not None:
        d, f = t.fresh(), t.fresh()
        t.emit(f"  {d} = arith.subi {acc}, {corr} : i32")
        t.emit(f"  {f} = arith.sitofp {d} : i32 to f32")
        acc = f
    y, r, z, c1, c2, q = (t.fresh() for _ in range(6))
    t.emit(f"  {y} = math.fma {acc}, {mult}, {bias} : f32")
    t.emit(f"  {r} = math.roundeven {y} : f32")
    t.emit(f"  {z} = arith.addf {r}, %zp : f32")
    t.emit(f"  {c1} = arith.maximumf {z}, %lo : f32")
    t.emit(f"  {c2} = arith.minimumf {c1}, %hi : f32")
    t.emit(f"  {q} = arith.fptosi {c2} : f32 to i8")
    return q


def _requant_constants(t: Text, zp: int, lo: int, hi: int) -> None:
    if getattr(t, "requant_constants", False):
        return
    t.requant_constants = True
    t.emit(f"%zp = arith.constant {_f32(zp)} : f32")
    t.emit(f"%lo = arith.constant {_f32(lo)} : f32")
    t.emit(f"%hi = arith.constant {_f32(hi)} : f32")


def _data(e, value, what: str) -> np.ndarray:
    name = _constant_name(value)
    data = e.constants.get(name) if name is not None and e.constants else None
    if data is None:
        raise LoweringError(f"int8 lowering: the {what} must be a constant with data (got {name or 'a value'})")
    if str(ir.RankedTensorType(value.type).element_type) == "bf16":  # held as its uint16 bits
        from etc.runtime.kernels.common import float32_values

        return float32_values(data, "bf16")
    return np.asarray(data)


def _channel_params(e, a: dict, weight: np.ndarray, activation_unsigned_zp) -> tuple:
    """(corr i32, mult f32, bias f32) per output channel."""
    n = weight.shape[0]
    scales = _data(e, a["weight_scales"], "weight scales").astype(np.float64).reshape(-1)
    if scales.size == 1:
        scales = np.full(n, scales[0])
    out_scale = float(a["output_scale"])
    mult = (float(a["input_scale"]) * scales / out_scale).astype(np.float32)
    bias = (np.zeros(n) if a["bias"] is None else _data(e, a["bias"], "bias").astype(np.float64).reshape(-1))
    bias = (bias / out_scale).astype(np.float32)
    if activation_unsigned_zp is None:
        corr = np.zeros(n, np.int32)
    else:
        wsum = weight.reshape(n, -1).astype(np.int64).sum(axis=1)
        corr = ((128 + int(activation_unsigned_zp)) * wsum).astype(np.int32)
    return corr, mult, bias


# ------------------------------------------------------------------ the qgemm
def _qgemm(t: Text, a: str, b: str, M: int, N: int, KB: int, a_unsigned: bool, per: str,
           params: tuple, zp: int, lo: int, hi: int, kind: str) -> str:
    """acc[M, NB, 16] = A x B (i32), cut to [M, N], requantized to i8: the marked pair
    etc-cpu-int8-kernels rewrites. Returns the [M, N] i8 value."""
    NB = -(-N // PANEL)
    corr, mult, bias = params
    zero = t.const(0, "i32")
    empty, acc0, acc = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{empty} = tensor.empty() : {_t([M, NB, PANEL], 'i32')}")
    t.emit(f"{acc0} = linalg.fill ins({zero} : i32) outs({empty} : {_t([M, NB, PANEL], 'i32')}) "
      f"-> {_t([M, NB, PANEL], 'i32')}")
    ea, eb = ("arith.extui", "arith.extsi") if a_unsigned else ("arith.extsi", "arith.extui")
    t.emit(f"{acc} = linalg.generic {{indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, "
      f"affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\", \"reduction\"]}} "
      f"ins({a}, {b} : {_t([M, KB, GROUP], 'i8')}, {_t([NB, KB, PANEL, GROUP], 'i8')}) "
      f"outs({acc0} : {_t([M, NB, PANEL], 'i32')}) attrs = {{{QGEMM} = {{kind = \"{kind}\", "
      f"a_unsigned = {str(a_unsigned).lower()}}}}} {{")
    t.emit("^bb0(%qa: i8, %qb: i8, %qc: i32):")
    t.emit(f"  %qa32 = {ea} %qa : i8 to i32")
    t.emit(f"  %qb32 = {eb} %qb : i8 to i32")
    t.emit("  %qm = arith.muli %qa32, %qb32 : i32")
    t.emit("  %qs = arith.addi %qc, %qm : i32")
    t.emit("  linalg.yield %qs : i32")
    t.emit(f"}} -> {_t([M, NB, PANEL], 'i32')}")
    flat = t.fresh()
    t.emit(f"{flat} = tensor.collapse_shape {acc} [[0], [1, 2]] : {_t([M, NB, PANEL], 'i32')} "
      f"into {_t([M, NB * PANEL], 'i32')}")
    cut = flat
    if NB * PANEL != N:
        cut = t.fresh()
        t.emit(f"{cut} = tensor.extract_slice {flat}[0, 0] [{M}, {N}] [1, 1] : {_t([M, NB * PANEL], 'i32')} "
          f"to {_t([M, N], 'i32')}")
    channels = M if per == "row" else N
    names = []
    for array, element in ((corr, "i32"), (mult, "f32"), (bias, "f32")):
        assert array.shape == (channels,)
        name = t.fresh("p")
        t.emit(f"{name} = arith.constant {_dense(array, element)}")
        names.append(name)
    _requant_constants(t, zp, lo, hi)
    out_empty, out = t.fresh(), t.fresh()
    t.emit(f"{out_empty} = tensor.empty() : {_t([M, N], 'i8')}")
    cmap = "(m)" if per == "row" else "(n)"
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> {cmap}>, "
      f"affine_map<(m, n) -> {cmap}>, affine_map<(m, n) -> {cmap}>, affine_map<(m, n) -> (m, n)>], "
      f"iterator_types = [\"parallel\", \"parallel\"]}} "
      f"ins({cut}, {names[0]}, {names[1]}, {names[2]} : {_t([M, N], 'i32')}, {_t([channels], 'i32')}, "
      f"{_t([channels], 'f32')}, {_t([channels], 'f32')}) outs({out_empty} : {_t([M, N], 'i8')}) "
      f"attrs = {{{REQUANT} = {{per = \"{per}\", zero_point = {zp} : i64, min = {lo} : i64, max = {hi} : i64}}}} {{")
    t.emit("^bb0(%ra: i32, %rc: i32, %rm: f32, %rb: f32, %ro: i8):")
    q = _requant_body(t, "%ra", "%rc", "%rm", "%rb")
    t.emit(f"  linalg.yield {q} : i8")
    t.emit(f"}} -> {_t([M, N], 'i8')}")
    return out


def _pad(t: Text, value: str, shape: list, low: list, high: list, fill: str, element: str = "i8") -> tuple:
    if not any(low) and not any(high):
        return value, shape
    out_shape = [s + lo + hi for s, lo, hi in zip(shape, low, high)]
    name = t.fresh()
    idx = ", ".join(f"%i{k}: index" for k in range(len(shape)))
    t.emit(f"{name} = tensor.pad {value} low[{', '.join(map(str, low))}] high[{', '.join(map(str, high))}] {{")
    t.emit(f"^bb0({idx}):")
    t.emit(f"  tensor.yield {fill} : {element}")
    t.emit(f"}} : {_t(shape, element)} to {_t(out_shape, element)}")
    return name, out_shape


def _conv_geometry(a: dict, op) -> tuple:
    """(input shape, output shape, (sh, sw), (ph, pw), (dh, dw), input zero point) of a folded conv."""
    return (list(ir.RankedTensorType(a["input"].type).shape), list(ir.RankedTensorType(op.results[0].type).shape),
            tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]), int(a["input_zero_point"]))


def _conv_qgemm(e, a: dict, op, weight: np.ndarray) -> ir.Value:
    t = Text()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, op)
    nb_, C, H, W = x_shape
    F, _, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    K, P = C * KH * KW, OH * OW
    KB = -(-K // GROUP)
    NB = -(-P // PANEL)
    fill = t.const(zx, "i8")
    xp, (_, _, Hp, Wp) = _pad(t, "%arg0", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], fill)
    # The filter as A [F, KB, 4]: a layout chain of the weight, packed when the blob is built.
    wf = t.fresh()
    t.emit(f"{wf} = tensor.collapse_shape %arg1 [[0], [1, 2, 3]] : {_t([F, C, KH, KW], 'i8')} into {_t([F, K], 'i8')}")
    zero8 = t.const(0, "i8")
    wp, _ = _pad(t, wf, [F, K], [0, 0], [0, KB * GROUP - K], zero8)
    wa = t.fresh()
    t.emit(f"{wa} = tensor.expand_shape {wp} [[0], [1, 2]] output_shape [{F}, {KB}, {GROUP}] : "
      f"{_t([F, KB * GROUP], 'i8')} into {_t([F, KB, GROUP], 'i8')}")
    params = _channel_params(e, a, weight, zx)
    images = []
    for image in range(nb_):
        xs = t.fresh()
        t.emit(f"{xs} = tensor.extract_slice {xp}[{image}, 0, 0, 0] [1, {C}, {Hp}, {Wp}] [1, 1, 1, 1] : "
          f"{_t([nb_, C, Hp, Wp], 'i8')} to {_t([C, Hp, Wp], 'i8')}")
        # im2col of the image, unsigned (x xor 0x80), as an affine gather [C, KH, KW, OH, OW] (marked
        # with its geometry), then B [NB, KB, 16, 4]: zero padded to whole groups and panels, one
        # transpose. etc-cpu-int8-kernels packs B straight from the image (the gather is never built).
        ce, col = t.fresh(), t.fresh()
        t.emit(f"{ce} = tensor.empty() : {_t([C, KH, KW, OH, OW], 'i8')}")
        dims = "(c, kh, kw, oh, ow)"
        t.emit(f"{col} = linalg.generic {{indexing_maps = [affine_map<{dims} -> (c, oh * {sh} + kh * {dh}, "
          f"ow * {sw} + kw * {dw})>, affine_map<{dims} -> {dims}>], iterator_types = [{_parallel(5)}]}} "
          f"ins({xs} : {_t([C, Hp, Wp], 'i8')}) outs({ce} : {_t([C, KH, KW, OH, OW], 'i8')}) "
          f"attrs = {{{IM2COL} = {{stride = array<i64: {sh}, {sw}>, dilation = array<i64: {dh}, {dw}>}}}} {{")
        t.emit("^bb0(%cx: i8, %co: i8):")
        t.emit("  %cflip = arith.constant -128 : i8")
        t.emit("  %cu = arith.xori %cx, %cflip : i8")
        t.emit("  linalg.yield %cu : i8")
        t.emit(f"}} -> {_t([C, KH, KW, OH, OW], 'i8')}")
        kp = t.fresh()
        t.emit(f"{kp} = tensor.collapse_shape {col} [[0, 1, 2], [3, 4]] : {_t([C, KH, KW, OH, OW], 'i8')} "
          f"into {_t([K, P], 'i8')}")
        padded, _ = _pad(t, kp, [K, P], [0, 0], [KB * GROUP - K, NB * PANEL - P], zero8)
        ex, pe, bp = t.fresh(), t.fresh(), t.fresh()
        t.emit(f"{ex} = tensor.expand_shape {padded} [[0, 1], [2, 3]] output_shape [{KB}, {GROUP}, {NB}, {PANEL}] : "
          f"{_t([KB * GROUP, NB * PANEL], 'i8')} into {_t([KB, GROUP, NB, PANEL], 'i8')}")
        t.emit(f"{pe} = tensor.empty() : {_t([NB, KB, PANEL, GROUP], 'i8')}")
        t.emit(f"{bp} = linalg.transpose ins({ex} : {_t([KB, GROUP, NB, PANEL], 'i8')}) "
          f"outs({pe} : {_t([NB, KB, PANEL, GROUP], 'i8')}) permutation = [2, 0, 3, 1]")
        y = _qgemm(t, wa, bp, F, P, KB, False, "row", params, int(a["output_zero_point"]), int(a["output_min"]),
                   int(a["output_max"]), "convolution")
        img = t.fresh()
        t.emit(f"{img} = tensor.expand_shape {y} [[0, 1], [2, 3]] output_shape [1, {F}, {OH}, {OW}] : "
          f"{_t([F, P], 'i8')} into {_t([1, F, OH, OW], 'i8')}")
        images.append(img)
    if len(images) == 1:
        t.emit(f"%result = tensor.cast {images[0]} : {_t(out_shape, 'i8')} to {_t(out_shape, 'i8')}")
    else:
        t.emit(f"%result = tensor.concat dim(0) {', '.join(images)} : "
          f"({', '.join([_t([1, F, OH, OW], 'i8')] * len(images))}) -> {_t(out_shape, 'i8')}")
    return _splice(op, [e_val for e_val in (a["_t_input"], a["_t_weight"])], t.text(), _t(out_shape, "i8"))


def _conv_window(e, a: dict, op, weight: np.ndarray) -> ir.Value:
    """Depthwise and grouped int8 convolutions: one generic with i32 accumulation over
    (x - zx) * w, then the requantization."""
    t = Text()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, op)
    nb_, C, H, W = x_shape
    F, Cg, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    G = int(a["groups"])
    Fg = F // G
    fill = t.const(zx, "i8")
    xp, (_, _, Hp, Wp) = _pad(t, "%arg0", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], fill)
    xg, wg = t.fresh(), t.fresh()
    t.emit(f"{xg} = tensor.expand_shape {xp} [[0], [1, 2], [3], [4]] output_shape [{nb_}, {G}, {Cg}, {Hp}, {Wp}] : "
      f"{_t([nb_, C, Hp, Wp], 'i8')} into {_t([nb_, G, Cg, Hp, Wp], 'i8')}")
    t.emit(f"{wg} = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [{G}, {Fg}, {Cg}, {KH}, {KW}] : "
      f"{_t([F, Cg, KH, KW], 'i8')} into {_t([G, Fg, Cg, KH, KW], 'i8')}")
    acc_shape = [nb_, G, Fg, OH, OW]
    zero, zx32 = t.const(0, "i32"), t.const(zx, "i32")
    empty, acc0, acc = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{empty} = tensor.empty() : {_t(acc_shape, 'i32')}")
    t.emit(f"{acc0} = linalg.fill ins({zero} : i32) outs({empty} : {_t(acc_shape, 'i32')}) -> {_t(acc_shape, 'i32')}")
    dims = "(b, g, j, oh, ow, c, kh, kw)"
    t.emit(f"{acc} = linalg.generic {{indexing_maps = [affine_map<{dims} -> (b, g, c, oh * {sh} + kh * {dh}, "
      f"ow * {sw} + kw * {dw})>, affine_map<{dims} -> (g, j, c, kh, kw)>, affine_map<{dims} -> (b, g, j, oh, ow)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\", "
      f"\"reduction\", \"reduction\"]}} ins({xg}, {wg} : {_t([nb_, G, Cg, Hp, Wp], 'i8')}, "
      f"{_t([G, Fg, Cg, KH, KW], 'i8')}) outs({acc0} : {_t(acc_shape, 'i32')}) "
      f"attrs = {{{QWINDOW} = {{groups = {G} : i64}}}} {{")
    t.emit("^bb0(%wx: i8, %ww: i8, %wc: i32):")
    t.emit("  %wx32 = arith.extsi %wx : i8 to i32")
    t.emit(f"  %wxc = arith.subi %wx32, {zx32} : i32")
    t.emit("  %ww32 = arith.extsi %ww : i8 to i32")
    t.emit("  %wm = arith.muli %wxc, %ww32 : i32")
    t.emit("  %ws = arith.addi %wc, %wm : i32")
    t.emit("  linalg.yield %ws : i32")
    t.emit(f"}} -> {_t(acc_shape, 'i32')}")
    corr, mult, bias = _channel_params(e, a, weight, None)
    names = []
    for array, element in ((corr, "i32"), (mult, "f32"), (bias, "f32")):
        name = t.fresh("p")
        t.emit(f"{name} = arith.constant {_dense(array.reshape(G, Fg), element)}")
        names.append(name)
    zp, lo, hi = int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"])
    _requant_constants(t, zp, lo, hi)
    out_empty, out = t.fresh(), t.fresh()
    t.emit(f"{out_empty} = tensor.empty() : {_t(acc_shape, 'i8')}")
    d5 = "(b, g, j, oh, ow)"
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<{d5} -> {d5}>, affine_map<{d5} -> (g, j)>, "
      f"affine_map<{d5} -> (g, j)>, affine_map<{d5} -> (g, j)>, affine_map<{d5} -> {d5}>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\"]}} "
      f"ins({acc}, {names[0]}, {names[1]}, {names[2]} : {_t(acc_shape, 'i32')}, {_t([G, Fg], 'i32')}, "
      f"{_t([G, Fg], 'f32')}, {_t([G, Fg], 'f32')}) outs({out_empty} : {_t(acc_shape, 'i8')}) {{")
    t.emit("^bb0(%ra: i32, %rc: i32, %rm: f32, %rb: f32, %ro: i8):")
    q = _requant_body(t, "%ra", "%rc", "%rm", "%rb")
    t.emit(f"  linalg.yield {q} : i8")
    t.emit(f"}} -> {_t(acc_shape, 'i8')}")
    t.emit(f"%result = tensor.collapse_shape {out} [[0], [1, 2], [3], [4]] : {_t(acc_shape, 'i8')} "
      f"into {_t(out_shape, 'i8')}")
    return _splice(op, [a["_t_input"], a["_t_weight"]], t.text(), _t(out_shape, "i8"))


def _conv_depthwise_f32(e, a: dict, op, weight: np.ndarray) -> ir.Value:
    """A depthwise int8 convolution on the f32 window kernel (etc-cpu-window-kernels), exactly: the
    taps (x - zx) * w are integers below 2^16 in magnitude and their sums stay below 2^24 (see
    `_exact_in_f32`), so float32 computes the same integer accumulator; the requantization is then
    the qgemm epilogue's (fma, roundeven, zero point, clamp) on it."""
    t = Text()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, op)
    nb_, C, H, W = x_shape
    _, _, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    n = 4
    ident = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    t.emit(f"%zx = arith.constant {zx} : i32")
    t.emit(f"%xe = tensor.empty() : {_t(x_shape, 'f32')}")
    t.emit(f"%xf = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = [{_parallel(n)}]}} "
      f"ins(%arg0 : {_t(x_shape, 'i8')}) outs(%xe : {_t(x_shape, 'f32')}) {{")
    t.emit("^bb0(%x: i8, %o: f32):")
    t.emit("  %x32 = arith.extsi %x : i8 to i32")
    t.emit("  %xc = arith.subi %x32, %zx : i32")
    t.emit("  %y = arith.sitofp %xc : i32 to f32")
    t.emit("  linalg.yield %y : f32")
    t.emit(f"}} -> {_t(x_shape, 'f32')}")
    zero = t.const("0.0", "f32")
    xp, (_, _, Hp, Wp) = _pad(t, "%xf", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], zero, "f32")
    # The filter widened from the int8 weight argument: etc-cpu-prepack-constants folds the cast
    # when the blob is built, which stores it as int8 again (`blob.pack_constants`).
    t.emit(f"%wc = tensor.collapse_shape %arg1 [[0, 1], [2], [3]] : {_t([C, 1, KH, KW], 'i8')} into "
           f"{_t([C, KH, KW], 'i8')}")
    t.emit(f"%we = tensor.empty() : {_t([C, KH, KW], 'f32')}")
    ident3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
    t.emit(f"%w = linalg.generic {{indexing_maps = [{ident3}, {ident3}], iterator_types = [{_parallel(3)}]}} "
           f"ins(%wc : {_t([C, KH, KW], 'i8')}) outs(%we : {_t([C, KH, KW], 'f32')}) {{")
    t.emit("^bb0(%wi: i8, %wo: f32):")
    t.emit("  %wf = arith.sitofp %wi : i8 to f32")
    t.emit("  linalg.yield %wf : f32")
    t.emit(f"}} -> {_t([C, KH, KW], 'f32')}")
    t.emit(f"%ie = tensor.empty() : {_t(out_shape, 'f32')}")
    t.emit(f"%init = linalg.fill ins({zero} : f32) outs(%ie : {_t(out_shape, 'f32')}) -> {_t(out_shape, 'f32')}")
    t.emit(f"%acc = linalg.depthwise_conv_2d_nchw_chw {{dilations = dense<[{dh}, {dw}]> : tensor<2xi64>, "
      f"strides = dense<[{sh}, {sw}]> : tensor<2xi64>}} ins({xp}, %w : {_t([nb_, C, Hp, Wp], 'f32')}, "
      f"{_t([C, KH, KW], 'f32')}) outs(%init : {_t(out_shape, 'f32')}) -> {_t(out_shape, 'f32')}")
    _, mult, bias = _channel_params(e, a, weight, None)
    t.emit(f"%mult = arith.constant {_dense(mult, 'f32')}")
    t.emit(f"%bias = arith.constant {_dense(bias, 'f32')}")
    zp, lo, hi = int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"])
    _requant_constants(t, zp, lo, hi)
    chan = "affine_map<(d0, d1, d2, d3) -> (d1)>"
    t.emit(f"%oe = tensor.empty() : {_t(out_shape, 'i8')}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {chan}, {chan}, {ident}], "
      f"iterator_types = [{_parallel(n)}]}} ins(%acc, %mult, %bias : {_t(out_shape, 'f32')}, {_t([C], 'f32')}, "
      f"{_t([C], 'f32')}) outs(%oe : {_t(out_shape, 'i8')}) {{")
    t.emit("^bb0(%ra: f32, %rm: f32, %rb: f32, %ro: i8):")
    q = _requant_body(t, "%ra", None, "%rm", "%rb")
    t.emit(f"  linalg.yield {q} : i8")
    t.emit(f"}} -> {_t(out_shape, 'i8')}")
    return _splice(op, [a["_t_input"], a["_t_weight"]], t.text(), _t(out_shape, "i8"))


def _shape0(value) -> list:
    return list(ir.RankedTensorType(value.type).shape)


def _exact_in_f32(weight: np.ndarray) -> bool:
    """Every partial sum of (x - zx) * w (|x - zx| <= 255) is an integer float32 holds exactly."""
    taps = weight.reshape(weight.shape[0], -1)
    return int(np.abs(taps.astype(np.int64)).sum(axis=1).max(initial=0)) * 255 < 2 ** 24


def _lower_conv(e, v: dict, op) -> list:
    from etc.dialects import decode_op

    a = decode_op(op)
    a["_t_input"], a["_t_weight"] = v["input"], v["weight"]
    weight = _data(e, a["weight"], "weight")
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise LoweringError(f"{_CONV}: the weight must be int8 [F, C, KH, KW]")
    groups = int(a["groups"])
    if groups == 1:
        return [_conv_qgemm(e, a, op, weight)]
    if groups == weight.shape[0] == weight.shape[0] * weight.shape[1] == _shape0(a["input"])[1] \
            and _exact_in_f32(weight):
        return [_conv_depthwise_f32(e, a, op, weight)]
    return [_conv_window(e, a, op, weight)]


def _lower_linear(e, v: dict, op) -> list:
    from etc.dialects import decode_op

    a = decode_op(op)
    weight = _data(e, a["weight"], "weight")
    M, K = ir.RankedTensorType(a["input"].type).shape
    N = weight.shape[0]
    KB, NB = -(-K // GROUP), -(-N // PANEL)
    t = Text()
    # Activation rows as A [M, KB, 4], unsigned (x xor 0x80); K padded (the weight's pad is zero).
    xe, xa = t.fresh(), t.fresh()
    t.emit(f"{xe} = tensor.empty() : {_t([M, KB, GROUP], 'i8')}")
    t.emit(f"{xa} = linalg.generic {{indexing_maps = [affine_map<(m, kb, kl) -> (m, kb, kl)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\"]}} outs({xe} : {_t([M, KB, GROUP], 'i8')}) {{")
    t.emit("^bb0(%lo_: i8):")
    t.emit("  %lm = linalg.index 0 : index")
    t.emit("  %lkb = linalg.index 1 : index")
    t.emit("  %lkl = linalg.index 2 : index")
    t.emit("  %lc4 = arith.constant 4 : index")
    t.emit(f"  %lkmax = arith.constant {K - 1} : index")
    t.emit("  %lk0 = arith.muli %lkb, %lc4 : index")
    t.emit("  %lk1 = arith.addi %lk0, %lkl : index")
    t.emit("  %lk = arith.minui %lk1, %lkmax : index")
    t.emit(f"  %lx = tensor.extract %arg0[%lm, %lk] : {_t([M, K], 'i8')}")
    t.emit("  %lflip = arith.constant -128 : i8")
    t.emit("  %lu = arith.xori %lx, %lflip : i8")
    t.emit("  linalg.yield %lu : i8")
    t.emit(f"}} -> {_t([M, KB, GROUP], 'i8')}")
    # The weight as B [NB, KB, 16, 4]: a layout chain, packed when the blob is built.
    zero8 = t.const(0, "i8")
    wp, _ = _pad(t, "%arg1", [N, K], [0, 0], [NB * PANEL - N, KB * GROUP - K], zero8)
    we, wt0, wt = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{we} = tensor.expand_shape {wp} [[0, 1], [2, 3]] output_shape [{NB}, {PANEL}, {KB}, {GROUP}] : "
      f"{_t([NB * PANEL, KB * GROUP], 'i8')} into {_t([NB, PANEL, KB, GROUP], 'i8')}")
    t.emit(f"{wt0} = tensor.empty() : {_t([NB, KB, PANEL, GROUP], 'i8')}")
    t.emit(f"{wt} = linalg.transpose ins({we} : {_t([NB, PANEL, KB, GROUP], 'i8')}) "
      f"outs({wt0} : {_t([NB, KB, PANEL, GROUP], 'i8')}) permutation = [0, 2, 1, 3]")
    params = _channel_params(e, a, weight, int(a["input_zero_point"]))
    y = _qgemm(t, xa, wt, M, N, KB, True, "col", params, int(a["output_zero_point"]), int(a["output_min"]),
               int(a["output_max"]), "contraction")
    t.emit(f"%result = tensor.cast {y} : {_t([M, N], 'i8')} to {_t([M, N], 'i8')}")
    return [_splice(op, [v["input"], v["weight"]], t.text(), _t([M, N], "i8"))]


def _empty_like(t: Text, name: str, shape: list, element: str, like_element: str) -> None:
    """`name = tensor.empty(...)` of `shape`, its dynamic sizes read from `%arg0` (of the same
    shape, elements `like_element`)."""
    sizes = []
    for d, size in enumerate(shape):
        if size < 0:  # DYN, or MLIR's own dynamic sentinel
            t.emit(f"{name}_c{d} = arith.constant {d} : index")
            t.emit(f"{name}_d{d} = tensor.dim %arg0, {name}_c{d} : {_t(shape, like_element)}")
            sizes.append(f"{name}_d{d}")
    t.emit(f"{name} = tensor.empty({', '.join(sizes)}) : {_t(shape, element)}")


def _lower_add(e, v: dict, op) -> list:
    from etc.dialects import decode_op

    a = decode_op(op)
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    n = len(shape)
    ident = f"affine_map<({', '.join(f'd{i}' for i in range(n))}) -> ({', '.join(f'd{i}' for i in range(n))})>"
    t = Text()
    _requant_constants(t, int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"]))
    t.emit(f"%za = arith.constant {int(a['a_zero_point'])} : i32")
    t.emit(f"%zb = arith.constant {int(a['b_zero_point'])} : i32")
    t.emit(f"%sa = arith.constant {_f32(a['a_scale'])} : f32")
    t.emit(f"%sb = arith.constant {_f32(a['b_scale'])} : f32")
    t.emit(f"%inv = arith.constant {_f32(1.0 / float(a['output_scale']))} : f32")
    _empty_like(t, "%e", shape, "i8", "i8")
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {ident}, {ident}], "
      f"iterator_types = [{_parallel(n)}]}} ins(%arg0, %arg1 : {_t(shape, 'i8')}, "
      f"{_t(shape, 'i8')}) outs(%e : {_t(shape, 'i8')}) {{")
    t.emit("^bb0(%a: i8, %b: i8, %o: i8):")
    t.emit("  %a32 = arith.extsi %a : i8 to i32")
    t.emit("  %ac = arith.subi %a32, %za : i32")
    t.emit("  %af = arith.sitofp %ac : i32 to f32")
    t.emit("  %x = arith.mulf %af, %sa : f32")
    t.emit("  %b32 = arith.extsi %b : i8 to i32")
    t.emit("  %bc = arith.subi %b32, %zb : i32")
    t.emit("  %bf = arith.sitofp %bc : i32 to f32")
    t.emit("  %y = arith.mulf %bf, %sb : f32")
    t.emit("  %s = arith.addf %x, %y : f32")
    t.emit("  %m = arith.mulf %s, %inv : f32")
    t.emit("  %r = math.roundeven %m : f32")
    t.emit("  %z = arith.addf %r, %zp : f32")
    t.emit("  %c1 = arith.maximumf %z, %lo : f32")
    t.emit("  %c2 = arith.minimumf %c1, %hi : f32")
    t.emit("  %q = arith.fptosi %c2 : f32 to i8")
    t.emit("  linalg.yield %q : i8")
    t.emit(f"}} -> {_t(shape, 'i8')}")
    return [_splice(op, [v["a"], v["b"]], t.text(), _t(shape, "i8"))]


def _elementwise(op, v_input, shape, in_el: str, out_el: str, body: list, head: list) -> ir.Value:
    n = len(shape)
    ident = f"affine_map<({', '.join(f'd{i}' for i in range(n))}) -> ({', '.join(f'd{i}' for i in range(n))})>"
    t = Text()
    for line in head:
        t.emit(line)
    _empty_like(t, "%e", shape, out_el, in_el)
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {ident}], "
      f"iterator_types = [{_parallel(n)}]}} ins(%arg0 : {_t(shape, in_el)}) "
      f"outs(%e : {_t(shape, out_el)}) {{")
    t.emit(f"^bb0(%x: {in_el}, %o: {out_el}):")
    for line in body:
        t.emit("  " + line)
    t.emit(f"}} -> {_t(shape, out_el)}")
    return _splice(op, [v_input], t.text(), _t(shape, out_el))


def _lower_quantize(e, v: dict, op) -> list:
    """clamp(roundeven(x * f32(1 / scale)) + zp): the portable kernel's float32 operations."""
    from etc.dialects import decode_op

    a = decode_op(op)
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    head = [f"%inv = arith.constant {_f32(1.0 / float(a['scale']))} : f32",
            f"%zp = arith.constant {_f32(int(a['zero_point']))} : f32",
            f"%lo = arith.constant {_f32(int(a['quant_min']))} : f32",
            f"%hi = arith.constant {_f32(int(a['quant_max']))} : f32"]
    body = ["%m = arith.mulf %x, %inv : f32", "%r = math.roundeven %m : f32", "%z = arith.addf %r, %zp : f32",
            "%c1 = arith.maximumf %z, %lo : f32", "%c2 = arith.minimumf %c1, %hi : f32",
            "%q = arith.fptosi %c2 : f32 to i8", "linalg.yield %q : i8"]
    return [_elementwise(op, v["input"], shape, "f32", "i8", body, head)]


def _lower_dequantize(e, v: dict, op) -> list:
    """(int32(x) - zp) * scale in float32, as the portable kernel."""
    from etc.dialects import decode_op

    a = decode_op(op)
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    head = [f"%zp = arith.constant {int(a['zero_point'])} : i32",
            f"%s = arith.constant {_f32(float(a['scale']))} : f32"]
    body = ["%x32 = arith.extsi %x : i8 to i32", "%c = arith.subi %x32, %zp : i32",
            "%f = arith.sitofp %c : i32 to f32", "%y = arith.mulf %f, %s : f32", "linalg.yield %y : f32"]
    return [_elementwise(op, v["input"], shape, "i8", "f32", body, head)]


EXPANSIONS.update({_CONV: _lower_conv, _LINEAR: _lower_linear, _ADD: _lower_add, _Q: _lower_quantize,
                   _DQ: _lower_dequantize})


# ------------------------------------------------------------------ 8da4w: dynamic int8 rows x int4 groups
def _check_linear_dynamic(a: dict, op) -> tuple[bool, str]:
    shape = list(ir.RankedTensorType(a["input"].type).shape)
    if a["activation_granularity"] != "per_row" or int(a["weight_bits"]) != 4:
        return False, (f"{_LINEAR_DYNAMIC}: the cpu target takes int8 activations quantized per row with 4-bit "
                       f"weights (torchao 8da4w), not {a['activation_granularity']} activations with "
                       f"{a['weight_bits']}-bit weights")
    if len(shape) != 2:
        return False, f"{_LINEAR_DYNAMIC}: the input is not 2-D"
    if _element(a["input"]) != "f32" or _element(op.results[0]) != "f32":
        return False, f"{_LINEAR_DYNAMIC}: the cpu target takes float32 activations"
    group, k = int(a["group_size"]), shape[1]
    if group % 8 or k % group:
        return False, f"{_LINEAR_DYNAMIC}: group size {group} is not a multiple of 8 dividing K = {k}"
    if a["weight_zero_points"] is not None:
        return False, f"{_LINEAR_DYNAMIC}: 4-bit weights with zero points (the cpu target takes symmetric ones)"
    for arg in ("weight", "weight_scales") + (("bias",) if a["bias"] is not None else ()):
        if _constant_name(a[arg]) is None:
            return False, f"{_LINEAR_DYNAMIC}: its {arg} is not a constant"
    return True, ""


def _lower_linear_dynamic(e, v: dict, op) -> list:
    """torchao 8da4w: y = dequant(quant_row(x)) @ dequant(w4).T + bias, as
      q[m, k], s[m], zp[m]    the activation quantized per row exactly as the portable kernel does
                              (torchao's ASYMMETRIC [1, K] blocks: range including 0, roundeven),
                              stored as [M, K/8, 2, 4]: each 8 values as their even then odd ones,
                              the order the packed weight's low and high nibbles have;
      acc[m, n]               sum_k q[m, k] * w[n, k] * ws[n, k / group] (f32), the generic marked
                              `etc.cpu.qgemm4` on the weight's bytes in panels [NB, K/8, 16, 4] (each
                              byte two k, low nibble first: the program's packing, only regrouped, so
                              the chain is a layout one packed when the blob is built) and the scales
                              as [NB, G, 16];
      y = (acc - zp[m] * C[n]) * s[m] + bias[n]
                              the generic marked `etc.cpu.qdequant`; C[n] = sum_k w[n, k] ws[n, k/group]
                              takes the activation's zero point out of the K loop: a constant
                              argument the blob does not store (the runtime derives it from the
                              packed weight and scales at load, `blob.DERIVATIONS`).
    etc-cpu-int8-kernels turns the pair into one kernel (int8 x int4 dot products on vpdpbusd)."""
    from etc.dialects import decode_op

    a = decode_op(op)
    M, K = ir.RankedTensorType(a["input"].type).shape
    M = DYN if ir.ShapedType.is_dynamic_size(M) else M
    packed = _data(e, a["weight"], "weight")
    scales = _data(e, a["weight_scales"], "weight scales").astype(np.float32)
    N, gs = packed.shape[0], int(a["group_size"])
    G, KB8, NB = K // gs, K // 8, -(-N // PANEL)
    if packed.shape != (N, K // 2) or scales.shape != (N, G):
        raise LoweringError(f"{_LINEAR_DYNAMIC}: weight {packed.shape} / scales {scales.shape} do not match K = {K}")
    from etc.runtime.kernels.quantized import int4_column_sums

    colsum = int4_column_sums(packed, scales)
    bias = (np.zeros(N, np.float32) if a["bias"] is None
            else _data(e, a["bias"], "bias").astype(np.float32).reshape(-1))
    t = Text()
    m_t = lambda *rest, el="f32": _t([M, *rest], el)  # noqa: E731
    t.emit("%c0 = arith.constant 0 : index")
    t.emit(f"%M = tensor.dim %arg0, %c0 : {m_t(K)}")
    dyn = "%M" if M == DYN else ""
    row = "affine_map<(m) -> (m)>"
    # The activation's range per row, including 0 (torchao's choose_qparams_affine).
    t.emit(f"%zero = arith.constant {_f32(0.0)} : f32")
    t.emit(f"%re = tensor.empty({dyn}) : {m_t()}")
    t.emit(f"%r0 = linalg.fill ins(%zero : f32) outs(%re : {m_t()}) -> {m_t()}")
    t.emit(f"%range:2 = linalg.generic {{indexing_maps = [affine_map<(m, k) -> (m, k)>, affine_map<(m, k) -> (m)>, "
      f"affine_map<(m, k) -> (m)>], iterator_types = [\"parallel\", \"reduction\"]}} ins(%arg0 : {m_t(K)}) "
      f"outs(%r0, %r0 : {m_t()}, {m_t()}) {{")
    t.emit("^bb0(%x: f32, %l: f32, %h: f32):")
    t.emit("  %l2 = arith.minimumf %l, %x : f32")
    t.emit("  %h2 = arith.maximumf %h, %x : f32")
    t.emit("  linalg.yield %l2, %h2 : f32, f32")
    t.emit(f"}} -> ({m_t()}, {m_t()})")
    # scale = max((hi - lo) / 255, tiny), 1 / scale, zp = clamp(-128 - roundeven(lo / scale)).
    t.emit(f"%params:3 = linalg.generic {{indexing_maps = [{row}, {row}, {row}, {row}, {row}], "
      f"iterator_types = [\"parallel\"]}} ins(%range#0, %range#1 : {m_t()}, {m_t()}) "
      f"outs(%re, %re, %re : {m_t()}, {m_t()}, {m_t()}) {{")
    t.emit("^bb0(%l: f32, %h: f32, %o1: f32, %o2: f32, %o3: f32):")
    t.emit(f"  %c255 = arith.constant {_f32(255.0)} : f32")
    t.emit(f"  %tiny = arith.constant {_f32(np.finfo(np.float32).tiny)} : f32")
    t.emit(f"  %one = arith.constant {_f32(1.0)} : f32")
    t.emit(f"  %qmin = arith.constant {_f32(-128.0)} : f32")
    t.emit(f"  %qmax = arith.constant {_f32(127.0)} : f32")
    t.emit("  %d = arith.subf %h, %l : f32")
    t.emit("  %s0 = arith.divf %d, %c255 : f32")
    t.emit("  %s = arith.maximumf %s0, %tiny : f32")
    t.emit("  %inv = arith.divf %one, %s : f32")
    t.emit("  %ls = arith.divf %l, %s : f32")
    t.emit("  %lr = math.roundeven %ls : f32")
    t.emit("  %z0 = arith.subf %qmin, %lr : f32")
    t.emit("  %z1 = arith.maximumf %z0, %qmin : f32")
    t.emit("  %z = arith.minimumf %z1, %qmax : f32")
    t.emit("  linalg.yield %s, %inv, %z : f32, f32, f32")
    t.emit(f"}} -> ({m_t()}, {m_t()}, {m_t()})")
    # q as [M, K/8, 2, 4]: [m, kb, p, j] = q[m, 8 kb + 2 j + p].
    q_t = m_t(KB8, 2, 4, el="i8")
    t.emit(f"%qe = tensor.empty({dyn}) : {q_t}")
    t.emit(f"%q = linalg.generic {{indexing_maps = [affine_map<(m, kb, p, j) -> (m, kb * 8 + j * 2 + p)>, "
      f"affine_map<(m, kb, p, j) -> (m)>, affine_map<(m, kb, p, j) -> (m)>, "
      f"affine_map<(m, kb, p, j) -> (m, kb, p, j)>], iterator_types = [{_parallel(4)}]}} "
      f"ins(%arg0, %params#1, %params#2 : {m_t(K)}, {m_t()}, {m_t()}) outs(%qe : {q_t}) {{")
    t.emit("^bb0(%x: f32, %inv: f32, %z: f32, %o: i8):")
    t.emit(f"  %qmin = arith.constant {_f32(-128.0)} : f32")
    t.emit(f"  %qmax = arith.constant {_f32(127.0)} : f32")
    t.emit("  %y = arith.mulf %x, %inv : f32")
    t.emit("  %r = math.roundeven %y : f32")
    t.emit("  %a = arith.addf %r, %z : f32")
    t.emit("  %c1 = arith.maximumf %a, %qmin : f32")
    t.emit("  %c2 = arith.minimumf %c1, %qmax : f32")
    t.emit("  %i = arith.fptosi %c2 : f32 to i8")
    t.emit("  linalg.yield %i : i8")
    t.emit(f"}} -> {q_t}")
    # The weight's bytes as [NB, K/8, 16, 4] and the scales as [NB, G, 16]: layout chains.
    zero8 = t.const(0, "i8")
    wp, _ = _pad(t, "%arg1", [N, K // 2], [0, 0], [NB * PANEL - N, 0], zero8)
    t.emit(f"%we = tensor.expand_shape {wp} [[0, 1], [2, 3]] output_shape [{NB}, {PANEL}, {KB8}, 4] : "
      f"{_t([NB * PANEL, K // 2], 'i8')} into {_t([NB, PANEL, KB8, 4], 'i8')}")
    t.emit(f"%wt0 = tensor.empty() : {_t([NB, KB8, PANEL, 4], 'i8')}")
    t.emit(f"%wt = linalg.transpose ins(%we : {_t([NB, PANEL, KB8, 4], 'i8')}) "
      f"outs(%wt0 : {_t([NB, KB8, PANEL, 4], 'i8')}) permutation = [0, 2, 1, 3]")
    sp, _ = _pad(t, "%arg2", [N, G], [0, 0], [NB * PANEL - N, 0], t.const(_f32(0.0), "f32"), "f32")
    t.emit(f"%se = tensor.expand_shape {sp} [[0, 1], [2]] output_shape [{NB}, {PANEL}, {G}] : "
      f"{_t([NB * PANEL, G], 'f32')} into {_t([NB, PANEL, G], 'f32')}")
    t.emit(f"%st0 = tensor.empty() : {_t([NB, G, PANEL], 'f32')}")
    t.emit(f"%st = linalg.transpose ins(%se : {_t([NB, PANEL, G], 'f32')}) "
      f"outs(%st0 : {_t([NB, G, PANEL], 'f32')}) permutation = [0, 2, 1]")
    # acc[m, nb, c] = sum q * w * ws: one k per (kb, p, j); the nibble p of byte (nb, kb, c, j).
    acc_t = m_t(NB, PANEL)
    t.emit(f"%ae = tensor.empty({dyn}) : {acc_t}")
    t.emit(f"%a0 = linalg.fill ins(%zero : f32) outs(%ae : {acc_t}) -> {acc_t}")
    dims = "(m, nb, c, kb, p, j)"
    t.emit(f"%acc = linalg.generic {{indexing_maps = [affine_map<{dims} -> (m, kb, p, j)>, "
      f"affine_map<{dims} -> (nb, kb, c, j)>, affine_map<{dims} -> (nb, kb floordiv {gs // 8}, c)>, "
      f"affine_map<{dims} -> (m, nb, c)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\", "
      f"\"reduction\", \"reduction\", \"reduction\"]}} ins(%q, %wt, %st : {q_t}, {_t([NB, KB8, PANEL, 4], 'i8')}, "
      f"{_t([NB, G, PANEL], 'f32')}) outs(%a0 : {acc_t}) attrs = {{{QGEMM4} = {{group_size = {gs} : i64}}}} {{")
    t.emit("^bb0(%qa: i8, %qb: i8, %qs: f32, %qc: f32):")
    t.emit("  %p = linalg.index 4 : index")
    t.emit("  %p8 = arith.index_cast %p : index to i8")
    t.emit("  %c4 = arith.constant 4 : i8")
    t.emit("  %c8 = arith.constant 8 : i8")
    t.emit("  %c15 = arith.constant 15 : i8")
    t.emit("  %sh = arith.muli %p8, %c4 : i8")
    t.emit("  %n0 = arith.shrui %qb, %sh : i8")
    t.emit("  %n1 = arith.andi %n0, %c15 : i8")
    t.emit("  %n2 = arith.xori %n1, %c8 : i8")
    t.emit("  %wv = arith.subi %n2, %c8 : i8")
    t.emit("  %a32 = arith.extsi %qa : i8 to i32")
    t.emit("  %w32 = arith.extsi %wv : i8 to i32")
    t.emit("  %pr = arith.muli %a32, %w32 : i32")
    t.emit("  %pf = arith.sitofp %pr : i32 to f32")
    t.emit("  %sum = math.fma %pf, %qs, %qc : f32")
    t.emit("  linalg.yield %sum : f32")
    t.emit(f"}} -> {acc_t}")
    t.emit(f"%flat = tensor.collapse_shape %acc [[0], [1, 2]] : {acc_t} into {m_t(NB * PANEL)}")
    cut = "%flat"
    if NB * PANEL != N:
        cut = "%cut"
        size = "%M" if M == DYN else str(M)
        t.emit(f"%cut = tensor.extract_slice %flat[0, 0] [{size}, {N}] [1, 1] : {m_t(NB * PANEL)} to {m_t(N)}")
    t.emit(f"%bias = arith.constant {_dense(bias, 'f32')}")
    t.emit(f"%ye = tensor.empty({dyn}) : {m_t(N)}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, "
      f"affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, "
      f"affine_map<(m, n) -> (m, n)>], iterator_types = [\"parallel\", \"parallel\"]}} "
      f"ins({cut}, %params#2, %params#0, %arg3, %bias : {m_t(N)}, {m_t()}, {m_t()}, {_t([N], 'f32')}, "
      f"{_t([N], 'f32')}) outs(%ye : {m_t(N)}) attrs = {{{QDEQUANT}}} {{")
    t.emit("^bb0(%y: f32, %z: f32, %s: f32, %cs: f32, %b: f32, %o: f32):")
    t.emit("  %zc = arith.mulf %z, %cs : f32")
    t.emit("  %d = arith.subf %y, %zc : f32")
    t.emit("  %r = math.fma %d, %s, %b : f32")
    t.emit("  linalg.yield %r : f32")
    t.emit(f"}} -> {m_t(N)}")
    # C is not stored: the runtime derives it from the weight and the scales when it loads the blob.
    weight_name, scales_name = _constant_name(a["weight"]), _constant_name(a["weight_scales"])
    colsum_value = e.new_constant(f"{weight_name}#colsum", colsum, {"op": "int4_colsum", "weight": weight_name,
                                                                  "scales": scales_name, "group_size": gs})
    return [_splice(op, [v["input"], v["weight"], v["weight_scales"], colsum_value], t.text(), m_t(N))]


EXPANSIONS[_LINEAR_DYNAMIC] = _lower_linear_dynamic
