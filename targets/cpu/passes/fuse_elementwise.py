"""etc-cpu-fuse-elementwise: upstream elementwise fusion on the entry function only.

`linalg-fuse-elementwise-ops` (then canonicalize, cse) merges chains of elementwise ops and
broadcasts into one loop nest each. Run as `func.func(...)` it would also enter the private
GEMM kernel functions `etc-cpu-gemm-kernels` made and fuse their im2col gather into the
contraction, which is then no kernel any more; here it runs on the entry function alone,
where the kernels are calls it cannot enter: a contraction's producers and consumers fuse
among themselves, never into it.
"""

from __future__ import annotations

from etc.errors import PassError
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.kernel_ir import run_upstream


@function_pass("etc-cpu-fuse-elementwise", "Elementwise fusion on the entry function (GEMM kernel functions untouched)")
def fuse_elementwise(module, options=None) -> None:
    def error(message):
        return PassError(f"etc-cpu-fuse-elementwise: {message}")

    run_upstream(entry_function(module), "func.func(linalg-fuse-elementwise-ops, canonicalize, cse)",
                 "elementwise fusion", error)
