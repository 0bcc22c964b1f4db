"""What a method takes and gives, read from its plan alone: `MethodMeta` and `TensorInfo`
(ExecuTorch's interfaces of the same names), and `operator_name`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etc.schema import program as S
from etc.schema import to_numpy_dtype

__all__ = ["MethodMeta", "TensorInfo", "method_meta", "operator_name"]


class TensorInfo:
    """What a method expects of (or gives as) one tensor value.

    ExecuTorch's `TensorInfo` interface: `sizes()`, `dtype()` (the ScalarType, an IntEnum
    equal to the int ExecuTorch returns), `nbytes()` and `is_memory_planned()` are methods, so
    a script written for `executorch.runtime` reads them unchanged. What numpy and torch
    callers need besides is in properties: `numpy_dtype`, `torch_dtype`, `dynamic`, `index`
    (the EValue index in the plan) and `dim_order`.
    """

    __slots__ = ("_sizes", "_scalar_type", "_planned", "dynamic", "index", "dim_order", "numpy_dtype")

    def __init__(self, *, sizes: tuple, scalar_type: int, dynamic: bool, index: int, dim_order: tuple = (),
                 memory_planned: bool = False):
        self._sizes = tuple(int(s) for s in sizes)
        self._scalar_type = S.ScalarType(scalar_type)
        self._planned = bool(memory_planned)
        self.dynamic = bool(dynamic)
        self.index = int(index)
        self.dim_order = tuple(dim_order)
        # The numpy dtype holding the elements (their bits for bfloat16/float8).
        self.numpy_dtype = np.dtype(to_numpy_dtype(self._scalar_type))

    def sizes(self) -> tuple:
        """Static sizes, or the upper bounds of a dynamic tensor."""
        return self._sizes

    def dtype(self) -> S.ScalarType:
        return self._scalar_type

    def nbytes(self) -> int:
        return int(np.prod(self._sizes, dtype=np.int64)) * self.numpy_dtype.itemsize

    def is_memory_planned(self) -> bool:
        """True when the program placed the tensor in a planned arena (no memory to provide)."""
        return self._planned

    @property
    def torch_dtype(self):
        from etc.schema import to_torch_dtype

        return to_torch_dtype(self._scalar_type)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorInfo) and all(getattr(self, a) == getattr(other, a)
                                                     for a in self.__slots__)

    def __repr__(self) -> str:
        return (f"TensorInfo(sizes={list(self._sizes)}, dtype={self._scalar_type.name}, "
                f"is_memory_planned={self._planned}, nbytes={self.nbytes()}"
                f"{', dynamic' if self.dynamic else ''})")


@dataclass
class MethodMeta:
    """A method's interface and resource needs, readable without loading it.

    ExecuTorch's MethodMeta interface (`name()`, `num_inputs()`, `input_tensor_meta(i)`, ...)
    plus the lists behind it.
    """

    method_name: str
    inputs: list = field(default_factory=list)  # TensorInfo, or the type name of a non-tensor value
    outputs: list = field(default_factory=list)
    planned_buffer_sizes: list = field(default_factory=list)  # bytes of mem_id 1, 2, ...
    backends: list = field(default_factory=list)  # backend id of each delegate
    operators: list = field(default_factory=list)  # "name.overload" of each operator

    def name(self) -> str:
        return self.method_name

    def num_inputs(self) -> int:
        return len(self.inputs)

    def num_outputs(self) -> int:
        return len(self.outputs)

    def input_tensor_meta(self, index: int) -> TensorInfo:
        return self.inputs[index]

    def output_tensor_meta(self, index: int) -> TensorInfo:
        return self.outputs[index]

    def num_memory_planned_buffers(self) -> int:
        return len(self.planned_buffer_sizes)

    def memory_planned_buffer_size(self, index: int) -> int:
        """Bytes of planned buffer `index` (0-based, i.e. mem_id index + 1), as ExecuTorch counts them."""
        return self.planned_buffer_sizes[index]

    def uses_backend(self, backend_id: str) -> bool:
        return backend_id in self.backends

    def __str__(self) -> str:
        def show(info) -> str:
            if isinstance(info, TensorInfo):
                bound = " (upper bounds)" if info.dynamic else ""
                return f"{info.numpy_dtype}{list(info.sizes())}{bound}"
            return str(info)

        lines = [f"method '{self.method_name}'"]
        lines += [f"  input {i}: {show(info)}" for i, info in enumerate(self.inputs)]
        lines += [f"  output {i}: {show(info)}" for i, info in enumerate(self.outputs)]
        lines.append("  planned memory: " + (", ".join(f"mem_id {i + 1}: {size} bytes" for i, size in
                                                       enumerate(self.planned_buffer_sizes)) or "none"))
        if self.backends:
            lines.append(f"  backends: {', '.join(self.backends)}")
        lines.append(f"  operators ({len(self.operators)}): {', '.join(self.operators)}")
        return "\n".join(lines)


def operator_name(operator: S.Operator) -> str:
    """How the kernel registry spells an Operator: "name.overload" ("name" for a default overload)."""
    return f"{operator.name}.{operator.overload}" if operator.overload else operator.name


def _tensor_info(index: int, tensor: S.Tensor) -> TensorInfo:
    return TensorInfo(sizes=tuple(int(s) for s in tensor.sizes or []), scalar_type=int(tensor.scalar_type),
                      dynamic=tensor.shape_dynamism != S.TensorShapeDynamism.STATIC, index=index,
                      dim_order=tuple(int(d) for d in tensor.dim_order or []),
                      memory_planned=tensor.allocation_info is not None)


def _value_info(plan: S.ExecutionPlan, index: int):
    val = plan.values[index].val
    if isinstance(val, S.Tensor):
        return _tensor_info(index, val)
    return type(val).__name__ if val is not None else "Null"


def method_meta(plan: S.ExecutionPlan) -> MethodMeta:
    """The MethodMeta of a plan, computed from the program alone (no memory, no kernels)."""
    sizes = [int(s) for s in plan.non_const_buffer_sizes or [0]]
    return MethodMeta(
        method_name=plan.name,
        inputs=[_value_info(plan, i) for i in plan.inputs or []],
        outputs=[_value_info(plan, i) for i in plan.outputs or []],
        planned_buffer_sizes=sizes[1:],
        backends=[d.id for d in plan.delegates or []],
        operators=[operator_name(op) for op in plan.operators or []],
    )
