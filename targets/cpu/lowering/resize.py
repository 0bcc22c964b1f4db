"""Bilinear resizing (`F.interpolate(mode="bilinear")`, DeepLab's decoder) as a separable gather.

ATen's bilinear map is separable: output row oy reads input rows y0[oy] and y1[oy] with weights
wy0[oy] and wy1[oy], output column ox reads columns x0[ox] and x1[ox] with wx0[ox] and wx1[ox],
and

    out[n, c, oy, ox] = wy0 (wx0 x[y0, x0] + wx1 x[y0, x1]) + wy1 (wx0 x[y1, x0] + wx1 x[y1, x1])

`taps` computes one axis' table exactly as ATen does (float32; `area_pixel_compute_scale` and
`area_pixel_compute_source_index`: the given scale factor's inverse when one was given, as
`recompute_scale_factor=None` keeps it, else in/out; align_corners maps the corners onto each
other). torch-mlir's own lowering of `__interpolate` recomputes both coordinates and floors them
for every output element (~20 scalar ops and four scalar loads each, 2.3-2.6x XNNPACK's time on
DeepLab's 256 channels 14 -> 28); here the tables are computed once at compile time.

`lower_bilinear` writes the gather as one `linalg.generic` reading the tables as constants and
marks it `etc.cpu.resize` with them (`TABLE_KEYS`): etc-cpu-resize-kernels turns a marked
generic into the vector kernel (kernels/resize_kernel.py) or records why not, leaving this
generic as the loops that run it.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.targets.cpu.kernel_ir import KernelText, splice, tensor_type

RESIZE_ATTR = "etc.cpu.resize"
# The marker's tables: per output row / column, the two input indices and their weights.
TABLE_KEYS = ("rows0", "rows1", "row_weights0", "row_weights1", "cols0", "cols1", "col_weights0", "col_weights1")


def taps(size_in: int, size_out: int, align_corners: bool, scale: float | None):
    """One axis of ATen's bilinear map: (i0, i1, w0, w1) per output index, i as int64, w as float32."""
    f32 = np.float32
    if align_corners:
        ratio = f32((size_in - 1) / (size_out - 1)) if size_out > 1 else f32(0)
    else:
        ratio = f32(1.0 / scale) if scale is not None and scale > 0 else f32(size_in / size_out)
    dst = np.arange(size_out, dtype=f32)
    if align_corners:
        src = ratio * dst
    else:
        src = np.maximum(ratio * (dst + f32(0.5)) - f32(0.5), f32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), size_in - 1)  # ATen's guard_index_and_lambda
    i1 = i0 + (i0 < size_in - 1)
    w1 = np.clip(src - i0.astype(f32), f32(0), f32(1)).astype(f32)
    w0 = (f32(1) - w1).astype(f32)
    return i0, i1, w0, w1


def tables(in_hw, out_hw, align_corners: bool, scales) -> dict:
    """{TABLE_KEYS: arrays} of a resize from `in_hw` to `out_hw` (`scales`: None or (sh, sw))."""
    sh, sw = (None, None) if scales is None else scales
    rows, cols = taps(in_hw[0], out_hw[0], align_corners, sh), taps(in_hw[1], out_hw[1], align_corners, sw)
    return dict(zip(TABLE_KEYS, rows + cols))


def marker(table: dict) -> ir.Attribute:
    """The `etc.cpu.resize` attribute holding `table`."""
    entries = {}
    for key in TABLE_KEYS:
        values = table[key]
        entries[key] = (ir.DenseI64ArrayAttr.get([int(v) for v in values]) if values.dtype.kind == "i"
                        else ir.DenseF32ArrayAttr.get([float(v) for v in values]))
    return ir.DictAttr.get(entries)


def read_marker(attr) -> dict:
    """`marker`'s tables back as numpy arrays."""
    d = ir.DictAttr(attr)
    out = {}
    for key in TABLE_KEYS:
        a = d[key]
        out[key] = (np.array(list(ir.DenseI64ArrayAttr(a)), np.int64) if isinstance(a, ir.DenseI64ArrayAttr)
                    else np.array(list(ir.DenseF32ArrayAttr(a)), np.float32))
    return out


def _index_table(values) -> str:
    return f"dense<[{', '.join(str(int(v)) for v in values)}]> : tensor<{len(values)}xindex>"


def _f32_table(values) -> str:
    return f"dense<[{', '.join(repr(float(v)) for v in values)}]> : tensor<{len(values)}xf32>"


def lower_bilinear(x: ir.Value, shape: list, out_hw, table: dict, before) -> ir.Value:
    """The marked gather generic of a bilinear resize of `x` ([N, C, H, W] f32) to `out_hw`, in
    front of `before`; returns its result."""
    n, c, h, w = shape
    oh, ow = out_hw
    x_t, out_t = tensor_type(shape), tensor_type([n, c, oh, ow])
    t = KernelText()
    names = {}
    for key in TABLE_KEYS:
        names[key] = t.fresh("tab")
        literal = _index_table(table[key]) if key in ("rows0", "rows1", "cols0", "cols1") else _f32_table(table[key])
        t.emit(f"{names[key]} = arith.constant {literal}")
    t.emit(f"%empty = tensor.empty() : {out_t}")
    t.emit(f"%out = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], "
           f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\"]}} outs(%empty : {out_t}) {{")
    with t.nested():
        t.emit("^bb0(%o: f32):")
        for d in range(4):
            t.emit(f"%i{d} = linalg.index {d} : index")
        picked = {}
        for key in TABLE_KEYS:
            along = "%i2" if key.startswith("row") else "%i3"
            element = "index" if key in ("rows0", "rows1", "cols0", "cols1") else "f32"
            picked[key] = t.fresh("t")
            t.emit(f"{picked[key]} = tensor.extract {names[key]}[{along}] : tensor<{oh if along == '%i2' else ow}x"
                   f"{element}>")
        taps_ = {}
        for r in "01":
            for k in "01":
                v = taps_[r + k] = t.fresh("v")
                t.emit(f"{v} = tensor.extract %x[%i0, %i1, {picked['rows' + r]}, {picked['cols' + k]}] : {x_t}")

        def mul(a, b):
            name = t.fresh("m")
            t.emit(f"{name} = arith.mulf {a}, {b} : f32")
            return name

        def add(a, b):
            name = t.fresh("s")
            t.emit(f"{name} = arith.addf {a}, {b} : f32")
            return name

        rows = [add(mul(picked["col_weights0"], taps_[r + "0"]), mul(picked["col_weights1"], taps_[r + "1"]))
                for r in "01"]
        result = add(mul(picked["row_weights0"], rows[0]), mul(picked["row_weights1"], rows[1]))
        t.emit(f"linalg.yield {result} : f32")
    t.emit(f"}} -> {out_t}")
    (result,) = splice(t.function("__etc_resize", [f"%x: {x_t}"], [out_t], ["%out"]), [x], before)
    result.owner.attributes[RESIZE_ATTR] = marker(table)
    return result
