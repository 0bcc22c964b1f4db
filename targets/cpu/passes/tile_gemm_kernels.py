"""etc-cpu-tile-gemm-kernels: inline the GEMM kernels and tile them into register-blocked vector FMAs.

After elementwise fusion (which did not enter the kernels: they were calls), every
kernel function `etc-cpu-gemm-kernels` made is inlined and its contraction, tagged
`etc.cpu.gemm_tile = array<i64: rows, kc>`, is tiled Goto-style by the
transform script of `etc.targets.cpu.gemm`: batch, K blocks of kc, nr-wide column panels
(the loop the threaded entry shares, `etc.thread_split`), mr-row blocks with the partial one
peeled, single k steps; the mr x nr x 1 step is vectorized into mr broadcast-FMAs of nr-wide
vectors with the accumulator hoisted out of the k loop. A failure is an error naming the pass.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu import gemm
from etc.targets.cpu.passes._util import run_upstream, walk
from etc.targets.cpu.passes.gemm_kernels import TILE_ATTR, TileOptions


@register_pass
class TileGemmKernels(Pass):
    """Inline and tile the GEMM kernels (see the module docstring)."""

    name = "etc-cpu-tile-gemm-kernels"
    summary = "Inline the GEMM kernels and tile them into register-blocked vector FMA loops"

    Options = TileOptions

    def run(self, module_op) -> None:
        o = self.options
        cfg = gemm.KernelConfig(o.lanes, o.mr, o.nr, o.kc)
        tags, rows, kcs = [], [], []
        for op in walk(module_op, ("linalg.generic",)):
            if TILE_ATTR not in op.attributes:
                continue
            names = [op.attributes[i].name for i in range(len(op.attributes))]
            tag = next((name for name in names if name.startswith("etc.etc_gemm_")), None)
            if tag is None:
                raise self.error(f"{self.name}: a kernel contraction without its tag", at=op)
            r, kc = list(ir.DenseI64ArrayAttr(op.attributes[TILE_ATTR]))
            del op.attributes[TILE_ATTR]
            tags.append(tag)
            rows.append(r)
            kcs.append(kc)
        if not tags:
            return
        with module_op.context, ir.Location.unknown():
            run_upstream(module_op, "builtin.module(inline, symbol-dce, canonicalize, cse)", "inlining GEMM kernels",
                         self.error)
            try:
                gemm._apply_script(module_op, gemm.transform_script(tags, cfg, rows, kcs))
            except Exception as e:  # noqa: BLE001 - the interpreter reports through a generic exception
                raise self.error(f"{self.name}: tiling the GEMM kernels failed: {e}") from None
            run_upstream(module_op, "builtin.module(canonicalize, cse)", "cleaning up GEMM kernels", self.error)
        self.count("kernels", len(tags))
