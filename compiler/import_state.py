"""The state of the programs `import_program` reads: every parameter, buffer and lifted constant of
every method as one `ml_program.global` (its bytes kept outside the IR, in `ProgramIR.constants`),
shared when two methods or two names hold the same tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch_mlir import ir
from torch_mlir.dialects import ml_program

from etc.compiler.ir import BUFFER, CONSTANT_TENSOR, PARAMETER
from etc.errors import UnsupportedConstructError
from etc.ir.dtypes import dtype_row, element_type, numpy_dtype, torch_dtype_name
from etc.ir.locations import named_location

__all__ = ["STATE_KINDS", "ProgramState", "StateGlobal", "StateInput", "as_numpy", "tensor_identity"]

# Kind names of the graph signature, as recorded in MethodSignature.
STATE_KINDS = {InputKind.PARAMETER: PARAMETER, InputKind.BUFFER: BUFFER,
                InputKind.CONSTANT_TENSOR: CONSTANT_TENSOR}

@dataclass
class StateGlobal:
    """One `ml_program.global`: its symbol, whether a method writes it, the
    bytes and the type."""

    name: str
    mutable: bool
    array: np.ndarray
    dtype_name: str
    shape: tuple[int, ...]


@dataclass
class StateInput:
    placeholder: str
    kind: str
    target: str
    global_name: str


def tensor_identity(value: torch.Tensor):
    """Key under which two state tensors are the same tensor (tied weights, or
    one module exported as several methods), so they share one global."""
    try:
        pointer = value.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    if pointer == 0:
        return None
    return pointer, value.storage_offset(), tuple(value.shape), tuple(value.stride()), value.dtype


def as_numpy(value: torch.Tensor, where: str) -> np.ndarray:
    """The bytes of a constant as numpy (a view when torch's memory is already
    contiguous CPU memory: no copy, no per-element work)."""
    if value.device.type == "meta" or isinstance(value, torch._subclasses.FakeTensor):
        raise UnsupportedConstructError(f"{where} has no data (a meta or fake tensor)")
    row = dtype_row(value.dtype)
    data = value.detach().cpu().contiguous()
    if row.torch_name == "bfloat16":
        data = data.view(torch.int16)
    return data.numpy().view(numpy_dtype(value.dtype))


class ProgramState:
    """The program's globals: one per distinct parameter, buffer or lifted constant tensor of all
    methods (tied weights and a module exported as several methods share one)."""

    def __init__(self):
        self.globals: dict[str, StateGlobal] = {}
        self._global_by_identity: dict[Any, str] = {}

    def collect(self, method: str, ep: ExportedProgram) -> dict[str, StateInput]:
        """Assign a global to every parameter, buffer and lifted constant of
        `ep` (by placeholder name), creating or sharing `StateGlobal`s."""
        mutated = {spec.target for spec in ep.graph_signature.output_specs
                   if spec.kind == OutputKind.BUFFER_MUTATION}
        state: dict[str, StateInput] = {}
        for spec in ep.graph_signature.input_specs:
            kind = STATE_KINDS.get(spec.kind)
            if kind is None:
                continue
            value = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants.get(spec.target)
            if not isinstance(value, torch.Tensor):
                raise UnsupportedConstructError(
                    f"{kind} '{spec.target}' of method '{method}' is a {type(value).__name__}, not a tensor")
            name = self.global_for(method, spec.target, value, spec.target in mutated)
            state[spec.arg.name] = StateInput(spec.arg.name, kind, spec.target, name)
        return state

    def global_for(self, method: str, target: str, value: torch.Tensor, mutable: bool) -> str:
        identity = tensor_identity(value)
        name = self._global_by_identity.get(identity) if identity is not None else None
        if name is None:
            name = target if target not in self.globals else f"{method}/{target}"
            self.globals[name] = StateGlobal(name, False, as_numpy(value, f"'{target}'"),
                                         torch_dtype_name(value.dtype), tuple(value.shape))
            if identity is not None:
                self._global_by_identity[identity] = name
        self.globals[name].mutable |= mutable
        return name

    def emit_global(self, symbol: StateGlobal) -> None:
        tensor_type = ir.RankedTensorType.get(list(symbol.shape), element_type(symbol.dtype_name))
        extern = ir.Attribute.parse(f"#ml_program.extern : {tensor_type}")
        ml_program.GlobalOp(symbol.name, tensor_type, is_mutable=symbol.mutable or None, value=extern,
                            sym_visibility="private", loc=named_location(symbol.name))
