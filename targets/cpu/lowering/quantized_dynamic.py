"""Dynamic linears (`etc_quantized::linear_dynamic`) -> linalg for etc-cpu-int8-kernels: float32
activations quantized to int8 on every call (per row: torchao's 8da4w/8da8w; per tensor: PT2E's
dynamic config) times symmetric int8 or int4 weights with float scales per channel or per group."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.kernel_ir import KernelText, dense_literal, f32_literal, iterators, tensor_type
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, QDEQUANT, QGEMM_DYNAMIC, QQUANT
from etc.targets.cpu.lowering.quantized import DYN, LINEAR_DYNAMIC, QuantizedOp, constant_name

# Weights' bits -> K values per byte row of a panel (int4: a byte holds two k) and the layout of the
# quantized activation: int8 [M, K/4, 4]; int4 [M, K/8, 2, 4], each 8 values as their even then odd
# ones, the order the packed weight's low and high nibbles have.
K_PER_ROW = {8: GROUP, 4: 2 * GROUP}


def lower_linear_dynamic(q: QuantizedOp) -> ir.Value:
    """y = dequant(quant(x)) @ dequant(w).T + bias, as
      q, s[m], zp[m]          the activation quantized exactly as the portable kernel does (per row:
                              torchao's ASYMMETRIC [1, K] blocks, range including 0; per tensor:
                              PT2E's choose_qparams with its eps), in the layout above (K padded
                              with zeros to a whole row of a panel);
      acc[m, n]               sum_k q[m, k] * w[n, k] * ws[n, k / group] (f32), the generic marked
                              `etc.cpu.qgemm_dynamic` on the weight's bytes as panels [NB, K/r, 16, 4]
                              (r = K_PER_ROW; the program's bytes, only regrouped: a layout chain
                              packed when the blob is built) and the scales as [NB, G, 16];
      y = (acc - zp[m] * C[n]) * s[m] + bias[n]
                              the generic marked `etc.cpu.qdequant`; C[n] = sum_k w[n, k] ws[n, k/group]
                              takes the activation's zero point out of the K loop (int4: a constant
                              the runtime derives at load, `blob.DERIVATIONS`; int8: N floats, stored).
    etc-cpu-int8-kernels turns the pair into one kernel (int8 dot products on vpdpbusd)."""
    a = q.args
    bits, gs = int(a["weight_bits"]), int(a["group_size"])
    M, K = ir.RankedTensorType(a["input"].type).shape
    M = DYN if ir.ShapedType.is_dynamic_size(M) else M
    weight = q.data(a["weight"], "weight")
    scales = q.data(a["weight_scales"], "weight scales").astype(np.float32)
    r = K_PER_ROW[bits]
    N, G, KB, NB = weight.shape[0], K // gs, -(-K // r), -(-weight.shape[0] // PANEL)
    if weight.shape != (N, K * bits // 8) or scales.shape != (N, G):
        raise LoweringError(f"{LINEAR_DYNAMIC}: weight {weight.shape} / scales {scales.shape} do not match K = {K}")
    bias = (np.zeros(N, np.float32) if a["bias"] is None
            else q.data(a["bias"], "bias").astype(np.float32).reshape(-1))
    t = KernelText()
    m_t = lambda *rest, el="f32": tensor_type([M, *rest], el)  # noqa: E731
    t.emit("%c0 = arith.constant 0 : index")
    t.emit(f"%M = tensor.dim %arg0, %c0 : {m_t(K)}")
    dyn = "%M" if M == DYN else ""
    t.emit(f"%zero = arith.constant {f32_literal(0.0)} : f32")
    t.emit(f"%re = tensor.empty({dyn}) : {m_t()}")
    granularity = a["activation_granularity"]
    floor = float(np.finfo(np.float32).tiny) if granularity == "per_row" else float(a["activation_eps"])
    _activation_params(t, granularity, floor, m_t(K), m_t())
    q_shape = [KB, GROUP] if bits == 8 else [KB, 2, GROUP]
    q_t = m_t(*q_shape, el="i8")
    x, _ = t.pad("%arg0", [M, K], [0, 0], [0, KB * r - K], "%zero", "f32")
    # int8: [m, kb, j] = x[m, 4 kb + j]; int4: [m, kb, p, j] = x[m, 8 kb + 2 j + p].
    loops, at = ("(m, kb, j)", "(m, kb * 4 + j)") if bits == 8 else ("(m, kb, p, j)", "(m, kb * 8 + j * 2 + p)")
    t.emit(f"%qe = tensor.empty({dyn}) : {q_t}")
    t.emit(f"%q = linalg.generic {{indexing_maps = [affine_map<{loops} -> {at}>, affine_map<{loops} -> (m)>, "
      f"affine_map<{loops} -> (m)>, affine_map<{loops} -> {loops}>], "
      f"iterator_types = [{iterators(len(q_shape) + 1)}]}} "
      f"ins({x}, %params#1, %params#2 : {m_t(KB * r)}, {m_t()}, {m_t()}) outs(%qe : {q_t}) "
      f"attrs = {{{QQUANT} = {{granularity = \"{granularity}\", floor = {f32_literal(floor)} : f32}}}} {{")
    t.emit("^bb0(%x: f32, %inv: f32, %z: f32, %o: i8):")
    t.emit(f"  %qmin = arith.constant {f32_literal(-128.0)} : f32")
    t.emit(f"  %qmax = arith.constant {f32_literal(127.0)} : f32")
    t.emit("  %y = arith.mulf %x, %inv : f32")
    t.emit("  %r = math.roundeven %y : f32")
    t.emit("  %a = arith.addf %r, %z : f32")
    t.emit("  %c1 = arith.maximumf %a, %qmin : f32")
    t.emit("  %c2 = arith.minimumf %c1, %qmax : f32")
    t.emit("  %i = arith.fptosi %c2 : f32 to i8")
    t.emit("  linalg.yield %i : i8")
    t.emit(f"}} -> {q_t}")
    # The weight's bytes as [NB, KB, 16, 4] and the scales as [NB, G, 16]: layout chains.
    row_bytes = KB * GROUP  # bytes of one weight row in the panels (K padded)
    wp, _ = t.pad("%arg1", [N, K * bits // 8], [0, 0], [NB * PANEL - N, row_bytes - K * bits // 8],
                  t.const(0, "i8"), "i8")
    b_t = tensor_type([NB, KB, PANEL, GROUP], "i8")
    t.emit(f"%we = tensor.expand_shape {wp} [[0, 1], [2, 3]] output_shape [{NB}, {PANEL}, {KB}, {GROUP}] : "
      f"{tensor_type([NB * PANEL, row_bytes], 'i8')} into {tensor_type([NB, PANEL, KB, GROUP], 'i8')}")
    t.emit(f"%wt0 = tensor.empty() : {b_t}")
    t.emit(f"%wt = linalg.transpose ins(%we : {tensor_type([NB, PANEL, KB, GROUP], 'i8')}) "
      f"outs(%wt0 : {b_t}) permutation = [0, 2, 1, 3]")
    sp, _ = t.pad("%arg2", [N, G], [0, 0], [NB * PANEL - N, 0], t.const(f32_literal(0.0), "f32"), "f32")
    s_t = tensor_type([NB, G, PANEL], "f32")
    t.emit(f"%se = tensor.expand_shape {sp} [[0, 1], [2]] output_shape [{NB}, {PANEL}, {G}] : "
      f"{tensor_type([NB * PANEL, G], 'f32')} into {tensor_type([NB, PANEL, G], 'f32')}")
    t.emit(f"%st0 = tensor.empty() : {s_t}")
    t.emit(f"%st = linalg.transpose ins(%se : {tensor_type([NB, PANEL, G], 'f32')}) "
      f"outs(%st0 : {s_t}) permutation = [0, 2, 1]")
    # acc[m, nb, c] = sum q * w * ws over k = (kb, j) (int8) or (kb, p, j) (int4: nibble p of byte j).
    acc_t = m_t(NB, PANEL)
    t.emit(f"%ae = tensor.empty({dyn}) : {acc_t}")
    t.emit(f"%a0 = linalg.fill ins(%zero : f32) outs(%ae : {acc_t}) -> {acc_t}")
    ks = "kb, j" if bits == 8 else "kb, p, j"
    dims = f"(m, nb, c, {ks})"
    t.emit(f"%acc = linalg.generic {{indexing_maps = [affine_map<{dims} -> (m, {ks})>, "
      f"affine_map<{dims} -> (nb, kb, c, j)>, affine_map<{dims} -> (nb, kb floordiv {KB // G}, c)>, "
      f"affine_map<{dims} -> (m, nb, c)>], iterator_types = [{iterators(3)}, {iterators(len(q_shape), 'reduction')}]}} "
      f"ins(%q, %wt, %st : {q_t}, {b_t}, {s_t}) outs(%a0 : {acc_t}) attrs = {{{QGEMM_DYNAMIC} = "
      f"{{bits = {bits} : i64, group_size = {gs} : i64}}}} {{")
    t.emit("^bb0(%qa: i8, %qb: i8, %qs: f32, %qc: f32):")
    wv = "%qb"
    if bits == 4:  # nibble p of the byte, sign-extended from 4 bits
        wv = "%wv"
        t.emit("  %p = linalg.index 4 : index")
        t.emit("  %p8 = arith.index_cast %p : index to i8")
        t.emit("  %c4 = arith.constant 4 : i8")
        t.emit("  %c8 = arith.constant 8 : i8")
        t.emit("  %c15 = arith.constant 15 : i8")
        t.emit("  %sh = arith.muli %p8, %c4 : i8")
        t.emit("  %n0 = arith.shrui %qb, %sh : i8")
        t.emit("  %n1 = arith.andi %n0, %c15 : i8")
        t.emit("  %n2 = arith.xori %n1, %c8 : i8")
        t.emit("  %wv = arith.subi %n2, %c8 : i8")
    t.emit("  %a32 = arith.extsi %qa : i8 to i32")
    t.emit(f"  %w32 = arith.extsi {wv} : i8 to i32")
    t.emit("  %pr = arith.muli %a32, %w32 : i32")
    t.emit("  %pf = arith.sitofp %pr : i32 to f32")
    t.emit("  %sum = math.fma %pf, %qs, %qc : f32")
    t.emit("  linalg.yield %sum : f32")
    t.emit(f"}} -> {acc_t}")
    t.emit(f"%flat = tensor.collapse_shape %acc [[0], [1, 2]] : {acc_t} into {m_t(NB * PANEL)}")
    cut = "%flat"
    if NB * PANEL != N:
        cut = "%cut"
        size = "%M" if M == DYN else str(M)
        t.emit(f"%cut = tensor.extract_slice %flat[0, 0] [{size}, {N}] [1, 1] : {m_t(NB * PANEL)} to {m_t(N)}")
    t.emit(f"%bias = arith.constant {dense_literal(bias, 'f32')}")
    colsum = _column_sums(weight, scales, bits, K)
    column_sums = "%arg3"  # int4: the derived constant argument (below)
    if bits == 8:
        column_sums = "%colsum"
        t.emit(f"%colsum = arith.constant {dense_literal(colsum, 'f32')}")
    t.emit(f"%ye = tensor.empty({dyn}) : {m_t(N)}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, "
      f"affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, "
      f"affine_map<(m, n) -> (m, n)>], iterator_types = [\"parallel\", \"parallel\"]}} "
      f"ins({cut}, %params#2, %params#0, {column_sums}, %bias : {m_t(N)}, {m_t()}, {m_t()}, {tensor_type([N], 'f32')}, "
      f"{tensor_type([N], 'f32')}) outs(%ye : {m_t(N)}) attrs = {{{QDEQUANT}}} {{")
    t.emit("^bb0(%y: f32, %z: f32, %s: f32, %cs: f32, %b: f32, %o: f32):")
    t.emit("  %zc = arith.mulf %z, %cs : f32")
    t.emit("  %d = arith.subf %y, %zc : f32")
    t.emit("  %r = math.fma %d, %s, %b : f32")
    t.emit("  linalg.yield %r : f32")
    t.emit(f"}} -> {m_t(N)}")
    if bits == 8:
        return q.splice(t.text(), [a["input"], a["weight"], a["weight_scales"]])
    # int4: C is not stored; the runtime derives it from the weight and the scales when it loads the blob.
    weight_name, scales_name = constant_name(a["weight"]), constant_name(a["weight_scales"])
    colsum_value = q.new_constant(f"{weight_name}#colsum", colsum, {
        "op": "int4_colsum", "weight": weight_name, "scales": scales_name, "group_size": gs})
    return q.splice(t.text(), [a["input"], a["weight"], a["weight_scales"], colsum_value])


def _column_sums(weight: np.ndarray, scales: np.ndarray, bits: int, K: int) -> np.ndarray:
    """C[n] = sum_k w[n, k] ws[n, k / group] (the one definition int4's blob loaders share)."""
    from etc.runtime.kernels.quantized import int4_column_sums

    if bits == 4:
        return int4_column_sums(weight, scales)
    n, groups = scales.shape
    products = weight.astype(np.float64).reshape(n, groups, K // groups).sum(axis=2) * scales.astype(np.float64)
    return products.sum(axis=1).astype(np.float32)


def _activation_params(t: KernelText, granularity: str, floor: float, x_t: str, row_t: str) -> None:
    """%params:3 = (scale, 1 / scale, zero point), each [M] f32, of the activation %arg0 (`x_t`):
    the range including 0 of each row (torchao's choose_qparams_affine on [1, K] blocks, eps the
    smallest normal float) or of the whole tensor (PT2E's choose_qparams.tensor, its eps), then
    scale = max((hi - lo) / 255, floor), zero point = clamp(-128 - roundeven(lo / scale))."""
    per_row = granularity == "per_row"
    range_t = row_t if per_row else "tensor<f32>"
    if per_row:
        t.emit(f"%r0 = linalg.fill ins(%zero : f32) outs(%re : {row_t}) -> {row_t}")
        ranged, reduce_m = "(m)", '"parallel"'
    else:
        t.emit("%rs = tensor.empty() : tensor<f32>")
        t.emit("%r0 = linalg.fill ins(%zero : f32) outs(%rs : tensor<f32>) -> tensor<f32>")
        ranged, reduce_m = "()", '"reduction"'
    t.emit(f"%range:2 = linalg.generic {{indexing_maps = [affine_map<(m, k) -> (m, k)>, "
      f"affine_map<(m, k) -> {ranged}>, affine_map<(m, k) -> {ranged}>], iterator_types = [{reduce_m}, "
      f"\"reduction\"]}} ins(%arg0 : {x_t}) outs(%r0, %r0 : {range_t}, {range_t}) {{")
    t.emit("^bb0(%x: f32, %l: f32, %h: f32):")
    t.emit("  %l2 = arith.minimumf %l, %x : f32")
    t.emit("  %h2 = arith.maximumf %h, %x : f32")
    t.emit("  linalg.yield %l2, %h2 : f32, f32")
    t.emit(f"}} -> ({range_t}, {range_t})")
    read = f"affine_map<(m) -> {ranged}>"
    row = "affine_map<(m) -> (m)>"
    t.emit(f"%params:3 = linalg.generic {{indexing_maps = [{read}, {read}, {row}, {row}, {row}], "
      f"iterator_types = [\"parallel\"]}} ins(%range#0, %range#1 : {range_t}, {range_t}) "
      f"outs(%re, %re, %re : {row_t}, {row_t}, {row_t}) {{")
    t.emit("^bb0(%l: f32, %h: f32, %o1: f32, %o2: f32, %o3: f32):")
    t.emit(f"  %c255 = arith.constant {f32_literal(255.0)} : f32")
    t.emit(f"  %floor = arith.constant {f32_literal(floor)} : f32")
    t.emit(f"  %one = arith.constant {f32_literal(1.0)} : f32")
    t.emit(f"  %qmin = arith.constant {f32_literal(-128.0)} : f32")
    t.emit(f"  %qmax = arith.constant {f32_literal(127.0)} : f32")
    t.emit("  %d = arith.subf %h, %l : f32")
    t.emit("  %s0 = arith.divf %d, %c255 : f32")
    t.emit("  %s = arith.maximumf %s0, %floor : f32")
    t.emit("  %inv = arith.divf %one, %s : f32")
    t.emit("  %ls = arith.divf %l, %s : f32")
    t.emit("  %lr = math.roundeven %ls : f32")
    t.emit("  %z0 = arith.subf %qmin, %lr : f32")
    t.emit("  %z1 = arith.maximumf %z0, %qmin : f32")
    t.emit("  %z = arith.minimumf %z1, %qmax : f32")
    t.emit("  linalg.yield %s, %inv, %z : f32, f32, f32")
    t.emit(f"}} -> ({row_t}, {row_t}, {row_t})")
