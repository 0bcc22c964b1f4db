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

from torch_mlir import ir

from etc.targets.cpu.kernel_ir import KernelText, tensor_type, vector_type
from etc.targets.cpu.kernels.grouped_match import Grouped
from etc.targets.cpu.parallel import THREAD_SPLIT


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _scalar_elem(type_) -> str:
    if isinstance(type_, ir.ShapedType):
        return str(ir.ShapedType(type_).element_type)
    return str(type_)


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
            width = lanes if start + lanes <= gc.ow else _next_pow2(gc.ow - start)
            rest.append((start, width, self.reads_inside(start, width), start + width <= gc.ow))
            start += width
        return looped, rest

    # -- values
    def broadcast(self, scalar: str, width: int, elem: str = "f32") -> str:
        v = self.t.fresh("b")
        self.t.emit(f"{v} = vector.broadcast {scalar} : {elem} to {vector_type(width, elem)}")
        return v

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
                    starts.append(self.broadcast(chan[("bias", r)], width))
                elif gc.init.kind == "scalar":
                    starts.append(self.broadcast("%init", width))
                elif gc.init.kind == "tensor":
                    a = t.fresh("a")
                    t.emit(f"{a} = vector.transfer_read %init[%nn, {group}, {f}, {out_rows[v]}, {cols[v]}], %zero "
                           f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {self.out_t}, {vector_type(width)}")
                    starts.append(a)
                else:
                    starts.append(self.broadcast("%zero", width))
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
                        x = t.fresh("x")
                        t.emit(f"{x} = vector.transfer_read %x[%nn, {group}, %ci, {row}, {col}], %zero "
                               f"{{in_bounds = [{'true' if read_ok else 'false'}]}} : {self.x_t}, {vector_type(span)}")
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
                                wide[width] = self.broadcast(ws, width)
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
                done = t.fresh("o")
                t.emit(f"{done} = vector.transfer_write {acc}, {out}[{at}] "
                       f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {vector_type(width)}, {self.out_t}")
                out = done
        return out

    def epilogue(self, acc: str, width: int, at: str, write_ok: bool, r: int, chan: dict, glob: dict) -> str:
        """The fused consumers on one accumulator (as `window_kernel.WindowKernel.epilogue`)."""
        t, gc = self.t, self.gc
        for user, number, extras in gc.chain:
            block = user.regions[0].blocks[0]
            names = {}
            for i in range(len(user.operands) - 1):
                arg = block.arguments[i]
                if i == number:
                    names[arg] = acc
                    continue
                k = extras[i]
                if k.kind == "full":
                    v = t.fresh("fl")
                    t.emit(f"{v} = vector.transfer_read %e{k.index}[{at}], %zero "
                           f"{{in_bounds = [{'true' if write_ok else 'false'}]}} : {self.out_t}, {vector_type(width)}")
                    names[arg] = v
                elif k.kind == "chan":
                    names[arg] = self.broadcast(chan[("e", k.index, r)], width)
                else:
                    elem = _scalar_elem(k.value.type)
                    names[arg] = self.broadcast(glob[("e", k.index)], width, elem)
            for key, k in extras.items():
                if isinstance(key, tuple):
                    names[k.value] = self.broadcast(glob[("e", k.index)], width, _scalar_elem(k.value.type))
            acc = t.vector_body(block, names, width)
        return acc

    # -- the whole function
    def function(self, name: str) -> str:
        t, gc = self.t, self.gc
        args = [f"%x: {self.x_t}", f"%w: {self.w_t}"]
        if gc.init.kind == "chan":
            args.append(f"%init: {tensor_type([gc.groups, gc.fg])}")
        elif gc.init.kind == "scalar":
            args.append("%init: f32")
        elif gc.init.kind == "tensor":
            args.append(f"%init: {gc.init.value.type}")
        for k, operand in enumerate(gc.operands):
            args.append(f"%e{k}: {operand.value.type}")
        body_start = len(t.lines)
        t.emit("%zero = arith.constant 0.0 : f32")
        t.emit(f"%empty = tensor.empty() : {self.out_t}")
        glob = self.global_scalars()
        per_group = gc.fg // gc.block
        looped, rest = self.column_plan()
        step = self.lanes * self.vectors
        res = t.fresh("res")
        t.emit(f"{res} = scf.for %nn = {t.index(0)} to {t.index(gc.n)} step {t.index(1)} "
               f"iter_args(%o0 = %empty) -> ({self.out_t}) {{")
        t.indent += 2
        rc = t.fresh("rc")
        t.emit(f"{rc} = scf.for %blk = {t.index(0)} to {t.index(gc.groups * per_group)} step {t.index(1)} "
               f"iter_args(%o1 = %o0) -> ({self.out_t}) {{")
        t.indent += 2
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
            if hi <= lo:
                continue
            done_rows = t.fresh("rows")
            t.emit(f"{done_rows} = scf.for %oh = {t.index(lo)} to {t.index(hi)} step {t.index(rows)} "
                   f"iter_args(%o2 = {out_rows}) -> ({self.out_t}) {{")
            with t.nested():
                t.emit(f"%ih0 = arith.muli %oh, {t.index(gc.sh)} : index")
                out = "%o2"
                if looped:
                    loop, iv, acc = t.fresh("cw"), t.fresh("ow"), t.fresh("oc")
                    t.emit(f"{loop} = scf.for {iv} = {t.index(0)} to {t.index(looped)} step {t.index(step)} "
                           f"iter_args({acc} = {out}) -> ({self.out_t}) {{")
                    with t.nested():
                        vectors = [(dr, v * self.lanes, self.lanes, True, True)
                                   for dr in range(rows) for v in range(self.vectors)]
                        done = self.block(acc, iv, vectors, group, filters, chan, glob)
                        t.emit(f"scf.yield {done} : {self.out_t}")
                    t.emit("}")
                    out = loop
                # The tail's vectors (partial ones masked) in blocks of `vectors`, as the looped part.
                for k in range(0, len(rest), self.vectors):
                    chunk = rest[k:k + self.vectors]
                    first_col = chunk[0][0]
                    vectors = [(dr, start - first_col, width, read_ok, write_ok)
                               for dr in range(rows) for start, width, read_ok, write_ok in chunk]
                    out = self.block(out, t.index(first_col), vectors, group, filters, chan, glob)
                t.emit(f"scf.yield {out} : {self.out_t}")
            t.emit("}")
            out_rows = done_rows
        t.emit(f"scf.yield {out_rows} : {self.out_t}")
        t.indent -= 2
        t.emit(f"}} {{{THREAD_SPLIT}}}")  # channel blocks are independent: threads take chunks of them
        t.emit(f"scf.yield {rc} : {self.out_t}")
        t.indent -= 2
        t.emit("}")
        t.emit(f"return {res} : {self.out_t}")
        consts = t.declarations()
        body = t.lines[body_start:]
        return "\n".join([f"func.func private @{name}({', '.join(args)}) -> {self.out_t} {{", *consts, *body,
                          "}"]) + "\n"
