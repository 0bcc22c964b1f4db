"""etc-cpu-block-transposes: block the loops of an elementwise op that reads an input transposed.

An elementwise op runs its loops in the output's order, the innermost one walking the output
contiguously. An input read transposed (a permute: ConvNeXt's NHWC -> NCHW after every block)
then walks its own memory with a stride in the inner loops: each read touches a new cache line
(and, at strides of a kilobyte and more, few cache sets and many pages), and when one pass of
the loops inside the input's contiguous one touches more lines than stay cached, every line is
fetched again for each of the 16 floats it carries. Blocked, those loops run `tile` iterations
of the innermost (and one of each loop between) at a time, inside the loop over the input's
contiguous dimension:

    for c: for p in [0, P):  out[c, p] = in[p, c]             each line fetched 16 times
    for pb: for c: for p in [pb, pb + tile):  out[c, p] = in[p, c]     tile lines stay in L1

(tile_using_for: loops after the input's contiguous one tiled by 1, the innermost by `tile`.)
Ops whose inner loops touch at most `lines` lines per pass are left as they are. Measured
(one thread, permute + copy): ConvNeXt's NHWC -> NCHW 96@56 337 -> 136 us, 384@14 106 -> 29 us,
192@28 191 -> 49 us. The bound is low because the lines of a large stride share few cache
sets: 384@14's 196 lines (1.5 KB apart, 8 of L1's 64 sets) thrash unblocked. It costs one
case: NCHW -> NHWC 96@56 (96 lines per pass, 4 KB apart or more) takes 137 us blocked, 111
unblocked. Every block loop carries `etc.thread_split` (the blocks write disjoint parts of the
output): a threaded entry shares the best balanced one among its threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import ANY_OP, apply_transform_script
from etc.targets.cpu.parallel import THREAD_SPLIT

_TAG = "etc.block_transpose"
_OPS = ("linalg.generic", "linalg.transpose")


def _transposed_dim(op, shape: list) -> "int | None":
    """The loop an input of `op` walks contiguously (its last dimension longer than 1) when it
    reads along the innermost loop longer than 1 with a stride; None if no input does."""
    inner = max((d for d, n in enumerate(shape) if n != 1), default=None)
    if inner is None:
        return None
    if op.name == "linalg.transpose":  # out dim i = in dim permutation[i]
        permutation = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        k = max((i for i in range(len(shape)) if shape[i] != 1), key=lambda i: permutation[i])
        return k if k != inner else None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if list(maps[-1].results) != [ir.AffineDimExpr.get(d) for d in range(maps[-1].n_dims)]:
        return None  # the output is not written in loop order
    for m in maps[:-1]:
        if not all(isinstance(r, ir.AffineDimExpr) for r in m.results):
            continue
        loops = [ir.AffineDimExpr(r).position for r in m.results]
        loops = [d for d in loops if shape[d] != 1]
        if inner in loops and loops[-1] != inner:
            return loops[-1]
    return None


@register_pass
class BlockTransposes(Pass):
    """Tile the loops of elementwise ops that read an input transposed (see the module docstring)."""

    name = "etc-cpu-block-transposes"
    summary = "Block an elementwise op's loops so that an input read transposed stays in L1"

    @dataclass
    class Options:
        tile: int = option(32, help="iterations of the innermost loop per block")
        lines: int = option(64, help="cache lines (of 64 bytes) one pass of the loops inside the input's "
                                      "contiguous one may touch unblocked (low: lines a large stride apart "
                                      "share few cache sets)")

    def run(self, module_op) -> None:
        tile = self.options.tile
        blocked = []
        for op in walk(module_op, _OPS):
            if op.parent.name != "func.func":
                continue  # inside a kernel an earlier pass built: its loops are that kernel's
            if op.name == "linalg.generic" and (len(op.results) != 1 or any(
                    "parallel" not in str(it) for it in ir.ArrayAttr(op.attributes["iterator_types"]))):
                continue
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            if any(d < 0 for d in shape):
                continue
            k = _transposed_dim(op, shape)
            if k is None:
                continue
            inner = max(d for d, n in enumerate(shape) if n != 1)
            if int(np.prod(shape[k + 1:])) <= self.options.lines:
                continue  # its lines stay cached until the next k
            sizes = [0] * (k + 1) + [1] * (inner - k - 1) + [min(tile, shape[inner])] + [0] * (len(shape) - inner - 1)
            with module_op.context:
                op.attributes[f"{_TAG}_{len(blocked)}"] = ir.UnitAttr.get()
            blocked.append(sizes)
        if not blocked:
            return
        lines = ["module attributes {transform.with_named_sequence} {",
                 f"  transform.named_sequence @__transform_main(%root: {ANY_OP} {{transform.readonly}}) {{"]
        for i, sizes in enumerate(blocked):
            loops = sum(1 for s in sizes if s)
            types = ", ".join([ANY_OP] * (1 + loops))
            lines += [f"    %m{i} = transform.structured.match ops{{[\"linalg.generic\", \"linalg.transpose\"]}} "
                      f"attributes {{{_TAG}_{i}}} in %root : ({ANY_OP}) -> {ANY_OP}",
                      f"    %t{i}:{1 + loops} = transform.structured.tile_using_for %m{i} tile_sizes {sizes} "
                      f": ({ANY_OP}) -> ({types})"]
            # The blocks write disjoint parts of the output: a threaded entry may share any block
            # loop among its threads (parallel.choose_split picks the best balanced).
            lines += [f"    transform.annotate %t{i}#{1 + j} \"{THREAD_SPLIT}\" : {ANY_OP}" for j in range(loops)]
        lines += ["    transform.yield", "  }", "}"]
        with module_op.context, ir.Location.unknown():
            try:
                apply_transform_script(module_op, "\n".join(lines) + "\n")
            except Exception as e:  # noqa: BLE001 - the interpreter reports through a generic exception
                raise self.error(f"{self.name}: blocking a transposed read failed: {e}") from None
            for op in walk(module_op, _OPS):
                for i in range(len(blocked)):
                    if f"{_TAG}_{i}" in op.attributes:
                        del op.attributes[f"{_TAG}_{i}"]
        self.count("elementwise ops blocked", len(blocked))
