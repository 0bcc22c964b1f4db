"""The program-manager API, shaped like ExecuTorch's `exir`.

    edge = etc.to_edge(exported_program)            # aten -> decomposed -> edge dialect
    edge = edge.to_backend(CpuPartitioner())        # optional: delegate parts to a target
    program = edge.to_executorch()                  # memory planning + emission
    program.save("model.pte")
    edge.to_library("build", "model")               # or: the program as a C library (NAME.h, libNAME.a)

Each method of this module is one stage of the pipeline; the stages themselves
live in their own modules (importer, delegation, memory planning, emitter) so
that this file reads as the pipeline it implements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from etc.errors import EtcError, LoweringError


# --------------------------------------------------------------------- configs
@dataclass
class EdgeCompileConfig:
    """Options of `to_edge`.

    decompositions: the decomposition table applied before import. The default,
      torch's own Core ATen table (`torch.export.default_decompositions()`), is the
      one ExecuTorch uses: it is maintained with the operator set, so a new torch
      release brings its decompositions with it, which MLIR patterns of ours would
      have to chase by hand.
    preserve_ops: ATen overloads to keep undecomposed (for a delegate that has a
      better kernel for the composite op than for its decomposition).
    verify: run the MLIR verifier (including the edge dtype rules) after each pass.
    """

    decompositions: Mapping | None = None
    preserve_ops: tuple = ()
    verify: bool = True


@dataclass
class ExecutorchBackendConfig:
    """Options of `to_executorch`, named as in ExecuTorch where they exist there.

    memory_planning_algorithm: "greedy" (best-fit with reuse), "naive" (no reuse),
      or a callable `(intervals, alignment) -> {value_id: offset}`.
    mem_id_for: callback assigning each planned value to a memory id (1-based),
      for memory hierarchies; default: everything in mem_id 1.
    alloc_graph_input / alloc_graph_output: whether inputs / outputs live in
      planned memory (as in ExecuTorch, both by default: the runtime copies inputs
      into the arena, and planned sizes compare one to one with ExecuTorch's).
    alignment: byte alignment of every planned tensor.
    segment_alignment / constant_tensor_alignment: `.pte` layout.
    delegate_data_in_segments: put delegate blobs in segments (else inline).
    """

    memory_planning_algorithm: object = "greedy"
    mem_id_for: Callable | None = None
    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alignment: int = 16
    segment_alignment: int = 128
    constant_tensor_alignment: int = 16
    delegate_data_in_segments: bool = True


# ---------------------------------------------------------------- to_edge
def _as_program_dict(programs) -> dict:
    import torch

    if isinstance(programs, torch.export.ExportedProgram):
        return {"forward": programs}
    if isinstance(programs, Mapping):
        for name, ep in programs.items():
            if not isinstance(ep, torch.export.ExportedProgram):
                raise EtcError(f"to_edge: method '{name}' is a {type(ep).__name__}, not a torch.export.ExportedProgram")
        return dict(programs)
    raise EtcError(f"to_edge expects an ExportedProgram or a dict of them, got {type(programs).__name__}")


def decompose(programs: dict, config: EdgeCompileConfig) -> dict:
    """Stage 1 of to_edge: decompose every method to the Core ATen opset."""
    import torch

    if config.decompositions is not None:
        table = dict(config.decompositions)
    else:
        from etc.compiler.decompositions import etc_decompositions

        table = torch.export.default_decompositions()
        table.update(etc_decompositions())  # ops with no Core ATen form that models use
    for op in config.preserve_ops:
        table.pop(op, None)
    for op in _quantization_overloads():  # torchao's affine ops are composite: keep them whole
        table.pop(op, None)
    return {name: ep.run_decompositions(table) for name, ep in programs.items()}


def _quantization_overloads() -> list:
    """The registered OpOverloads of the PT2E/torchao quantization ops etc imports as ops."""
    import torch

    from etc.dialects.quantized_ops import out_variants

    found = []
    for name in out_variants():
        namespace, _, rest = name.partition("::")
        op, _, overload = rest.partition(".")
        try:
            found.append(getattr(getattr(getattr(torch.ops, namespace), op), overload or "default"))
        except (AttributeError, RuntimeError):  # torchao not loaded: nothing of it to keep
            continue
    return found


def to_edge(programs, compile_config: EdgeCompileConfig | None = None) -> "EdgeProgram":
    """ExportedProgram (or {method: ExportedProgram}) -> EdgeProgram in the edge dialect.

    Decomposes with torch's Core ATen table, imports into the `aten` dialect,
    canonicalizes aten no-ops and converts to `edge`, whose verifier checks each
    op's dtypes against what its kernel accepts. An op with no edge form fails
    with a diagnostic at the user's source line.
    """
    from etc.compiler.importer import import_program
    from etc.passes.pipeline import run_pipeline

    config = compile_config or EdgeCompileConfig()
    exported = _as_program_dict(programs)
    decomposed = decompose(exported, config)
    program_ir = import_program(decomposed)
    annotate_upper_bounds(program_ir, decomposed)
    run_pipeline(program_ir.module, EDGE_PIPELINE, verify=config.verify)
    return EdgeProgram(program_ir, exported_programs=exported, config=config)


def _upper_bound_shapes(ep) -> dict:
    """FX node name -> upper-bound shape of each tensor it produces (symbolic dims at their max)."""
    import torch
    from torch.utils._sympy.value_ranges import bound_sympy

    def bound(dim):
        if isinstance(dim, torch.SymInt):
            upper = bound_sympy(dim.node.expr, ep.range_constraints).upper
            return int(upper) if upper.is_finite else -1
        return int(dim)

    shapes = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        if not any(isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape) for v in vals):
            continue
        shapes[node.name] = [[bound(d) for d in v.shape] for v in vals if isinstance(v, torch.Tensor)]
    return shapes


def annotate_upper_bounds(program_ir, decomposed: dict) -> None:
    """Record `etc.upper_bounds` on ops whose results have dynamic dims.

    torch.export knows each intermediate size as an expression of the input
    symbols; its upper bound over the `Dim` ranges is what memory planning and
    the `.pte` (DYNAMIC_BOUND tensors) need. The op is found by its location's
    name, which the importer sets to the FX node's name.
    """
    from torch_mlir import ir

    from etc.ir.locations import location_name

    with program_ir.context:
        # Per method: node names are unique within one graph only (two methods each have an `add`).
        for method, ep in decomposed.items():
            bounds = _upper_bound_shapes(ep)
            if not bounds:
                continue
            func = program_ir.func(method)
            for op in func.regions[0].blocks[0].operations:
                results = [r for r in op.results if isinstance(r.type, ir.RankedTensorType)]
                if not results or all(ir.RankedTensorType(r.type).has_static_shape for r in results):
                    continue
                shapes = bounds.get(location_name(op.location))
                if shapes is None or len(shapes) != len(results):
                    continue
                flat = [d for shape in shapes for d in shape]
                op.attributes["etc.upper_bounds"] = ir.DenseI64ArrayAttr.get(flat)


# The aten -> edge stage as one pipeline string; `etc-opt` runs the same text.
EDGE_PIPELINE = ("builtin.module(etc-canonicalize-aten, etc-convert-aten-to-edge, etc-fold-constants, "
                 "etc-fuse-batch-norm, cse, etc-dce)")


# ------------------------------------------------------------- EdgeProgram
class EdgeProgram:
    """A program in the edge dialect: the MLIR module, its constants, and what was delegated."""

    def __init__(self, program_ir, *, exported_programs: dict, config: EdgeCompileConfig):
        self.program_ir = program_ir
        self.exported_programs = exported_programs
        self.config = config
        self.delegation_reports: list = []

    # What users look at.
    @property
    def module(self):
        return self.program_ir.module

    @property
    def methods(self) -> list[str]:
        return list(self.program_ir.methods)

    def exported_program(self, method: str = "forward"):
        return self.exported_programs[method]

    def __str__(self) -> str:
        return str(self.program_ir)

    def print(self) -> None:
        print(self)

    # Stages.
    def transform(self, passes: Iterable | str) -> "EdgeProgram":
        """Run passes: a pipeline string, or a list of registered pass names / pass objects."""
        from etc.passes.pipeline import run_pipeline

        if isinstance(passes, str):
            run_pipeline(self.module, passes, verify=self.config.verify)
        else:
            for p in passes:
                run_pipeline(self.module, p, verify=self.config.verify)
        return self

    def to_backend(self, partitioner) -> "EdgeProgram":
        """Delegate the partitions `partitioner` proposes to their backends."""
        from etc.compiler.delegation import delegate

        report = delegate(self.program_ir, partitioner)
        if self.config.verify:  # as after every pass: outlining must leave valid IR
            self.program_ir.verify()
        self.delegation_reports.append(report)
        return self

    def delegation_info(self) -> str:
        """A readable summary of every to_backend call: what went where, and why not."""
        return "\n\n".join(str(r) for r in self.delegation_reports) or "no delegation"

    def to_library(self, directory: str | os.PathLike, name: str, **options):
        """The whole program as a native library instead of a `.pte`: `NAME.h` (one C function per
        method over caller-owned memory, every size as a macro), `libNAME.a` (code and weights) and a
        size report, for the target the delegate was compiled for (`CpuPartitioner(target=...)`).
        Each method must be one delegate call doing all its work (`to_backend` first); anything else
        is refused with the ops and source lines that keep it from being one. Returns what the
        backend wrote (the cpu target: `targets/cpu/library.NativeLibrary`)."""
        from etc.compiler.library import plan_library

        plans, backend = plan_library(self)
        return backend.emit_library(plans, os.fspath(directory), name, **options)

    def to_executorch(self, config: ExecutorchBackendConfig | None = None, *,
                      generate_etrecord: bool = False) -> "ExecutorchProgram":
        """Plan memory and emit the `.pte` program.

        `generate_etrecord=True` also builds the compile record (`program.get_etrecord()`): every
        instruction mapped to its edge op, aten op and source line, for the Inspector and the
        numeric debugger (`etc.devtools`)."""
        from etc.compiler.emitter import emit_program
        from etc.passes.memory_planning import plan_memory

        from etc.passes.in_place_state import mark_in_place_state

        config = config or ExecutorchBackendConfig()
        mark_in_place_state(self.module)  # buffer updates (KV caches) written in the buffer, not copied back
        report = plan_memory(
            self.module,
            algorithm=config.memory_planning_algorithm,
            alignment=config.alignment,
            alloc_graph_input=config.alloc_graph_input,
            alloc_graph_output=config.alloc_graph_output,
            mem_id_for=config.mem_id_for,
        )
        instruction_ops = {} if generate_etrecord else None
        pte = emit_program(self.program_ir, config, instruction_ops=instruction_ops)
        from etc.schema import input_dims  # Dim minimums and shared Dims, checked by the runtime

        pte.named_data.update(input_dims.records_of(self.exported_programs))
        etrecord = None
        if generate_etrecord:
            from etc.compiler.compile_record import build_compile_record

            etrecord = build_compile_record(self.program_ir, instruction_ops, pte)
        return ExecutorchProgram(pte, config=config, memory_report=report, etrecord=etrecord)


# ----------------------------------------------------------- ExecutorchProgram
class ExecutorchProgram:
    """The emitted program: `.buffer` (the .pte bytes), `.save(path)`, `.memory_report()`."""

    def __init__(self, pte, *, config: ExecutorchBackendConfig, memory_report, etrecord=None):
        from etc.schema import serialize_pte

        self.pte = pte
        self._etrecord = etrecord
        self.config = config
        self._memory_report = memory_report
        self.buffer: bytes = serialize_pte(
            pte,
            segment_alignment=config.segment_alignment,
            constant_tensor_alignment=config.constant_tensor_alignment,
        )

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "wb") as f:
            f.write(self.buffer)

    def write_to_file(self, f) -> None:
        f.write(self.buffer)

    def get_etrecord(self):
        """The compile record (`etc.devtools.CompileRecord`) built by `to_executorch(generate_etrecord=True)`."""
        if self._etrecord is None:
            raise EtcError("this program has no compile record: call to_executorch(generate_etrecord=True)")
        return self._etrecord

    def memory_report(self):
        """Per method and mem_id: planned bytes and the lifetime lower bound."""
        return self._memory_report
