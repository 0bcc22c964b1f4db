"""The bilinear resize kernel: vectors along the output row, the taps' tables computed at compile time.

A loop nest over (n, channel, output row). Per output row, its two input rows and their weights
are read from constant tables (once per row); per block of `lanes` output columns (static,
unrolled), the input columns the block reads (at most two vectors: upsampling, or downsampling
by up to 2x) are loaded from both rows and blended vertically (one mul + one fma per vector),
then each output lane picks its two horizontal taps out of the blended vectors with a constant
`vector.shuffle` (one vpermps / vpermt2ps on AVX-512) and blends them with constant weight
vectors: per `lanes` outputs, two or four loads, two shuffles, four arithmetic ops, one store.
Reads past the input row's end and the output row's last partial block are masked. The channel
loop carries `etc.thread_split`.
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, tensor_type, vector_type
from etc.targets.cpu.kernels.resize_match import Resize
from etc.targets.cpu.parallel import THREAD_SPLIT


def _vector_constant(values, lanes: int, element: str = "f32") -> str:
    items = ", ".join(repr(float(v)) if element == "f32" else str(int(v)) for v in values)
    return f"dense<[{items}]> : {vector_type(lanes, element)}"


class ResizeKernel:
    """The text of one resize kernel as a function, spliced in place of the marked generic."""

    def __init__(self, r: Resize):
        self.r, self.t = r, KernelText()
        n, c, h, w = r.shape
        self.x_t = tensor_type(list(r.shape))
        self.out_t = tensor_type([n, c, *r.out_hw])

    def function(self, name: str) -> str:
        r, t = self.r, self.t
        lanes, vec = r.lanes, vector_type(r.lanes)
        n, c, h, w = r.shape
        oh = r.out_hw[0]
        t.emit("%zero = arith.constant 0.0 : f32")
        t.emit(f"%empty = tensor.empty() : {self.out_t}")
        tables = {}
        for key, values in zip(("y0", "y1", "wy0", "wy1"), r.rows):
            tables[key] = t.fresh("tab")
            if key.startswith("w"):
                literal = f"dense<[{', '.join(repr(float(v)) for v in values)}]> : tensor<{oh}xf32>"
            else:
                literal = f"dense<[{', '.join(str(int(v)) for v in values)}]> : tensor<{oh}xindex>"
            t.emit(f"{tables[key]} = arith.constant {literal}")
        weights = []
        for b in r.blocks:
            w0, w1 = t.fresh("wx"), t.fresh("wx")
            t.emit(f"{w0} = arith.constant {_vector_constant(b.w0, lanes)}")
            t.emit(f"{w1} = arith.constant {_vector_constant(b.w1, lanes)}")
            weights.append((w0, w1))
        # Planes are independent: threads take chunks of them.
        with t.loop("%nn", 0, n, 1, "%o0", "%empty", self.out_t, "res") as batch, \
                t.loop("%cc", 0, c, 1, "%o1", "%o0", self.out_t, "pl", THREAD_SPLIT) as planes, \
                t.loop("%oy", 0, oh, 1, "%o2", "%o1", self.out_t, "rows") as rows:
            picked = {}
            for key, element in (("y0", "index"), ("y1", "index"), ("wy0", "f32"), ("wy1", "f32")):
                picked[key] = t.fresh(key)
                t.emit(f"{picked[key]} = tensor.extract {tables[key]}[%oy] : tensor<{oh}x{element}>")
            a, b_ = t.broadcast(picked["wy0"], lanes), t.broadcast(picked["wy1"], lanes)
            out = "%o2"
            for block, (w0, w1) in zip(r.blocks, weights):
                out = self.block(out, block, picked, a, b_, w0, w1)
            rows.yields(out)
            planes.yields(rows.result)
            batch.yields(planes.result)
        return t.function(name, [f"%x: {self.x_t}"], [self.out_t], [batch.result])

    def block(self, out: str, b, picked: dict, a: str, b_: str, w0: str, w1: str) -> str:
        """One block of output columns of the current row: loads, vertical blend, shuffles, store."""
        r, t = self.r, self.t
        lanes, vec = r.lanes, vector_type(r.lanes)
        w = r.shape[3]
        blended = []
        for k in range(b.loads):
            col = b.base + k * lanes
            row_vectors = [t.read("%x", f"%nn, %cc, {picked[y]}, {t.index(col)}", "%zero", self.x_t, vec,
                                  col + lanes <= w, "x") for y in ("y0", "y1")]
            top, mixed = t.fresh("top"), t.fresh("col")
            t.emit(f"{top} = arith.mulf {row_vectors[0]}, {a} : {vec}")
            t.emit(f"{mixed} = math.fma {row_vectors[1]}, {b_}, {top} : {vec}")
            blended.append(mixed)
        second = blended[1] if b.loads == 2 else blended[0]
        taps = []
        for indices in (b.taps0, b.taps1):
            s = t.fresh("tap")
            t.emit(f"{s} = vector.shuffle {blended[0]}, {second} [{', '.join(map(str, indices))}] : {vec}, {vec}")
            taps.append(s)
        left, value = t.fresh("l"), t.fresh("y")
        t.emit(f"{left} = arith.mulf {taps[0]}, {w0} : {vec}")
        t.emit(f"{value} = math.fma {taps[1]}, {w1}, {left} : {vec}")
        return t.write(value, out, f"%nn, %cc, %oy, {t.index(b.start)}", vec, self.out_t, b.width == lanes)
