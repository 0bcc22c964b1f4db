"""The window kernel: a depthwise convolution or pooling as register-blocked vector code along the output row.

A loop nest over (n, channels, output rows, output column blocks) whose body is straight-line
vector code: vectors along the output row (a last partial block uses the next power of two, its
store masked), a column stride s read as s*lanes contiguous inputs deinterleaved by one
`vector.shuffle`, the KH*KW taps unrolled and `rows` output rows per step (or, past `unroll_taps`,
a loop over the kernel rows), the folded padding's taps skipped or masked, the accumulator
started from the bias/fill/outs, the fused consumers applied before the one store. The channel
loop carries `etc.thread_split`. `global_pool_text` is the whole-plane pooling as a row reduction.
"""

from __future__ import annotations

from functools import partial

from torch_mlir import ir

from etc.ir.ops import nested_ops

from etc.targets.cpu.kernel_ir import KernelText, element_of, f32_literal, next_pow2, tensor_type, vector_type
from etc.targets.cpu.kernels.window_match import (SlidingWindow, Window, global_pool_source, identity, pair_attribute,
                                                  static_f32_shape)
from etc.targets.cpu.parallel import THREAD_SPLIT


def _tap_offsets(win: Window) -> list:
    """(kw, base, phase) per column tap: the tap reads source columns ow*sw + base + phase + sw*i,
    from a load of sw*width inputs starting at ow*sw + base (taps with the same base share it)."""
    out = []
    for j in range(win.kw):
        o = j * win.dw - win.pw
        phase = o % win.sw
        out.append((j, o - phase, phase))
    return out


def _column_blocks(win: Window, lanes: int) -> tuple[int, int, list]:
    """Output column blocks: (first, last) block index of the loop over full blocks whose loads
    all start at or after column 0 and end inside the source row, and the static blocks
    [(start, width, write_in_bounds)] that come before and after it."""
    bases = [base for _, base, _ in _tap_offsets(win)]

    def loopable(start, width):
        return (width == lanes and start * win.sw + min(bases) >= 0
                and start * win.sw + max(bases) + width * win.sw <= win.wd)

    blocks = [(b * lanes, lanes, True) for b in range(win.ow // lanes)]
    rest = win.ow % lanes
    if rest:
        width = next_pow2(rest)
        blocks.append((win.ow - rest, width, width == rest))
    good = [i for i, (start, width, _) in enumerate(blocks) if loopable(start, width)]
    if len(good) < 2:
        return 0, 0, blocks
    first, last = good[0], good[-1] + 1
    return first, last, blocks[:first] + blocks[last:]


def _interior_rows(win: Window) -> tuple[int, int]:
    """[lo, hi): the output rows whose every tap row lies inside the source (no padding rows)."""
    lo = -(-win.ph // win.sh)
    hi = (win.h - 1 + win.ph - (win.kh - 1) * win.dh) // win.sh + 1
    lo, hi = max(0, min(lo, win.oh)), max(0, min(hi, win.oh))
    return (lo, hi) if hi > lo else (0, 0)


# Ops of a fused consumer that make a long dependency chain after each output row's taps: an
# exp (its polynomial, then a sigmoid's division) and a division (hardswish's / 6).
_LONG_LATENCY = ("math.exp", "arith.divf")
# Ops whose expansion holds many constants in registers besides the accumulators: GELU's erf.
_MANY_CONSTANTS = ("math.erf",)
# Transcendental ops: expanded (etc-cpu-expand-math) into ~20 operations and a dozen constants each.
_TRANSCENDENTAL = ("math.exp", "math.erf", "math.tanh")


def _chain_holds(chain: list, names: tuple) -> bool:
    """Does any fused consumer of `chain` (`Window.chain`) hold an op named in `names`?"""
    return any(inner.name in names for user, _, _ in chain for inner in nested_ops(user))


def long_epilogue(chain: list) -> bool:
    """Are the fused consumers (`Window.chain`) a long dependency chain per output vector?

    A sigmoid (SiLU: EfficientNet's activation after every depthwise convolution) is ~25
    dependent operations after the taps. With two output rows per step their chains are all
    the work in flight: measured on this machine, a 3x3 480@14 + BN + SiLU took 0.13 ms with 2
    rows per step, 0.08 with 4 (1152@7: 0.093 -> 0.053; 144@56: 0.22 -> 0.16); a 5x5 240@14 +
    hardswish 0.052 -> 0.035; an average pool's division the same either way. (A short epilogue
    on a row of one vector wants even more rows: `rows_per_step`.)"""
    return _chain_holds(chain, _LONG_LATENCY)


def plane_epilogue_pays(chain: list) -> bool:
    """Is the fused epilogue (`Window.chain`) applied to each channel's finished plane, where the
    ISA asks for it (`Isa.window_plane_epilogue`), rather than to each register block?

    A transcendental (SiLU's exp, GELU's erf) expands into ~20 operations with a dozen constants.
    In the block, after the taps, those constants compete with the accumulators and the KH*KW
    weights kept for the whole channel: on AVX2's 16 registers LLVM reloads or spills them for
    every vector (a dw 5x5 240@28's SiLU cost 1.3 ns per element, twice a separate SiLU loop).
    Applied to the channel's plane once its rows are stored (still in L1: 784 bytes at 14x14,
    12.5 KiB at 56x56), the loop holds only the epilogue's values. Measured on a Zen 3, same
    process, in turn, + BN + SiLU: dw 3x3 144@56 0.67x the time, 32@112 0.68x, stride 2 96@112
    0.79x, dw 5x5 240@28 0.76x, stride 2 144@56 0.78x, 672@14 0.89x; 480@14 and 1152@7 1.01-1.03x
    (a plane of one or two vectors a row); GELU 480@14 0.88x; a hardswish (a division, no
    transcendental) 1.02-1.23x: it stays in the block."""
    return _chain_holds(chain, _TRANSCENDENTAL)


def rows_per_step(win: Window, lanes: int) -> int:
    """How many output rows one step of the kernel computes (each column block's accumulators).

    A row's taps are one dependent chain of KH*KW FMAs per vector (3x3: 36 cycles of FMA
    latency), so the rows of a step are the independent work in flight. Measured on this
    machine (AVX-512, Zen 5), one thread, every row count compiled in one process: an output
    row of one vector wants 8 rows (KWS's 64@25x5 0.75x the time of 2 rows, 384@14 0.83x,
    960@7 0.81x, 5x5 672@14 0.53x; stride 2 into 7 or 14 columns 0.77-0.94x); a stride-1 row
    of two vectors 8 too (192@28 0.94x), of up to four 4 (144@56 0.90x; 8 rows as fast); wider
    rows and stride-2 rows of more than one vector keep 2 (144@56 stride 2: 1.05x with 4, 1.20x
    with 8; 96@112: 2 as fast as 4). A long epilogue (`long_epilogue`) takes at least 4 rows
    (hardswish 5x5 240@14: 0.43x with 8). GELU's erf, a long polynomial with many constants,
    keeps 2 (480@14: 1.07x the time with 4 rows, 1.15x with 8). Counted in vectors per row
    (`lanes`): on the x86-64-v3 preset (AVX2, 16 registers, run on this host) the rule against 2
    rows gave KWS fp32 0.95x, the zoo MobileNetV2 0.96x, MobileNetV2 0.99x, EfficientNet-B0 1.00x
    (8 accumulators and 9 weights spill the weights, which FMAs then read from L1); NEON unmeasured."""
    if _chain_holds(win.chain, _MANY_CONSTANTS):
        return 2
    vectors = -(-win.ow // lanes)
    if vectors * win.sw <= 2:
        rows = 8
    elif win.sw == 1 and vectors <= 4:
        rows = 4
    else:
        rows = 2
    return max(rows, 4) if long_epilogue(win.chain) else rows


def apply_consumers(t: KernelText, chain: list, acc: str, width: int, operand_vector,
                    latency_bound: bool = False) -> str:
    """The fused elementwise consumers (`window_match.fuse_consumers`' chain) applied to one
    accumulator vector of `width` lanes, in order, each body inlined on vectors. A consumer's
    other operands, and the scalars its body captures, come from `operand_vector(Operand)`: the
    kernel knows where a `full` operand is read and how a per-channel or global value is held.
    The window and grouped kernels both end a register block with this; `latency_bound` marks
    its divisions (`KernelText.vector_body`)."""
    for user, number, extras in chain:
        block = user.regions[0].blocks[0]
        names = {}
        for i in range(len(user.operands) - 1):
            names[block.arguments[i]] = acc if i == number else operand_vector(extras[i])
        for key, k in extras.items():
            if isinstance(key, tuple):  # a scalar captured from above the body
                names[k.value] = operand_vector(k)
        acc = t.vector_body(block, names, width, latency_bound)
    return acc


def start_and_operand_arguments(kernel: SlidingWindow, channel_type: str, out_type: str) -> list[str]:
    """The kernel function's arguments after the input and the filter: where the accumulator
    starts (none for the reduction's identity; a per-channel `channel_type` bias, an f32 fill, or
    the outs tensor) and each fused consumer's extra operand, in `kernel.operands` order."""
    start = {"chan": [f"%init: {channel_type}"], "scalar": ["%init: f32"], "tensor": [f"%init: {out_type}"]}
    return start.get(kernel.init.kind, []) + [f"%e{k}: {o.value.type}" for k, o in enumerate(kernel.operands)]


class WindowKernel:
    """The text of one window kernel as a function, spliced in place of the op by the pass."""

    def __init__(self, win: Window, lanes: int, rows: int, unroll_taps: int = 1 << 30, plane_epilogue: bool = False):
        self.win, self.lanes, self.rows = win, lanes, max(1, rows)
        self.plane_epilogue = plane_epilogue and plane_epilogue_pays(win.chain)
        self.unroll_taps = unroll_taps
        self.row_base = None  # inside a kernel-row loop: the first input row of this kernel row
        self.t = KernelText()
        self.elem = win.element
        self.out_t = tensor_type([win.n, win.c, win.oh, win.ow], self.elem)
        self.x_t = tensor_type([win.n, win.c, win.h, win.wd], self.elem)
        self.max_op = "arith.maximumf" if self.elem == "f32" else "arith.maxsi"

    def vector(self, width: int) -> str:
        return vector_type(width, self.elem)

    # -- per-channel values, for one vector width
    def channel_values(self, widths: set) -> dict:
        t, win = self.t, self.win
        vals = {}
        for width in sorted(widths):
            if win.kind == "dw":
                for i in range(win.kh):
                    for j in range(win.kw):
                        key = ("w", i, j)
                        if key not in vals:
                            s = t.fresh("ws")
                            t.emit(f"{s} = tensor.extract %w[%ch, {t.index(i)}, {t.index(j)}] : {tensor_type([win.c, win.kh, win.kw])}")
                            vals[key] = s
                        vals[("w", i, j, width)] = t.broadcast(vals[key], width)
            if win.init.kind == "chan":
                if "bias" not in vals:
                    s = t.fresh("bs")
                    t.emit(f"{s} = tensor.extract %init[%ch] : {tensor_type([win.c])}")
                    vals["bias"] = s
                vals[("bias", width)] = t.broadcast(vals["bias"], width)
            for k, operand in enumerate(win.operands):
                if operand.kind == "chan":
                    if ("e", k) not in vals:
                        s = t.fresh("es")
                        t.emit(f"{s} = tensor.extract %e{k}[%ch] : {tensor_type([win.c])}")
                        vals[("e", k)] = s
                    vals[("e", k, width)] = t.broadcast(vals[("e", k)], width)
        return vals

    def global_values(self, widths: set) -> dict:
        t, win = self.t, self.win
        vals = {}
        for width in sorted(widths):
            if win.init.kind == "scalar":
                vals[("init", width)] = t.broadcast("%init", width)
            for k, operand in enumerate(win.operands):
                if operand.kind in ("rank0", "scalar"):
                    if ("e", k) not in vals:
                        if operand.kind == "rank0":
                            s = t.fresh("es")
                            t.emit(f"{s} = tensor.extract %e{k}[] : tensor<f32>")
                        else:
                            s = f"%e{k}"
                        vals[("e", k)] = s
                    elem = element_of(operand.value.type)
                    vals[("e", k, width)] = t.broadcast(vals[("e", k)], width, elem)
        return vals

    # -- one block of `nrows` output rows x `width` columns
    def block(self, out: str, oh: str, oh_value: int | None, ow: str, ow_value: int | None, nrows: int, width: int,
              write_ok: bool, chan: dict, glob: dict) -> str:
        """`oh`/`ow`: SSA index values; `*_value`: their value when static (border blocks, where
        taps on padding rows are skipped and loads crossing the row's ends are masked/shifted)."""
        t, win = self.t, self.win
        s = win.sw
        L = width * s
        ih0 = t.fresh("ih")
        t.emit(f"{ih0} = arith.muli {oh}, {t.index(win.sh)} : index")
        iw0 = t.fresh("iw")
        t.emit(f"{iw0} = arith.muli {ow}, {t.index(s)} : index")
        loads, taps = {}, {}
        offsets = {j: (base, phase) for j, base, phase in _tap_offsets(win)}

        def row_inside(d: int) -> bool:
            if oh_value is None:
                return True
            row = oh_value * win.sh + d - win.ph
            return 0 <= row < win.h

        def tap(d: int, j: int) -> str:
            if (d, j) in taps:
                return taps[(d, j)]
            base, phase = offsets[j]
            start = None if ow_value is None else ow_value * s + base
            if (d, base) not in loads:
                ih = t.fresh("r")
                t.emit(f"{ih} = arith.addi {self.row_base or ih0}, {t.index(d - win.ph)} : index")
                if start is not None and start < 0:
                    iw = t.index(0)
                    in_bounds = L <= win.wd
                else:
                    iw = t.fresh("q")
                    t.emit(f"{iw} = arith.addi {iw0}, {t.index(base)} : index")
                    in_bounds = start is None or start + L <= win.wd
                loads[(d, base)] = t.read("%x", f"%nn, %ch, {ih}, {iw}", "%pad", self.x_t, self.vector(L), in_bounds)
            v = loads[(d, base)]
            if start is not None and start < 0:  # the load starts at column 0: shift, padding in front
                lanes = [start + phase + s * i for i in range(width)]
                lanes = ", ".join(str(q) if q >= 0 else str(L) for q in lanes)
                sv = t.fresh("tp")
                t.emit(f"{sv} = vector.shuffle {v}, {glob[('padv', L)]} [{lanes}] : {self.vector(L)}, {self.vector(L)}")
                v = sv
            elif s > 1:
                lanes = ", ".join(str(phase + s * i) for i in range(width))
                sv = t.fresh("tp")
                t.emit(f"{sv} = vector.shuffle {v}, {v} [{lanes}] : {self.vector(L)}, {self.vector(L)}")
                v = sv
            taps[(d, j)] = v
            return v

        vt = self.vector(width)
        if oh_value is None and win.kh > 1 and win.kh * win.kw > self.unroll_taps:
            return self.block_kh_loop(out, oh, ow, nrows, width, write_ok, chan, glob, ih0, tap, loads, taps)
        for r in range(nrows):
            acc = None
            oh_r = oh
            if r:
                oh_r = t.fresh("o")
                t.emit(f"{oh_r} = arith.addi {oh}, {t.index(r)} : index")
            if win.init.kind == "chan":
                acc = chan[("bias", width)]
            elif win.init.kind == "scalar":
                acc = glob[("init", width)]
            elif win.init.kind == "tensor":
                acc = t.read("%init", f"%nn, %ch, {oh_r}, {ow}", "%pad", self.out_t, vt, write_ok, "a")
            for i in range(win.kh):
                d = r * win.sh + i * win.dh
                if not row_inside(d):
                    continue  # a padding row: the pad value is the reduction's identity
                for j in range(win.kw):
                    v = tap(d, j)
                    nxt = t.fresh("a")
                    if win.kind == "dw":
                        wv = chan[("w", i, j, width)]
                        if acc is None:
                            t.emit(f"{nxt} = arith.mulf {v}, {wv} : {vt}")
                        else:
                            t.emit(f"{nxt} = math.fma {v}, {wv}, {acc} : {vt}")
                    elif acc is None:
                        nxt = v
                    elif win.kind == "max":
                        t.emit(f"{nxt} = {self.max_op} {acc}, {v} : {vt}")
                    else:
                        t.emit(f"{nxt} = arith.addf {acc}, {v} : {vt}")
                    acc = nxt
            if acc is None:  # every tap row is padding
                acc = glob[("padv", width)]
            if not self.plane_epilogue:
                acc = self.epilogue(acc, width, oh_r, ow, write_ok, chan, glob)
            out = t.write(acc, out, f"%nn, %ch, {oh_r}, {ow}", vt, self.out_t, write_ok, "out")
        return out

    def block_kh_loop(self, out, oh, ow, nrows, width, write_ok, chan, glob, ih0, tap, loads, taps) -> str:
        """Large windows: the kernel rows are a loop (the KW taps of one row unrolled), its
        weights read inside it: hoisted out of every loop, KH*KW weight vectors would not fit in
        the registers (LLVM spills them, and the input rows kept for the next output row)."""
        t, win = self.t, self.win
        vt = self.vector(width)
        inits = []
        oh_rs = []
        for r in range(nrows):
            oh_r = oh
            if r:
                oh_r = t.fresh("o")
                t.emit(f"{oh_r} = arith.addi {oh}, {t.index(r)} : index")
            oh_rs.append(oh_r)
            if win.init.kind == "chan":
                inits.append(chan[("bias", width)])
            elif win.init.kind == "scalar":
                inits.append(glob[("init", width)])
            elif win.init.kind == "tensor":
                inits.append(t.read("%init", f"%nn, %ch, {oh_r}, {ow}", "%pad", self.out_t, vt, write_ok, "a"))
            else:
                inits.append(glob[("padv", width)])
        loop, kh = t.fresh("kl"), t.fresh("kh")
        carried = [t.fresh("acc") for _ in range(nrows)]
        t.emit(f"{loop}:{nrows} = scf.for {kh} = {t.index(0)} to {t.index(win.kh)} step {t.index(1)} iter_args("
               + ", ".join(f"{c} = {i}" for c, i in zip(carried, inits)) + ") -> (" + ", ".join([vt] * nrows) + ") {")
        t.indent += 2
        row0 = t.fresh("kr")
        t.emit(f"{row0} = arith.muli {kh}, {t.index(win.dh)} : index")
        base_row = t.fresh("kb")
        t.emit(f"{base_row} = arith.addi {ih0}, {row0} : index")
        weights = {}
        if win.kind == "dw":
            for j in range(win.kw):
                ws = t.fresh("ws")
                t.emit(f"{ws} = tensor.extract %w[%ch, {kh}, {t.index(j)}] : {tensor_type([win.c, win.kh, win.kw])}")
                weights[j] = t.broadcast(ws, width)
        accs = list(carried)
        saved = (self.row_base, loads.copy(), taps.copy())
        loads.clear()
        taps.clear()
        self.row_base = base_row
        for r in range(nrows):
            for j in range(win.kw):
                v = tap(r * win.sh, j)
                nxt = t.fresh("a")
                if win.kind == "dw":
                    t.emit(f"{nxt} = math.fma {v}, {weights[j]}, {accs[r]} : {vt}")
                elif win.kind == "max":
                    t.emit(f"{nxt} = {self.max_op} {accs[r]}, {v} : {vt}")
                else:
                    t.emit(f"{nxt} = arith.addf {accs[r]}, {v} : {vt}")
                accs[r] = nxt
        self.row_base = saved[0]
        t.emit("scf.yield " + ", ".join(accs) + " : " + ", ".join([vt] * nrows))
        t.indent -= 2
        t.emit("}")
        for r in range(nrows):
            acc = f"{loop}#{r}"
            if not self.plane_epilogue:
                acc = self.epilogue(acc, width, oh_rs[r], ow, write_ok, chan, glob)
            out = t.write(acc, out, f"%nn, %ch, {oh_rs[r]}, {ow}", vt, self.out_t, write_ok, "out")
        return out

    def epilogue(self, acc: str, width: int, oh: str, ow: str, write_ok: bool, chan: dict, glob: dict) -> str:
        t = self.t

        def operand_vector(k) -> str:
            if k.kind == "full":
                return t.read(f"%e{k.index}", f"%nn, %ch, {oh}, {ow}", "%pad", self.out_t, vector_type(width),
                              write_ok, "f")
            return (chan if k.kind == "chan" else glob)[("e", k.index, width)]

        # A long chain after each row's taps (`rows_per_step` gives it at least 4 rows per step): a
        # sigmoid's division stays a division. Over a finished plane it is throughput, not latency.
        return apply_consumers(t, self.win.chain, acc, width, operand_vector,
                               latency_bound=long_epilogue(self.win.chain) and not self.plane_epilogue)

    # -- the whole function
    def function(self, name: str) -> str:
        t, win, out_t = self.t, self.win, self.out_t
        lanes = min(self.lanes, next_pow2(win.ow))
        first, last, static_blocks = _column_blocks(win, lanes)
        widths = {lanes} if last > first else set()
        widths |= {w for _, w, _ in static_blocks}
        args = [f"%x: {self.x_t}"]
        if win.kind == "dw":
            args.append(f"%w: {tensor_type([win.c, win.kh, win.kw])}")
        args += start_and_operand_arguments(win, tensor_type([win.c]), out_t)
        pad = identity(win.kind, self.elem)
        t.emit(f"%pad = arith.constant {f32_literal(pad) if self.elem == 'f32' else pad} : {self.elem}")
        t.emit(f"%empty = tensor.empty() : {out_t}")
        glob = self.global_values(widths)
        for width in sorted(widths | {w * win.sw for w in widths}):
            glob[("padv", width)] = t.broadcast("%pad", width, self.elem)

        def row_step(out: str, oh: str, oh_value: int | None, nrows: int, block=None) -> str:
            block = block or (lambda out, ow, ow_value, width, write_ok: self.block(
                out, oh, oh_value, ow, ow_value, nrows, width, write_ok, chan, glob))
            for start, width, write_ok in static_blocks:
                if start >= first * lanes:
                    break
                out = block(out, t.index(start), start, width, write_ok)
            if last > first:
                iv, acc = t.fresh("ow"), t.fresh("oc")
                with t.loop(iv, first * lanes, last * lanes, lanes, acc, out, out_t, "rw") as columns:
                    columns.yields(block(acc, iv, None, lanes, True))
                out = columns.result
            for start, width, write_ok in static_blocks:
                if start >= first * lanes:
                    out = block(out, t.index(start), start, width, write_ok)
            return out

        def finish(out: str, ow: str, ow_value, width: int, write_ok: bool, oh: str) -> str:
            """The epilogue of one stored vector of the plane (`plane_epilogue`)."""
            index = f"%nn, %ch, {oh}, {ow}"
            acc = t.read(out, index, "%pad", out_t, self.vector(width), write_ok, "raw")
            acc = self.epilogue(acc, width, oh, ow, write_ok, chan, glob)
            return t.write(acc, out, index, self.vector(width), out_t, write_ok, "out")

        lo, hi = _interior_rows(win)
        rows = max(1, min(self.rows, hi - lo))
        main_end = lo + (hi - lo) // rows * rows
        # Channels are independent: threads take chunks of them.
        with t.loop("%nn", 0, win.n, 1, "%o0", "%empty", out_t, "res") as batch, \
                t.loop("%ch", 0, win.c, 1, "%o1", "%o0", out_t, "rc", THREAD_SPLIT) as channels:
            chan = self.channel_values(widths)
            out = "%o1"
            for oh in range(0, lo):  # top rows reading padding
                out = row_step(out, t.index(oh), oh, 1)
            if main_end > lo:
                with t.loop("%oh", lo, main_end, rows, "%o2", out, out_t, "rh") as interior:
                    interior.yields(row_step("%o2", "%oh", None, rows))
                out = interior.result
            if hi > main_end:
                out = row_step(out, t.index(main_end), None, hi - main_end)
            for oh in range(max(hi, lo), win.oh):  # bottom rows reading padding
                out = row_step(out, t.index(oh), oh, 1)
            if self.plane_epilogue:  # the channel's stored plane, in L1: its epilogue one vector at a time
                with t.loop("%eh", 0, win.oh, 1, "%o3", out, out_t, "re") as plane:
                    plane.yields(row_step("%o3", "%eh", None, 1, partial(finish, oh="%eh")))
                out = plane.result
            channels.yields(out)
            batch.yields(channels.result)
        return t.function(name, args, [out_t], [batch.result])


def global_pool_text(op, kind: str) -> str | None:
    """A pooling whose one window covers its whole unpadded input plane (a global pool: KWS's
    average over the feature map, `adaptive_avg_pool2d(x, 1)` lowered as a pool, a window larger
    than the plane with `ceil_mode`) as a function
    reducing each contiguous plane: `tensor<NxCxHxW>` seen as `NxCx(H*W)`, a row reduction
    (a kernel of etc-cpu-row-kernels, which records its decision), expanded back to `NxCx1x1`. None when
    `op` is not such a pool."""
    source = global_pool_source(op, kind)
    xs, ys = static_f32_shape(source), static_f32_shape(op.results[0])
    if xs is None or ys is None or len(xs) not in (3, 4) or len(ys) != 4 or ys[2:] != [1, 1] or kind == "dw":
        return None
    if len(xs) == 3:  # the batch dim dropped by canonicalization (batch 1)
        if ys[0] != 1:
            return None
        xs = [1] + xs
    kh, kw = list(ir.ShapedType(op.operands[1].type).shape)
    if kh < xs[2] or kw < xs[3] or pair_attribute(op, "dilations") != [1, 1]:
        return None
    n, c, h, w = xs
    rank3 = len(static_f32_shape(source)) == 3
    x_t = f"tensor<{c}x{h}x{w}xf32>" if rank3 else f"tensor<{n}x{c}x{h}x{w}xf32>"
    r_t, y_t, p_t = f"tensor<{n}x{c}xf32>", f"tensor<{n}x{c}x1x1xf32>", f"tensor<{n}x{c}x{h * w}xf32>"
    plane = "[[0, 1], [2]]" if rank3 else "[[0], [1], [2, 3]]"
    if rank3:
        x_t2 = f"tensor<{c}x{h * w}xf32>"
    combine = "arith.maximumf %v, %acc" if kind == "max" else "arith.addf %v, %acc"
    return "\n".join([
        f"func.func private @__etc_global_pool(%x: {x_t}, %init: {y_t}) -> {y_t} {{",
        (f"  %flat = tensor.collapse_shape %x [[0], [1, 2]] : {x_t} into {x_t2}\n"
         f"  %plane = tensor.expand_shape %flat [[0, 1], [2]] output_shape [1, {c}, {h * w}] : {x_t2} into {p_t}")
        if rank3 else f"  %plane = tensor.collapse_shape %x {plane} : {x_t} into {p_t}",
        f"  %acc0 = tensor.collapse_shape %init [[0], [1, 2, 3]] : {y_t} into {r_t}",
        "  %r = linalg.generic {indexing_maps = [affine_map<(n, c, p) -> (n, c, p)>, affine_map<(n, c, p) -> (n, c)>],"
        ' iterator_types = ["parallel", "parallel", "reduction"]}',
        f"      ins(%plane : {p_t}) outs(%acc0 : {r_t}) {{",
        "  ^bb0(%v: f32, %acc: f32):",
        f"    %s = {combine} : f32",
        "    linalg.yield %s : f32",
        f"  }} -> {r_t}",
        f"  %y = tensor.expand_shape %r [[0], [1, 2, 3]] output_shape [{n}, {c}, 1, 1] : {r_t} into {y_t}",
        f"  return %y : {y_t}",
        "}"])
