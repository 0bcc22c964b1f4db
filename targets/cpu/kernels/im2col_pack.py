"""A convolution's int8 B operand per call, straight from the padded image (no gather built): its
im2col packed as panels (`pack_text`), or, for a stride-1 convolution with K tap by tap, its image
copied with the channels interleaved (`ChannelCopy`), which the kernel reads as its panels in place."""

from __future__ import annotations

from dataclasses import dataclass

from etc.targets.cpu.kernel_ir import KernelText, tensor_type
from etc.targets.cpu.kernels.int8_match import GROUP, PANEL, Im2col
from etc.targets.cpu.loop_effects import THREAD_SPLIT


def pack_text(g: Im2col, tail_columns: int = 0) -> str:
    """The im2col packed straight from the image, per call: for each group of 4 rows of K and panel
    of 16 positions, each row's 16 bytes gathered from one or a few contiguous loads (a position's
    row run; every stride-th byte) by shuffles, the four rows interleaved into the 64-byte panel row
    the kernel reads, flipped to unsigned, stored. The offsets are constants: L panels (a period of
    output rows) unrolled in a loop over the periods, each period's panels written row by row of K
    (a loop over K inside), then the last panels with positions past P clamped. Loads that could
    reach past the image (the last rows of K near its end) are masked.

    With `tail_columns` (the kernel's, see `Int8Kernel`) the last, partial panel holds its first
    `tail_columns` positions one after another instead, each position's K values contiguous (at
    byte (c * KB + kb) * 4 of the panel): the kernel multiplies them along K."""
    K, P = g.K, g.P
    KB, NB = -(-K // GROUP), -(-P // PANEL)
    assert 0 <= tail_columns < PANEL and (not tail_columns or P % PANEL == tail_columns), (tail_columns, P)
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
    src, flat_t = tensor_type([g.C, g.Hp, g.Wp], "i8"), tensor_type([total], "i8")
    rows_t, dst = tensor_type([NB, KB, PANEL * GROUP], "i8"), tensor_type([NB, KB, PANEL, GROUP], "i8")
    koffs = ", ".join(str(g.k_offset(k)) for k in range(KB * GROUP))
    t = _image_text(g)
    t.emit(f"%koffs = arith.constant dense<[{koffs}]> : {tensor_type([KB * GROUP], 'i32')}")
    t.emit(f"%empty = tensor.empty() : {rows_t}")

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

    def panel(acc: str, bases: list, offsets: list, nb: str, kb: str, in_bounds: bool, columns: int = 0) -> str:
        u = _interleave(t, [row(base, offsets, in_bounds) for base in bases])
        if columns:
            return columnwise(acc, u, nb, kb, columns)
        w = t.fresh()
        t.emit(f"{w} = vector.transfer_write {u}, {acc}[{nb}, {kb}, {t.index(0)}] {{in_bounds = [true]}} : "
               f"vector<{PANEL * GROUP}xi8>, {rows_t}")
        return w

    def columnwise(acc: str, u: str, nb: str, kb: str, columns: int) -> str:
        """Positions 0..columns-1 of the panel row `u` (4 bytes each) to their own runs of K."""
        words = t.fresh()
        t.emit(f"{words} = vector.bitcast {u} : vector<{PANEL * GROUP}xi8> to vector<{PANEL}xi32>")
        for c in range(columns):
            at = t.add(kb, c * KB)  # the 4-byte group's index in the panel
            row_, col = t.fresh(), t.fresh()
            t.emit(f"{row_} = arith.divui {at}, {t.index(PANEL)} : index")
            t.emit(f"{col} = arith.remui {at}, {t.index(PANEL)} : index")
            byte = t.mul(col, GROUP)
            word, bytes4, w = t.fresh(), t.fresh(), t.fresh()
            t.emit(f"{word} = vector.extract_strided_slice {words} {{offsets = [{c}], sizes = [1], strides = [1]}} : "
                   f"vector<{PANEL}xi32> to vector<1xi32>")
            t.emit(f"{bytes4} = vector.bitcast {word} : vector<1xi32> to vector<{GROUP}xi8>")
            t.emit(f"{w} = vector.transfer_write {bytes4}, {acc}[{nb}, {row_}, {byte}] {{in_bounds = [true]}} : "
                   f"vector<{GROUP}xi8>, {rows_t}")
            acc = w
        return acc

    def k_loop(acc: str, lo: int, hi: int, in_bounds: bool, body) -> str:
        """Rows lo..hi of K (in groups of 4): `body(acc, bases, kb, in_bounds)` writes their panel rows."""
        if lo >= hi:
            return acc
        kb, a, res = t.fresh("kb"), t.fresh("a"), t.fresh("r")
        t.emit(f"{res} = scf.for {kb} = {t.index(lo)} to {t.index(hi)} step {t.index(1)} "
               f"iter_args({a} = {acc}) -> ({rows_t}) {{")
        k0 = t.mul(kb, GROUP)
        bases = []
        for r in range(GROUP):
            e, i = t.fresh(), t.fresh()
            t.emit(f"{e} = tensor.extract %koffs[{t.add(k0, r)}] : {tensor_type([KB * GROUP], 'i32')}")
            t.emit(f"{i} = arith.index_cast {e} : i32 to index")
            bases.append(i)
        t.emit(f"scf.yield {body(a, bases, kb, in_bounds)} : {rows_t}")
        t.emit(f"}} {{{THREAD_SPLIT}}}")  # the rows of K write their own panel rows
        return res

    def all_k(acc: str, body) -> str:
        """Every row of K: those whose loads stay inside the image unmasked, then the rest masked."""
        return k_loop(k_loop(acc, 0, k_safe, True, body), k_safe, KB, False, body)

    # Panels outer, K inner: each panel's rows are written in order (one stream per panel of the
    # period). K outer wrote every panel's row kb in turn, a store KB * 64 bytes from the last:
    # KB = 64 (256 channels) puts every store 4 KiB apart, in one cache set, and the pack of
    # ResNet-50's 256 -> 64 1x1 conv at 56x56 took half the convolution's time.
    out = "%empty"
    if S:
        sv, b, res = t.fresh("s"), t.fresh("a"), t.fresh("r")
        t.emit(f"{res} = scf.for {sv} = {t.index(0)} to {t.index(S)} step {t.index(1)} "
               f"iter_args({b} = {out}) -> ({rows_t}) {{")
        shift, nb0 = t.mul(sv, D), t.mul(sv, L)
        nbs = [t.add(nb0, j) for j in range(L)]

        def period(acc: str, bases: list, kb: str, in_bounds: bool) -> str:
            shifted = [t.addv(base, shift) for base in bases]
            for j in range(L):
                acc = panel(acc, shifted, periodic[j], nbs[j], kb, in_bounds)
            return acc

        t.emit(f"scf.yield {all_k(b, period)} : {rows_t}")
        t.emit(f"}} {{{THREAD_SPLIT}}}")  # the periods write their own panels
        out = res
    if tail:
        def last(acc: str, bases: list, kb: str, in_bounds: bool) -> str:
            for j in tail:
                columns = tail_columns if j == NB - 1 else 0
                acc = panel(acc, bases, clamped[j], t.index(j), kb, in_bounds, columns)
            return acc

        out = all_k(out, last)
    t.emit(f"%result = tensor.expand_shape {out} [[0], [1], [2, 3]] output_shape [{NB}, {KB}, {PANEL}, {GROUP}] : "
           f"{rows_t} into {dst}")
    return (f"func.func private @pack(%src: {src}) -> {dst} {{\n" + t.text()
            + f"\n  return %result : {dst}\n}}")


@dataclass(frozen=True)
class ChannelCopy:
    """A `taps_first` convolution's image with its channels interleaved by fours, one 32-bit word
    per position (flipped to unsigned), plane after plane, row after row, 16 words of slack at a
    plane's end (a partial last panel reads past the last row), laid out so that the kernel reads
    its panels in place (stride 1: 16 consecutive output positions, 16 consecutive words):
    - output rows of whole panels (OW a multiple of 16): one copy of the padded image, rows of
      Wp words; tap (kh, kw) is a shift by kh * dh rows and kw * dw words;
    - otherwise one copy per column tap kw, of the columns kw * dw .. kw * dw + OW - 1: rows of
      OW words, so the output rows follow one another and a panel crossing them is still 16
      consecutive words; tap (kh, kw) is plane kw's row shift kh * dh.
    Either costs at most KW interleaved images a call, against the im2col's KH * KW."""
    g: Im2col
    whole_rows: bool  # output rows of whole panels: one copy, rows of Wp words (else KW, of OW)
    width: int  # words per row
    plane: int  # words per plane

    @staticmethod
    def of(g: Im2col) -> "ChannelCopy":
        whole_rows = g.OW % PANEL == 0
        width = g.Wp if whole_rows else g.OW
        return ChannelCopy(g, whole_rows, width, -(-g.Hp * width // PANEL) * PANEL + PANEL)

    @property
    def copies(self) -> int:
        return 1 if self.whole_rows else self.g.KW

    @property
    def words(self) -> int:
        return self.copies * (self.g.C // GROUP) * self.plane

    @property
    def type(self) -> str:
        return tensor_type([self.words * GROUP], "i8")

    @property
    def k_words(self) -> list:
        """Each group of K's first word: its 4 channels' plane (in its column tap's copy), its tap's shift."""
        g, planes = self.g, self.g.C // GROUP
        out = []
        for k in range(0, g.K, GROUP):
            kh, kw = divmod(k // g.C, g.KW)
            copy, column = (0, kw * g.dw) if self.whole_rows else (kw, 0)
            out.append((copy * planes + (k % g.C) // GROUP) * self.plane + kh * g.dh * self.width + column)
        return out

    @property
    def panel_rows(self) -> tuple[int, int]:
        """(panels per row, words per row): panel nb starts at (nb // the one) * the other + 16 * (nb % the one)."""
        return (self.g.OW // PANEL, self.width) if self.whole_rows else (1, PANEL)

    def emit(self, t: KernelText) -> None:
        """%words from %flat (the padded image, flattened): a loop over the rows, shared between
        threads (each builds the rows its panels read: the kernel's threads take the panels in
        order), one over the planes inside, each row's vectors unrolled; a row's last partial
        vector stored only up to the row's end (its reads are masked at the image's end)."""
        g, words_t = self.g, self.type
        hw, planes = g.Hp * g.Wp, g.C // GROUP
        flat_t = tensor_type([g.C * hw], "i8")
        t.emit(f"%wempty = tensor.empty() : {words_t}")
        r, z, res = t.fresh("row"), t.fresh("z"), t.fresh("w")
        t.emit(f"{res} = scf.for {r} = {t.index(0)} to {t.index(g.Hp)} step {t.index(1)} "
               f"iter_args({z} = %wempty) -> ({words_t}) {{")
        pl, a, planes_res = t.fresh("pl"), t.fresh("a"), t.fresh("r")
        t.emit(f"{planes_res} = scf.for {pl} = {t.index(0)} to {t.index(self.copies * planes)} step {t.index(1)} "
               f"iter_args({a} = {z}) -> ({words_t}) {{")
        kw, cg = t.fresh(), t.fresh()
        t.emit(f"{kw} = arith.divui {pl}, {t.index(planes)} : index")
        t.emit(f"{cg} = arith.remui {pl}, {t.index(planes)} : index")
        # channel 4cg's row r, from column kw * dw; the plane's row r in the copy
        src_row = t.addv(t.addv(t.mul(cg, GROUP * hw), t.mul(kw, g.dw)), t.mul(r, g.Wp))
        dst_row = t.addv(t.mul(pl, GROUP * self.plane), t.mul(r, GROUP * self.width))
        acc = a
        for x in range(0, self.width, PANEL):
            whole = x + PANEL <= self.width
            rows = [t.read("%flat", t.add(src_row, c * hw + x), "%pad", flat_t, f"vector<{PANEL}xi8>", whole)
                    for c in range(GROUP)]
            n = GROUP * min(PANEL, self.width - x)  # bytes of this row
            words = t.leading(_interleave(t, rows), PANEL * GROUP, n)
            acc = t.write(words, acc, t.add(dst_row, GROUP * x), f"vector<{n}xi8>", words_t, True)
        t.emit(f"scf.yield {acc} : {words_t}")
        t.emit("}")
        t.emit(f"scf.yield {planes_res} : {words_t}")
        t.emit(f"}} {{{THREAD_SPLIT}}}")  # the rows are their own
        t.emit(f"%words = tensor.cast {res} : {words_t} to {words_t}")


def channel_copy_text(g: Im2col) -> tuple[str, "ChannelCopy"]:
    """@words(%src): the image's `ChannelCopy`, as a function, and the copy."""
    copy, src = ChannelCopy.of(g), tensor_type([g.C, g.Hp, g.Wp], "i8")
    t = _image_text(g)
    copy.emit(t)
    return (f"func.func private @words(%src: {src}) -> {copy.type} {{\n" + t.text()
            + f"\n  return %words : {copy.type}\n}}"), copy


def _image_text(g: Im2col) -> KernelText:
    """A function body's start over the padded image %src: %flat (it flattened), %flip (the xor
    that makes its bytes unsigned), %pad (the masked loads' filler)."""
    t = KernelText()
    t.emit(f"%flat = tensor.collapse_shape %src [[0, 1, 2]] : {tensor_type([g.C, g.Hp, g.Wp], 'i8')} into "
           f"{tensor_type([g.C * g.Hp * g.Wp], 'i8')}")
    t.emit(f"%flip = arith.constant dense<-128> : vector<{PANEL * GROUP}xi8>")
    t.emit("%pad = arith.constant 0 : i8")
    return t


_PAIRS = [x for i in range(PANEL) for x in (i, i + PANEL)]  # r0[i], r1[i]
_QUADS = [x for i in range(PANEL) for x in (2 * i, 2 * i + 1, 2 * i + 2 * PANEL, 2 * i + 1 + 2 * PANEL)]


def _interleave(t: KernelText, r: list) -> str:
    """Four rows of 16 bytes -> 16 words of 4 bytes (one from each row), flipped to unsigned (%flip)."""
    s01, s23, tv, u = (t.fresh() for _ in range(4))
    v16, v32 = f"vector<{PANEL}xi8>", f"vector<{2 * PANEL}xi8>"
    t.emit(f"{s01} = vector.shuffle {r[0]}, {r[1]} [{', '.join(map(str, _PAIRS))}] : {v16}, {v16}")
    t.emit(f"{s23} = vector.shuffle {r[2]}, {r[3]} [{', '.join(map(str, _PAIRS))}] : {v16}, {v16}")
    t.emit(f"{tv} = vector.shuffle {s01}, {s23} [{', '.join(map(str, _QUADS))}] : {v32}, {v32}")
    t.emit(f"{u} = arith.xori {tv}, %flip : vector<{PANEL * GROUP}xi8>")
    return u


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
