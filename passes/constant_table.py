"""Reading and adding constants from a pass.

A program's weights live outside the IR (`ProgramIR.constants`, see
compiler/ir.py); a module given to `etc-opt` has none of that, so lit tests
write small weights inline as `ml_program.global @w(dense<...> : tensor<...>)`.
`ConstantTable(module)` serves both: passes that read or create constants
(constant folding, batch-norm fusion) go through it and work the same in
`to_edge` and in `etc-opt`.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir


def module_body(module) -> ir.Block:
    """The top-level block of an ir.Module or of a `builtin.module` operation."""
    if isinstance(module, ir.Module):
        return module.body
    return module.regions[0].blocks[0]


class ConstantTable:
    def __init__(self, module):
        from etc.compiler.ir import ProgramIR

        self.module = module
        self.body = module_body(module)
        self.program = ProgramIR.of(module)
        self._globals = {ir.StringAttr(op.attributes["sym_name"]).value: op
                         for op in self.body.operations if op.operation.name == "ml_program.global"}

    def dtype_name(self, symbol: str) -> str | None:
        from etc.ir.dtypes import torch_dtype_name_of_element_type

        if self.program is not None and symbol in self.program.constant_dtypes:
            return self.program.constant_dtypes[symbol]
        op = self._globals.get(symbol)
        if op is None:
            return None
        return torch_dtype_name_of_element_type(ir.RankedTensorType(ir.TypeAttr(op.attributes["type"]).value).element_type)

    def get(self, symbol: str) -> np.ndarray | None:
        """The array behind an immutable global (bfloat16 as its uint16 bits), or None."""
        op = self._globals.get(symbol)
        if op is None or "is_mutable" in op.attributes:
            return None
        if self.program is not None and symbol in self.program.constants:
            return self.program.constants[symbol]
        value = op.attributes["value"] if "value" in op.attributes else None
        if isinstance(value, ir.DenseElementsAttr):
            shape = ir.RankedTensorType(value.type).shape
            array = np.array(value)
            if value.is_splat:  # the buffer holds the one value
                return np.broadcast_to(array.reshape(-1)[0], shape).copy()
            return array.reshape(shape)
        return None

    def without_data(self, value: ir.Value) -> bool:
        """`value` loads a global whose data is not here: `#ml_program.extern` in a module that
        has no program's constant table (etc-opt on a printed program: tools/import_model.py)."""
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.name != "ml_program.global_load_const":
            return False
        symbol = ir.FlatSymbolRefAttr(owner.attributes["global"]).value
        op = self._globals.get(symbol)
        return (op is not None and "value" in op.attributes and "extern" in str(op.attributes["value"])
                and (self.program is None or symbol not in self.program.constants))

    def of_value(self, value: ir.Value) -> np.ndarray | None:
        owner = value.owner
        if isinstance(owner, ir.Block) or owner.name != "ml_program.global_load_const":
            return None
        return self.get(ir.FlatSymbolRefAttr(owner.attributes["global"]).value)

    def add(self, hint: str, array: np.ndarray, element: ir.Type) -> str:
        """A private global holding `array`; returns its symbol. An existing global
        with the same element type, shape and bytes is reused: methods that fold
        the same shared weight (each its own `permute`) keep one copy."""
        from torch_mlir.dialects import ml_program

        same = self._find_equal(array, element)
        if same is not None:
            return same
        if self.program is not None:
            symbol = self.program.add_constant(hint, array, element)
        else:
            symbol, k = hint, 0
            while symbol in self._globals:
                k += 1
                symbol = f"{hint}_{k}"
            tensor_type = ir.RankedTensorType.get(list(array.shape), element)
            dense = ir.DenseElementsAttr.get(np.ascontiguousarray(array), type=tensor_type)
            with ir.Location.name(symbol), ir.InsertionPoint.at_block_begin(self.body):
                ml_program.GlobalOp(symbol, tensor_type, is_mutable=None, value=dense, sym_visibility="private")
        self._globals[symbol] = next(op for op in self.body.operations
                                     if op.operation.name == "ml_program.global"
                                     and ir.StringAttr(op.attributes["sym_name"]).value == symbol)
        return symbol

    def _find_equal(self, array: np.ndarray, element: ir.Type) -> str | None:
        for symbol, op in self._globals.items():
            if "is_mutable" in op.attributes:
                continue
            ty = ir.RankedTensorType(ir.TypeAttr(op.attributes["type"]).value)
            if ty.element_type != element or tuple(ty.shape) != array.shape:
                continue
            existing = self.get(symbol)
            if existing is not None and existing.dtype == array.dtype and np.array_equal(existing, array):
                return symbol
        return None

    def load(self, hint: str, array: np.ndarray, element: ir.Type) -> ir.Value:
        """Add a constant and load it at the current insertion point."""
        from torch_mlir.dialects import ml_program

        symbol = self.add(hint, array, element)
        ty = ir.RankedTensorType.get(list(array.shape), element)
        return ml_program.GlobalLoadConstOp(ty, ir.FlatSymbolRefAttr.get(symbol)).result

    def drop_unused(self) -> None:
        """Dead loads go away, then immutable globals nothing refers to, with their bytes."""
        used = set()
        for func in self.body.operations:
            if func.operation.name != "func.func":
                continue
            for op in list(func.regions[0].blocks[0].operations):
                if op.operation.name == "ml_program.global_load_const" and not list(op.results[0].uses):
                    op.erase()
                    continue
                if "global" in op.attributes:
                    used.add(ir.FlatSymbolRefAttr(op.attributes["global"]).value)
        for symbol, op in list(self._globals.items()):
            if symbol not in used and "is_mutable" not in op.attributes:
                op.erase()
                del self._globals[symbol]
                if self.program is not None:
                    self.program.constants.pop(symbol, None)
                    self.program.constant_dtypes.pop(symbol, None)
