"""etc-cpu-copies-to-linalg: `memref.copy` -> `linalg.copy`, so the object never calls MLIR's C runtime.

With strided operands the LLVM lowering of `memref.copy` calls `memrefCopy` from MLIR's
runtime library, which a self-contained object must not depend on; `linalg.copy` becomes
plain loops (vectorized by LLVM where the strides allow).
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import function_pass
from etc.targets.cpu.passes._util import walk


@function_pass("etc-cpu-copies-to-linalg", "memref.copy -> linalg.copy (loops instead of a C runtime call)")
def copies_to_linalg(module, options=None) -> int:
    from torch_mlir.dialects import linalg

    copies = walk(module, ("memref.copy",))
    with module.context:
        for op in copies:
            with ir.InsertionPoint(op), op.location:
                linalg.copy(op.operands[0], outs=[op.operands[1]])
            op.erase()
    return len(copies)
