"""etc-cpu-tile-gemm-kernels: inline the GEMM kernels and tile them into register-blocked vector FMAs.

After `etc-cpu-gemm-regions` has defined every kernel with its init and epilogue, each is
inlined and tiled by the transform script of `kernels/gemm_schedule.py`: the epilogue (tagged
`<kernel>_epi`) is tiled into batch, nr-wide column panels (the loop the threaded entry
shares, `etc.thread_split`) and mr-row blocks (the partial one peeled), an A at least the L2's
size in row blocks around the panels (`gemm_match.row_block`), with the contraction
and the init fused into each tile; the contraction runs single k steps over the whole K,
vectorized into mr broadcast-FMAs of nr-wide vectors with the accumulator hoisted into
registers (that k loop marked `gemm_schedule.GEMM_K_LOOP` for etc-cpu-prefetch-gemm-tiles), then the epilogue is applied to the accumulator and the tile stored once. A
convolution's im2col is gathered per column panel (`gemm_match.gather_per_panel`), its rows then
turned into masked contiguous loads where the stride allows (`gemm_schedule.contiguous_row_loads`).
A failure is an error naming the pass.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import apply_transform_script, run_upstream
from etc.targets.cpu.kernels import gemm_kernel, gemm_match, gemm_schedule
from etc.targets.cpu.passes.gemm_kernels import TileOptions


@register_pass
class TileGemmKernels(Pass):
    """Inline and tile the GEMM kernels (see the module docstring)."""

    name = "etc-cpu-tile-gemm-kernels"
    summary = "Inline the GEMM kernels and tile them into register-blocked vector FMA loops"

    Options = TileOptions

    def run(self, module_op) -> None:
        o = self.options
        cfg = o.kernel_config()
        found: dict = {}  # kernel tag -> {"": rows, "_epi": True, "_init": True}
        for op in walk(module_op, ("linalg.generic",)):
            names = [op.attributes[i].name for i in range(len(op.attributes))]
            tag = next((n for n in names if n.startswith("etc.etc_gemm_")), None)
            if tag is None or tag.endswith(gemm_kernel.LEFTOVER):  # the leftover columns' epilogue: loops
                continue
            role = next((r for r in ("_epi", "_init", "_col") if tag.endswith(r)), "")
            entry = found.setdefault(tag[:len(tag) - len(role)], {})
            entry[role] = True
            if not role:  # the contraction: its tile layout [b, rows, NB, nr] or [b, rows, cols], and K
                shape = ir.RankedTensorType(op.results[0].type).shape
                entry["rows"], entry["split"], entry["cols"] = shape[1], len(shape) == 4, shape[-1]
                entry["K"] = ir.RankedTensorType(op.operands[0].type).shape[-1]
        # Without an epilogue the contraction is the root and its init stays a pass of its own
        # (a destination cannot be fused into the loops that carry it).
        # The K block (gemm_match.in_place_k_block, as gemm_match.kernel_kc chose it building the kernel): the
        # B panel is contiguous when packed or gathered per panel, else B is read in place, its
        # rows the tile's columns (f32) apart.
        kernels = []
        for tag, e in found.items():
            kc = gemm_match.in_place_k_block(e["K"], None if e["split"] or "_col" in e else 4 * e["cols"], cfg)
            kernels.append((tag, e["rows"], "_epi" in e, "_init" in e and "_epi" in e, kc, e["K"], e["split"],
                            e["cols"], "_col" in e, gemm_match.row_block(e["rows"], e["K"], kc, cfg)))
        for op in walk(module_op, ("func.call",)):
            if gemm_match.GEMM_ATTR in op.attributes:
                raise self.error(f"{self.name}: a GEMM kernel call without its kernel (run etc-cpu-gemm-regions "
                                 "first)", at=op)
        if not kernels:
            return
        with module_op.context, ir.Location.unknown():
            # No canonicalization before tiling: it would erase a kernel's identity epilogue,
            # the root the script tiles (and fuses the contraction and its init into). A power
            # with a constant integer exponent (GPT-2's GELU: x^3) becomes multiplications: the
            # epilogue is vectorized, and LLVM's powi takes only a scalar exponent.
            run_upstream(module_op, "builtin.module(inline{default-pipeline=}, symbol-dce, "
                         "func.func(math-expand-ops{ops=fpowi}))", "inlining GEMM kernels", self.error)
            script = gemm_schedule.transform_script(kernels, cfg)
            try:
                apply_transform_script(module_op, script)
            except Exception as e:  # noqa: BLE001 - the interpreter reports through a generic exception
                raise self.error(f"{self.name}: tiling the GEMM kernels failed: {e}") from None
            run_upstream(module_op, "builtin.module(canonicalize, cse)", "cleaning up GEMM kernels", self.error)
            rows = gemm_schedule.contiguous_row_loads(module_op)  # matches the canonical form of the gathers
            if rows:
                run_upstream(module_op, "builtin.module(canonicalize, cse)", "cleaning up GEMM kernels", self.error)
            self.count("im2col rows as contiguous loads", rows)
        self.count("kernels", len(kernels))
