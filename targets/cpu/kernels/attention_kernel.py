"""The fused attention kernel: softmax(Q K^T (op) mask) V without the score matrix (flash attention).

For each batch-head (the outer loop, split across threads) and each tile of `rows` query rows:

    m = -inf, l = 0, acc[Dv] = 0                      per row, in registers
    for each tile of `lanes` keys j0:                 (a last partial tile masked, its lanes -inf)
      s[j]   = sum_d Q[i, d] K^T[d, j0 + j]           one K^T vector per d, broadcast Q scalars, FMA
      s      = s (op) scale (op) mask[..., i, j0 + j] the elementwise score ops, vectorized
      m'     = max(m, max_j s);  mu = m' unless -inf (then 0: a fully masked tile adds nothing)
      p      = exp(s - mu);  alpha = exp(m - mu)
      l      = l alpha + sum_j p;  acc = acc alpha + sum_j p[j] V[j0 + j, :]
      m      = m'
    O[i, :] = acc / l       (safe softmax: 0 where l == 0, a row with every key masked)

so no more than one vector of scores per row exists at any time; memory sees Q, K, V and the mask
read once per row tile and O written once. The value rows are `ceil(Dv / lanes)` vectors (the last
masked when Dv is not a multiple). `rows` trades registers (rows x those vectors of accumulators)
against how often K^T and V are reloaded; the pass picks it from the register file.

Numerics: the online softmax rescales partial sums, so results differ from the three-op path in
the last bits (the sums are reassociated, as torch's own fused kernels do).
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, f32_literal, tensor_type, vector_type
from etc.targets.cpu.kernels.attention_match import Attention
from etc.targets.cpu.parallel import THREAD_SPLIT

OPS = {"arith.addf": "arith.addf", "arith.subf": "arith.subf", "arith.mulf": "arith.mulf",
       "arith.divf": "arith.divf"}


class Kernel:
    def __init__(self, a: Attention, lanes: int, rows: int, key_vectors: int = 2):
        self.a, self.lanes, self.rows, self.key_vectors = a, lanes, rows, key_vectors
        self.w = KernelText()
        self.top = self.w.section()  # constants ahead of the loops
        self.splats, self.static_keys = {}, {}
        self.pbt = tensor_type([rows, lanes * key_vectors])
        self.vt = vector_type(lanes)
        self.qt = tensor_type([a.batch, a.rows, a.head])
        self.ktt = tensor_type([a.batch, a.head, a.keys])
        self.vvt = tensor_type([a.batch, a.keys, a.value_dim])
        self.ot = tensor_type([a.batch, a.rows, a.value_dim])
        self.nv = -(-a.value_dim // lanes)

    # ---------------------------------------------------------------- pieces
    def _side_value(self, k: int, row: str, j0: str, n: int) -> str:
        """Side tensor k at (this batch-head, row, keys j0..j0+n) as a vector."""
        w, a = self.w, self.a
        side = a.sides[k]
        rank = len(a.outer) + 2
        idx = []
        for dim in side.dims:
            if dim is None:
                idx.append(self.w.index(0))
            elif dim == rank - 1:
                idx.append(j0)
            elif dim == rank - 2:
                idx.append(row)
            else:
                idx.append(self.outer_ivs[dim])
        stype = str(side.value.type)
        if side.dims and side.dims[-1] == rank - 1:
            name = w.fresh("mask")
            w.emit(f"{name} = vector.transfer_read %side{k}[{', '.join(idx)}], {self.zero} "
                   f"{{in_bounds = [{'true' if n == self.lanes else 'false'}]}} : {stype}, {self.vt}")
            return name
        scalar = w.fresh("ms")
        w.emit(f"{scalar} = tensor.extract %side{k}[{', '.join(idx)}] : {stype}")
        name = w.fresh("mask")
        w.emit(f"{name} = vector.broadcast {scalar} : f32 to {self.vt}")
        return name

    def _tile(self, rows: list, j0: str, n: int, state: list, pbuf: str) -> tuple[list, str]:
        """One tile of n keys at j0 (up to `keys` vectors) for the rows; state = [m..., l..., acc(r, c)...]
        -> (the new state, the probability buffer [rows, keys * lanes] as written)."""
        w, a, R, nv, vt, L = self.w, self.a, len(rows), self.nv, self.vt, self.lanes
        m, l, acc = state[:R], state[R:2 * R], state[2 * R:]
        chunks = [(c * L, min(L, n - c * L)) for c in range(-(-n // L))]  # (offset in the tile, keys)
        offsets = [j0 if off == 0 else self._key(j0, off) for off, _ in chunks]
        nc = len(chunks)
        # scores: s[r][c] = sum_d Q[i_r, d] K^T[d, j0 + chunk c]  (R x nc independent FMA chains)
        res, d = w.fresh("s"), w.fresh("d")
        acc_names = [f"%sa{r}_{c}_{res[1:]}" for r in range(R) for c in range(nc)]
        w.emit(f"{res}:{R * nc} = scf.for {d} = {w.index(0)} to {w.index(a.head)} step {w.index(1)} "
               f"iter_args({', '.join(f'{x} = {self.zero_v}' for x in acc_names)}) -> ({', '.join([vt] * (R * nc))}) {{")
        with w.nested():
            kvs = []
            for (off, keys), j in zip(chunks, offsets):
                kv = w.fresh("k")
                w.emit(f"{kv} = vector.transfer_read %kt[%bh, {d}, {j}], {self.zero} "
                       f"{{in_bounds = [{'true' if keys == L else 'false'}]}} : {self.ktt}, {vt}")
                kvs.append(kv)
            new = []
            for r, row in enumerate(rows):
                qs, qb = w.fresh("q"), w.fresh("qb")
                w.emit(f"{qs} = tensor.extract %q[%bh, {row}, {d}] : {self.qt}")
                w.emit(f"{qb} = vector.broadcast {qs} : f32 to {vt}")
                for c in range(nc):
                    sf = w.fresh("sf")
                    w.emit(f"{sf} = vector.fma {qb}, {kvs[c]}, {acc_names[r * nc + c]} : {vt}")
                    new.append(sf)
            w.emit(f"scf.yield {', '.join(new)} : {', '.join([vt] * (R * nc))}")
        w.emit("}")
        scores = [[f"{res}#{r * nc + c}" for c in range(nc)] for r in range(R)]
        # the elementwise score ops (scale, masks)
        for op in a.chain:
            for r, row in enumerate(rows):
                for c, ((off, keys), j) in enumerate(zip(chunks, offsets)):
                    if op.side is not None:
                        other = self._side_value(op.side, row, j, keys)
                    else:
                        other = self._splat(op.constant)
                    x, y = (scores[r][c], other) if op.scores_first else (other, scores[r][c])
                    out = w.fresh("sc")
                    w.emit(f"{out} = {OPS[op.op]} {x}, {y} : {vt}")
                    scores[r][c] = out
        mt = vector_type(L, "i1")
        for c, (off, keys) in enumerate(chunks):
            if keys < L:
                mask = w.fresh("km")
                w.emit(f"{mask} = vector.constant_mask [{keys}] : {mt}")
                for r in range(R):
                    out = w.fresh("sc")
                    w.emit(f"{out} = arith.select {mask}, {scores[r][c]}, {self.ninf_v} : {mt}, {vt}")
                    scores[r][c] = out
        # online softmax
        new_m, new_l, new_acc = [], [], list(acc)
        for r in range(R):
            top = scores[r][0]
            for c in range(1, nc):
                t2 = w.fresh("mx")
                w.emit(f"{t2} = arith.maximumf {top}, {scores[r][c]} : {vt}")
                top = t2
            tmax, mn, isinf, mu, muv, mv, adiff, alpha_v, alpha, ln = (
                w.fresh(x) for x in ("tmax", "mn", "inf", "mu", "muv", "mv", "ad", "av", "al", "l"))
            w.emit(f"{tmax} = vector.reduction <maximumf>, {top} : {vt} into f32")
            w.emit(f"{mn} = arith.maximumf {m[r]}, {tmax} : f32")
            w.emit(f"{isinf} = arith.cmpf oeq, {mn}, {self.ninf} : f32")
            w.emit(f"{mu} = arith.select {isinf}, {self.zero}, {mn} : f32")
            w.emit(f"{muv} = vector.broadcast {mu} : f32 to {vt}")
            psum = None
            for c in range(nc):
                diff, p = w.fresh("df"), w.fresh("p")
                w.emit(f"{diff} = arith.subf {scores[r][c]}, {muv} : {vt}")
                w.emit(f"{p} = math.exp {diff} : {vt}")
                if psum is None:
                    psum = p
                else:
                    t2 = w.fresh("pa")
                    w.emit(f"{t2} = arith.addf {psum}, {p} : {vt}")
                    psum = t2
                nb = w.fresh("pbuf")
                w.emit(f"{nb} = vector.transfer_write {p}, {pbuf}[{w.index(r)}, {w.index(c * L)}] "
                       f"{{in_bounds = [true]}} : {vt}, {self.pbt}")
                pbuf = nb
            w.emit(f"{mv} = vector.broadcast {m[r]} : f32 to {vt}")
            w.emit(f"{adiff} = arith.subf {mv}, {muv} : {vt}")
            w.emit(f"{alpha_v} = math.exp {adiff} : {vt}")
            w.emit(f"{alpha} = vector.extract {alpha_v}[0] : f32 from {vt}")
            ps, lscaled = w.fresh("ps"), w.fresh("ls")
            w.emit(f"{ps} = vector.reduction <add>, {psum} : {vt} into f32")
            w.emit(f"{lscaled} = arith.mulf {l[r]}, {alpha} : f32")
            w.emit(f"{ln} = arith.addf {lscaled}, {ps} : f32")
            for c in range(nv):
                out = w.fresh("acc")
                w.emit(f"{out} = arith.mulf {acc[r * nv + c]}, {alpha_v} : {vt}")
                new_acc[r * nv + c] = out
            new_m.append(mn)
            new_l.append(ln)
        # acc += sum_j p[j] V[j0 + j, :]   (p[j] read back from the buffer: a broadcast load)
        for j in range(n):
            key = j0 if j == 0 else self._key(j0, j)
            vrows = []
            for c in range(nv):
                vr = w.fresh("v")
                full = "true" if (c + 1) * L <= a.value_dim else "false"
                w.emit(f"{vr} = vector.transfer_read %v[%bh, {key}, {w.index(c * L)}], {self.zero} "
                       f"{{in_bounds = [{full}]}} : {self.vvt}, {vt}")
                vrows.append(vr)
            for r in range(R):
                pj, pb = w.fresh("pj"), w.fresh("pb")
                w.emit(f"{pj} = tensor.extract {pbuf}[{w.index(r)}, {w.index(j)}] : {self.pbt}")
                w.emit(f"{pb} = vector.broadcast {pj} : f32 to {vt}")
                for c in range(nv):
                    out = w.fresh("acc")
                    w.emit(f"{out} = vector.fma {pb}, {vrows[c]}, {new_acc[r * nv + c]} : {vt}")
                    new_acc[r * nv + c] = out
        return new_m + new_l + new_acc, pbuf

    def _key(self, j0: str, off: int) -> str:
        """j0 + off: a constant when j0 is one (the last, partial tile)."""
        if j0 in self.static_keys:
            return self.w.index(self.static_keys[j0] + off)
        return self.w.add(j0, off)

    def _splat(self, value: float) -> str:
        if value not in self.splats:
            c = self.top.const(f32_literal(value), "f32")
            v = self.top.fresh("cv")
            self.top.emit(f"{v} = vector.broadcast {c} : f32 to {self.vt}")
            self.splats[value] = v
        return self.splats[value]

    def _row_block(self, rows: list, out: str) -> str:
        """The rows' outputs written into `out`; returns the new tensor."""
        w, a, R, nv, vt = self.w, self.a, len(rows), self.nv, self.vt
        tile = self.lanes * self.key_vectors
        state = [self.ninf] * R + [self.zero] * R + [self.zero_v] * (R * nv) + ["%pbuf0"]
        types = ["f32"] * (2 * R) + [vt] * (R * nv) + [self.pbt]
        full_tiles = a.keys // tile
        if full_tiles:
            res, j0 = w.fresh("kl"), w.fresh("j")
            names = [f"%st{i}_{res[1:]}" for i in range(len(state))]
            w.emit(f"{res}:{len(state)} = scf.for {j0} = {w.index(0)} to {w.index(full_tiles * tile)} "
                   f"step {w.index(tile)} iter_args({', '.join(f'{n} = {s}' for n, s in zip(names, state))}) "
                   f"-> ({', '.join(types)}) {{")
            with w.nested():
                new, pbuf = self._tile(rows, j0, tile, names[:-1], names[-1])
                w.emit(f"scf.yield {', '.join(new + [pbuf])} : {', '.join(types)}")
            w.emit("}")
            state = [f"{res}#{i}" for i in range(len(state))]
        if a.keys % tile:
            j0 = w.index(full_tiles * tile)
            self.static_keys[j0] = full_tiles * tile
            state = self._tile(rows, j0, a.keys % tile, state[:-1], state[-1])[0]
        l, acc = state[R:2 * R], state[2 * R:]
        one = w.const(f32_literal(1.0), "f32")
        for r, row in enumerate(rows):
            inv, invv = w.fresh("inv"), w.fresh("invv")
            w.emit(f"{inv} = arith.divf {one}, {l[r]} : f32")
            w.emit(f"{invv} = vector.broadcast {inv} : f32 to {vt}")
            empty = None
            if a.safe:
                empty = w.fresh("empty")
                w.emit(f"{empty} = arith.cmpf oeq, {l[r]}, {self.zero} : f32")
            for c in range(nv):
                o = w.fresh("o")
                w.emit(f"{o} = arith.mulf {acc[r * nv + c]}, {invv} : {vt}")
                if empty is not None:
                    o2 = w.fresh("o")
                    w.emit(f"{o2} = arith.select {empty}, {self.zero_v}, {o} : {vt}")
                    o = o2
                full = "true" if (c + 1) * self.lanes <= a.value_dim else "false"
                new = w.fresh("out")
                w.emit(f"{new} = vector.transfer_write {o}, {out}[%bh, {row}, {w.index(c * self.lanes)}] "
                       f"{{in_bounds = [{full}]}} : {vt}, {self.ot}")
                out = new
        return out

    # ---------------------------------------------------------------- the function
    def function(self, name: str = "__etc_attention") -> str:
        w, a = self.w, self.a
        self.zero = w.const(f32_literal(0.0), "f32")
        self.ninf = w.const(f32_literal(float("-inf")), "f32")
        self.zero_v, self.ninf_v = w.fresh("zv"), w.fresh("niv")
        w.emit(f"{self.zero_v} = vector.broadcast {self.zero} : f32 to {self.vt}")
        w.emit(f"{self.ninf_v} = vector.broadcast {self.ninf} : f32 to {self.vt}")
        w.emit(f"%out0 = tensor.empty() : {self.ot}")
        # the tile's probabilities, read back as broadcast scalars by the P V step (carried through
        # the loops: one buffer, not one per tile)
        w.emit(f"%pbuf0 = tensor.empty() : {self.pbt}")
        w.emit(f"%heads = scf.for %bh = {w.index(0)} to {w.index(a.batch)} step {w.index(1)} "
               f"iter_args(%ob = %out0) -> ({self.ot}) {{")
        with w.nested():
            # the score space's outer indices (what a mask broadcast over heads or batch reads)
            self.outer_ivs = []
            inner = 1
            for size in reversed(a.outer):
                v = w.fresh("outer")
                if size == 1:
                    w.emit(f"{v} = arith.addi {w.index(0)}, {w.index(0)} : index")
                else:
                    q = w.fresh("div")
                    w.emit(f"{q} = arith.divui %bh, {w.index(inner)} : index")
                    w.emit(f"{v} = arith.remui {q}, {w.index(size)} : index")
                self.outer_ivs.insert(0, v)
                inner *= size
            R = min(self.rows, a.rows)
            main = (a.rows // R) * R
            out = "%ob"
            if main:
                res = w.fresh("rt")
                w.emit(f"{res} = scf.for %i0 = {w.index(0)} to {w.index(main)} step {w.index(R)} "
                       f"iter_args(%oi = {out}) -> ({self.ot}) {{")
                with w.nested():
                    rows = [w.add("%i0", r) for r in range(R)]
                    new = self._row_block(rows, "%oi")
                    w.emit(f"scf.yield {new} : {self.ot}")
                w.emit("}")
                out = res
            for i in range(main, a.rows):
                out = self._row_block([w.index(i)], out)
            w.emit(f"scf.yield {out} : {self.ot}")
        w.emit(f"}} {{{THREAD_SPLIT}}}")
        args = ([f"%q: {self.qt}", f"%kt: {self.ktt}", f"%v: {self.vvt}"]
                + [f"%side{k}: {s.value.type}" for k, s in enumerate(a.sides)])
        return w.function(name, args, [self.ot], ["%heads"], sections=[self.top, w])


def rows_for(lanes: int, value_dim: int, registers: int, key_vectors: int = 2) -> int:
    """Query rows per tile: as many as the register file holds with each row's Dv accumulators and
    its `key_vectors` score vectors, plus the value row being read (at most 4)."""
    nv = -(-value_dim // lanes)
    return max(1, min(4, (registers - nv - 2) // (nv + key_vectors)))
