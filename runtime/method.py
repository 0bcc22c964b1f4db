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
- how each input and output crosses the call (`method_io.py`, `Method.io_decisions`):
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

import numpy as np

from etc.errors import BackendError, EtcError, KernelNotFoundError, ProgramError
from etc.runtime import log
from etc.runtime.backends import get_backend
from etc.runtime.instructions import InstructionCompiler
from etc.runtime.memory import MemoryManager
from etc.runtime.method_io import IoBinding
from etc.runtime.method_meta import MethodMeta, TensorInfo, method_meta, operator_name
from etc.runtime.tensor_value import TensorValue
from etc.schema import program as S
from etc.schema import to_numpy_dtype

__all__ = ["Method", "MethodMeta", "TensorInfo", "method_meta", "operator_name"]

# Loading (values, kernels, delegates) is here; compiling and running the instructions is
# `instructions.py`, binding inputs and outputs `method_io.py`, the metadata `method_meta.py`.

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


class Method(IoBinding, InstructionCompiler):
    """A method ready to run: `execute(inputs) -> outputs`. See the module docstring."""

    def __init__(self, pte: S.PteFile, plan: S.ExecutionPlan, *, kernels=None, run_record=None,
                 data_map: dict | None = None):
        self.name = plan.name
        self._pte = pte
        self._data_map = data_map or {}  # key -> flat_tensor.DataEntry, from load_program(data_path=...)
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
        constants = sum(v.storage.nbytes for v in self._values if isinstance(v, TensorValue) and v.constant)
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

    def _make_tensor(self, index: int, tensor: S.Tensor) -> TensorValue:
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
            data = self._external_data(index, extra.fully_qualified_name, nbytes, tensor)
            return TensorValue(index, dtype, shape, dim_order, dynamic, data, planned=True, constant=True)
        info = tensor.allocation_info
        if info is not None:
            offset = (int(info.memory_offset_high) << 32) | int(info.memory_offset_low)
            storage = self._memory.view(info.memory_id, offset, nbytes, where=f"method '{self.name}' value {index}")
            if tensor.data_buffer_idx > 0:
                # A mutable buffer with an initial state: copied in once, then it lives in the arena
                # (state persists from one execute to the next).
                initial = np.frombuffer(self._pte.mutable_initial_state(tensor), dtype=np.uint8)
                storage[:min(nbytes, initial.size)] = initial[:nbytes]
            return TensorValue(index, dtype, shape, dim_order, dynamic, storage, planned=True, constant=False)
        if tensor.data_buffer_idx > 0:
            data = np.frombuffer(self._constant_bytes(tensor.data_buffer_idx), dtype=np.uint8, count=nbytes)
            return TensorValue(index, dtype, shape, dim_order, dynamic, data, planned=True, constant=True)
        # Not planned (an input the planner left to the caller, a view's output, ...): storage of our
        # own, sized for the upper bound and allocated once, for when it is written or set as an input.
        made = TensorValue(index, dtype, shape, dim_order, dynamic, self._memory.private(nbytes),
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

    def _external_data(self, index: int, fqn: str, nbytes: int, tensor: S.Tensor) -> np.ndarray:
        """A constant kept outside the program: by name in the data files given to load_program
        (`data_path`, checked against the layout they record), else in the program's named data."""
        where = f"method '{self.name}' value {index}"
        entry = self._data_map.get(fqn)
        if entry is not None:
            data, layout = entry.data, entry.layout
            if layout is not None:
                sizes = [int(s) for s in layout.sizes or []]
                if int(layout.scalar_type) != int(tensor.scalar_type) or sizes != [int(s) for s in tensor.sizes or []]:
                    raise ProgramError(
                        f"{where}: external tensor '{fqn}' is {S.ScalarType(tensor.scalar_type).name}"
                        f"{list(tensor.sizes or [])} in the program but "
                        f"{S.ScalarType(layout.scalar_type).name}{sizes} in the data file: a .ptd of another "
                        "model or version")
        else:
            data = self._pte.named_data.get(fqn)
        if data is None:
            raise ProgramError(f"{where}: tensor '{fqn}' lives in external data (a .ptd file), and no data file "
                               "holds it: give load_program(..., data_path='<the .ptd>')")
        if len(data) < nbytes:
            raise ProgramError(f"{where}: external data '{fqn}' has {len(data)} bytes, the tensor needs {nbytes}")
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
                notes = list(getattr(error, "notes", []))
                if name.split("::", 1)[0] not in ("aten", "executorch_prim", "quantized_decomposed", "torchao") \
                        and kernels is None:
                    notes.append(f"'{name}' is a custom operator: give etc's runtime its kernel with "
                                 f"etc.runtime.register_kernel('{name}', fn), fn a numpy function of the "
                                 "schema's arguments (out= last) returning the out tensor")
                missing.append((op_index, name, notes))
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
