"""`ProgramIR`: an MLIR module plus what MLIR should not hold.

A program is one MLIR module (one public `func.func` per method, see
ARCHITECTURE.md "IR in MLIR") together with

- `constants`: the bytes of parameters, buffers and lifted constants, by the
  symbol name of their `ml_program.global`. They are kept out of the IR on
  purpose: a `dense<...>` attribute would copy every weight into the MLIR
  context (and into every printout), while the emitter needs them only once,
  as the program's constant segment. numpy arrays give it the bytes
  (`array.tobytes()`) without a per-element loop.
- `signatures`: per method, what the FX graph signature said (which
  placeholder was a user input, a parameter or a buffer; which buffers the
  method writes; the bounds of each dynamic dimension), for the tools and the
  runtime-facing stages that need to talk about the user's names.

The dtype table (torch dtypes, MLIR element types, numpy dtypes) is etc.ir.dtypes, the
dynamic-dimension bounds etc.ir.shapes: every stage reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import weakref

import numpy as np
from torch_mlir import ir

from etc.errors import EtcError
from etc.ir.dtypes import torch_dtype_name_of_element_type, torch_dtype_name_of_numpy

# Input kinds of `InputInfo.kind` (lower-cased torch.export InputKind names).
USER_INPUT = "user_input"
PARAMETER = "parameter"
BUFFER = "buffer"
CONSTANT_TENSOR = "constant_tensor"


@dataclass
class InputInfo:
    """One placeholder of the exported graph.

    name: the FX placeholder name (`x`, `p_fc_weight`).
    kind: USER_INPUT, PARAMETER, BUFFER or CONSTANT_TENSOR.
    target: the fully-qualified name in the module (`fc.weight`), None for user inputs.
    global_name: the `ml_program.global` symbol holding it (usually `target`;
      differs when two methods share one tensor or clash on a name).
    """

    name: str
    kind: str
    target: str | None = None
    global_name: str | None = None


@dataclass
class MethodSignature:
    """What one method takes and returns, in the user's terms.

    inputs: every placeholder in graph order (state and user inputs).
    outputs: FX names of the user outputs, in the order of the func results.
    mutated_buffers: global symbol -> FX name of the value stored into it.
    dim_bounds: per func argument, one `(min, max)` per dimension (static dims
      have min == max; an unbounded max is -1), as in `etc.dim_bounds`.
    symbols: the symbolic sizes (`s0`, ...) and their `(min, max)` ranges.
    """

    name: str
    inputs: list[InputInfo] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    mutated_buffers: dict[str, str] = field(default_factory=dict)
    dim_bounds: list[list[tuple[int, int]]] = field(default_factory=list)
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def user_inputs(self) -> list[str]:
        return [info.name for info in self.inputs if info.kind == USER_INPUT]

    @property
    def state(self) -> list[InputInfo]:
        return [info for info in self.inputs if info.kind != USER_INPUT]


_PROGRAMS: dict[int, "weakref.ref[ProgramIR]"] = {}


class ProgramIR:
    """An imported (or lowered) program: `module`, its `context`, `constants`
    (global symbol -> numpy array), `constant_dtypes` (global symbol -> torch
    dtype name, which numpy cannot always say: a bfloat16 constant is kept as
    its uint16 bit pattern) and `signatures` (method -> MethodSignature).

    `print(program_ir)` prints the module with locations.
    """

    def __init__(self, module: ir.Module, context: ir.Context, constants: dict[str, np.ndarray],
                 signatures: dict[str, MethodSignature], constant_dtypes: dict[str, str] | None = None):
        self.module = module
        self.context = context
        self.constants = constants
        self.signatures = signatures
        self.constant_dtypes = dict(constant_dtypes or {})
        for name, array in constants.items():
            if name not in self.constant_dtypes:
                self.constant_dtypes[name] = torch_dtype_name_of_numpy(array.dtype)
        _PROGRAMS[id(module)] = weakref.ref(self)

    @staticmethod
    def of(module) -> "ProgramIR | None":
        """The ProgramIR owning `module` (an ir.Module or its operation): passes
        that read or add constants (constant folding) get the constant table this way."""
        if isinstance(module, ir.Module):
            ref = _PROGRAMS.get(id(module))
            program = ref() if ref is not None else None
            return program if program is not None and program.module is module else None
        for ref in list(_PROGRAMS.values()):
            program = ref()
            if program is not None and program.module.operation == module:
                return program
        return None

    def add_constant(self, hint: str, array: np.ndarray, element: ir.Type) -> str:
        """A new private `ml_program.global` holding `array`; returns its symbol."""
        from torch_mlir.dialects import ml_program

        name, k = hint, 0
        existing = set(self.globals())
        while name in existing or name in self.constants:
            k += 1
            name = f"{hint}_{k}"
        tensor_type = ir.RankedTensorType.get(list(array.shape), element)
        with self.context, ir.Location.name(name), ir.InsertionPoint.at_block_begin(self.module.body):
            ml_program.GlobalOp(name, tensor_type, is_mutable=None,
                                value=ir.Attribute.parse(f"#ml_program.extern : {tensor_type}"),
                                sym_visibility="private")
        self.constants[name] = np.ascontiguousarray(array)
        self.constant_dtypes[name] = torch_dtype_name_of_element_type(element)
        return name

    # ------------------------------------------------------------ queries
    @property
    def methods(self) -> list[str]:
        return list(self.signatures)

    def func(self, method: str):
        """The `func.func` op of `method`."""
        for op in self.module.body.operations:
            if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == method:
                return op
        raise EtcError(f"program has no method '{method}' (methods: {', '.join(self.methods)})")

    def globals(self) -> dict[str, ir.Operation]:
        """`ml_program.global` ops by symbol name."""
        return {ir.StringAttr(op.attributes["sym_name"]).value: op
                for op in self.module.body.operations if op.operation.name == "ml_program.global"}

    def verify(self) -> None:
        """Run the MLIR verifier; raise VerificationError with MLIR's diagnostics."""
        from etc.errors import VerificationError

        try:
            self.module.operation.verify()
        except ir.MLIRError as error:
            raise VerificationError(f"invalid IR: {error}") from None

    def to_text(self, debug_info: bool = True) -> str:
        return self.module.operation.get_asm(enable_debug_info=debug_info, use_local_scope=True)

    def __str__(self) -> str:
        return self.to_text(debug_info=True)

    def __repr__(self) -> str:
        return (f"ProgramIR(methods={self.methods}, constants={len(self.constants)}, "
                f"constant_bytes={sum(a.nbytes for a in self.constants.values())})")

    # ------------------------------------------------------- construction
    @classmethod
    def merge(cls, programs: Mapping[str, "ProgramIR"]) -> "ProgramIR":
        """Combine single- or multi-method programs into one module.

        Each input's methods keep their names unless the dict key renames a
        single-method program (`{"encode": program_of_forward}`). Globals with
        the same name and the same bytes become one; a name clash with other
        bytes is an error (import the methods together with `import_program`
        to have such clashes renamed instead).
        """
        from etc.dialects import make_context

        context = make_context()
        constants: dict[str, np.ndarray] = {}
        constant_dtypes: dict[str, str] = {}
        signatures: dict[str, MethodSignature] = {}
        with context, ir.Location.unknown():
            merged = ir.Module.create()
            seen_globals: set[str] = set()
            for key, program in programs.items():
                rename = {program.methods[0]: key} if len(program.methods) == 1 else {}
                parsed = ir.Module.parse(program.to_text(debug_info=True))
                for op in list(parsed.body.operations):
                    symbol = ir.StringAttr(op.attributes["sym_name"]).value
                    if op.operation.name == "ml_program.global":
                        if symbol in seen_globals:
                            if not _same_constant(constants.get(symbol), program.constants.get(symbol)):
                                raise EtcError(f"cannot merge programs: global '{symbol}' differs between them")
                            continue
                        seen_globals.add(symbol)
                        if symbol in program.constants:
                            constants[symbol] = program.constants[symbol]
                            constant_dtypes[symbol] = program.constant_dtypes[symbol]
                    else:
                        new_name = rename.get(symbol, symbol)
                        if new_name in signatures:
                            raise EtcError(f"cannot merge programs: method '{new_name}' defined twice")
                        op.attributes["sym_name"] = ir.StringAttr.get(new_name)
                        signature = program.signatures[symbol]
                        signatures[new_name] = MethodSignature(
                            new_name, signature.inputs, signature.outputs, signature.mutated_buffers,
                            signature.dim_bounds, signature.symbols)
                    merged.body.append(op.operation)
        return cls(merged, context, constants, signatures, constant_dtypes)


def _same_constant(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b))
