"""How a method's inputs and outputs cross the call.

`IoBinding._plan_io` decides once, at load, which inputs the instructions read where the caller
keeps them and which outputs a delegate writes into a new array each call (`Method.io_decisions`
says what was decided and why); `_set_inputs` binds or copies the inputs of one call, checking
dtype, rank, bounds and the program's Dim constraints; `_output` hands an output over.
"""

from __future__ import annotations

import numpy as np

from etc.errors import InputError
from etc.runtime.tensor_value import TensorValue
from etc.schema import program as S

__all__ = ["IoBinding", "as_array"]


class IoBinding:
    """The part of `Method` that binds inputs and hands over outputs (a mixin: it reads the values
    and the instruction accesses `Method.__init__` and `InstructionCompiler` built)."""

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
            info = self._plan.values[i].val.allocation_info if isinstance(value, TensorValue) else None
            if info is not None and not value.constant:
                offset = (int(info.memory_offset_high) << 32) | int(info.memory_offset_low)
                spans[i] = (info.memory_id, offset, offset + value.storage.nbytes)

        def sharing(i) -> list:
            if i not in spans:
                return []
            mem, lo, hi = spans[i]
            return [j for j, (m, a, b) in spans.items() if j != i and m == mem and a < hi and lo < b]

        def why_not(tensor: TensorValue) -> str | None:
            if tensor.dim_order is not None:
                return f"it is laid out in dim order {list(tensor.dim_order)}"
            if tensor.dtype.metadata:
                return "it is bfloat16 (the runtime tags those arrays)"
            return None

        moved = {call.move_from for _, _, call, _, _ in accesses if isinstance(call, S.MoveCall)}
        inputs, outputs = self._inputs, self._outputs
        for position, i in enumerate(inputs):
            tensor = values[i]
            if not isinstance(tensor, TensorValue):
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
            if not isinstance(tensor, TensorValue):
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

    def _output(self, index: int, as_torch: bool):
        value = self._values[index]
        if not isinstance(value, TensorValue):
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
                array = given if type(given) is np.ndarray else as_array(given)
                if (array is not None and array.shape == value.max_shape and array.dtype == value.dtype
                        and array.flags.c_contiguous):
                    value.array = array  # read in place: the program never writes it (`_plan_io`)
                    continue
                self._set_tensor_input(position, value, given)
            elif isinstance(value, TensorValue):
                self._set_tensor_input(position, value, given)
            else:
                self._set_scalar_input(position, index, given)
        dims = self._input_dims()
        if dims is not None:  # Dim minimums and shared Dims (the tensors know only upper bounds)
            shapes = [tuple(getattr(given, "shape", ())) if isinstance(self._values[index], TensorValue) else None
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

    def _set_tensor_input(self, position: int, tensor: TensorValue, given) -> None:
        array = as_array(given)
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

    def _dtype_name(self, tensor: TensorValue) -> str:
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


def as_array(value) -> np.ndarray | None:
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
