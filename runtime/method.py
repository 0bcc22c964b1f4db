"""A loaded method: its memory, its values, and the interpreter over its instructions.

Everything that can be decided once is decided in `load_method`: the arenas
are allocated (one per mem_id, `non_const_buffer_sizes`), every tensor value
becomes a view into an arena or the constant segment, every operator is
bound to its kernel (a missing kernel fails here, not halfway through an
inference), every delegate is initialised, and each instruction becomes a
small closure. `execute` then only copies the inputs in, runs the closures
and copies the outputs out.

Values follow ExecuTorch's conventions (see ARCHITECTURE.md): IntList items
are indices of Int values (a size computed at run time updates the Int, and
every list that names it sees the new value); a KernelCall's last argument is
where the kernel's return value goes (the out tensor, a TensorList of outs,
or an Int for prim ops), the ones before it the schema arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etc.errors import BackendError, EtcError, ExecutionError, InputError, ProgramError
from etc.runtime.backends import compile_specs_dict, get_backend
from etc.runtime.memory import MemoryManager
from etc.schema import program as S
from etc.schema import to_numpy_dtype

ALIGNMENT = 64


@dataclass
class TensorInfo:
    """What a method expects of (or gives as) one tensor."""

    dtype: np.dtype
    sizes: tuple  # static sizes, or the upper bounds of a dynamic tensor
    dynamic: bool
    index: int  # EValue index

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class MethodMeta:
    """A method's interface, readable without running it."""

    name: str
    inputs: list = field(default_factory=list)  # TensorInfo or a Python type name for non-tensor inputs
    outputs: list = field(default_factory=list)
    planned_buffer_sizes: list = field(default_factory=list)  # per mem_id (1-based): bytes
    backends: list = field(default_factory=list)
    operators: list = field(default_factory=list)

    def num_inputs(self) -> int:
        return len(self.inputs)

    def num_outputs(self) -> int:
        return len(self.outputs)

    def input_tensor_meta(self, index: int) -> TensorInfo:
        return self.inputs[index]

    def output_tensor_meta(self, index: int) -> TensorInfo:
        return self.outputs[index]


class _TensorSlot:
    """One tensor value: fixed storage (a flat byte view) and a current shape."""

    __slots__ = ("storage", "dtype", "max_shape", "dynamic", "array", "writable")

    def __init__(self, storage: np.ndarray, dtype: np.dtype, shape: tuple, dynamic: bool, writable: bool):
        self.storage = storage  # uint8, exactly nbytes(max_shape) long
        self.dtype = dtype
        self.max_shape = shape
        self.dynamic = dynamic
        self.writable = writable
        self.array = storage.view(dtype).reshape(shape)

    def resize(self, shape: tuple) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        self.array = self.storage.view(self.dtype)[:count].reshape(shape)
        return self.array

    def accept(self, result) -> None:
        """Make `result` (what a kernel returned) the current value, keeping it in our storage."""
        array = np.asarray(result)
        if array.shape == self.array.shape and _same_data(array, self.array):
            return
        flat = self.storage.view(self.dtype)
        if _same_data(array, flat) and array.flags.c_contiguous:
            self.array = array
            return
        if array.size > flat.size:
            raise ExecutionError(f"a result of shape {list(array.shape)} does not fit the tensor's storage "
                                 f"(planned for at most {list(self.max_shape)})")
        target = self.resize(array.shape)
        np.copyto(target, array, casting="unsafe")


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    return a.size > 0 and b.size > 0 and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


class Method:
    """`Method.execute(inputs) -> outputs`; see the module docstring."""

    def __init__(self, pte, plan: S.ExecutionPlan, *, kernels=None):
        self.name = plan.name
        self._pte = pte
        self._plan = plan
        self._memory = MemoryManager(plan.non_const_buffer_sizes or [0], alignment=ALIGNMENT)
        self._values: list = [None] * len(plan.values or [])
        self._slots: dict[int, _TensorSlot] = {}
        self._build_values()
        self._kernels = self._bind_kernels(kernels)
        self._delegates = self._init_delegates()
        # Dynamic tensors start each run at their upper-bound shape, so that a kernel
        # writing one sees all of its storage (it re-views it to the actual shape).
        self._dynamic_slots = [slot for slot in self._slots.values() if slot.dynamic]
        self._instructions = [self._compile(i, instruction)
                              for i, instruction in enumerate(plan.chains[0].instructions or [])] \
            if plan.chains else []
        self.metadata = self._metadata()

    # ------------------------------------------------------------ loading
    def _build_values(self) -> None:
        for index, evalue in enumerate(self._plan.values or []):
            val = evalue.val
            if isinstance(val, S.Tensor):
                slot = self._tensor_slot(index, val)
                self._slots[index] = slot
                self._values[index] = slot
            elif isinstance(val, S.Int):
                self._values[index] = int(val.int_val)
            elif isinstance(val, S.Double):
                self._values[index] = float(val.double_val)
            elif isinstance(val, S.Bool):
                self._values[index] = bool(val.bool_val)
            elif isinstance(val, S.String):
                self._values[index] = val.string_val
            elif val is None or isinstance(val, S.Null):
                self._values[index] = None
            elif isinstance(val, (S.IntList, S.TensorList, S.OptionalTensorList)):
                self._values[index] = val  # resolved at call time: its items are value indices
            elif isinstance(val, S.DoubleList):
                self._values[index] = [float(v) for v in val.items or []]
            elif isinstance(val, S.BoolList):
                self._values[index] = [bool(v) for v in val.items or []]
            else:
                raise ProgramError(f"method '{self.name}': value {index} has unsupported type {type(val).__name__}")

    def _tensor_slot(self, index: int, tensor: S.Tensor) -> _TensorSlot:
        try:
            dtype = np.dtype(to_numpy_dtype(tensor.scalar_type))
        except Exception as error:  # noqa: BLE001
            raise ProgramError(f"method '{self.name}': value {index}: scalar type {tensor.scalar_type!r} has no "
                               f"numpy dtype ({error})") from None
        shape = tuple(int(s) for s in tensor.sizes or [])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        dynamic = tensor.shape_dynamism != S.TensorShapeDynamism.STATIC
        if tensor.allocation_info is not None:
            info = tensor.allocation_info
            offset = (info.memory_offset_high << 32) | info.memory_offset_low
            storage = self._memory.view(info.memory_id, offset, nbytes, where=f"method '{self.name}' value {index}")
            if tensor.data_buffer_idx > 0:  # a mutable buffer: planned, with an initial state
                storage[:] = np.frombuffer(self._pte.mutable_initial_state(tensor), dtype=np.uint8)[:nbytes]
            return _TensorSlot(storage, dtype, shape, dynamic, writable=True)
        if tensor.data_buffer_idx > 0:
            data = self._pte.constant(tensor.data_buffer_idx)
            storage = np.frombuffer(data, dtype=np.uint8, count=nbytes)
            return _TensorSlot(storage, dtype, shape, dynamic, writable=False)
        # Neither planned nor constant (an input the program did not plan): storage of our own, once.
        return _TensorSlot(self._memory.private(nbytes), dtype, shape, dynamic, writable=True)

    def _bind_kernels(self, kernels) -> list:
        import etc.runtime.kernels  # noqa: F401 - registers the portable kernels
        import etc.runtime.prim_ops  # noqa: F401 - and ExecuTorch's prim ops
        from etc.runtime.kernels.registry import get_kernel

        lookup = kernels.__getitem__ if kernels is not None else get_kernel
        bound = []
        for operator in self._plan.operators or []:
            name = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
            bound.append((name, lookup(name)))
        return bound

    def _init_delegates(self) -> list:
        delegates = []
        for i, delegate in enumerate(self._plan.delegates or []):
            backend = get_backend(delegate.id)
            blob = self._pte.delegate_blob(delegate.processed)
            try:
                handle = backend.init(blob, compile_specs_dict(delegate.compile_specs))
            except EtcError:
                raise
            except Exception as error:  # noqa: BLE001 - a backend's failure, said with its name
                raise BackendError(f"backend '{delegate.id}' failed to initialise delegate {i} of method "
                                   f"'{self.name}': {type(error).__name__}: {error}") from error
            delegates.append((delegate.id, backend, handle))
        return delegates

    # ---------------------------------------------------------- compiling
    def _getter(self, index: int):
        """A function returning the current Python value of EValue `index` as kernels take it."""
        value = self._values[index]
        if isinstance(value, _TensorSlot):
            return lambda: value.array
        if isinstance(value, S.IntList):
            items = list(value.items or [])
            values = self._values
            return lambda: [values[i] for i in items]
        if isinstance(value, S.TensorList):
            slots = [self._slots[i] for i in value.items or []]
            return lambda: [s.array for s in slots]
        if isinstance(value, S.OptionalTensorList):
            slots = [self._slots[i] if i >= 0 else None for i in value.items or []]
            return lambda: [s.array if s is not None else None for s in slots]
        values = self._values
        return lambda: values[index]

    def _setter(self, index: int):
        """Where a kernel's return value goes."""
        value = self._values[index]
        if isinstance(value, _TensorSlot):
            return value.accept
        if isinstance(value, S.TensorList):
            slots = [self._slots[i] for i in value.items or []]

            def store_list(results):
                results = list(results) if isinstance(results, (list, tuple)) else [results]
                for slot, result in zip(slots, results):
                    slot.accept(result)
            return store_list
        values = self._values

        def store_value(result):
            values[index] = result.item() if isinstance(result, np.generic) else result
        return store_value

    def _compile(self, position: int, instruction: S.Instruction):
        args = instruction.instr_args
        if isinstance(args, S.KernelCall):
            name, kernel = self._kernels[args.op_index]
            getters = [self._getter(i) for i in (args.args or [])[:-1]]
            store = self._setter(args.args[-1]) if args.args else (lambda result: None)

            def kernel_call():
                store(kernel(*[get() for get in getters]))
            return kernel_call, name
        if isinstance(args, S.DelegateCall):
            backend_id, backend, handle = self._delegates[args.delegate_index]
            getters = [self._getter(i) for i in args.args or []]
            slots = [self._slots.get(i) for i in args.args or []]

            def delegate_call():
                results = backend.execute(handle, [get() for get in getters])
                if results:
                    for slot, result in zip(slots[len(slots) - len(results):], results):
                        if slot is not None:
                            slot.accept(result)
            return delegate_call, f"delegate '{backend_id}'"
        if isinstance(args, S.MoveCall):
            get, store = self._getter(args.move_from), self._setter(args.move_to)
            return (lambda: store(get())), "move"
        if isinstance(args, S.FreeCall):
            return (lambda: None), "free"
        if isinstance(args, S.JumpFalseCall):
            return ("jump_false", self._getter(args.cond_value_index), args.destination_instruction), "jump_false"
        raise ProgramError(f"method '{self.name}': instruction {position} has unsupported kind {type(args).__name__}")

    # ---------------------------------------------------------- executing
    def execute(self, inputs) -> list:
        """Run the method on `inputs` (torch tensors or numpy arrays, one per input).

        Returns the outputs, torch tensors if the inputs were torch tensors and numpy
        arrays otherwise. They are copies: the planned memory they were computed in is
        reused by the next call, and a result the caller keeps must not change under it.
        """
        inputs = list(inputs)
        as_torch = any(type(x).__module__.startswith("torch") for x in inputs)
        for slot in self._dynamic_slots:
            slot.resize(slot.max_shape)
        self._set_inputs(inputs)
        self._run()
        outputs = []
        for index in self._plan.outputs or []:
            value = self._values[index]
            if isinstance(value, _TensorSlot):
                array = value.array.copy()
                outputs.append(_to_torch(array) if as_torch else array)
            else:
                outputs.append(value)
        return outputs

    def __call__(self, *inputs):
        outputs = self.execute(inputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def _set_inputs(self, inputs: list) -> None:
        expected = self._plan.inputs or []
        if len(inputs) != len(expected):
            raise InputError(f"method '{self.name}' takes {len(expected)} input(s), got {len(inputs)}")
        for position, (index, given) in enumerate(zip(expected, inputs)):
            value = self._values[index]
            if not isinstance(value, _TensorSlot):
                if isinstance(given, (int, float, bool)) and not isinstance(value, (list, S.IntList)):
                    self._values[index] = given
                    continue
                raise InputError(f"method '{self.name}' input {position} is a {type(value).__name__}, "
                                 f"got {type(given).__name__}")
            array = _as_numpy(given, position, self.name)
            if array.dtype != value.dtype:
                raise InputError(f"method '{self.name}' input {position}: expected dtype {value.dtype}, "
                                 f"got {array.dtype}")
            if array.ndim != len(value.max_shape):
                raise InputError(f"method '{self.name}' input {position}: expected rank {len(value.max_shape)} "
                                 f"(shape {_shape_text(value)}), got shape {list(array.shape)}")
            if array.shape != value.max_shape:
                if not value.dynamic:
                    raise InputError(f"method '{self.name}' input {position}: expected shape "
                                     f"{list(value.max_shape)}, got {list(array.shape)}")
                for dim, (size, bound) in enumerate(zip(array.shape, value.max_shape)):
                    if size > bound:
                        raise InputError(f"method '{self.name}' input {position}: dimension {dim} is {size}, "
                                         f"above its upper bound {bound} (shape at most {list(value.max_shape)})")
            target = value.resize(array.shape)
            np.copyto(target, array)

    def _run(self) -> None:
        program = self._instructions
        pc, count = 0, len(program)
        while pc < count:
            step, label = program[pc]
            try:
                if isinstance(step, tuple):  # jump_false
                    _, condition, destination = step
                    if not bool(condition()):
                        pc = destination
                        continue
                else:
                    step()
            except ExecutionError as error:
                if error.instruction is not None:
                    raise
                raise ExecutionError(error.message, method=self.name, instruction=pc, operator=label,
                                     value=error.value) from error
            except EtcError:
                raise
            except Exception as error:  # noqa: BLE001 - a kernel's failure, with where it happened
                raise ExecutionError(f"{type(error).__name__}: {error}", method=self.name, instruction=pc,
                                     operator=label) from error
            pc += 1

    # ---------------------------------------------------------- metadata
    def _info(self, index: int):
        value = self._values[index]
        if isinstance(value, _TensorSlot):
            return TensorInfo(value.dtype, value.max_shape, value.dynamic, index)
        return type(value).__name__

    def _metadata(self) -> MethodMeta:
        sizes = list(self._plan.non_const_buffer_sizes or [0])
        return MethodMeta(
            name=self.name,
            inputs=[self._info(i) for i in self._plan.inputs or []],
            outputs=[self._info(i) for i in self._plan.outputs or []],
            planned_buffer_sizes=sizes[1:],
            backends=[d.id for d in self._plan.delegates or []],
            operators=[name for name, _ in self._kernels],
        )


def _shape_text(slot: _TensorSlot) -> str:
    return str(list(slot.max_shape)) + (" at most" if slot.dynamic else "")


def _as_numpy(value, position: int, method: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except Exception:  # noqa: BLE001
        raise InputError(f"method '{method}' input {position}: cannot use a {type(value).__name__} as a tensor") \
            from None


def _to_torch(array: np.ndarray):
    import torch

    return torch.from_numpy(array)
