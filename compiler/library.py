"""`EdgeProgram.to_library`: what each method is as a C function, independent of the target.

A native library is the IREE static-library / TVM AOT design: one C-callable function per
method over memory the caller owns, nothing interpreted on the device. That is possible when a
method is ONE delegate call that does all of its work; this module checks it and describes each
method's interface (`MethodPlan`): its user inputs (with their `torch.export.Dim` ranges), what
each output is (a delegate result, or an input returned as it is), and the mutable buffers the
method reads and writes (state the caller keeps between calls). The backend that compiled the
delegate turns the plans into the library (`BackendDetails.emit_library`; the cpu target's is
`targets/cpu/library.py`).

A method that is anything else (ops left on portable kernels, several partitions, control flow
outside the delegate) is refused with each such op and its source line, never emitted half-done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from etc.errors import LoweringError
from etc.ir.ops import as_operation, nested_ops


@dataclass(frozen=True)
class DynamicDim:
    """A dimension given at run time: `expr` as torch.export knows it ("s0", "2*s0"), its range
    (`hi` -1: unbounded) and the user's name for it (the Dim's name)."""

    expr: str
    lo: int
    hi: int
    name: str


@dataclass
class TensorSpec:
    """An input or output of a method as the C interface sees it."""

    name: str  # the user's name (an input's placeholder) or output<i>
    dtype: str  # numpy dtype name
    dims: list  # per dimension: an int, or a DynamicDim

    @property
    def dynamic(self) -> list[int]:
        return [d for d, size in enumerate(self.dims) if isinstance(size, DynamicDim)]


@dataclass
class StateBuffer:
    """A mutable buffer the method reads (delegate operand `operand`) and writes (delegate result
    `result`, None when it only reads it): caller-owned memory that lives across calls."""

    symbol: str
    dtype: str
    shape: tuple
    initial: np.ndarray
    operand: int | None
    result: int | None
    in_place: bool = False  # the delegate computes the new value in the buffer itself


@dataclass
class MethodPlan:
    name: str
    inputs: list  # TensorSpec per user input, in order
    outputs: list  # per returned value: ("result", k) or ("input", i)
    output_specs: list  # TensorSpec per returned value
    operands: list  # per delegate operand j: ("input", i) | ("state", symbol) | ("constant", symbol)
    state: list  # StateBuffer
    native: object  # the backend's compiled delegate (PreprocessResult.native)
    backend_id: str
    location: str | None = None  # the delegate call's source position, for messages
    constants: dict = field(default_factory=dict)  # symbol -> array, of the ("constant", symbol) operands


def plan_library(edge_program) -> tuple[list, object]:
    """(one MethodPlan per method, the BackendDetails that emits them), or a LoweringError naming
    every method that is not one delegate call and the ops that keep it from being one."""
    from torch_mlir import ir

    from etc.compiler.delegation import BACKENDS, public_functions

    program_ir = edge_program.program_ir
    reasons = {}
    for report in edge_program.delegation_reports:
        reasons.update(report.reasons)
    problems, plans = [], []
    with program_ir.context:
        records = _input_dims(edge_program)
        for func in public_functions(program_ir.module):
            name = ir.StringAttr(func.attributes["sym_name"]).value
            plan, why = _plan_method(name, func, program_ir, reasons, records.get(name))
            if why:
                problems.append(why)
            else:
                plans.append(plan)
    if problems:
        raise LoweringError("to_library: every method must be one delegate call that does all its work (the "
                            "IREE/TVM static library design: nothing is interpreted on the device)\n"
                            + "\n".join(problems))
    backends = {plan.backend_id for plan in plans}
    if len(backends) != 1:
        raise LoweringError(f"to_library: the methods are delegated to {', '.join(sorted(backends))}; "
                            "one library comes from one backend")
    backend = BACKENDS[backends.pop()]
    return plans, backend


def _plan_method(name: str, func, program_ir, reasons: dict, dims_record) -> tuple:
    """(MethodPlan, None) or (None, the lines saying why `name` cannot be a library function)."""
    from torch_mlir import ir

    from etc.compiler.delegation import SIZE_OPS
    from etc.ir.locations import format_location
    from etc.passes.in_place_state import in_place_symbols

    body = [op.operation for op in func.regions[0].blocks[0].operations]
    ret = body[-1]
    ops = body[:-1]
    calls = [op for op in ops if op.name == "backend.delegate"]
    glue = {"ml_program.global_load", "ml_program.global_store", "ml_program.global_load_const"}
    others = [op for op in ops if op.name != "backend.delegate" and op.name not in glue
              and not (op.name in SIZE_OPS and _only_sizes_use(op))]
    if len(calls) != 1 or others:
        if not calls:
            what = "no delegate call (call to_backend(CpuPartitioner(...)) first; see delegation_info())"
        else:
            what = " and ".join(([f"{len(calls)} delegate calls (partitions)"] if len(calls) > 1 else []) +
                                ([f"{len(others)} op(s) outside its delegate"] if others else []))
        lines = [f"method '{name}': {what}"]
        for op in others:
            where = format_location(op.location) or "unknown location"
            why = reasons.get(op.name)
            lines.append(f"  {where}: {op.name} runs outside the delegate" + (f" ({why})" if why else ""))
            for inner in [inner for inner in nested_ops(op) if inner.name.startswith("edge.")]:
                where = format_location(inner.location) or "unknown location"
                lines.append(f"  {where}: {inner.name} (inside {op.name})")
        for call in calls if len(calls) > 1 else []:
            where = format_location(call.location) or "unknown location"
            lines.append(f"  {where}: delegate call {ir.FlatSymbolRefAttr(call.attributes['callee']).value}")
        return None, "\n".join(lines)
    (call,) = calls
    backend_id = ir.StringAttr(call.attributes["backend_id"]).value
    index = ir.IntegerAttr(call.attributes["etc.blob_index"]).value
    natives = getattr(program_ir, "delegate_native", [])
    native = natives[index] if index < len(natives) else None
    if native is None:
        return None, f"method '{name}': its {backend_id} delegate was compiled without native code for a library"
    args = list(func.regions[0].blocks[0].arguments)
    signature = program_ir.signatures[name]
    user_names = signature.user_inputs
    inputs = []
    for i, arg in enumerate(args):
        t = ir.RankedTensorType(arg.type)
        record = dims_record[i] if dims_record and i < len(dims_record) else None
        dims = []
        for d in range(t.rank):
            if t.is_dynamic_dim(d):
                if record is None or not isinstance(record[d], list):
                    return None, f"method '{name}': input {i} dimension {d} is dynamic without a Dim range"
                expr, lo, hi, dim_name = record[d]
                dims.append(DynamicDim(expr, lo, hi, dim_name))
            else:
                dims.append(t.shape[d])
        inputs.append(TensorSpec(user_names[i] if i < len(user_names) else f"input{i}", _numpy_name(t.element_type),
                                 dims))
    # What each delegate operand is.
    operands, state, loads = [], {}, {}
    for j, value in enumerate(call.operands):
        owner = value.owner
        if isinstance(owner, ir.Block):
            operands.append(("input", value.arg_number))
            continue
        producer = as_operation(owner)
        symbol = ir.FlatSymbolRefAttr(producer.attributes["global"]).value
        if producer.name == "ml_program.global_load_const":
            operands.append(("constant", symbol))
            continue
        operands.append(("state", symbol))
        loads[symbol] = j
    stores = {}
    for op in ops:
        if op.name == "ml_program.global_store":
            symbol = ir.FlatSymbolRefAttr(op.attributes["global"]).value
            owner = op.operands[0].owner
            producer = as_operation(owner)
            if producer != call:
                return None, (f"method '{name}': {format_location(op.location) or 'unknown location'}: buffer "
                              f"'{symbol}' is written with a value computed outside the delegate")
            stores[symbol] = ir.OpResult(op.operands[0]).result_number
    in_place = {symbol for symbol in in_place_symbols(call) if symbol}
    for symbol in list(loads) + [s for s in stores if s not in loads]:
        initial = program_ir.constants.get(symbol)
        if initial is None:
            return None, f"method '{name}': buffer '{symbol}' has no initial value"
        initial = np.asarray(initial)
        state[symbol] = StateBuffer(symbol, initial.dtype.name, tuple(initial.shape), initial, loads.get(symbol),
                                    stores.get(symbol), symbol in in_place)
    # What each returned value is.
    outputs, output_specs = [], []
    for p, value in enumerate(ret.operands):
        owner = value.owner
        t = ir.RankedTensorType(value.type)
        if isinstance(owner, ir.Block):
            outputs.append(("input", value.arg_number))
            output_specs.append(TensorSpec(f"output{p}", inputs[value.arg_number].dtype,
                                           list(inputs[value.arg_number].dims)))
            continue
        producer = as_operation(owner)
        if producer != call:
            return None, (f"method '{name}': output {p} is computed outside the delegate "
                          f"({producer.name} at {format_location(producer.location) or 'unknown location'})")
        outputs.append(("result", ir.OpResult(value).result_number))
        output_specs.append(TensorSpec(f"output{p}", _numpy_name(t.element_type),
                                       [t.shape[d] if not t.is_dynamic_dim(d) else None for d in range(t.rank)]))
    constants = {symbol: np.asarray(program_ir.constants[symbol]) for kind, symbol in operands if kind == "constant"}
    return MethodPlan(name, inputs, outputs, output_specs, operands, list(state.values()), native, backend_id,
                      format_location(call.location), constants), None


def _only_sizes_use(op) -> bool:
    """A size computation left behind by outlining: nothing but other size ops reads it."""
    from etc.compiler.delegation import SIZE_OPS

    for result in op.results:
        for use in result.uses:
            owner = use.owner
            owner = as_operation(owner)
            if owner.name not in SIZE_OPS:
                return False
    return True


def _numpy_name(element_type) -> str:
    from etc.ir.dtypes import numpy_dtype, torch_dtype_name_of_element_type

    return numpy_dtype(torch_dtype_name_of_element_type(element_type)).name


def _input_dims(edge_program) -> dict:
    """method -> the per-input dims record of schema/input_dims.py (Dim ranges and shared symbols)."""
    from etc.schema import input_dims

    records = input_dims.records_of(edge_program.exported_programs or {})
    out = {}
    for key, value in records.items():
        out[key[len(input_dims.KEY_PREFIX):]] = json.loads(value.decode())
    return out
