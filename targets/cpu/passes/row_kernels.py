"""etc-cpu-row-kernels: softmax, LayerNorm, RMSNorm and every other row reduction as one vector kernel per row.

Runs on linalg on tensors after elementwise fusion and the GEMM and window passes. A *row
reduction* is a static `linalg.generic` (f32 result, or i1 for any/all) whose trailing loops are the reduced ones and every
other loop is parallel (a row sum, a norm's mean, softmax's max and sum). Each one, with the
elementwise generics and further row reductions that share its rows (same outer loop sizes, same
row length, linked directly or through reshapes), becomes ONE loop nest over the rows:

    for each row (the outer loop carries `etc.thread_split`: rows are independent)
      pass 0: vector accumulators of the reductions over the inputs (max for softmax, sum for a mean)
      pass 1: the reductions that need pass 0's (softmax's sum of exp(x - max), a variance), ...
      last pass: the row's outputs, written once
    (a per-row scalar -- 1/sum, rsqrt(var + eps) -- is computed once per row, not per element)

Each pass walks the row in `lanes`-wide vectors, `unroll` vectors per step with as many
independent accumulators (the add latency is hidden), the row's last partial vector masked (its
lanes outside the row contribute the reduction's identity); accumulators are combined by halving
the vector, then the row's init (the reduction's fill) is applied. An elementwise value a later pass
needs again is recomputed from the inputs when cheap (LayerNorm's x - mean), or kept in the row of
an output that a later pass overwrites when it has more than `recompute-ops` operations (softmax's
exp: stored in the output row by the sum's pass, scaled in place by the last). The row stays in L1
between passes, so memory sees each input read once and each output written once.

Arithmetic is the generics' bodies, applied to vectors (`math.exp` is expanded into a vectorized
polynomial by `etc-cpu-expand-math`, which runs after this pass); reductions are reassociated
(lane-wise partial results, as torch and BLAS do), and an elementwise division by a per-row value
is a multiplication by its reciprocal (torch's softmax does the same; results differ in the last bit).

Bool reductions (any/all: `arith.ori`/`arith.andi` into an i1, as torch's safe softmax has) run the
same way on i1 vectors; a bool input read along the row is widened to bytes first (a vector<Nxi1>
load would read bits, not the bytes a bool tensor holds).

Every row reduction is a decision: `row-reduction` when taken, `loops` with the reason otherwise
(marked `etc.cpu.decided`, so `etc-cpu-default-loops` does not decide about it again). Reductions
whose innermost loop is parallel (column sums) and arg-reductions stay with the default loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.passes.pass_api import Pass, option, register_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.entry_args import entry_function
from etc.targets.cpu.ir_query import iterator_types
from etc.targets.cpu.kernel_ir import splice
from etc.targets.cpu.kernels.gemm_match import is_contraction
from etc.targets.cpu.kernels.row_kernel import Kernel
from etc.targets.cpu.kernels.row_match import (RESHAPES, Group, NotTaken, classify, components, through_reshapes,
                                               uniform_fill)


@register_pass
class RowKernels(Pass):
    """Row reductions (softmax, LayerNorm, RMSNorm, a mean) with the elementwise ops on the same
    rows -> one vectorized loop nest over the rows, a few passes over each row held in L1, per-row
    values computed once. See the module docstring."""

    name = "etc-cpu-row-kernels"
    summary = "Fuse row reductions and their elementwise ops into one vector kernel per row (softmax, norms)"

    @dataclass
    class Options:
        lanes: int = option(16, help="f32 vector lanes (16 AVX-512, 8 AVX2, 4 NEON/SSE, 1: no SIMD)")
        unroll: int = option(4, help="vectors per step, each with its own accumulators")
        recompute_ops: int = option(2, help="a value a later pass needs again is kept in an output row "
                                            "when it takes more operations than this to recompute")

    def run(self, op) -> None:
        lanes = self.options.lanes
        if lanes < 1 or lanes & (lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two, got {lanes}", at=op)
        if self.options.unroll < 1:
            raise self.error(f"{self.name}: unroll must be at least 1", at=op)
        fn = entry_function(op)
        block = fn.regions[0].blocks[0]
        ops = [as_operation(o) for o in block.operations]
        rows = {}
        for o in ops:
            if o.name != "linalg.generic" or decisions.DECIDED in o.attributes:
                continue
            kinds = iterator_types(o)
            is_reduction = "reduction" in kinds
            if is_reduction and (kinds[-1] != "reduction" or is_contraction(o)):
                continue  # a column reduction or a contraction: not a row
            try:
                rows[o] = classify(o)
            except NotTaken as reason:
                if is_reduction:
                    self.decide(o, "loops", str(reason))
        # groups: row ops linked through their values (directly or through reshapes), same rows
        for members in components([rows[o] for o in ops if o in rows]):
            if any(r.reduction for r in members):  # elementwise only: the default loops
                self.take(members, block)

    def decide(self, op, path: str, reason: str = "") -> None:
        decisions.record(op, "reduction", path, reason)
        if path != "row-reduction":
            op.attributes[decisions.DECIDED] = ir.UnitAttr.get(op.context)

    def take(self, members: list, block) -> None:
        position = {as_operation(o): i for i, o in enumerate(block.operations)}
        ops = [r.op for r in members]
        members_set = set(ops)
        last = max(ops, key=lambda o: position[o])

        def external_users(value, out):
            for use in value.uses:
                user = as_operation(use.owner)
                if user in members_set:
                    continue
                if user.name in RESHAPES:
                    inner = []
                    external_users(user.results[0], inner)
                    if inner:
                        out.append(user)
                    continue
                out.append(user)
            return out

        def in_block(user):
            """The op of the block that is or holds `user` (a use in a branch of an scf.if counts
            where the scf.if stands), or None."""
            while user is not None and user not in position:
                user = as_operation(user.parent) if user.parent is not None else None
            return user

        # An op outside the group using a result before the group's last op (a GEMM between two
        # norms on the same rows; a torch.cond branch reading a sum the group also reduces) would
        # read the kernel before it runs: the ops before that use and the ops after it are
        # separate groups.
        between = [position[at] for o in ops for r in o.results for user in external_users(r, [])
                   if (at := in_block(user)) is not None and position[at] < position[last]]
        if between:
            cut = min(between)
            for part in ([r for r in members if position[r.op] < cut], [r for r in members if position[r.op] > cut]):
                for piece in components(part):
                    if any(r.reduction for r in piece):
                        self.take(piece, block)
            return
        try:
            group = Group(members, self.options.lanes, self.options.unroll, self.options.recompute_ops)
            group.build(lambda r: bool(external_users(r, [])))
            text = Kernel(group).function("__etc_rows")
        except NotTaken as reason:
            for r in members:
                if r.reduction:
                    self.decide(r.op, "loops", str(reason))
            self.count("not taken")
            return
        for r in members:
            if r.reduction:
                self.decide(r.op, "row-reduction")
        try:
            self.replace(group, text, last)
        except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
            raise self.error(f"{self.name}: building the row kernel failed: {exc}\n{text}", at=last) from exc
        self.count("taken")

    def replace(self, group: Group, text: str, anchor) -> None:
        """The group's ops (and the reshapes and producers only they read) by the kernel `text`,
        spliced in front of `anchor` (the group's last op)."""
        results = splice(text, [v for v, _ in group.inputs] + list(group.args), anchor)
        for (r, _, _), new in zip(group.outputs, results):
            final = group.final(r)
            final.replace_all_uses_with(new)
            if final != r:
                for use in list(r.uses):
                    as_operation(use.owner).erase()
        producers = []
        for o in group.ops:
            for v in o.operands:
                owner = defining_op(v)
                if owner is not None and owner not in producers and through_reshapes(v) not in group.results:
                    producers.append(owner)
        for o in reversed(group.ops):
            _erase_with_reshapes(o)
        _erase_dead(producers)


def _erase_with_reshapes(op) -> None:
    """Erase `op` and the reshapes of its results that only fed erased ops."""
    for r in op.results:
        for use in list(r.uses):
            user = as_operation(use.owner)
            if user.name in RESHAPES:
                _erase_with_reshapes(user)
    op.erase()


def _erase_dead(ops: list) -> None:
    """Erase the now-unused producers (reshapes, empties, fills, constants) of the erased ops' operands."""
    pure = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.empty", "linalg.fill", "linalg.generic",
            "arith.constant")
    alive = list(ops)
    changed = True
    while changed:
        changed = False
        for owner in list(alive):
            if owner.name not in pure or any(True for r in owner.results for _ in r.uses):
                continue
            if owner.name == "linalg.generic" and uniform_fill(owner.results[0]) is None:
                continue
            for v in owner.operands:
                inner = defining_op(v)
                if inner is not None and inner not in alive:
                    alive.append(inner)
            alive.remove(owner)
            owner.erase()
            changed = True
