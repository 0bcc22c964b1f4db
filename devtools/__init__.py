"""Developer tools: what a program is made of and what it did (ExecuTorch's devtools, in etc's formats).

- `CompileRecord` (ETRecord): every instruction of a program mapped back to its edge
  op, aten op and the user's source line, delegates to the ops inside them; written by
  `to_executorch(generate_etrecord=True)` (`program.get_etrecord()`).
- `RunRecord` (ETDump): per-instruction times and, optionally, intermediate outputs;
  filled by the runtime for a program loaded with `enable_etdump=True`.
- `Inspector`: the two joined into a table of events, top ops, a Chrome trace;
  `read_executorch_etdump` makes a run record of ExecuTorch's own ETDump of an etc program.
- `BundledProgram`: a program with test inputs and expected outputs, in ExecuTorch's
  `.bpte` format.
- `numeric_debug`: a program's intermediate outputs against eager, op by op.
- `SelectiveBuild`: the kernels and backends a set of programs needs (ExecuTorch's
  `selected_operators.yaml`).
- `quantization_report`: per quantized op, SQNR of etc's output against the float model
  and the eager quantized one (`etc inspect quantized.pt2 --quant-report float.pt2`).

Names are imported lazily (torch and the compiler only when asked for). The run record and the
selective build live in the runtime (`etc.runtime.run_record`, `etc.runtime.selective_build`), the
compile record in the compiler (`etc.compiler.compile_record`): the layers below devtools write them,
so they sit there (ARCHITECTURE.md "Layers"); they are exported here with the tools that read them.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "RunRecord": "etc.runtime.run_record",
    "Event": "etc.runtime.run_record",
    "CompileRecord": "etc.compiler.compile_record",
    "Inspector": "etc.devtools.inspector",
    "BundledProgram": "etc.devtools.bundled_program",
    "MethodTestCase": "etc.devtools.bundled_program",
    "MethodTestSuite": "etc.devtools.bundled_program",
    "numeric_debug": "etc.devtools.numeric",
    "quantization_report": "etc.devtools.quant_report",
    "read_executorch_etdump": "etc.devtools.etdump",
    "SelectiveBuild": "etc.devtools.selective_build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'etc.devtools' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
