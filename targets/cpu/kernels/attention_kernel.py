"""The fused attention kernel: softmax(Q K^T (op) mask) V without the score matrix (flash attention).

    for each batch-head (split across threads)
      for each block of `block` query rows (8 register tiles of rows; then the rows left)
        m = -inf, l = 0, acc[Dv] = 0 for each row        (the block's state: small buffers, in L1)
        for each tile of `key_tile` keys j0 (128, 64 on NEON; the keys left: a last tile, masked past its end)
          [skipped when the additive mask is -inf over the whole tile for the block: causal]
          1. S = Q K^T[:, tile] (op) scale (op) mask      a register-tiled GEMM (rows x vectors of keys,
                                                          FMA over the head dim), the score ops applied
                                                          as each vector is stored; S is [block, tile]
          2. per row: m' = max(m, max_j S);  mu = m' unless -inf (then 0: a fully masked tile adds
             nothing);  S = exp(S - mu);  alpha = exp(m - mu);  l = l alpha + sum_j S;
             acc *= alpha;  m = m'
          3. acc += S V[tile, :]                           the same register tile (rows x vectors of
                                                          the value dim), FMA over the tile's keys
        O[i, :] = acc / l  (safe softmax: 0 where l == 0, a row with every key masked)

Never more than a [block, tile] slab of scores exists (24 KiB for 48 rows x 128 keys: L1), and the
two products are GEMMs with a register tile as wide as the GEMM kernel's: per step `rows` broadcast
loads and `cols` vector loads feed rows x cols FMAs. The softmax's per-row work (a horizontal max
and sum, the rescale of the accumulators) is paid once per row and tile; its horizontal max and
sum combine lanes by halving (`KernelText.combine_lanes`: `vector.reduction` of floats lowers to
a chain of 16 dependent scalar ops, which made the softmax step a third of the kernel's time). The first version of this kernel interleaved the three steps per 32
keys with the scores in registers: every 32 keys paid the reductions and the rescale, and it ran
at 1.8x torch's fused attention (Whisper's 1500 keys, ViT-384's 577); this schedule is torch's
own (a GEMM per block, a vectorized softmax between).

Numerics: the online softmax rescales partial sums, so results differ from the three-op path in
the last bits (the sums are reassociated, as torch's own fused kernels do). A NaN score gives a NaN
row (the max ignores it, the sum does not).
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import NONPOSITIVE, KernelText, f32_literal, tensor_type, vector_type
from etc.targets.cpu.kernels.attention_match import Attention
from etc.targets.cpu.parallel import THREAD_SPLIT


def register_tile(registers: int) -> tuple[int, int]:
    """(rows, vectors) of both products' register tile: as many accumulators as the register file
    holds beside one broadcast and a row of loaded vectors (6 x 4 of 32 registers, 6 x 2 of 16)."""
    cols = 4 if registers >= 32 else 2
    return max(1, min(6, (registers - cols - 1) // cols)), cols


class Kernel:
    # A key tile is 128 keys, at most 16 vectors of them (64 keys on 4-lane NEON): the kernel's text
    # unrolls a tile's vectors, and one-shot-bufferize's time grows faster than the text (Q K^T's
    # tile of 32 NEON vectors took 3.5 s to bufferize, 16 take 0.6 s; x86 keeps 128).
    def __init__(self, a: Attention, lanes: int, registers: int, key_tile: int = 128, key_vectors: int = 16,
                 block_tiles: int = 8):
        self.a, self.lanes = a, lanes
        self.rows, self.cols = register_tile(registers)
        self.w = KernelText()
        self.top = self.w.section()  # constants ahead of the loops
        self.splats, self.static_keys = {}, {}
        self.vt = vector_type(lanes)
        self.qt = tensor_type([a.batch, a.rows, a.head])
        self.ktt = tensor_type([a.batch, a.head, a.keys])
        self.vvt = tensor_type([a.batch, a.keys, a.value_dim])
        self.ot = tensor_type([a.batch, a.rows, a.value_dim])
        self.nv = -(-a.value_dim // lanes)
        self.block = min(self.rows * block_tiles, a.rows)
        self.key_tile = min(key_tile, key_vectors * lanes, -(-a.keys // lanes) * lanes)
        self.st = tensor_type([self.block, self.key_tile])  # a block's scores, then probabilities
        self.acct = tensor_type([self.block, self.nv * lanes])  # its accumulators (Dv padded to whole vectors)
        self.mlt = tensor_type([2, self.block])  # its running max (row 0) and sum (row 1)
        self.buf_types = [self.st, self.acct, self.mlt]

    # ---------------------------------------------------------------- pieces
    def _side_value(self, k: int, row: str, j0: str, n: int) -> str:
        """Side tensor k at (this batch-head, row, keys j0..j0+n) as a vector."""
        w, a = self.w, self.a
        side = a.sides[k]
        rank = len(a.outer) + 2
        idx = []
        for dim in side.dims:
            if dim is None:
                idx.append(w.index(0))
            elif dim == rank - 1:
                idx.append(j0)
            elif dim == rank - 2:
                idx.append(row)
            else:
                idx.append(self.outer_ivs[dim])
        stype = str(side.value.type)
        if side.dims and side.dims[-1] == rank - 1:
            return w.read(f"%side{k}", ", ".join(idx), self.zero, stype, self.vt, n == self.lanes, stem="mask")
        scalar = w.fresh("ms")
        w.emit(f"{scalar} = tensor.extract %side{k}[{', '.join(idx)}] : {stype}")
        return w.broadcast(scalar, self.lanes)

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

    def _loop(self, iv: str, lo, hi, step: int, carried: list, types: list, body) -> list:
        """scf.for iv = lo to hi step `step` carrying `carried`; body(names) -> the yielded values.
        Bounds are ints (index constants) or SSA names."""
        w = self.w
        bound = (lambda b: w.index(b) if isinstance(b, int) else b)
        res = w.fresh("loop")
        names = [f"%c{i}_{res[1:]}" for i in range(len(carried))]
        w.emit(f"{res}:{len(carried)} = scf.for {iv} = {bound(lo)} to {bound(hi)} step {w.index(step)} "
               f"iter_args({', '.join(f'{n} = {c}' for n, c in zip(names, carried))}) -> ({', '.join(types)}) {{")
        with w.nested():
            new = body(names)
            w.emit(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        w.emit("}")
        return [f"{res}#{i}" for i in range(len(carried))]

    def _row_groups(self, base: str, nrows: int, value: str, vtype: str, group) -> str:
        """`group(rows, local, value) -> value` over the block's rows in register tiles of `rows`
        (a loop), then the rows left as one smaller tile; rows are query indices, local the block's."""
        w, R = self.w, self.rows
        main = (nrows // R) * R
        if main:
            g = w.fresh("g")

            def body(names):
                local = [w.add(g, r) for r in range(R)]
                return [group([w.addv(base, x) for x in local], local, names[0])]
            (value,) = self._loop(g, 0, main, R, [value], [vtype], body)
        if nrows > main:
            local = [w.index(r) for r in range(main, nrows)]
            value = group([w.addv(base, x) for x in local], local, value)
        return value

    def _fma_tile(self, scalars: list, vectors: list, accs: list) -> list:
        """accs[r * len(vectors) + c] += scalars[r] (broadcast) * vectors[c]."""
        w, out = self.w, list(accs)
        for r, scalar in enumerate(scalars):
            splat = w.broadcast(scalar, self.lanes)
            for c, vector in enumerate(vectors):
                result = w.fresh("f")
                w.emit(f"{result} = vector.fma {splat}, {vector}, {out[r * len(vectors) + c]} : {self.vt}")
                out[r * len(vectors) + c] = result
        return out

    def _op(self, name: str, a: str, b: str, type_: str) -> str:
        out = self.w.fresh("h")
        self.w.emit(f"{out} = {name} {a}, {b} : {type_}")
        return out

    def _chunks(self, count: int) -> list[tuple[int, int]]:
        """(first vector, vectors) of `count` vectors in groups of the register tile's columns."""
        return [(c, min(self.cols, count - c)) for c in range(0, count, self.cols)]

    # ---------------------------------------------------------------- 1. scores
    def _scores(self, base: str, nrows: int, j0: str, n: int, s: str) -> str:
        """S[local, 0:n] = Q[rows] K^T[:, j0:j0+n] with the score ops; keys past n are -inf."""
        w, a, L = self.w, self.a, self.lanes

        def group(rows, local, s):
            R = len(rows)
            for c0, cc in self._chunks(-(-n // L)):
                keys = [min(L, n - (c0 + c) * L) for c in range(cc)]
                js = [self._key(j0, (c0 + c) * L) for c in range(cc)]
                res, d = w.fresh("s"), w.fresh("d")
                names = [f"%sa{i}_{res[1:]}" for i in range(R * cc)]
                vts = ", ".join([self.vt] * (R * cc))
                w.emit(f"{res}:{R * cc} = scf.for {d} = {w.index(0)} to {w.index(a.head)} step {w.index(1)} "
                       f"iter_args({', '.join(f'{x} = {self.zero_v}' for x in names)}) -> ({vts}) {{")
                with w.nested():
                    kvs = [w.read("%kt", f"%bh, {d}, {j}", self.zero, self.ktt, self.vt, k == L, stem="k")
                           for j, k in zip(js, keys)]
                    qs = []
                    for row in rows:
                        q = w.fresh("q")
                        w.emit(f"{q} = tensor.extract %q[%bh, {row}, {d}] : {self.qt}")
                        qs.append(q)
                    w.emit(f"scf.yield {', '.join(self._fma_tile(qs, kvs, names))} : {vts}")
                w.emit("}")
                for r, (row, lr) in enumerate(zip(rows, local)):
                    for c, (j, k) in enumerate(zip(js, keys)):
                        score = f"{res}#{r * cc + c}"
                        for op in a.chain:
                            other = self._side_value(op.side, row, j, k) if op.side is not None \
                                else self._splat(op.constant)
                            x, y = (score, other) if op.scores_first else (other, score)
                            score = w.fresh("sc")
                            w.emit(f"{score} = {op.op} {x}, {y} : {self.vt}")
                        if k < L:  # keys past the end: -inf, nothing in the softmax
                            mask, masked = w.fresh("km"), w.fresh("sc")
                            w.emit(f"{mask} = vector.constant_mask [{k}] : {vector_type(L, 'i1')}")
                            w.emit(f"{masked} = arith.select {mask}, {score}, {self.ninf_v} "
                                   f": {vector_type(L, 'i1')}, {self.vt}")
                            score = masked
                        s = w.write(score, s, f"{lr}, {w.index((c0 + c) * L)}", self.vt, self.st, True, stem="st")
            return s
        return self._row_groups(base, nrows, s, self.st, group)

    # ---------------------------------------------------------------- 2. softmax
    def _softmax(self, nrows: int, n: int, bufs: list) -> list:
        """Per row: the tile's max, S = exp(S - mu), the running max and sum, acc rescaled."""
        w, L, nvec = self.w, self.lanes, -(-n // self.lanes)
        r = w.fresh("r")

        def body(names):
            s, acc, ml = names
            m, l = w.fresh("m"), w.fresh("l")
            w.emit(f"{m} = tensor.extract {ml}[{w.index(0)}, {r}] : {self.mlt}")
            w.emit(f"{l} = tensor.extract {ml}[{w.index(1)}, {r}] : {self.mlt}")
            scores = [w.read(s, f"{r}, {w.index(c * L)}", self.zero, self.st, self.vt, True, stem="sv")
                      for c in range(nvec)]
            top = scores[0]
            for x in scores[1:]:
                t2 = w.fresh("mx")
                w.emit(f"{t2} = arith.maxnumf {top}, {x} : {self.vt}")
                top = t2
            mn, isinf, mu = (w.fresh(x) for x in ("mn", "inf", "mu"))
            tmax = w.combine_lanes(top, L, lambda a, b, t: self._op("arith.maxnumf", a, b, t))
            w.emit(f"{mn} = arith.maxnumf {m}, {tmax} : f32")
            w.emit(f"{isinf} = arith.cmpf oeq, {mn}, {self.ninf} : f32")
            w.emit(f"{mu} = arith.select {isinf}, {self.zero}, {mn} : f32")
            muv = w.broadcast(mu, L)
            psum = None
            for c, x in enumerate(scores):
                diff, p = w.fresh("df"), w.fresh("p")
                w.emit(f"{diff} = arith.subf {x}, {muv} : {self.vt}")
                w.emit(f"{p} = math.exp {diff} {{{NONPOSITIVE}}} : {self.vt}")
                if psum is None:
                    psum = p
                else:
                    t2 = w.fresh("pa")
                    w.emit(f"{t2} = arith.addf {psum}, {p} : {self.vt}")
                    psum = t2
                s = w.write(p, s, f"{r}, {w.index(c * L)}", self.vt, self.st, True, stem="st")
            mv, adiff, alpha_v, alpha, lscaled, ln = (w.fresh(x) for x in ("mv", "ad", "av", "al", "ls", "ln"))
            w.emit(f"{mv} = vector.broadcast {m} : f32 to {self.vt}")
            w.emit(f"{adiff} = arith.subf {mv}, {muv} : {self.vt}")
            w.emit(f"{alpha_v} = math.exp {adiff} {{{NONPOSITIVE}}} : {self.vt}")
            w.emit(f"{alpha} = vector.extract {alpha_v}[0] : f32 from {self.vt}")
            ps = w.combine_lanes(psum, L, lambda a, b, t: self._op("arith.addf", a, b, t))
            w.emit(f"{lscaled} = arith.mulf {l}, {alpha} : f32")
            w.emit(f"{ln} = arith.addf {lscaled}, {ps} : f32")
            for c in range(self.nv):
                idx = f"{r}, {w.index(c * L)}"
                x, y = w.read(acc, idx, self.zero, self.acct, self.vt, True, stem="a"), w.fresh("acc")
                w.emit(f"{y} = arith.mulf {x}, {alpha_v} : {self.vt}")
                acc = w.write(y, acc, idx, self.vt, self.acct, True, stem="acc")
            for k, value in ((0, mn), (1, ln)):
                new = w.fresh("ml")
                w.emit(f"{new} = tensor.insert {value} into {ml}[{w.index(k)}, {r}] : {self.mlt}")
                ml = new
            return [s, acc, ml]
        return self._loop(r, 0, nrows, 1, bufs, self.buf_types, body)

    # ---------------------------------------------------------------- 3. acc += P V
    def _update(self, base: str, nrows: int, j0: str, n: int, s: str, acc: str) -> str:
        w, a, L = self.w, self.a, self.lanes
        unroll = 4

        def group(rows, local, acc):
            R = len(rows)
            for c0, cc in self._chunks(self.nv):
                full = [(c0 + c + 1) * L <= a.value_dim for c in range(cc)]
                idx = [(lr, w.index((c0 + c) * L)) for lr in local for c in range(cc)]
                accs = [w.read(acc, f"{lr}, {col}", self.zero, self.acct, self.vt, True, stem="a") for lr, col in idx]

                def keys(j_at, accs):
                    """The FMA steps of the keys j_at(0..) (index names of the tile's key offsets)."""
                    for jj in j_at:
                        key = jj if isinstance(jj, str) else w.index(jj)
                        vk = self._key(j0, jj) if isinstance(jj, int) else w.addv(j0, jj)
                        vrows = [w.read("%v", f"%bh, {vk}, {w.index((c0 + c) * L)}", self.zero, self.vvt, self.vt,
                                        full[c], stem="v") for c in range(cc)]
                        ps = []
                        for lr in local:
                            p = w.fresh("pj")
                            w.emit(f"{p} = tensor.extract {s}[{lr}, {key}] : {self.st}")
                            ps.append(p)
                        accs = self._fma_tile(ps, vrows, accs)
                    return accs
                main = (n // unroll) * unroll
                if main:
                    j = w.fresh("j")
                    accs = self._loop(j, 0, main, unroll, accs, [self.vt] * len(accs),
                                      lambda names: keys([w.add(j, u) for u in range(unroll)], names))
                accs = keys(list(range(main, n)), accs)
                for (lr, col), x in zip(idx, accs):
                    acc = w.write(x, acc, f"{lr}, {col}", self.vt, self.acct, True, stem="acc")
            return acc
        return self._row_groups(base, nrows, acc, self.acct, group)

    # ---------------------------------------------------------------- a tile, a block
    def _tile(self, base: str, nrows: int, j0: str, n: int, bufs: list) -> list:
        """The three steps for keys j0..j0+n; skipped when the additive mask is -inf over the whole
        tile for the block's rows (a causal mask's tiles above the diagonal: no score of it can
        count, so the state is unchanged)."""
        w = self.w

        def steps(bufs):
            s, acc, ml = bufs
            s = self._scores(base, nrows, j0, n, s)
            s, acc, ml = self._softmax(nrows, n, [s, acc, ml])
            return [s, self._update(base, nrows, j0, n, s, acc), ml]
        skip = self.a.skip_side if n == self.key_tile else None
        if skip is None:
            return steps(bufs)
        r = w.fresh("r")

        def row_max(names):
            top = names[0]
            for c in range(n // self.lanes):
                mv = self._side_value(skip, w.addv(base, r), self._key(j0, c * self.lanes), self.lanes)
                t2 = w.fresh("mmx")
                w.emit(f"{t2} = arith.maximumf {top}, {mv} : {self.vt}")
                top = t2
            return [top]
        (top,) = self._loop(r, 0, nrows, 1, [self.ninf_v], [self.vt], row_max)
        red, cond = w.combine_lanes(top, self.lanes, lambda a, b, t: self._op("arith.maximumf", a, b, t)), w.fresh("masked")
        w.emit(f"{cond} = arith.cmpf oeq, {red}, {self.ninf} : f32")
        res = w.fresh("tile")
        w.emit(f"{res}:3 = scf.if {cond} -> ({', '.join(self.buf_types)}) {{")
        with w.nested():
            w.emit(f"scf.yield {', '.join(bufs)} : {', '.join(self.buf_types)}")
        w.emit("} else {")
        with w.nested():
            w.emit(f"scf.yield {', '.join(steps(bufs))} : {', '.join(self.buf_types)}")
        w.emit("}")
        return [f"{res}#{i}" for i in range(3)]

    def _block(self, base: str, nrows: int, carried: list) -> list:
        """Rows base .. base + nrows of this head over every key; carried = [out, s, acc, ml]."""
        w, a, nv, vt, L = self.w, self.a, self.nv, self.vt, self.lanes
        out, s, acc, ml = carried
        r = w.fresh("r")

        def init(names):
            a_, m_ = names
            for c in range(nv):
                a_ = w.write(self.zero_v, a_, f"{r}, {w.index(c * L)}", vt, self.acct, True, stem="acc")
            for k, v in ((0, self.ninf), (1, self.zero)):
                x = w.fresh("ml")
                w.emit(f"{x} = tensor.insert {v} into {m_}[{w.index(k)}, {r}] : {self.mlt}")
                m_ = x
            return [a_, m_]
        acc, ml = self._loop(r, 0, nrows, 1, [acc, ml], [self.acct, self.mlt], init)
        tile = self.key_tile
        full_tiles = a.keys // tile
        bufs = [s, acc, ml]
        if full_tiles:
            j0 = w.fresh("j")
            bufs = self._loop(j0, 0, full_tiles * tile, tile, bufs, self.buf_types,
                              lambda names: self._tile(base, nrows, j0, tile, names))
        if a.keys % tile:
            j0 = w.index(full_tiles * tile)
            self.static_keys[j0] = full_tiles * tile
            bufs = self._tile(base, nrows, j0, a.keys % tile, bufs)
        s, acc, ml = bufs
        r = w.fresh("r")

        def finish(names):
            (o_,) = names
            row = w.addv(base, r)
            l, inv = w.fresh("l"), w.fresh("inv")
            w.emit(f"{l} = tensor.extract {ml}[{w.index(1)}, {r}] : {self.mlt}")
            w.emit(f"{inv} = arith.divf {self.one}, {l} : f32")
            invv = w.broadcast(inv, L)
            empty = None
            if a.safe:
                empty = w.fresh("empty")
                w.emit(f"{empty} = arith.cmpf oeq, {l}, {self.zero} : f32")
            for c in range(nv):
                x, o = w.read(acc, f"{r}, {w.index(c * L)}", self.zero, self.acct, vt, True, stem="a"), w.fresh("o")
                w.emit(f"{o} = arith.mulf {x}, {invv} : {vt}")
                if empty is not None:
                    o2 = w.fresh("o")
                    w.emit(f"{o2} = arith.select {empty}, {self.zero_v}, {o} : {vt}")
                    o = o2
                o_ = w.write(o, o_, f"%bh, {row}, {w.index(c * L)}", vt, self.ot, (c + 1) * L <= a.value_dim,
                             stem="out")
            return [o_]
        (out,) = self._loop(r, 0, nrows, 1, [out], [self.ot], finish)
        return [out, s, acc, ml]

    # ---------------------------------------------------------------- the function
    def function(self, name: str = "__etc_attention") -> str:
        w, a = self.w, self.a
        self.zero = w.const(f32_literal(0.0), "f32")
        self.one = w.const(f32_literal(1.0), "f32")
        self.ninf = w.const(f32_literal(float("-inf")), "f32")
        self.zero_v, self.ninf_v = w.broadcast(self.zero, self.lanes), w.broadcast(self.ninf, self.lanes)
        # The output, and the buffers of one block of query rows (carried through the loops of a
        # head: one of each, not one per block or tile): its scores/probabilities, accumulators,
        # running max and sum. Those are made inside the loop over batch-heads, which the threads
        # of a threaded entry share: each thread gets its own (an allocation inside a shared loop
        # is a per-thread stack buffer, etc-cpu-plan-scratch); made outside and carried through
        # it, the threads shared one and overwrote each other's scores (wrong heads on 2 threads).
        w.emit(f"%out0 = tensor.empty() : {self.ot}")
        types = [self.ot, *self.buf_types]

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
            bq = self.block
            main = (a.rows // bq) * bq
            carried = names
            if main:
                qb = w.fresh("qb")
                carried = self._loop(qb, 0, main, bq, carried, types, lambda n: self._block(qb, bq, n))
            if a.rows % bq:
                carried = self._block(w.index(main), a.rows % bq, carried)
            return carried
        res = w.fresh("heads")
        w.emit(f"{res} = scf.for %bh = {w.index(0)} to {w.index(a.batch)} step {w.index(1)} "
               f"iter_args(%h0 = %out0) -> ({self.ot}) {{")
        with w.nested():
            w.emit(f"%s0 = tensor.empty() : {self.st}")
            w.emit(f"%acc0 = tensor.empty() : {self.acct}")
            w.emit(f"%ml0 = tensor.empty() : {self.mlt}")
            new = head(["%h0", "%s0", "%acc0", "%ml0"])
            w.emit(f"scf.yield {new[0]} : {self.ot}")
        w.emit(f"}} {{{THREAD_SPLIT}}}")
        args = ([f"%q: {self.qt}", f"%kt: {self.ktt}", f"%v: {self.vvt}"]
                + [f"%side{k}: {s.value.type}" for k, s in enumerate(a.sides)])
        return w.function(name, args, [self.ot], [res], sections=[self.top, w])
