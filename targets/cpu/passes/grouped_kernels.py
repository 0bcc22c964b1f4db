"""etc-cpu-grouped-kernels: grouped convolutions as register-blocked vector kernels.

Runs on linalg on tensors after elementwise fusion, beside etc-cpu-window-kernels. Every static
f32 `linalg.conv_2d_ngchw_gfchw` (what torch-mlir makes of `nn.Conv2d(groups=G)` that is neither
depthwise nor dense: RegNet's groups of 8, ResNeXt's 32 groups, ShuffleNet's grouped 1x1s)
becomes the kernel of `kernels/grouped_kernel.py`: `block` output channels of a group share
each input vector they load (vectors along the output row, the group's input channels a loop,
the taps unrolled), the bias or fill starts the accumulators and the chain of single-use
elementwise consumers (BN folded into scale and shift, the activation, a residual add: 5-D
generics on the op's [N, G, F/G, OH, OW] result once fusion has moved the reshapes outward)
runs on them before the one store.

Measured against the alternatives on one core (bench/layers.py, the gconv rows): the
default loops this replaces ran RegNetY-400MF's 48-channel groups=6 layer at 2.05x torch
eager's time; a GEMM per group has fewer rows (a group's 8 filters) than one register tile
and an im2col to gather per group. So every group width takes this kernel: the decision
`grouped` (with `etc.cpu.grouped` describing the kernel on its outer loop), or `loops` with the
reason on an op it cannot take (dynamic shapes, other element types, buffers). The input is
read padded (the operand: torch-mlir's tensor.pad seen through the 5-D view), a copy of the
activation that the window kernels fold and this kernel does not yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import replace_fused
from etc.targets.cpu.kernels.grouped_kernel import GroupedKernel
from etc.targets.cpu.kernels.grouped_match import OP_NAME, Grouped, analyze, describe
from etc.targets.cpu.kernels.window_match import NotTaken


@register_pass
class GroupedKernels(Pass):
    """Grouped convolutions (static f32 linalg.conv_2d_ngchw_gfchw on tensors) -> vector kernels
    along the output row, several output channels of a group per register block. See the
    module docstring."""

    name = "etc-cpu-grouped-kernels"
    summary = "Rewrite grouped convolutions into register-blocked vector kernels"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE)")
        channels: int = option(8, help="output channels of a group per register block (more where a row has "
                               "room for one vector only)")
        accumulators: int = option(16, help="accumulator vectors per block (channels x column vectors)")
        fuse_consumers: bool = option(True, help="apply single-use elementwise consumers before the store")

    def run(self, op) -> None:
        o = self.options
        if o.lanes < 1 or o.lanes & (o.lanes - 1) or o.channels < 1 or o.accumulators < 1:
            raise self.error(f"{self.name}: lanes must be a power of two, channels and accumulators positive", at=op)
        for conv in walk(op, (OP_NAME,)):
            try:
                gc = analyze(conv, o.lanes, fuse=o.fuse_consumers, channels=o.channels,
                             accumulators=o.accumulators)
                text = GroupedKernel(gc).function("__etc_grouped")
            except NotTaken as reason:
                decisions.record(conv, "convolution", "loops", str(reason))
                self.count("not taken")
                continue
            decisions.record_taken(conv, "convolution", "grouped", gc.decisions)
            try:
                self.rewrite(gc, text)
            except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
                raise self.error(f"{self.name}: building the grouped kernel failed: {exc}", at=conv) from exc
            self.count("taken")

    def rewrite(self, gc: Grouped, text: str) -> None:
        """Splice the kernel in place of the op and its fused consumers."""
        arguments = [gc.x, gc.w] + ([gc.init.value] if gc.init.kind != "identity" else [])
        replace_fused(text, arguments + [o.value for o in gc.operands], gc.op, [user for user, _, _ in gc.chain],
                      [gc.init.producer], {"etc.cpu.grouped": describe(gc)})
