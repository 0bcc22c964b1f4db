"""The dynamic linear kernel: int8 rows x int8 weights (8da8w, PT2E's dynamic config) or int4 weights
(8da4w, the nibbles unpacked in registers), float scales per channel or per group."""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, f32_literal, tensor_type
from etc.targets.cpu.kernels.int8_isa import DOTS
from etc.targets.cpu.kernels.int8_kernel import Int8Kernel
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, DynamicPair
from etc.targets.cpu.loop_effects import THREAD_SPLIT


# Byte rows of K per iteration of the K loop. K fully unrolled (one scale group: int8 per channel)
# made BERT's 768 x 3072 tile body ~7,000 instructions, larger than the decoded-instruction cache,
# and the kernel ran from the legacy decoders.
K_UNROLL = 4


class DynamicLinearKernel(Int8Kernel):
    """The kernel as text: a function of (q i8 [M, KB, 4] (int8 weights) or [M, KB, 2, 4] (int4),
    B [NB, KB, 16, 4] (the weights' bytes: int8 values or packed nibble pairs), S [NB, G, 16] f32,
    zp [M], s [M], C [N], bias [N]) returning y [M, N] f32.

        qs[m, g] = -o * sum of row m's q over group g       (the weights' +o offset, below)
        for each group of `panels` 16-column panels, for each tile of `rows` rows (then single rows):
            facc[rows][panels * 16 / lanes] = 0              (vector<lanes x f32>)
            for g in G:   iacc = qs[m, g] broadcast          (vector<lanes x i32>)
                          for each byte row kb of the group: b = the panels' 64-byte rows (one load
                              each), made unsigned operands w + o in registers:
                              int8 (o = 128): b ^ 0x80; iacc = vpdpbusd(iacc, b, q's 4 k broadcast);
                              int4 (o = 8): b ^ 0x88, lo = b & 15 (k even), hi = (b >> 4) & 15 (k odd),
                                  iacc = vpdpbusd(iacc, lo, q's 4 even k broadcast),
                                  iacc = vpdpbusd(iacc, hi, q's 4 odd k broadcast)
                          facc = fma(float(iacc), S[panel, g], facc)      (iacc = sum q w, exactly)
            epilogue: (facc - zp[m] C) * s[m] + bias, one f32 store per vector (masked on a
            partial panel)
    GEMV (one row, decode) streams each panel's bytes once; more rows share each load."""

    def __init__(self, p: DynamicPair, dot: str, mr: int, panels: int):
        self.p = p
        self.isa = DOTS[dot]
        self.lanes = self.isa.lanes
        self.vp = PANEL // self.lanes
        # two accumulators (i32 group, f32 total) per output vector, but one group (int8 per channel):
        # the f32 ones are the i32 ones converted once, after K
        self.rows = max(1, mr if p.G == 1 else mr // 3)
        self.panels = max(1, min(panels, p.NB))
        KernelText.__init__(self)

    def types(self):
        p = self.p
        M = p.M
        a_shape = [M, p.KB, GROUP] if p.bits == 8 else [M, p.KB, 2, GROUP]
        a = self.a_element
        return {"X": tensor_type([M, p.K], "f32"), "Aflat": tensor_type([M, p.KB * self.k_per_row], a),
                "A": tensor_type(a_shape, a), "B": tensor_type([p.NB, p.KB, PANEL, GROUP], "i8"),
                "S": tensor_type([p.NB, p.G, PANEL], "f32"), "row": tensor_type([M], "f32"),
                "col": tensor_type([p.N], "f32"),
                "out": tensor_type([M, p.N], "f32"), "qs": tensor_type([M, p.G], "i32"),
                "Bflat": tensor_type([p.NB, p.KB, PANEL * GROUP], "i8")}

    def build(self) -> str:
        p, L, ty = self.p, self.lanes, self.types()
        dyn = "%M" if p.M < 0 else ""
        self.emit(f"%M = tensor.dim %X, {self.index(0)} : {ty['X']}")
        self.emit(f"%fzero = arith.constant dense<0.0> : vector<{L}xf32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        if self.a_element == "i16":
            self.emit("%pad16 = arith.constant 0 : i16")
        self.dot_constants()
        self.emit("%padf = arith.constant 0.0 : f32")
        if p.bits == 8:
            self.emit(f"%x80 = arith.constant dense<-128> : vector<{4 * L}xi8>")
        else:
            self.emit(f"%x88 = arith.constant dense<-120> : vector<{4 * L}xi8>")
            self.emit(f"%x0f = arith.constant dense<15> : vector<{4 * L}xi8>")
            self.emit(f"%x04 = arith.constant dense<4> : vector<{4 * L}xi8>")
        self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {ty['B']} into {ty['Bflat']}")
        self.prologue()
        self.emit(f"%init = tensor.empty({dyn}) : {ty['out']}")
        groups = (p.N // PANEL) // self.panels
        out = "%init"
        if groups:
            g, o, res = self.fresh("g"), self.fresh("o"), self.fresh("r")
            self.emit(f"{res} = scf.for {g} = {self.index(0)} to {self.index(groups)} step {self.index(1)} "
                      f"iter_args({o} = {out}) -> ({ty['out']}) {{")
            nb0 = self.mul(g, self.panels)
            inner = self.rows_of(o, nb0, self.panels, None)
            self.emit(f"  scf.yield {inner} : {ty['out']}")
            self.emit(f"}} {{{THREAD_SPLIT}}}")  # the groups write their own columns
            out = res
        rest = p.NB - groups * self.panels
        if rest:
            out = self.rows_of(out, self.index(groups * self.panels), rest, groups * self.panels)
        self.emit(f"%result = tensor.cast {out} : {ty['out']} to {ty['out']}")
        return (f"func.func private @qgemm_dynamic(%X: {ty['X']}, %B: {ty['B']}, %S: {ty['S']}, "
                f"%C: {ty['col']}, %bias: {ty['col']}) -> {ty['out']} {{\n"
                + self.text() + f"\n  return %result : {ty['out']}\n}}")

    @property
    def a_element(self) -> str:
        """q's element type as the tiles read it: i8, or with vpmaddwd pairs (no dot-product instruction)
        i16, each group of 4 stored widened as its even and odd pair, (q0, q2, q1, q3): the tiles then
        broadcast the two pairs from memory as they are, where widening a broadcast byte group took
        three vector operations per row and byte row of K, 48 of the k loop's 236 (BERT's FFN on a Zen 3,
        same process: 0.92x the time, an encoder layer 0.95x; same outputs)."""
        return "i8" if self.isa.dot else "i16"

    @property
    def k_per_row(self) -> int:
        """K values per byte row of a panel: 4 (int8), 8 (int4: two per byte)."""
        return GROUP if self.p.bits == 8 else 2 * GROUP

    # ------------------------------------------------------------ the activation, quantized per call
    def prologue(self) -> None:
        """%A (q in the layout the dot products read), %zp, %sc ([M] f32) and %qs ([M, G] i32, -offset
        * each group's sum of q) from the float activation %X, in vector code: per row (or once, per
        tensor) the range including 0 (vector min/max, K's tail read padded with 0, which the range
        includes anyway), its scale and zero point (the lowering's formula), then q = clamp(roundeven(x /
        s) + zp) a vector at a time (int4: each 8 values reordered even k then odd k), summed per group
        on the way. The float operations are the lowering's generics', in the same order."""
        p, L, ty = self.p, self.lanes, self.types()
        dyn = "%M" if p.M < 0 else ""
        W = p.KB * self.k_per_row  # K padded to whole byte rows
        Gp = W // p.G  # padded K values per scale group
        offset = 128 if p.bits == 8 else 8
        fv = f"vector<{L}xf32>"
        for name, value in (("c255", 255.0), ("floor", p.floor), ("one", 1.0), ("qmin", -128.0), ("qmax", 127.0)):
            self.emit(f"%{name} = arith.constant {f32_literal(value)} : f32")
        self.emit(f"%Ae = tensor.empty({dyn}) : {ty['Aflat']}")
        self.emit(f"%re = tensor.empty({dyn}) : {ty['row']}")
        self.emit(f"%qse = tensor.empty({dyn}) : {ty['qs']}")
        if p.granularity == "per_tensor":  # one range over every row
            m, lo, hi, res = self.fresh("m"), self.fresh("lo"), self.fresh("hi"), self.fresh("t")
            self.emit(f"{res}:2 = scf.for {m} = {self.index(0)} to %M step {self.index(1)} "
                      f"iter_args({lo} = %fzero, {hi} = %fzero) -> ({fv}, {fv}) {{")
            rlo, rhi = self.row_range(m, lo, hi)
            self.emit(f"  scf.yield {rlo}, {rhi} : {fv}, {fv}")
            self.emit("}")
            tensor_params = self.params(f"{res}#0", f"{res}#1")
        m, a, sc, zp, qs = (self.fresh(n) for n in ("m", "a", "sc", "zp", "qs"))
        self.emit(f"%rows:4 = scf.for {m} = {self.index(0)} to %M step {self.index(1)} iter_args({a} = %Ae, "
                  f"{sc} = %re, {zp} = %re, {qs} = %qse) -> ({ty['Aflat']}, {ty['row']}, {ty['row']}, {ty['qs']}) {{")
        if p.granularity == "per_tensor":
            s, inv, z = tensor_params
        else:
            rlo, rhi = self.row_range(m, "%fzero", "%fzero")
            s, inv, z = self.params(rlo, rhi)
        sc2, zp2 = self.fresh(), self.fresh()
        self.emit(f"  {sc2} = tensor.insert {s} into {sc}[{m}] : {ty['row']}")
        self.emit(f"  {zp2} = tensor.insert {z} into {zp}[{m}] : {ty['row']}")
        out, sums = self.row_groups(m, a, qs, inv, z, Gp, offset)
        self.emit(f"  scf.yield {out}, {sc2}, {zp2}, {sums} : {ty['Aflat']}, {ty['row']}, {ty['row']}, {ty['qs']}")
        # per row, each row is quantized on its own (per tensor, the rows read the range thread 0 found)
        self.emit("}" if p.granularity == "per_tensor" else f"}} {{{THREAD_SPLIT}}}")
        inner = "[[0], [1, 2]]" if p.bits == 8 else "[[0], [1, 2, 3]]"
        sizes = [p.KB, GROUP] if p.bits == 8 else [p.KB, 2, GROUP]
        self.emit(f"%A = tensor.expand_shape %rows#0 {inner} output_shape [{'%M' if p.M < 0 else p.M}, "
                  f"{', '.join(map(str, sizes))}] : {ty['Aflat']} into {ty['A']}")
        self.emit(f"%sc = tensor.cast %rows#1 : {ty['row']} to {ty['row']}")
        self.emit(f"%zp = tensor.cast %rows#2 : {ty['row']} to {ty['row']}")
        self.emit(f"%qs = tensor.cast %rows#3 : {ty['qs']} to {ty['qs']}")

    def row_groups(self, m: str, out: str, sums: str, inv: str, z: str, Gp: int, offset: int) -> tuple[str, str]:
        """Row m quantized group by group (a loop over the G groups of Gp padded values): whole vectors
        inside K in a loop, the rest (K's tail and its zero padding) as static narrower vectors; each
        group's -offset * sum(q) into `sums`. Returns (the flat activation, sums)."""
        p, L, ty = self.p, self.lanes, self.types()
        iv = f"vector<{L}xi32>"
        loop = min(Gp, p.K) // L  # whole vectors per group inside K (K = G * Gp unless G = 1)
        g, o, acc_s, res = self.fresh("g"), self.fresh("o"), self.fresh("s"), self.fresh("q")
        self.emit(f"  {res}:2 = scf.for {g} = {self.index(0)} to {self.index(p.G)} step {self.index(1)} "
                  f"iter_args({o} = {out}, {acc_s} = {sums}) -> ({ty['Aflat']}, {ty['qs']}) {{")
        base = self.mul(g, Gp)
        zero_v = self.fresh()
        self.emit(f"  {zero_v} = arith.constant dense<0> : {iv}")
        total = None
        if loop:
            k, o2, vacc, lres = self.fresh("k"), self.fresh("o"), self.fresh("v"), self.fresh("l")
            end = self.add(base, loop * L)
            self.emit(f"  {lres}:2 = scf.for {k} = {base} to {end} step {self.index(L)} iter_args({o2} = {o}, "
                      f"{vacc} = {zero_v}) -> ({ty['Aflat']}, {iv}) {{")
            o3, q32 = self.quantize_chunk(o2, m, k, L, inv, z, "true")
            v2 = self.fresh()
            self.emit(f"  {v2} = arith.addi {vacc}, {q32} : {iv}")
            self.emit(f"  scf.yield {o3}, {v2} : {ty['Aflat']}, {iv}")
            self.emit("  }")
            o = f"{lres}#0"
            total = self.fresh()
            self.emit(f"  {total} = vector.reduction <add>, {lres}#1 : {iv} into i32")
        first = loop * L
        while first < Gp:  # the rest of the group: at most a vector and a narrower one
            width = min(L, Gp - first)
            # static: only a single group (G = 1) reaches K's tail and its padding
            inb = "true" if p.G > 1 or first + width <= p.K else "false"
            o, q32 = self.quantize_chunk(o, m, self.add(base, first), width, inv, z, inb)
            part = self.fresh()
            self.emit(f"  {part} = vector.reduction <add>, {q32} : vector<{width}xi32> into i32")
            if total is None:
                total = part
            else:
                t2 = self.fresh()
                self.emit(f"  {t2} = arith.addi {total}, {part} : i32")
                total = t2
            first += width
        neg, s2 = self.fresh(), self.fresh()
        self.emit(f"  {neg} = arith.muli {total}, {self.const(-offset, 'i32')} : i32")
        self.emit(f"  {s2} = tensor.insert {neg} into {acc_s}[{m}, {g}] : {ty['qs']}")
        self.emit(f"  scf.yield {o}, {s2} : {ty['Aflat']}, {ty['qs']}")
        self.emit("  }")
        return f"{res}#0", f"{res}#1"

    def row_range(self, m: str, lo: str, hi: str) -> tuple[str, str]:
        """The running vector min/max `lo`, `hi` over row `m` of %X; returns the updated vectors."""
        p, L = self.p, self.lanes
        fv = f"vector<{L}xf32>"
        whole = p.K - p.K % L
        k, l2, h2, res = self.fresh("k"), self.fresh("l"), self.fresh("h"), self.fresh("g")
        if whole:
            self.emit(f"  {res}:2 = scf.for {k} = {self.index(0)} to {self.index(whole)} step {self.index(L)} "
                      f"iter_args({l2} = {lo}, {h2} = {hi}) -> ({fv}, {fv}) {{")
            v, a, b = self.fresh(), self.fresh(), self.fresh()
            self.emit(f"    {v} = vector.transfer_read %X[{m}, {k}], %padf {{in_bounds = [true]}} : "
                      f"{self.types()['X']}, {fv}")
            self.emit(f"    {a} = arith.minimumf {l2}, {v} : {fv}")
            self.emit(f"    {b} = arith.maximumf {h2}, {v} : {fv}")
            self.emit(f"    scf.yield {a}, {b} : {fv}, {fv}")
            self.emit("  }")
            lo, hi = f"{res}#0", f"{res}#1"
        if p.K % L:  # the tail, padded with 0 (inside the range already)
            v, a, b = self.fresh(), self.fresh(), self.fresh()
            self.emit(f"  {v} = vector.transfer_read %X[{m}, {self.index(whole)}], %padf : {self.types()['X']}, {fv}")
            self.emit(f"  {a} = arith.minimumf {lo}, {v} : {fv}")
            self.emit(f"  {b} = arith.maximumf {hi}, {v} : {fv}")
            lo, hi = a, b
        return lo, hi

    def params(self, lo: str, hi: str) -> tuple[str, str, str]:
        """(scale, 1 / scale, zero point) of the range vectors, as the lowering's params generic."""
        L = self.lanes
        l, h, d, s0, s, inv, ls, lr, z0, z1, z = (self.fresh() for _ in range(11))
        self.emit(f"  {l} = vector.reduction <minimumf>, {lo} : vector<{L}xf32> into f32")
        self.emit(f"  {h} = vector.reduction <maximumf>, {hi} : vector<{L}xf32> into f32")
        self.emit(f"  {d} = arith.subf {h}, {l} : f32")
        self.emit(f"  {s0} = arith.divf {d}, %c255 : f32")
        self.emit(f"  {s} = arith.maximumf {s0}, %floor : f32")
        self.emit(f"  {inv} = arith.divf %one, {s} : f32")
        self.emit(f"  {ls} = arith.divf {l}, {s} : f32")
        self.emit(f"  {lr} = math.roundeven {ls} : f32")
        self.emit(f"  {z0} = arith.subf %qmin, {lr} : f32")
        self.emit(f"  {z1} = arith.maximumf {z0}, %qmin : f32")
        self.emit(f"  {z} = arith.minimumf {z1}, %qmax : f32")
        return s, inv, z

    def quantize_chunk(self, out: str, m: str, k: str, width: int, inv: str, z: str, inb: str) -> tuple[str, str]:
        """q of %X[m, k : k + width] (past K, read as 0) written to row m of the flat activation at k
        (int4: each 8 reordered even k then odd k); returns (the tensor, q as i32 lanes)."""
        p, ty = self.p, self.types()
        fv, iv8, iv32 = f"vector<{width}xf32>", f"vector<{width}xi8>", f"vector<{width}xi32>"
        x, y, r, a, c1, c2, q, w, q32 = (self.fresh() for _ in range(9))
        iv, zv, lo, hi = (self.fresh() for _ in range(4))
        self.emit(f"  {x} = vector.transfer_read %X[{m}, {k}], %padf {{in_bounds = [{inb}]}} : {ty['X']}, {fv}")
        self.emit(f"  {iv} = vector.broadcast {inv} : f32 to {fv}")
        self.emit(f"  {zv} = vector.broadcast {z} : f32 to {fv}")
        self.emit(f"  {lo} = vector.broadcast %qmin : f32 to {fv}")
        self.emit(f"  {hi} = vector.broadcast %qmax : f32 to {fv}")
        self.emit(f"  {y} = arith.mulf {x}, {iv} : {fv}")
        self.emit(f"  {r} = math.roundeven {y} : {fv}")
        self.emit(f"  {a} = arith.addf {r}, {zv} : {fv}")
        self.emit(f"  {c1} = arith.maximumf {a}, {lo} : {fv}")
        self.emit(f"  {c2} = arith.minimumf {c1}, {hi} : {fv}")
        self.emit(f"  {q} = arith.fptosi {c2} : {fv} to {iv8}")
        self.emit(f"  {q32} = arith.extsi {q} : {iv8} to {iv32}")
        order = list(range(width))
        if p.bits == 4:  # [kb, p, j] holds k = 8 kb + 2 j + p
            order = [8 * (o // 8) + 2 * (o % 4) + (o % 8) // 4 for o in range(width)]
        qv = iv8
        if self.a_element == "i16":  # each group of 4 as its even pair, then its odd pair
            qv, wide = f"vector<{width}xi16>", self.fresh()
            self.emit(f"  {wide} = arith.extsi {q} : {iv8} to {qv}")
            q = wide
            order = [order[4 * (o // 4) + (0, 2, 1, 3)[o % 4]] for o in range(width)]
        if order != list(range(width)):
            shuffled = self.fresh()
            self.emit(f"  {shuffled} = vector.shuffle {q}, {q} {order} : {qv}, {qv}")
            q = shuffled
        self.emit(f"  {w} = vector.transfer_write {q}, {out}[{m}, {k}] {{in_bounds = [true]}} : {qv}, {ty['Aflat']}")
        return w, q32

    def rows_of(self, out: str, nb0: str, panels: int, static_panel) -> str:
        """Tiles of `rows` rows, then the rest one row at a time (M may be dynamic)."""
        o_t = self.types()["out"]
        R = self.rows
        end = "%M"
        # the last panels' rows (outside the group loop) write their own rows
        close = "}" if static_panel is None else f"}} {{{THREAD_SPLIT}}}"
        if R > 1:
            tiles, whole = self.fresh(), self.fresh()
            self.emit(f"{tiles} = arith.divui %M, {self.index(R)} : index")
            self.emit(f"{whole} = arith.muli {tiles}, {self.index(R)} : index")
            m, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
            self.emit(f"{res} = scf.for {m} = {self.index(0)} to {whole} step {self.index(R)} "
                      f"iter_args({o} = {out}) -> ({o_t}) {{")
            self.emit(f"  scf.yield {self.tile4(o, m, R, nb0, panels, static_panel)} : {o_t}")
            self.emit(close)
            out, first = res, whole
        else:
            first = self.index(0)
        m, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
        self.emit(f"{res} = scf.for {m} = {first} to {end} step {self.index(1)} iter_args({o} = {out}) -> ({o_t}) {{")
        self.emit(f"  scf.yield {self.tile4(o, m, 1, nb0, panels, static_panel)} : {o_t}")
        self.emit(close)
        return res

    def tile4(self, out: str, m0: str, rows: int, nb0: str, panels: int, static_panel) -> str:
        p, L, vp, ty = self.p, self.lanes, self.vp, self.types()
        O = p.KB // p.G
        fvec, ivec, bytes_ = f"vector<{L}xf32>", f"vector<{L}xi32>", f"vector<{4 * L}xi8>"
        ms = [m0] + [self.add(m0, r) for r in range(1, rows)]
        nbs = [nb0] + [self.add(nb0, j) for j in range(1, panels)]
        nv = panels * vp
        g = self.fresh("g")
        carried = [self.fresh("f") for _ in range(rows * nv)]
        res = self.fresh("k")
        self.emit(f"{res}:{len(carried)} = scf.for {g} = {self.index(0)} to {self.index(p.G)} step {self.index(1)} "
                  f"iter_args({', '.join(f'{c} = %fzero' for c in carried)}) -> "
                  f"({', '.join([fvec] * len(carried))}) {{")
        iacc = []
        for r in range(rows):
            s, b = self.fresh(), self.fresh()
            self.emit(f"  {s} = tensor.extract %qs[{ms[r]}, {g}] : {ty['qs']}")
            self.emit(f"  {b} = vector.broadcast {s} : i32 to {ivec}")
            iacc.append([b] * nv)
        kb0 = self.mul(g, O)
        chunks = O // K_UNROLL
        if chunks > 1:  # a loop over K in steps of K_UNROLL byte rows, the accumulators carried
            k, res_k = self.fresh("kb"), self.fresh("a")
            flat = [a for row in iacc for a in row]
            args = [self.fresh("i") for _ in flat]
            end = self.add(kb0, chunks * K_UNROLL)
            self.emit(f"  {res_k}:{len(flat)} = scf.for {k} = {kb0} to {end} step {self.index(K_UNROLL)} "
                      f"iter_args({', '.join(f'{a} = {v}' for a, v in zip(args, flat))}) -> "
                      f"({', '.join([ivec] * len(flat))}) {{")
            stepped = self.k_steps(k, K_UNROLL, [args[r * nv:(r + 1) * nv] for r in range(rows)], ms, nbs, panels)
            self.emit(f"  scf.yield {', '.join(a for row in stepped for a in row)} : {', '.join([ivec] * len(flat))}")
            self.emit("  }")
            iacc = [[f"{res_k}#{r * nv + v}" for v in range(nv)] for r in range(rows)]
            iacc = self.k_steps(end, O - chunks * K_UNROLL, iacc, ms, nbs, panels)
        else:
            iacc = self.k_steps(kb0, O, iacc, ms, nbs, panels)
        yields = []
        for r in range(rows):
            for v in range(nv):
                j, h = divmod(v, vp)
                f, s, y = self.fresh(), self.fresh(), self.fresh()
                self.emit(f"  {f} = arith.sitofp {iacc[r][v]} : {ivec} to {fvec}")
                self.emit(f"  {s} = vector.transfer_read %S[{nbs[j]}, {g}, {self.index(h * L)}], %padf "
                          f"{{in_bounds = [true]}} : {ty['S']}, {fvec}")
                self.emit(f"  {y} = math.fma {f}, {s}, {carried[r * nv + v]} : {fvec}")
                yields.append(y)
        self.emit(f"  scf.yield {', '.join(yields)} : {', '.join([fvec] * len(yields))}")
        self.emit("}")
        # Epilogue: (facc - zp C) * s + bias.
        for r in range(rows):
            zp, sc = (self.splat_f(name, ms[r]) for name in ("%zp", "%sc"))
            for v, col, inb in self.column_vectors(nbs, panels, static_panel):
                c, b = (self.col_vector(name, col, inb) for name in ("%C", "%bias"))
                t, d, y, w = (self.fresh() for _ in range(4))
                self.emit(f"{t} = arith.mulf {zp}, {c} : {fvec}")
                self.emit(f"{d} = arith.subf {res}#{r * nv + v}, {t} : {fvec}")
                self.emit(f"{y} = math.fma {d}, {sc}, {b} : {fvec}")
                self.emit(f"{w} = vector.transfer_write {y}, {out}[{ms[r]}, {col}] {{in_bounds = [{inb}]}} : "
                          f"{fvec}, {ty['out']}")
                out = w
        return out

    def k_steps(self, kb0: str, count: int, iacc: list, ms: list, nbs: list, panels: int) -> list:
        """`count` byte rows of K from `kb0`, unrolled: each panel's 64-byte row loaded once and made an
        unsigned operand, then each row's 4 (int4: 8) k broadcast against them. Returns the accumulators."""
        p, L, vp, ty = self.p, self.lanes, self.vp, self.types()
        bytes_ = f"vector<{4 * L}xi8>"
        nv = panels * vp
        for o in range(count):
            kb = self.add(kb0, o)
            operands = []  # per vector: the unsigned operands, one per A word (int4: lo, hi)
            for j in range(panels):
                for h in range(vp):
                    raw, x = self.fresh(), self.fresh()
                    self.emit(f"  {raw} = vector.transfer_read %Bflat[{nbs[j]}, {kb}, {self.index(h * 4 * L)}], %pad8 "
                              f"{{in_bounds = [true]}} : {ty['Bflat']}, {bytes_}")
                    if p.bits == 8:
                        self.emit(f"  {x} = arith.xori {raw}, %x80 : {bytes_}")
                        operands.append((self.dot_operand(x, signed=False),))
                        continue
                    lo, sh, hi = self.fresh(), self.fresh(), self.fresh()
                    self.emit(f"  {x} = arith.xori {raw}, %x88 : {bytes_}")
                    self.emit(f"  {lo} = arith.andi {x}, %x0f : {bytes_}")
                    self.emit(f"  {sh} = arith.shrui {x}, %x04 : {bytes_}")
                    self.emit(f"  {hi} = arith.andi {sh}, %x0f : {bytes_}")
                    operands.append((self.dot_operand(lo, signed=False), self.dot_operand(hi, signed=False)))
            for r in range(len(iacc)):
                groups = [f"%A[{ms[r]}, {kb}, "] if p.bits == 8 else \
                    [f"%A[{ms[r]}, {kb}, {self.index(parity)}, " for parity in range(2)]
                if self.a_element == "i16":  # (q0, q2, q1, q3): the even pair, then the odd pair, as they are
                    words = [tuple(self.broadcast_group(f"{group}{self.index(i)}]", ty["A"], "i16") for i in (0, 2))
                             for group in groups]
                else:
                    words = [self.dot_operand(self.broadcast_group(f"{group}{self.index(0)}]", ty["A"]), signed=True)
                             for group in groups]
                new = []
                for v in range(nv):
                    acc = iacc[r][v]
                    for operand, word in zip(operands[v], words):
                        acc = self.dot(acc, operand, word)
                    new.append(acc)
                iacc[r] = new
        return iacc

    def splat_f(self, tensor: str, at: str) -> str:
        s, v = self.fresh(), self.fresh()
        self.emit(f"{s} = tensor.extract {tensor}[{at}] : {self.types()['row']}")
        self.emit(f"{v} = vector.broadcast {s} : f32 to vector<{self.lanes}xf32>")
        return v

    def col_vector(self, tensor: str, at: str, inb: str) -> str:
        v = self.fresh()
        self.emit(f"{v} = vector.transfer_read {tensor}[{at}], %padf {{in_bounds = [{inb}]}} : "
                  f"{self.types()['col']}, vector<{self.lanes}xf32>")
        return v
