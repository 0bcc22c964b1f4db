"""etc-cpu-lower-quantized: the folded int8 ops -> linalg on i8 with i32 accumulation.

Runs after etc-cpu-edge-to-torch, which keeps each `etc_quantized.*` op (`etc-fold-quantized`'s:
one op per dq -> op -> q computation, carrying its scales and zero points) as a `torch.operator`
of its name, and quantize/dequantize_per_tensor as their torch ops. Each is replaced by the
linalg `lowering/quantized*.py` builds for it, on builtin tensors between `torch_c` casts (so
torch-mlir's pipelines pass it through): a qgemm + requantization pair for etc-cpu-int8-kernels,
a window generic, or elementwise generics computing what the portable kernels compute.

The weights' data comes from the constant table (the program's, or a lit test's inline
`ml_program.global`s); a constant a lowering computes from the weights and the runtime can
derive at load (8da4w's column sums) becomes one more argument labelled
`constant:<weight>#colsum`, its recipe in the module's `etc.cpu.derived`.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.passes.constant_table import ConstantTable
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs, entry_function, set_arg_attrs, update_function_type
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.lowering import quantized, quantized_dynamic, quantized_gemm
from etc.targets.cpu.lowering.context import load_torch
from etc.targets.cpu.lowering.quantized import DERIVED_ATTR, QuantizedOp
from etc.targets.cpu.lowering.torch_ops import builtin_tensor_type, decode, torch_name_of

LOWERINGS = {
    quantized.CONV: quantized_gemm.lower_conv,
    quantized.LINEAR: quantized_gemm.lower_linear,
    quantized.LINEAR_DYNAMIC: quantized_dynamic.lower_linear_dynamic,
    quantized.ADD: quantized.lower_add,
    quantized.QUANTIZE: quantized.lower_quantize,
    quantized.DEQUANTIZE: quantized.lower_dequantize,
}


@function_pass("etc-cpu-lower-quantized",
               "Quantized ops (etc_quantized, quantize/dequantize) -> linalg on int8 with int32 accumulation")
def lower_quantized(module_op, options) -> int:
    from etc.dialects import op_info

    load_torch(module_op.context)
    fn = entry_function(module_op)
    table = ConstantTable(module_op)
    derived = _Derived(module_op, fn, table)
    found = [op for op in walk(fn, ("torch.operator", "torch.quantized_decomposed.quantize_per_tensor",
                                    "torch.quantized_decomposed.dequantize_per_tensor"))
             if torch_name_of(op) in LOWERINGS]
    for op in found:
        name = torch_name_of(op)
        with module_op.context, ir.InsertionPoint(op), op.location:
            values = decode(op, op_info(name))
            casts = {}
            for key, value in values.items():  # the tensors as builtin values
                if isinstance(value, ir.Value) and str(value.type).startswith("!torch.vtensor"):
                    casts[key] = ir.Operation.create("torch_c.to_builtin_tensor", results=[builtin_tensor_type(value)],
                                                     operands=[value])
                    values[key] = casts[key].result
            result = LOWERINGS[name](QuantizedOp(op, values, builtin_tensor_type(op.results[0]), table, derived.add))
            torch_result = ir.Operation.create("torch_c.from_builtin_tensor", results=[op.results[0].type],
                                               operands=[result]).result
        op.results[0].replace_all_uses_with(torch_result)
        op.erase()
        for cast in casts.values():
            if not any(True for _ in cast.result.uses):
                cast.erase()
    derived.record()
    return len(found)


class _Derived:
    """The constants the lowerings add (`QuantizedOp.new_constant`): one more argument of the
    entry function each (the same name asked again is the same argument), their data into the
    program's constant table (when there is one), their recipes on the module (`DERIVED_ATTR`)."""

    def __init__(self, module_op, fn, table):
        self.module_op, self.fn, self.table = module_op, fn, table
        self.recipes: dict = {}
        self.arrays: dict = {}

    def add(self, name: str, array: np.ndarray, recipe: dict) -> ir.Value:
        block = self.fn.regions[0].blocks[0]
        labels = [a.get(ARG_ATTR) for a in arg_attrs(self.fn)]
        label = f"constant:{name}"
        if any(x is not None and ir.StringAttr(x).value == label for x in labels):
            if self.recipes.get(name) != recipe or not np.array_equal(self.arrays[name], array):
                raise LoweringError(f"cpu int8 lowering: constant '{name}' is defined twice, differently")
            arg = block.arguments[[ir.StringAttr(x).value if x is not None else None for x in labels].index(label)]
        else:
            element = {np.dtype(np.float32): "f32", np.dtype(np.int32): "si32", np.dtype(np.int8): "si8"}[array.dtype]
            vtype = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, array.shape))}],{element}>")
            attrs = arg_attrs(self.fn)
            arg = block.add_argument(vtype, ir.Location.unknown())
            set_arg_attrs(self.fn, attrs + [{ARG_ATTR: ir.StringAttr.get(label),
                                             "bufferization.writable": ir.BoolAttr.get(False)}])
            update_function_type(self.fn)
            self.recipes[name], self.arrays[name] = recipe, array
            if self.table.program is not None:
                self.table.program.constants[name] = array
        return ir.Operation.create("torch_c.to_builtin_tensor", results=[builtin_tensor_type(arg)],
                                   operands=[arg]).result

    def record(self) -> None:
        if not self.recipes:
            return
        with self.module_op.context:
            old = ir.DictAttr(self.module_op.attributes[DERIVED_ATTR]) if DERIVED_ATTR in self.module_op.attributes \
                else None
            entries = {old[i].name: old[i].attr for i in range(len(old))} if old is not None else {}
            for name, recipe in self.recipes.items():
                entries[name] = ir.DictAttr.get({k: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
                                                 if isinstance(v, int) else ir.StringAttr.get(str(v))
                                                 for k, v in recipe.items()})
            self.module_op.attributes[DERIVED_ATTR] = ir.DictAttr.get(entries)

