"""The GEMM kernel's right-hand side as text: the im2col gathers, column slices, and the dot
products of the leftover columns (`gemm_match.leftover_columns`).

`gemm_kernel.kernel_function` writes a kernel from these: B read in place is gathered per
column panel (`im2col_gather`, `panel_gather`), or the whole im2col (`im2col`); its last
N % 16 <= 8 columns, when it has them, are transposed (`im2col_gather(transposed=True)`) and
reduced against A's rows by `dot_products`.
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, tensor_type
from etc.targets.cpu.kernels.gemm_match import Gemm, KernelConfig
from etc.targets.cpu.loop_effects import THREAD_SPLIT


def im2col(t: KernelText, x: str, g: Gemm) -> tuple[str, list]:
    """col[b, c, kh, kw, oh, ow] = X[b, c, oh*sh + kh*dh, ow*sw + kw*dw] (an affine gather, no index
    arithmetic per element), collapsed to the [b, K, P] right-hand side."""
    geo = g.conv
    shape = [g.batch, geo["c"], geo["kh"], geo["kw"], geo["oh"], geo["ow"]]
    e, out = t.fresh("e"), t.fresh("col")
    h = f"d4 * {geo['sh']} + d2 * {geo['dh']}"
    w = f"d5 * {geo['sw']} + d3 * {geo['dw']}"
    par = ", ".join(['"parallel"'] * 6)
    t.emit(f"{e} = tensor.empty() : {tensor_type(shape)}")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, {h}, {w})>, "
           f"affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>], iterator_types = "
           f"[{par}]}} ins({x} : {tensor_type([g.batch, geo['c'], geo['h'], geo['w']])}) "
           f"outs({e} : {tensor_type(shape)}) {{")
    t.emit("^bb0(%in: f32, %o: f32):")
    t.emit("  linalg.yield %in : f32")
    t.emit(f"}} -> {tensor_type(shape)}")
    return t.reshape("collapse", out, [[0], [1, 2, 3], [4, 5]], shape, [g.batch, g.K, g.N]), [g.batch, g.K, g.N]


def im2col_gather(t: KernelText, x: str, g: Gemm, columns: range, attrs: str = "",
                   transposed: bool = False) -> str:
    """The im2col as a gather over the [B, K, N] right-hand side itself, which the transform
    script fuses into the column-panel loop (`transform_script`; `attrs` = `<tag>_col` marks it):
    B[b, k, n] = X[b, koff[k] + noff[n]] over X flattened per image, with the offsets constants:
    koff[c*KH*KW + kh*KW + kw] = c*H*W + kh*dh*W + kw*dw and noff[oh*OW + ow] = oh*sh*W + ow*sw
    (a k step broadcasts one offset, an nr-wide panel loads nr). Only the `columns` given;
    `transposed`: as [B, columns, K] (the leftover columns' dot products, `_leftover_text`)."""
    geo = g.conv
    hw = geo["h"] * geo["w"]
    koff = [c * hw + kh * geo["dh"] * geo["w"] + kw * geo["dw"]
            for c in range(geo["c"]) for kh in range(geo["kh"]) for kw in range(geo["kw"])]
    noff = [oh * geo["sh"] * geo["w"] + ow * geo["sw"] for oh in range(geo["oh"]) for ow in range(geo["ow"])]
    noff = [noff[n] for n in columns]
    element = "i32" if geo["c"] * hw < 1 << 31 else "i64"
    flat = t.reshape("collapse", x, [[0], [1, 2, 3]], [g.batch, geo["c"], geo["h"], geo["w"]],
                     [g.batch, geo["c"] * hw])
    offsets = []
    for values in (koff, noff):
        name = t.fresh("off")
        t.emit(f"{name} = arith.constant dense<[{', '.join(map(str, values))}]> : "
               f"{tensor_type([len(values)], element)}")
        offsets.append(name)
    k_dim, n_dim = ("d2", "d1") if transposed else ("d1", "d2")
    shape = [g.batch, len(noff), g.K] if transposed else [g.batch, g.K, len(noff)]
    e, out = t.fresh("e"), t.fresh("col")
    t.emit(f"{e} = tensor.empty() : {tensor_type(shape)}")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> ({k_dim})>, "
           f"affine_map<(d0, d1, d2) -> ({n_dim})>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = "
           f"[\"parallel\", \"parallel\", \"parallel\"]}} ins({offsets[0]}, {offsets[1]} : "
           f"{tensor_type([g.K], element)}, {tensor_type([len(noff)], element)}) outs({e} : {tensor_type(shape)})"
           + (f" attrs = {{{attrs}}}" if attrs else "") + " {")
    t.emit(f"^bb0(%ko: {element}, %no: {element}, %o: f32):")
    t.emit("  %b = linalg.index 0 : index")
    t.emit(f"  %s = arith.addi %ko, %no : {element}")
    t.emit(f"  %i = arith.index_cast %s : {element} to index")
    t.emit(f"  %v = tensor.extract {flat}[%b, %i] : {tensor_type([g.batch, geo['c'] * hw])}")
    t.emit("  linalg.yield %v : f32")
    t.emit(f"}} -> {tensor_type(shape)}")
    return out


def panel_gather(t: KernelText, b: str, g: Gemm, tag: str, cols: int) -> str:
    """An activation B [B?, K, N] as the same gather the im2col is (tagged `<tag>_col`, fused into
    the column-panel loop by the transform script, `gemm_match.gather_per_panel`): each panel's
    [K, nr] copied into a contiguous buffer, one nr-wide vector per k. Written as a
    `tensor.extract` (not a copy generic, which canonicalization would fold back into B). Only
    the first `cols` columns (the rest: `_leftover_text`)."""
    shape = [g.batch, g.K, cols]
    src = tensor_type(([g.batch] if g.b_batched else []) + [g.K, g.N])
    e, out = t.fresh("e"), t.fresh("col")
    t.emit(f"{e} = tensor.empty() : {tensor_type(shape)}")
    t.emit(f"{out} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = "
           f"[\"parallel\", \"parallel\", \"parallel\"]}} outs({e} : {tensor_type(shape)}) attrs = {{{tag}_col}} {{")
    t.emit("^bb0(%o: f32):")
    t.emit("  %k = linalg.index 1 : index")
    t.emit("  %n = linalg.index 2 : index")
    if g.b_batched:
        t.emit("  %b = linalg.index 0 : index")
    t.emit(f"  %v = tensor.extract {b}[{'%b, ' if g.b_batched else ''}%k, %n] : {src}")
    t.emit("  linalg.yield %v : f32")
    t.emit(f"}} -> {tensor_type(shape)}")
    return out


def column_slice(t: KernelText, value: str, shape: list, columns: range, element: str = "f32") -> str:
    """`columns` of the last dimension of `value` (of `shape`): an extract_slice (`value` itself
    for all of them)."""
    if len(columns) == shape[-1]:
        return value
    part = shape[:-1] + [len(columns)]
    name = t.fresh("cols")
    offsets = ", ".join(["0"] * (len(shape) - 1) + [str(columns.start)])
    t.emit(f"{name} = tensor.extract_slice {value}[{offsets}] [{', '.join(map(str, part))}] "
           f"[{', '.join(['1'] * len(shape))}] : {tensor_type(shape, element)} to {tensor_type(part, element)}")
    return name


def insert_columns(t: KernelText, part: str, whole: str, shape: list, columns: range) -> str:
    """`part` written into `columns` of the last dimension of `whole` (of `shape`)."""
    name = t.fresh("ins")
    offsets = ", ".join(["0"] * (len(shape) - 1) + [str(columns.start)])
    t.emit(f"{name} = tensor.insert_slice {part} into {whole}[{offsets}] "
           f"[{', '.join(map(str, shape[:-1] + [len(columns)]))}] [{', '.join(['1'] * len(shape))}] : "
           f"{tensor_type(shape[:-1] + [len(columns)])} into {tensor_type(shape)}")
    return name


def dot_products(t: KernelText, g: Gemm, cfg: KernelConfig, a: str, a_type: str, bt: str, bt_batched: bool,
                 start: str, r: int) -> str:
    """`start` [batch, M, r] plus A x the r columns of `bt` [B?, r, K] (a leftover's columns
    transposed, contiguous along K) as dot products; returns the sums.

    Row blocks of `rows` (the threads share them): per K step of one vector, `rows` A row
    vectors and the r columns' vectors, rows x r FMAs into as many accumulators, each summed
    across its lanes at the end."""
    lanes, K, M = cfg.vector_width, g.K, g.M
    tile = tensor_type([g.batch, M, r])
    rows = next(m for m in (8, 4, 2, 1) if M % m == 0 and m * r <= lanes)
    vec = f"vector<{lanes}xf32>"
    bt_type = tensor_type(([g.batch] if bt_batched else []) + [r, K])
    zero_v = t.fresh("zv")
    t.emit(f"{zero_v} = arith.constant dense<0.0> : {vec}")
    with t.loop("%lb", 0, g.batch, 1, "%lt", start, tile, stem="lbat") as batches:
        with t.loop("%li", 0, M, rows, "%lu", "%lt", tile, stem="lrow",
                    attributes=f"{THREAD_SPLIT}") as row_blocks:
            row_ids = [t.add("%li", p) for p in range(rows)]
            accs = [[t.fresh("acc") for _ in range(r)] for _ in range(rows)]
            sums = t.fresh("sums")
            n = rows * r
            carried = ", ".join(f"{accs[p][q]} = {zero_v}" for p in range(rows) for q in range(r))
            t.emit(f"{sums}:{n} = scf.for %lk = {t.index(0)} to {t.index(K)} step {t.index(lanes)} "
                   f"iter_args({carried}) -> ({', '.join([vec] * n)}) {{")
            with t.nested():
                a_lead = "%lb, " if g.a_batched else ""
                b_lead = "%lb, " if bt_batched else ""
                av = [t.read(a, f"{a_lead}{row_ids[p]}, %lk", "%zero", a_type, vec, True, stem="la")
                      for p in range(rows)]
                bv = [t.read(bt, f"{b_lead}{t.index(q)}, %lk", "%zero", bt_type, vec, True, stem="lc")
                      for q in range(r)]
                new = []
                for p in range(rows):
                    for q in range(r):
                        name = t.fresh("fma")
                        t.emit(f"{name} = vector.fma {av[p]}, {bv[q]}, {accs[p][q]} : {vec}")
                        new.append(name)
                t.emit(f"scf.yield {', '.join(new)} : {', '.join([vec] * n)}")
            t.emit("}")
            current = "%lu"
            for p in range(rows):
                for q in range(r):
                    total = t.combine_lanes(f"{sums}#{p * r + q}", lanes, _add_lanes(t))
                    at = f"%lb, {row_ids[p]}, {t.index(q)}"
                    x, y, nxt = t.fresh("x"), t.fresh("y"), t.fresh("t")
                    t.emit(f"{x} = tensor.extract {current}[{at}] : {tile}")
                    t.emit(f"{y} = arith.addf {x}, {total} : f32")
                    t.emit(f"{nxt} = tensor.insert {y} into {current}[{at}] : {tile}")
                    current = nxt
            row_blocks.yields(current)
        batches.yields(row_blocks.result)
    return batches.result


def _add_lanes(t: KernelText):
    """A `combine_lanes` step: the two halves added lane by lane."""
    def add(lo: str, hi: str, vtype: str) -> str:
        name = t.fresh("sum")
        t.emit(f"{name} = arith.addf {lo}, {hi} : {vtype}")
        return name
    return add
