"""etc-cpu-lower-resize: bilinear interpolation -> a gather over compile-time tap tables.

Runs after etc-cpu-edge-to-torch, where `upsample_bilinear2d.vec` is torch-mlir's
`__interpolate` (an ADAPTERS entry). Each bilinear one on a static f32 [N, C, H, W] tensor (no
antialias) becomes the marked `linalg.generic` of `lowering/resize.py` on builtin tensors between
`torch_c` casts (torch-mlir's pipelines pass it through): the taps' input indices and weights
computed once per output row and column, as ATen computes them, instead of per element as
torch-mlir's lowering does. etc-cpu-resize-kernels then makes it the vector kernel. A bilinear
resize this pass cannot take is a `loops` decision with the reason (torch-mlir's lowering runs it);
other modes are not this pass's.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import function_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.lowering.context import load_torch
from etc.targets.cpu.lowering.resize import lower_bilinear, tables
from etc.targets.cpu.lowering.torch_ops import builtin_tensor_type, decode

INTERPOLATE = "torch.aten.__interpolate.size_list_scale_list"


def _why_not(values: dict, in_type, out_type) -> str | None:
    """Why a bilinear `__interpolate` cannot be the table gather, or None."""
    if values.get("antialias"):
        return "antialias=True (a wider filter than two taps)"
    if in_type is None or out_type is None:
        return "a dynamically shaped input or output"
    if str(in_type.element_type) != "f32":
        return f"element type {in_type.element_type} (the table gather is f32)"
    if in_type.rank != 4:
        return f"a rank-{in_type.rank} input (the table gather resizes [N, C, H, W])"
    return None


@function_pass("etc-cpu-lower-resize", "Bilinear interpolation -> a gather over compile-time tap tables")
def lower_resize(module_op, options=None) -> int:
    from etc.dialects import op_info

    load_torch(module_op.context)
    info = op_info("aten::__interpolate.size_list_scale_list")
    lowered = 0
    for op in walk(entry_function(module_op), (INTERPOLATE,)):
        values = decode(op, info)
        if values.get("mode") != "bilinear":
            continue
        with module_op.context, op.location:
            in_type, out_type = (ir.RankedTensorType(builtin_tensor_type(v)) for v in (op.operands[0], op.results[0]))
            static = all(t.has_static_shape for t in (in_type, out_type))
            why = _why_not(values, in_type if static else None, out_type if static else None)
            if why is not None:
                decisions.record(op, "resize", "loops", why)
                continue
            shape, out_shape = list(in_type.shape), list(out_type.shape)
            scales = values.get("scale_factor")
            table = tables(shape[2:], out_shape[2:], bool(values.get("align_corners")),
                           None if scales is None else (scales[0], scales[-1]))
            with ir.InsertionPoint(op):
                x = ir.Operation.create("torch_c.to_builtin_tensor", results=[in_type], operands=[op.operands[0]]).result
                result = lower_bilinear(x, shape, out_shape[2:], table, op)
                torch_result = ir.Operation.create("torch_c.from_builtin_tensor", results=[op.results[0].type],
                                                   operands=[result]).result
        op.results[0].replace_all_uses_with(torch_result)
        op.erase()
        lowered += 1
    return lowered
