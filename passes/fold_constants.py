"""etc-fold-constants: evaluate at compile time the ops whose inputs are all constants.

After decomposition, models carry work that depends only on weights: the
transpose of every linear layer's weight (`permute(W)` before `addmm`), dtype
casts of constants, masks built from `arange`/`full`. Run on the device, that
work is repeated at every inference; folded, it costs program bytes once.
ExecuTorch does the same (constant propagation in to_edge).

An op is folded when every tensor operand is a constant (an
`ml_program.global_load_const`, or an op already folded), it has no symbolic
size operand, and the folded results are not much larger than its inputs
(`max_growth`), so that broadcasting a scalar into a large tensor stays a
kernel call instead of bloating the program. The op is evaluated with torch's
own kernel, which is the reference semantics for every ATen op; the result
becomes a new private global whose bytes join `ProgramIR.constants`.
Quantization ops (`quantized_decomposed::`, `torchao::`) are never folded: a
dequantized weight would be stored in float (4x the bytes), and the
dq -> op pattern on the int8 weight is what a backend's int8 kernels match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PASS_NAME = "etc-fold-constants"
SUMMARY = "Evaluate ops whose inputs are all constants at compile time"

# Results may be at most this many times the bytes of the op's constant inputs
# (or FREE_BYTES, for ops with no tensor input such as `full`).
MAX_GROWTH = 2
FREE_BYTES = 4096


def fold_constants(module, *, max_growth: int = MAX_GROWTH) -> int:
    """Fold in place; returns the number of ops folded."""
    import torch
    from torch_mlir import ir

    from etc.ir.dtypes import torch_dtype_name_of_element_type
    from etc.dialects import decode_op, op_info
    from etc.dialects.quantized_ops import is_quantization_op
    from etc.passes.constant_table import ConstantTable, module_body

    folded = 0
    table = ConstantTable(module)
    with module.context:
        funcs = [op for op in module_body(module).operations if op.operation.name == "func.func"]
        for func in funcs:
            values: dict = {}  # ir.Value -> torch.Tensor
            for op in list(func.regions[0].blocks[0].operations):
                name = op.operation.name
                if name == "ml_program.global_load_const":
                    symbol = ir.FlatSymbolRefAttr(op.attributes["global"]).value
                    array = table.get(symbol)
                    if array is not None:
                        values[op.results[0]] = _as_torch(array, table.dtype_name(symbol))
                    continue
                if not (name.startswith("edge.") or name.startswith("aten.")):
                    continue
                operands = list(op.operands)
                if any(v not in values for v in operands):
                    continue
                results = list(op.results)
                if not results or any(not isinstance(r.type, ir.RankedTensorType) or
                                      not ir.RankedTensorType(r.type).has_static_shape for r in results):
                    continue
                in_bytes = sum(values[v].numel() * values[v].element_size() for v in operands)
                out_bytes = sum(_nbytes(r.type) for r in results)
                if out_bytes > max(max_growth * in_bytes, FREE_BYTES if not operands else 0):
                    continue
                info = op_info(name)
                if is_quantization_op(info.torch_name):  # int8 weights stay int8: dq -> op is what backends match
                    continue
                arguments = decode_op(op)
                call = _resolve(info.torch_name)
                try:
                    with torch.no_grad():
                        outputs = call(**{k: _substitute(v, values) for k, v in arguments.items()})
                except Exception:  # noqa: BLE001 - an op torch cannot evaluate here simply stays
                    continue
                outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
                if len(outputs) != len(results):
                    continue
                with ir.InsertionPoint(op), op.location:
                    for result, value in zip(results, outputs):
                        element = ir.RankedTensorType(result.type).element_type
                        value = value.to(getattr(torch, torch_dtype_name_of_element_type(element))).contiguous()
                        load = table.load("folded", _as_numpy(value), element)
                        result.replace_all_uses_with(load)
                        values[load] = value
                op.erase()
                folded += 1
        table.drop_unused()
    return folded


def _resolve(torch_name: str):
    import torch

    name, _, overload = torch_name.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _substitute(value, values):
    from torch_mlir import ir

    if isinstance(value, ir.Value):
        return values[value]
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def _nbytes(tensor_type) -> int:
    from torch_mlir import ir

    from etc.ir.dtypes import dtype_row, torch_dtype_name_of_element_type

    ty = ir.RankedTensorType(tensor_type)
    count = int(np.prod(ty.shape)) if ty.shape else 1
    return count * dtype_row(torch_dtype_name_of_element_type(ty.element_type)).itemsize


def _as_torch(array: np.ndarray, dtype_name: str):
    import torch

    if dtype_name == "bfloat16":
        return torch.from_numpy(array.copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(array, copy=True))


def _as_numpy(tensor) -> np.ndarray:
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.uint16).numpy()
    return tensor.numpy()


from etc.passes.pass_api import Pass, option, register_pass  # noqa: E402


@register_pass
class FoldConstants(Pass):
    name = PASS_NAME
    summary = SUMMARY

    @dataclass
    class Options:
        max_growth: int = option(MAX_GROWTH, help="fold only when results are at most this many times "
                                                  "the bytes of the constant inputs")

    def run(self, op) -> None:
        self.count("folded", fold_constants(op, max_growth=self.options.max_growth))
