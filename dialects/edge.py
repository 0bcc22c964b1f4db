"""The `edge` dialect: the Core ATen opset, with the dtypes its kernels accept.

`to_edge` decomposes to Core ATen and rewrites `aten.X` into `edge.X`; the ops
are the same generated definitions (`core: true` in `aten_ops.json`, plus the
few non-core ops torch's decomposition table leaves in place), with one
difference: the verifier checks element types against what the op's kernel
supports, so that a program the runtime cannot run fails at compile time with
the op and the dtypes named, not on the device; and, as in `aten`, the result shapes
against torch's shape functions (`shapes.py`).

The dtype rules are a table (`DTYPE_RULES`), by op family, in ATen's terms:
a float-only op (`exp`, `softmax`, `convolution`) must produce floating
tensors; bitwise ops take integers or bools; comparisons produce `i1`;
nothing takes complex or quantized element types.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.dialects import irdl_base
from etc.dialects.aten import define_ops
from etc.dialects.opinfo import load_table
from etc.dialects.shapes import verify_shapes


class Edge(irdl_base.Dialect, name="edge"):
    """Core ATen ops after decomposition, as the portable kernels and backends see them."""


FLOATS = ("f16", "bf16", "f32", "f64")
INTEGERS = ("i8", "ui8", "i16", "i32", "i64")
BOOL = ("i1",)
SUPPORTED = FLOATS + INTEGERS + BOOL

# Non-core ops that torch's default decomposition table keeps and our kernels run.
EXTRA_EDGE_OPS = frozenset({
    "aten::_adaptive_avg_pool2d", "aten::_log_softmax", "aten::_softmax", "aten::clamp_min",
    "aten::max_pool2d_with_indices", "aten::hardswish", "aten::hardsigmoid", "aten::silu",
    "aten::_unsafe_view", "aten::linear", "aten::t", "aten::transpose.int", "aten::squeeze",
    "aten::lift_fresh_copy", "aten::detach", "aten::_to_copy", "aten::split.Tensor",
    "aten::unbind.int", "aten::mean.dim", "aten::rsub.Scalar", "aten::alias", "aten::var_mean.correction",
})


def _family(name: str) -> str:
    namespace, rest = name.split("::", 1)
    if namespace != "aten":  # quantization ops (dialects/quantized_ops.py): int8 by design, no family rule
        return name
    return rest.split(".", 1)[0].lstrip("_")


_FLOAT_RESULT = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfinv", "sqrt", "rsqrt",
    "reciprocal", "gelu", "softmax", "log_softmax", "native_layer_norm", "native_batch_norm_legit_no_training",
    "native_batch_norm_legit", "native_group_norm", "convolution", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "upsample_bilinear2d", "upsample_nearest2d", "var", "mean",
    "atan2", "elu", "hardtanh", "leaky_relu", "silu", "hardswish", "hardsigmoid", "mm", "bmm", "addmm",
    "linear", "var_mean", "grid_sampler_2d",
}
_INTEGRAL_INPUTS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
                    "bitwise_right_shift"}
_BOOL_RESULT = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_and", "logical_or", "logical_xor",
                "logical_not"}

DTYPE_RULES = {
    "float result": (_FLOAT_RESULT, "produces", FLOATS),
    "integral inputs": (_INTEGRAL_INPUTS, "takes", INTEGERS + BOOL),
    "bool result": (_BOOL_RESULT, "produces", BOOL),
}


def _element(value) -> str:
    return str(ir.RankedTensorType(value.type).element_type) if isinstance(value.type, ir.RankedTensorType) else ""


def _verify_dtypes(op) -> bool:
    info = op.OP_INFO
    operation = op.operation
    family = _family(info.torch_name)
    tensors_in = [_element(v) for v in operation.operands if isinstance(v.type, ir.RankedTensorType)]
    tensors_out = [_element(v) for v in operation.results]
    if any(not isinstance(v.type, ir.RankedTensorType) for v in operation.results):
        op.location.emit_error(f"'{operation.name}' ({info.torch_name}) must produce ranked tensors")
        return False
    for element in tensors_in + tensors_out:
        if element not in SUPPORTED:
            op.location.emit_error(
                f"'{operation.name}' ({info.torch_name}): element type {element} is not supported by its kernel "
                f"(supported: {', '.join(SUPPORTED)})")
            return False
    for rule, (families, verb, allowed) in DTYPE_RULES.items():
        if family not in families:
            continue
        checked = tensors_out if verb == "produces" else tensors_in
        # max/min indices and layer-norm statistics are integer/float by definition; check the first result.
        checked = checked[:1] if verb == "produces" else checked
        for element in checked:
            if element not in allowed:
                op.location.emit_error(
                    f"'{operation.name}' ({info.torch_name}) {verb} {', '.join(allowed)} tensors only "
                    f"({rule}), got {element}")
                return False
    return verify_shapes(op)


EDGE_INFOS = tuple(info for info in load_table() if info.core or info.torch_name in EXTRA_EDGE_OPS)
OPS: dict[str, type] = define_ops(Edge, EDGE_INFOS, verifier=_verify_dtypes)
