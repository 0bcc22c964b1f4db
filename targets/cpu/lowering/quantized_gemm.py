"""Int8 convolutions and linear layers -> linalg: the qgemm (for etc-cpu-int8-kernels), a window generic,
or the f32 window kernel for an exact depthwise convolution.

The qgemm layout, C[M, N] = A[M, K] x B[K, N]:
  A  [M, KB, 4]        row m's K values in groups of 4 (K padded with zeros to KB * 4), the
                       operand the kernel broadcasts 4 bytes at a time;
  B  [NB, KB, 16, 4]   16-column panels, each column's 4 K values adjacent: one 64-byte row of
                       a panel is what `vpdpbusd` multiplies against the broadcast group.
The dot product multiplies an unsigned byte by a signed one, so the activation operand holds
x + 128 (x xor 0x80, an unsigned byte) and the weights stay signed. As ExecuTorch's reference
kernels compute sum((x - zx) * w) (symmetric int8 weights), the kernel subtracts
(128 + zx) * sum_k w[c, k] per output channel (computed here from the weight, an i32
constant) before requantizing: y = clamp(roundeven(float(acc - corr[c]) * mult[c] + bias[c] /
s_out) + z_out), mult[c] = s_x * s_w[c] / s_out. Convolutions: A is the filter [F, C*KH*KW]
(packed once when the blob is built: its layout chain is a weight's), B the image's im2col
(an affine gather marked `etc.cpu.im2col`, which etc-cpu-int8-kernels packs per call straight from
the padded image); linear layers: A the activation rows, B the weight (packed once).
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.kernel_ir import KernelText, dense_literal, iterators, tensor_type
from etc.targets.cpu.kernels.int8_match import GROUP, IM2COL, PANEL, QGEMM, QWINDOW, REQUANT, taps_first
from etc.targets.cpu.lowering.quantized import CONV, QuantizedOp, channel_params, requant_body, requant_constants


def qgemm(t: KernelText, a: str, b: str, M: int, N: int, KB: int, a_unsigned: bool, per: str,
           params: tuple, zp: int, lo: int, hi: int, kind: str) -> str:
    """acc[M, NB, 16] = A x B (i32), cut to [M, N], requantized to i8: the marked pair
    etc-cpu-int8-kernels rewrites. Returns the [M, N] i8 value."""
    NB = -(-N // PANEL)
    zero = t.const(0, "i32")
    empty, acc0, acc = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{empty} = tensor.empty() : {tensor_type([M, NB, PANEL], 'i32')}")
    t.emit(f"{acc0} = linalg.fill ins({zero} : i32) outs({empty} : {tensor_type([M, NB, PANEL], 'i32')}) "
      f"-> {tensor_type([M, NB, PANEL], 'i32')}")
    ea, eb = ("arith.extui", "arith.extsi") if a_unsigned else ("arith.extsi", "arith.extui")
    t.emit(f"{acc} = linalg.generic {{indexing_maps = [affine_map<(m, nb, nl, kb, kl) -> (m, kb, kl)>, "
      f"affine_map<(m, nb, nl, kb, kl) -> (nb, kb, nl, kl)>, affine_map<(m, nb, nl, kb, kl) -> (m, nb, nl)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\", \"reduction\"]}} "
      f"ins({a}, {b} : {tensor_type([M, KB, GROUP], 'i8')}, {tensor_type([NB, KB, PANEL, GROUP], 'i8')}) "
      f"outs({acc0} : {tensor_type([M, NB, PANEL], 'i32')}) attrs = {{{QGEMM} = {{kind = \"{kind}\", "
      f"a_unsigned = {str(a_unsigned).lower()}}}}} {{")
    t.emit("^bb0(%qa: i8, %qb: i8, %qc: i32):")
    t.emit(f"  %qa32 = {ea} %qa : i8 to i32")
    t.emit(f"  %qb32 = {eb} %qb : i8 to i32")
    t.emit("  %qm = arith.muli %qa32, %qb32 : i32")
    t.emit("  %qs = arith.addi %qc, %qm : i32")
    t.emit("  linalg.yield %qs : i32")
    t.emit(f"}} -> {tensor_type([M, NB, PANEL], 'i32')}")
    flat = t.fresh()
    t.emit(f"{flat} = tensor.collapse_shape {acc} [[0], [1, 2]] : {tensor_type([M, NB, PANEL], 'i32')} "
      f"into {tensor_type([M, NB * PANEL], 'i32')}")
    cut = flat
    if NB * PANEL != N:
        cut = t.fresh()
        t.emit(f"{cut} = tensor.extract_slice {flat}[0, 0] [{M}, {N}] [1, 1] : {tensor_type([M, NB * PANEL], 'i32')} "
          f"to {tensor_type([M, N], 'i32')}")
    channels = M if per == "row" else N
    assert all(array.shape == (channels,) for array in params)
    fits = str(_scaled_fits_i32(params, KB * GROUP)).lower()
    return _requantize(t, cut, [M, N], "(m, n)", "(m)" if per == "row" else "(n)", params, (zp, lo, hi),
                       f"{REQUANT} = {{per = \"{per}\", zero_point = {zp} : i64, min = {lo} : i64, max = {hi} : i64, "
                       f"fits_i32 = {fits}}}")


def _scaled_fits_i32(params: tuple, K: int) -> bool:
    """Whether every scaled accumulator (acc - corr) * mult + bias stays well inside i32, whatever
    the inputs: |acc - corr| <= K * 255 * 128 (a zero-point-shifted activation times a weight).
    Then the kernel may round before clamping and let the packs' saturation do the i8 clamp."""
    _, mult, bias = params
    bound = K * 255 * 128 * float(np.abs(mult).max(initial=0)) + float(np.abs(bias).max(initial=0))
    return bound < 2.0 ** 30


def _requantize(t: KernelText, acc: str, shape: list, dims: str, channel: str, params: tuple, clamp: tuple,
                attrs: str = "") -> str:
    """The requantization generic of the i32 accumulator `acc` (`shape`, loops `dims`): its per-channel
    (corr, mult, bias) `params` as constants read along `channel`, the output's (zero point, min,
    max) `clamp`; `attrs` on the generic. Returns its i8 result."""
    names = []
    for array, element in zip(params, ("i32", "f32", "f32")):
        name = t.fresh("p")
        t.emit(f"{name} = arith.constant {dense_literal(array, element)}")
        names.append(name)
    requant_constants(t, *clamp)
    out_empty, out = t.fresh(), t.fresh()
    t.emit(f"{out_empty} = tensor.empty() : {tensor_type(shape, 'i8')}")
    p_shape = list(params[0].shape)
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<{dims} -> {dims}>, affine_map<{dims} -> {channel}>, "
           f"affine_map<{dims} -> {channel}>, affine_map<{dims} -> {channel}>, affine_map<{dims} -> {dims}>], "
           f"iterator_types = [{iterators(len(shape))}]}} "
           f"ins({acc}, {names[0]}, {names[1]}, {names[2]} : {tensor_type(shape, 'i32')}, "
           f"{tensor_type(p_shape, 'i32')}, "
           f"{tensor_type(p_shape, 'f32')}, {tensor_type(p_shape, 'f32')}) outs({out_empty} : "
           f"{tensor_type(shape, 'i8')}) "
           + (f"attrs = {{{attrs}}} " if attrs else "") + "{")
    t.emit("^bb0(%ra: i32, %rc: i32, %rm: f32, %rb: f32, %ro: i8):")
    y = requant_body(t, "%ra", "%rc", "%rm", "%rb")
    t.emit(f"  linalg.yield {y} : i8")
    t.emit(f"}} -> {tensor_type(shape, 'i8')}")
    return out


def _pair(values) -> tuple:
    """A conv's stride / padding / dilation as (h, w): ATen's one value stands for both (a
    `padding="same"` 1x1 conv exports padding [0])."""
    values = tuple(values)
    return values * 2 if len(values) == 1 else values


def _conv_geometry(a: dict, result_type) -> tuple:
    """(input shape, output shape, (sh, sw), (ph, pw), (dh, dw), input zero point) of a folded conv."""
    return (list(ir.RankedTensorType(a["input"].type).shape), list(result_type.shape),
            _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"]), int(a["input_zero_point"]))


def _conv_qgemm(q: QuantizedOp, weight: np.ndarray) -> ir.Value:
    a = q.args
    t = KernelText()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, q.result_type)
    nb_, C, H, W = x_shape
    F, _, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    K, P = C * KH * KW, OH * OW
    KB = -(-K // GROUP)
    NB = -(-P // PANEL)
    fill = t.const(zx, "i8")
    xp, (_, _, Hp, Wp) = t.pad("%arg0", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], fill, "i8")
    # K tap by tap (k = (kh, kw, c)) where the kernel can read B in place (int8_match.taps_first),
    # otherwise k = (c, kh, kw), the weight's own order.
    tapwise = taps_first(C, KH, KW, (sh, sw), P)
    # The filter as A [F, KB, 4]: a layout chain of the weight, packed when the blob is built.
    w, w_shape = ("%arg1", [F, C, KH, KW])
    if tapwise:
        w, w_shape = t.transpose(w, w_shape, [0, 2, 3, 1], "i8")
    wf = t.fresh()
    t.emit(f"{wf} = tensor.collapse_shape {w} [[0], [1, 2, 3]] : {tensor_type(w_shape, 'i8')} into "
           f"{tensor_type([F, K], 'i8')}")
    zero8 = t.const(0, "i8")
    wp, _ = t.pad(wf, [F, K], [0, 0], [0, KB * GROUP - K], zero8, "i8")
    wa = t.fresh()
    t.emit(f"{wa} = tensor.expand_shape {wp} [[0], [1, 2]] output_shape [{F}, {KB}, {GROUP}] : "
      f"{tensor_type([F, KB * GROUP], 'i8')} into {tensor_type([F, KB, GROUP], 'i8')}")
    params = channel_params(q, a, weight, zx)
    dims, order = ("(kh, kw, c, oh, ow)", [KH, KW, C]) if tapwise else ("(c, kh, kw, oh, ow)", [C, KH, KW])
    gathered = tensor_type(order + [OH, OW], "i8")
    marks = f"stride = array<i64: {sh}, {sw}>, dilation = array<i64: {dh}, {dw}>" + (", taps_first" if tapwise else "")
    images = []
    for image in range(nb_):
        xs = t.fresh()
        t.emit(f"{xs} = tensor.extract_slice {xp}[{image}, 0, 0, 0] [1, {C}, {Hp}, {Wp}] [1, 1, 1, 1] : "
          f"{tensor_type([nb_, C, Hp, Wp], 'i8')} to {tensor_type([C, Hp, Wp], 'i8')}")
        # im2col of the image, unsigned (x xor 0x80), as an affine gather [K..., OH, OW] (marked
        # with its geometry), then B [NB, KB, 16, 4]: zero padded to whole groups and panels, one
        # transpose. etc-cpu-int8-kernels packs B straight from the image (the gather is never built).
        ce, col = t.fresh(), t.fresh()
        t.emit(f"{ce} = tensor.empty() : {gathered}")
        t.emit(f"{col} = linalg.generic {{indexing_maps = [affine_map<{dims} -> (c, oh * {sh} + kh * {dh}, "
          f"ow * {sw} + kw * {dw})>, affine_map<{dims} -> {dims}>], iterator_types = [{iterators(5)}]}} "
          f"ins({xs} : {tensor_type([C, Hp, Wp], 'i8')}) outs({ce} : {gathered}) "
          f"attrs = {{{IM2COL} = {{{marks}}}}} {{")
        t.emit("^bb0(%cx: i8, %co: i8):")
        t.emit("  %cflip = arith.constant -128 : i8")
        t.emit("  %cu = arith.xori %cx, %cflip : i8")
        t.emit("  linalg.yield %cu : i8")
        t.emit(f"}} -> {gathered}")
        kp = t.fresh()
        t.emit(f"{kp} = tensor.collapse_shape {col} [[0, 1, 2], [3, 4]] : {gathered} into {tensor_type([K, P], 'i8')}")
        padded, _ = t.pad(kp, [K, P], [0, 0], [KB * GROUP - K, NB * PANEL - P], zero8, "i8")
        ex, pe, bp = t.fresh(), t.fresh(), t.fresh()
        t.emit(f"{ex} = tensor.expand_shape {padded} [[0, 1], [2, 3]] output_shape [{KB}, {GROUP}, {NB}, {PANEL}] : "
          f"{tensor_type([KB * GROUP, NB * PANEL], 'i8')} into {tensor_type([KB, GROUP, NB, PANEL], 'i8')}")
        t.emit(f"{pe} = tensor.empty() : {tensor_type([NB, KB, PANEL, GROUP], 'i8')}")
        t.emit(f"{bp} = linalg.transpose ins({ex} : {tensor_type([KB, GROUP, NB, PANEL], 'i8')}) "
          f"outs({pe} : {tensor_type([NB, KB, PANEL, GROUP], 'i8')}) permutation = [2, 0, 3, 1]")
        y = qgemm(t, wa, bp, F, P, KB, False, "row", params, int(a["output_zero_point"]), int(a["output_min"]),
                   int(a["output_max"]), "convolution")
        img = t.fresh()
        t.emit(f"{img} = tensor.expand_shape {y} [[0, 1], [2, 3]] output_shape [1, {F}, {OH}, {OW}] : "
          f"{tensor_type([F, P], 'i8')} into {tensor_type([1, F, OH, OW], 'i8')}")
        images.append(img)
    if len(images) == 1:
        t.emit(f"%result = tensor.cast {images[0]} : {tensor_type(out_shape, 'i8')} to {tensor_type(out_shape, 'i8')}")
    else:
        t.emit(f"%result = tensor.concat dim(0) {', '.join(images)} : "
          f"({', '.join([tensor_type([1, F, OH, OW], 'i8')] * len(images))}) -> {tensor_type(out_shape, 'i8')}")
    return q.splice(t.text(), [a["input"], a["weight"]])


def _conv_window(q: QuantizedOp, weight: np.ndarray) -> ir.Value:
    a = q.args
    """Depthwise and grouped int8 convolutions: one generic with i32 accumulation over
    (x - zx) * w, then the requantization."""
    t = KernelText()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, q.result_type)
    nb_, C, H, W = x_shape
    F, Cg, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    G = int(a["groups"])
    Fg = F // G
    fill = t.const(zx, "i8")
    xp, (_, _, Hp, Wp) = t.pad("%arg0", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], fill, "i8")
    xg, wg = t.fresh(), t.fresh()
    t.emit(f"{xg} = tensor.expand_shape {xp} [[0], [1, 2], [3], [4]] output_shape [{nb_}, {G}, {Cg}, {Hp}, {Wp}] : "
      f"{tensor_type([nb_, C, Hp, Wp], 'i8')} into {tensor_type([nb_, G, Cg, Hp, Wp], 'i8')}")
    t.emit(f"{wg} = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [{G}, {Fg}, {Cg}, {KH}, {KW}] : "
      f"{tensor_type([F, Cg, KH, KW], 'i8')} into {tensor_type([G, Fg, Cg, KH, KW], 'i8')}")
    acc_shape = [nb_, G, Fg, OH, OW]
    zero, zx32 = t.const(0, "i32"), t.const(zx, "i32")
    empty, acc0, acc = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{empty} = tensor.empty() : {tensor_type(acc_shape, 'i32')}")
    t.emit(f"{acc0} = linalg.fill ins({zero} : i32) outs({empty} : {tensor_type(acc_shape, 'i32')}) -> "
           f"{tensor_type(acc_shape, 'i32')}")
    dims = "(b, g, j, oh, ow, c, kh, kw)"
    t.emit(f"{acc} = linalg.generic {{indexing_maps = [affine_map<{dims} -> (b, g, c, oh * {sh} + kh * {dh}, "
      f"ow * {sw} + kw * {dw})>, affine_map<{dims} -> (g, j, c, kh, kw)>, affine_map<{dims} -> (b, g, j, oh, ow)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\", "
      f"\"reduction\", \"reduction\"]}} ins({xg}, {wg} : {tensor_type([nb_, G, Cg, Hp, Wp], 'i8')}, "
      f"{tensor_type([G, Fg, Cg, KH, KW], 'i8')}) outs({acc0} : {tensor_type(acc_shape, 'i32')}) "
      f"attrs = {{{QWINDOW} = {{groups = {G} : i64}}}} {{")
    t.emit("^bb0(%wx: i8, %ww: i8, %wc: i32):")
    t.emit("  %wx32 = arith.extsi %wx : i8 to i32")
    t.emit(f"  %wxc = arith.subi %wx32, {zx32} : i32")
    t.emit("  %ww32 = arith.extsi %ww : i8 to i32")
    t.emit("  %wm = arith.muli %wxc, %ww32 : i32")
    t.emit("  %ws = arith.addi %wc, %wm : i32")
    t.emit("  linalg.yield %ws : i32")
    t.emit(f"}} -> {tensor_type(acc_shape, 'i32')}")
    params = tuple(array.reshape(G, Fg) for array in channel_params(q, a, weight, None))
    clamp = int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"])
    out = _requantize(t, acc, acc_shape, "(b, g, j, oh, ow)", "(g, j)", params, clamp)
    t.emit(f"%result = tensor.collapse_shape {out} [[0], [1, 2], [3], [4]] : {tensor_type(acc_shape, 'i8')} "
      f"into {tensor_type(out_shape, 'i8')}")
    return q.splice(t.text(), [a["input"], a["weight"]])


def _conv_depthwise_f32(q: QuantizedOp, weight: np.ndarray) -> ir.Value:
    a = q.args
    """A depthwise int8 convolution on the f32 window kernel (etc-cpu-window-kernels), exactly: the
    taps (x - zx) * w are integers below 2^16 in magnitude and their sums stay below 2^24 (see
    `_exact_in_f32`), so float32 computes the same integer accumulator; the requantization is then
    the qgemm epilogue's (fma, roundeven, zero point, clamp) on it."""
    t = KernelText()
    x_shape, out_shape, (sh, sw), (ph, pw), (dh, dw), zx = _conv_geometry(a, q.result_type)
    nb_, C, H, W = x_shape
    _, _, KH, KW = weight.shape
    _, _, OH, OW = out_shape
    n = 4
    ident = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
    t.emit(f"%zx = arith.constant {zx} : i32")
    t.emit(f"%xe = tensor.empty() : {tensor_type(x_shape, 'f32')}")
    t.emit(f"%xf = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = [{iterators(n)}]}} "
      f"ins(%arg0 : {tensor_type(x_shape, 'i8')}) outs(%xe : {tensor_type(x_shape, 'f32')}) {{")
    t.emit("^bb0(%x: i8, %o: f32):")
    t.emit("  %x32 = arith.extsi %x : i8 to i32")
    t.emit("  %xc = arith.subi %x32, %zx : i32")
    t.emit("  %y = arith.sitofp %xc : i32 to f32")
    t.emit("  linalg.yield %y : f32")
    t.emit(f"}} -> {tensor_type(x_shape, 'f32')}")
    zero = t.const("0.0", "f32")
    xp, (_, _, Hp, Wp) = t.pad("%xf", x_shape, [0, 0, ph, pw], [0, 0, ph, pw], zero, "f32")
    # The filter widened from the int8 weight argument: etc-cpu-prepack-constants folds the cast
    # when the blob is built, which stores it as int8 again (`blob.pack_constants`).
    t.emit(f"%wc = tensor.collapse_shape %arg1 [[0, 1], [2], [3]] : {tensor_type([C, 1, KH, KW], 'i8')} into "
           f"{tensor_type([C, KH, KW], 'i8')}")
    t.emit(f"%we = tensor.empty() : {tensor_type([C, KH, KW], 'f32')}")
    ident3 = "affine_map<(d0, d1, d2) -> (d0, d1, d2)>"
    t.emit(f"%w = linalg.generic {{indexing_maps = [{ident3}, {ident3}], iterator_types = [{iterators(3)}]}} "
           f"ins(%wc : {tensor_type([C, KH, KW], 'i8')}) outs(%we : {tensor_type([C, KH, KW], 'f32')}) {{")
    t.emit("^bb0(%wi: i8, %wo: f32):")
    t.emit("  %wf = arith.sitofp %wi : i8 to f32")
    t.emit("  linalg.yield %wf : f32")
    t.emit(f"}} -> {tensor_type([C, KH, KW], 'f32')}")
    t.emit(f"%ie = tensor.empty() : {tensor_type(out_shape, 'f32')}")
    t.emit(f"%init = linalg.fill ins({zero} : f32) outs(%ie : {tensor_type(out_shape, 'f32')}) -> "
           f"{tensor_type(out_shape, 'f32')}")
    t.emit(f"%acc = linalg.depthwise_conv_2d_nchw_chw {{dilations = dense<[{dh}, {dw}]> : tensor<2xi64>, "
      f"strides = dense<[{sh}, {sw}]> : tensor<2xi64>}} ins({xp}, %w : {tensor_type([nb_, C, Hp, Wp], 'f32')}, "
      f"{tensor_type([C, KH, KW], 'f32')}) outs(%init : {tensor_type(out_shape, 'f32')}) -> "
      f"{tensor_type(out_shape, 'f32')}")
    _, mult, bias = channel_params(q, a, weight, None)
    t.emit(f"%mult = arith.constant {dense_literal(mult, 'f32')}")
    t.emit(f"%bias = arith.constant {dense_literal(bias, 'f32')}")
    zp, lo, hi = int(a["output_zero_point"]), int(a["output_min"]), int(a["output_max"])
    requant_constants(t, zp, lo, hi)
    chan = "affine_map<(d0, d1, d2, d3) -> (d1)>"
    t.emit(f"%oe = tensor.empty() : {tensor_type(out_shape, 'i8')}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [{ident}, {chan}, {chan}, {ident}], "
      f"iterator_types = [{iterators(n)}]}} ins(%acc, %mult, %bias : {tensor_type(out_shape, 'f32')}, "
      f"{tensor_type([C], 'f32')}, "
      f"{tensor_type([C], 'f32')}) outs(%oe : {tensor_type(out_shape, 'i8')}) {{")
    t.emit("^bb0(%ra: f32, %rm: f32, %rb: f32, %ro: i8):")
    y = requant_body(t, "%ra", None, "%rm", "%rb")
    t.emit(f"  linalg.yield {y} : i8")
    t.emit(f"}} -> {tensor_type(out_shape, 'i8')}")
    return q.splice(t.text(), [a["input"], a["weight"]])


def _shape0(value) -> list:
    return list(ir.RankedTensorType(value.type).shape)


def _exact_in_f32(weight: np.ndarray) -> bool:
    """Every partial sum of (x - zx) * w (|x - zx| <= 255) is an integer float32 holds exactly."""
    taps = weight.reshape(weight.shape[0], -1)
    return int(np.abs(taps.astype(np.int64)).sum(axis=1).max(initial=0)) * 255 < 2 ** 24


def lower_conv(q: QuantizedOp) -> ir.Value:
    a = q.args
    weight = q.data(a["weight"], "weight")
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise LoweringError(f"{CONV}: the weight must be int8 [F, C, KH, KW]")
    groups = int(a["groups"])
    if groups == 1:
        return _conv_qgemm(q, weight)
    if groups == weight.shape[0] == weight.shape[0] * weight.shape[1] == _shape0(a["input"])[1] \
            and _exact_in_f32(weight):
        return _conv_depthwise_f32(q, weight)
    return _conv_window(q, weight)


def lower_linear(q: QuantizedOp) -> ir.Value:
    a = q.args
    weight = q.data(a["weight"], "weight")
    M, K = ir.RankedTensorType(a["input"].type).shape
    N = weight.shape[0]
    KB, NB = -(-K // GROUP), -(-N // PANEL)
    t = KernelText()
    # Activation rows as A [M, KB, 4], unsigned (x xor 0x80); K padded (the weight's pad is zero).
    xe, xa = t.fresh(), t.fresh()
    t.emit(f"{xe} = tensor.empty() : {tensor_type([M, KB, GROUP], 'i8')}")
    t.emit(f"{xa} = linalg.generic {{indexing_maps = [affine_map<(m, kb, kl) -> (m, kb, kl)>], "
      f"iterator_types = [\"parallel\", \"parallel\", \"parallel\"]}} "
      f"outs({xe} : {tensor_type([M, KB, GROUP], 'i8')}) {{")
    t.emit("^bb0(%lo_: i8):")
    t.emit("  %lm = linalg.index 0 : index")
    t.emit("  %lkb = linalg.index 1 : index")
    t.emit("  %lkl = linalg.index 2 : index")
    t.emit("  %lc4 = arith.constant 4 : index")
    t.emit(f"  %lkmax = arith.constant {K - 1} : index")
    t.emit("  %lk0 = arith.muli %lkb, %lc4 : index")
    t.emit("  %lk1 = arith.addi %lk0, %lkl : index")
    t.emit("  %lk = arith.minui %lk1, %lkmax : index")
    t.emit(f"  %lx = tensor.extract %arg0[%lm, %lk] : {tensor_type([M, K], 'i8')}")
    t.emit("  %lflip = arith.constant -128 : i8")
    t.emit("  %lu = arith.xori %lx, %lflip : i8")
    t.emit("  linalg.yield %lu : i8")
    t.emit(f"}} -> {tensor_type([M, KB, GROUP], 'i8')}")
    # The weight as B [NB, KB, 16, 4]: a layout chain, packed when the blob is built.
    zero8 = t.const(0, "i8")
    wp, _ = t.pad("%arg1", [N, K], [0, 0], [NB * PANEL - N, KB * GROUP - K], zero8, "i8")
    we, wt0, wt = t.fresh(), t.fresh(), t.fresh()
    t.emit(f"{we} = tensor.expand_shape {wp} [[0, 1], [2, 3]] output_shape [{NB}, {PANEL}, {KB}, {GROUP}] : "
      f"{tensor_type([NB * PANEL, KB * GROUP], 'i8')} into {tensor_type([NB, PANEL, KB, GROUP], 'i8')}")
    t.emit(f"{wt0} = tensor.empty() : {tensor_type([NB, KB, PANEL, GROUP], 'i8')}")
    t.emit(f"{wt} = linalg.transpose ins({we} : {tensor_type([NB, PANEL, KB, GROUP], 'i8')}) "
      f"outs({wt0} : {tensor_type([NB, KB, PANEL, GROUP], 'i8')}) permutation = [0, 2, 1, 3]")
    params = channel_params(q, a, weight, int(a["input_zero_point"]))
    y = qgemm(t, xa, wt, M, N, KB, True, "col", params, int(a["output_zero_point"]), int(a["output_min"]),
               int(a["output_max"]), "contraction")
    t.emit(f"%result = tensor.cast {y} : {tensor_type([M, N], 'i8')} to {tensor_type([M, N], 'i8')}")
    return q.splice(t.text(), [a["input"], a["weight"]])
