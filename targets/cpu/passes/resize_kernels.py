"""etc-cpu-resize-kernels: bilinear resizes as vector kernels along the output row.

Runs on linalg on tensors before elementwise fusion (which would merge the resize's gather into its
consumers and lose it): every `linalg.generic` etc-cpu-lower-resize marked `etc.cpu.resize`
becomes the kernel of `kernels/resize_kernel.py` (per output row its two input rows and weights
from tables, per block of output columns two or four vector loads, a vertical blend, two constant
shuffles and a horizontal blend). Measured on DeepLabV3's decoder (256 channels, 14x14 -> 28x28,
one core): torch-mlir's per-element lowering took 2.3-2.6x XNNPACK's time. Decision `resize`
(with `etc.cpu.resize_kernel` describing it on the kernel's outer loop), or `loops` with the
reason when a block of output columns reads more than two input vectors (downscaling by more than
2x) or the target has no vector unit: the marked generic then runs as loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import replace_fused
from etc.targets.cpu.kernels.resize_kernel import ResizeKernel
from etc.targets.cpu.kernels.resize_match import analyze, describe
from etc.targets.cpu.kernels.window_match import NotTaken
from etc.targets.cpu.lowering.resize import RESIZE_ATTR


@register_pass
class ResizeKernels(Pass):
    """Bilinear resizes (the `etc.cpu.resize` generics) -> vector kernels along the output row."""

    name = "etc-cpu-resize-kernels"
    summary = "Rewrite bilinear resizes into vector kernels along the output row"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE; 1: no kernel)")

    def run(self, op) -> None:
        lanes = self.options.lanes
        if lanes < 1 or lanes & (lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two", at=op)
        for generic in walk(op, ("linalg.generic",)):
            if RESIZE_ATTR not in generic.attributes:
                continue
            try:
                plan = analyze(generic, lanes)
                text = ResizeKernel(plan).function("__etc_resize")
            except NotTaken as reason:
                decisions.record(generic, "resize", "loops", str(reason))
                self.count("not taken")
                continue
            decisions.record(generic, "resize", "resize")
            try:
                replace_fused(text, [plan.x], generic, [], [], {"etc.cpu.resize_kernel": describe(plan)})
            except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
                raise self.error(f"{self.name}: building the resize kernel failed: {exc}", at=generic) from exc
            self.count("taken")
