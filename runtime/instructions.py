"""A loaded method's instructions as closures, and the interpreter running them.

Each instruction of each chain becomes, once at load, a closure over the values it touches
(`InstructionCompiler._compile`): a kernel call reads its arguments and stores what the kernel
returns into its out value, a delegate call hands the backend its arguments, a move aliases, a
jump returns its target. `_run` runs the closures; `_execute_recorded` runs them timed into a run
record. A failure leaves with its place in the program (`_located`: the instruction, the operator,
its arguments and the user's source line when the program kept its stack traces).
"""

from __future__ import annotations

import numpy as np

from etc.errors import EtcError, ExecutionError
from etc.runtime import log
from etc.runtime.tensor_value import TensorValue
from etc.schema import program as S

__all__ = ["InstructionCompiler", "is_library_file"]


class InstructionCompiler:
    """The part of `Method` that compiles instructions into closures and runs them (a mixin: it reads
    the values, kernels and delegates `Method.__init__` loaded)."""

    def _reader(self, index: int, write: bool = False):
        """A function giving EValue `index` as kernels take it (outs at their full capacity)."""
        value = self._values[index]
        if isinstance(value, TensorValue):
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
        if isinstance(value, TensorValue):
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
            if not isinstance(value, TensorValue) or value.constant or self._plan.values[i].val.is_state:
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
                i for i in written if isinstance(self._values[i], TensorValue) and not self._values[i].constant)
            steps.append(step)
        return steps

    def _tensors_of(self, index: int) -> set:
        """The tensor values behind EValue `index` (itself, or a tensor list's items)."""
        value = self._values[index]
        if isinstance(value, TensorValue):
            return {index}
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            return {i for i in value.items or [] if i >= 0 and isinstance(self._values[i], TensorValue)}
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
            tensors = [self._values[i] if isinstance(self._values[i], TensorValue) else None for i in args]
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
                if isinstance(value, TensorValue):
                    target = values[destination]
                    if isinstance(target, TensorValue):
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
            if isinstance(value, TensorValue):
                rest.append(value.array.shape if value.array is not None else None)
                if not value.planned and not value.constant and value.storage is not None:
                    rest.append(zlib.crc32(value.storage))
            elif value is None or isinstance(value, (bool, int, float, str)):
                rest.append(value)
            elif isinstance(value, list):
                rest.append(tuple(value))
        return arenas, tuple(rest)

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
        mine = [f for f in frames if not is_library_file(f.filename)]
        return (mine or frames or [None])[-1]

    def _describe(self, index: int) -> str:
        value = self._values[index]
        if isinstance(value, TensorValue):
            return value.describe()
        if isinstance(value, S.IntList):
            return f"int list {self._reader(index)()}"
        if isinstance(value, (S.TensorList, S.OptionalTensorList)):
            return f"tensor list of {len(value.items or [])}"
        return f"{type(value).__name__} {value!r}"


def is_library_file(filename: str) -> bool:
    path = filename.replace("\\", "/")
    return "/site-packages/" in path or "/dist-packages/" in path or "/lib/python3" in path
