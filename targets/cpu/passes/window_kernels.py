"""etc-cpu-window-kernels: depthwise convolutions and poolings as register-blocked vector kernels.

Runs on linalg on tensors (what torch-mlir produces, before or after
`linalg-fuse-elementwise-ops`): every static f32 `linalg.depthwise_conv_2d_nchw_chw`,
`linalg.pooling_nchw_max` and `linalg.pooling_nchw_sum` becomes a loop nest over (n, channels,
output rows, output column blocks) whose body is straight-line vector code; so does an int8
`linalg.pooling_nchw_max` (a quantized model's: vectors as wide in bytes, 4x the lanes, -128 the
pad and start, `arith.maxsi`, its consumers left as passes):

  * vectors run along the output row (`lanes` f32 lanes; a last partial block uses the next
    power of two, its store masked when that is wider than what is left);
  * a column stride s reads s*lanes contiguous inputs and deinterleaves them with one
    `vector.shuffle` (LLVM: a two-source permute), never a gather; taps whose offsets are equal
    modulo s share the load (3x3 stride 2: two loads per kernel row, three shuffles);
  * the KH*KW taps are unrolled and several output rows are computed per step, so an input row
    loaded once feeds every output row whose window covers it, the accumulators stay in
    registers and the rows' tap chains overlap: 8 rows when an output row is one or two
    vectors, fewer for wider rows, at least 4 when the fused consumers hold an exp or a
    division (`window_kernel.rows_per_step`, measured on AVX-512 and AVX2); windows with more than
    `unroll-taps` taps (7x7) loop over the kernel rows instead, their weights read inside that
    loop (hoisted, 49 weight vectors spill);
  * the input's `tensor.pad` (spatial, padding with the reduction's identity: 0, or -inf for
    max) is folded: the kernel reads the unpadded tensor, skips taps on padding rows in the
    static border rows, masks loads past a row's end (the transfer's padding value is the pad
    value) and shifts the first block's loads right in registers, the pad value in front;
  * the accumulator starts from the bias (a per-channel `linalg.broadcast` or broadcasting
    generic), a `linalg.fill` value, the outs tensor, or the first tap when the fill is the
    reduction's identity;
  * a chain of single-use elementwise consumers (BN folded to scale+shift, ReLU6, the divide of
    an average pool, a residual add) is applied to the accumulator before the one store; with
    `plane-epilogue` (the AVX2 row) a chain holding a transcendental (SiLU, GELU) is applied to
    each channel's plane once its rows are stored, one vector at a time
    (`window_kernel.plane_epilogue_pays`, where the measurements are).

The result is scf.for loops carrying the output tensor, `vector.transfer_read/write` on
tensors, `vector.shuffle`, `math.fma` and the consumers' arith/math ops on vectors: one-shot-
bufferize writes in place, `convert-vector-to-llvm` lowers the rest; the only temporary is the
output's `tensor.empty`. The channel loop carries `etc.thread_split` (channels are independent).

Every window op the pass sees is a decision: `etc.cpu.path = "window"` on the outer loop of a
kernel it built (with `etc.cpu.window` describing it), `"loops: <reason>"` on an op it left
alone, and the same in the module's `etc.cpu.decisions` (targets/cpu/decisions.py). So are the
input's `tensor.pad` (`padding -> fused`, or `copy` with the reason) and a single elementwise
consumer (`epilogue -> fused`, or `second-pass` with the reason): both cost a pass over the
activation when they stay outside the kernel. Not taken:
NHWC and 1-D/3-D window ops, min pooling, channel multipliers (not a depthwise_conv_2d_nchw_chw),
dynamic shapes, other element types (int8 other than a max pool), column strides above `max-stride`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import as_operation
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import replace_fused, splice
from etc.targets.cpu.kernels.window_kernel import WindowKernel, global_pool_text, rows_per_step
from etc.targets.cpu.kernels.window_match import SEEN, TAKEN, NotTaken, Window, analyze, describe, global_pool_source


@register_pass
class WindowKernels(Pass):
    """Depthwise convolutions and poolings (NCHW, static f32, linalg on tensors) -> vector kernels
    along the output row: taps unrolled, column strides deinterleaved from contiguous loads,
    several output rows per step, the bias/fill as the accumulator's start and the single-use
    elementwise consumers applied before the store. See the module docstring."""

    name = "etc-cpu-window-kernels"
    summary = "Rewrite NCHW depthwise convolutions and poolings into register-blocked vector kernels"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE)")
        rows: int = option(0, help="output rows computed per step (input rows loaded once for all of them); "
                                   "0: by the row's vectors and stride (window_kernel.rows_per_step)")
        fuse_consumers: bool = option(True, help="apply single-use elementwise consumers before the store")
        max_stride: int = option(4, help="largest column stride taken (a stride s loads s*lanes inputs per vector)")
        unroll_taps: int = option(25, help="windows with more taps loop over the kernel rows (weights read inside the loop)")
        fold_padding: bool = option(True, help="read a tensor.pad's source, the padding handled in the kernel")
        plane_epilogue: bool = option(False, help="a fused epilogue holding a transcendental (SiLU, GELU) applied to "
                                                  "each channel's finished plane (window_kernel.plane_epilogue_pays)")

    def run(self, op) -> None:
        if self.options.lanes < 1 or self.options.lanes & (self.options.lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two, got {self.options.lanes}", at=op)
        for window_op in walk(op, (*TAKEN, *SEEN)):
            if window_op.name in TAKEN and self.rewrite_global_pool(window_op):
                continue
            try:
                win = analyze(window_op, max_stride=self.options.max_stride, fold_pads=self.options.fold_padding,
                              fuse=self.options.fuse_consumers)
                # An int8 max pool's vectors are as wide in bytes: four times the lanes.
                lanes = self.options.lanes * (4 if win.element == "i8" else 1)
                rows = self.options.rows or rows_per_step(win, lanes)
                kernel = WindowKernel(win, lanes, rows, self.options.unroll_taps, self.options.plane_epilogue)
                text = kernel.function("__etc_window")
            except NotTaken as reason:
                window_op.attributes["etc.cpu.path"] = ir.StringAttr.get(f"loops: {reason}")
                decisions.record(window_op, "window", "loops", str(reason))
                self.count("not taken")
                continue
            decisions.record_taken(window_op, "window", "window", win.decisions)
            try:
                self.rewrite(win, text, kernel.plane_epilogue)
            except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
                raise self.error(f"{self.name}: building the window kernel failed: {exc}", at=window_op) from exc
            self.count("taken")

    def rewrite_global_pool(self, op) -> bool:
        """A whole-plane pooling becomes a row reduction (`global_pool_text`); True when it did."""
        text = global_pool_text(op, TAKEN[op.name])
        if text is None:
            return False
        decisions.record(op, "window", "row-reduction")
        source = global_pool_source(op, TAKEN[op.name])
        pad = op.operands[0].owner if source != op.operands[0] else None
        (result,) = splice(text, [source, op.operands[2]], op)
        op.results[0].replace_all_uses_with(result)
        op.erase()
        # The ceil_mode window's pad (1280x1287x1287 floats for EfficientNet's pooler) and what
        # carried it, now unused: gone before bufferization could give them buffers.
        dead = [pad] if pad is not None else []
        while dead:
            current = dead.pop()
            current = as_operation(current)
            if current.name not in ("tensor.pad", "tensor.insert_slice", "tensor.empty") or \
                    any(True for r in current.results for _ in r.uses):
                continue
            operands = [v.owner for v in current.operands if not isinstance(v.owner, ir.Block)]
            current.erase()
            dead.extend(operands)
        self.count("global pools")
        return True

    def rewrite(self, win: Window, text: str, plane_epilogue: bool = False) -> None:
        """Splice the kernel `text` (a function) in place of the op and its fused consumers."""
        arguments = [win.x] + ([win.w] if win.kind == "dw" else []) + \
            ([win.init.value] if win.init.kind != "identity" else [])
        what = describe(win) + (", applied to each finished plane" if plane_epilogue else "")
        replace_fused(text, arguments + [o.value for o in win.operands], win.op, [user for user, _, _ in win.chain],
                      [win.init.producer, win.pad_op], {"etc.cpu.path": "window", "etc.cpu.window": what})
