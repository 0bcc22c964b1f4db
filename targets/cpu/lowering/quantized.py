"""Int8 ops of the cpu target: what etc-cpu-lower-quantized takes, and the pieces its lowerings share.

`etc-fold-quantized` (the program pipeline `CpuPartitioner` runs before it partitions) turns each
dq -> op -> q computation into one `etc_quantized.*` op carrying its scales and zero points.
etc-cpu-edge-to-torch keeps each as a `torch.operator` of its name, and etc-cpu-lower-quantized
replaces it with linalg on builtin tensors, between `torch_c` casts so torch-mlir's pipelines
pass it through:

  conv2d (groups 1), linear   a *qgemm*: an i8 x i8 -> i32 contraction on the layout an int8 dot
                              product instruction reads (`etc.cpu.qgemm` on the generic), then
                              the requantization (`etc.cpu.requant`), which etc-cpu-int8-kernels
                              turns into one register-tiled kernel with the requantization as its
                              epilogue (`quantized_gemm.py`);
  conv2d (depthwise, grouped) a depthwise conv on the f32 window kernel when exact, else a direct
                              convolution generic on i8 with i32 accumulation (`etc.cpu.qwindow`),
                              and its requantization (`quantized_gemm.py`);
  linear_dynamic              the activation quantized per row or per tensor on every call, an
                              int8 x int8 or int8 x int4 contraction on the weight's bytes
                              (`etc.cpu.qgemm_dynamic`) and its float epilogue (`etc.cpu.qdequant`)
                              (`quantized_dynamic.py`);
  add, quantize_per_tensor,   elementwise generics computing exactly what the portable kernels
  dequantize_per_tensor       compute (the same float32 operations in the same order): here.

`check` and `portable_reasons` say what the partitioner may delegate (no trial lowering: these
lowerings need the weights' data, which a lone op has not). A lowering gets a `QuantizedOp`: the
op's arguments (tensors as builtin values), its result type, the weights' data and a way to add
a constant the runtime derives at load (8da4w's column sums).
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.ir.ops import as_operation, defining_op
from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs
from etc.targets.cpu.kernel_ir import KernelText, f32_literal, identity_map, iterators, splice, tensor_type
from etc.targets.cpu.kernels.int8_match import QADD

DYN = -1  # a dynamic dimension in the shapes of the lowerings (`?` in the text)

CONV = "etc_quantized::conv2d"
LINEAR = "etc_quantized::linear"
ADD = "etc_quantized::add"
QUANTIZE = "quantized_decomposed::quantize_per_tensor"
DEQUANTIZE = "quantized_decomposed::dequantize_per_tensor"
LINEAR_DYNAMIC = "etc_quantized::linear_dynamic"
LOWERED = (CONV, LINEAR, ADD, QUANTIZE, DEQUANTIZE, LINEAR_DYNAMIC)

# On the module: {constant: recipe} of the constants a lowering added that the runtime derives at
# load from stored ones (`blob.DERIVATIONS`), so the blob does not store them.
DERIVED_ATTR = "etc.cpu.derived"


def read_derived(module_op) -> dict:
    """{constant: recipe} of `DERIVED_ATTR` on the module."""
    if DERIVED_ATTR not in module_op.attributes:
        return {}
    entries = ir.DictAttr(module_op.attributes[DERIVED_ATTR])
    out = {}
    for i in range(len(entries)):
        recipe = ir.DictAttr(entries[i].attr)
        out[entries[i].name] = {recipe[k].name: (ir.IntegerAttr(recipe[k].attr).value
                                                 if isinstance(recipe[k].attr, ir.IntegerAttr)
                                                 else ir.StringAttr(recipe[k].attr).value)
                                for k in range(len(recipe))}
    return out


# ------------------------------------------------------------------ support
def constant_name(value) -> str | None:
    """The program constant `value` is: an `ml_program.global_load_const` of it (an edge function),
    or the entry argument labelled `constant:<name>` (a torch one, seen through its builtin cast)."""
    owner = defining_op(value)
    if owner is not None and owner.name == "torch_c.to_builtin_tensor":
        value, owner = owner.operands[0], defining_op(owner.operands[0])
    if owner is not None:
        return ir.FlatSymbolRefAttr(owner.attributes["global"]).value \
            if owner.name == "ml_program.global_load_const" else None
    fn = value.owner.owner
    fn = as_operation(fn)
    if fn is None or fn.name != "func.func":
        return None
    label = arg_attrs(fn)[value.arg_number].get(ARG_ATTR)
    kind, _, name = ir.StringAttr(label).value.partition(":") if label is not None else ("", "", "")
    return name if kind == "constant" else None


def element_of(value) -> str:
    return str(ir.RankedTensorType(value.type).element_type)


def check(op) -> tuple[bool, str]:
    """Can the cpu target's int8 lowering take `op` (an edge op of `LOWERED`)? No trial lowering:
    these lowerings are ours and need the weights' data, which a lone op has not."""
    from etc.dialects import decode_op, op_info

    name = op_info(op.name).torch_name
    a = decode_op(op)
    if name in (CONV, LINEAR):
        for arg in ("weight", "weight_scales") + (("bias",) if a["bias"] is not None else ()):
            if constant_name(a[arg]) is None:
                return False, f"{name}: its {arg} is not a constant"
        if name == LINEAR and len(ir.RankedTensorType(a["input"].type).shape) != 2:
            return False, f"{name}: the input is not 2-D"
        if not ir.RankedTensorType(a["input"].type).has_static_shape:
            return False, f"{name}: a dynamically shaped input (the cpu target's int8 GEMMs take static shapes)"
        return True, ""
    if name == LINEAR_DYNAMIC:
        return check_linear_dynamic(a, op)
    if name == QUANTIZE:
        if element_of(op.operands[0]) != "f32" or element_of(op.results[0]) != "i8":
            return False, f"{name}: the cpu target quantizes float32 to int8 only"
        return True, ""
    if name == DEQUANTIZE:
        if element_of(op.operands[0]) != "i8" or element_of(op.results[0]) != "f32":
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
        op = as_operation(op)
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
        op = as_operation(op)
        if op in pattern and op not in reasons and role(op.name) is None:
            producers = [defining_op(v) for v in op.operands]
            if any(p in reasons for p in producers):
                reasons[op] = f"{pattern[op]}: it reads a value the cpu target leaves on portable int8 kernels"
    return reasons


def check_linear_dynamic(a: dict, op) -> tuple[bool, str]:
    """Float32 activations (2-D) quantized per row (torchao 8da4w / 8da8w) or per tensor (PT2E's
    dynamic config) x symmetric int8 or int4 weights with scales per channel or per group; the
    weights, scales and bias constants."""
    shape = list(ir.RankedTensorType(a["input"].type).shape)
    granularity, bits = a["activation_granularity"], int(a["weight_bits"])
    if granularity not in ("per_row", "per_tensor"):
        return False, (f"{LINEAR_DYNAMIC}: activations quantized {granularity} (the cpu target quantizes them "
                       "per row or per tensor)")
    if bits not in (4, 8):
        return False, f"{LINEAR_DYNAMIC}: {bits}-bit weights (the cpu target takes int8 and int4 ones)"
    if len(shape) != 2:
        return False, f"{LINEAR_DYNAMIC}: the input is not 2-D"
    if element_of(a["input"]) != "f32" or element_of(op.results[0]) != "f32":
        return False, f"{LINEAR_DYNAMIC}: the cpu target takes float32 activations"
    group, k = int(a["group_size"]), shape[1]
    if bits == 4 and (group % 8 or k % group):
        return False, f"{LINEAR_DYNAMIC}: group size {group} is not a multiple of 8 dividing K = {k}"
    if bits == 8 and group != k and (group % 4 or k % group):
        return False, f"{LINEAR_DYNAMIC}: group size {group} is neither K = {k} nor a multiple of 4 dividing it"
    if a["weight_zero_points"] is not None:
        return False, (f"{LINEAR_DYNAMIC}: {bits}-bit weights with zero points (the cpu target takes symmetric "
                       "ones)")
    for arg in ("weight", "weight_scales") + (("bias",) if a["bias"] is not None else ()):
        if constant_name(a[arg]) is None:
            return False, f"{LINEAR_DYNAMIC}: its {arg} is not a constant"
    return True, ""


# ------------------------------------------------------------------ shared by the lowerings
def requant_body(t: KernelText, acc: str, corr: str | None, mult: str, bias: str) -> str:
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


def requant_constants(t: KernelText, zp: int, lo: int, hi: int) -> None:
    if getattr(t, "requant_constants", False):
        return
    t.requant_constants = True
    t.emit(f"%zp = arith.constant {f32_literal(zp)} : f32")
    t.emit(f"%lo = arith.constant {f32_literal(lo)} : f32")
    t.emit(f"%hi = arith.constant {f32_literal(hi)} : f32")


def constant_data(table, value, what: str) -> np.ndarray:
    """The data of the constant `value` is (bfloat16 as float32), from the constant table."""
    name = constant_name(value)
    data = table.get(name) if name is not None else None
    if data is None:
        raise LoweringError(f"int8 lowering: the {what} must be a constant with data (got {name or 'a value'})")
    if str(ir.RankedTensorType(value.type).element_type) == "bf16":  # held as its uint16 bits
        from etc.runtime.kernels.common import float32_values

        return float32_values(data, "bf16")
    return np.asarray(data)


def channel_params(q: "QuantizedOp", a: dict, weight: np.ndarray, activation_unsigned_zp) -> tuple:
    """(corr i32, mult f32, bias f32) per output channel."""
    n = weight.shape[0]
    scales = q.data(a["weight_scales"], "weight scales").astype(np.float64).reshape(-1)
    if scales.size == 1:
        scales = np.full(n, scales[0])
    out_scale = float(a["output_scale"])
    mult = (float(a["input_scale"]) * scales / out_scale).astype(np.float32)
    bias = (np.zeros(n) if a["bias"] is None else q.data(a["bias"], "bias").astype(np.float64).reshape(-1))
    bias = (bias / out_scale).astype(np.float32)
    if activation_unsigned_zp is None:
        corr = np.zeros(n, np.int32)
    else:
        wsum = weight.reshape(n, -1).astype(np.int64).sum(axis=1)
        corr = ((128 + int(activation_unsigned_zp)) * wsum).astype(np.int32)
    return corr, mult, bias


class QuantizedOp:
    """What a lowering of one quantized op gets: its schema arguments (`args`: tensors as builtin
    values, the rest Python values), its result type (builtin), the constant table the weights'
    data come from, and `add_constant` (a constant argument the lowering adds, see `new_constant`).
    The lowering's text goes in front of the op (`splice`)."""

    def __init__(self, op, args: dict, result_type, table, add_constant):
        self.op, self.args, self.result_type, self.table = op, args, result_type, table
        self._add_constant = add_constant

    def data(self, value, what: str) -> np.ndarray:
        return constant_data(self.table, value, what)

    def new_constant(self, name: str, array: np.ndarray, recipe: dict) -> ir.Value:
        """A constant argument holding `array`, which the runtime derives at load from the constants
        `recipe` names (`blob.DERIVATIONS`), so the program does not store it; its builtin value."""
        return self._add_constant(name, np.ascontiguousarray(array), recipe)

    def splice(self, body: str, inputs: list) -> ir.Value:
        """The body text (reading `%arg<i>` for `inputs[i]`, builtin values, defining `%result` of the
        op's result type) in front of the op, its ops at the op's location; the result's value."""
        result = str(self.result_type)
        signature = ", ".join(f"%arg{i}: {v.type}" for i, v in enumerate(inputs))
        text = f"func.func private @splice({signature}) -> {result} {{\n{body}\n  return %result : {result}\n}}"
        try:
            (value,) = splice(text, inputs, self.op)
        except Exception as e:  # noqa: BLE001 - text we generate: a failure is a compiler bug
            raise LoweringError(f"int8 lowering: generated IR does not parse: {e}\n{text}") from None
        return value


# ------------------------------------------------------------------ elementwise ops
def empty_like_arg0(t: KernelText, name: str, shape: list, element: str, like_element: str) -> None:
    """`name = tensor.empty(...)` of `shape`, its dynamic sizes read from `%arg0` (of the same
    shape, elements `like_element`)."""
    sizes = []
    for d, size in enumerate(shape):
        if size < 0:  # DYN, or MLIR's own dynamic sentinel
            t.emit(f"{name}_c{d} = arith.constant {d} : index")
            t.emit(f"{name}_d{d} = tensor.dim %arg0, {name}_c{d} : {tensor_type(shape, like_element)}")
            sizes.append(f"{name}_d{d}")
    t.emit(f"{name} = tensor.empty({', '.join(sizes)}) : {tensor_type(shape, element)}")


def lower_add(q: QuantizedOp) -> ir.Value:
    a = q.args
    shape = list(q.result_type.shape)
    n = len(shape)
    ident = identity_map(n)
    t = KernelText()
    requant_constants(t, int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"]))
    t.emit(f"%za = arith.constant {int(a['a_zero_point'])} : i32")
    t.emit(f"%zb = arith.constant {int(a['b_zero_point'])} : i32")
    t.emit(f"%sa = arith.constant {f32_literal(a['a_scale'])} : f32")
    t.emit(f"%sb = arith.constant {f32_literal(a['b_scale'])} : f32")
    t.emit(f"%inv = arith.constant {f32_literal(1.0 / float(a['output_scale']))} : f32")
    empty_like_arg0(t, "%e", shape, "i8", "i8")
    # the same numbers as the constants above, for etc-cpu-int8-kernels to fuse the add into the
    # epilogue of the qgemm that produces one of its operands (`int8_match.ResidualAdd`)
    marker = (f"{QADD} = {{a_zero_point = {int(a['a_zero_point'])} : i64, b_zero_point = {int(a['b_zero_point'])} "
              f": i64, a_scale = {f32_literal(a['a_scale'])} : f32, b_scale = {f32_literal(a['b_scale'])} : f32, "
              f"inverse = {f32_literal(1.0 / float(a['output_scale']))} : f32, zero_point = "
              f"{int(a['output_zero_point'])} : i64, min = {int(a['output_min'])} : i64, max = "
              f"{int(a['output_max'])} : i64}}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {ident}, {ident}], "
      f"iterator_types = [{iterators(n)}]}} ins(%arg0, %arg1 : {tensor_type(shape, 'i8')}, "
      f"{tensor_type(shape, 'i8')}) outs(%e : {tensor_type(shape, 'i8')}) attrs = {{{marker}}} {{")
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
    t.emit(f"}} -> {tensor_type(shape, 'i8')}")
    return q.splice(t.text(), [a["a"], a["b"]])


def _elementwise(q: QuantizedOp, shape, in_el: str, out_el: str, body: list, head: list) -> ir.Value:
    n = len(shape)
    ident = identity_map(n)
    t = KernelText()
    for line in head:
        t.emit(line)
    empty_like_arg0(t, "%e", shape, out_el, in_el)
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {ident}], "
      f"iterator_types = [{iterators(n)}]}} ins(%arg0 : {tensor_type(shape, in_el)}) "
      f"outs(%e : {tensor_type(shape, out_el)}) {{")
    t.emit(f"^bb0(%x: {in_el}, %o: {out_el}):")
    for line in body:
        t.emit("  " + line)
    t.emit(f"}} -> {tensor_type(shape, out_el)}")
    return q.splice(t.text(), [q.args["input"]])


def lower_quantize(q: QuantizedOp) -> ir.Value:
    """clamp(roundeven(x * f32(1 / scale)) + zp): the portable kernel's float32 operations."""
    a = q.args
    shape = list(q.result_type.shape)
    head = [f"%inv = arith.constant {f32_literal(1.0 / float(a['scale']))} : f32",
            f"%zp = arith.constant {f32_literal(int(a['zero_point']))} : f32",
            f"%lo = arith.constant {f32_literal(int(a['quant_min']))} : f32",
            f"%hi = arith.constant {f32_literal(int(a['quant_max']))} : f32"]
    body = ["%m = arith.mulf %x, %inv : f32", "%r = math.roundeven %m : f32", "%z = arith.addf %r, %zp : f32",
            "%c1 = arith.maximumf %z, %lo : f32", "%c2 = arith.minimumf %c1, %hi : f32",
            "%q = arith.fptosi %c2 : f32 to i8", "linalg.yield %q : i8"]
    return _elementwise(q, shape, "f32", "i8", body, head)


def lower_dequantize(q: QuantizedOp) -> ir.Value:
    """(int32(x) - zp) * scale in float32, as the portable kernel."""
    a = q.args
    shape = list(q.result_type.shape)
    head = [f"%zp = arith.constant {int(a['zero_point'])} : i32",
            f"%s = arith.constant {f32_literal(float(a['scale']))} : f32"]
    body = ["%x32 = arith.extsi %x : i8 to i32", "%c = arith.subi %x32, %zp : i32",
            "%f = arith.sitofp %c : i32 to f32", "%y = arith.mulf %f, %s : f32", "linalg.yield %y : f32"]
    return _elementwise(q, shape, "i8", "f32", body, head)
