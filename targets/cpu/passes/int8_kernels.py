"""etc-cpu-int8-kernels: int8 contractions -> register-tiled dot-product kernels, requantized in registers.

`lower_quantized.py` lowers each int8 convolution (groups 1) and linear layer to a *qgemm*: a
`linalg.generic` marked `etc.cpu.qgemm`, acc[M, NB, 16] (i32) = A[M, KB, 4] x B[NB, KB, 16, 4]
(i8; one operand unsigned, x + 128), then collapsed and cut to [M, N] and requantized to i8 by
a generic marked `etc.cpu.requant` (per-row or per-column i32 correction, float multiplier and
bias; output zero point and clamp as attributes). This pass replaces each such pair with one
kernel, inline in the entry function (loops on tensors):

    for each group of `panels` 16-column panels, for each tile of `mr` rows:
        acc[mr][panels * 16 / lanes] = 0                    (vector<lanes x i32> registers)
        for kb in K / 4:  b = the panels' 64-byte rows (one load each)
                          a = A[m, kb, 0:4] broadcast (one 32-bit broadcast per row)
                          acc = vpdpbusd(acc, unsigned operand, signed operand)
        epilogue on the registers: acc - corr, to float, * mult + bias (fma), roundeven,
        + zero point, clamp, to i8, one store per vector (masked on the last, partial panel)

`vpdpbusd` is called as the LLVM intrinsic of the ISA row (`dot`: `avx512-vnni` on zmm
registers, `avx-vnni` on ymm); rows and column tails are straight-line copies of the tile with
fewer rows or panels. Without a dot-product instruction (`dot=none`: AVX2 without VNNI, NEON,
scalar targets) the pair stays as it is (plain loops) and the pass records why; the same for
the depthwise/grouped int8 convolutions (`etc.cpu.qwindow`): there is no int8 window kernel.
A convolution's B operand (its im2col: the gather marked `etc.cpu.im2col`, then zero padding and
the panel transpose) is packed per call straight from the padded image, on every target (`_pack_text`).
Each op gets its decision (`decisions.py`) and the decided generics are marked so the passes
after this one do not decide again.

The 8da4w linear (`lower_quantized._lower_linear_dynamic`: an `etc.cpu.qgemm4` contraction of int8
rows with int4 nibble pairs and its `etc.cpu.qdequant` epilogue) becomes `_Int4Kernel`, the same
tiling with the weights unpacked in registers (see its docstring); `dot=none` keeps its loops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir

from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.gemm import Text
from etc.targets.cpu.gemm import tensor_type as _t
from etc.targets.cpu.passes._util import defining_op as _owner
from etc.targets.cpu.passes._util import walk

QGEMM = "etc.cpu.qgemm"
REQUANT = "etc.cpu.requant"
QWINDOW = "etc.cpu.qwindow"
QGEMM4 = "etc.cpu.qgemm4"
QDEQUANT = "etc.cpu.qdequant"
IM2COL = "etc.cpu.im2col"
PANEL = 16
GROUP = 4

# dot -> (i32 lanes per vector, the LLVM intrinsic multiplying unsigned by signed bytes)
DOTS = {"avx512-vnni": (16, "llvm.x86.avx512.vpdpbusd.512"), "avx-vnni": (8, "llvm.x86.avx512.vpdpbusd.256")}

NO_DOT = "the target has no int8 dot-product instruction (AVX-512 VNNI or AVX-VNNI): plain i32 loops"
NO_DOT4 = ("the target has no int8 dot-product instruction (AVX-512 VNNI or AVX-VNNI): int8 x int4 as plain "
           "loops on the packed bytes")
NO_WINDOW = "int8 depthwise/grouped convolution: no int8 window kernel yet, plain i32 loops"


def _shape(value) -> list:
    return list(ir.ShapedType(value.type).shape)


@dataclass
class _Pair:
    qgemm: object
    requant: object
    kind: str
    a_unsigned: bool
    per: str
    zero_point: int
    lo: int
    hi: int
    M: int
    N: int
    KB: int
    NB: int


def _contraction_behind(value, marker: str):
    """The contraction (a linalg.generic marked `marker`) an epilogue reads through the collapse
    of its tile layout (and the slice of a padded panel), or None."""
    op = _owner(value)
    if op is not None and op.name == "tensor.extract_slice":
        op = _owner(op.operands[0])
    if op is None or op.name != "tensor.collapse_shape":
        return None
    qgemm = _owner(op.operands[0])
    if qgemm is None or qgemm.name != "linalg.generic" or marker not in qgemm.attributes:
        return None
    return qgemm


def _match(requant) -> "_Pair | None":
    attrs = ir.DictAttr(requant.attributes[REQUANT])
    qgemm = _contraction_behind(requant.operands[0], QGEMM)
    if qgemm is None:
        return None
    q = ir.DictAttr(qgemm.attributes[QGEMM])
    M, KB, _ = _shape(qgemm.operands[0])
    NB = _shape(qgemm.operands[1])[0]
    _, N = _shape(requant.results[0])
    return _Pair(qgemm, requant, ir.StringAttr(q["kind"]).value, ir.BoolAttr(q["a_unsigned"]).value,
                 ir.StringAttr(attrs["per"]).value, ir.IntegerAttr(attrs["zero_point"]).value,
                 ir.IntegerAttr(attrs["min"]).value, ir.IntegerAttr(attrs["max"]).value, M, N, KB, NB)


class _Kernel(Text):
    """The kernel as text: a function of (A, B, corr, mult, bias) returning the [M, N] i8 tensor."""

    def __init__(self, p: _Pair, dot: str, mr: int, panels: int):
        super().__init__()
        self.p = p
        self.lanes, self.intrinsic = DOTS[dot]
        self.vp = PANEL // self.lanes  # vectors per panel
        self.mr = max(1, min(mr, p.M))
        self.panels = max(1, min(panels, p.NB))

    def build(self) -> str:
        p, L = self.p, self.lanes
        C = p.M if p.per == "row" else p.N
        a_t, b_t = _t([p.M, p.KB, GROUP], "i8"), _t([p.NB, p.KB, PANEL, GROUP], "i8")
        c_i, c_f, o_t = _t([C], "i32"), _t([C], "f32"), _t([p.M, p.N], "i8")
        self.emit(f"%zero = arith.constant dense<0> : vector<{L}xi32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        self.emit("%pad32 = arith.constant 0 : i32")
        self.emit("%padf = arith.constant 0.0 : f32")
        self.emit(f"%zp = arith.constant dense<{float(p.zero_point)}> : vector<{L}xf32>")
        self.emit(f"%lo = arith.constant dense<{float(p.lo)}> : vector<{L}xf32>")
        self.emit(f"%hi = arith.constant dense<{float(p.hi)}> : vector<{L}xf32>")
        self.emit(f"%init = tensor.empty() : {o_t}")
        self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {b_t} into "
                  f"{_t([p.NB, p.KB, PANEL * GROUP], 'i8')}")
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
        p, o_t = self.p, _t([self.p.M, self.p.N], "i8")
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
                          f"%pad8 {{in_bounds = [true]}} : {_t([p.NB, p.KB, PANEL * GROUP], 'i8')}, {bytes_}")
                bvecs.append(b)
        new = []
        for r in range(rows):
            raw, word, s, bc, a = (self.fresh() for _ in range(5))
            self.emit(f"  {raw} = vector.transfer_read %A[{ms[r]}, {kb}, {self.index(0)}], %pad8 "
                      f"{{in_bounds = [true]}} : {_t([p.M, p.KB, GROUP], 'i8')}, vector<{GROUP}xi8>")
            self.emit(f"  {word} = vector.bitcast {raw} : vector<{GROUP}xi8> to vector<1xi32>")
            self.emit(f"  {s} = vector.extract {word}[0] : i32 from vector<1xi32>")
            self.emit(f"  {bc} = vector.broadcast {s} : i32 to {vec}")
            self.emit(f"  {a} = vector.bitcast {bc} : {vec} to {bytes_}")
            for v in range(panels * vp):
                u, sg = (a, bvecs[v]) if p.a_unsigned else (bvecs[v], a)
                acc = self.fresh("d")
                self.emit(f"  {acc} = llvm.call_intrinsic \"{self.intrinsic}\"({carried[r * panels * vp + v]}, {u}, {sg}) "
                          f": ({vec}, {bytes_}, {bytes_}) -> {vec}")
                new.append(acc)
        self.emit(f"  scf.yield {', '.join(new)} : {', '.join([vec] * len(new))}")
        self.emit("}")
        # Epilogue: requantize each accumulator in registers and store it.
        for r in range(rows):
            if p.per == "row":
                row_params = [self.splat(name, ms[r], element) for name, element in
                              (("%corr", "i32"), ("%mult", "f32"), ("%bias", "f32"))]
            for v in range(panels * vp):
                j, h = divmod(v, vp)
                col = self.add(self.mul(nbs[j], PANEL), h * L)
                inb = "true"
                if static_panel is not None:
                    first = (static_panel + j) * PANEL + h * L
                    if first >= p.N:
                        continue  # wholly past the last column
                    inb = "true" if first + L <= p.N else "false"
                params = row_params if p.per == "row" else [
                    self.vector(name, col, element, inb) for name, element in
                    (("%corr", "i32"), ("%mult", "f32"), ("%bias", "f32"))]
                out = self.requant(out, f"{res}#{r * panels * vp + v}", params, ms[r], col, inb)
        return out

    def splat(self, tensor: str, at: str, element: str) -> str:
        p, L = self.p, self.lanes
        s, v = self.fresh(), self.fresh()
        self.emit(f"{s} = tensor.extract {tensor}[{at}] : {_t([p.M], element)}")
        self.emit(f"{v} = vector.broadcast {s} : {element} to vector<{L}x{element}>")
        return v

    def vector(self, tensor: str, at: str, element: str, inb: str) -> str:
        p, L = self.p, self.lanes
        v = self.fresh()
        pad = "%pad32" if element == "i32" else "%padf"
        self.emit(f"{v} = vector.transfer_read {tensor}[{at}], {pad} {{in_bounds = [{inb}]}} : "
                  f"{_t([p.N], element)}, vector<{L}x{element}>")
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
                  f"vector<{L}xi8>, {_t([p.M, p.N], 'i8')}")
        return res


@dataclass
class _Im2col:
    """A convolution's im2col gather (lower_quantized.py, `etc.cpu.im2col`): B[k, p] =
    x[c, oh * sh + kh * dh, ow * sw + kw * dw] xor 0x80, k = (c, kh, kw), p = (oh, ow), over the
    padded image x [C, Hp, Wp], then packed as [NB, KB, 16, 4] (K and P padded)."""
    C: int
    Hp: int
    Wp: int
    KH: int
    KW: int
    OH: int
    OW: int
    sh: int
    sw: int
    dh: int
    dw: int

    @property
    def K(self) -> int:
        return self.C * self.KH * self.KW

    @property
    def P(self) -> int:
        return self.OH * self.OW

    def k_offset(self, k: int) -> int:
        """Row k's first byte in the flattened image (k past K: the last row; its weights are zero)."""
        c, r = divmod(min(k, self.K - 1), self.KH * self.KW)
        kh, kw = divmod(r, self.KW)
        return c * self.Hp * self.Wp + kh * self.dh * self.Wp + kw * self.dw

    def p_offset(self, q: int) -> int:
        """Output position q's offset from its row's first byte (q past P: any, the columns are cut)."""
        oh, ow = divmod(q, self.OW)
        return oh * self.sh * self.Wp + ow * self.sw

    def period(self) -> tuple[int, int]:
        """(L, D): the panels' offsets repeat every L panels, shifted by D bytes."""
        for L in range(1, self.OW // math.gcd(self.OW, PANEL) + 1):
            D = self.p_offset(PANEL * L)
            if all(self.p_offset(q + PANEL * L) - self.p_offset(q) == D for q in range(self.OW)):  # residues
                return L, D
        raise AssertionError("the output row always repeats")  # L = OW / gcd(OW, 16) does


def _pack_text(g: _Im2col) -> str:
    """The im2col packed straight from the image, per call: for each group of 4 rows of K and panel
    of 16 positions, each row's 16 bytes gathered from one or a few contiguous loads (a position's
    row run; every stride-th byte) by shuffles, the four rows interleaved into the 64-byte panel row
    the kernel reads, flipped to unsigned, stored. The offsets are constants: L panels (a period of
    output rows) unrolled in a loop over the periods, then the last panels with positions past P
    clamped. Loads that could reach past the image (the last rows of K near its end) are masked."""
    K, P = g.K, g.P
    KB, NB = -(-K // GROUP), -(-P // PANEL)
    total = g.C * g.Hp * g.Wp
    LW = PANEL if g.sw == 1 else 2 * PANEL  # bytes per load
    L, D = g.period()
    S = P // (PANEL * L)  # whole periods
    tail = list(range(S * L, NB))  # panels after them, positions clamped to P - 1
    periodic = [[g.p_offset(PANEL * j + i) for i in range(PANEL)] for j in range(L)]
    clamped = {j: [g.p_offset(min(PANEL * j + i, P - 1)) for i in range(PANEL)] for j in tail}
    # The highest group start any row reads from, past its K offset: rows whose loads stay inside
    # the image read unmasked, the few last rows of K (masked) may not.
    starts = [(S - 1) * D + o for o in _group_starts(periodic, LW)] if S else []
    starts += _group_starts(list(clamped.values()), LW)
    reach = max(starts) + LW
    k_safe = 0
    while k_safe < KB and all(g.k_offset(GROUP * k_safe + r) + reach <= total for r in range(GROUP)):
        k_safe += 1
    src, flat_t = _t([g.C, g.Hp, g.Wp], "i8"), _t([total], "i8")
    rows_t, dst = _t([NB, KB, PANEL * GROUP], "i8"), _t([NB, KB, PANEL, GROUP], "i8")
    koffs = ", ".join(str(g.k_offset(k)) for k in range(KB * GROUP))
    t = Text()
    t.emit(f"%flat = tensor.collapse_shape %src [[0, 1, 2]] : {src} into {flat_t}")
    t.emit(f"%koffs = arith.constant dense<[{koffs}]> : {_t([KB * GROUP], 'i32')}")
    t.emit(f"%flip = arith.constant dense<-128> : vector<{PANEL * GROUP}xi8>")
    t.emit("%pad = arith.constant 0 : i8")
    t.emit(f"%empty = tensor.empty() : {rows_t}")
    pairs = [x for i in range(PANEL) for x in (i, i + PANEL)]  # r0[i], r1[i]
    quads = [x for i in range(PANEL) for x in (2 * i, 2 * i + 1, 2 * i + 2 * PANEL, 2 * i + 1 + 2 * PANEL)]

    def row(base: str, offsets: list, in_bounds: bool) -> str:
        """The 16 bytes flat[base + offsets[i]] as a vector."""
        groups = _groups(offsets, LW)
        loads = []
        for start, _ in groups:
            at = t.add(base, start)
            v = t.fresh()
            t.emit(f"{v} = vector.transfer_read %flat[{at}], %pad {{in_bounds = [{str(in_bounds).lower()}]}} : "
                   f"{flat_t}, vector<{LW}xi8>")
            loads.append(v)
        start, members = groups[0]
        if len(groups) == 1 and LW == PANEL and members == list(range(start, start + PANEL)):
            return loads[0]
        cur, width, mask = loads[0], LW, [o - start for o in members]
        for (start, members), v in zip(groups[1:], loads[1:]):
            mask = mask + [width + o - start for o in members]
            out = t.fresh()
            t.emit(f"{out} = vector.shuffle {cur}, {v} [{', '.join(map(str, mask))}] : "
                   f"vector<{width}xi8>, vector<{LW}xi8>")
            cur, width, mask = out, len(mask), list(range(len(mask)))
        if width != PANEL or mask != list(range(PANEL)):  # one group: select its bytes
            out = t.fresh()
            t.emit(f"{out} = vector.shuffle {cur}, {cur} [{', '.join(map(str, mask))}] : "
                   f"vector<{width}xi8>, vector<{width}xi8>")
            cur = out
        return cur

    def panel(acc: str, bases: list, offsets: list, nb: str, kb: str, in_bounds: bool) -> str:
        r = [row(base, offsets, in_bounds) for base in bases]
        s01, s23, tv, u, w = (t.fresh() for _ in range(5))
        v16, v32 = f"vector<{PANEL}xi8>", f"vector<{2 * PANEL}xi8>"
        t.emit(f"{s01} = vector.shuffle {r[0]}, {r[1]} [{', '.join(map(str, pairs))}] : {v16}, {v16}")
        t.emit(f"{s23} = vector.shuffle {r[2]}, {r[3]} [{', '.join(map(str, pairs))}] : {v16}, {v16}")
        t.emit(f"{tv} = vector.shuffle {s01}, {s23} [{', '.join(map(str, quads))}] : {v32}, {v32}")
        t.emit(f"{u} = arith.xori {tv}, %flip : vector<{PANEL * GROUP}xi8>")
        t.emit(f"{w} = vector.transfer_write {u}, {acc}[{nb}, {kb}, {t.index(0)}] {{in_bounds = [true]}} : "
               f"vector<{PANEL * GROUP}xi8>, {rows_t}")
        return w

    def k_loop(acc: str, lo: int, hi: int, in_bounds: bool) -> str:
        if lo >= hi:
            return acc
        kb, a, res = t.fresh("kb"), t.fresh("a"), t.fresh("r")
        t.emit(f"{res} = scf.for {kb} = {t.index(lo)} to {t.index(hi)} step {t.index(1)} "
               f"iter_args({a} = {acc}) -> ({rows_t}) {{")
        k0 = t.mul(kb, GROUP)
        bases = []
        for r in range(GROUP):
            e, i = t.fresh(), t.fresh()
            t.emit(f"{e} = tensor.extract %koffs[{t.add(k0, r)}] : {_t([KB * GROUP], 'i32')}")
            t.emit(f"{i} = arith.index_cast {e} : i32 to index")
            bases.append(i)
        cur = a
        if S:
            sv, b, inner = t.fresh("s"), t.fresh("a"), t.fresh("r")
            t.emit(f"{inner} = scf.for {sv} = {t.index(0)} to {t.index(S)} step {t.index(1)} "
                   f"iter_args({b} = {cur}) -> ({rows_t}) {{")
            shift, nb0 = t.mul(sv, D), t.mul(sv, L)
            shifted = [t.addv(base, shift) for base in bases]
            x = b
            for j in range(L):
                x = panel(x, shifted, periodic[j], t.add(nb0, j), kb, in_bounds)
            t.emit(f"scf.yield {x} : {rows_t}")
            t.emit("}")
            cur = inner
        for j in tail:
            cur = panel(cur, bases, clamped[j], t.index(j), kb, in_bounds)
        t.emit(f"scf.yield {cur} : {rows_t}")
        t.emit("}")
        return res

    out = k_loop("%empty", 0, k_safe, True)
    out = k_loop(out, k_safe, KB, False)
    t.emit(f"%result = tensor.expand_shape {out} [[0], [1], [2, 3]] output_shape [{NB}, {KB}, {PANEL}, {GROUP}] : "
           f"{rows_t} into {dst}")
    return (f"func.func private @pack(%src: {src}) -> {dst} {{\n" + t.text()
            + f"\n  return %result : {dst}\n}}")


def _groups(offsets: list, width: int) -> list:
    """Offsets (increasing) -> [(start, [offsets])]: each group within one `width`-byte load."""
    groups = []
    for o in offsets:
        if groups and o - groups[-1][0] < width:
            groups[-1][1].append(o)
        else:
            groups.append((o, [o]))
    return groups


def _group_starts(panels: list, width: int) -> list:
    return [start for offsets in panels for start, _ in _groups(offsets, width)]


def _pack_source(qgemm):
    """A convolution's qgemm packs its im2col per call: (the padded image, the gather's geometry,
    the transpose that packs it), following the chain lower_quantized.py emits (gather, collapse,
    padding, expand, transpose); None for a prepacked operand (a linear layer's weight)."""
    transpose = _owner(qgemm.operands[1])
    if transpose is None or transpose.name != "linalg.transpose":
        return None
    if list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"])) != [2, 0, 3, 1]:
        return None
    op = _owner(transpose.operands[0])
    while op is not None and op.name in ("tensor.expand_shape", "tensor.pad", "tensor.collapse_shape"):
        op = _owner(op.operands[0])
    if op is None or IM2COL not in op.attributes:
        return None
    attrs = ir.DictAttr(op.attributes[IM2COL])
    sh, sw = ir.DenseI64ArrayAttr(attrs["stride"])
    dh, dw = ir.DenseI64ArrayAttr(attrs["dilation"])
    C, Hp, Wp = _shape(op.operands[0])
    _, KH, KW, OH, OW = _shape(op.results[0])
    return op.operands[0], _Im2col(C, Hp, Wp, KH, KW, OH, OW, sh, sw, dh, dw), transpose


def _erase_unused(op) -> None:
    """`op` and then its producers (within the chain to the gather), once nothing reads them."""
    while op is not None and not any(list(r.uses) for r in op.results):
        producers = [_owner(v) for v in op.operands]
        op.erase()
        op = next((p for p in producers if p is not None and p.name in (
            "tensor.expand_shape", "tensor.pad", "tensor.collapse_shape", "linalg.generic", "tensor.empty")), None)


def _splice(text: str, values: list, before, location):
    """Parse the function `text`, move its body before `before` with `values` as its arguments."""
    holder = ir.Module.parse(text, before.context)
    block = holder.body.operations[0].regions[0].blocks[0]
    for arg, value in zip(block.arguments, values):
        arg.replace_all_uses_with(value)
    ops = [o.operation for o in block.operations]
    result = ops[-1].operands[0]
    for inner in ops[:-1]:
        inner.move_before(before)
        inner.location = location
    return result


@register_pass
class Int8Kernels(Pass):
    """Rewrite int8 contractions (qgemm + requantization pairs) into dot-product kernels."""

    name = "etc-cpu-int8-kernels"
    summary = "Int8 contractions -> register-tiled vpdpbusd kernels with the requantization in registers"

    @dataclass
    class Options:
        dot: str = option("none", help="the int8 dot-product instruction: avx512-vnni, avx-vnni or none")
        mr: int = option(6, help="rows of the register tile")
        panels: int = option(4, help="16-column panels of the register tile")

    def run(self, module_op) -> None:
        o = self.options
        if o.dot != "none" and o.dot not in DOTS:
            raise self.error(f"{self.name}: dot={o.dot!r} is not one of none, {', '.join(DOTS)}")
        with module_op.context, ir.Location.unknown():
            for op in walk(module_op, ("linalg.generic",)):
                if QWINDOW in op.attributes:
                    decisions.record(op, "window", "loops", NO_WINDOW)
                    op.attributes[decisions.DECIDED] = ir.UnitAttr.get()
            for qgemm in [op for op in walk(module_op, ("linalg.generic",)) if QGEMM in op.attributes]:
                found = _pack_source(qgemm)
                if found is not None:  # vector code on any target (it needs no dot product)
                    image, geometry, transpose = found
                    packed = _splice(_pack_text(geometry), [image], transpose, transpose.location)
                    transpose.results[0].replace_all_uses_with(packed)
                    _erase_unused(transpose)
            for requant in walk(module_op, ("linalg.generic",)):
                if REQUANT not in requant.attributes:
                    continue
                pair = _match(requant)
                if pair is None:
                    raise self.error(f"{self.name}: an int8 requantization that does not read a qgemm", at=requant)
                if o.dot == "none":
                    decisions.record(pair.qgemm, pair.kind, "loops", NO_DOT)
                    pair.qgemm.attributes[decisions.DECIDED] = ir.UnitAttr.get()
                    continue
                try:
                    self.rewrite(pair, _Kernel(pair, o.dot, o.mr, o.panels).build())
                except Exception as e:  # noqa: BLE001 - a kernel that does not build is a compiler bug
                    raise self.error(f"{self.name}: building the int8 kernel failed: {e}", at=requant) from None
                self.count("kernels")
            for epilogue in walk(module_op, ("linalg.generic",)):
                if QDEQUANT not in epilogue.attributes:
                    continue
                pair = _match4(epilogue)
                if pair is None:
                    raise self.error(f"{self.name}: an int4 epilogue that does not read an int8 x int4 contraction",
                                     at=epilogue)
                if o.dot == "none":
                    decisions.record(pair.qgemm, "contraction", "loops", NO_DOT4)
                    pair.qgemm.attributes[decisions.DECIDED] = ir.UnitAttr.get()
                    continue
                try:
                    text = _Int4Kernel(pair, o.dot, o.mr, o.panels).build()
                except Exception as e:  # noqa: BLE001 - a kernel that does not build is a compiler bug
                    raise self.error(f"{self.name}: building the int8 x int4 kernel failed: {e}", at=epilogue) from None
                self.rewrite4(pair, text)
                self.count("int4 kernels")

    def rewrite4(self, pair: _Pair4, text: str) -> None:
        decisions.record(pair.qgemm, "contraction", "gemm")
        epilogue, qgemm = pair.epilogue, pair.qgemm
        values = [qgemm.operands[0], qgemm.operands[1], qgemm.operands[2], *epilogue.operands[1:5]]
        result = _splice(text, values, epilogue, epilogue.location)
        epilogue.results[0].replace_all_uses_with(result)
        epilogue.erase()
        for dead in _dead_chain(qgemm):
            dead.erase()

    def rewrite(self, pair: _Pair, text: str) -> None:
        decisions.record(pair.qgemm, pair.kind, "gemm")
        requant, qgemm = pair.requant, pair.qgemm
        values = [qgemm.operands[0], qgemm.operands[1], requant.operands[1], requant.operands[2],
                  requant.operands[3]]
        result = _splice(text, values, requant, requant.location)
        requant.results[0].replace_all_uses_with(result)
        requant.erase()
        # The collapse/slice and the qgemm are dead now.
        for dead in _dead_chain(qgemm):
            dead.erase()


def _dead_chain(qgemm) -> list:
    """The qgemm, its fill and the collapse/slice between it and the requantization, once unused."""
    out = []
    users = [u.owner for u in qgemm.results[0].uses]
    for user in users:
        user = user.operation if hasattr(user, "operation") else user
        for inner in [u.owner for u in user.results[0].uses]:
            inner = inner.operation if hasattr(inner, "operation") else inner
            if not list(inner.results[0].uses):
                out.append(inner)
        out.append(user)
    out.append(qgemm)
    return out


# ------------------------------------------------------------------ int8 x int4 (8da4w)
@dataclass
class _Pair4:
    qgemm: object  # acc[M, NB, 16] f32 = sum q * w4 * ws (etc.cpu.qgemm4)
    epilogue: object  # y[M, N] = (acc - zp[m] C[n]) s[m] + bias[n] (etc.cpu.qdequant)
    M: int  # < 0: dynamic
    N: int
    KB8: int
    NB: int
    G: int
    group: int


def _match4(epilogue) -> "_Pair4 | None":
    qgemm = _contraction_behind(epilogue.operands[0], QGEMM4)
    if qgemm is None:
        return None
    group = ir.IntegerAttr(ir.DictAttr(qgemm.attributes[QGEMM4])["group_size"]).value
    M, KB8, _, _ = ir.RankedTensorType(qgemm.operands[0].type).shape
    NB, G, _ = _shape(qgemm.operands[2])
    N = _shape(epilogue.results[0])[1]
    return _Pair4(qgemm, epilogue, -1 if ir.ShapedType.is_dynamic_size(M) else M, N, KB8, NB, G, group)


class _Int4Kernel(_Kernel):
    """The 8da4w kernel as text: a function of (q [M, K/8, 2, 4] i8, B [NB, K/8, 16, 4] (packed
    nibble pairs), S [NB, G, 16] f32, zp [M], s [M], C [N], bias [N]) returning y [M, N] f32.

        qs[m, g] = -8 * sum of row m's q over group g       (the weights' +8 offset, below)
        for each group of `panels` 16-column panels, for each tile of `rows` rows (then single rows):
            facc[rows][panels * 16 / lanes] = 0              (vector<lanes x f32>)
            for g in G:   iacc = qs[m, g] broadcast          (vector<lanes x i32>)
                          for each 8 k of the group: b = the panels' 64-byte rows (one load each),
                              b ^ 0x88 makes each nibble w + 8 (0..15, an unsigned byte operand),
                              lo = b & 15 (k even), hi = (b >> 4) & 15 (k odd): unpacked in registers;
                              iacc = vpdpbusd(iacc, lo, q's 4 even k broadcast),
                              iacc = vpdpbusd(iacc, hi, q's 4 odd k broadcast)
                          facc = fma(float(iacc), S[panel, g], facc)      (iacc = sum q w, exactly)
            epilogue: (facc - zp[m] C) * s[m] + bias, one f32 store per vector (masked on a
            partial panel)
    GEMV (one row, decode) streams each panel's bytes once; more rows share each load."""

    def __init__(self, p: _Pair4, dot: str, mr: int, panels: int):
        self.p = p
        self.lanes, self.intrinsic = DOTS[dot]
        self.vp = PANEL // self.lanes
        self.rows = max(1, mr // 3)  # two accumulators (i32 group, f32 total) per output vector
        self.panels = max(1, min(panels, p.NB))
        Text.__init__(self)

    def types(self):
        p = self.p
        M = p.M
        return {"A": _t([M, p.KB8, 2, 4], "i8"), "B": _t([p.NB, p.KB8, PANEL, 4], "i8"),
                "S": _t([p.NB, p.G, PANEL], "f32"), "row": _t([M], "f32"), "col": _t([p.N], "f32"),
                "out": _t([M, p.N], "f32"), "qs": _t([M, p.G], "i32"),
                "Bflat": _t([p.NB, p.KB8, PANEL * 4], "i8")}

    def build(self) -> str:
        p, L, ty = self.p, self.lanes, self.types()
        dyn = "%M" if p.M < 0 else ""
        O = p.group // 8
        self.emit(f"%M = tensor.dim %A, {self.index(0)} : {ty['A']}")
        self.emit(f"%fzero = arith.constant dense<0.0> : vector<{L}xf32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        self.emit("%padf = arith.constant 0.0 : f32")
        self.emit(f"%x88 = arith.constant dense<-120> : vector<{4 * L}xi8>")
        self.emit(f"%x0f = arith.constant dense<15> : vector<{4 * L}xi8>")
        self.emit(f"%x04 = arith.constant dense<4> : vector<{4 * L}xi8>")
        self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {ty['B']} into {ty['Bflat']}")
        # qs[m, g] = -8 * (sum of the group's q): the accumulator's start, cancelling the +8.
        ag = _t([p.M, p.G, O, 2, 4], "i8")
        self.emit(f"%Ag = tensor.expand_shape %A [[0], [1, 2], [3], [4]] output_shape [{'%M' if p.M < 0 else p.M}, "
                  f"{p.G}, {O}, 2, 4] : {ty['A']} into {ag}")
        self.emit("%qz = arith.constant 0 : i32")
        self.emit(f"%qse = tensor.empty({dyn}) : {ty['qs']}")
        self.emit(f"%qs0 = linalg.fill ins(%qz : i32) outs(%qse : {ty['qs']}) -> {ty['qs']}")
        self.emit(f"%qs = linalg.generic {{indexing_maps = [affine_map<(m, g, o, p, j) -> (m, g, o, p, j)>, "
                  f"affine_map<(m, g, o, p, j) -> (m, g)>], iterator_types = [\"parallel\", \"parallel\", "
                  f"\"reduction\", \"reduction\", \"reduction\"]}} ins(%Ag : {ag}) outs(%qs0 : {ty['qs']}) {{")
        self.emit("^bb0(%x: i8, %s: i32):")
        self.emit("  %x32 = arith.extsi %x : i8 to i32")
        self.emit("  %m8 = arith.constant -8 : i32")
        self.emit("  %x8 = arith.muli %x32, %m8 : i32")
        self.emit("  %s2 = arith.addi %s, %x8 : i32")
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
        return (f"func.func private @qgemm4(%A: {ty['A']}, %B: {ty['B']}, %S: {ty['S']}, %zp: {ty['row']}, "
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
        O = p.group // 8
        fvec, ivec, bytes_ = f"vector<{L}xf32>", f"vector<{L}xi32>", f"vector<{4 * L}xi8>"
        ms = [m0] + [self.add(m0, r) for r in range(1, rows)]
        nbs = [nb0] + [self.add(nb0, j) for j in range(1, panels)]
        nv = panels * vp
        g = self.fresh("g")
        carried = [self.fresh("f") for _ in range(rows * nv)]
        res = self.fresh("k")
        self.emit(f"{res}:{len(carried)} = scf.for {g} = {self.index(0)} to {self.index(p.G)} step {self.index(1)} "
                  f"iter_args({', '.join(f'{c} = %fzero' for c in carried)}) -> ({', '.join([fvec] * len(carried))}) {{")
        iacc = []
        for r in range(rows):
            s, b = self.fresh(), self.fresh()
            self.emit(f"  {s} = tensor.extract %qs[{ms[r]}, {g}] : {ty['qs']}")
            self.emit(f"  {b} = vector.broadcast {s} : i32 to {ivec}")
            iacc.append([b] * nv)
        kb0 = self.mul(g, O)
        for o in range(O):
            kb = self.add(kb0, o)
            halves = []  # per vector: (lo, hi)
            for j in range(panels):
                for h in range(vp):
                    raw, x, lo, sh, hi = (self.fresh() for _ in range(5))
                    self.emit(f"  {raw} = vector.transfer_read %Bflat[{nbs[j]}, {kb}, {self.index(h * 4 * L)}], %pad8 "
                              f"{{in_bounds = [true]}} : {ty['Bflat']}, {bytes_}")
                    self.emit(f"  {x} = arith.xori {raw}, %x88 : {bytes_}")
                    self.emit(f"  {lo} = arith.andi {x}, %x0f : {bytes_}")
                    self.emit(f"  {sh} = arith.shrui {x}, %x04 : {bytes_}")
                    self.emit(f"  {hi} = arith.andi {sh}, %x0f : {bytes_}")
                    halves.append((lo, hi))
            for r in range(rows):
                words = []
                for parity in range(2):
                    raw, word, s, bc, a = (self.fresh() for _ in range(5))
                    self.emit(f"  {raw} = vector.transfer_read %A[{ms[r]}, {kb}, {self.index(parity)}, {self.index(0)}], "
                              f"%pad8 {{in_bounds = [true]}} : {ty['A']}, vector<4xi8>")
                    self.emit(f"  {word} = vector.bitcast {raw} : vector<4xi8> to vector<1xi32>")
                    self.emit(f"  {s} = vector.extract {word}[0] : i32 from vector<1xi32>")
                    self.emit(f"  {bc} = vector.broadcast {s} : i32 to {ivec}")
                    self.emit(f"  {a} = vector.bitcast {bc} : {ivec} to {bytes_}")
                    words.append(a)
                new = []
                for v in range(nv):
                    acc = iacc[r][v]
                    for parity in range(2):
                        d = self.fresh("d")
                        self.emit(f"  {d} = llvm.call_intrinsic \"{self.intrinsic}\"({acc}, {halves[v][parity]}, "
                                  f"{words[parity]}) : ({ivec}, {bytes_}, {bytes_}) -> {ivec}")
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
            for v in range(nv):
                j, h = divmod(v, vp)
                col = self.add(self.mul(nbs[j], PANEL), h * L)
                inb = "true"
                if static_panel is not None:
                    first = (static_panel + j) * PANEL + h * L
                    if first >= p.N:
                        continue
                    inb = "true" if first + L <= p.N else "false"
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
