"""Recognizing attention, softmax(Q K^T (op) mask) V, on linalg on tensors (etc-cpu-attention-kernels).

What the pipeline has at that point (torch's `scaled_dot_product_attention` decomposed at export,
then torch-mlir's lowering), starting from the second contraction and walking back:

    S  = linalg.batch_matmul(Q [BH, T, D], K^T [BH, D, S])       (K^T: any tensor, a transpose's result)
    X  = S (op) c (op) M ...       elementwise generics on the scores, each one +, -, *, / with a
                                   float constant or a float tensor broadcast over the score space
                                   (the scale; an additive mask, what a bool or causal mask becomes)
    m  = max over the last dim of X (the argmax result torch-mlir adds, unused)
    E  = exp(X - m);  Z = sum over the last dim of E;  P = E / Z
    [P = select(not any(X != -inf), 0, P)]                   torch's safe softmax: a fully masked row is 0
    O  = linalg.batch_matmul(P [BH, T, S], V [BH, S, Dv])

with reshapes (the heads split from or merged into the batch) anywhere between. `match(op)` returns
an `Attention` (the operands the fused kernel reads and the ops it replaces), `None` when `op` is
not the second contraction of an attention, or raises `NotTaken` with the reason when it is one
the fused kernel cannot take (the pass records it as a decision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.targets.cpu.ir_query import indexing_maps, input_count, iterator_types
from etc.targets.cpu.kernels.row_match import RESHAPES, through_reshapes

SCORE_OPS = ("arith.addf", "arith.subf", "arith.mulf", "arith.divf")


class NotTaken(Exception):
    """An attention the fused kernel cannot take; the message is the reason."""


@dataclass
class Side:
    """A tensor an elementwise score op reads: `dims[k]` is the score-space dim its dim k follows
    (None: a broadcast dim, read at 0). The score space is [outer..., T, S]."""

    value: ir.Value
    dims: list


@dataclass
class ScoreOp:
    """x = x (op) operand, or operand (op) x when not `scores_first`; the operand is a side tensor
    (`side`, an index into `Attention.sides`) or a float constant."""

    op: str
    scores_first: bool
    side: int | None = None
    constant: float | None = None


@dataclass
class Attention:
    q: ir.Value  # [BH, T, D]
    kt: ir.Value  # [BH, D, S]
    v: ir.Value  # [BH, S, Dv]
    result: ir.Value  # the second contraction's result [BH, T, Dv]
    outer: list  # the score space's sizes before its last two (their product is BH)
    rows: int  # T
    keys: int  # S
    head: int  # D
    value_dim: int  # Dv
    chain: list = field(default_factory=list)  # ScoreOps, in order
    sides: list = field(default_factory=list)  # Sides
    safe: bool = False  # a fully masked row gives 0 (torch's safe softmax), else NaN
    # The side an additive mask reads along the keys when a -inf there stays -inf through the
    # score ops after it (adding finite values, multiplying or dividing by a positive constant):
    # a key tile masked for every row of a group can be skipped. None otherwise.
    skip_side: int | None = None
    ops: list = field(default_factory=list)  # the ops the kernel replaces

    @property
    def batch(self) -> int:
        n = 1
        for s in self.outer:
            n *= s
        return n


def _body(op):
    """The generic's body ops before its yield, and the yield's operands."""
    block = op.regions[0].blocks[0]
    ops = [as_operation(o) for o in block.operations]
    return ops[:-1], list(ops[-1].operands), block


def _generic(value, kind: str | None = None):
    """The linalg.generic defining `value` (through reshapes), or None; `kind`: "parallel" (every loop
    parallel) or "row" (the last loop a reduction, the others parallel)."""
    owner = defining_op(through_reshapes(value))
    if owner is None or owner.name != "linalg.generic":
        return None
    kinds = iterator_types(owner)
    if kind == "parallel" and any(k != "parallel" for k in kinds):
        return None
    if kind == "row" and (kinds[-1] != "reduction" or any(k != "parallel" for k in kinds[:-1])):
        return None
    return owner


def _is_identity(amap, rank: int) -> bool:
    return amap.n_dims == rank and len(amap.results) == rank and \
        all(isinstance(e, ir.AffineDimExpr) and e.position == i for i, e in enumerate(amap.results))


def _single(op, names):
    """The generic's one body op if it is one of `names` (with the yield returning it), else None."""
    body, yields, _ = _body(op)
    if len(body) != 1 or body[0].name not in names or len(yields) != 1 or yields[0] != body[0].results[0]:
        return None
    return body[0]


def _arg_index(value, block) -> int | None:
    for i, a in enumerate(block.arguments):
        if a == value:
            return i
    return None


def _float_constant(value) -> float | None:
    owner = defining_op(value)
    if owner is None or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    return None


def match(op) -> Attention | None:
    """See the module docstring."""
    if op.name != "linalg.batch_matmul":
        return None
    p_value, v_value = op.operands[0], op.operands[1]
    if any(not ir.RankedTensorType(v.type).has_static_shape for v in (p_value, v_value)):
        # With a dynamic length the softmax reaches the contraction through gathers (expands as
        # index arithmetic): not matched op by op, but still reported when it is attention.
        if _after_softmax_of_contraction(p_value):
            raise NotTaken("dynamic sizes: the fused kernel is built for static sequence lengths")
        return None
    ops = [op]
    # --- the softmax, from its end
    safe, safe_ops = False, []
    div = _generic(p_value, "parallel")
    if div is not None and _single(div, ("arith.select",)) is not None:
        select = div
        sel = _single(select, ("arith.select",))
        _, _, block = _body(select)
        idx = [_arg_index(v, block) for v in sel.operands]
        if None in idx or max(idx) >= input_count(select):
            return None
        cond, zero, probs = (select.operands[i] for i in idx)
        zero_value = _zero(zero)
        if not zero_value:
            return None
        safe_ops = _all_masked_rows(cond)
        if safe_ops is None:
            return None
        div = _generic(probs, "parallel")
        ops += [select, *safe_ops]
        safe = True
    if div is None or _single(div, ("arith.divf",)) is None or input_count(div) != 2:
        return None
    exp = _generic(div.operands[0], "parallel")
    total = _generic(div.operands[1], "row")
    if exp is None or total is None or _single(exp, ("math.exp",)) is None or input_count(exp) != 1:
        return None
    if _single(total, ("arith.addf",)) is None or through_reshapes(total.operands[0]) != exp.results[0]:
        return None
    sub = _generic(exp.operands[0], "parallel")
    if sub is None or _single(sub, ("arith.subf",)) is None or input_count(sub) != 2:
        return None
    biggest = _generic(sub.operands[1], "row")
    if biggest is None or "arith.maximumf" not in [o.name for o in _body(biggest)[0]]:
        return None
    x_value = through_reshapes(sub.operands[0])
    if through_reshapes(biggest.operands[0]) != x_value:
        return None
    if any(True for r in list(biggest.results)[1:] for _ in r.uses):
        return None  # the argmax is used: not a plain softmax
    ops += [div, exp, total, sub, biggest]
    if safe and through_reshapes(safe_ops[-1].operands[0]) != x_value:
        return None  # the all-masked test is on another tensor than the scores
    space = list(ir.RankedTensorType(sub.results[0].type).shape)
    # --- from here on, it is attention-shaped when the scores come from a contraction
    chain, sides, value = [], [], x_value
    while True:
        owner = defining_op(through_reshapes(value))
        if owner is not None and owner.name == "linalg.batch_matmul":
            first = owner
            break
        g = _generic(value, "parallel")
        if g is None:
            return None  # the scores do not come from a contraction: a softmax times a matrix
        chain.append(g)
        value = _score_input(g)
        if value is None:
            if _reaches_contraction(g):
                raise NotTaken("an op on the scores other than +, -, *, / with a float constant or tensor")
            return None
    ops += chain + [first]
    q, kt = first.operands[0], first.operands[1]
    shapes = [ir.RankedTensorType(v.type) for v in (q, kt, v_value, op.results[0], first.results[0])]
    if any(not t.has_static_shape for t in shapes):
        raise NotTaken("dynamic sizes: the fused kernel is built for static sequence lengths")
    if any(not isinstance(t.element_type, ir.F32Type) for t in shapes):
        raise NotTaken("not float32")
    (bh, t, d), (_, d2, s), (_, s2, dv) = (list(x.shape) for x in shapes[:3])
    if d != d2 or s != s2 or len(space) < 2 or space[-2:] != [t, s]:
        raise NotTaken("the scores' shape does not follow the contraction's")
    outer = space[:-2]
    if _product(outer) != bh:
        raise NotTaken("the scores' batch dims do not merge into the contraction's batch")
    score_ops = []
    for g in reversed(chain):
        if list(ir.RankedTensorType(g.results[0].type).shape) != space:
            raise NotTaken("an op on the scores in another shape than the softmax's")
        score_ops.append(_score_op(g, sides, len(space)))
    result = Attention(q, kt, v_value, op.results[0], outer, t, s, d, dv, score_ops, sides, safe, ops=ops,
                       skip_side=_skippable_mask(score_ops, sides, len(space)))
    _check_private(result)
    return result


def _skippable_mask(chain: list, sides: list, rank: int) -> int | None:
    """See `Attention.skip_side`."""
    for i, op in enumerate(chain):
        if op.op != "arith.addf" or op.side is None or sides[op.side].dims[-1:] != [rank - 1]:
            continue
        keeps = all((o.op in ("arith.addf", "arith.subf") and (o.side is not None or math.isfinite(o.constant))
                     and (o.scores_first or o.op == "arith.addf"))
                    or (o.op in ("arith.mulf", "arith.divf") and o.constant is not None and o.constant > 0
                        and math.isfinite(o.constant) and (o.scores_first or o.op == "arith.mulf"))
                    for o in chain[i + 1:])
        if keeps:
            return op.side
    return None


def _producers(op) -> list:
    """The ops defining `op`'s operands and the values its regions read from above."""
    values = list(op.operands)
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                values += [v for v in inner.operands]
    found = []
    for v in values:
        owner = defining_op(v)
        if owner is not None and owner != op and owner.parent == op.parent and owner not in found:
            found.append(owner)
    return found


def _after_softmax_of_contraction(value, depth: int = 12) -> bool:
    """Whether `value` comes (within `depth` ops) from an exp of values from a batch_matmul."""
    seen, frontier, exp_seen = [], [defining_op(value)], False
    for _ in range(depth):
        nxt = []
        for o in frontier:
            if o is None or o in seen:
                continue
            seen.append(o)
            if o.name == "linalg.batch_matmul" and exp_seen:
                return True
            if o.name == "linalg.generic" and "math.exp" in [b.name for b in _body(o)[0]]:
                exp_seen = True
            nxt += _producers(o)
        frontier = nxt
    return False


def _product(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _zero(value) -> bool:
    owner = defining_op(through_reshapes(value))
    if owner is None:
        return False
    if owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.DenseFPElementsAttr):
            return attr.is_splat and attr.get_splat_value().value == 0.0
        return False
    if owner.name == "linalg.fill":
        return _float_constant(owner.operands[0]) == 0.0
    return False


def _all_masked_rows(cond):
    """The ops of `not any(not (X == -inf))` (torch's safe softmax's test) when `cond` is it, else None."""
    not_any = _generic(cond, "parallel")
    if not_any is None or _single(not_any, ("arith.cmpi", "arith.xori")) is None:
        return None
    any_ = _generic(not_any.operands[0], "row")
    if any_ is None or _single(any_, ("arith.ori",)) is None:
        return None
    not_inf = _generic(any_.operands[0], "parallel")
    if not_inf is None or _single(not_inf, ("arith.cmpi", "arith.xori")) is None:
        return None
    is_inf = _generic(not_inf.operands[0], "parallel")
    if is_inf is None or "arith.cmpf" not in [o.name for o in _body(is_inf)[0]]:
        return None
    return [not_any, any_, not_inf, is_inf]


def _score_body(g):
    """The one +, -, *, / of a score op's body (a constant it reads may be an f64 constant
    truncated in the body, as torch-mlir lowers a Python float), or None."""
    body, yields, _ = _body(g)
    if not body or body[-1].name not in SCORE_OPS or len(yields) != 1 or yields[0] != body[-1].results[0]:
        return None
    for o in body[:-1]:
        if o.name != "arith.truncf" or _float_constant(o.operands[0]) is None:
            return None
    return body[-1]


def _truncated_constant(value) -> float | None:
    """A float constant, or an f64 constant truncated to f32 in the body."""
    owner = defining_op(value)
    if owner is not None and owner.name == "arith.truncf":
        return _float_constant(owner.operands[0])
    return _float_constant(value)


def _score_input(g):
    """The scores operand of an elementwise score op (`x (op) c` or `x (op) tensor`), or None."""
    body_op = _score_body(g)
    if body_op is None or len(g.results) != 1:
        return None
    _, _, block = _body(g)
    maps = indexing_maps(g)
    rank = len(iterator_types(g))
    for operand in body_op.operands:
        i = _arg_index(operand, block)
        if i is not None and i < input_count(g) and _is_identity(maps[i], rank) and \
                isinstance(ir.RankedTensorType(g.operands[i].type).element_type, ir.F32Type):
            return g.operands[i]
    return None


def _reaches_contraction(g, depth: int = 6) -> bool:
    """Whether a batch_matmul feeds `g` within a few elementwise ops (attention with a score op we do not take)."""
    for v in list(g.operands)[:input_count(g)]:
        owner = defining_op(through_reshapes(v))
        if owner is None:
            continue
        if owner.name == "linalg.batch_matmul":
            return True
        if depth and owner.name == "linalg.generic" and _reaches_contraction(owner, depth - 1):
            return True
    return False


def _score_op(g, sides: list, rank: int) -> ScoreOp:
    body_op = _score_body(g)
    _, _, block = _body(g)
    maps = indexing_maps(g)
    a, b = body_op.operands
    ia, ib = _arg_index(a, block), _arg_index(b, block)
    scores_first = ia is not None and ia < input_count(g) and _is_identity(maps[ia], rank) and \
        through_reshapes(g.operands[ia]) == through_reshapes(_score_input(g))
    other, other_index = (b, ib) if scores_first else (a, ia)
    if other_index is None:
        constant = _truncated_constant(other)
        if constant is None:
            raise NotTaken("a score op with a value computed at run time")
        return ScoreOp(body_op.name, scores_first, constant=constant)
    if other_index >= input_count(g):
        raise NotTaken("a score op reading its output")
    tensor = g.operands[other_index]
    if not isinstance(ir.RankedTensorType(tensor.type).element_type, ir.F32Type):
        raise NotTaken("a score op with a tensor that is not float32")
    dims = []
    for e in maps[other_index].results:
        if isinstance(e, ir.AffineDimExpr):
            dims.append(e.position)
        elif isinstance(e, ir.AffineConstantExpr) and e.value == 0:
            dims.append(None)
        else:
            raise NotTaken(f"a mask read through {maps[other_index]}")
    if rank - 1 in dims and dims[-1] != rank - 1:
        raise NotTaken("a mask whose key dim is not its last (it would be read across rows)")
    sides.append(Side(tensor, dims))
    return ScoreOp(body_op.name, scores_first, side=len(sides) - 1)


def _check_private(a: Attention) -> None:
    """Every value between the two contractions is read only inside the pattern (else the scores
    or probabilities are needed anyway: the fused kernel would not save them)."""
    members = set(a.ops)

    def users(value, out):
        for use in value.uses:
            user = as_operation(use.owner)
            if user.name in RESHAPES:
                users(user.results[0], out)
            else:
                out.append(user)
        return out

    for o in a.ops[1:]:
        for r in o.results:
            for u in users(r, []):
                if u not in members:
                    reader = "the model returns them" if u.name == "func.return" else f"{u.name} reads them"
                    raise NotTaken(f"the scores or probabilities are read elsewhere ({reader})")
