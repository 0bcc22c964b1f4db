"""The fused attention kernel: softmax(Q K^T (op) mask) V without the score matrix (flash attention).

    for each batch-head (split across threads)
      for each block of `block` query rows (32; then the rows left)
        m = -inf, l = 0, acc[Dv] = 0 for each row        (small buffers: the block's state, in L1)
        for each tile of `key_vectors` x `lanes` keys j0  (32 on AVX-512; the keys left: a last tile)
          for each group of `rows` query rows (then one at a time)
            [skipped when the additive mask is -inf over the whole tile for the group: causal]
            s[j]  = sum_d Q[i, d] K^T[d, j0 + j]          broadcast Q scalars x K^T vectors, FMA
            s     = s (op) scale (op) mask[..., i, j0 + j] the elementwise score ops, vectorized
            m'    = max(m, max_j s);  mu = m' unless -inf (then 0: a fully masked tile adds nothing)
            p     = exp(s - mu);  alpha = exp(m - mu)
            l     = l alpha + sum_j p;  acc = acc alpha + sum_j p[j] V[j0 + j, :]
            m     = m'
        O[i, :] = acc / l  (safe softmax: 0 where l == 0, a row with every key masked)

Never more than a tile of scores exists; the K^T and V tiles (32 keys x the head dim) stay in L1
while every group of the block uses them, which is what makes the kernel compute-bound (a group
walking all keys alone reloads K and V from L2 and ran at half the speed of the three-op path).
The value rows are `ceil(Dv / lanes)` vectors (the last masked when Dv is not a multiple); `rows`
is sized by the register file (`rows_for`: the group's accumulators and score vectors). The
probabilities go through a [rows, tile] buffer so that the P V step reads each as a broadcast load.

Numerics: the online softmax rescales partial sums, so results differ from the three-op path in
the last bits (the sums are reassociated, as torch's own fused kernels do). A NaN score gives a NaN
row (the max ignores it, the sum does not).
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, f32_literal, tensor_type, vector_type
from etc.targets.cpu.kernels.attention_match import Attention
from etc.targets.cpu.parallel import THREAD_SPLIT

class Kernel:
    def __init__(self, a: Attention, lanes: int, rows: int, key_vectors: int = 2, block: int = 32):
        self.a, self.lanes, self.rows, self.key_vectors, self.block = a, lanes, rows, key_vectors, block
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
        bq = min(block, a.rows)
        self.acct = tensor_type([bq, self.nv * lanes])  # a block's accumulators (Dv padded to whole vectors)
        self.mlt = tensor_type([2, bq])  # a block's running max (row 0) and sum (row 1)

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
            new = self._broadcast_fma(w, len(rows), lambda r: f"%q[%bh, {rows[r]}, {d}] : {self.qt}", kvs,
                                      acc_names, ("q", "qb", "sf"))
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
                    w.emit(f"{out} = {op.op} {x}, {y} : {vt}")
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
                w.emit(f"{t2} = arith.maxnumf {top}, {scores[r][c]} : {vt}")
                top = t2
            tmax, mn, isinf, mu, muv, mv, adiff, alpha_v, alpha, ln = (
                w.fresh(x) for x in ("tmax", "mn", "inf", "mu", "muv", "mv", "ad", "av", "al", "l"))
            w.emit(f"{tmax} = vector.reduction <maxnumf>, {top} : {vt} into f32")
            w.emit(f"{mn} = arith.maxnumf {m[r]}, {tmax} : f32")
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
            new_acc = self._broadcast_fma(w, R, lambda r: f"{pbuf}[{w.index(r)}, {w.index(j)}] : {self.pbt}", vrows,
                                          new_acc, ("pj", "pb", "acc"))
        return new_m + new_l + new_acc, pbuf

    def _broadcast_fma(self, w, nrows: int, element, vectors: list, accs: list, names: tuple) -> list:
        """The outer-product step both matrix products of a tile take: for each row r, the scalar
        `tensor.extract element(r)` broadcast and FMA'd into `accs[r * len(vectors) + c]` with
        `vectors[c]`. Returns the new accumulators; `names` prefix the scalar, its broadcast and
        the results."""
        out = list(accs)
        for r in range(nrows):
            scalar, splat = w.fresh(names[0]), w.fresh(names[1])
            w.emit(f"{scalar} = tensor.extract {element(r)}")
            w.emit(f"{splat} = vector.broadcast {scalar} : f32 to {self.vt}")
            for c, vector in enumerate(vectors):
                result = w.fresh(names[2])
                w.emit(f"{result} = vector.fma {splat}, {vector}, {out[r * len(vectors) + c]} : {self.vt}")
                out[r * len(vectors) + c] = result
        return out

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

    def _group(self, rows: list, local: list, j0: str, n: int, bufs: list) -> list:
        """One key tile for a group of rows (`_update`), skipped when the additive mask is -inf over
        the whole tile for these rows (a causal mask's tiles above the diagonal: no score of it
        can count, so the state is unchanged)."""
        w = self.w
        skip = self.a.skip_side if n == self.lanes * self.key_vectors else None
        if skip is None:
            return self._update(rows, local, j0, n, bufs)
        top = None
        for row in rows:
            for c in range(self.key_vectors):
                j = j0 if c == 0 else self._key(j0, c * self.lanes)
                mv = self._side_value(skip, row, j, self.lanes)
                if top is None:
                    top = mv
                else:
                    t2 = w.fresh("mmx")
                    w.emit(f"{t2} = arith.maximumf {top}, {mv} : {self.vt}")
                    top = t2
        red, cond = w.fresh("mred"), w.fresh("masked")
        w.emit(f"{red} = vector.reduction <maximumf>, {top} : {self.vt} into f32")
        w.emit(f"{cond} = arith.cmpf oeq, {red}, {self.ninf} : f32")
        types = [self.acct, self.mlt, self.pbt]
        res = w.fresh("tile")
        w.emit(f"{res}:3 = scf.if {cond} -> ({', '.join(types)}) {{")
        with w.nested():
            w.emit(f"scf.yield {', '.join(bufs)} : {', '.join(types)}")
        w.emit("} else {")
        with w.nested():
            new = self._update(rows, local, j0, n, bufs)
            w.emit(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        w.emit("}")
        return [f"{res}#{i}" for i in range(3)]

    def _update(self, rows: list, local: list, j0: str, n: int, bufs: list) -> list:
        """One key tile for a group of rows: their state read from the block's buffers (acc [Bq, nv
        lanes], ml [2, Bq]: running max and sum), `_tile`, written back. bufs = [acc, ml, pbuf]."""
        w, R, nv, vt, L = self.w, len(rows), self.nv, self.vt, self.lanes
        acc, ml, pbuf = bufs
        m, l, accs = [], [], []
        for r in range(R):
            mr, lr = w.fresh("m"), w.fresh("l")
            w.emit(f"{mr} = tensor.extract {ml}[{w.index(0)}, {local[r]}] : {self.mlt}")
            w.emit(f"{lr} = tensor.extract {ml}[{w.index(1)}, {local[r]}] : {self.mlt}")
            m.append(mr)
            l.append(lr)
        for r in range(R):
            for c in range(nv):
                x = w.fresh("a")
                w.emit(f"{x} = vector.transfer_read {acc}[{local[r]}, {w.index(c * L)}], {self.zero} "
                       f"{{in_bounds = [true]}} : {self.acct}, {vt}")
                accs.append(x)
        state, pbuf = self._tile(rows, j0, n, m + l + accs, pbuf)
        for r in range(R):
            for k, value in ((0, state[r]), (1, state[R + r])):
                new = w.fresh("ml")
                w.emit(f"{new} = tensor.insert {value} into {ml}[{w.index(k)}, {local[r]}] : {self.mlt}")
                ml = new
            for c in range(nv):
                new = w.fresh("acc")
                w.emit(f"{new} = vector.transfer_write {state[2 * R + r * nv + c]}, {acc}[{local[r]}, {w.index(c * L)}] "
                       f"{{in_bounds = [true]}} : {vt}, {self.acct}")
                acc = new
        return [acc, ml, pbuf]

    def _loop(self, iv: str, lo: int, hi: int, step: int, carried: list, types: list, body) -> list:
        """scf.for iv = lo to hi step `step` carrying `carried`; body(names) -> the yielded values."""
        w = self.w
        res = w.fresh("loop")
        names = [f"%c{i}_{res[1:]}" for i in range(len(carried))]
        w.emit(f"{res}:{len(carried)} = scf.for {iv} = {w.index(lo)} to {w.index(hi)} step {w.index(step)} "
               f"iter_args({', '.join(f'{n} = {c}' for n, c in zip(names, carried))}) -> ({', '.join(types)}) {{")
        with w.nested():
            new = body(names)
            w.emit(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        w.emit("}")
        return [f"{res}#{i}" for i in range(len(carried))]

    def _key_tile_over_rows(self, base, nrows: int, j0: str, n: int, bufs: list) -> list:
        """One key tile for every row of the block, in groups of `rows` (then one at a time)."""
        w, R = self.w, min(self.rows, nrows)
        main = (nrows // R) * R
        types = [self.acct, self.mlt, self.pbt]
        if main:
            g = w.fresh("g")

            def body(names):
                local = [w.add(g, r) for r in range(R)]
                rows = [w.addv(base, x) for x in local]
                return self._group(rows, local, j0, n, names)
            bufs = self._loop(g, 0, main, R, bufs, types, body)
        if nrows - main == 1:
            bufs = self._group([w.add(base, main)], [w.index(main)], j0, n, bufs)
        elif nrows > main:  # the rows left over, one at a time (one copy of the tile's code)
            i = w.fresh("i")
            bufs = self._loop(i, main, nrows, 1, bufs, types,
                              lambda names: self._group([w.addv(base, i)], [i], j0, n, names))
        return bufs

    def _block(self, base: str, nrows: int, carried: list) -> list:
        """Rows base .. base + nrows of this head over every key; carried = [out, acc, ml, pbuf]."""
        w, a, nv, vt, L = self.w, self.a, self.nv, self.vt, self.lanes
        out, acc, ml, pbuf = carried
        r = w.fresh("r")

        def init(names):
            a_, m_ = names
            for c in range(nv):
                x = w.fresh("acc")
                w.emit(f"{x} = vector.transfer_write {self.zero_v}, {a_}[{r}, {w.index(c * L)}] {{in_bounds = [true]}} "
                       f": {vt}, {self.acct}")
                a_ = x
            for k, v in ((0, self.ninf), (1, self.zero)):
                x = w.fresh("ml")
                w.emit(f"{x} = tensor.insert {v} into {m_}[{w.index(k)}, {r}] : {self.mlt}")
                m_ = x
            return [a_, m_]
        acc, ml = self._loop(r, 0, nrows, 1, [acc, ml], [self.acct, self.mlt], init)
        tile = L * self.key_vectors
        full_tiles = a.keys // tile
        bufs = [acc, ml, pbuf]
        if full_tiles:
            j0 = w.fresh("j")
            bufs = self._loop(j0, 0, full_tiles * tile, tile, bufs, [self.acct, self.mlt, self.pbt],
                              lambda names: self._key_tile_over_rows(base, nrows, j0, tile, names))
        if a.keys % tile:
            j0 = w.index(full_tiles * tile)
            self.static_keys[j0] = full_tiles * tile
            bufs = self._key_tile_over_rows(base, nrows, j0, a.keys % tile, bufs)
        acc, ml, pbuf = bufs
        r = w.fresh("r")

        def finish(names):
            (o_,) = names
            row = w.addv(base, r)
            l, inv, invv = w.fresh("l"), w.fresh("inv"), w.fresh("invv")
            w.emit(f"{l} = tensor.extract {ml}[{w.index(1)}, {r}] : {self.mlt}")
            w.emit(f"{inv} = arith.divf {self.one}, {l} : f32")
            w.emit(f"{invv} = vector.broadcast {inv} : f32 to {vt}")
            empty = None
            if a.safe:
                empty = w.fresh("empty")
                w.emit(f"{empty} = arith.cmpf oeq, {l}, {self.zero} : f32")
            for c in range(nv):
                x, o = w.fresh("a"), w.fresh("o")
                w.emit(f"{x} = vector.transfer_read {acc}[{r}, {w.index(c * L)}], {self.zero} {{in_bounds = [true]}} "
                       f": {self.acct}, {vt}")
                w.emit(f"{o} = arith.mulf {x}, {invv} : {vt}")
                if empty is not None:
                    o2 = w.fresh("o")
                    w.emit(f"{o2} = arith.select {empty}, {self.zero_v}, {o} : {vt}")
                    o = o2
                full = "true" if (c + 1) * L <= a.value_dim else "false"
                new = w.fresh("out")
                w.emit(f"{new} = vector.transfer_write {o}, {o_}[%bh, {row}, {w.index(c * L)}] "
                       f"{{in_bounds = [{full}]}} : {vt}, {self.ot}")
                o_ = new
            return [o_]
        (out,) = self._loop(r, 0, nrows, 1, [out], [self.ot], finish)
        return [out, acc, ml, pbuf]

    # ---------------------------------------------------------------- the function
    def function(self, name: str = "__etc_attention") -> str:
        w, a = self.w, self.a
        self.zero = w.const(f32_literal(0.0), "f32")
        self.one = w.const(f32_literal(1.0), "f32")
        self.ninf = w.const(f32_literal(float("-inf")), "f32")
        self.zero_v, self.ninf_v = w.fresh("zv"), w.fresh("niv")
        w.emit(f"{self.zero_v} = vector.broadcast {self.zero} : f32 to {self.vt}")
        w.emit(f"{self.ninf_v} = vector.broadcast {self.ninf} : f32 to {self.vt}")
        # The output, and the buffers of one block of query rows (carried through the loops: one
        # of each, not one per block or tile): the rows' accumulators and running max and sum, the
        # tile's probabilities (read back as broadcast scalars by the P V step).
        w.emit(f"%out0 = tensor.empty() : {self.ot}")
        w.emit(f"%acc0 = tensor.empty() : {self.acct}")
        w.emit(f"%ml0 = tensor.empty() : {self.mlt}")
        w.emit(f"%pbuf0 = tensor.empty() : {self.pbt}")
        types = [self.ot, self.acct, self.mlt, self.pbt]

        def head(names):
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
            bq = min(self.block, a.rows)
            main = (a.rows // bq) * bq
            carried = names
            if main:
                qb = w.fresh("qb")
                carried = self._loop(qb, 0, main, bq, carried, types, lambda n: self._block(qb, bq, n))
            if a.rows % bq:
                carried = self._block(w.index(main), a.rows % bq, carried)
            return carried
        res = w.fresh("heads")
        names = [f"%h{i}" for i in range(4)]
        w.emit(f"{res}:4 = scf.for %bh = {w.index(0)} to {w.index(a.batch)} step {w.index(1)} "
               f"iter_args({', '.join(f'{n} = {c}' for n, c in zip(names, ['%out0', '%acc0', '%ml0', '%pbuf0']))}) "
               f"-> ({', '.join(types)}) {{")
        with w.nested():
            new = head(names)
            w.emit(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        w.emit(f"}} {{{THREAD_SPLIT}}}")
        args = ([f"%q: {self.qt}", f"%kt: {self.ktt}", f"%v: {self.vvt}"]
                + [f"%side{k}: {s.value.type}" for k, s in enumerate(a.sides)])
        return w.function(name, args, [self.ot], [f"{res}#0"], sections=[self.top, w])


def rows_for(lanes: int, value_dim: int, registers: int, key_vectors: int = 2) -> int:
    """Query rows per group: as many as the register file holds with each row's Dv accumulators and
    its `key_vectors` score vectors, plus the value row being read (at most 4)."""
    nv = -(-value_dim // lanes)
    return max(1, min(4, (registers - nv - 2) // (nv + key_vectors)))
