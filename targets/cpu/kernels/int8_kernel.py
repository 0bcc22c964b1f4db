"""The int8 GEMM kernel: a qgemm and its requantization as one register-tiled vpdpbusd kernel.

    for each group of `panels` 16-column panels, for each tile of `mr` rows:
        acc[mr][panels * 16 / lanes] = 0                    (vector<lanes x i32> registers)
        for kb in K / 4:  b = the panels' 64-byte rows (one load each)
                          a = A[m, kb, 0:4] broadcast (one 32-bit broadcast per row)
                          acc = vpdpbusd(acc, unsigned operand, signed operand)
        epilogue on the registers: acc - corr, to float, * mult + bias (fma), roundeven,
        + zero point, clamp, to i8, one store per vector (masked on the last, partial panel)

`vpdpbusd` is called as the LLVM intrinsic of the ISA row (`DOTS`: `avx512-vnni` on zmm
registers, `avx-vnni` on ymm); rows and column tails are straight-line copies of the tile with
fewer rows or panels.
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, tensor_type
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, QgemmPair

# dot -> (i32 lanes per vector, the LLVM intrinsic multiplying unsigned by signed bytes)
DOTS = {"avx512-vnni": (16, "llvm.x86.avx512.vpdpbusd.512"), "avx-vnni": (8, "llvm.x86.avx512.vpdpbusd.256")}


class Int8Kernel(KernelText):
    """The kernel as text: a function of (A, B, corr, mult, bias) returning the [M, N] i8 tensor."""

    def __init__(self, p: QgemmPair, dot: str, mr: int, panels: int):
        super().__init__()
        self.p = p
        self.lanes, self.intrinsic = DOTS[dot]
        self.vp = PANEL // self.lanes  # vectors per panel
        self.mr = max(1, min(mr, p.M))
        self.panels = max(1, min(panels, p.NB))

    def build(self) -> str:
        p, L = self.p, self.lanes
        C = p.M if p.per == "row" else p.N
        a_t, b_t = tensor_type([p.M, p.KB, GROUP], "i8"), tensor_type([p.NB, p.KB, PANEL, GROUP], "i8")
        c_i, c_f, o_t = tensor_type([C], "i32"), tensor_type([C], "f32"), tensor_type([p.M, p.N], "i8")
        self.emit(f"%zero = arith.constant dense<0> : vector<{L}xi32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        self.emit("%pad32 = arith.constant 0 : i32")
        self.emit("%padf = arith.constant 0.0 : f32")
        self.emit(f"%zp = arith.constant dense<{float(p.zero_point)}> : vector<{L}xf32>")
        self.emit(f"%lo = arith.constant dense<{float(p.lo)}> : vector<{L}xf32>")
        self.emit(f"%hi = arith.constant dense<{float(p.hi)}> : vector<{L}xf32>")
        self.emit(f"%init = tensor.empty() : {o_t}")
        self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {b_t} into "
                  f"{tensor_type([p.NB, p.KB, PANEL * GROUP], 'i8')}")
        groups = (p.N // PANEL) // self.panels  # groups of whole panels (loop); the rest, a partial one too, after
        out = "%init"
        if groups:
            g, o = self.fresh("g"), self.fresh("o")
            res = self.fresh("r")
            self.emit(f"{res} = scf.for {g} = {self.index(0)} to {self.index(groups)} step {self.index(1)} "
                      f"iter_args({o} = {out}) -> ({o_t}) {{")
            nb0 = self.fresh()
            self.emit(f"  {nb0} = arith.muli {g}, {self.index(self.panels)} : index")
            inner = self.rows(o, nb0, self.panels, static_panel=None)
            self.emit(f"  scf.yield {inner} : {o_t}")
            self.emit("}")
            out = res
        rest = p.NB - groups * self.panels
        if rest:
            out = self.rows(out, self.index(groups * self.panels), rest, static_panel=groups * self.panels)
        self.emit(f"%result = tensor.cast {out} : {o_t} to {o_t}")
        return (f"func.func private @qgemm(%A: {a_t}, %B: {b_t}, %corr: {c_i}, %mult: {c_f}, %bias: {c_f}) "
                f"-> {o_t} {{\n" + self.text() + f"\n  return %result : {o_t}\n}}")

    def rows(self, out: str, nb0: str, panels: int, static_panel) -> str:
        """Row tiles over all M for `panels` panels starting at `nb0`; returns the updated tensor."""
        p, o_t = self.p, tensor_type([self.p.M, self.p.N], "i8")
        tiles = p.M // self.mr
        if tiles:
            m, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
            self.emit(f"{res} = scf.for {m} = {self.index(0)} to {self.index(tiles)} step {self.index(1)} "
                      f"iter_args({o} = {out}) -> ({o_t}) {{")
            m0 = self.fresh()
            self.emit(f"  {m0} = arith.muli {m}, {self.index(self.mr)} : index")
            inner = self.tile(o, m0, self.mr, nb0, panels, static_panel)
            self.emit(f"  scf.yield {inner} : {o_t}")
            self.emit("}")
            out = res
        left = p.M - tiles * self.mr
        if left:
            out = self.tile(out, self.index(tiles * self.mr), left, nb0, panels, static_panel)
        return out

    def tile(self, out: str, m0: str, rows: int, nb0: str, panels: int, static_panel) -> str:
        """One rows x panels tile: the K loop, then the requantizing epilogue and the stores."""
        p, L, vp = self.p, self.lanes, self.vp
        vec, bytes_ = f"vector<{L}xi32>", f"vector<{4 * L}xi8>"
        ms = [m0] + [self.add(m0, r) for r in range(1, rows)]
        nbs = [nb0] + [self.add(nb0, j) for j in range(1, panels)]
        accs = [[self.fresh("acc") for _ in range(panels * vp)] for _ in range(rows)]
        flat = [a for row in accs for a in row]
        kb = self.fresh("kb")
        carried = [self.fresh("c") for _ in flat]
        res = self.fresh("k")
        self.emit(f"{res}:{len(flat)} = scf.for {kb} = {self.index(0)} to {self.index(p.KB)} step {self.index(1)} "
                  f"iter_args({', '.join(f'{c} = %zero' for c in carried)}) -> ({', '.join([vec] * len(flat))}) {{")
        bvecs = []
        for j in range(panels):
            for h in range(vp):  # one contiguous load per vector (a 2-D read would be a load per row)
                b = self.fresh("b")
                self.emit(f"  {b} = vector.transfer_read %Bflat[{nbs[j]}, {kb}, {self.index(h * 4 * L)}], "
                          f"%pad8 {{in_bounds = [true]}} : {tensor_type([p.NB, p.KB, PANEL * GROUP], 'i8')}, {bytes_}")
                bvecs.append(b)
        new = []
        for r in range(rows):
            a = self.broadcast_group(f"%A[{ms[r]}, {kb}, {self.index(0)}]", tensor_type([p.M, p.KB, GROUP], 'i8'))
            for v in range(panels * vp):
                u, sg = (a, bvecs[v]) if p.a_unsigned else (bvecs[v], a)
                acc = self.fresh("d")
                self.emit(f"  {acc} = llvm.call_intrinsic "
                          f"\"{self.intrinsic}\"({carried[r * panels * vp + v]}, {u}, {sg}) "
                          f": ({vec}, {bytes_}, {bytes_}) -> {vec}")
                new.append(acc)
        self.emit(f"  scf.yield {', '.join(new)} : {', '.join([vec] * len(new))}")
        self.emit("}")
        # Epilogue: requantize each accumulator in registers and store it.
        for r in range(rows):
            if p.per == "row":
                row_params = [self.splat(name, ms[r], element) for name, element in
                              (("%corr", "i32"), ("%mult", "f32"), ("%bias", "f32"))]
            for v, col, inb in self.column_vectors(nbs, panels, static_panel):
                params = row_params if p.per == "row" else [
                    self.vector(name, col, element, inb) for name, element in
                    (("%corr", "i32"), ("%mult", "f32"), ("%bias", "f32"))]
                out = self.requant(out, f"{res}#{r * panels * vp + v}", params, ms[r], col, inb)
        return out

    def column_vectors(self, nbs: list, panels: int, static_panel):
        """(v, first column, store in bounds) of each output vector of a tile over `panels` panels
        (`nbs`: their indices); in the static last panels (from `static_panel`), a vector wholly
        past the last column is skipped and one partly past it stored masked."""
        L, N = self.lanes, self.p.N
        for v in range(panels * self.vp):
            j, h = divmod(v, self.vp)
            col = self.add(self.mul(nbs[j], PANEL), h * L)
            inb = "true"
            if static_panel is not None:
                first = (static_panel + j) * PANEL + h * L
                if first >= N:
                    continue  # wholly past the last column
                inb = "true" if first + L <= N else "false"
            yield v, col, inb

    def broadcast_group(self, at: str, tensor_type: str) -> str:
        """The 4 bytes at `at` (a tensor and its indices) as one 32-bit word in every lane, seen as
        bytes: the operand `vpdpbusd` multiplies a panel row's 4-byte groups against."""
        vec, bytes_ = f"vector<{self.lanes}xi32>", f"vector<{4 * self.lanes}xi8>"
        raw, word, s, bc, a = (self.fresh() for _ in range(5))
        self.emit(f"  {raw} = vector.transfer_read {at}, %pad8 {{in_bounds = [true]}} : {tensor_type}, "
                  f"vector<{GROUP}xi8>")
        self.emit(f"  {word} = vector.bitcast {raw} : vector<{GROUP}xi8> to vector<1xi32>")
        self.emit(f"  {s} = vector.extract {word}[0] : i32 from vector<1xi32>")
        self.emit(f"  {bc} = vector.broadcast {s} : i32 to {vec}")
        self.emit(f"  {a} = vector.bitcast {bc} : {vec} to {bytes_}")
        return a

    def splat(self, tensor: str, at: str, element: str) -> str:
        p, L = self.p, self.lanes
        s, v = self.fresh(), self.fresh()
        self.emit(f"{s} = tensor.extract {tensor}[{at}] : {tensor_type([p.M], element)}")
        self.emit(f"{v} = vector.broadcast {s} : {element} to vector<{L}x{element}>")
        return v

    def vector(self, tensor: str, at: str, element: str, inb: str) -> str:
        p, L = self.p, self.lanes
        v = self.fresh()
        pad = "%pad32" if element == "i32" else "%padf"
        self.emit(f"{v} = vector.transfer_read {tensor}[{at}], {pad} {{in_bounds = [{inb}]}} : "
                  f"{tensor_type([p.N], element)}, vector<{L}x{element}>")
        return v

    def requant(self, out: str, acc: str, params: list, m: str, col: str, inb: str) -> str:
        p, L = self.p, self.lanes
        corr, mult, bias = params
        d, f, y, r, z, c1, c2, q, res = (self.fresh() for _ in range(9))
        self.emit(f"{d} = arith.subi {acc}, {corr} : vector<{L}xi32>")
        self.emit(f"{f} = arith.sitofp {d} : vector<{L}xi32> to vector<{L}xf32>")
        self.emit(f"{y} = math.fma {f}, {mult}, {bias} : vector<{L}xf32>")
        self.emit(f"{r} = math.roundeven {y} : vector<{L}xf32>")
        self.emit(f"{z} = arith.addf {r}, %zp : vector<{L}xf32>")
        self.emit(f"{c1} = arith.maximumf {z}, %lo : vector<{L}xf32>")
        self.emit(f"{c2} = arith.minimumf {c1}, %hi : vector<{L}xf32>")
        self.emit(f"{q} = arith.fptosi {c2} : vector<{L}xf32> to vector<{L}xi8>")
        self.emit(f"{res} = vector.transfer_write {q}, {out}[{m}, {col}] {{in_bounds = [{inb}]}} : "
                  f"vector<{L}xi8>, {tensor_type([p.M, p.N], 'i8')}")
        return res
