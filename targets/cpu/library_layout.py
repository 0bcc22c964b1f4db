"""A native library's memory: the weights (one symbol per distinct constant, shared by methods), the
arena (each method's mutable buffers at fixed offsets, then one call's scratch), and, per method,
where each argument of the compiled code comes from (`MethodBuild`). Also the constants the header
and the entry wrappers share (alignment, error codes, C types) and the target predicates."""

from __future__ import annotations

import numpy as np

from etc.errors import LoweringError
from etc.ir.dtypes import DTYPES, scalar_type_of
from etc.targets.cpu.isa import CpuTarget

ARENA_ALIGN = 64  # the code places its scratch buffers at 64-byte offsets (plan-scratch), weights too
WEIGHTS_ALIGN = 64

# Error codes of the entries (NAME_ERROR_<name>); 0 is NAME_OK.
ERRORS = {"NULL": (1, "a NULL inputs/outputs/dims/arena pointer"),
          "ALIGNMENT": (2, "the arena not NAME_ARENA_ALIGN-aligned, or a tensor not aligned to its element"),
          "DIMS": (3, "a dynamic size outside its Dim's range, or disagreeing with another input's"),
          "OVERLAP": (4, "an output overlapping an input, another output or the arena")}

# A buffer's storage dtype (the numpy name argument specs carry) -> (ExecuTorch ScalarType code, C
# type, torch dtype name), from the one dtype table: "uint16" buffers are bfloat16 (ScalarType 15).
C_DTYPES = {row.numpy: (scalar_type_of(row.torch_name), row.c_type, row.torch_name) for row in DTYPES}


def is_elf(target: CpuTarget) -> bool:
    return not any(os_name in target.triple for os_name in ("darwin", "macos", "ios", "windows", "wasm"))


def is_arm32(target: CpuTarget) -> bool:
    return target.arch.startswith(("thumb", "arm")) and not target.arch.startswith("arm64")


def bare_metal(target: CpuTarget) -> bool:
    parts = target.triple.split("-")
    return len(parts) >= 3 and parts[2] == "none"


class ArenaLayout:
    """The weights (one symbol per distinct constant, shared by methods) and the arena: each method's
    mutable buffers at fixed offsets first, then the scratch of one call."""

    def __init__(self, name: str, plans: list):
        self.weights: list[bytes] = []  # symbol k -> bytes
        self._by_bytes: dict[bytes, int] = {}
        self.state: dict = {}  # (method, symbol) -> (offset, nbytes, initial symbol or None (zeros))
        offset = 0
        for plan in plans:
            for buffer in plan.state:
                nbytes = int(buffer.initial.nbytes)
                initial = np.ascontiguousarray(buffer.initial)
                init = None if not initial.any() else self.weight(initial.tobytes())
                self.state[(plan.name, buffer.symbol)] = (offset, nbytes, init)
                offset = align(offset + nbytes, ARENA_ALIGN)
        self.state_bytes = offset
        self.arena_bytes = offset  # grown by each method's scratch

    def weight(self, data: bytes) -> int:
        k = self._by_bytes.get(data)
        if k is None:
            k = self._by_bytes[data] = len(self.weights)
            self.weights.append(data)
        return k


def bound(dim) -> int:
    """A dimension's size, or a dynamic one's upper bound."""
    return int(dim.hi) if hasattr(dim, "hi") else int(dim)


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class MethodBuild:
    """One method's entry: where each of the code's arguments comes from."""

    def __init__(self, name: str, plan, layout: ArenaLayout):
        self.plan, self.native = plan, plan.native
        self.symbol = f"{name}_{plan.name}"
        self.code_symbol = f"{name}_{plan.name}_code"
        native = self.native
        for i, spec in enumerate(plan.inputs):  # a dynamic input's bound: the smaller of its Dim's and the code's
            operand = [j for j, (kind, index) in enumerate(plan.operands) if kind == "input" and index == i]
            arg = next((a for a in native.args if a.kind == "input" and int(a.name) in operand), None)
            for d in spec.dynamic:
                dim = spec.dims[d]
                bound = arg.shape[d] if arg is not None else dim.hi if dim.hi >= 0 else 2**31 - 1
                hi = bound if dim.hi < 0 else min(dim.hi, bound)
                spec.dims[d] = type(dim)(dim.expr, max(dim.lo, 0), hi, dim.name)
        # Inputs: the code's dynamic dims are the method inputs' (in the order of the code's input arguments).
        self.input_dims = [(i, d) for i, spec in enumerate(plan.inputs) for d in spec.dynamic]
        self.output_dims = []  # (output position, dim)
        out_args = {int(a.name): a for a in native.args if a.kind == "output"}
        for p, (kind, k) in enumerate(plan.outputs):
            dynamic = plan.inputs[k].dynamic if kind == "input" else list(out_args[k].dynamic)
            static = [d for d, size in enumerate(plan.output_specs[p].dims) if size is None]
            if kind == "result" and sorted(static) != sorted(dynamic):
                raise LoweringError(f"to_library: method '{plan.name}' output {p}: the code gives dims {dynamic} at "
                                    f"run time, the program {static}")
            self.output_dims += [(p, d) for d in dynamic]
            # The output's upper-bound shape: the code's buffer's, or the (bounded) input's it returns.
            plan.output_specs[p].dims = list(out_args[k].shape) if kind == "result" else list(plan.inputs[k].dims)
        # The arena: state (the layout's), then scratch, then temporaries for state written by copy.
        offset = layout.state_bytes
        self.scratch_offset = offset
        offset = align(offset + native.scratch_bytes, ARENA_ALIGN)
        self.temps = {}  # result k -> arena offset of a temporary
        results_returned = {k for kind, k in plan.outputs if kind == "result"}
        for buffer in plan.state:
            if buffer.result is not None and not buffer.in_place:
                self.temps[buffer.result] = offset
                offset = align(offset + int(buffer.initial.nbytes), ARENA_ALIGN)
        for a in native.args:  # a result nobody reads still needs a buffer
            if a.kind == "output" and int(a.name) not in results_returned and int(a.name) not in self.temps and \
                    not any(b.result == int(a.name) and b.in_place for b in plan.state):
                self.temps[int(a.name)] = offset
                offset = align(offset + a.nbytes, ARENA_ALIGN)
        self.arena_end = offset
        layout.arena_bytes = max(layout.arena_bytes, offset)
        self.constants = {a.name: layout.weight(self._constant_bytes(a)) for a in native.args if a.kind == "constant"}
        self.operand_constants = {j: layout.weight(np.ascontiguousarray(plan.constants[symbol]).tobytes())
                                  for j, (kind, symbol) in enumerate(plan.operands) if kind == "constant"}
        self.state_offsets = {b.symbol: layout.state[(plan.name, b.symbol)][0] for b in plan.state}

    def interface(self) -> dict:
        """The entry's tensors as the header declares them (for tools and harnesses)."""
        def tensor(spec, dynamic):
            out = {"name": spec.name, "dtype": spec.dtype, "shape": [bound(d) for d in spec.dims], "dynamic": dynamic}
            if dynamic and any(spec is s for s in self.plan.inputs):  # the smallest size each dim takes
                out["min"] = [d.lo if hasattr(d, "lo") else int(d) for d in spec.dims]
            return out

        return {"inputs": [tensor(s, s.dynamic) for s in self.plan.inputs],
                "outputs": [tensor(s, [d for q, d in self.output_dims if q == p])
                            for p, s in enumerate(self.plan.output_specs)],
                "input_dims": [list(x) for x in self.input_dims], "output_dims": [list(x) for x in self.output_dims],
                "state": [{"name": b.symbol, "offset": self.state_offsets[b.symbol], "bytes": int(b.initial.nbytes)}
                          for b in self.plan.state]}

    def _constant_bytes(self, arg) -> bytes:
        data = np.ascontiguousarray(self.native.constants[arg.name]).tobytes()
        if len(data) != arg.nbytes:
            raise LoweringError(f"to_library: constant '{arg.name}' has {len(data)} bytes, the code reads {arg.nbytes}")
        return data
