"""etc-cpu-default-loops: the loop order every op the tuned passes left runs in, and the reductions' decisions.

Runs after the window and GEMM passes and elementwise fusion: named ops left are
generalized; each reduction's loops move outside the innermost parallel loop when that
loop walks the output and an input contiguously (matmul i,j,k -> i,k,j; a column sum), so
that LLVM's loop vectorizer, at O3, gets unit-stride loops without a floating-point
reduction to reassociate; reductions over the innermost loop (a row sum, a norm's mean,
softmax's max and sum) have their float arithmetic marked `reassoc contract`, so LLVM may
split the sum into vector lanes, as BLAS and torch do (changes results in the last bits
only; elementwise code keeps strict IEEE semantics).

Each reduction that is not a contraction and that no earlier pass decided about gets its
decision: `column-reduction` (vectorized along the output) or `loops` with the reason (for
example a body that reads loop indices, as argmax does). Row reductions (the reduced loops
innermost) are `etc-cpu-row-kernels`' to decide: it takes them or records why not, so one
reaching this pass is one it never saw (a target without a vector unit has no row kernels; a
reduction outside the entry function's body).
"""

from __future__ import annotations

import re

from torch_mlir import ir

from etc.passes.pass_api import function_pass
from etc.targets.cpu import decisions
from etc.targets.cpu.ir_query import walk
from etc.targets.cpu.kernel_ir import run_upstream
from etc.targets.cpu.kernels.gemm_match import is_contraction


@function_pass("etc-cpu-default-loops",
               "Generalize what is left, order reduction loops for vectorization, record the reductions' paths")
def default_loops(module, options=None) -> None:
    from etc.errors import PassError

    def error(message):
        return PassError(f"etc-cpu-default-loops: {message}")

    run_upstream(module, "builtin.module(func.func(linalg-generalize-named-ops))", "generalizing named linalg ops",
                 error)
    interchange_reductions_outward(module)
    allow_reduction_reassociation(module)
    with module.context:
        for op in walk(module, ("linalg.generic",)):
            if decisions.DECIDED in op.attributes:
                del op.attributes[decisions.DECIDED]
                continue
            kinds = _iterator_kinds(op)
            if "reduction" not in kinds or is_contraction(op):
                continue
            decisions.record(op, "reduction", *_reduction_path(op, kinds))


def _reduction_path(op, kinds: list) -> tuple:
    if walk(op, ("linalg.index",)):
        return "loops", "its body reads loop indices (an arg-reduction or a gather)"
    if kinds[-1] == "parallel":
        return ("column-reduction",)
    return "loops", "a row reduction etc-cpu-row-kernels did not take (a target without a vector unit, or not in the entry's body)"


REASSOCIABLE = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf")


def allow_reduction_reassociation(module) -> int:
    """Mark the float arithmetic of reductions over the innermost loop `reassoc contract`, so that
    LLVM may vectorize the sum (split into lanes) and fuse multiply-adds, as BLAS and torch do.
    (Not for loop nests whose innermost loop is parallel: there the vectorizer already has
    its loop, and reassociation let it pick worse ones: a 64-channel conv ran 6x slower.)
    Changes results in the last bits only; elementwise code keeps strict IEEE semantics."""
    changed = 0
    with module.context:
        flags = ir.Attribute.parse("#arith.fastmath<reassoc,contract>")
        for g in walk(module, ("linalg.generic",)):
            if _iterator_kinds(g)[-1:] != ["reduction"]:
                continue
            for inner in g.regions[0].blocks[0].operations:
                if inner.operation.name in REASSOCIABLE:
                    inner.operation.attributes["fastmath"] = flags
                    changed += 1
    return changed


def interchange_reductions_outward(module) -> int:
    """Permute loops of `linalg.generic` ops as described in `default_codegen_strategy`; returns how many."""
    changed = 0
    with module.context:
        for op in walk(module, ("linalg.generic",)):
            perm = _reduction_outward_permutation(op)
            if perm is not None:
                _interchange(op, perm)
                changed += 1
    return changed


def _iterator_kinds(op) -> list[str]:
    kinds = []
    for a in ir.ArrayAttr(op.attributes["iterator_types"]):
        m = re.search(r"parallel|reduction|window", str(a))
        kinds.append(m.group(0) if m else str(a))
    return kinds


def _reduction_outward_permutation(op):
    kinds = _iterator_kinds(op)
    if "reduction" not in kinds or any(k not in ("parallel", "reduction") for k in kinds):
        return None
    if walk(op, ("linalg.index",)):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n_outputs = len(op.results) if len(op.results) else _count_outputs(op)
    out_map = maps[-1]
    if len(out_map.results) == 0 or n_outputs != 1:
        return None
    last = out_map.results[-1]
    if not isinstance(last, ir.AffineDimExpr):
        return None
    inner = ir.AffineDimExpr(last).position
    if kinds[inner] != "parallel":
        return None
    if not any(len(m.results) and f"d{inner}" in _dims_of(m.results[-1]) for m in maps[:-1]):
        return None
    parallel = [d for d, k in enumerate(kinds) if k == "parallel" and d != inner]
    reductions = [d for d, k in enumerate(kinds) if k == "reduction"]
    perm = parallel + reductions + [inner]
    return None if perm == list(range(len(kinds))) else perm


def _count_outputs(op) -> int:
    sizes = op.attributes["operandSegmentSizes"] if "operandSegmentSizes" in op.attributes else None
    return list(ir.DenseI32ArrayAttr(sizes))[1] if sizes is not None else 1


def _dims_of(expr) -> set:
    return set(re.findall(r"d\d+", str(expr)))


def _interchange(op, perm: list[int]) -> None:
    """New loop p iterates old dim perm[p]: every map becomes map o (d' -> d'[inverse])."""
    n = len(perm)
    inverse = [0] * n
    for p, d in enumerate(perm):
        inverse[d] = p
    substitution = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(inverse[i]) for i in range(n)])
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    new_maps = [ir.AffineMap.get(n, m.n_symbols, [e.compose(substitution) for e in m.results]) for m in maps]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    iterators = list(ir.ArrayAttr(op.attributes["iterator_types"]))
    op.attributes["iterator_types"] = ir.ArrayAttr.get([iterators[d] for d in perm])
    if "linalg.memoized_indexing_maps" in op.attributes:  # the named op's maps, stale now
        del op.attributes["linalg.memoized_indexing_maps"]
