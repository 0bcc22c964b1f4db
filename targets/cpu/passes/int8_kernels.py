"""etc-cpu-int8-kernels: int8 contractions -> register-tiled dot-product kernels, requantized in registers.

`etc-cpu-lower-quantized` lowers each int8 convolution (groups 1) and linear layer to a *qgemm*:
a `linalg.generic` marked `etc.cpu.qgemm`, acc[M, NB, 16] (i32) = A[M, KB, 4] x B[NB, KB, 16, 4]
(i8; one operand unsigned, x + 128), then collapsed and cut to [M, N] and requantized to i8 by
a generic marked `etc.cpu.requant` (per-row or per-column i32 correction, float multiplier and
bias; output zero point and clamp as attributes). This pass replaces each such pair
(`kernels/int8_match.py`) with one kernel, inline in the entry function (loops on tensors): mr x
panels tiles of i32 accumulators fed by `vpdpbusd`, the requantization applied to the registers
before the i8 stores (`kernels/int8_kernel.py`). A dynamic linear (an `etc.cpu.qgemm_dynamic`
contraction of int8 rows with int8 weights or int4 nibble pairs and its `etc.cpu.qdequant` float
epilogue) becomes the same tiling with the weights made unsigned operands in registers and float
accumulation across their scale groups (`kernels/dynamic_linear_kernel.py`).

Without a dot-product instruction (`dot=none`: AVX2 without VNNI, NEON, scalar targets) a pair
stays as it is (plain loops) and the pass records why; the same for the depthwise/grouped int8
convolutions (`etc.cpu.qwindow`): there is no int8 window kernel. A convolution's B operand (its
im2col: the gather marked `etc.cpu.im2col`, then zero padding and the panel transpose) is packed
per call straight from the padded image, on every target (`kernels/im2col_pack.py`), or, for a
gather marked taps_first (K tap by tap: `int8_match.taps_first`) and a dot product to read it,
never packed: the image is copied with its channels interleaved (`im2col_pack.ChannelCopy`) and
the kernel reads its panels from that copy in place (`int8_kernel.InPlaceB`); when the
kernel is built, a convolution whose output positions leave at most half a panel in the last one
(`tail_columns`: ResNet's 7 x 7 maps, 49 = 3 * 16 + 1; 14 x 14, 196 = 12 * 16 + 4) gets those
columns packed along K and computed as dot products, not as a padded panel (ResNet-50's 3x3
512@7 0.82x the time; whole models, in one process against the padded panel: ResNet-18 int8
0.94x, ResNet-50 0.95x, MobileNetV2 at 224 0.96x). An int8 add that alone reads a qgemm's result
(`int8_match.match_residual_add`: ResNet's shortcut joins) is computed in the kernel's epilogue,
the shortcut read beside the accumulators (whole models, against the separate add: ResNet-8 int8
0.98x, ResNet-50 0.99x; the add is compute-bound, its saving is the stored and reloaded
result). Each op gets
its decision (`decisions.py`) and the decided generics are marked so the passes after this one
do not decide again.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import defining_op
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import splice
from etc.targets.cpu.kernels.dynamic_linear_kernel import DynamicLinearKernel
from etc.targets.cpu.kernels.im2col_pack import channel_copy_text, pack_text
from etc.targets.cpu.kernels.int8_isa import DOTS
from etc.targets.cpu.kernels.int8_kernel import InPlaceB, Int8Kernel
from etc.targets.cpu.kernels.int8_match import (GROUP, PANEL, QDEQUANT, QGEMM, QWINDOW, REQUANT, DynamicPair, QgemmPair,
                                                ResidualAdd, match_dynamic, match_qgemm, match_residual_add,
                                                pack_source, tail_columns)

NO_DOT = "the target has no int8 dot product (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddwd): plain i32 loops"
NO_DOT_DYNAMIC = ("the target has no int8 dot product (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddwd): a dynamic linear "
                  "as plain loops on the weight's bytes")
NO_WINDOW = "int8 depthwise/grouped convolution: no int8 window kernel yet, plain i32 loops"
TAIL = "etc.cpu.qgemm_tail"  # the pack's and the kernel's shared choice: the last panel's columns along K


@register_pass
class Int8Kernels(Pass):
    """Rewrite int8 contractions (qgemm + requantization pairs) into dot-product kernels."""

    name = "etc-cpu-int8-kernels"
    summary = "Int8 contractions -> register-tiled vpdpbusd kernels with the requantization in registers"

    @dataclass
    class Options:
        dot: str = option("none", help="the int8 dot product: avx512-vnni, avx-vnni, avx2-madd (two vpmaddwd) or none")
        mr: int = option(6, help="rows of the register tile")
        panels: int = option(4, help="16-column panels of the register tile")

    def run(self, module_op) -> None:
        o = self.options
        if o.dot != "none" and o.dot not in DOTS:
            raise self.error(f"{self.name}: dot={o.dot!r} is not one of none, {', '.join(DOTS)}")
        with module_op.context, ir.Location.unknown():
            for op in walk(module_op, ("linalg.generic",)):
                if QWINDOW in op.attributes:
                    decisions.record(op, "window", "loops", NO_WINDOW)
                    op.attributes[decisions.DECIDED] = ir.UnitAttr.get()
            in_place = []  # (qgemm, the image's channel copy, how the kernel reads it)
            for qgemm in [op for op in walk(module_op, ("linalg.generic",)) if QGEMM in op.attributes]:
                found = pack_source(qgemm)
                if found is not None and o.dot != "none" and found[1].taps_first:
                    image, g, transpose = found  # the kernel reads the copy: the transpose dies with the qgemm
                    text, copy = channel_copy_text(g)
                    (words,) = splice(text, [image], transpose)
                    per_row, row_words = copy.panel_rows
                    k_bytes = tuple(GROUP * w for w in copy.k_words)
                    read = InPlaceB(copy.words * GROUP, k_bytes, per_row, GROUP * row_words)
                    in_place.append((qgemm, words, read))
                elif found is not None:  # vector code on any target (it needs no dot product)
                    image, geometry, transpose = found
                    tail = tail_columns(geometry.P) if o.dot != "none" else 0
                    if tail:
                        qgemm.attributes[TAIL] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), tail)
                    (packed,) = splice(pack_text(geometry, tail), [image], transpose)
                    transpose.results[0].replace_all_uses_with(packed)
                    _erase_dead_producers(transpose)
            # listed first: a fused add (never a requantization) is erased on the way
            for requant in [op for op in walk(module_op, ("linalg.generic",)) if REQUANT in op.attributes]:
                pair = match_qgemm(requant)
                if pair is None:
                    raise self.error(f"{self.name}: an int8 requantization that does not read a qgemm", at=requant)
                if o.dot == "none":
                    decisions.record(pair.qgemm, pair.kind, "loops", NO_DOT)
                    pair.qgemm.attributes[decisions.DECIDED] = ir.UnitAttr.get()
                    continue
                tail = ir.IntegerAttr(pair.qgemm.attributes[TAIL]).value if TAIL in pair.qgemm.attributes else 0
                residual = match_residual_add(requant)
                words, read = next(((w, r) for q, w, r in in_place if q == pair.qgemm), (None, None))
                try:
                    text = Int8Kernel(pair, o.dot, o.mr, o.panels, tail, residual, read).build()
                except Exception as e:  # noqa: BLE001 - a kernel that does not build is a compiler bug
                    raise self.error(f"{self.name}: building the int8 kernel failed: {e}", at=requant) from None
                self.rewrite(pair, text, residual, words)
                self.count("kernels")
                if residual:
                    self.count("adds fused")
            for epilogue in walk(module_op, ("linalg.generic",)):
                if QDEQUANT not in epilogue.attributes:
                    continue
                pair = match_dynamic(epilogue)
                if pair is None:
                    raise self.error(f"{self.name}: a dynamic linear's epilogue that does not read its contraction",
                                     at=epilogue)
                if o.dot == "none":
                    decisions.record(pair.qgemm, "contraction", "loops", NO_DOT_DYNAMIC)
                    pair.qgemm.attributes[decisions.DECIDED] = ir.UnitAttr.get()
                    continue
                try:
                    text = DynamicLinearKernel(pair, o.dot, o.mr, o.panels).build()
                except Exception as e:  # noqa: BLE001 - a kernel that does not build is a compiler bug
                    raise self.error(f"{self.name}: building the dynamic linear kernel failed: {e}", at=epilogue) \
                        from None
                self.rewrite_dynamic(pair, text)
                self.count(f"int{pair.bits} dynamic kernels")

    def rewrite_dynamic(self, pair: DynamicPair, text: str) -> None:
        """The kernel reads the float activation: the lowering's range, scale and quantize generics
        and the contraction die with the epilogue."""
        decisions.record(pair.qgemm, "contraction", "gemm")
        epilogue, qgemm = pair.epilogue, pair.qgemm
        values = [pair.activation, qgemm.operands[1], qgemm.operands[2], *epilogue.operands[3:5]]
        (result,) = splice(text, values, epilogue)
        epilogue.results[0].replace_all_uses_with(result)
        _erase_dead_producers(epilogue)

    def rewrite(self, pair: QgemmPair, text: str, residual: ResidualAdd | None, words=None) -> None:
        """The kernel in place of the requantization, or (an add fused) of the add, at the
        requantization's location (the layer's line); B is `words` (a `ChannelCopy`) if given."""
        decisions.record(pair.qgemm, pair.kind, "gemm")
        requant, qgemm = pair.requant, pair.qgemm
        values = [qgemm.operands[0], words or qgemm.operands[1], requant.operands[1], requant.operands[2],
                  requant.operands[3]]
        replaced = requant
        if residual is not None:
            decisions.record(residual.add, "epilogue", "fused")
            values.append(residual.residual)
            replaced = residual.add
        (result,) = splice(text, values, replaced, requant.location)
        replaced.results[0].replace_all_uses_with(result)
        _erase_dead_producers(replaced)  # with the expand, the collapse/slice and the qgemm


_PURE = ("linalg.", "tensor.", "arith.")


def _erase_dead_producers(op) -> None:
    """Erase `op` (its results unused) and then each producer left unused by that, transitively
    (only side-effect-free tensor, linalg and arith ops): the chain a kernel replaced, not more.
    Only ops that die and their direct producers are looked at, so a rewrite deep in a large model
    does not walk the whole graph before it."""
    frontier = [op]
    while True:
        dead = next((c for c in frontier if not any(list(r.uses) for r in c.results)), None)
        if dead is None:
            return
        frontier = [c for c in frontier if not c == dead]
        for producer in (defining_op(v) for v in dead.operands):
            if producer is not None and producer.name.startswith(_PURE) and not any(producer == c for c in frontier):
                frontier.append(producer)
        dead.erase()
