"""Numeric debugging: a program's intermediate outputs against eager PyTorch, op by op.

    edge = etc.to_edge(exported_program)
    program = edge.to_executorch(generate_etrecord=True)
    report = numeric_debug(edge, program, inputs)
    print(report)                      # every compared instruction: op, source line, error against eager
    report.first_divergence()          # the first one beyond tolerance: where to look

The program runs once on etc's runtime with its run record capturing every
instruction's outputs; eager runs the same decomposed graph `to_edge` imported
(so FX node names match) under `torch.fx.Interpreter`, keeping every node's value.
The compile record says which node each output tensor is, so the two are paired
by name. A delegated partition is compared at its outputs (what happens inside
native code is not observable yet), and its row names every op inside it and
their lines. Errors propagate: the first instruction beyond tolerance, in program
order, is the one to look at, not the largest error.

Error: max |program - eager| / max(1, max |eager|), so that tiny values do not
make relative error meaningless and large ones do not hide real differences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etc.errors import EtcError

__all__ = ["numeric_debug", "NumericReport", "NumericRow"]


@dataclass
class NumericRow:
    instruction: int
    name: str  # kernel or delegate label
    node: str  # the FX node whose value was compared
    ops: list  # [(edge op, file:line)] of the instruction (every op inside a delegate)
    error: float | None  # scaled max abs error; None when the values could not be compared
    note: str = ""

    @property
    def source(self) -> str | None:
        return next((source for _, source in self.ops if source), None)


@dataclass
class NumericReport:
    method: str
    rows: list = field(default_factory=list)
    tolerance: float = 1e-4

    def first_divergence(self, tolerance: float | None = None) -> NumericRow | None:
        """The first compared instruction whose error exceeds `tolerance` (or that could not be compared
        because its shape differs), in program order; None if all agree."""
        limit = self.tolerance if tolerance is None else tolerance
        for row in self.rows:
            if row.error is None or row.error > limit:
                return row
        return None

    def __str__(self) -> str:
        lines = [f"method '{self.method}': {len(self.rows)} instruction output(s) compared with eager "
                 f"(tolerance {self.tolerance:g})"]
        for row in self.rows:
            error = "   -    " if row.error is None else f"{row.error:.2e}"
            flag = "  <-- diverges" if row is self.first_divergence() else ""
            lines.append(f"  {row.instruction:4d} {error} {row.name:28s} {row.node:32s} {row.source or ''}{flag}"
                         f"{'  (' + row.note + ')' if row.note else ''}")
        first = self.first_divergence()
        lines.append("all outputs agree with eager" if first is None else
                     f"first divergence: instruction {first.instruction} ({first.name}, node {first.node}) at "
                     f"{first.source or 'an unknown line'}")
        return "\n".join(lines)


def _eager_values(edge_program, method: str, inputs) -> dict:
    """FX node name -> value, running the decomposed graph to_edge imported."""
    from etc.compiler.program import decompose

    exported = edge_program.exported_programs.get(method)
    if exported is None:
        raise EtcError(f"the edge program has no method '{method}'")
    decomposed = decompose({method: exported}, edge_program.config)[method]
    return node_values(decomposed.module(), inputs)


def node_values(graph_module, inputs) -> dict:
    """{node name: value} of every call in `graph_module` run eagerly on `inputs` (no grad)."""
    import torch

    values: dict = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node.op == "call_function":
                values[node.name] = result
            return result

    with torch.no_grad():
        Capture(graph_module).run(*inputs)
    return values


def _as_numpy(value):
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _error(actual: np.ndarray, expected: np.ndarray) -> tuple[float | None, str]:
    from etc.runtime.kernels.common import bfloat16_to_float32, is_bfloat16

    if is_bfloat16(actual):  # the runtime keeps bfloat16 as its bits
        actual = bfloat16_to_float32(actual)
    if actual.shape != expected.shape:
        return None, f"shape {list(actual.shape)}, eager {list(expected.shape)}"
    if actual.size == 0:
        return 0.0, ""
    a, b = actual.astype(np.float64), expected.astype(np.float64)
    nan_mismatch = np.isnan(a) != np.isnan(b)
    if nan_mismatch.any():
        return float("inf"), "NaN where eager has none (or the reverse)"
    finite = ~np.isnan(a)
    if not finite.any():
        return 0.0, ""
    scale = max(1.0, float(np.abs(b[finite]).max()))
    return float(np.abs(a[finite] - b[finite]).max()) / scale, ""


def numeric_debug(edge_program, executorch_program, inputs, *, method: str = "forward",
                  tolerance: float = 1e-4, run_record=None, etrecord=None) -> NumericReport:
    """Compare every instruction's outputs of `executorch_program` (built by `edge_program.to_executorch(
    generate_etrecord=True)`) with eager's values for the same nodes, on `inputs` (torch tensors).

    `run_record`: intermediate outputs recorded elsewhere (a device's run record and debug buffer,
    `RunRecord.load(etdump, debug_buffer)`, its first run on these `inputs`) instead of running the
    program here; `etrecord`: the compile record when the program object does not carry it (a
    `CompileRecord` or its path; `executorch_program` may then be None)."""
    import torch

    from etc.compiler.compile_record import CompileRecord
    from etc.runtime import Runtime

    if etrecord is None:
        etrecord = executorch_program.get_etrecord()
    elif not isinstance(etrecord, CompileRecord):
        etrecord = CompileRecord.load(etrecord)
    instructions = etrecord.instructions(method)
    inputs = list(inputs)
    eager = _eager_values(edge_program, method, inputs)
    if run_record is None:
        loaded = Runtime.get().load_program(executorch_program.buffer, enable_etdump=True,
                                            debug_buffer_size=1 << 62)
        loaded.load_method(method).execute(inputs)
        run_record = loaded.run_record
    if not run_record.intermediates:
        raise EtcError("the run record holds no intermediate outputs: record with debug_buffer_size > 0")
    captured = {(chain, instruction): outputs for (m, run, chain, instruction), outputs
                in run_record.intermediates.items() if m == method and run == 0}
    report = NumericReport(method=method, tolerance=tolerance)
    for entry in instructions:
        outputs = dict(captured.get((entry.chain, entry.instruction), []))
        ops = [(op.op, f"{op.file}:{op.line}" if op.file else None) for op in entry.ops]
        for value_index, (node, result) in sorted(entry.outputs.items()):
            if value_index not in outputs or node not in eager:
                continue
            expected = eager[node]
            if isinstance(expected, (tuple, list)):
                if result >= len(expected):
                    continue
                expected = expected[result]
            if not isinstance(expected, torch.Tensor):
                continue
            error, note = _error(outputs[value_index], _as_numpy(expected))
            report.rows.append(NumericRow(entry.instruction, entry.name, node, ops, error, note))
    if not report.rows:
        raise EtcError(f"no output of method '{method}' could be paired with an eager value")
    return report
