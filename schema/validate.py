"""Semantic checks of a PteFile: everything a runtime indexes with must be in range.

The reader has already checked the bytes (offsets, lengths, union tags, enum
values). This module checks what the program *means*, so that a runtime can
index without checking again: EValue indices of inputs, outputs, instruction
arguments and lists; operator and delegate indices; jump targets; tensor
sizes, dim orders, constant and mutable data references, and planned
placements against the arena sizes (`non_const_buffer_sizes`).
"""

from __future__ import annotations

import math

from etc.errors import ProgramError
from etc.schema import program as P
from etc.schema.scalar_type import element_size


def tensor_nbytes(tensor: P.Tensor) -> int | None:
    """Bytes of the tensor's (upper-bound) shape, or None when the shape says nothing (unbounded/invalid)."""
    if tensor.shape_dynamism == P.TensorShapeDynamism.DYNAMIC_UNBOUND or tensor.sizes is None:
        return None
    if any(size < 0 for size in tensor.sizes):
        return None
    return math.prod(tensor.sizes) * element_size(tensor.scalar_type)


class _PlanChecker:
    def __init__(self, pte: P.PteFile, plan: P.ExecutionPlan, path: str):
        self.pte = pte
        self.plan = plan
        self.path = path
        self.values = plan.values or []

    def fail(self, where: str, message: str):
        raise ProgramError(f"{self.path}.{where}: {message}")

    def value_index(self, index: int, where: str, *, kinds: tuple[type, ...] | None = None) -> None:
        if not 0 <= index < len(self.values):
            self.fail(where, f"value index {index} is out of range (the plan has {len(self.values)} values)")
        if kinds is not None and not isinstance(self.values[index].val, kinds):
            found = type(self.values[index].val).__name__
            self.fail(where, f"value {index} is a {found}, expected {' or '.join(k.__name__ for k in kinds)}")

    def check(self):
        plan = self.plan
        if plan.name is None:
            self.fail("name", "execution plan has no name")
        for name in ("inputs", "outputs"):
            for i, index in enumerate(getattr(plan, name) or []):
                self.value_index(index, f"{name}[{i}]")
        for i, index in enumerate(plan.inputs or []):
            tensor = self.values[index].val
            if isinstance(tensor, P.Tensor) and tensor.data_buffer_idx > 0 and tensor.allocation_info is None:
                self.fail(f"inputs[{i}]", f"value {index} is a constant tensor: an input cannot be written into it")
        sizes = plan.non_const_buffer_sizes or []
        for i, size in enumerate(sizes):
            if size < 0:
                self.fail(f"non_const_buffer_sizes[{i}]", f"negative arena size {size}")
        for i, operator in enumerate(plan.operators or []):
            if operator.name is None:
                self.fail(f"operators[{i}].name", "operator has no name")
        for i, delegate in enumerate(plan.delegates or []):
            self.check_delegate(delegate, f"delegates[{i}]")
        for i, value in enumerate(self.values):
            self.check_value(value.val, f"values[{i}]")
        for c, chain in enumerate(plan.chains or []):
            self.check_chain(chain, f"chains[{c}]")

    def check_delegate(self, delegate: P.BackendDelegate, where: str):
        if delegate.id is None:
            self.fail(f"{where}.id", "delegate has no backend id")
        ref = delegate.processed
        if ref is None:
            self.fail(f"{where}.processed", "delegate has no processed data")
        if ref.location == P.DataLocation.INLINE:
            count = len(self.pte.program.backend_delegate_data or [])
            if ref.index >= count:
                self.fail(f"{where}.processed.index", f"inline delegate data {ref.index} does not exist "
                                                       f"(the program has {count})")
        elif ref.index >= len(self.pte.delegate_segments):
            self.fail(f"{where}.processed.index", f"delegate segment {ref.index} does not exist "
                                                   f"(the file has {len(self.pte.delegate_segments)})")

    def check_value(self, val, where: str):
        if val is None:
            self.fail(f"{where}.val", "value has no type (NONE)")
        if isinstance(val, P.Tensor):
            self.check_tensor(val, f"{where}.val(Tensor)")
        elif isinstance(val, P.IntList):
            for i, index in enumerate(val.items or []):
                self.value_index(index, f"{where}.val(IntList).items[{i}]", kinds=(P.Int,))
        elif isinstance(val, P.TensorList):
            for i, index in enumerate(val.items or []):
                self.value_index(index, f"{where}.val(TensorList).items[{i}]", kinds=(P.Tensor,))
        elif isinstance(val, P.OptionalTensorList):
            for i, index in enumerate(val.items or []):
                if index != -1:
                    self.value_index(index, f"{where}.val(OptionalTensorList).items[{i}]", kinds=(P.Tensor, P.Null))

    def check_tensor(self, tensor: P.Tensor, where: str):
        sizes = tensor.sizes or []
        if tensor.sizes is None:
            self.fail(f"{where}.sizes", "tensor has no sizes")
        for i, size in enumerate(sizes):
            if size < 0:
                self.fail(f"{where}.sizes[{i}]", f"negative size {size}")
        if tensor.dim_order is not None and sorted(tensor.dim_order) != list(range(len(sizes))):
            shown = tensor.dim_order if len(tensor.dim_order) <= 16 else f"a list of {len(tensor.dim_order)} entries"
            self.fail(f"{where}.dim_order", f"{shown} is not a permutation of the {len(sizes)} dims")
        if tensor.storage_offset != 0:
            self.fail(f"{where}.storage_offset", f"must be 0, got {tensor.storage_offset}")
        info = tensor.extra_tensor_info
        if info is not None and info.location == P.TensorDataLocation.EXTERNAL:
            if not info.fully_qualified_name:
                self.fail(f"{where}.extra_tensor_info", "external tensor data needs a fully_qualified_name")
            return
        nbytes = tensor_nbytes(tensor)
        if tensor.allocation_info is not None:
            self.check_placement(tensor.allocation_info, nbytes, f"{where}.allocation_info")
        if tensor.data_buffer_idx > 0:
            data = self.tensor_data(tensor, where)
            if nbytes is not None and len(data) < nbytes:
                self.fail(f"{where}.data_buffer_idx", f"buffer {tensor.data_buffer_idx} has {len(data)} bytes, "
                                                       f"the tensor needs {nbytes}")

    def tensor_data(self, tensor: P.Tensor, where: str) -> bytes:
        index = tensor.data_buffer_idx
        if tensor.allocation_info is None:
            legacy = self.pte.program.constant_buffer or []
            if not self.pte.constant_data and legacy:
                if index >= len(legacy):
                    self.fail(f"{where}.data_buffer_idx", f"constant buffer {index} does not exist "
                                                           f"(the program has {len(legacy)})")
                return legacy[index].storage or b""
            if index > len(self.pte.constant_data):
                self.fail(f"{where}.data_buffer_idx", f"constant {index} does not exist "
                                                       f"(the constant segment has {len(self.pte.constant_data)})")
            return self.pte.constant_data[index - 1]
        segment = tensor.extra_tensor_info.mutable_data_segments_idx if tensor.extra_tensor_info else 0
        if segment >= len(self.pte.mutable_data):
            self.fail(f"{where}.extra_tensor_info", f"mutable data segment {segment} does not exist "
                                                     f"(the program has {len(self.pte.mutable_data)})")
        buffers = self.pte.mutable_data[segment]
        if index > len(buffers):
            self.fail(f"{where}.data_buffer_idx", f"mutable buffer {index} does not exist "
                                                   f"(mutable data segment {segment} has {len(buffers)})")
        return buffers[index - 1]

    def check_placement(self, allocation: P.AllocationDetails, nbytes: int | None, where: str):
        arenas = self.plan.non_const_buffer_sizes or []
        if not 1 <= allocation.memory_id < len(arenas):
            known = f"ids 1..{len(arenas) - 1}" if len(arenas) > 1 else "no planned arenas"
            self.fail(f"{where}.memory_id", f"memory id {allocation.memory_id} names no planned arena "
                                            f"(non_const_buffer_sizes has {known})")
        end = allocation.memory_offset + (nbytes or 0)
        if end > arenas[allocation.memory_id]:
            self.fail(where, f"bytes {allocation.memory_offset}..{end} overflow arena {allocation.memory_id} "
                             f"of {arenas[allocation.memory_id]} bytes")

    def check_chain(self, chain: P.Chain, where: str):
        for name in ("inputs", "outputs"):
            for i, index in enumerate(getattr(chain, name) or []):
                self.value_index(index, f"{where}.{name}[{i}]")
        instructions = chain.instructions or []
        operators = len(self.plan.operators or [])
        delegates = len(self.plan.delegates or [])
        for i, instruction in enumerate(instructions):
            at = f"{where}.instructions[{i}].instr_args"
            call = instruction.instr_args
            if call is None:
                self.fail(at, "instruction has no arguments (NONE)")
            at = f"{at}({type(call).__name__})"
            if isinstance(call, P.KernelCall):
                if not 0 <= call.op_index < operators:
                    self.fail(f"{at}.op_index", f"operator {call.op_index} does not exist (the plan has {operators})")
            elif isinstance(call, P.DelegateCall):
                if not 0 <= call.delegate_index < delegates:
                    self.fail(f"{at}.delegate_index", f"delegate {call.delegate_index} does not exist "
                                                       f"(the plan has {delegates})")
            elif isinstance(call, P.MoveCall):
                self.value_index(call.move_from, f"{at}.move_from")
                self.value_index(call.move_to, f"{at}.move_to")
            elif isinstance(call, P.JumpFalseCall):
                self.value_index(call.cond_value_index, f"{at}.cond_value_index", kinds=(P.Bool, P.Tensor))
                if not 0 <= call.destination_instruction <= len(instructions):
                    self.fail(f"{at}.destination_instruction", f"jump to {call.destination_instruction} leaves "
                                                               f"the chain of {len(instructions)} instructions")
            elif isinstance(call, P.FreeCall):
                self.value_index(call.value_index, f"{at}.value_index", kinds=(P.Tensor,))
            for a, index in enumerate(getattr(call, "args", None) or []):
                self.value_index(index, f"{at}.args[{a}]")


def validate_pte(pte: P.PteFile) -> None:
    """Raises ProgramError for the first semantic inconsistency of `pte`, naming where it is."""
    plans = pte.program.execution_plan
    if not plans:
        raise ProgramError("Program.execution_plan: the program has no methods")
    if pte.constant_data and pte.program.constant_buffer:
        raise ProgramError("Program.constant_buffer: constants both inline (legacy) and in the constant segment")
    for p, plan in enumerate(plans):
        _PlanChecker(pte, plan, f"Program.execution_plan[{p}]").check()
