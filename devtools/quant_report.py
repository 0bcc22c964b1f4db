"""The quantization numerics report: per quantized op, how much accuracy it lost.

    report = quantization_report(float_model, quantized_model, inputs)
    print(report)        # one row per quantized op: op, source line, SQNR vs float, SQNR vs eager quantized
    report.worst()       # the quantized op with the lowest SQNR against the float model

    etc inspect quantized.pt2 --quant-report float.pt2       # the same, from torch.export.save files

`float_model` is the model before quantization (an nn.Module, or its ExportedProgram);
`quantized_model` is what `convert_pt2e` returned (a GraphModule), its ExportedProgram, or a
torchao-quantized module. etc compiles the quantized program for its portable runtime, runs it
once with every instruction's output captured (the run record), and compares, at each
quantized op's output:

- against the float model: the same node of the float model's graph (PT2E keeps the float
  ops' node names; ops whose name has no float counterpart show "-"): the accuracy the op's
  quantization cost, accumulated from the input: the layer where it drops is the one to look at;
- against the eager quantized model (PyTorch running the same quantized graph): whether etc
  computes what PyTorch's reference quantized kernels compute (expected: inf or > 40 dB).

A quantized op's output is the value its static quantize receives (dequantized back, as the
next op sees it) or, for dynamically quantized ops (their output is float), the op's own
result. SQNR = 10 log10(sum signal^2 / sum (signal - value)^2), in dB (inf: equal).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from etc.devtools.numeric import node_values
from etc.errors import EtcError

__all__ = ["quantization_report", "QuantizationReport", "QuantizedOpRow", "sqnr"]


def sqnr(signal, value) -> float:
    signal = np.asarray(signal, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    if signal.shape != value.shape:
        raise EtcError(f"sqnr: shapes {list(signal.shape)} and {list(value.shape)} differ")
    noise = float(np.sum((signal - value) ** 2))
    if noise == 0.0:
        return math.inf
    power = float(np.sum(signal ** 2))
    return 10 * math.log10(power / noise) if power > 0 else -math.inf


@dataclass
class QuantizedOpRow:
    node: str  # the FX node whose value is compared (the op's output, before its quantize)
    ops: str  # the float ops of the quantized operation ("convolution + relu")
    source: str | None  # the user's file:line
    sqnr_float: float | None  # etc against the float model (None: no float counterpart)
    sqnr_reference: float  # etc against the eager quantized model


@dataclass
class QuantizationReport:
    method: str
    rows: list = field(default_factory=list)

    def worst(self) -> QuantizedOpRow | None:
        """The quantized op with the lowest SQNR against the float model."""
        rows = [r for r in self.rows if r.sqnr_float is not None]
        return min(rows, key=lambda r: r.sqnr_float) if rows else None

    def __str__(self) -> str:
        def db(value):
            return "      -" if value is None else ("    inf" if math.isinf(value) and value > 0 else f"{value:7.1f}")

        lines = [f"method '{self.method}': {len(self.rows)} quantized op(s); SQNR in dB of etc's output against "
                 "the float model and against the eager quantized model",
                 f"  {'vs float':>8} {'vs eager-q':>10}  {'op':32s} {'node':28s} source"]
        for row in self.rows:
            lines.append(f"  {db(row.sqnr_float):>8} {db(row.sqnr_reference):>10}  {row.ops:32s} {row.node:28s} "
                         f"{row.source or ''}")
        worst = self.worst()
        if worst is not None:
            lines.append(f"lowest SQNR against float: {worst.ops} ({worst.node}) at {worst.source or 'an unknown line'}"
                         f", {db(worst.sqnr_float).strip()} dB")
        return "\n".join(lines)


# --------------------------------------------------------------------- graph analysis
_QD = "quantized_decomposed."
_STATIC_Q = {"quantized_decomposed.quantize_per_tensor.default"}


def _target(node) -> str:
    return str(node.target) if node.op == "call_function" else ""


def _is_quantization(node) -> bool:
    target = _target(node)
    return target.startswith(_QD) or target.startswith("torchao.")


def _is_dequantize(node) -> bool:
    return _is_quantization(node) and ".dequantize" in _target(node)


_SHAPE_OPS = {"permute", "view", "_unsafe_view", "t", "transpose", "expand", "clone", "reshape", "squeeze",
              "unsqueeze"}


def _op_name(node) -> str:
    return getattr(node.target, "_opname", None) or _target(node) if node.op == "call_function" else ""


def _reads_dequantized(node) -> bool:
    """Whether `node` reads a dequantized value, directly or through a shape op (a linear's
    permuted weight)."""
    for arg in node.all_input_nodes:
        if _is_dequantize(arg):
            return True
        if _op_name(arg) in _SHAPE_OPS and any(_is_dequantize(a) for a in arg.all_input_nodes):
            return True
    return False


def _compared_nodes(graph) -> list:
    """(node compared, float ops of the quantized operation, its static quantize or None), in
    program order. Static: the input of every quantize_per_tensor that a dequantized value
    reaches through float ops. Dynamic / weight-only: every op (not a shape op) reading a
    dequantized value that is not already part of a static row."""
    static, in_static = [], set()
    for node in graph.nodes:
        if node.op != "call_function" or _is_quantization(node):
            continue
        quantize = next((u for u in node.users if _target(u) in _STATIC_Q), None)
        chain = _chain(node) if quantize is not None else []
        if chain:
            static.append((node, chain, quantize))
            in_static.update(chain)
    rows = list(static)
    for node in graph.nodes:
        if (node.op == "call_function" and not _is_quantization(node) and node not in in_static
                and _op_name(node) not in _SHAPE_OPS and _reads_dequantized(node)):
            rows.append((node, [node], None))
    order = {n: i for i, n in enumerate(graph.nodes)}
    return sorted(rows, key=lambda row: order[row[0]])


def _chain(node) -> list:
    """The float ops from the dequantized inputs to `node` (inclusive); empty when no dequantized
    value reaches `node` through single-use float ops."""
    chain, current = [], node
    while current is not None:
        chain.append(current)
        if _reads_dequantized(current):
            return list(reversed(chain))
        inputs = [a for a in current.all_input_nodes if a.op == "call_function" and not _is_quantization(a)]
        current = inputs[0] if len(inputs) == 1 and len(inputs[0].users) == 1 else None
    return []


# ------------------------------------------------------------------------ values
def _decomposed(ep, config):
    from etc.compiler.program import decompose

    return decompose({"m": ep}, config)["m"]


def _as_float(value, quantize_node) -> np.ndarray:
    """A value as the next op sees it: an int8 quantize output dequantized with its parameters."""
    import torch

    array = value.detach().float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if quantize_node is None:
        return array.astype(np.float64)
    scale, zero_point = float(quantize_node.args[1]), int(quantize_node.args[2])
    return (array.astype(np.float64) - zero_point) * scale


def _etc_values(edge, method: str, inputs) -> dict:
    """FX node name -> etc's value of it (numpy), from one run with the run record capturing outputs."""
    from etc.runtime import Runtime

    program = edge.to_executorch(generate_etrecord=True)
    instructions = program.get_etrecord().instructions(method)
    loaded = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=1 << 62)
    loaded.load_method(method).execute(list(inputs))
    captured = {(chain, instruction): dict(outputs) for (m, run, chain, instruction), outputs
                in loaded.run_record.intermediates.items() if m == method and run == 0}
    values = {}
    for entry in instructions:
        outputs = captured.get((entry.chain, entry.instruction), {})
        for value_index, (node, result) in entry.outputs.items():
            if value_index in outputs and result == 0:
                values[node] = outputs[value_index]
    return values


def _float_program(float_model, inputs):
    """The float model as the quantizer saw it: exported, with batch norms folded into their
    convolutions as `prepare_pt2e` folds them (else a conv's output would be compared with the
    conv before its batch norm)."""
    import torch

    module = float_model.module() if isinstance(float_model, torch.export.ExportedProgram) else \
        torch.export.export(float_model, inputs).module()
    try:
        from torchao.quantization.pt2e.utils import _fuse_conv_bn_
    except ImportError:  # without torchao there is no PT2E model to compare with either
        return torch.export.export(module, inputs)
    _fuse_conv_bn_(module)
    return torch.export.export(module, inputs)


def _source(node) -> str | None:
    from etc.ir.locations import node_source_position

    position = node_source_position(node)
    return f"{position.file}:{position.line}" if position is not None else None


# -------------------------------------------------------------------------- API
def quantization_report(float_model, quantized_model, inputs, *, method: str = "forward") -> QuantizationReport:
    """Per quantized op: SQNR of etc's output against the float model and the eager quantized one."""
    import torch

    from etc.compiler.program import to_edge

    inputs = tuple(inputs)
    quantized_ep = quantized_model if isinstance(quantized_model, torch.export.ExportedProgram) else \
        torch.export.export(quantized_model, inputs)
    float_ep = _float_program(float_model, inputs)
    edge = to_edge(quantized_ep)
    decomposed = _decomposed(quantized_ep, edge.config)
    rows = _compared_nodes(decomposed.graph)
    if not rows:
        raise EtcError("quantization_report: the quantized model has no quantized op (no dequantize feeds an op); "
                       "was it converted with convert_pt2e or quantize_?")
    reference = node_values(decomposed.module(), inputs)
    floats = node_values(_decomposed(float_ep, edge.config).module(), inputs)
    ours = _etc_values(edge, method, inputs)
    report = QuantizationReport(method=method)
    for node, chain, quantize in rows:
        compared = quantize if quantize is not None else node
        if compared.name not in ours or compared.name not in reference:
            continue
        value = _as_float(ours[compared.name], quantize)
        reference_value = _as_float(reference[compared.name], quantize)
        float_value = floats.get(node.name)
        float_sqnr = None
        if float_value is not None and tuple(float_value.shape) == value.shape:
            float_sqnr = sqnr(_as_float(float_value, None), value)
        names = " + ".join(_op_name(n) for n in chain if n.target is not operator.getitem)
        report.rows.append(QuantizedOpRow(node.name, names, _source(node), float_sqnr, sqnr(reference_value, value)))
    return report


def cli(quantized_path: str, float_path: str, method: str = "forward") -> str:
    """`etc inspect QUANTIZED.pt2 --quant-report FLOAT.pt2`: both from torch.export.save; the
    inputs are the quantized program's example inputs."""
    import torch
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - the quantized_decomposed ops, to load the file

    try:
        import torchao.quantization.quant_primitives  # noqa: F401 - torchao's ops, when the program has them
    except ImportError:
        pass
    quantized = torch.export.load(quantized_path)
    float_ep = torch.export.load(float_path)
    example = quantized.example_inputs
    if example is None:
        raise EtcError(f"{quantized_path} has no example inputs (save it from torch.export.export(model, inputs))")
    args, _ = example
    return str(quantization_report(float_ep, quantized, args, method=method))
