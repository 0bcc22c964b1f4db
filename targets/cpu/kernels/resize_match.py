"""Reads a bilinear resize (the `etc.cpu.resize` generic of lowering/resize.py) into what the
vector kernel needs: the input, the shapes, the row tables, and per block of output columns the
input columns it reads and its constant shuffle masks and weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from etc.targets.cpu.kernels.window_match import NotTaken
from etc.targets.cpu.lowering.resize import RESIZE_ATTR, read_marker


@dataclass(frozen=True)
class ColumnBlock:
    """Output columns [start, start + width) of every output row: they read the input row's
    columns [base, base + span), loaded as `loads` vectors (1 or 2) and blended vertically; lane
    k of the output takes lanes taps0[k] and taps1[k] of those vectors with weights w0[k], w1[k]."""
    start: int
    width: int
    base: int
    loads: int
    taps0: tuple
    taps1: tuple
    w0: tuple
    w1: tuple


@dataclass
class Resize:
    op: object  # the marked linalg.generic
    x: ir.Value  # the [N, C, H, W] input
    shape: tuple  # N, C, H, W
    out_hw: tuple  # OH, OW
    lanes: int
    rows: tuple  # (rows0, rows1, row_weights0, row_weights1) arrays over the output rows
    blocks: list  # ColumnBlock per `lanes` output columns


def _input_of(op) -> ir.Value:
    """The tensor the generic's body gathers from (the one rank-4 tensor.extract source)."""
    sources = set()
    found = []

    def visit(inner):
        if inner.name == "tensor.extract" and ir.RankedTensorType(inner.operands[0].type).rank == 4:
            found.append(inner.operands[0])
            sources.add(inner.operands[0].get_name())
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    if len(sources) != 1:
        raise NotTaken(f"the resize gathers from {len(sources)} tensors, not one")
    return found[0]


def analyze(op, lanes: int) -> Resize:
    """The kernel's plan for the marked generic `op`, or NotTaken with the reason."""
    if lanes < 2:
        raise NotTaken("the target has no vector unit")
    table = read_marker(op.attributes[RESIZE_ATTR])
    x = _input_of(op)
    shape = tuple(ir.RankedTensorType(x.type).shape)
    out_shape = tuple(ir.RankedTensorType(op.results[0].type).shape)
    blocks = []
    for start in range(0, out_shape[3], lanes):
        width = min(lanes, out_shape[3] - start)
        cols0, cols1 = table["cols0"][start:start + width], table["cols1"][start:start + width]
        base = int(cols0.min())
        span = int(max(cols0.max(), cols1.max())) + 1 - base
        if span > 2 * lanes:
            raise NotTaken(f"{width} output columns read {span} input columns (more than two vectors: "
                           f"downscaling by more than 2x)")
        pad = lanes - width  # lanes past the row's end: any tap, weight 0, never stored
        blocks.append(ColumnBlock(
            start, width, base, 1 if span <= lanes else 2,
            tuple(int(v) for v in np.concatenate([cols0 - base, np.zeros(pad, np.int64)])),
            tuple(int(v) for v in np.concatenate([cols1 - base, np.zeros(pad, np.int64)])),
            tuple(float(v) for v in np.concatenate([table["col_weights0"][start:start + width], np.zeros(pad)])),
            tuple(float(v) for v in np.concatenate([table["col_weights1"][start:start + width], np.zeros(pad)]))))
    rows = (table["rows0"], table["rows1"], table["row_weights0"], table["row_weights1"])
    return Resize(op, x, shape, out_shape[2:], lanes, rows, blocks)


def describe(r: Resize) -> str:
    """One line for `etc.cpu.resize_kernel` on the kernel's loop."""
    n, c, h, w = r.shape
    return (f"bilinear {h}x{w} -> {r.out_hw[0]}x{r.out_hw[1]}, {n * c} planes, {len(r.blocks)} column blocks of "
            f"{r.lanes} ({sum(b.loads == 2 for b in r.blocks)} reading two vectors)")
