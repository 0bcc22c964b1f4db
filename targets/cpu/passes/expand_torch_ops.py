"""etc-cpu-expand-torch-ops: torch ops torch-mlir does not lower to our codegen -> torch ops it does.

Runs after etc-cpu-edge-to-torch, before torch-mlir's pipelines. Each torch op whose ATen name
has an entry in `lowering/expansions.py` (`EXPANSIONS`: views and squeezes as reshapes, cumsum,
the tanh GELU, as_strided, index_put, index.Tensor with int32 indices) is replaced by what its
expansion emits in front of it, from its decoded schema values (`torch_ops.decode`); ops inside
a `torch.prim.If` branch too. The constants and lists only the replaced op read go with it.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.lowering.context import load_torch
from etc.targets.cpu.lowering.expansions import EXPANSIONS, Emitter
from etc.targets.cpu.lowering.torch_ops import decode, torch_name_of


@function_pass("etc-cpu-expand-torch-ops",
               "Torch ops torch-mlir cannot lower for the cpu codegen -> torch ops it can (views, scans, scatters)")
def expand_torch_ops(module_op, options) -> int:
    from etc.dialects import op_info

    load_torch(module_op.context)
    found = []

    def visit(op):
        if op.name.startswith("torch.") and torch_name_of(op) in EXPANSIONS:
            found.append(op)
        return ir.WalkResult.ADVANCE

    entry_function(module_op).walk(visit)
    for op in found:
        name = torch_name_of(op)
        with module_op.context, ir.InsertionPoint(op), op.location:
            results = EXPANSIONS[name](Emitter(), decode(op, op_info(name)), op)
        for old, new in zip(op.results, results):
            old.replace_all_uses_with(new)
        producers = _producers(op)
        op.erase()
        _erase_unused(producers)
    return len(found)


def _producers(op) -> list:
    """The torch constants and list constructions defining `op`'s operands (each once)."""
    found = []
    for value in op.operands:
        producer = defining_op(value)
        if producer is not None and producer.name.startswith(("torch.constant.", "torch.prim.ListConstruct")) \
                and producer not in found:
            found.append(producer)
    return found


def _erase_unused(ops: list) -> None:
    """`ops` (constants and list constructions), and then what they read, once nothing reads them."""
    while ops:
        op = ops.pop()
        if any(True for r in op.results for _ in r.uses):
            continue
        more = [p for p in _producers(op) if p not in ops]
        op.erase()
        ops.extend(more)
