"""A loaded method: its planned memory, its values, and the interpreter over its chains.

`load_method` decides everything that can be decided once:

- one byte arena per mem_id (`non_const_buffer_sizes`, slot 0 reserved) is
  allocated (`MemoryManager`); every planned tensor becomes a numpy view of its
  arena, every constant a read-only view of the constant segment, every mutable
  buffer a planned view initialised from its mutable-data segment (or left at the
  zeros the arena starts as, when the program stores no initial state: `Tensor.is_state`);
- every operator of the plan is bound to its kernel (a missing kernel fails here,
  naming the operator and the first instruction that calls it, never halfway
  through an inference); every delegate is initialised on its backend;
- every instruction becomes a closure over the values it touches;
- how each input and output crosses the call (`_plan_io`, `Method.io_decisions`):
  an input the program only reads is bound in place (its instructions read the
  caller's array), an output a delegate writes goes into a new array each call,
  which `execute` returns as it is; the others are copied in and out.

`execute` then binds or copies the inputs, runs the closures and hands over the
outputs: a steady-state inference allocates the outputs it returns and nothing
else (besides what the kernels allocate for temporaries).

Value conventions are ExecuTorch's (see ARCHITECTURE.md, "Program format"):
an IntList's items are indices of Int values, read when the call happens, so a
size computed at run time (`aten::sym_size.int`) reaches every list naming it;
a KernelCall's args are the schema arguments followed by one return slot (the
out tensor again, a TensorList of the outs, or an Int/Bool/Double for a
primitive op). Kernels are called with the schema arguments; what they return
becomes the new value of the return slot. Tensors written by a call (outs) are
handed over at their full planned capacity (the upper bound of a dynamic
shape), so a kernel may produce any shape up to the bound; the returned
array's shape becomes the tensor's current shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etc.errors import BackendError, EtcError, ExecutionError, InputError, KernelNotFoundError, ProgramError
from etc.runtime import log
from etc.runtime.backends import get_backend
from etc.runtime.memory import MemoryManager
from etc.schema import program as S
from etc.schema import to_numpy_dtype

__all__ = ["Method", "MethodMeta", "TensorInfo", "method_meta", "operator_name"]


# --------------------------------------------------------------------------- metadata

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


# --------------------------------------------------------------------------- tensors

def _logical_view(flat: np.ndarray, shape: tuple, dim_order: tuple | None) -> np.ndarray:
    """The first prod(shape) elements of `flat`, laid out in `dim_order`, seen with logical `shape`."""
    count = int(np.prod(shape, dtype=np.int64))
    if dim_order is None:
        return flat[:count].reshape(shape)
    physical = flat[:count].reshape([shape[d] for d in dim_order])
    return physical.transpose(np.argsort(dim_order))


class _Tensor:
    """One tensor value: its storage (fixed at load) and its current array.

    `array` is what a kernel reading the value sees (current shape); `capacity()` is
    what a kernel writing it gets (the whole storage at the upper-bound shape).
    Planned and private tensors own `storage`; a constant's storage is read-only;
    results that are not views of the tensor's own storage are copied into it,
    except for tensors the planner left out, which simply take (alias) the array
    they are given, as ExecuTorch's et_view and MoveCall do.
    """

    __slots__ = ("index", "dtype", "max_shape", "dim_order", "dynamic", "storage", "planned", "constant",
                 "unbound", "array", "_capacity", "_lo", "_hi")

    def __init__(self, index: int, dtype: np.dtype, shape: tuple, dim_order: tuple | None, dynamic: bool,
                 storage: np.ndarray | None, *, planned: bool, constant: bool):
        self.index = index
        self.dtype = dtype
        self.max_shape = shape
        self.dim_order = dim_order
        self.dynamic = dynamic
        self.storage = storage
        self.planned = planned
        self.constant = constant
        self.unbound = False  # DYNAMIC_UNBOUND and unplanned: may outgrow its sizes (storage regrown)
        if storage is not None:
            self._capacity = _logical_view(storage.view(dtype), shape, dim_order)
            self._lo = storage.ctypes.data
            self._hi = self._lo + storage.nbytes
        else:
            self._capacity, self._lo, self._hi = None, 0, 0
        self.array = self._capacity

    def capacity(self) -> np.ndarray:
        return self._capacity if self._capacity is not None else self.array

    def regrow(self, shape: tuple, storage: np.ndarray) -> None:
        """New, larger storage for an unbound tensor (the only allocation an execute may make)."""
        self.max_shape = shape
        self.storage = storage
        self._capacity = _logical_view(storage.view(self.dtype), shape, self.dim_order)
        self._lo = storage.ctypes.data
        self._hi = self._lo + storage.nbytes
        self.array = self._capacity

    def resize(self, shape: tuple) -> np.ndarray:
        """Re-view the storage with `shape` (the caller checked it fits) and make that current."""
        if shape != self.max_shape or self.array is not self._capacity:
            self.array = (self._capacity if shape == self.max_shape
                          else _logical_view(self.storage.view(self.dtype), shape, self.dim_order))
        return self.array

    def owns(self, array: np.ndarray) -> bool:
        if self.storage is None or array.size == 0:
            return False
        start = array.__array_interface__["data"][0]
        return self._lo <= start < self._hi

    def accept(self, result) -> None:
        """Make `result` (a kernel's or backend's output) the current value."""
        if result is self._capacity and result is not None:  # the common case: written in place, full shape
            self.array = result
            return
        if result is None:  # written in place at the shape it was handed over with
            self.array = self.capacity()
            return
        if self.constant:
            raise ExecutionError(f"an instruction writes into constant tensor {self.index}", value=self.index)
        if not isinstance(result, np.ndarray):
            result = np.asarray(result, dtype=self.dtype)
        if self.storage is None or not self.planned:
            # Unplanned: take the array as it is (a view of another value, or one a kernel made).
            self.array = result if result.dtype == self.dtype else result.astype(self.dtype)
            return
        if self.owns(result):
            self.array = result
            return
        if result.size > self._capacity.size or (not self.dynamic and result.shape != self.max_shape):
            raise ExecutionError(
                f"a result of shape {list(result.shape)} does not fit tensor {self.index}, planned as "
                f"{list(self.max_shape)}{' at most' if self.dynamic else ''}", value=self.index)
        target = self.resize(result.shape)
        with np.errstate(all="ignore"):
            np.copyto(target, result, casting="unsafe")

    def describe(self) -> str:
        shape = self.array.shape if self.array is not None else self.max_shape
        return f"tensor {self.dtype}{list(shape)}"


# --------------------------------------------------------------------------- the method

def ensure_kernels_registered() -> None:
    import etc.runtime.kernels  # noqa: F401 - importing the package registers the portable kernels
    import etc.runtime.prim_ops  # noqa: F401 - and ExecuTorch's primitive operators


def _lookup_default(name: str, lookup):
    """A kernel by name; an overload-less name (ExecuTorch's "default") also tries `name.default`."""
    try:
        return lookup(name)
    except (KernelNotFoundError, KeyError):
        if "." in name.split("::", 1)[-1]:
            raise
        return lookup(name + ".default")


class Method:
    """A method ready to run: `execute(inputs) -> outputs`. See the module docstring."""

    def __init__(self, pte: S.PteFile, plan: S.ExecutionPlan, *, kernels=None, run_record=None):
        self.name = plan.name
        self._pte = pte
        self._plan = plan
        self.metadata = method_meta(plan)
        for placement in plan.non_const_buffer_device or []:
            if placement.device_type != S.DeviceType.CPU:
                raise ProgramError(f"method '{self.name}' places planned buffer {placement.buffer_idx} on "
                                   f"{S.DeviceType(placement.device_type).name}:{placement.device_index}; "
                                   "the etc runtime runs on the host (CPU) only")
        self._memory = MemoryManager(plan.non_const_buffer_sizes or [0])
        self._values: list = [None] * len(plan.values or [])
        self._build_values()
        self._kernels = self._bind_kernels(kernels)
        self._delegates = self._init_delegates()
        self._step_writes: dict = {}
        self._delegate_steps: set = set()  # (chain, instruction) of the delegate calls
        self._accesses: list = []  # (chain, position, instruction, tensors read, tensors written)
        self._fresh: dict = {}  # (chain, position) of a delegate call -> its outputs written into fresh arrays
        self._inputs = list(plan.inputs or [])
        self._outputs = list(plan.outputs or [])
        self._in_place_inputs, self._fresh_outputs, self.io_decisions = set(), set(), {}
        self._dims_checked = None  # the input shapes `_input_dims().check` last accepted
        self._chains = [self._compile_chain(c, chain) for c, chain in enumerate(plan.chains or [])]
        self._plan_io()
        # Chains without a jump run as a plain loop over their steps.
        self._straight = {c: [step[0] for step in steps] for c, steps in enumerate(self._chains)
                          if not any(isinstance(i.instr_args, S.JumpFalseCall) for i in plan.chains[c].instructions or [])}
        self._run_record = run_record  # `enable_etdump=True`: execute records into it (etc.devtools.RunRecord)
        log.debug(f"loaded method '{self.name}': {len(self._kernels)} operator(s), "
                  f"{len(self._delegates)} delegate(s), planned arenas {self.metadata.planned_buffer_sizes} bytes")

    def __repr__(self) -> str:
        return (f"Method('{self.name}', inputs={len(self._inputs)}, outputs={len(self._outputs)}, "
                f"planned_bytes={self._memory.planned_bytes})")

    def close(self) -> None:
        """Let the backends release what they made for this method's delegates (`Backend.destroy`)."""
        delegates, self._delegates = self._delegates, []
        for _, backend, handle in delegates:
            destroy = getattr(backend, "destroy", None)
            if callable(destroy):
                destroy(handle)

    @property
    def planned_bytes(self) -> int:
        return self._memory.planned_bytes

    def memory_usage(self) -> dict:
        """Bytes this loaded method holds, by kind: what to budget for on a device.

        `planned`: the arenas per mem_id (allocated once at load); `unplanned`: storage for
        values the planner left out (unplanned inputs, views), also allocated at load;
        `constants`: bytes of the program's constant data the method's values view (shared
        with other methods, not copied).
        """
        constants = sum(v.storage.nbytes for v in self._values if isinstance(v, _Tensor) and v.constant)
        return {"planned": [a.nbytes for a in self._memory.arenas[1:]],
                "unplanned": self._memory.private_bytes, "constants": constants}

    # ------------------------------------------------------------------ load: values
    def _build_values(self) -> None:
        for index, evalue in enumerate(self._plan.values or []):
            val = evalue.val
            if isinstance(val, S.Tensor):
                self._values[index] = self._make_tensor(index, val)
            elif isinstance(val, S.Int):
                self._values[index] = int(val.int_val)
            elif isinstance(val, S.Double):
                self._values[index] = float(val.double_val)
            elif isinstance(val, S.Bool):
                self._values[index] = bool(val.bool_val)
            elif isinstance(val, S.String):
                self._values[index] = val.string_val
            elif isinstance(val, S.DoubleList):
                self._values[index] = [float(v) for v in val.items or []]
            elif isinstance(val, S.BoolList):
                self._values[index] = [bool(v) for v in val.items or []]
            elif isinstance(val, (S.IntList, S.TensorList, S.OptionalTensorList)):
                self._values[index] = val  # boxed lists: items are value indices, read at call time
            else:  # Null (or no value at all)
                self._values[index] = None

    def _make_tensor(self, index: int, tensor: S.Tensor) -> _Tensor:
        dtype = np.dtype(to_numpy_dtype(tensor.scalar_type))
        if tensor.scalar_type == S.ScalarType.BFLOAT16:
            # Tagged, so that the kernel registry computes on their values, not on their uint16 bits.
            from etc.runtime.kernels.common import BFLOAT16 as dtype
        shape = tuple(int(s) for s in tensor.sizes or [])
        order = tuple(int(d) for d in tensor.dim_order or [])
        dim_order = order if order and order != tuple(range(len(shape))) else None
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        dynamic = tensor.shape_dynamism != S.TensorShapeDynamism.STATIC
        extra = tensor.extra_tensor_info
        if extra is not None and extra.location == S.TensorDataLocation.EXTERNAL:
            data = self._external_data(index, extra.fully_qualified_name, nbytes)
            return _Tensor(index, dtype, shape, dim_order, dynamic, data, planned=True, constant=True)
        info = tensor.allocation_info
        if info is not None:
            offset = (int(info.memory_offset_high) << 32) | int(info.memory_offset_low)
            storage = self._memory.view(info.memory_id, offset, nbytes, where=f"method '{self.name}' value {index}")
            if tensor.data_buffer_idx > 0:
                # A mutable buffer with an initial state: copied in once, then it lives in the arena
                # (state persists from one execute to the next).
                initial = np.frombuffer(self._pte.mutable_initial_state(tensor), dtype=np.uint8)
                storage[:min(nbytes, initial.size)] = initial[:nbytes]
            return _Tensor(index, dtype, shape, dim_order, dynamic, storage, planned=True, constant=False)
        if tensor.data_buffer_idx > 0:
            data = np.frombuffer(self._constant_bytes(tensor.data_buffer_idx), dtype=np.uint8, count=nbytes)
            return _Tensor(index, dtype, shape, dim_order, dynamic, data, planned=True, constant=True)
        # Not planned (an input the planner left to the caller, a view's output, ...): storage of our
        # own, sized for the upper bound and allocated once, for when it is written or set as an input.
        made = _Tensor(index, dtype, shape, dim_order, dynamic, self._memory.private(nbytes),
                       planned=False, constant=False)
        made.unbound = tensor.shape_dynamism == S.TensorShapeDynamism.DYNAMIC_UNBOUND
        return made

    def _constant_bytes(self, data_buffer_idx: int) -> bytes:
        """A constant's bytes: the constant segment, or the legacy in-flatbuffer `constant_buffer`
        (whose index 0 is the reserved empty buffer) for files written before segments existed."""
        legacy = self._pte.program.constant_buffer or []
        if not self._pte.constant_data and legacy:
            return legacy[data_buffer_idx].storage or b""
        return self._pte.constant(data_buffer_idx)

    def _external_data(self, index: int, fqn: str, nbytes: int) -> np.ndarray:
        """A constant kept outside the program (a .ptd file), found by name in the named data."""
        data = self._pte.named_data.get(fqn)
        if data is None:
            raise ProgramError(f"method '{self.name}' value {index}: tensor '{fqn}' lives in external data "
                               "(a .ptd file), which this program does not carry")
        if len(data) < nbytes:
            raise ProgramError(f"method '{self.name}' value {index}: external data '{fqn}' has {len(data)} "
                               f"bytes, the tensor needs {nbytes}")
        return np.frombuffer(data, dtype=np.uint8, count=nbytes)

    # ------------------------------------------------------------------ load: kernels, delegates
    def _first_use(self, op_index: int):
        for chain in self._plan.chains or []:
            for position, instruction in enumerate(chain.instructions or []):
                args = instruction.instr_args
                if isinstance(args, S.KernelCall) and args.op_index == op_index:
                    return position
        return None

    def _bind_kernels(self, kernels) -> list:
        if kernels is None:
            ensure_kernels_registered()
            from etc.runtime.kernels.registry import get_kernel as lookup
        else:
            lookup = kernels.__getitem__
        bound, missing = [], []
        for op_index, operator in enumerate(self._plan.operators or []):
            name = operator_name(operator)
            try:
                bound.append((name, _lookup_default(name, lookup)))
            except (KernelNotFoundError, KeyError) as error:
                missing.append((op_index, name, getattr(error, "notes", [])))
                bound.append((name, None))
        if missing:
            op_index, name, notes = missing[0]
            notes = list(notes)
            if len(missing) > 1:
                notes.append(f"the method also needs {', '.join(n for _, n, _ in missing[1:])}, "
                             "which have no kernel either")
            raise KernelNotFoundError(f"no kernel registered for operator '{name}'", method=self.name,
                                      instruction=self._first_use(op_index), operator=name, notes=notes)
        return bound

    def _init_delegates(self) -> list:
        delegates = []
        for i, delegate in enumerate(self._plan.delegates or []):
            backend = get_backend(delegate.id, method=self.name)
            blob = self._pte.delegate_blob(delegate.processed)
            started = log.now_ns()
            try:
                handle = backend.init(blob, list(delegate.compile_specs or []))
            except EtcError:
                raise
            except Exception as error:  # noqa: BLE001 - the backend's failure, with its name
                raise BackendError(f"backend '{delegate.id}' failed to initialise delegate {i}: "
                                   f"{type(error).__name__}: {error}", method=self.name) from error
            log.debug(f"method '{self.name}': delegate {i} initialised on backend '{delegate.id}' "
                      f"({len(blob)}-byte blob) in {(log.now_ns() - started) / 1e6:.1f} ms")
            delegates.append((delegate.id, backend, handle))
        return delegates

    # ------------------------------------------------------------------ load: instructions
    def _reader(self, index: int, write: bool = False):
        """A function giving EValue `index` as kernels take it (outs at their full capacity)."""
        value = self._values[index]
        if isinstance(value, _Tensor):
            return value.capacity if write else (lambda: value.array)
        if isinstance(value, S.IntList):
            items, values = list(value.items or []), self._values
            return lambda: [values[i] for i in items]
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            tensors = [self._values[i] if i >= 0 else None for i in value.items or []]
            if write:
                return lambda: [t.capacity() if t is not None else None for t in tensors]
            return lambda: [t.array if t is not None else None for t in tensors]
        values = self._values
        return lambda: values[index]

    def _written(self, index: int) -> set:
        """Indices of the tensors a result stored into value `index` writes."""
        value = self._values[index]
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            return {index, *(i for i in value.items or [] if i >= 0)}
        return {index}

    def _writer(self, index: int):
        """A function storing a kernel's result into EValue `index`."""
        value = self._values[index]
        if isinstance(value, _Tensor):
            accept = value.accept

            def store_tensor(result):
                if type(result) is tuple and len(result) == 1:  # a one-element tuple for a single return
                    result = result[0]
                accept(result)
            return store_tensor
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            tensors = [self._values[i] if i >= 0 else None for i in value.items or []]

            def store_list(results):
                if results is None or isinstance(results, np.ndarray):
                    results = [results] * len(tensors) if results is None else [results]
                for tensor, result in zip(tensors, results):
                    if tensor is not None:
                        tensor.accept(result)
            return store_list
        values = self._values

        def store_scalar(result):
            if isinstance(result, np.ndarray) and result.ndim == 0:
                result = result.item()
            values[index] = result.item() if isinstance(result, np.generic) else result
        return store_scalar

    def _compile_chain(self, chain_index: int, chain: S.Chain) -> list:
        # Which tensors hold a value before each instruction (for delegates, whose args do not say
        # where inputs end and outputs begin): inputs, constants and mutable state, then whatever
        # earlier instructions wrote.
        defined = set(self._plan.inputs or [])
        for i, value in enumerate(self._values):
            if not isinstance(value, _Tensor) or value.constant or self._plan.values[i].val.is_state:
                defined.add(i)
        steps = []
        for position, instruction in enumerate(chain.instructions or []):
            before = set(defined)
            self._position = (chain_index, position)  # where `_compile` registers a delegate call
            step = self._compile(position, instruction.instr_args, defined)
            self._accesses.append((chain_index, position, instruction.instr_args,
                                   *self._reads_writes(instruction.instr_args, step, before)))
            # The tensors the instruction writes (what a run record's debug buffer keeps of it).
            written = defined - before
            if isinstance(instruction.instr_args, S.KernelCall) and step[2] is not None:
                written |= self._written(step[2])
            if isinstance(instruction.instr_args, S.DelegateCall):
                self._delegate_steps.add((chain_index, position))
                # A value passed twice is an input the delegate updates in place (a mutable buffer,
                # compiler/delegation.py `_mark_in_place_outputs`): written, though defined before.
                args = list(instruction.instr_args.args or [])
                written |= {i for i in args if args.count(i) > 1}
            self._step_writes[(chain_index, position)] = sorted(
                i for i in written if isinstance(self._values[i], _Tensor) and not self._values[i].constant)
            steps.append(step)
        return steps

    def _tensors_of(self, index: int) -> set:
        """The tensor values behind EValue `index` (itself, or a tensor list's items)."""
        value = self._values[index]
        if isinstance(value, _Tensor):
            return {index}
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            return {i for i in value.items or [] if i >= 0 and isinstance(self._values[i], _Tensor)}
        return set()

    def _reads_writes(self, call, step, before: set) -> tuple:
        """(tensors the instruction reads, tensors it writes), as `_plan_io` needs them."""
        reads, writes = set(), set()
        if isinstance(call, S.KernelCall):
            _, _, target, params = step
            outs = self._written(target) if target is not None else set()
            for i in params:
                reads |= self._tensors_of(i) - outs
            if target is not None:
                writes |= self._tensors_of(target)
                if target in params and list(call.args or [])[-1] != target:  # a prim op writing an argument
                    reads |= self._tensors_of(target)
        elif isinstance(call, S.DelegateCall):
            args = list(call.args or [])
            for i in args:
                if i in before:
                    reads |= self._tensors_of(i)
                if i not in before or args.count(i) > 1:
                    writes |= self._tensors_of(i)
        elif isinstance(call, S.MoveCall):
            reads |= self._tensors_of(call.move_from)
            writes |= self._tensors_of(call.move_to)
        elif isinstance(call, S.JumpFalseCall):
            reads |= self._tensors_of(call.cond_value_index)
        return reads, writes

    def _plan_io(self) -> None:
        """Decide, once, which inputs `execute` binds in place and which outputs delegates write
        into fresh arrays; `io_decisions` says what was decided for each and why.

        An input is bound in place (the instructions read the caller's array, nothing is copied)
        unless the program writes it (in-place state, an input mutation) or moves it into another
        value (which would then alias the caller's array, and may be written), its planned bytes are
        read through another value (an alias), it is laid out in a non-default dim order, it is
        bfloat16 (the runtime tags those arrays) or its size is unbounded. At run time a caller's
        array that is not C-contiguous, or of another dtype than the method's (an error), does not
        bind: the first is copied into the arena as before.

        An output a delegate writes is written into a new array each call (the delegate's out
        argument), which `execute` returns as it is: no copy, and no view of the arena that the
        next call would overwrite. That needs the output to be written once, by that delegate, in
        a method without control flow (an instruction that may run twice or not at all), and
        neither returned twice, an input, mutable state, nor planned bytes that another value
        uses after the delegate has run. Other outputs are copied out of the arena."""
        values, accesses = self._values, self._accesses
        decisions = self.io_decisions
        refs: dict = {}  # tensor -> [(instruction number, reads it, writes it)] in program order
        for n, (_, _, _, reads, writes) in enumerate(accesses):
            for i in reads | writes:
                refs.setdefault(i, []).append((n, i in reads, i in writes))
        written = {i for i, seen in refs.items() if any(w for _, _, w in seen)}
        # Planned bytes: (mem_id, first, end) of every planned, non-constant tensor.
        spans = {}
        for i, value in enumerate(values):
            info = self._plan.values[i].val.allocation_info if isinstance(value, _Tensor) else None
            if info is not None and not value.constant:
                offset = (int(info.memory_offset_high) << 32) | int(info.memory_offset_low)
                spans[i] = (info.memory_id, offset, offset + value.storage.nbytes)

        def sharing(i) -> list:
            if i not in spans:
                return []
            mem, lo, hi = spans[i]
            return [j for j, (m, a, b) in spans.items() if j != i and m == mem and a < hi and lo < b]

        def why_not(tensor: _Tensor) -> str | None:
            if tensor.dim_order is not None:
                return f"it is laid out in dim order {list(tensor.dim_order)}"
            if tensor.dtype.metadata:
                return "it is bfloat16 (the runtime tags those arrays)"
            return None

        moved = {call.move_from for _, _, call, _, _ in accesses if isinstance(call, S.MoveCall)}
        inputs, outputs = self._inputs, self._outputs
        for position, i in enumerate(inputs):
            tensor = values[i]
            if not isinstance(tensor, _Tensor):
                continue
            reason = why_not(tensor)
            if reason is None and i in written:
                reason = "the program writes it"
            if reason is None and i in moved:  # the destination would alias the caller's array
                reason = "a move makes another value of it"
            if reason is None and tensor.unbound:
                reason = "its size has no bound"
            if reason is None:
                for j in sharing(i):
                    first = refs.get(j)
                    if (first and first[0][1]) or (not first and (j in outputs or j in inputs)):
                        reason = f"value {j} reads its planned bytes"
                        break
            if reason is None:
                self._in_place_inputs.add(i)
            decisions[f"input {position}"] = "bound in place" if reason is None else f"copied: {reason}"

        jumps = any(isinstance(call, S.JumpFalseCall) for _, _, call, _, _ in accesses)
        mutable = {i for i, v in enumerate(self._plan.values or [])
                   if isinstance(v.val, S.Tensor) and v.val.is_state}
        for position, o in enumerate(outputs):
            tensor = values[o]
            if not isinstance(tensor, _Tensor):
                continue
            writers = [n for n, _, w in refs.get(o, []) if w]
            reason = why_not(tensor)
            if reason is None and outputs.count(o) > 1:
                reason = "it is returned more than once"
            if reason is None and o in inputs:
                reason = "it is an input"
            if reason is None and (tensor.constant or o in mutable or o not in spans):
                reason = "it is " + ("a constant" if tensor.constant else "mutable state" if o in mutable
                                     else "not in planned memory")
            if reason is None and jumps:
                reason = "the method has control flow"
            if reason is None and len(writers) != 1:
                reason = f"it is written by {len(writers)} instructions"
            if reason is None and not isinstance(accesses[writers[0]][2], S.DelegateCall):
                reason = "it is written by " + ("a move" if isinstance(accesses[writers[0]][2], S.MoveCall)
                                                else "a kernel")
            if reason is None and o in accesses[writers[0]][3]:
                reason = "the delegate updates it in place"
            if reason is None:
                after = writers[0]
                for j in sharing(o):
                    if j in outputs or j in inputs or any(n > after for n, _, _ in refs.get(j, [])):
                        reason = f"value {j} uses its planned bytes after the delegate"
                        break
            if reason is None:
                chain, pc, call = accesses[writers[0]][:3]
                fresh, tensors = self._fresh[(chain, pc)]
                k = list(call.args or []).index(o)
                fresh.append((k, tensor, tensor.max_shape, tensor.dtype))
                tensors[k] = None
                self._fresh_outputs.add(o)
            decisions[f"output {position}"] = ("written by its delegate into a new array" if reason is None
                                               else f"copied: {reason}")
        self._bind_inputs = [i in self._in_place_inputs for i in inputs]

    def _compile(self, position: int, call, defined: set):
        """(step, label, value index, argument indices) for one instruction.

        `step()` runs it and returns a jump target or None; the label (the operator's name,
        "delegate '<id>'", "move", ...), the value it writes and the values it reads are
        what an error at this instruction reports.
        """
        if isinstance(call, S.KernelCall):
            name, kernel = self._kernels[call.op_index]
            args = list(call.args or [])
            # Prim ops that write an argument instead of a return slot say which (et_copy_index).
            result_arg = getattr(kernel, "etc_result_arg", getattr(getattr(kernel, "__wrapped__", None),
                                                                   "etc_result_arg", None))
            if result_arg is None:
                params, target = args[:-1], (args[-1] if args else None)
            else:
                params, target = args, args[result_arg]
            outs = self._written(target) if target is not None else set()
            readers = [self._reader(i, write=i in outs) for i in params]
            store = self._writer(target) if target is not None else (lambda result: None)
            defined |= outs

            def kernel_call():
                store(kernel(*[read() for read in readers]))
            return kernel_call, name, target, params
        if isinstance(call, S.DelegateCall):
            backend_id, backend, handle = self._delegates[call.delegate_index]
            args = list(call.args or [])
            readers = [self._reader(i, write=i not in defined) for i in args]
            tensors = [self._values[i] if isinstance(self._values[i], _Tensor) else None for i in args]
            outputs = [t for i, t in zip(args, tensors) if t is not None and i not in defined]
            defined |= set(args)

            profiled = callable(getattr(backend, "execute_profiled", None))
            # Outputs the backend writes into a fresh array each call (`_plan_io` fills this in after
            # the chains are compiled, taking them out of `tensors`): (argument position, tensor, shape, dtype).
            fresh: list = []
            self._fresh[self._position] = (fresh, tensors)

            execute = backend.execute

            def delegate_call(events=None):
                given = [read() for read in readers]
                for k, _, shape, dtype in fresh:
                    given[k] = np.empty(shape, dtype)
                if events is not None and profiled:  # a recorded run: the backend may time its regions
                    results = backend.execute_profiled(handle, given, events)
                else:
                    results = execute(handle, given)
                if results is None:
                    for tensor in outputs:
                        tensor.array = tensor.capacity()
                    for k, tensor, _, _ in fresh:
                        tensor.array = given[k]
                    return
                if type(results) is not list:
                    results = list(results)
                first = len(tensors) - len(results)
                for tensor, result in zip(tensors[first:], results):
                    if tensor is not None:
                        tensor.accept(result)
                for k, tensor, _, dtype in fresh:
                    result = results[k - first] if k >= first else None
                    if result is None:
                        tensor.array = given[k]
                    elif result is given[k] or (isinstance(result, np.ndarray) and result.base is given[k]):
                        tensor.array = result  # written in place (or a view of it at the computed shape)
                    else:  # the backend's own array, which it may reuse: the caller gets a copy
                        tensor.array = np.array(result, dtype=dtype, copy=True)
            return delegate_call, f"delegate '{backend_id}'", None, args
        if isinstance(call, S.MoveCall):
            source, destination = call.move_from, call.move_to
            values = self._values
            defined.add(destination)

            def move():
                value = values[source]
                if isinstance(value, _Tensor):
                    target = values[destination]
                    if isinstance(target, _Tensor):
                        target.array = value.array  # ExecuTorch copies the EValue: the tensor aliases
                        return
                values[destination] = value
            return move, "move", destination, [source]
        if isinstance(call, S.JumpFalseCall):
            read, destination = self._reader(call.cond_value_index), call.destination_instruction
            backward = destination <= position
            last = [None]  # the state when this backward jump was last taken (None: the loop exited)

            def jump_false():
                condition = read()
                if isinstance(condition, np.ndarray):
                    condition = bool(condition.all())
                if condition:
                    last[0] = None
                    return None
                if backward:
                    # A loop iteration that left every value as it found it repeats forever (the
                    # method is deterministic): an error instead of a hang.
                    state = self._state_fingerprint()
                    if state == last[0]:
                        raise ExecutionError("a loop iteration changed no value: the jump back to instruction "
                                             f"{destination} would repeat it forever")  # (the caller adds where)
                    last[0] = state
                return destination
            return jump_false, "jump_false", call.cond_value_index, [call.cond_value_index]
        if isinstance(call, S.FreeCall):
            # Every tensor lives in storage fixed at load: there is nothing to release.
            return (lambda: None), "free", call.value_index, []
        raise ExecutionError(f"unsupported instruction {type(call).__name__}", method=self.name,
                             instruction=position)

    def _state_fingerprint(self) -> tuple:
        """Everything a next instruction can read that an instruction may have written: the planned
        arenas, tensors' current shapes and private storage, and the non-tensor values."""
        import zlib

        arenas = tuple(zlib.crc32(arena) for arena in self._memory.arenas[1:] if arena is not None)
        rest = []
        for value in self._values:
            if isinstance(value, _Tensor):
                rest.append(value.array.shape if value.array is not None else None)
                if not value.planned and not value.constant and value.storage is not None:
                    rest.append(zlib.crc32(value.storage))
            elif value is None or isinstance(value, (bool, int, float, str)):
                rest.append(value)
            elif isinstance(value, list):
                rest.append(tuple(value))
        return arenas, tuple(rest)

    # ------------------------------------------------------------------ execute
    def execute(self, inputs) -> list:
        """Run the method on `inputs`, one per method input (torch tensors, numpy arrays, or scalars).

        Returns the outputs as torch tensors if any input was a torch tensor, numpy
        arrays otherwise (non-tensor outputs as Python values). Each is the caller's own:
        an array a delegate wrote for this call alone, or a copy out of the planned memory
        that the next `execute` reuses (and that other values of this method share), so a
        later call never changes results the caller still holds. Inputs the program only
        reads are read where the caller keeps them (`io_decisions`), during this call only.

        A Method owns one set of arenas: do not execute the same Method from two threads
        at once (load the program twice for that).
        """
        kind = type(inputs)
        if kind is not list:
            inputs = [inputs] if kind is np.ndarray or kind.__module__.startswith("torch") else list(inputs)
        as_torch = False
        for given in inputs:
            kind = type(given)
            if kind is not np.ndarray and kind.__module__.startswith("torch"):
                as_torch = True
                break
        if self._run_record is not None:
            return self._execute_recorded(self._run_record, inputs, as_torch)
        self._set_inputs(inputs)
        self._run()
        output = self._output
        return [output(index, as_torch) for index in self._outputs]

    def __call__(self, *inputs):
        outputs = self.execute(inputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def profile(self, inputs, runs: int = 1) -> list:
        """Time every instruction over `runs` executions: [(instruction, operator, total seconds, calls)].

        The instructions of a loop are counted once per iteration. A summary of a run record
        (`etc.devtools.RunRecord`, what `load_program(enable_etdump=True)` keeps in full): enough to
        see which kernels or delegates an inference spends its time in.
        """
        from etc.runtime.run_record import RunRecord

        if isinstance(inputs, np.ndarray) or type(inputs).__module__.startswith("torch"):
            inputs = [inputs]
        inputs = list(inputs)
        record = RunRecord()
        for _ in range(max(1, runs)):
            self._execute_recorded(record, inputs, as_torch=False)
        totals: dict = {}
        for event in record.events:
            if event.chain >= 0:
                key = (event.chain, event.instruction)
                seconds, calls = totals.get(key, (0.0, 0))
                totals[key] = (seconds + event.duration_ns * 1e-9, calls + 1)
        return [(pc, self._chains[c][pc][1], seconds, calls) for (c, pc), (seconds, calls) in sorted(totals.items())]

    def _output(self, index: int, as_torch: bool):
        value = self._values[index]
        if not isinstance(value, _Tensor):
            if isinstance(value, (S.IntList, S.TensorList, S.OptionalTensorList)):
                return self._reader(index)()
            return value
        # A fresh output is the delegate's own new array; any other is copied out of planned memory.
        array = value.array if index in self._fresh_outputs else np.array(value.array, copy=True, order="C")
        if not as_torch:
            return array
        import torch

        result = torch.from_numpy(array)
        scalar_type = self._plan.values[index].val.scalar_type
        if scalar_type == S.ScalarType.BFLOAT16:
            result = result.view(torch.bfloat16)
        return result

    def _set_inputs(self, inputs: list) -> None:
        if len(inputs) != len(self._inputs):
            raise InputError(f"method '{self.name}' takes {len(self._inputs)} input(s), got {len(inputs)}",
                             method=self.name)
        for position, (index, given, bind) in enumerate(zip(self._inputs, inputs, self._bind_inputs)):
            value = self._values[index]
            if bind:
                array = given if type(given) is np.ndarray else _as_array(given)
                if (array is not None and array.shape == value.max_shape and array.dtype == value.dtype
                        and array.flags.c_contiguous):
                    value.array = array  # read in place: the program never writes it (`_plan_io`)
                    continue
                self._set_tensor_input(position, value, given)
            elif isinstance(value, _Tensor):
                self._set_tensor_input(position, value, given)
            else:
                self._set_scalar_input(position, index, given)
        dims = self._input_dims()
        if dims is not None:  # Dim minimums and shared Dims (the tensors know only upper bounds)
            shapes = [tuple(getattr(given, "shape", ())) if isinstance(self._values[index], _Tensor) else None
                      for index, given in zip(self._inputs, inputs)]
            if shapes != self._dims_checked:  # the same shapes as last call passed already
                dims.check(shapes)
                self._dims_checked = shapes

    def _input_dims(self):
        """The method's `torch.export.Dim` constraints (`etc.schema.input_dims`), read once; None if none."""
        if not hasattr(self, "_dims"):
            from etc.schema.input_dims import InputDims, key

            record = self._pte.named_data.get(key(self.name))
            self._dims = None if record is None else InputDims(self.name, record, len(self._inputs))
        return self._dims

    def _input_error(self, position: int, index: int, text: str) -> InputError:
        return InputError(f"method '{self.name}' input {position}: {text}", method=self.name, value=index)

    def _set_tensor_input(self, position: int, tensor: _Tensor, given) -> None:
        array = _as_array(given)
        if array is None:
            raise self._input_error(position, tensor.index, f"expected a tensor, got {type(given).__name__}")
        if array.dtype != tensor.dtype:
            raise self._input_error(position, tensor.index,
                                    f"expected dtype {self._dtype_name(tensor)}, got {array.dtype}")
        expected = tensor.max_shape
        if tensor.unbound and array.ndim == len(expected) and any(g > e for g, e in zip(array.shape, expected)):
            # No bound to check: grow the private storage (once per new largest shape).
            grown = tuple(max(g, e) for g, e in zip(array.shape, expected))
            tensor.regrow(grown, self._memory.private(int(np.prod(grown, dtype=np.int64)) * tensor.dtype.itemsize))
            expected = grown
        if array.ndim != len(expected):
            raise self._input_error(position, tensor.index,
                                    f"expected rank {len(expected)} (shape {list(expected)}"
                                    f"{' at most' if tensor.dynamic else ''}), got shape {list(array.shape)}")
        if array.shape != expected:
            if not tensor.dynamic:
                raise self._input_error(position, tensor.index,
                                        f"expected shape {list(expected)}, got {list(array.shape)}")
            for dim, (size, bound) in enumerate(zip(array.shape, expected)):
                if size > bound:
                    raise self._input_error(position, tensor.index,
                                            f"dimension {dim} is {size}, above its upper bound {bound} "
                                            f"(shape at most {list(expected)})")
        if tensor.index in self._in_place_inputs and array.flags.c_contiguous:
            tensor.array = array  # a dynamic shape within its bounds, read in place
            return
        np.copyto(tensor.resize(array.shape), array)

    def _dtype_name(self, tensor: _Tensor) -> str:
        """The numpy dtype, plus the real element type when numpy only carries its bits (bfloat16, ...)."""
        scalar_type = S.ScalarType(self._plan.values[tensor.index].val.scalar_type)
        plain = {np.dtype(np.bool_): "BOOL"}.get(tensor.dtype, tensor.dtype.name.upper())
        known = {"UINT8": "BYTE", "INT8": "CHAR", "INT16": "SHORT", "INT32": "INT", "INT64": "LONG",
                 "FLOAT16": "HALF", "FLOAT32": "FLOAT", "FLOAT64": "DOUBLE", "BOOL": "BOOL", "UINT16": "UINT16",
                 "UINT32": "UINT32", "UINT64": "UINT64"}
        if known.get(plain) == scalar_type.name:
            return str(tensor.dtype)
        return f"{tensor.dtype} (holding {scalar_type.name.lower()} bits)"

    def _set_scalar_input(self, position: int, index: int, given) -> None:
        current = self._values[index]
        if isinstance(given, np.ndarray) and given.ndim == 0 or isinstance(given, np.generic):
            given = given.item()
        elif type(given).__module__.startswith("torch") and getattr(given, "ndim", None) == 0:
            given = given.item()
        val = self._plan.values[index].val
        ok = {S.Int: lambda g: isinstance(g, int) and not isinstance(g, bool),
              S.Double: lambda g: isinstance(g, (int, float)) and not isinstance(g, bool),
              S.Bool: lambda g: isinstance(g, bool),
              S.String: lambda g: isinstance(g, str)}.get(type(val))
        if ok is None:
            if given is None and current is None:
                return
            raise self._input_error(position, index, f"the method takes a {type(val).__name__} here, "
                                    f"which cannot be set from a {type(given).__name__}")
        if not ok(given):
            raise self._input_error(position, index, f"expected {type(val).__name__.lower()}, "
                                    f"got {type(given).__name__} {given!r}")
        self._values[index] = float(given) if isinstance(val, S.Double) else given

    def _run(self) -> None:
        for chain_index, steps in enumerate(self._chains):
            pc, count = 0, len(steps)
            try:
                if chain_index in self._straight:  # no jumps: every instruction once, in order
                    for pc, step in enumerate(self._straight[chain_index]):
                        step()
                    continue
                while pc < count:
                    jump = steps[pc][0]()
                    pc = pc + 1 if jump is None else jump
            except Exception as error:  # noqa: BLE001 - every failure leaves with its place in the program
                located, cause = self._located(error, chain_index, pc)
                raise located from cause

    def _execute_recorded(self, record, inputs: list, as_torch: bool) -> list:
        """`execute`, timing it on the PAL clock into `record`: copying the inputs in, every instruction
        (keeping its outputs when the record has a debug buffer), copying the outputs out, and the
        whole call (`Method::execute`), so the rows add up to the latency a caller measures. A separate
        path, so that a program loaded without `enable_etdump` pays nothing for it."""
        from etc.runtime.run_record import (EXECUTE_EVENT, INPUTS_EVENT, INPUTS_EVENT_INDEX, OUTPUTS_EVENT,
                                            OUTPUTS_EVENT_INDEX, DelegateEvents)

        clock = log.get_pal().clock
        add, capture = record.add, record.captures_outputs
        name, run = self.name, record.begin_run(self.name)
        started = clock()
        self._set_inputs(inputs)
        add(INPUTS_EVENT, name, run, -1, INPUTS_EVENT_INDEX, started, clock())
        for chain_index, steps in enumerate(self._chains):
            pc, count = 0, len(steps)
            while pc < count:
                step, label = steps[pc][0], steps[pc][1]
                regions = DelegateEvents() if (chain_index, pc) in self._delegate_steps else None
                start = clock()
                try:
                    jump = step(regions) if regions is not None else step()
                except Exception as error:  # noqa: BLE001 - as in _run
                    located, cause = self._located(error, chain_index, pc)
                    raise located from cause
                add(label, name, run, chain_index, pc, start, clock())
                if regions is not None and regions.regions:
                    record.add_delegate_events(name, run, chain_index, pc, start, regions)
                if capture:
                    record.keep_outputs(name, run, chain_index, pc, [
                        (i, self._values[i].array) for i in self._step_writes[(chain_index, pc)]])
                pc = pc + 1 if jump is None else jump
        copying = clock()
        outputs = [self._output(index, as_torch) for index in self._outputs]
        end = clock()
        add(OUTPUTS_EVENT, name, run, -1, OUTPUTS_EVENT_INDEX, copying, end)
        add(EXECUTE_EVENT, name, run, -1, -1, started, end)
        return outputs

    def _located(self, error: Exception, chain_index: int, pc: int):
        """(the ExecutionError to raise for `error` at instruction pc, the exception it comes from)."""
        _, label, value, params = self._chains[chain_index][pc]
        where = f" (chain {chain_index})" if chain_index else ""
        cause = error
        if (isinstance(error, ExecutionError) and error.operator in (None, label)
                and error.__cause__ is not None and not isinstance(error.__cause__, EtcError)):
            cause = error.__cause__  # the registry wrapped a kernel's own exception: report that one
        if cause is error and isinstance(error, ExecutionError):
            message = error.message.replace(f" [operator {label}]", "")
            cls = type(error)
            value = error.value if error.value is not None else value
        else:
            message = f"{type(cause).__name__}: {cause}"
            cls = ExecutionError
        notes = list(getattr(error, "notes", []) or [])
        described = [f"value {i}: {self._describe(i)}" for i in params]
        if described:
            notes.append("arguments: " + "; ".join(described))
        location = None
        frame = self._user_frame(chain_index, pc)
        if frame is not None:  # the program kept the stack trace: point at the user's line
            location = f"{frame.filename}:{frame.lineno}"
            if frame.context:
                notes.insert(0, f"in {frame.name or '?'}: {frame.context.strip()}")
        return cls(f"{label} failed{where}: {message}", method=self.name, instruction=pc, operator=label,
                   value=value, notes=notes, location=location), cause

    def _user_frame(self, chain_index: int, pc: int):
        """The instruction's innermost frame of user code (`Chain.stacktrace`), if the program kept one.

        Frames inside installed packages (torch.nn's modules) are skipped: the user's
        own line that called them is the one worth pointing at.
        """
        chain = self._plan.chains[chain_index]
        traces = chain.stacktrace or []
        if pc >= len(traces) or traces[pc] is None or not traces[pc].items:
            return None
        frames = [f for f in traces[pc].items if f.filename]
        mine = [f for f in frames if not _is_library_file(f.filename)]
        return (mine or frames or [None])[-1]

    def _describe(self, index: int) -> str:
        value = self._values[index]
        if isinstance(value, _Tensor):
            return value.describe()
        if isinstance(value, S.IntList):
            return f"int list {self._reader(index)()}"
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            return f"tensor list of {len(value.items or [])}"
        return f"{type(value).__name__} {value!r}"


def _is_library_file(filename: str) -> bool:
    path = filename.replace("\\", "/")
    return "/site-packages/" in path or "/dist-packages/" in path or "/lib/python3" in path


def _as_array(value) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        try:  # a CPU tensor without grad, of a dtype numpy has: its memory, directly
            return value.numpy()
        except (RuntimeError, TypeError):
            pass
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch

            return tensor.view(torch.int16).numpy().view(np.uint16)
        return tensor.numpy()
    if isinstance(value, (int, float, bool, list, tuple, np.generic)):
        return np.asarray(value)
    return None
