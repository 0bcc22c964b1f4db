"""The grouped kernel: a grouped convolution as register-blocked vector code along the output row.

A loop nest over (n, channel blocks, output rows, output column blocks). A channel block is
`block` output channels of one group; a register block is a few vectors along the output row
(the row's masked tail vector included) or, where a row is one vector (7x7, 14x14 planes),
the same vector of `rows` output rows, so that block x rows x vectors accumulators stay in
registers (`grouped_match.register_block`). Inside, a loop over the group's input channels: per kernel tap, each column
vector of the input row is loaded once (a column stride s reads s*width contiguous inputs and
keeps every s-th lane with one `vector.shuffle`) and multiplied into every channel's
accumulator by that channel's weight, broadcast (LLVM folds the scalar load into the FMA's
broadcast operand). The bias/fill/outs start the accumulators; the fused consumers (BN's scale
and shift, the activation, a residual) run on them before the one store. The input is read
padded (the op's operand); full column blocks whose reads stay inside the row run in a loop,
the rest as static blocks with masked reads and writes. The channel-block loop carries
`etc.thread_split`.

Against a GEMM per group: a group of width 8 is an 8 x 72 x OH*OW GEMM, fewer rows than one
register tile and an im2col to gather per group; here nothing is gathered and every load
feeds `block` FMAs.
"""

from __future__ import annotations

from etc.targets.cpu.kernel_ir import KernelText, element_of, next_pow2, tensor_type, vector_type
from etc.targets.cpu.kernels.grouped_match import Grouped
from etc.targets.cpu.kernels.window_kernel import apply_consumers, start_and_operand_arguments
from etc.targets.cpu.parallel import THREAD_SPLIT


class GroupedKernel:
    """The text of one grouped kernel as a function, spliced in place of the op by the pass."""

    def __init__(self, gc: Grouped):
        self.gc, self.t = gc, KernelText()
        self.lanes, self.vectors = gc.lanes, gc.vectors
        self.x_t = tensor_type([gc.n, gc.groups, gc.cg, gc.h, gc.wd])
        self.w_t = tensor_type([gc.groups, gc.fg, gc.cg, gc.kh, gc.kw])
        self.out_shape = [gc.n, gc.groups, gc.fg, gc.oh, gc.ow]  # the op's own [N, G, F/G, OH, OW]
        self.out_t = tensor_type(self.out_shape)

    def reads_inside(self, start: int, width: int) -> bool:
        """Do the reads of an output column block [start, start + width) stay inside the input row?"""
        gc = self.gc
        return start * gc.sw + (gc.kw - 1) * gc.dw + gc.sw * width <= gc.wd

    def column_plan(self) -> tuple[int, list]:
        """(end of the looped blocks, [(start, width, read_ok, write_ok)] static single vectors after it)."""
        gc, lanes = self.gc, self.lanes
        step = lanes * self.vectors
        looped = 0
        while looped + step <= gc.ow and self.reads_inside(looped, step):
            looped += step
        rest, start = [], looped
        while start < gc.ow:
            width = lanes if start + lanes <= gc.ow else next_pow2(gc.ow - start)
            rest.append((start, width, self.reads_inside(start, width), start + width <= gc.ow))
            start += width
        return looped, rest

    # -- values
    def channel_scalars(self, group: str, filters: list) -> dict:
        """Per output channel of the block: its bias and per-channel operands ([G, F/G]), as scalars."""
        t, gc = self.t, self.gc
        chan_t = tensor_type([gc.groups, gc.fg])
        vals = {}
        for r, f in enumerate(filters):
            if gc.init.kind == "chan":
                s = t.fresh("bs")
                t.emit(f"{s} = tensor.extract %init[{group}, {f}] : {chan_t}")
                vals[("bias", r)] = s
            for k, operand in enumerate(gc.operands):
                if operand.kind == "chan":
                    s = t.fresh("es")
                    t.emit(f"{s} = tensor.extract %e{k}[{group}, {f}] : {chan_t}")
                    vals[("e", k, r)] = s
        return vals

    def global_scalars(self) -> dict:
        t, gc = self.t, self.gc
        vals = {}
        for k, operand in enumerate(gc.operands):
            if operand.kind == "rank0":
                s = t.fresh("es")
                t.emit(f"{s} = tensor.extract %e{k}[] : tensor<f32>")
                vals[("e", k)] = s
            elif operand.kind == "scalar":
                vals[("e", k)] = f"%e{k}"
        return vals

    # -- one register block: `vectors` [(row offset from oh, column offset from ow, width, read_ok, write_ok)]
    def block(self, out: str, ow: str, vectors: list, group: str, filters: list, chan: dict, glob: dict) -> str:
        t, gc = self.t, self.gc
        cols = [t.add(ow, off) for _, off, _, _, _ in vectors]
        out_rows = [t.add("%oh", dr) for dr, _, _, _, _ in vectors]
        starts = []
        for r, f in enumerate(filters):
            for v, (_, _, width, _, write_ok) in enumerate(vectors):
                if gc.init.kind == "chan":
                    starts.append(t.broadcast(chan[("bias", r)], width))
                elif gc.init.kind == "scalar":
                    starts.append(t.broadcast("%init", width))
                elif gc.init.kind == "tensor":
                    starts.append(t.read("%init", f"%nn, {group}, {f}, {out_rows[v]}, {cols[v]}", "%zero",
                                         self.out_t, vector_type(width), write_ok, "a"))
                else:
                    starts.append(t.broadcast("%zero", width))
        types = [vector_type(width) for _ in filters for _, _, width, _, _ in vectors]
        loop = t.fresh("cl")
        iters = [t.fresh("acc") for _ in starts]
        t.emit(f"{loop}:{len(starts)} = scf.for %ci = {t.index(0)} to {t.index(gc.cg)} step {t.index(1)} "
               f"iter_args({', '.join(f'{a} = {s}' for a, s in zip(iters, starts))}) -> ({', '.join(types)}) {{")
        with t.nested():
            accs = list(iters)
            in_cols = [t.mul(c, gc.sw) if gc.sw > 1 else c for c in cols]
            for i in range(gc.kh):
                in_rows = {dr: t.add("%ih0", dr * gc.sh + i * gc.dh) for dr in sorted({v[0] for v in vectors})}
                for j in range(gc.kw):
                    xs = []
                    for v, (dr, _, width, read_ok, _) in enumerate(vectors):
                        row = in_rows[dr]
                        col = t.add(in_cols[v], j * gc.dw)
                        span = width * gc.sw
                        x = t.read("%x", f"%nn, {group}, %ci, {row}, {col}", "%zero", self.x_t, vector_type(span),
                                   read_ok, "x")
                        if gc.sw > 1:
                            picked = t.fresh("xs")
                            lanes = ", ".join(str(gc.sw * k) for k in range(width))
                            t.emit(f"{picked} = vector.shuffle {x}, {x} [{lanes}] : {vector_type(span)}, "
                                   f"{vector_type(span)}")
                            x = picked
                        xs.append(x)
                    for r, f in enumerate(filters):
                        ws = t.fresh("ws")
                        t.emit(f"{ws} = tensor.extract %w[{group}, {f}, %ci, {t.index(i)}, {t.index(j)}] : {self.w_t}")
                        wide = {}
                        for v, (_, _, width, _, _) in enumerate(vectors):
                            if width not in wide:
                                wide[width] = t.broadcast(ws, width)
                            k = r * len(vectors) + v
                            acc = t.fresh("f")
                            t.emit(f"{acc} = math.fma {xs[v]}, {wide[width]}, {accs[k]} : {vector_type(width)}")
                            accs[k] = acc
            t.emit(f"scf.yield {', '.join(accs)} : {', '.join(types)}")
        t.emit("}")
        for r, f in enumerate(filters):
            for v, (_, _, width, _, write_ok) in enumerate(vectors):
                at = f"%nn, {group}, {f}, {out_rows[v]}, {cols[v]}"
                acc = self.epilogue(f"{loop}#{r * len(vectors) + v}", width, at, write_ok, r, chan, glob)
                out = t.write(acc, out, at, vector_type(width), self.out_t, write_ok)
        return out

    def epilogue(self, acc: str, width: int, at: str, write_ok: bool, r: int, chan: dict, glob: dict) -> str:
        """The fused consumers on the accumulator of the block's `r`-th channel, stored at `at`."""
        t = self.t

        def operand_vector(k) -> str:
            if k.kind == "full":
                return t.read(f"%e{k.index}", at, "%zero", self.out_t, vector_type(width), write_ok, "fl")
            if k.kind == "chan":
                return t.broadcast(chan[("e", k.index, r)], width)
            return t.broadcast(glob[("e", k.index)], width, element_of(k.value.type))

        return apply_consumers(t, self.gc.chain, acc, width, operand_vector)

    # -- the whole function
    def function(self, name: str) -> str:
        t, gc, out_t = self.t, self.gc, self.out_t
        args = [f"%x: {self.x_t}", f"%w: {self.w_t}",
                *start_and_operand_arguments(gc, tensor_type([gc.groups, gc.fg]), out_t)]
        t.emit("%zero = arith.constant 0.0 : f32")
        t.emit(f"%empty = tensor.empty() : {out_t}")
        glob = self.global_scalars()
        per_group = gc.fg // gc.block
        looped, rest = self.column_plan()
        # Channel blocks are independent: threads take chunks of them.
        with t.loop("%nn", 0, gc.n, 1, "%o0", "%empty", out_t, "res") as batch, \
                t.loop("%blk", 0, gc.groups * per_group, 1, "%o1", "%o0", out_t, "rc", THREAD_SPLIT) as blocks:
            group, first = t.fresh("g"), t.fresh("f")
            t.emit(f"{group} = arith.divui %blk, {t.index(per_group)} : index")
            within = t.fresh("fb")
            t.emit(f"{within} = arith.remui %blk, {t.index(per_group)} : index")
            t.emit(f"{first} = arith.muli {within}, {t.index(gc.block)} : index")
            filters = [t.add(first, r) for r in range(gc.block)]
            chan = self.channel_scalars(group, filters)
            # Output rows in steps of `rows` (a short row is one vector: several rows share each weight),
            # the last oh % rows one at a time.
            blocked = gc.oh - gc.oh % gc.rows
            spans = [(0, blocked, gc.rows), (blocked, gc.oh, 1)] if gc.rows > 1 else [(0, gc.oh, 1)]
            out_rows = "%o1"
            for lo, hi, rows in spans:
                if hi > lo:
                    with t.loop("%oh", lo, hi, rows, "%o2", out_rows, out_t, "rows") as row_loop:
                        t.emit(f"%ih0 = arith.muli %oh, {t.index(gc.sh)} : index")
                        row_loop.yields(self.row(looped, rest, rows, group, filters, chan, glob))
                    out_rows = row_loop.result
            blocks.yields(out_rows)
            batch.yields(blocks.result)
        return t.function(name, args, [out_t], [batch.result])

    def row(self, looped: int, rest: list, rows: int, group: str, filters: list, chan: dict, glob: dict) -> str:
        """`rows` output rows from %oh: the looped column blocks, then the tail's vectors (partial
        ones masked) in blocks of `vectors`, as the looped part."""
        t, out = self.t, "%o2"
        if looped:
            iv, acc = t.fresh("ow"), t.fresh("oc")
            with t.loop(iv, 0, looped, self.lanes * self.vectors, acc, out, self.out_t, "cw") as columns:
                vectors = [(dr, v * self.lanes, self.lanes, True, True)
                           for dr in range(rows) for v in range(self.vectors)]
                columns.yields(self.block(acc, iv, vectors, group, filters, chan, glob))
            out = columns.result
        for k in range(0, len(rest), self.vectors):
            chunk = rest[k:k + self.vectors]
            first_col = chunk[0][0]
            vectors = [(dr, start - first_col, width, read_ok, write_ok)
                       for dr in range(rows) for start, width, read_ok, write_ok in chunk]
            out = self.block(out, t.index(first_col), vectors, group, filters, chan, glob)
        return out
