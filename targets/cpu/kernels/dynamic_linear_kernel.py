"""The dynamic linear kernel: int8 rows x int8 weights (8da8w, PT2E's dynamic config) or int4 weights
(8da4w, the nibbles unpacked in registers), float scales per channel or per group."""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, iterators, tensor_type
from etc.targets.cpu.kernels.int8_kernel import DOTS, Int8Kernel
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, DynamicPair


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
        self.lanes, self.intrinsic = DOTS[dot]
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
        return {"A": tensor_type(a_shape, "i8"), "B": tensor_type([p.NB, p.KB, PANEL, GROUP], "i8"),
                "S": tensor_type([p.NB, p.G, PANEL], "f32"), "row": tensor_type([M], "f32"),
                "col": tensor_type([p.N], "f32"),
                "out": tensor_type([M, p.N], "f32"), "qs": tensor_type([M, p.G], "i32"),
                "Bflat": tensor_type([p.NB, p.KB, PANEL * GROUP], "i8")}

    def build(self) -> str:
        p, L, ty = self.p, self.lanes, self.types()
        dyn = "%M" if p.M < 0 else ""
        O = p.KB // p.G  # byte rows per group
        offset = 128 if p.bits == 8 else 8
        self.emit(f"%M = tensor.dim %A, {self.index(0)} : {ty['A']}")
        self.emit(f"%fzero = arith.constant dense<0.0> : vector<{L}xf32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        self.emit("%padf = arith.constant 0.0 : f32")
        if p.bits == 8:
            self.emit(f"%x80 = arith.constant dense<-128> : vector<{4 * L}xi8>")
        else:
            self.emit(f"%x88 = arith.constant dense<-120> : vector<{4 * L}xi8>")
            self.emit(f"%x0f = arith.constant dense<15> : vector<{4 * L}xi8>")
            self.emit(f"%x04 = arith.constant dense<4> : vector<{4 * L}xi8>")
        self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {ty['B']} into {ty['Bflat']}")
        # qs[m, g] = -offset * (sum of the group's q): the accumulator's start, cancelling the +offset.
        inner = [GROUP] if p.bits == 8 else [2, GROUP]
        ag = tensor_type([p.M, p.G, O, *inner], "i8")
        ranks = len(inner) + 3
        loops = ", ".join(f"d{i}" for i in range(ranks))
        groups = "[[0], [1, 2]" + "".join(f", [{3 + i}]" for i in range(len(inner))) + "]"
        self.emit(f"%Ag = tensor.expand_shape %A {groups} output_shape [{'%M' if p.M < 0 else p.M}, "
                  f"{p.G}, {O}, {', '.join(map(str, inner))}] : {ty['A']} into {ag}")
        self.emit("%qz = arith.constant 0 : i32")
        self.emit(f"%qse = tensor.empty({dyn}) : {ty['qs']}")
        self.emit(f"%qs0 = linalg.fill ins(%qz : i32) outs(%qse : {ty['qs']}) -> {ty['qs']}")
        self.emit(f"%qs = linalg.generic {{indexing_maps = [affine_map<({loops}) -> ({loops})>, "
                  f"affine_map<({loops}) -> (d0, d1)>], iterator_types = [{iterators(2)}, "
                  f"{iterators(ranks - 2, 'reduction')}]}} ins(%Ag : {ag}) outs(%qs0 : {ty['qs']}) {{")
        self.emit("^bb0(%x: i8, %s: i32):")
        self.emit("  %x32 = arith.extsi %x : i8 to i32")
        self.emit(f"  %mo = arith.constant {-offset} : i32")
        self.emit("  %xo = arith.muli %x32, %mo : i32")
        self.emit("  %s2 = arith.addi %s, %xo : i32")
        self.emit("  linalg.yield %s2 : i32")
        self.emit(f"}} -> {ty['qs']}")
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
            self.emit("}")
            out = res
        rest = p.NB - groups * self.panels
        if rest:
            out = self.rows_of(out, self.index(groups * self.panels), rest, groups * self.panels)
        self.emit(f"%result = tensor.cast {out} : {ty['out']} to {ty['out']}")
        return (f"func.func private @qgemm_dynamic(%A: {ty['A']}, %B: {ty['B']}, %S: {ty['S']}, %zp: {ty['row']}, "
                f"%sc: {ty['row']}, %C: {ty['col']}, %bias: {ty['col']}) -> {ty['out']} {{\n"
                + self.text() + f"\n  return %result : {ty['out']}\n}}")

    def rows_of(self, out: str, nb0: str, panels: int, static_panel) -> str:
        """Tiles of `rows` rows, then the rest one row at a time (M may be dynamic)."""
        o_t = self.types()["out"]
        R = self.rows
        end = "%M"
        if R > 1:
            tiles, whole = self.fresh(), self.fresh()
            self.emit(f"{tiles} = arith.divui %M, {self.index(R)} : index")
            self.emit(f"{whole} = arith.muli {tiles}, {self.index(R)} : index")
            m, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
            self.emit(f"{res} = scf.for {m} = {self.index(0)} to {whole} step {self.index(R)} "
                      f"iter_args({o} = {out}) -> ({o_t}) {{")
            self.emit(f"  scf.yield {self.tile4(o, m, R, nb0, panels, static_panel)} : {o_t}")
            self.emit("}")
            out, first = res, whole
        else:
            first = self.index(0)
        m, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
        self.emit(f"{res} = scf.for {m} = {first} to {end} step {self.index(1)} iter_args({o} = {out}) -> ({o_t}) {{")
        self.emit(f"  scf.yield {self.tile4(o, m, 1, nb0, panels, static_panel)} : {o_t}")
        self.emit("}")
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
        for o in range(O):
            kb = self.add(kb0, o)
            operands = []  # per vector: the unsigned operands, one per A word (int4: lo, hi)
            for j in range(panels):
                for h in range(vp):
                    raw, x = self.fresh(), self.fresh()
                    self.emit(f"  {raw} = vector.transfer_read %Bflat[{nbs[j]}, {kb}, {self.index(h * 4 * L)}], %pad8 "
                              f"{{in_bounds = [true]}} : {ty['Bflat']}, {bytes_}")
                    if p.bits == 8:
                        self.emit(f"  {x} = arith.xori {raw}, %x80 : {bytes_}")
                        operands.append((x,))
                        continue
                    lo, sh, hi = self.fresh(), self.fresh(), self.fresh()
                    self.emit(f"  {x} = arith.xori {raw}, %x88 : {bytes_}")
                    self.emit(f"  {lo} = arith.andi {x}, %x0f : {bytes_}")
                    self.emit(f"  {sh} = arith.shrui {x}, %x04 : {bytes_}")
                    self.emit(f"  {hi} = arith.andi {sh}, %x0f : {bytes_}")
                    operands.append((lo, hi))
            for r in range(rows):
                if p.bits == 8:
                    words = [self.broadcast_group(f"%A[{ms[r]}, {kb}, {self.index(0)}]", ty["A"])]
                else:
                    words = [self.broadcast_group(f"%A[{ms[r]}, {kb}, {self.index(parity)}, {self.index(0)}]", ty["A"])
                             for parity in range(2)]
                new = []
                for v in range(nv):
                    acc = iacc[r][v]
                    for operand, word in zip(operands[v], words):
                        d = self.fresh("d")
                        self.emit(f"  {d} = llvm.call_intrinsic \"{self.intrinsic}\"({acc}, {operand}, "
                                  f"{word}) : ({ivec}, {bytes_}, {bytes_}) -> {ivec}")
                        acc = d
                    new.append(acc)
                iacc[r] = new
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
