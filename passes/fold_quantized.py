"""etc-fold-quantized: fold dq -> op -> q patterns into quantized edge ops (`etc_quantized::`).

A PT2E or torchao program says "int8" only through its quantization ops around float ones:

    %x  = dequantize_per_tensor(%xq, 0.02, -3)           %w = dequantize_per_channel(%wq, %s, %z, 0)
    %c  = convolution(%x, %w, %b, ...)  ;  %r = relu(%c)  ;  %q = quantize_per_tensor(%r, 0.01, -128)

which is one int8 convolution: `etc_quantized.conv2d(%xq, 0.02, -3, %wq, %s, %b, ..., 0.01, -128,
-128, 127)`, the ReLU as the output's integer range. This pass finds those computations and
rewrites each into one op carrying its scales and zero points (dialects/quantized_ops.py,
`FUSED_OPS`): what an int8 back end implements and what the numerics report measures.

Folded (weights must be constants, symmetric: zero points 0):
- ops that keep their input's scale (view/permute/squeeze/slice, max pooling, concat, zero
  padding: on int8 it fills with the zero point) between a
  dequantize and a quantize with the same parameters: the op itself, on the int8 values;
- static conv2d (incl. depthwise/grouped) and linear (`addmm`/`mm` of a transposed weight), with
  an optional ReLU / hardtanh / clamp between the op and the quantize;
- static add (alpha = 1), same optional clamp;
- dynamic linear: PT2E's `choose_qparams -> q -> dq` per tensor, torchao's `choose_qparams_affine
  -> quantize_affine -> dequantize_affine` per row, or float activations (weight-only); the
  weight int8 per channel or per group, or 4-bit (torchao's int4 range) packed at compile time
  two per byte (low nibble first): the program stores it once, at half the bytes of int8.

Anything else stays as it is (its dq/q ops run as portable kernels). Weights are never
requantized: the pass reuses the program's int8 constants (4-bit ones are repacked once).
Not in `to_edge`'s pipeline: a portable program keeps ExecuTorch's dq/q form (so it runs on
stock ExecuTorch); a back end with int8 kernels, or a user (`edge.transform(["etc-fold-quantized"])`,
`etc-opt`), runs it.
"""

from __future__ import annotations

import numpy as np

from etc.ir.ops import defining_op, user_op
from etc.runtime.kernels.common import float32_values
from etc.runtime.kernels.quantized import pack_int4  # the layout the kernels read

PASS_NAME = "etc-fold-quantized"
SUMMARY = "Fold dequantize -> op -> quantize patterns into quantized edge ops with their scales"

_QD = "edge.quantized_decomposed_"
DQ_TENSOR = _QD + "dequantize_per_tensor"
DQ_CHANNEL = _QD + "dequantize_per_channel"
Q_TENSOR = _QD + "quantize_per_tensor"
DQ_DYNAMIC = _QD + "dequantize_per_tensor_tensor"
Q_DYNAMIC = _QD + "quantize_per_tensor_tensor"
CHOOSE = _QD + "choose_qparams_tensor"
AO_DQ, AO_Q, AO_CHOOSE = "edge.torchao_dequantize_affine", "edge.torchao_quantize_affine", \
    "edge.torchao_choose_qparams_affine"
CLAMPS = {"edge.relu", "edge.hardtanh", "edge.clamp"}
VIEWS = {"edge.view", "edge.p_unsafe_view"}


def _single_use(value) -> bool:
    return len(list(value.uses)) == 1


class _Folder:
    def __init__(self, module):
        from etc.passes.constant_table import ConstantTable

        self.module = module
        self.table = ConstantTable(module)
        self.folded: dict[str, int] = {}

    # --------------------------------------------------------------- matching helpers
    def op_of(self, value, name):
        op = defining_op(value) if value is not None else None
        return op if op is not None and op.name == name else None

    def args(self, op) -> dict:
        from etc.dialects import decode_op

        return decode_op(op)

    def symmetric_weight(self, dq):
        """(int8 weight value, per-channel scale value or array, weight array) of a dq of a constant
        int8 weight with zero points 0 along axis 0; None otherwise."""
        a = self.args(dq)
        weight = self.table.of_value(a["input"])
        if weight is None or weight.dtype != np.int8:
            return None
        if dq.name == DQ_CHANNEL:
            if a["axis"] != 0:
                return None
            zp = a["zero_points"]
            if zp is not None:
                zeros = self.table.of_value(zp)
                if zeros is None or np.any(zeros):
                    return None
            return a["input"], a["scales"], weight
        if dq.name == DQ_TENSOR and a["zero_point"] == 0:
            return a["input"], np.full((weight.shape[0],), a["scale"], np.float32), weight
        return None

    def static_dq(self, value):
        """(int8 value, scale, zero point) of a static per-tensor dequantize producing `value`."""
        dq = self.op_of(value, DQ_TENSOR)
        if dq is None:
            return None
        a = self.args(dq)
        if a["dtype"] != _torch().int8:
            return None
        return a["input"], a["scale"], a["zero_point"]

    def output(self, op_value):
        """The static int8 quantize consuming `op_value` (through one optional clamp op):
        (quantize op, ops to erase, scale, zero point, min, max)."""
        if not _single_use(op_value):
            return None
        user = _user(op_value)
        chain = []
        clamp = None
        if user.name in CLAMPS:
            clamp = user
            chain.append(user)
            if not _single_use(user.results[0]):
                return None
            user = _user(user.results[0])
        if user.name != Q_TENSOR:
            return None
        a = self.args(user)
        if a["dtype"] != _torch().int8:
            return None
        scale, zp, lo, hi = a["scale"], a["zero_point"], a["quant_min"], a["quant_max"]
        if clamp is not None:
            bounds = self.clamp_bounds(clamp)
            if bounds is None:
                return None
            low, high = bounds
            if low is not None:
                lo = max(lo, int(np.round(np.float32(low) / np.float32(scale))) + zp)
            if high is not None:
                hi = min(hi, int(np.round(np.float32(high) / np.float32(scale))) + zp)
        return user, chain, scale, zp, lo, hi

    def clamp_bounds(self, op):
        if op.name == "edge.relu":
            return 0.0, None
        a = self.args(op)
        if op.name == "edge.hardtanh":
            return a["min_val"], a["max_val"]
        low, high = a.get("min"), a.get("max")
        if isinstance(low, bool) or isinstance(high, bool) or not all(
                v is None or isinstance(v, (int, float)) for v in (low, high)):
            return None
        return low, high

    # ------------------------------------------------------------------ rewriting
    def replace(self, torch_name, arguments, result, erase, location_ops):
        from torch_mlir import ir

        from etc.dialects.aten import build_op
        from etc.dialects.edge import OPS as EDGE_OPS

        owner = defining_op(result)
        with ir.InsertionPoint(owner), ir.Location.fused([o.location for o in location_ops]):
            new = build_op(torch_name, arguments, [result.type], dialect_ops=EDGE_OPS)
        if "etc.upper_bounds" in owner.attributes:  # a dynamic dim keeps the bound memory planning needs
            new.attributes["etc.upper_bounds"] = owner.attributes["etc.upper_bounds"]
        result.replace_all_uses_with(new.results[0])
        for op in erase:
            op.erase()
        self.folded[torch_name.split("::")[1]] = self.folded.get(torch_name.split("::")[1], 0) + 1

    def scales_value(self, scales, anchor):
        """A weight-scale operand: the dq's own constant, or a new one for a per-tensor weight."""
        from torch_mlir import ir

        if isinstance(scales, np.ndarray):
            with ir.InsertionPoint(anchor), anchor.location:
                return self.table.load("weight_scales", scales.astype(np.float32), ir.F32Type.get())
        return scales

    # ------------------------------------------------------------------ patterns
    def conv(self, op) -> bool:
        a = self.args(op)
        if a["transposed"] or len(a["stride"]) != 2 or any(a["output_padding"]):
            return False
        x, dq_w = self.static_dq(a["input"]), defining_op(a["weight"])
        if x is None or dq_w is None or dq_w.name not in (DQ_CHANNEL, DQ_TENSOR):
            return False
        weight = self.symmetric_weight(dq_w)
        out = self.output(op.results[0])
        if weight is None or out is None:
            return False
        q, chain, scale, zp, lo, hi = out
        self.replace("etc_quantized::conv2d", {
            "input": x[0], "input_scale": x[1], "input_zero_point": x[2], "weight": weight[0],
            "weight_scales": self.scales_value(weight[1], op), "bias": a["bias"], "stride": a["stride"],
            "padding": a["padding"], "dilation": a["dilation"], "groups": a["groups"], "output_scale": scale,
            "output_zero_point": zp, "output_min": lo, "output_max": hi},
            q.results[0], [q, *reversed(chain), op], [op, q])
        return True

    def transposed_weight_dq(self, value):
        """The dq op of `permute(dq(W), [1, 0])` (a linear's weight after decomposition)."""
        permute = self.op_of(value, "edge.permute")
        if permute is None or list(self.args(permute)["dims"]) != [1, 0] or not _single_use(permute.results[0]):
            return None, None
        return defining_op(self.args(permute)["self"]), permute

    def linear_parts(self, op):
        """(activation value, weight dq op, permute op, bias value) of addmm/mm, or None."""
        a = self.args(op)
        if op.name == "edge.addmm":
            if a["beta"] != 1 or a["alpha"] != 1:
                return None
            activation, weight, bias = a["mat1"], a["mat2"], a["self"]
            if len(_shape(bias)) != 1:
                return None
        else:
            activation, weight, bias = a["self"], a["mat2"], None
        dq_w, permute = self.transposed_weight_dq(weight)
        if dq_w is None:
            return None
        return activation, dq_w, permute, bias

    def linear(self, op) -> bool:
        parts = self.linear_parts(op)
        if parts is None:
            return False
        activation, dq_w, permute, bias = parts
        # A linear on [B, T, K] is view -> addmm -> view: the views keep rows, so they move to int8.
        in_view = self.row_view(defining_op(activation))
        x = self.static_dq(self.args(in_view)["self"] if in_view is not None else activation)
        if x is not None and dq_w.name in (DQ_CHANNEL, DQ_TENSOR):
            weight = self.symmetric_weight(dq_w)
            out_view = self.row_view(_user(op.results[0])) if _single_use(op.results[0]) else None
            out = self.output((out_view or op).results[0])
            if weight is None or out is None or (in_view is not None and not _single_use(activation)):
                return False
            q, chain, scale, zp, lo, hi = out
            if in_view is not None:
                in_view.operands[0] = x[0]
                in_view.results[0].set_type(_int8_like(in_view.results[0]))
            arguments = {
                "input": in_view.results[0] if in_view is not None else x[0], "input_scale": x[1],
                "input_zero_point": x[2], "weight": weight[0], "weight_scales": self.scales_value(weight[1], op),
                "bias": bias, "output_scale": scale, "output_zero_point": zp, "output_min": lo, "output_max": hi}
            if out_view is None:
                self.replace("etc_quantized::linear", arguments, q.results[0], [q, *reversed(chain), op, permute],
                             [op, q])
                return True
            self.replace_inside_view(arguments, op, out_view, q, [q, *reversed(chain), op, permute])
            return True
        return self.linear_dynamic(op, activation, dq_w, permute, bias)

    @staticmethod
    def row_view(op):
        """`op` if it is a view keeping the last dimension (rows only regrouped), else None."""
        if op is None or op.name not in VIEWS:
            return None
        source = op.operands[0]
        return op if _shape(source)[-1:] == _shape(op.results[0])[-1:] else None

    def replace_inside_view(self, arguments, op, out_view, q, erase):
        """The folded linear replaces `op` (2-D int8 result), and the output view, now on int8,
        replaces the quantize."""
        from torch_mlir import ir

        from etc.dialects.aten import build_op
        from etc.dialects.edge import OPS as EDGE_OPS

        with ir.InsertionPoint(out_view), ir.Location.fused([op.location, q.location]):
            new = build_op("etc_quantized::linear", arguments, [_int8_like(op.results[0])], dialect_ops=EDGE_OPS)
        if "etc.upper_bounds" in op.attributes:
            new.attributes["etc.upper_bounds"] = op.attributes["etc.upper_bounds"]
        out_view.operands[0] = new.results[0]
        out_view.results[0].set_type(q.results[0].type)
        q.results[0].replace_all_uses_with(out_view.results[0])
        for dead in erase:
            dead.erase()
        self.folded["linear"] = self.folded.get("linear", 0) + 1

    def dynamic_activation(self, value):
        """(float input, granularity, eps) of a per-call quantized activation, ("none") for a
        float one; None for anything else. A view flattening leading dims may sit between the
        dequantize and the matmul (a linear on [B, T, K]): it is moved onto the float input."""
        dq = defining_op(value)
        if dq is None:
            return value, "none", 0.0
        view = None
        if dq.name in VIEWS:
            inner = defining_op(self.args(dq)["self"])
            if inner is not None and (inner.name.startswith(_QD) or inner.name.startswith("edge.torchao_")):
                if _shape(dq.results[0])[-1:] != _shape(self.args(dq)["self"])[-1:]:
                    return None  # the view mixes the quantized rows: not a per-row activation any more
                view, dq = dq, inner
        if view is None and not (dq.name.startswith(_QD) or dq.name.startswith("edge.torchao_")):
            return value, "none", 0.0  # a float activation: a weight-only linear
        found = self.quantized_activation(dq)
        if found is None or view is None:
            return found
        source, granularity, eps = found
        if not _single_use(view.results[0]):
            # Shared (q, k and v read one view of the quantized norm output): the others still
            # fold through it, so this linear gets its own view of the float input.
            from torch_mlir import ir

            view = view.clone(ip=ir.InsertionPoint(view))
        view.operands[0] = source  # view the float input instead of its dequantized copy
        return view.results[0], granularity, eps

    def quantized_activation(self, dq):
        if dq.name == DQ_DYNAMIC:
            a = self.args(dq)
            q = self.op_of(a["input"], Q_DYNAMIC)
            choose = defining_op(a["scale"])
            if q is None or choose is None or choose.name != CHOOSE:
                return None
            c = self.args(choose)
            if (c["quant_min"], c["quant_max"]) != (-128, 127) or self.args(q)["input"] != c["input"]:
                return None
            return c["input"], "per_tensor", c["eps"]
        if dq.name == AO_DQ:
            a = self.args(dq)
            q = self.op_of(a["input"], AO_Q)
            choose = defining_op(a["scale"])
            if q is None or choose is None or choose.name != AO_CHOOSE:
                return None
            c = self.args(choose)
            shape = _shape(c["input"])
            if (c["mapping_type"] != "ASYMMETRIC" or c["eps"] is not None or len(shape) < 2
                    or list(c["block_size"]) != [1] * (len(shape) - 1) + [shape[-1]]
                    or (c["quant_min"], c["quant_max"]) != (-128, 127)):
                return None
            return c["input"], "per_row", 0.0
        return None  # another quantization op: not a scheme linear_dynamic computes

    def group_weight(self, dq_w):
        """(weight array, bits, group size, scales (N, G), zero points (N, G) or None) of a
        constant weight dequantized per channel or per group."""
        from torch_mlir import ir

        a = self.args(dq_w)
        weight = self.table.of_value(a["input"])
        if weight is None or weight.dtype != np.int8 or weight.ndim != 2:
            return None
        n, k = weight.shape
        if dq_w.name == DQ_CHANNEL:
            if a["axis"] != 0:
                return None
            scales, zps, group, qmin, qmax = a["scales"], a["zero_points"], k, a["quant_min"], a["quant_max"]
        elif dq_w.name == AO_DQ:
            block = list(a["block_size"])
            if block[0] != 1 or k % block[1]:
                return None
            scales, zps, group, qmin, qmax = a["scale"], a["zero_point"], block[1], a["quant_min"], a["quant_max"]
        else:
            return None
        scale_array = self.table.of_value(scales)
        zp_array = self.table.of_value(zps) if zps is not None else None
        if scale_array is None or (zps is not None and zp_array is None):
            return None
        bits = 4 if (qmin, qmax) == (-8, 7) else 8
        scale_array = float32_values(scale_array, str(ir.RankedTensorType(scales.type).element_type))
        scale_array = scale_array.reshape(n, k // group)
        if zp_array is not None:
            zp_array = zp_array.astype(np.int8).reshape(n, k // group)
            if not np.any(zp_array):
                zp_array = None
        return weight, bits, group, scale_array, zp_array

    def linear_dynamic(self, op, activation, dq_w, permute, bias) -> bool:
        from torch_mlir import ir

        act = self.dynamic_activation(activation)
        weight = self.group_weight(dq_w)
        if act is None or weight is None:
            return False
        array, bits, group, scales, zps = weight
        packed = pack_int4(array) if bits == 4 else array  # once, here: the program stores two per byte
        element = ir.IntegerType.get_signless(8) if bits == 8 else ir.IntegerType.get_unsigned(8)
        with ir.InsertionPoint(op), op.location:
            w = self.table.load("weight_int4" if bits == 4 else "weight_int8", packed, element)
            s = self.table.load("weight_scales", scales, ir.F32Type.get())
            z = (self.table.load("weight_zero_points", zps, ir.IntegerType.get_signless(8))
                 if zps is not None else None)
        self.replace("etc_quantized::linear_dynamic", {
            "input": act[0], "activation_granularity": act[1], "activation_eps": act[2], "weight": w,
            "weight_bits": bits, "group_size": group, "weight_scales": s, "weight_zero_points": z, "bias": bias},
            op.results[0], [op, permute], [op])
        return True

    def add(self, op) -> bool:
        a = self.args(op)
        if a["alpha"] != 1:
            return False
        x, y = self.static_dq(a["self"]), self.static_dq(a["other"])
        out = self.output(op.results[0])
        if x is None or y is None or out is None or _shape(a["self"]) != _shape(a["other"]):
            return False
        q, chain, scale, zp, lo, hi = out
        self.replace("etc_quantized::add", {
            "a": x[0], "a_scale": x[1], "a_zero_point": x[2], "b": y[0], "b_scale": y[1], "b_zero_point": y[2],
            "output_scale": scale, "output_zero_point": zp, "output_min": lo, "output_max": hi},
            q.results[0], [q, *reversed(chain), op], [op, q])
        return True

    def same_scale(self, op) -> bool:
        """dq -> (view, permute, max pool, concat, ...) -> q with the same parameters on both sides:
        the op moves or selects int8 values, so it runs on them directly (no float round trip)."""
        from torch_mlir import ir

        tensors = [v for v in op.operands if isinstance(v.type, ir.RankedTensorType)]
        dqs = [self.op_of(v, DQ_TENSOR) for v in tensors]
        if not tensors or any(dq is None for dq in dqs) or any(list(r.uses) for r in list(op.results)[1:]):
            return False
        params = {tuple(self.args(dq)[k] for k in ("scale", "zero_point", "quant_min", "quant_max", "dtype"))
                  for dq in dqs}
        if len(params) != 1 or not _single_use(op.results[0]):
            return False
        q = _user(op.results[0])
        if q.name != Q_TENSOR:
            return False
        qa = self.args(q)
        if (qa["scale"], qa["zero_point"], qa["quant_min"], qa["quant_max"], qa["dtype"]) != params.pop():
            return False
        if op.name == "edge.constant_pad_nd":  # zero padding on int8 fills with the zero point (0 exactly)
            if float(self.args(op).get("value") or 0.0) != 0.0:
                return False
            with op.location:
                op.attributes["value"] = ir.FloatAttr.get(ir.F64Type.get(), float(qa["zero_point"]))
        for index, operand in enumerate(op.operands):
            if isinstance(operand.type, ir.RankedTensorType):
                op.operands[index] = self.args(defining_op(operand))["input"]
        op.results[0].set_type(q.results[0].type)
        q.results[0].replace_all_uses_with(op.results[0])
        q.erase()
        name = op.name.split(".", 1)[1] + " (int8)"
        self.folded[name] = self.folded.get(name, 0) + 1
        return True

    PATTERNS = {"edge.convolution": conv, "edge.addmm": linear, "edge.mm": linear, "edge.add_tensor": add,
                **dict.fromkeys([f"edge.{name}" for name in (
                    "view", "p_unsafe_view", "permute", "squeeze_dims", "squeeze_dim", "squeeze", "unsqueeze",
                    "max_pool2d_with_indices", "cat", "slice_tensor", "select_int", "clone", "transpose_int", "t",
                    "constant_pad_nd")],
                    same_scale)}

    def run(self) -> dict:
        from etc.passes.constant_table import module_body

        with self.module.context:
            for func in [op for op in module_body(self.module).operations if op.operation.name == "func.func"]:
                block = func.regions[0].blocks[0]
                for op in list(block.operations):
                    pattern = self.PATTERNS.get(op.operation.name)
                    if pattern is not None:
                        pattern(self, op.operation)
                if self.folded:  # the dequantize ops (edge ops are pure) that fed what was folded
                    for op in reversed(list(block.operations)):
                        if op.operation.name.startswith("edge.") and not any(list(r.uses) for r in op.results):
                            op.operation.erase()
            if self.folded:
                self.table.drop_unused()
        return self.folded


def _int8_like(value):
    from torch_mlir import ir

    with ir.Location.unknown():
        return ir.RankedTensorType.get(_shape(value), ir.IntegerType.get_signless(8))


def _torch():
    import torch

    return torch


def _shape(value) -> list:
    from torch_mlir import ir

    return list(ir.RankedTensorType(value.type).shape)


def _user(value):
    return user_op(next(iter(value.uses)))


def fold_quantized(module) -> dict:
    """Fold in place; returns {fused op: count}."""
    return _Folder(module).run()


from etc.passes.pass_api import Pass, register_pass  # noqa: E402


@register_pass
class FoldQuantized(Pass):
    name = PASS_NAME
    summary = SUMMARY

    def run(self, op) -> None:
        for name, count in fold_quantized(op).items():
            self.count(name, count)
