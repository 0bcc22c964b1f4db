"""etc-cpu-gemm-epilogue-rows: a long GEMM tile epilogue applied one tile row at a time, in a loop.

A GEMM register tile (`kernels/gemm_schedule.py`) ends with its epilogue applied to the whole
accumulator, a vector<mr x nr>, then one store. For a few operations per element (bias, BN,
ReLU) that is free: the values are in registers. For a long one it is not: SiLU after
etc-cpu-expand-math is ~25 operations per element with about 12 constants, and on AVX2 the
6 x 16 tile is already 12 of the 16 ymm registers. LLVM schedules the 12 independent chains
together and spills: a 1x1 convolution 16->96 at 112x112 with BN and SiLU (EfficientNet's
expansion layer) took 2.0 ms against 0.84 ms without the SiLU, about 26 cycles per vector for an
epilogue of ~25 operations (a separate SiLU pass over the same tensor, through memory, took 0.63
ns per element).

Here such an epilogue (at least `min-ops` elementwise operations between the k loop and the
tile's store) becomes a loop over the tile's rows: the accumulator is stored to a small stack
buffer (mr x nr, in L1), and each iteration reads one row, applies the epilogue to that
vector<nr> and stores it to C. LLVM does not unroll the loop (codegen turns its unroller off),
so only one row's epilogue is live at a time. Values the epilogue reads besides the accumulator
(a residual tile, a broadcast bias) get a buffer of their own, written once before the loop;
splat constants become row-wide splats.

Measured on that Zen 3 (same process, in turn): the 1x1 16->96 @112 with BN + SiLU 0.80x the time,
24->144 @56 0.93x, 112->672 @14 0.93x, 192->1152 @7 0.95x, a 1x1 with GELU 0.92x; EfficientNet-B0
0.94x, BERT-4L (GELU) 0.99x. `min-ops` = 12 on the AVX2 row (SiLU, GELU, sigmoid and tanh are
longer; BN, ReLU, hardswish are shorter and stay in registers); the AVX-512 and NEON rows keep
0 (their tiles were not measured this way).

A tile of one row (the single rows after a dynamic row count's whole blocks) is left as it is:
one row's epilogue is what the loop would keep live anyway.

Only a chain of elementwise ops (every result of the tile's shape, arith and math dialects)
ending in one in-bounds store of the whole tile is rewritten; anything else is left as it was
(this is a scheduling choice, not a fast path a program could miss).

Runs after bufferization and etc-cpu-expand-math (the chain is counted in the operations it
expanded), before the loops are outlined: the buffers are allocas in front of the loop nest (as
etc-cpu-plan-scratch's per-thread buffers), which move into the nest's function.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.passes.pass_api import function_pass, option
from etc.targets.cpu.ir_query import ops_after, top_level, walk
from etc.targets.cpu.kernels.gemm_schedule import GEMM_K_LOOP

_ELEMENTWISE_DIALECTS = ("arith.", "math.")


@dataclass
class EpilogueRowsOptions:
    min_ops: int = option(0, help="the shortest epilogue (operations per element) applied row by row; 0: never")


def _tile_chain(loop) -> "tuple[list, object] | None":
    """(the epilogue's ops in order, the tile's store) after k loop `loop`, or None when the ops
    between the loop and the store are not one elementwise chain over the tile's shape."""
    if len(loop.results) != 1 or not isinstance(loop.results[0].type, ir.VectorType):
        return None
    shape = ir.VectorType(loop.results[0].type).shape
    if len(shape) != 2 or shape[0] < 2:  # one row (a dynamic row count's last rows): no rows to loop over
        return None
    tile_values = {loop.results[0]}
    chain, store = [], None
    for op in ops_after(loop):
        if not any(v in tile_values for v in op.operands):
            if op.name == "scf.for":
                break
            continue
        if op.name == "vector.transfer_write":
            store = op
            break
        if not op.name.startswith(_ELEMENTWISE_DIALECTS) or op.regions or len(op.results) != 1 or \
                not isinstance(op.results[0].type, ir.VectorType) or \
                list(ir.VectorType(op.results[0].type).shape) != list(shape):
            return None
        chain.append(op)
        tile_values.add(op.results[0])
    if store is None or not chain:
        return None
    operands = list(store.operands)
    mem = operands[1]
    if operands[0] != chain[-1].results[0] or not isinstance(mem.type, ir.MemRefType):
        return None
    rank = ir.MemRefType(mem.type).rank
    if len(operands) != 2 + rank or rank < 2 or \
            ir.AffineMapAttr(store.attributes["permutation_map"]).value != ir.AffineMap.get_minor_identity(rank, 2):
        return None  # a masked store (a partial panel), or a transposed one
    in_bounds = store.attributes["in_bounds"] if "in_bounds" in store.attributes else None
    if in_bounds is None or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(in_bounds)):
        return None
    # Every value of the chain is used only in the chain and by the store: nothing reads it later.
    members = chain + [store]
    for op in chain:
        for use in op.results[0].uses:
            if not any(use.owner == m for m in members):
                return None
        for v in op.operands:  # an i1 tile from outside: no memref of i1 could hold it
            if v not in tile_values and v.type == ir.VectorType.get(shape, ir.IntegerType.get_signless(1)):
                return None
    return chain, store


def _splat(value, row_type):
    """A row-wide splat constant for a splat `value` (an arith.constant), else None."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return None
    from torch_mlir.dialects import arith

    return arith.ConstantOp(row_type, ir.DenseElementsAttr.get_splat(row_type, attr.get_splat_value())).result


def _rewrite(loop, chain, store) -> None:
    from torch_mlir.dialects import arith, memref, scf, vector

    rows, width = ir.VectorType(loop.results[0].type).shape
    index = ir.IndexType.get()
    top = top_level(loop)

    def constant(n):
        return arith.ConstantOp(index, ir.IntegerAttr.get(index, n)).result

    inside = {op.results[0] for op in chain}
    outside = []  # the tile-shaped values the chain reads: the accumulator and any other operand
    for v in (v for op in chain for v in op.operands):
        if v not in inside and v not in outside and isinstance(v.type, ir.VectorType):
            outside.append(v)
    splats, buffers = {}, {}
    with ir.InsertionPoint(store), store.location:
        for v in outside:  # a splat constant: made row-wide
            splat = _splat(v, ir.VectorType.get([width], ir.VectorType(v.type).element_type))
            if splat is not None:
                splats[v] = splat
        zero = constant(0)
        for v in outside:  # any other value: its own stack buffer, written once
            if v in splats:
                continue
            with ir.InsertionPoint(top), top.location:
                buffers[v] = memref.AllocaOp(ir.MemRefType.get([rows, width], ir.VectorType(v.type).element_type),
                                             [], [], alignment=64).result
            vector.TransferWriteOp(None, v, buffers[v], [zero, zero], ir.AffineMap.get_minor_identity(2, 2),
                                   in_bounds=[True, True])
        rows_loop = scf.ForOp(zero, constant(rows), constant(1))
    operands = list(store.operands)
    mem, indices = operands[1], operands[2:]
    with ir.InsertionPoint(rows_loop.body), store.location:
        r = rows_loop.induction_variable
        mapped = dict(splats)  # (a scalar operand, a select's condition, is used as it is)
        for v, buf in buffers.items():
            element = ir.VectorType(v.type).element_type
            pad = arith.ConstantOp(element, ir.IntegerAttr.get(element, 0) if isinstance(element, ir.IntegerType)
                                   else ir.FloatAttr.get(element, 0.0)).result
            mapped[v] = vector.TransferReadOp(ir.VectorType.get([width], element), buf, [r, zero],
                                              ir.AffineMap.get_minor_identity(2, 1), pad, [True]).result
        for op in chain:
            row_type = ir.VectorType.get([width], ir.VectorType(op.results[0].type).element_type)
            clone = ir.Operation.create(op.name, results=[row_type], operands=[mapped.get(v, v) for v in op.operands],
                                        attributes={op.attributes[i].name: op.attributes[i].attr
                                                    for i in range(len(op.attributes))}, loc=op.location)
            mapped[op.results[0]] = clone.results[0]
        at = list(indices)
        at[-2] = arith.AddIOp(at[-2], r).result
        rank = ir.MemRefType(mem.type).rank
        vector.TransferWriteOp(None, mapped[chain[-1].results[0]], mem, at, ir.AffineMap.get_minor_identity(rank, 1),
                               in_bounds=[True])
        scf.YieldOp([])
    store.erase()
    for op in reversed(chain):
        op.erase()


@function_pass("etc-cpu-gemm-epilogue-rows",
               "Apply each long GEMM tile epilogue one tile row at a time (a loop), so that it does not spill",
               EpilogueRowsOptions)
def gemm_epilogue_rows(module, options=None) -> int:
    """See the module docstring; returns the number of tiles rewritten."""
    min_ops = options.min_ops if options is not None else 0
    if min_ops <= 0:
        return 0
    done = 0
    with module.context, ir.Location.unknown():
        for loop in walk(module, ("scf.for",)):
            if GEMM_K_LOOP not in loop.attributes:
                continue
            found = _tile_chain(loop)
            if found is None or len(found[0]) < min_ops:
                continue
            _rewrite(loop, *found)
            done += 1
    return done
