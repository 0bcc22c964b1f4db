"""torchao's 8da4w linear (`etc_quantized::linear_dynamic`) -> linalg for etc-cpu-int8-kernels."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.kernel_ir import KernelText, dense_literal, f32_literal, iterators, tensor_type
from etc.targets.cpu.kernels.int8_match import PANEL, QDEQUANT, QGEMM4
from etc.targets.cpu.lowering.quantized import DYN, LINEAR_DYNAMIC, QuantizedOp, constant_name


def lower_linear_dynamic(q: QuantizedOp) -> ir.Value:
    """torchao 8da4w: y = dequant(quant_row(x)) @ dequant(w4).T + bias, as
      q[m, k], s[m], zp[m]    the activation quantized per row exactly as the portable kernel does
                              (torchao's ASYMMETRIC [1, K] blocks: range including 0, roundeven),
                              stored as [M, K/8, 2, 4]: each 8 values as their even then odd ones,
                              the order the packed weight's low and high nibbles have;
      acc[m, n]               sum_k q[m, k] * w[n, k] * ws[n, k / group] (f32), the generic marked
                              `etc.cpu.qgemm4` on the weight's bytes in panels [NB, K/8, 16, 4] (each
                              byte two k, low nibble first: the program's packing, only regrouped, so
                              the chain is a layout one packed when the blob is built) and the scales
                              as [NB, G, 16];
      y = (acc - zp[m] * C[n]) * s[m] + bias[n]
                              the generic marked `etc.cpu.qdequant`; C[n] = sum_k w[n, k] ws[n, k/group]
                              takes the activation's zero point out of the K loop: a constant
                              argument the blob does not store (the runtime derives it from the
                              packed weight and scales at load, `blob.DERIVATIONS`).
    etc-cpu-int8-kernels turns the pair into one kernel (int8 x int4 dot products on vpdpbusd)."""
    a = q.args
    M, K = ir.RankedTensorType(a["input"].type).shape
    M = DYN if ir.ShapedType.is_dynamic_size(M) else M
    packed = q.data(a["weight"], "weight")
    scales = q.data(a["weight_scales"], "weight scales").astype(np.float32)
    N, gs = packed.shape[0], int(a["group_size"])
    G, KB8, NB = K // gs, K // 8, -(-N // PANEL)
    if packed.shape != (N, K // 2) or scales.shape != (N, G):
        raise LoweringError(f"{LINEAR_DYNAMIC}: weight {packed.shape} / scales {scales.shape} do not match K = {K}")
    from etc.runtime.kernels.quantized import int4_column_sums

    colsum = int4_column_sums(packed, scales)
    bias = (np.zeros(N, np.float32) if a["bias"] is None
            else q.data(a["bias"], "bias").astype(np.float32).reshape(-1))
    t = KernelText()
    m_t = lambda *rest, el="f32": tensor_type([M, *rest], el)  # noqa: E731
    t.emit("%c0 = arith.constant 0 : index")
    t.emit(f"%M = tensor.dim %arg0, %c0 : {m_t(K)}")
    dyn = "%M" if M == DYN else ""
    row = "affine_map<(m) -> (m)>"
    # The activation's range per row, including 0 (torchao's choose_qparams_affine).
    t.emit(f"%zero = arith.constant {f32_literal(0.0)} : f32")
    t.emit(f"%re = tensor.empty({dyn}) : {m_t()}")
    t.emit(f"%r0 = linalg.fill ins(%zero : f32) outs(%re : {m_t()}) -> {m_t()}")
    t.emit(f"%range:2 = linalg.generic {{indexing_maps = [affine_map<(m, k) -> (m, k)>, affine_map<(m, k) -> (m)>, "
      f"affine_map<(m, k) -> (m)>], iterator_types = [\"parallel\", \"reduction\"]}} ins(%arg0 : {m_t(K)}) "
      f"outs(%r0, %r0 : {m_t()}, {m_t()}) {{")
    t.emit("^bb0(%x: f32, %l: f32, %h: f32):")
    t.emit("  %l2 = arith.minimumf %l, %x : f32")
    t.emit("  %h2 = arith.maximumf %h, %x : f32")
    t.emit("  linalg.yield %l2, %h2 : f32, f32")
    t.emit(f"}} -> ({m_t()}, {m_t()})")
    # scale = max((hi - lo) / 255, tiny), 1 / scale, zp = clamp(-128 - roundeven(lo / scale)).
    t.emit(f"%params:3 = linalg.generic {{indexing_maps = [{row}, {row}, {row}, {row}, {row}], "
      f"iterator_types = [\"parallel\"]}} ins(%range#0, %range#1 : {m_t()}, {m_t()}) "
      f"outs(%re, %re, %re : {m_t()}, {m_t()}, {m_t()}) {{")
    t.emit("^bb0(%l: f32, %h: f32, %o1: f32, %o2: f32, %o3: f32):")
    t.emit(f"  %c255 = arith.constant {f32_literal(255.0)} : f32")
    t.emit(f"  %tiny = arith.constant {f32_literal(np.finfo(np.float32).tiny)} : f32")
    t.emit(f"  %one = arith.constant {f32_literal(1.0)} : f32")
    t.emit(f"  %qmin = arith.constant {f32_literal(-128.0)} : f32")
    t.emit(f"  %qmax = arith.constant {f32_literal(127.0)} : f32")
    t.emit("  %d = arith.subf %h, %l : f32")
    t.emit("  %s0 = arith.divf %d, %c255 : f32")
    t.emit("  %s = arith.maximumf %s0, %tiny : f32")
    t.emit("  %inv = arith.divf %one, %s : f32")
    t.emit("  %ls = arith.divf %l, %s : f32")
    t.emit("  %lr = math.roundeven %ls : f32")
    t.emit("  %z0 = arith.subf %qmin, %lr : f32")
    t.emit("  %z1 = arith.maximumf %z0, %qmin : f32")
    t.emit("  %z = arith.minimumf %z1, %qmax : f32")
    t.emit("  linalg.yield %s, %inv, %z : f32, f32, f32")
    t.emit(f"}} -> ({m_t()}, {m_t()}, {m_t()})")
    # q as [M, K/8, 2, 4]: [m, kb, p, j] = q[m, 8 kb + 2 j + p].
    q_t = m_t(KB8, 2, 4, el="i8")
    t.emit(f"%qe = tensor.empty({dyn}) : {q_t}")
    t.emit(f"%q = linalg.generic {{indexing_maps = [affine_map<(m, kb, p, j) -> (m, kb * 8 + j * 2 + p)>, "
      f"affine_map<(m, kb, p, j) -> (m)>, affine_map<(m, kb, p, j) -> (m)>, "
      f"affine_map<(m, kb, p, j) -> (m, kb, p, j)>], iterator_types = [{iterators(4)}]}} "
      f"ins(%arg0, %params#1, %params#2 : {m_t(K)}, {m_t()}, {m_t()}) outs(%qe : {q_t}) {{")
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
    # The weight's bytes as [NB, K/8, 16, 4] and the scales as [NB, G, 16]: layout chains.
    zero8 = t.const(0, "i8")
    wp, _ = t.pad("%arg1", [N, K // 2], [0, 0], [NB * PANEL - N, 0], zero8, "i8")
    t.emit(f"%we = tensor.expand_shape {wp} [[0, 1], [2, 3]] output_shape [{NB}, {PANEL}, {KB8}, 4] : "
      f"{tensor_type([NB * PANEL, K // 2], 'i8')} into {tensor_type([NB, PANEL, KB8, 4], 'i8')}")
    t.emit(f"%wt0 = tensor.empty() : {tensor_type([NB, KB8, PANEL, 4], 'i8')}")
    t.emit(f"%wt = linalg.transpose ins(%we : {tensor_type([NB, PANEL, KB8, 4], 'i8')}) "
      f"outs(%wt0 : {tensor_type([NB, KB8, PANEL, 4], 'i8')}) permutation = [0, 2, 1, 3]")
    sp, _ = t.pad("%arg2", [N, G], [0, 0], [NB * PANEL - N, 0], t.const(f32_literal(0.0), "f32"), "f32")
    t.emit(f"%se = tensor.expand_shape {sp} [[0, 1], [2]] output_shape [{NB}, {PANEL}, {G}] : "
      f"{tensor_type([NB * PANEL, G], 'f32')} into {tensor_type([NB, PANEL, G], 'f32')}")
    t.emit(f"%st0 = tensor.empty() : {tensor_type([NB, G, PANEL], 'f32')}")
    t.emit(f"%st = linalg.transpose ins(%se : {tensor_type([NB, PANEL, G], 'f32')}) "
      f"outs(%st0 : {tensor_type([NB, G, PANEL], 'f32')}) permutation = [0, 2, 1]")
    # acc[m, nb, c] = sum q * w * ws: one k per (kb, p, j); the nibble p of byte (nb, kb, c, j).
    acc_t = m_t(NB, PANEL)
    t.emit(f"%ae = tensor.empty({dyn}) : {acc_t}")
    t.emit(f"%a0 = linalg.fill ins(%zero : f32) outs(%ae : {acc_t}) -> {acc_t}")
    dims = "(m, nb, c, kb, p, j)"
    t.emit(f"%acc = linalg.generic {{indexing_maps = [affine_map<{dims} -> (m, kb, p, j)>, "
      f"affine_map<{dims} -> (nb, kb, c, j)>, affine_map<{dims} -> (nb, kb floordiv {gs // 8}, c)>, "
      f"affine_map<{dims} -> (m, nb, c)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\", "
      f"\"reduction\", \"reduction\", \"reduction\"]}} ins(%q, %wt, %st : {q_t}, "
      f"{tensor_type([NB, KB8, PANEL, 4], 'i8')}, "
      f"{tensor_type([NB, G, PANEL], 'f32')}) outs(%a0 : {acc_t}) attrs = {{{QGEMM4} = {{group_size = {gs} : "
      f"i64}}}} {{")
    t.emit("^bb0(%qa: i8, %qb: i8, %qs: f32, %qc: f32):")
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
    t.emit("  %w32 = arith.extsi %wv : i8 to i32")
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
    t.emit(f"%ye = tensor.empty({dyn}) : {m_t(N)}")
    t.emit(f"%result = linalg.generic {{indexing_maps = [affine_map<(m, n) -> (m, n)>, affine_map<(m, n) -> (m)>, "
      f"affine_map<(m, n) -> (m)>, affine_map<(m, n) -> (n)>, affine_map<(m, n) -> (n)>, "
      f"affine_map<(m, n) -> (m, n)>], iterator_types = [\"parallel\", \"parallel\"]}} "
      f"ins({cut}, %params#2, %params#0, %arg3, %bias : {m_t(N)}, {m_t()}, {m_t()}, {tensor_type([N], 'f32')}, "
      f"{tensor_type([N], 'f32')}) outs(%ye : {m_t(N)}) attrs = {{{QDEQUANT}}} {{")
    t.emit("^bb0(%y: f32, %z: f32, %s: f32, %cs: f32, %b: f32, %o: f32):")
    t.emit("  %zc = arith.mulf %z, %cs : f32")
    t.emit("  %d = arith.subf %y, %zc : f32")
    t.emit("  %r = math.fma %d, %s, %b : f32")
    t.emit("  linalg.yield %r : f32")
    t.emit(f"}} -> {m_t(N)}")
    # C is not stored: the runtime derives it from the weight and the scales when it loads the blob.
    weight_name, scales_name = constant_name(a["weight"]), constant_name(a["weight_scales"])
    colsum_value = q.new_constant(f"{weight_name}#colsum", colsum, {"op": "int4_colsum", "weight": weight_name,
                                                                  "scales": scales_name, "group_size": gs})
    return q.splice(t.text(), [a["input"], a["weight"], a["weight_scales"], colsum_value])
