"""The int8 GEMM kernel: a qgemm and its requantization as one register-tiled vpdpbusd kernel.

    for each group of `panels` 16-column panels, for each tile of `mr` rows:
        acc[mr][panels * 16 / lanes] = -corr                (vector<lanes x i32> registers)
        for kb in K / 4:  b = the panels' 64-byte rows (one load each)
                          a = A[m, kb, 0:4] broadcast (one 32-bit broadcast per row)
                          acc = vpdpbusd(acc, unsigned operand, signed operand)
        epilogue on the registers: to float, * mult + bias (fma), clamp to [lo - zp, hi - zp],
        round to nearest even and convert (one instruction on AVX-512), then four vectors at a
        time: packed to words, + zp, packed to bytes, one shuffle, one store (masked past N);
        with `fits_i32` no float clamp: the packs saturate, a byte max/min clamps (1-4% on
        whole int8 models); with a fused add (`ResidualAdd`) its arithmetic before the packs
    then a convolution's tail columns, if any (`tail_pass`): dot products along K

A stride-1 convolution with K tap by tap (`InPlaceB`) reads B's rows straight from its image's
channel-interleaved copy (`im2col_pack.ChannelCopy`): row kb of panel nb is 64 bytes at kb's tap
and channels plus nb's first position, no packed panels at all.

`vpdpbusd` and the packs are called as the LLVM intrinsics of the ISA row (`int8_isa.DOTS`: `avx512-vnni`
on zmm registers, `avx-vnni` on ymm; `avx2-madd`, AVX2 without VNNI, makes each vpdpbusd two
vpmaddwd on the groups' even and odd bytes widened to i16: `dot_operand`, `dot`); rows and column
tails are straight-line copies of the tile with fewer rows or panels. The epilogue computes the
same bytes as the lowering's requantization generic (clamping before rounding is clamping after
it: the bounds are integers); against one vector op chain and store per vector it was 1-3% faster
on ResNet-50's layers (the packs narrow four vectors in five instructions where vpmovdb took two
micro-ops a vector). The k loop is
marked `INT8_K_LOOP`: etc-cpu-prefetch-gemm-tiles fetches the next row tile's filter rows while
it runs (a filter that streams from memory: with the epilogue, ResNet-50 int8 0.95x the time,
ResNet-18 0.98x, MobileNetV2 at 224 0.97x). The group loop and the row-tile loops (their
iterations write their own columns or rows) are marked `etc.thread_split`: a threaded entry
shares the better balanced (ResNet-50's 14 x 14 layers have 3 groups: their row tiles).
"""

from __future__ import annotations

from dataclasses import dataclass

from etc.targets.cpu.kernel_ir import KernelText, f32_literal, tensor_type
from etc.targets.cpu.kernels.int8_isa import DOTS
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, QgemmPair, ResidualAdd
from etc.targets.cpu.loop_effects import THREAD_SPLIT


INT8_K_LOOP = "etc.cpu.int8_k_loop"  # a tile's k loop, for etc-cpu-prefetch-gemm-tiles
STORE = 4  # accumulator vectors narrowed together and written with one store
PARAMS = (("%mult", "f32"), ("%bias", "f32"))  # the epilogue's per-channel arguments (corr: the start)
NEAREST = 8  # the convert's embedded rounding: to nearest even, exceptions suppressed ({rn-sae})


@dataclass(frozen=True)
class InPlaceB:
    """B read in place from a `ChannelCopy` (`bytes` of it): row kb of panel nb at byte k_bytes[kb]
    + (nb // panels_per_row) * row_bytes + 64 * (nb % panels_per_row)."""
    bytes: int
    k_bytes: tuple
    panels_per_row: int
    row_bytes: int


class Int8Kernel(KernelText):
    """The kernel as text: a function of (A, B, corr, mult, bias) returning the [M, N] i8 tensor."""

    def __init__(self, p: QgemmPair, dot: str, mr: int, panels: int, tail_columns: int = 0,
                 residual: ResidualAdd | None = None, in_place: InPlaceB | None = None):
        super().__init__()
        assert not (in_place and tail_columns), "a panel read in place is whole"
        self.p = p
        self.in_place = in_place
        self.residual = residual  # an int8 add fused into the epilogue: the kernel returns its result
        # round before clamping, the packs saturate to i8 and the bytes are clamped (see `store`)
        self.saturate = p.fits_i32 and residual is None
        self.tail_columns = tail_columns  # the last panel's columns, multiplied along K (see `tail`)
        self.isa = DOTS[dot]
        self.lanes, self.intrinsic = self.isa.lanes, self.isa.dot
        self.vp = PANEL // self.lanes  # vectors per panel
        self.mr = max(1, min(mr, p.M))
        self.panels = max(1, min(panels, p.NB))

    def build(self) -> str:
        p, L = self.p, self.lanes
        C = p.M if p.per == "row" else p.N
        a_t, b_t = tensor_type([p.M, p.KB, GROUP], "i8"), tensor_type([p.NB, p.KB, PANEL, GROUP], "i8")
        if self.in_place:
            b_t = tensor_type([self.in_place.bytes], "i8")
        c_i, c_f, o_t = tensor_type([C], "i32"), tensor_type([C], "f32"), tensor_type([p.M, p.N], "i8")
        r = self.residual
        self.emit(f"%zero = arith.constant dense<0> : vector<{L}xi32>")
        self.emit("%pad8 = arith.constant 0 : i8")
        self.dot_constants()
        self.emit("%pad32 = arith.constant 0 : i32")
        self.emit("%padf = arith.constant 0.0 : f32")
        self.emit(f"%zp16 = arith.constant dense<{r.zero_point if r else p.zero_point}> : vector<{2 * L}xi16>")
        if self.saturate:
            self.emit(f"%lo8 = arith.constant dense<{p.lo}> : vector<{4 * L}xi8>")
            self.emit(f"%hi8 = arith.constant dense<{p.hi}> : vector<{4 * L}xi8>")
        self.emit(f"%lo = arith.constant dense<{float(p.lo - p.zero_point)}> : vector<{L}xf32>")
        self.emit(f"%hi = arith.constant dense<{float(p.hi - p.zero_point)}> : vector<{L}xf32>")
        if self.isa.rounding_convert:
            self.emit(f"%all = arith.constant -1 : i{L}")
            self.emit(f"%nearest = arith.constant {NEAREST} : i32")
        self.emit(f"%init = tensor.empty() : {o_t}")
        if self.in_place:
            self.emit(f"%kbytes = arith.constant dense<[{', '.join(map(str, self.in_place.k_bytes))}]> : "
                      f"{tensor_type([p.KB], 'i32')}")
        else:
            self.emit(f"%Bflat = tensor.collapse_shape %B [[0], [1], [2, 3]] : {b_t} into "
                      f"{tensor_type([p.NB, p.KB, PANEL * GROUP], 'i8')}")
        groups = (p.N // PANEL) // self.panels  # groups of whole panels (loop); the rest, a partial one too, after
        main = p.NB - (1 if self.tail_columns else 0)  # the panels the tiles compute
        # A read as rows [M, KB * 4] everywhere: the tail's 64-byte runs need that view, and one
        # view keeps a filter one constant (etc-cpu-prepack-constants packs each layout read)
        self.emit(f"%Arows = tensor.collapse_shape %A [[0], [1, 2]] : {a_t} into "
                  f"{tensor_type([p.M, p.KB * GROUP], 'i8')}")
        if self.tail_columns:
            self.tail_constants()
        if r:
            self.residual_constants()
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
            self.emit(f"}} {{{THREAD_SPLIT}}}")  # the groups write their own columns
            out = res
        rest = main - groups * self.panels
        if rest:
            out = self.rows(out, self.index(groups * self.panels), rest, static_panel=groups * self.panels)
        if self.tail_columns:
            out = self.tail_pass(out)
        result_t = tensor_type(r.shape, "i8") if r else o_t
        residual_arg = f", %R: {result_t}" if r else ""
        if r and r.reassociation:
            self.emit(f"%result = tensor.expand_shape {out} {r.reassociation} output_shape "
                      f"[{', '.join(map(str, r.shape))}] : {o_t} into {result_t}")
        else:
            self.emit(f"%result = tensor.cast {out} : {o_t} to {o_t}")
        return (f"func.func private @qgemm(%A: {a_t}, %B: {b_t}, %corr: {c_i}, %mult: {c_f}, %bias: {c_f}"
                f"{residual_arg}) -> {result_t} {{\n" + self.text() + f"\n  return %result : {result_t}\n}}")

    def residual_constants(self) -> None:
        """The fused add's operands: the residual as [M, N] (the collapse of the add's shape), its
        and the qgemm's side's zero point and scale, the output's scale and clamp (vector and
        scalar: the tail columns are scalar)."""
        p, r, L = self.p, self.residual, self.lanes
        # One flat view, read at row * N + column: viewed as [M, N], the canonicalizer forwards a
        # producing kernel's stored values to these reads (the collapse of its expand is its [M, N]
        # result), which ties this kernel's straight-line tiles to another's, and two threads
        # cannot split them apart. A vector partly past N reads the next row's bytes unused.
        self.emit(f"%Rflat = tensor.collapse_shape %R [{list(range(len(r.shape)))}] : "
                  f"{tensor_type(r.shape, 'i8')} into {tensor_type([p.M * p.N], 'i8')}")
        own, other = r.own, 1 - r.own
        values = {"roff": ("f32", float(p.zero_point - r.zero_points[own])), "rzp": ("i32", r.zero_points[other]),
                  "rsown": ("f32", r.scales[own]), "rsother": ("f32", r.scales[other]), "rinv": ("f32", r.inverse),
                  "rlo": ("f32", float(r.lo - r.zero_point)), "rhi": ("f32", float(r.hi - r.zero_point))}
        for name, (element, value) in values.items():
            literal = f32_literal(value) if element == "f32" else str(value)
            self.emit(f"%{name} = arith.constant {literal} : {element}")
            self.emit(f"%{name}_v = vector.broadcast %{name} : {element} to vector<{L}x{element}>")

    def add_residual(self, own: str, residual: str, lanes: int | None) -> str:
        """The fused add on the qgemm's scaled and clamped value less its zero point (`own`, f32,
        not yet rounded) and the residual's bytes (i8), vectors of `lanes` or scalars (None): the
        lowering's float32 operations in its order (the qgemm's side rounded and shifted to the
        add's zero point in float: exact on these integers, two conversions fewer), clamped to the
        output's range less its zero point, rounded (the zero point is added after, as the plain
        epilogue does). Returns i32."""
        ty = (lambda e: f"vector<{lanes}x{e}>") if lanes else (lambda e: e)
        suffix = "_v" if lanes else ""
        rounded, a, x, b, bc, bf, y, total, m, c1, c2 = (self.fresh() for _ in range(11))
        self.emit(f"{rounded} = math.roundeven {own} : {ty('f32')}")
        self.emit(f"{a} = arith.addf {rounded}, %roff{suffix} : {ty('f32')}")
        self.emit(f"{x} = arith.mulf {a}, %rsown{suffix} : {ty('f32')}")
        self.emit(f"{b} = arith.extsi {residual} : {ty('i8')} to {ty('i32')}")
        self.emit(f"{bc} = arith.subi {b}, %rzp{suffix} : {ty('i32')}")
        self.emit(f"{bf} = arith.sitofp {bc} : {ty('i32')} to {ty('f32')}")
        self.emit(f"{y} = arith.mulf {bf}, %rsother{suffix} : {ty('f32')}")
        self.emit(f"{total} = arith.addf {x}, {y} : {ty('f32')}")
        self.emit(f"{m} = arith.mulf {total}, %rinv{suffix} : {ty('f32')}")
        self.emit(f"{c1} = arith.maximumf {m}, %rlo{suffix} fastmath<nsz> : {ty('f32')}")
        self.emit(f"{c2} = arith.minimumf {c1}, %rhi{suffix} fastmath<nsz> : {ty('f32')}")
        if lanes:
            return self.round_to_int(c2)
        rd, q = self.fresh(), self.fresh()
        self.emit(f"{rd} = math.roundeven {c2} : f32")
        self.emit(f"{q} = arith.fptosi {rd} : f32 to i32")
        return q

    def rows(self, out: str, nb0: str, panels: int, static_panel) -> str:
        """Row tiles over all M for `panels` panels starting at `nb0`; returns the updated tensor."""
        p, o_t = self.p, tensor_type([self.p.M, self.p.N], "i8")
        tiles = p.M // self.mr
        if tiles:  # the loop runs over the tiles' first rows: a tile writes rows m0 .. m0 + mr - 1
            m0, o, res = self.fresh("m"), self.fresh("o"), self.fresh("r")
            self.emit(f"{res} = scf.for {m0} = {self.index(0)} to {self.index(tiles * self.mr)} "
                      f"step {self.index(self.mr)} iter_args({o} = {out}) -> ({o_t}) {{")
            inner = self.tile(o, m0, self.mr, nb0, panels, static_panel)
            self.emit(f"  scf.yield {inner} : {o_t}")
            # the row tiles write their own rows: the threads may share them (few panel groups,
            # ResNet-50's 14 x 14 layers: 3), the left-over rows beside them run once
            self.emit(f"}} {{{THREAD_SPLIT}}}")
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
        vectors = list(self.column_vectors(nbs, panels, static_panel))
        inits = self.initial_accumulators(ms, vectors, panels * vp)
        kb = self.fresh("kb")
        carried = [self.fresh("c") for _ in flat]
        res = self.fresh("k")
        starts = [self.panel_start(nb) for nb in nbs] if self.in_place else []
        self.emit(f"{res}:{len(flat)} = scf.for {kb} = {self.index(0)} to {self.index(p.KB)} step {self.index(1)} "
                  f"iter_args({', '.join(f'{c} = {i}' for c, i in zip(carried, inits))}) -> "
                  f"({', '.join([vec] * len(flat))}) {{")
        bvecs = []
        if self.in_place:
            word, k_at = self.fresh(), self.fresh()
            self.emit(f"  {word} = tensor.extract %kbytes[{kb}] : {tensor_type([p.KB], 'i32')}")
            self.emit(f"  {k_at} = arith.index_cast {word} : i32 to index")
        for j in range(panels):
            for h in range(vp):  # one contiguous load per vector (a 2-D read would be a load per row)
                b = self.fresh("b")
                if self.in_place:
                    at = self.add(self.addv(k_at, starts[j]), h * 4 * L)
                    self.emit(f"  {b} = vector.transfer_read %B[{at}], %pad8 {{in_bounds = [true]}} : "
                              f"{tensor_type([self.in_place.bytes], 'i8')}, {bytes_}")
                else:
                    self.emit(f"  {b} = vector.transfer_read %Bflat[{nbs[j]}, {kb}, {self.index(h * 4 * L)}], "
                              f"%pad8 {{in_bounds = [true]}} : {tensor_type([p.NB, p.KB, PANEL * GROUP], 'i8')}, "
                              f"{bytes_}")
                bvecs.append(b)
        new = []
        kb4 = self.mul(kb, GROUP)
        bvecs = [self.dot_operand(b, signed=p.a_unsigned) for b in bvecs]  # each widened once for every row
        for r in range(rows):
            a = self.broadcast_group(f"%Arows[{ms[r]}, {kb4}]", tensor_type([p.M, p.KB * GROUP], 'i8'))
            a = self.dot_operand(a, signed=not p.a_unsigned)
            for v in range(panels * vp):
                u, sg = (a, bvecs[v]) if p.a_unsigned else (bvecs[v], a)
                new.append(self.dot(carried[r * panels * vp + v], u, sg))
        self.emit(f"  scf.yield {', '.join(new)} : {', '.join([vec] * len(new))}")
        self.emit(f"}} {{{INT8_K_LOOP}}}")  # etc-cpu-prefetch-gemm-tiles fetches the next tile's A rows
        # Epilogue: requantize each row's accumulators in registers, STORE vectors at a time.
        for r in range(rows):
            if p.per == "row":
                row_params = [self.splat(name, ms[r], element) for name, element in PARAMS]
            residual_row = self.mul(ms[r], p.N) if self.residual else None  # the row's start in %Rflat
            for group in range(0, len(vectors), STORE):
                members = vectors[group:group + STORE]
                ints = []
                for v, col, inb in members:
                    params = row_params if p.per == "row" else [
                        self.vector(name, col, element, inb) for name, element in PARAMS]
                    acc = f"{res}#{r * panels * vp + v}"
                    if self.residual:
                        q = self.add_residual(self.requant(acc, *params, rounded=False),
                                              self.residual_vector(residual_row, col, inb), L)
                    else:
                        q = self.requant(acc, *params)
                    ints.append(q)
                assert members[-1][0] - members[0][0] == len(members) - 1, "a store's vectors are adjacent"
                inb = "true" if all(m[2] == "true" for m in members) else "false"
                out = self.store(out, ints, ms[r], members[0][1], inb)
        return out

    def panel_start(self, nb: str) -> str:
        """Panel nb's first byte in the `ChannelCopy`, past its group of K's (`InPlaceB`)."""
        per_row, row_bytes = self.in_place.panels_per_row, self.in_place.row_bytes
        if per_row == 1:
            return self.mul(nb, row_bytes)
        row, col = self.fresh(), self.fresh()
        self.emit(f"{row} = arith.divui {nb}, {self.index(per_row)} : index")
        self.emit(f"{col} = arith.remui {nb}, {self.index(per_row)} : index")
        return self.addv(self.mul(row, row_bytes), self.mul(col, PANEL * GROUP))

    def initial_accumulators(self, ms: list, vectors: list, per_row: int) -> list:
        """The accumulators start at -corr (the zero points' correction, see the lowering), so the
        epilogue reads the exact integer sum without a subtraction per vector."""
        p, L = self.p, self.lanes
        vec = f"vector<{L}xi32>"
        if p.per == "row":
            inits = []
            for m in ms:
                c, n, b = self.fresh(), self.fresh(), self.fresh()
                self.emit(f"{c} = tensor.extract %corr[{m}] : {tensor_type([p.M], 'i32')}")
                self.emit(f"{n} = arith.subi %pad32, {c} : i32")
                self.emit(f"{b} = vector.broadcast {n} : i32 to {vec}")
                inits += [b] * per_row
            return inits
        by_vector = {}
        for v, col, inb in vectors:
            c, n = self.vector("%corr", col, "i32", inb), self.fresh()
            self.emit(f"{n} = arith.subi %zero, {c} : {vec}")
            by_vector[v] = n
        return [by_vector.get(v, "%zero") for _ in ms for v in range(per_row)]

    def tail_pass(self, out: str) -> str:
        """The tail columns over all M, `rows` at a time (at most 24 accumulators), after the panels.
        Computing each row tile's tail right after its panels (its filter rows still in L1)
        measured alike (whole models against the padded panel: ResNet-18 int8 0.94 either way,
        ResNet-50 0.95 here and 0.95 there, MobileNetV2 at 224 0.97), so the tiles stay as they are."""
        p, o_t = self.p, tensor_type([self.p.M, self.p.N], "i8")
        rows = max(1, min(self.mr, 24 // self.tail_columns, p.M))
        tiles = p.M // rows
        if tiles:
            m, o, res = self.fresh("tm"), self.fresh("to"), self.fresh("tr")
            self.emit(f"{res} = scf.for {m} = {self.index(0)} to {self.index(tiles)} step {self.index(1)} "
                      f"iter_args({o} = {out}) -> ({o_t}) {{")
            m0 = self.mul(m, rows)
            inner = self.tail(o, [m0] + [self.add(m0, r) for r in range(1, rows)])
            self.emit(f"  scf.yield {inner} : {o_t}")
            self.emit(f"}} {{{THREAD_SPLIT}}}")  # the row tiles write their own rows
            out = res
        if p.M - tiles * rows:
            m0 = self.index(tiles * rows)
            out = self.tail(out, [m0] + [self.add(m0, r) for r in range(1, p.M - tiles * rows)])
        return out

    def tail_constants(self) -> None:
        p = self.p
        b_t = tensor_type([p.NB * p.KB * PANEL * GROUP], "i8")
        self.emit(f"%Bcols = tensor.collapse_shape %B [[0, 1, 2, 3]] : "
                  f"{tensor_type([p.NB, p.KB, PANEL, GROUP], 'i8')} into {b_t}")
        self.emit(f"%tlo = arith.constant {float(p.lo - p.zero_point)} : f32")
        self.emit(f"%thi = arith.constant {float(p.hi - p.zero_point)} : f32")
        self.emit(f"%tzp = arith.constant {self.residual.zero_point if self.residual else p.zero_point} : i32")

    def tail(self, out: str, ms: list) -> str:
        """The last panel's `tail_columns` columns (at most half a panel) for rows `ms`, each a dot
        product along K: a padded panel would spend 16 columns' work on them (ResNet's 7 x 7
        maps: 49 columns in 64), this spends about one per column. The pack wrote each column's
        K values contiguously in the panel; a 64-byte run of A's row times one of the column per
        `vpdpbusd`, the lanes summed after K, the requantization on the scalar."""
        p, L, T = self.p, self.lanes, self.tail_columns
        assert not p.a_unsigned, "tail columns are a convolution's: the image (B) is the unsigned operand"
        vec, bytes_ = f"vector<{L}xi32>", f"vector<{4 * L}xi8>"
        o_t, K4 = tensor_type([p.M, p.N], "i8"), p.KB * GROUP
        a_t, b_t = tensor_type([p.M, K4], "i8"), tensor_type([p.NB * p.KB * PANEL * GROUP], "i8")
        base = (p.NB - 1) * p.KB * PANEL * GROUP
        whole, part = divmod(K4, 4 * L)  # runs of 4L bytes, then a partial one (masked)
        count = len(ms)
        carried = [self.fresh("t") for _ in range(count * T)]
        res, kc = self.fresh("tk"), self.fresh("kc")

        def step(k0: str, in_bounds: str, accs: list) -> list:
            cols = []
            for c in range(T):
                b = self.fresh("tb")
                at = self.add(k0, base + c * K4)
                self.emit(f"{b} = vector.transfer_read %Bcols[{at}], %pad8 {{in_bounds = [{in_bounds}]}} : "
                          f"{b_t}, {bytes_}")
                cols.append(self.dot_operand(b, signed=False))
            new = []
            for r in range(count):
                a = self.fresh("ta")
                self.emit(f"{a} = vector.transfer_read %Arows[{ms[r]}, {k0}], %pad8 "
                          f"{{in_bounds = [{in_bounds}]}} : {a_t}, {bytes_}")
                a = self.dot_operand(a, signed=True)
                new += [self.dot(accs[r * T + c], cols[c], a) for c in range(T)]
            return new

        accs = ["%zero"] * len(carried)
        if whole:
            self.emit(f"{res}:{len(carried)} = scf.for {kc} = {self.index(0)} to {self.index(whole)} "
                      f"step {self.index(1)} iter_args({', '.join(f'{c} = %zero' for c in carried)}) -> "
                      f"({', '.join([vec] * len(carried))}) {{")
            new = step(self.mul(kc, 4 * L), "true", carried)
            self.emit(f"  scf.yield {', '.join(new)} : {', '.join([vec] * len(new))}")
            self.emit("}")
            accs = [f"{res}#{i}" for i in range(len(carried))]
        if part:  # K's last bytes; A's lanes past them read as 0, so the column's need not
            accs = step(self.index(whole * 4 * L), "false", accs)
        for r in range(count):
            corr, mult, bias = (self.fresh() for _ in range(3))
            self.emit(f"{corr} = tensor.extract %corr[{ms[r]}] : {tensor_type([p.M], 'i32')}")
            self.emit(f"{mult} = tensor.extract %mult[{ms[r]}] : {tensor_type([p.M], 'f32')}")
            self.emit(f"{bias} = tensor.extract %bias[{ms[r]}] : {tensor_type([p.M], 'f32')}")
            residual_row = self.mul(ms[r], p.N) if self.residual else None  # the row's start in %Rflat
            for c in range(T):
                s_, d, f, y, c1, c2, rd, q, z, b8, ins = (self.fresh() for _ in range(11))
                self.emit(f"{s_} = vector.reduction <add>, {accs[r * T + c]} : {vec} into i32")
                self.emit(f"{d} = arith.subi {s_}, {corr} : i32")
                self.emit(f"{f} = arith.sitofp {d} : i32 to f32")
                self.emit(f"{y} = math.fma {f}, {mult}, {bias} : f32")
                self.emit(f"{c1} = arith.maximumf {y}, %tlo fastmath<nsz> : f32")
                self.emit(f"{c2} = arith.minimumf {c1}, %thi fastmath<nsz> : f32")
                if self.residual:
                    byte = self.fresh()
                    at = self.add(residual_row, p.N - T + c)
                    self.emit(f"{byte} = tensor.extract %Rflat[{at}] : {tensor_type([p.M * p.N], 'i8')}")
                    q = self.add_residual(c2, byte, None)
                else:
                    self.emit(f"{rd} = math.roundeven {c2} : f32")
                    self.emit(f"{q} = arith.fptosi {rd} : f32 to i32")
                self.emit(f"{z} = arith.addi {q}, %tzp : i32")
                self.emit(f"{b8} = arith.trunci {z} : i32 to i8")
                self.emit(f"{ins} = tensor.insert {b8} into {out}[{ms[r]}, {self.index(p.N - T + c)}] : {o_t}")
                out = ins
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

    def dot_operand(self, bytes_: str, signed: bool):
        """What `dot` multiplies for a vector of 4-byte groups: the bytes themselves, or, without a
        dot-product instruction, the groups' even and odd bytes as i16 lanes (zero- or
        sign-extended), a tuple: widened once and multiplied by every vector of the other side."""
        if self.isa.dot:
            return bytes_
        L = self.lanes
        w16 = f"vector<{2 * L}xi16>"
        words, even, odd = self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{words} = vector.bitcast {bytes_} : vector<{4 * L}xi8> to {w16}")
        if signed:
            high = self.fresh()
            self.emit(f"{high} = arith.shli {words}, %w8 : {w16}")
            self.emit(f"{even} = arith.shrsi {high}, %w8 : {w16}")
            self.emit(f"{odd} = arith.shrsi {words}, %w8 : {w16}")
        else:
            self.emit(f"{even} = arith.andi {words}, %w255 : {w16}")
            self.emit(f"{odd} = arith.shrui {words}, %w8 : {w16}")
        return even, odd

    def dot_constants(self) -> None:
        """`dot_operand`'s shift and mask, without a dot-product instruction."""
        if not self.isa.dot:
            self.emit(f"%w8 = arith.constant dense<8> : vector<{2 * self.lanes}xi16>")
            self.emit(f"%w255 = arith.constant dense<255> : vector<{2 * self.lanes}xi16>")

    def dot(self, acc: str, unsigned, signed) -> str:
        """acc + each lane's four unsigned x signed byte products (operands from `dot_operand`):
        one `vpdpbusd`, or two `vpmaddwd` (even bytes, odd bytes) and two adds."""
        L = self.lanes
        vec, bytes_ = f"vector<{L}xi32>", f"vector<{4 * L}xi8>"
        d = self.fresh("d")
        if self.isa.dot:
            self.emit(f"{d} = llvm.call_intrinsic \"{self.isa.dot}\"({acc}, {unsigned}, {signed}) "
                      f": ({vec}, {bytes_}, {bytes_}) -> {vec}")
            return d
        w16 = f"vector<{2 * L}xi16>"
        even, odd, both = self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{even} = llvm.call_intrinsic \"{self.isa.pairs}\"({unsigned[0]}, {signed[0]}) "
                  f": ({w16}, {w16}) -> {vec}")
        self.emit(f"{odd} = llvm.call_intrinsic \"{self.isa.pairs}\"({unsigned[1]}, {signed[1]}) "
                  f": ({w16}, {w16}) -> {vec}")
        self.emit(f"{both} = arith.addi {even}, {odd} : {vec}")
        self.emit(f"{d} = arith.addi {acc}, {both} : {vec}")
        return d

    def broadcast_group(self, at: str, tensor_type: str, element: str = "i8") -> str:
        """The 32-bit word at `at` (a tensor and its indices: 4 bytes, or 2 i16) in every lane, seen as
        `element` lanes: the operand `vpdpbusd` multiplies a panel row's 4-byte groups against (or a
        pre-widened pair of `vpmaddwd`). The kernel defines `%pad8` (and `%pad16` to read i16)."""
        bits = int(element[1:])
        n = 32 // bits
        vec, lanes_of = f"vector<{self.lanes}xi32>", f"vector<{n * self.lanes}x{element}>"
        raw, word, s, bc, a = (self.fresh() for _ in range(5))
        self.emit(f"  {raw} = vector.transfer_read {at}, %pad{bits} {{in_bounds = [true]}} : {tensor_type}, "
                  f"vector<{n}x{element}>")
        self.emit(f"  {word} = vector.bitcast {raw} : vector<{n}x{element}> to vector<1xi32>")
        self.emit(f"  {s} = vector.extract {word}[0] : i32 from vector<1xi32>")
        self.emit(f"  {bc} = vector.broadcast {s} : i32 to {vec}")
        self.emit(f"  {a} = vector.bitcast {bc} : {vec} to {lanes_of}")
        return a

    def splat(self, tensor: str, at: str, element: str) -> str:
        p, L = self.p, self.lanes
        s, v = self.fresh(), self.fresh()
        self.emit(f"{s} = tensor.extract {tensor}[{at}] : {tensor_type([p.M], element)}")
        self.emit(f"{v} = vector.broadcast {s} : {element} to vector<{L}x{element}>")
        return v

    def vector(self, tensor: str, at: str, element: str, inb: str) -> str:
        """`lanes` elements of a per-column vector [N] at `at`."""
        p, L = self.p, self.lanes
        v = self.fresh()
        pad = {"i32": "%pad32", "f32": "%padf"}[element]
        self.emit(f"{v} = vector.transfer_read {tensor}[{at}], {pad} {{in_bounds = [{inb}]}} : "
                  f"{tensor_type([p.N], element)}, vector<{L}x{element}>")
        return v

    def residual_vector(self, row: str, col: str, inb: str) -> str:
        """`lanes` bytes of the residual from column `col` of the row starting at `row` in the flat
        view (see `residual_constants`)."""
        v, flat_t = self.fresh(), tensor_type([self.p.M * self.p.N], "i8")
        self.emit(f"{v} = vector.transfer_read %Rflat[{self.addv(row, col)}], %pad8 "
                  f"{{in_bounds = [{inb}]}} : {flat_t}, vector<{self.lanes}xi8>")
        return v

    def requant(self, acc: str, mult: str, bias: str, rounded: bool = True) -> str:
        """The accumulator (already less corr) scaled, clamped to the output's range less its zero
        point, rounded to the nearest even integer: an i32 vector (`rounded` False: the clamped
        f32 vector before rounding). Clamping before rounding equals clamping after it (the bounds
        are integers); the zero point is added after the narrowing."""
        L = self.lanes
        f, y, c1, c2 = (self.fresh() for _ in range(4))
        self.emit(f"{f} = arith.sitofp {acc} : vector<{L}xi32> to vector<{L}xf32>")
        self.emit(f"{y} = math.fma {f}, {mult}, {bias} : vector<{L}xf32>")
        if self.saturate and rounded:  # within i32: `store` clamps
            return self.round_to_int(y)
        # nsz: the bounds may be 0.0 and the sign of a zero does not survive rounding to an integer
        self.emit(f"{c1} = arith.maximumf {y}, %lo fastmath<nsz> : vector<{L}xf32>")
        self.emit(f"{c2} = arith.minimumf {c1}, %hi fastmath<nsz> : vector<{L}xf32>")
        return self.round_to_int(c2) if rounded else c2

    def round_to_int(self, x: str) -> str:
        L, q = self.lanes, self.fresh()
        if self.isa.rounding_convert:
            self.emit(f"{q} = llvm.call_intrinsic \"{self.isa.rounding_convert}\"({x}, %zero, %all, %nearest) : "
                      f"(vector<{L}xf32>, vector<{L}xi32>, i{L}, i32) -> vector<{L}xi32>")
        else:
            r = self.fresh()
            self.emit(f"{r} = math.roundeven {x} : vector<{L}xf32>")
            self.emit(f"{q} = arith.fptosi {r} : vector<{L}xf32> to vector<{L}xi32>")
        return q

    def store(self, out: str, ints: list, m: str, col: str, inb: str) -> str:
        """Up to STORE i32 vectors (adjacent columns of row m) narrowed to bytes with the packing
        instructions (two dwords -> words, add the zero point, two words -> bytes; each packs within
        128-bit lanes, so one dword permutation restores the column order) and written with one
        store. The zero point is added with saturation: when the values were rounded unclamped
        (`saturate`: the lowering bounds them inside i32), the packs' saturation is the clamp to
        i8's range and a byte max/min the clamp to the output's (a ReLU's zero point), two
        instructions per four vectors where the float clamp takes eight."""
        L, isa = self.lanes, self.isa
        zero = "%zero"
        v = ints + [zero] * (STORE - len(ints))
        w16, b8 = f"vector<{2 * L}xi16>", f"vector<{4 * L}xi8>"
        vec = f"vector<{L}xi32>"
        lo, hi, lo_z, hi_z, bytes_ = (self.fresh() for _ in range(5))
        self.emit(f"{lo} = llvm.call_intrinsic \"{isa.pack_dwords}\"({v[0]}, {v[1]}) : ({vec}, {vec}) -> {w16}")
        self.emit(f"{hi} = llvm.call_intrinsic \"{isa.pack_dwords}\"({v[2]}, {v[3]}) : ({vec}, {vec}) -> {w16}")
        add_sat = f"llvm.sadd.sat.v{2 * L}i16"
        self.emit(f"{lo_z} = llvm.call_intrinsic \"{add_sat}\"({lo}, %zp16) : ({w16}, {w16}) -> {w16}")
        self.emit(f"{hi_z} = llvm.call_intrinsic \"{add_sat}\"({hi}, %zp16) : ({w16}, {w16}) -> {w16}")
        self.emit(f"{bytes_} = llvm.call_intrinsic \"{isa.pack_words}\"({lo_z}, {hi_z}) : ({w16}, {w16}) -> {b8}")
        if self.saturate:  # the values were rounded unclamped: saturated to i8 by the packs, clamped here
            if self.p.lo > -128:
                bytes_, low = self.fresh(), bytes_
                self.emit(f"{bytes_} = arith.maxsi {low}, %lo8 : {b8}")
            if self.p.hi < 127:
                bytes_, high = self.fresh(), bytes_
                self.emit(f"{bytes_} = arith.minsi {high}, %hi8 : {b8}")
        lanes128 = L // 4  # 128-bit lanes; lane i holds dwords v0[4i:4i+4], v1[..], v2[..], v3[..]
        order = [4 * i + k for k in range(STORE) for i in range(lanes128)]
        dw, perm, ordered = self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{dw} = vector.bitcast {bytes_} : {b8} to {vec}")
        self.emit(f"{perm} = vector.shuffle {dw}, {dw} [{', '.join(map(str, order))}] : {vec}, {vec}")
        self.emit(f"{ordered} = vector.bitcast {perm} : {vec} to {b8}")
        width = L * len(ints)
        ordered = self.leading(ordered, L * STORE, width)
        res = self.fresh()
        self.emit(f"{res} = vector.transfer_write {ordered}, {out}[{m}, {col}] {{in_bounds = [{inb}]}} : "
                  f"vector<{width}xi8>, {tensor_type([self.p.M, self.p.N], 'i8')}")
        return res
