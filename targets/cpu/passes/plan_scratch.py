"""etc-cpu-plan-scratch: every intermediate buffer becomes an entry argument inside one scratch buffer.

The object never calls malloc (the runtime owns all memory): each static `memref.alloc`
left after bufferization becomes a new trailing argument of the entry function, labelled
`etc.cpu.arg = "scratch:<byte offset>"`; the entry wrapper passes `scratch + offset` for
it, and the blob asks the runtime for one scratch buffer of `etc.cpu.scratch_bytes` (an
attribute on the function). One argument per buffer, rather than views of one scratch
argument, keeps every buffer a distinct `noalias` pointer for LLVM: with views of a shared
base it could not prove that a store into one buffer leaves another unchanged, and kept
per-row statistics (layer norm's mean and rstd) inside the innermost loop, scalar.

Buffers whose lifetimes do not overlap share bytes. A lifetime is the span of the entry's
top-level ops that use the buffer or a view of it (the allocs themselves were hoisted to the
top by bufferization), and offsets are placed largest buffer first at the lowest offset free for
that span (the memory planner's greedy rule). Two buffers sharing bytes are then never used by
one top-level op, so never by one dispatch region either (etc-cpu-outline-regions outlines one
per top-level nest): each region's `noalias` arguments still never overlap, and
etc-cpu-entry-abi leaves `noalias` off the entry's arguments that share bytes (the nests left
in the entry see both). Without it, every intermediate of a model had its own bytes: a
keyword-spotting DS-CNN's int8 scratch was 540 KB, more than a Cortex-M33 has. A buffer with dynamic dims
is planned at its upper bound (`index_range` of its sizes, from the bounded run-time dims) and
viewed at its run-time sizes. An alloc inside a loop the threads share (`THREAD_SPLIT`: a GEMM
kernel's column panels, each with its im2col panel buffer) becomes a stack allocation of each
thread instead (`_per_thread`), a dynamic one (a partial panel's tile in a shorter last row
block) at its upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import memref

from etc.ir.ops import as_operation
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs, entry_function, set_arg_attrs, update_function_type
from etc.targets.cpu.ir_query import top_level, walk
from etc.targets.cpu.parallel import THREAD_SPLIT
from etc.targets.cpu.size_ranges import index_range

SCRATCH_ATTR = "etc.cpu.scratch_bytes"


@register_pass
class PlanScratch(Pass):
    """Static allocations -> scratch arguments at aligned offsets (see the module docstring)."""

    name = "etc-cpu-plan-scratch"
    summary = "Static memref.allocs -> entry arguments at offsets inside one runtime-owned scratch buffer"

    @dataclass
    class Options:
        alignment: int = option(64, help="byte alignment of each buffer")

    def run(self, module_op) -> None:
        align = self.options.alignment
        fn = entry_function(module_op)
        if align < 1 or align & (align - 1):
            raise self.error(f"{self.name}: alignment must be a power of two, got {align}", at=fn)
        allocs = walk(fn, ("memref.alloc",))
        total = 0
        with fn.context, ir.Location.unknown():
            allocs = [op for op in allocs if not self._per_thread(op)]
            attrs = arg_attrs(fn)
            block = fn.regions[0].blocks[0]
            sizes = {}
            for op in allocs:
                t = ir.MemRefType(op.result.type)
                if isinstance(t.layout, ir.AffineMapAttr) and t.layout.value != ir.AffineMap.get_identity(t.rank):
                    raise self.error(f"intermediate buffer with layout {t.layout}", at=op)
                sizes[op] = int(np.prod(self._upper_shape(op, t), dtype=np.int64)) * element_bytes(t.element_type)
            offsets = place(sizes, lifetimes({op: op.result for op in allocs}, block), align)
            for op in allocs:
                t = ir.MemRefType(op.result.type)
                upper = self._upper_shape(op, t)
                nbytes, offset = sizes[op], offsets[op]
                attrs.append({ARG_ATTR: ir.StringAttr.get(f"scratch:{offset}")})
                if t.has_static_shape:
                    arg = block.add_argument(op.result.type, ir.Location.unknown())
                    op.result.replace_all_uses_with(arg)
                else:  # planned at its upper bound, viewed at its run-time sizes
                    arg = block.add_argument(ir.MemRefType.get([int(np.prod(upper, dtype=np.int64))], t.element_type),
                                             ir.Location.unknown())
                    _view_in_place_of(op, arg, t)
                op.erase()
                total = max(total, offset + max(nbytes, 1))
            for op in walk(fn, ("memref.dealloc",)):
                op.erase()
            total = (total + align - 1) // align * align
            update_function_type(fn)
            set_arg_attrs(fn, attrs)
            fn.attributes[SCRATCH_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), total)
        self.count("scratch buffers", len(allocs))

    def _per_thread(self, op) -> bool:
        """An alloc inside a loop whose iterations the threads share (`THREAD_SPLIT`: a GEMM
        kernel's column panels, each gathering its im2col into a panel buffer): a scratch buffer
        would be one for all threads. It becomes a `memref.alloca` in front of the loop nest, which
        every thread runs (parallel.py: each its own buffer, on its own stack) and which moves
        into the nest's function when etc-cpu-outline-regions outlines it (released on return;
        an alloca left in a loop would grow the stack every iteration: scf.for lowers with no
        stack save and restore). True when rewritten."""
        if not any(a.name == "scf.for" and THREAD_SPLIT in a.attributes for a in _ancestors(op)):
            return False
        t = ir.MemRefType(op.result.type)
        top = top_level(op)
        if t.has_static_shape:
            with ir.InsertionPoint(top):
                alloca = memref.AllocaOp(t, [], [], alignment=64)
            op.result.replace_all_uses_with(alloca.result)
        else:  # sized by the loop (a row block's last, shorter block): its upper bound, viewed where it was
            upper = int(np.prod(self._upper_shape(op, t), dtype=np.int64))
            with ir.InsertionPoint(top):
                alloca = memref.AllocaOp(ir.MemRefType.get([upper], t.element_type), [], [], alignment=64)
            _view_in_place_of(op, alloca.result, t)
        op.erase()
        self.count("per-thread buffers", 1)
        return True


    def _upper_shape(self, op, t) -> list[int]:
        """The alloc's dims, each dynamic one at its upper bound (index_range of its size)."""
        operands = iter(op.operands)
        upper = []
        for d in range(t.rank):
            if not t.is_dynamic_dim(d):
                upper.append(t.shape[d])
                continue
            bound = index_range(next(operands))
            if bound is None:
                raise self.error(f"no upper bound for dim {d} of an intermediate buffer {t} (its size is not "
                                 "computed from the inputs' bounded sizes)", at=op)
            upper.append(max(bound[1], 0))
        return upper


def lifetimes(buffers: dict, block) -> dict:
    """{key: `lifetime` of buffer} for `buffers` = {key: buffer value} in `block`: the block's op
    positions are computed once (per buffer they were most of a ResNet's compile time in this pass)."""
    operations = [o.operation for o in block.operations]
    position = {o: i for i, o in enumerate(operations)}
    return {key: lifetime(buffer, operations, position) for key, buffer in buffers.items()}


def lifetime(buffer, operations: list, position: dict) -> tuple | None:
    """(first, last) position in `operations` (a block's top-level ops; `position`: their indices)
    of the ops that use `buffer` or a value derived from it (a view, a region's argument it was
    passed as, an op result of memref type, the result of the op whose region yields it), or None
    when nothing uses it. A dealloc is no use.

    A last use outside any nest (a scalar `memref.load` at the top level: an index read back to
    slice another buffer) lasts up to the next nest. etc-cpu-split-threads runs such an op on every
    thread after the barrier that ends the nest before it, with no barrier until the next nest ends:
    a buffer sharing these bytes and written by that nest could be overwritten by one thread while
    another still reads (an index_put's normalized index read as garbage, a slice of the output
    written out of bounds)."""
    seen, todo, span = set(), [buffer], []
    while todo:
        value = todo.pop()
        for use in value.uses:
            user = use.owner
            user = as_operation(user)
            if user.name == "memref.dealloc":
                continue
            span.append(position[top_level(user)])
            if user in seen:
                continue
            seen.add(user)
            todo += [r for r in user.results if isinstance(r.type, ir.MemRefType)]
            # A region's terminator (scf.yield, scf.condition) passes the buffer out as its op's
            # result: a torch.cond branch's result lives on after the scf.if.
            parent = user.parent
            if parent is not None and parent.name != "func.func" and _is_terminator(user):
                todo += [r for r in parent.results if isinstance(r.type, ir.MemRefType)]
            for region in user.regions:  # a loop's iteration arguments, a branch's values
                for inner in region.blocks:
                    todo += [a for a in inner.arguments if isinstance(a.type, ir.MemRefType)]
    if not span:
        return None
    last = max(span)
    while last + 1 < len(operations) and not _is_nest(operations[last]):
        last += 1
    return min(span), last


def _is_nest(op) -> bool:
    """A top-level op that becomes a loop nest (etc-cpu-split-threads shares it or runs it on one
    thread, a barrier after it): an op with regions, or a memref.copy (a linalg.copy by then)."""
    return len(op.regions) > 0 or op.name == "memref.copy"


def _is_terminator(op) -> bool:
    block = op.block
    operations = block.operations
    return operations[len(operations) - 1].operation == op


def place(sizes: dict, lifetimes: dict, align: int) -> dict:
    """Byte offsets (multiples of `align`), largest first, each at the lowest offset where it overlaps
    no placed buffer whose lifetime overlaps its own; a buffer nothing uses goes at 0."""
    placed, offsets = [], {}
    for key in sorted(sizes, key=lambda k: -sizes[k]):
        span, nbytes = lifetimes[key], max(sizes[key], 1)
        if span is None:
            offsets[key] = 0
            continue
        busy = sorted((o, o + n) for o, n, s in placed if not (s[1] < span[0] or span[1] < s[0]))
        offset = 0
        for lo, hi in busy:
            if offset + nbytes <= lo:
                break
            offset = max(offset, (hi + align - 1) // align * align)
        offsets[key] = offset
        placed.append((offset, nbytes, span))
    return offsets


def _ancestors(op):
    parent = op.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def element_bytes(element_type) -> int:
    text = str(element_type)
    if text == "i1":
        return 1
    width = element_type.width if isinstance(element_type, ir.IntegerType) else \
        {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[text]
    return max(1, width // 8)


def _view_in_place_of(alloc, flat, t) -> None:
    """Every use of the dynamically shaped `alloc` (type `t`) reads `flat`, a buffer at its upper
    bound, viewed at the alloc's run-time sizes where the alloc was."""
    from etc.targets.cpu.passes.dynamic_shapes import view_flat

    operands = iter(alloc.operands)
    dims = [next(operands) if t.is_dynamic_dim(d) else t.shape[d] for d in range(t.rank)]
    with ir.InsertionPoint(alloc):
        alloc.result.replace_all_uses_with(view_flat(flat, t, dims))
