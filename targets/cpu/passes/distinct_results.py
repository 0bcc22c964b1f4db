"""etc-cpu-distinct-results: every result of the entry gets a buffer of its own before out-params are made.

CSE can make two outputs one value (`return x + 1, x + 1.0`; a Llama's KV-cache bookkeeping
returns one tensor twice), so after one-shot-bufferize both results are the same
`memref.alloc`. `buffer-results-to-out-params{hoist-static-allocs}` replaces and erases a
returned alloc once per result: the second time it touches the erased op and the compiling
process dies (SIGSEGV, an upstream bug). Between the two, this pass gives each repeated result
its own alloc and a copy, which the next pass turns into a copy into the second out-param.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import entry_function


@function_pass("etc-cpu-distinct-results",
               "After one-shot-bufferize: a result returned twice gets its own buffer (alloc + copy)")
def distinct_results(module, options=None) -> int:
    from torch_mlir.dialects import arith, memref

    fn = entry_function(module)
    ret = list(fn.regions[0].blocks[0].operations)[-1].operation
    seen, copies = set(), 0
    with fn.context, ir.InsertionPoint(ret), ret.location:
        for i, value in enumerate(list(ret.operands)):
            if value in seen and isinstance(value.type, ir.MemRefType):
                t = ir.MemRefType(value.type)
                sizes = [memref.DimOp(value, arith.ConstantOp(ir.IndexType.get(), d).result).result
                         for d in range(t.rank) if t.is_dynamic_dim(d)]  # a dynamic result: its run-time sizes
                copy = memref.AllocOp(ir.MemRefType.get(t.shape, t.element_type), sizes, []).result
                memref.CopyOp(value, copy)
                ret.operands[i] = copy
                copies += 1
            seen.add(value)
    return copies
