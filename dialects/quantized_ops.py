"""The quantization operators of PT2E and torchao programs, as ops of the aten and edge dialects.

A PT2E-quantized program (`convert_pt2e`) holds `quantized_decomposed::` ops between float
ATen ops (dq -> op -> q); torchao's LLM configs (`quantize_(model, Int8DynamicActivation
IntxWeightConfig(...))`) export `torchao::quantize_affine`/`dequantize_affine`/
`choose_qparams_affine`. Both namespaces are defined outside ATen (by torch.ao and by torchao),
and their out variants, which a `.pte` program calls, are defined by ExecuTorch's quantized
kernel library, which etc does not import. So the table is written here, one row per
operator: its functional schema (as torch/torchao register it: a test checks they agree) and
the out-variant kernel schema (ExecuTorch's `kernels/quantized/quantized.yaml` where ExecuTorch
has the kernel: a test checks that too; `etc=True` marks a kernel only etc's runtime has).

From the schemas, the ops are generated exactly as the ATen ones (`gen_aten_ops`'s argument
encoding): the MLIR name is the namespace then `op_mlir_name` (`quantized_decomposed::
quantize_per_tensor.tensor` -> `aten.quantized_decomposed_quantize_per_tensor_tensor`, and
`edge.` the same), and they are all edge ops (their kernels are portable ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from etc.ir.ops import as_operation


@dataclass(frozen=True)
class QuantizedOp:
    schema: str  # the functional schema, as registered in torch
    out_schema: str  # the out-variant kernel's schema
    etc_only: bool = False  # True: stock ExecuTorch has no kernel of this name


_QD = "quantized_decomposed::"
_TA = "torchao::"

QUANTIZED_OPS: tuple[QuantizedOp, ...] = (
    # ---- PT2E per-tensor (static: float scale; dynamic: scale/zero point tensors from choose_qparams)
    QuantizedOp(
        _QD + "quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype) -> Tensor",
        _QD + "quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "quantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype) -> Tensor",
        _QD + "quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "quantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, "
        "Tensor quant_max, ScalarType dtype) -> Tensor",
        _QD + "quantize_per_tensor.tensor2_out(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, "
        "Tensor quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _QD + "dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor",
        _QD + "dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "dequantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor",
        _QD + "dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "dequantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, "
        "Tensor quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor",
        _QD + "dequantize_per_tensor.tensor2_out(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, "
        "Tensor quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
        etc_only=True),
    QuantizedOp(
        _QD + "choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) "
        "-> (Tensor, Tensor)",
        _QD + "choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, "
        "*, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"),
    QuantizedOp(
        _QD + "choose_qparams_symmetric.tensor(Tensor input, int quant_min, int quant_max, float eps, "
        "ScalarType dtype) -> (Tensor, Tensor)",
        _QD + "choose_qparams_symmetric.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, "
        "ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))",
        etc_only=True),
    # ---- per channel (PT2E weights)
    QuantizedOp(
        _QD + "quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype) -> Tensor",
        _QD + "quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor",
        _QD + "dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, "
        "int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) "
        "-> Tensor(a!)"),
    # ---- per token (dynamic activations of the LLM recipes) and per channel group (4-bit weights)
    QuantizedOp(
        _QD + "choose_qparams_per_token_asymmetric(Tensor input, ScalarType dtype) -> (Tensor, Tensor)",
        _QD + "choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, "
        "Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"),
    QuantizedOp(
        _QD + "quantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype) -> Tensor",
        _QD + "quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "dequantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, ScalarType output_dtype) -> Tensor",
        _QD + "dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)"),
    QuantizedOp(
        _QD + "quantize_per_channel_group(Tensor input, Tensor scales, Tensor zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, int group_size) -> Tensor",
        _QD + "quantize_per_channel_group.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, int group_size, *, Tensor(a!) out) -> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _QD + "dequantize_per_channel_group(Tensor input, Tensor scales, Tensor? zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, int group_size, ScalarType output_dtype) -> Tensor",
        _QD + "dequantize_per_channel_group.out(Tensor input, Tensor scales, Tensor? zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, int group_size, ScalarType output_dtype, *, Tensor(a!) out) "
        "-> Tensor(a!)", etc_only=True),
    # ---- torchao's affine ops (block_size: one scale per block; [1, K] = per row, [1, 32] = groups of 32)
    QuantizedOp(
        _TA + "quantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType output_dtype, Scalar? quant_min=None, Scalar? quant_max=None) -> Tensor",
        _TA + "quantize_affine.out(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType output_dtype, Scalar? quant_min=None, Scalar? quant_max=None, *, Tensor(a!) out) "
        "-> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _TA + "dequantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType input_dtype, Scalar? quant_min=None, Scalar? quant_max=None, ScalarType output_dtype=6) "
        "-> Tensor",
        _TA + "dequantize_affine.out(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType input_dtype, Scalar? quant_min=None, Scalar? quant_max=None, ScalarType output_dtype=6, *, "
        "Tensor(a!) out) -> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _TA + "choose_qparams_affine(Tensor? input, str mapping_type, SymInt[] block_size, "
        "ScalarType target_dtype, Scalar? quant_min=None, Scalar? quant_max=None, float? eps=None, "
        "ScalarType? scale_dtype=None, ScalarType? zero_point_dtype=None, bool keepdim=False) -> (Tensor, Tensor)",
        _TA + "choose_qparams_affine.out(Tensor? input, str mapping_type, SymInt[] block_size, "
        "ScalarType target_dtype, Scalar? quant_min=None, Scalar? quant_max=None, float? eps=None, "
        "ScalarType? scale_dtype=None, ScalarType? zero_point_dtype=None, bool keepdim=False, *, "
        "Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))", etc_only=True),
)

_EQ = "etc_quantized::"

# The quantized operations `etc-fold-quantized` folds dq -> op -> q patterns into: one op per
# int8 computation, carrying its scales and zero points (activations: numbers; weights: the
# per-channel / per-group scale constants), its weights already int8 (4-bit: two per byte,
# low nibble first) and its clamp (a fused ReLU-family op) as the output's integer range.
# They are what a backend's int8 kernels implement; their portable kernels are etc's own
# (stock ExecuTorch has none: a program keeps the dq/q form unless the pass is run).
FUSED_OPS: tuple[QuantizedOp, ...] = (
    QuantizedOp(
        _EQ + "conv2d(Tensor input, float input_scale, int input_zero_point, Tensor weight, Tensor weight_scales, "
        "Tensor? bias, int[] stride, int[] padding, int[] dilation, int groups, float output_scale, "
        "int output_zero_point, int output_min, int output_max) -> Tensor",
        _EQ + "conv2d.out(Tensor input, float input_scale, int input_zero_point, Tensor weight, "
        "Tensor weight_scales, Tensor? bias, int[] stride, int[] padding, int[] dilation, int groups, "
        "float output_scale, int output_zero_point, int output_min, int output_max, *, Tensor(a!) out) "
        "-> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _EQ + "linear(Tensor input, float input_scale, int input_zero_point, Tensor weight, Tensor weight_scales, "
        "Tensor? bias, float output_scale, int output_zero_point, int output_min, int output_max) -> Tensor",
        _EQ + "linear.out(Tensor input, float input_scale, int input_zero_point, Tensor weight, "
        "Tensor weight_scales, Tensor? bias, float output_scale, int output_zero_point, int output_min, "
        "int output_max, *, Tensor(a!) out) -> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _EQ + "linear_dynamic(Tensor input, str activation_granularity, float activation_eps, Tensor weight, "
        "int weight_bits, int group_size, Tensor weight_scales, Tensor? weight_zero_points, Tensor? bias) "
        "-> Tensor",
        _EQ + "linear_dynamic.out(Tensor input, str activation_granularity, float activation_eps, Tensor weight, "
        "int weight_bits, int group_size, Tensor weight_scales, Tensor? weight_zero_points, Tensor? bias, *, "
        "Tensor(a!) out) -> Tensor(a!)", etc_only=True),
    QuantizedOp(
        _EQ + "add(Tensor a, float a_scale, int a_zero_point, Tensor b, float b_scale, int b_zero_point, "
        "float output_scale, int output_zero_point, int output_min, int output_max) -> Tensor",
        _EQ + "add.out(Tensor a, float a_scale, int a_zero_point, Tensor b, float b_scale, int b_zero_point, "
        "float output_scale, int output_zero_point, int output_min, int output_max, *, Tensor(a!) out) "
        "-> Tensor(a!)", etc_only=True),
)

NAMESPACES = ("quantized_decomposed", "torchao")
FUSED_NAMESPACE = "etc_quantized"


def _name(schema: str) -> str:
    """`ns::op.overload(...)` -> `ns::op.overload` (the default overload without a suffix)."""
    return schema.split("(", 1)[0]


@lru_cache(maxsize=None)
def out_variants() -> dict[str, str]:
    """Functional torch name -> out-variant kernel name (`quantized_decomposed::quantize_per_tensor.out`)."""
    return {_name(op.schema): _name(op.out_schema) for op in QUANTIZED_OPS + FUSED_OPS}


@lru_cache(maxsize=None)
def kernel_schemas() -> dict:
    """Out-variant kernel name -> its torch._C.FunctionSchema (parsed, never registered in torch:
    registering would clash with ExecuTorch's library when both are loaded)."""
    import torch

    return {_name(op.out_schema): torch._C.parse_schema(op.out_schema) for op in QUANTIZED_OPS + FUSED_OPS}


def importable_names() -> list[str]:
    """The quantization ops a PT2E/torchao program may contain (the folded ones are etc's own)."""
    return [_name(op.schema) for op in QUANTIZED_OPS]


def is_quantization_op(torch_name: str) -> bool:
    return torch_name.split("::", 1)[0] in NAMESPACES + (FUSED_NAMESPACE,)


@lru_cache(maxsize=None)
def table_entries() -> tuple[dict, ...]:
    """The ops as `aten_ops.json` entries (same encoding as the generated ATen ops)."""
    from etc.dialects.gen_aten_ops import argument_entry, op_mlir_name, parse_schema
    from etc.dialects.irdl_base import field_name

    entries = []
    for op in QUANTIZED_OPS + FUSED_OPS:
        namespace = op.schema.split("::", 1)[0]
        parsed = parse_schema(op.schema)
        if parsed is None:
            raise RuntimeError(f"cannot parse the schema {op.schema!r}")
        returns = []
        for index, ret in enumerate(parsed.returns):
            name = ret.name or ("result" if len(parsed.returns) == 1 else f"result{index}")
            returns.append({"field": field_name(name), "type": str(ret.type), "kind": "result"})
        arguments = [argument_entry(a, field_name) for a in parsed.arguments.flat_all]
        base, overload = str(parsed.name.name), parsed.name.overload_name
        entries.append({"name": op_mlir_name(f"{namespace}_{base}", overload), "torch_name": _name(op.schema),
                        "core": True, "arguments": arguments, "returns": returns})
    return tuple(entries)


@lru_cache(maxsize=None)
def _torch_names() -> dict[str, str]:
    """The ops' MLIR names (without the dialect: `quantized_decomposed_quantize_per_tensor_default`) ->
    their torch names."""
    return {entry["name"]: entry["torch_name"] for entry in table_entries()}


# ------------------------------------------------------------- where they sit in a graph
DEQUANTIZE = "dequantize"
QUANTIZE = "quantize"


def role(op_name: str) -> str | None:
    """`dequantize`, `quantize` (static: its scale is a number), `quantize_dynamic`, `qparams`,
    `folded` (an `etc_quantized::` op), or None for an op that is not a quantization op; by MLIR op name (`edge.quantized_...`)."""
    dialect, _, name = op_name.partition(".")
    torch_name = _torch_names().get(name) if dialect in ("edge", "aten") else None
    if torch_name is None or not is_quantization_op(torch_name):
        return None
    namespace, base = torch_name.split("::", 1)
    if namespace == FUSED_NAMESPACE:
        return "folded"
    if base.startswith("dequantize"):
        return DEQUANTIZE
    if base.startswith("choose_qparams"):
        return "qparams"
    if base == "quantize_per_tensor":
        return QUANTIZE
    return "quantize_dynamic"


def quantized_pattern_ops(operations) -> dict:
    """Op -> why it belongs to a quantized computation, for the ops of one block.

    A quantized computation is what `dq -> op -> q` describes: the quantization ops
    themselves, every op that reads a dequantized value, and every op between a dequantize
    and a static quantize (reachable from one, reaching the other, crossing neither): a
    conv + bias + relu between the two is one int8 operation, not three float ones. Ops that
    only compute in float around them are not included.
    """
    ops = [as_operation(op) for op in operations]
    roles = {op: role(op.name) for op in ops}

    def producers(op):
        for value in op.operands:
            owner = value.owner
            owner = as_operation(owner)
            if owner in roles:
                yield owner

    users: dict = {op: [] for op in ops}
    for op in ops:
        for producer in producers(op):
            users[producer].append(op)
    after_dq = set()  # reachable from a dequantize without crossing a quantization op
    for op in ops:
        if roles[op] is None and any(roles[p] == DEQUANTIZE or p in after_dq for p in producers(op)):
            after_dq.add(op)
    before_q = set()  # reaching a static quantize without crossing a quantization op
    for op in reversed(ops):
        if roles[op] is None and any(roles[u] == QUANTIZE or u in before_q for u in users[op]):
            before_q.add(op)
    reasons = {}
    for op in ops:
        if roles[op] is not None:
            reasons[op] = f"a quantization op ({roles[op]})"
        elif op in after_dq and (op in before_q or any(roles[p] == DEQUANTIZE for p in producers(op))):
            reasons[op] = "part of a quantized operation (dequantize -> op -> quantize)"
    return reasons
