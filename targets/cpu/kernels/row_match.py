"""Row reductions and the elementwise ops on their rows, read as one row program.

A *row reduction* is a static `linalg.generic` (f32 result, or i1 for any/all) whose trailing loops
are the reduced ones and every other loop is parallel (a row sum, a norm's mean, softmax's max and
sum). `classify` reads a generic in row space (`RowOp`: its outer sizes, its row length, how each
operand is read) or says why not (`NotTaken`); `components` groups the row ops linked through
their values (directly or through reshapes) on the same rows; `Group.build` turns one group into
`Node`s: what each value is per element, per row or once, the level of reductions it depends on,
the cost of recomputing it. `row_kernel.py` writes the group's kernel from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.targets.cpu.ir_query import indexing_maps, input_count, iterator_types, static_shape
from etc.targets.cpu.kernel_ir import NONPOSITIVE, scalar_literal

RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")
# combiner -> (identity, how two partial results combine)
COMBINERS = {
    "arith.addf": 0.0, "arith.mulf": 1.0,
    "arith.maximumf": float("-inf"), "arith.minimumf": float("inf"),
    "arith.maxnumf": float("-inf"), "arith.minnumf": float("inf"),
    "arith.ori": False, "arith.andi": True,  # bool reductions (any, all: torch's safe softmax)
}
BOOL_COMBINERS = ("arith.ori", "arith.andi")
ELEMENTWISE_DIALECTS = ("arith.", "math.")
EXPENSIVE = ("math.exp", "math.exp2", "math.expm1", "math.log", "math.log1p", "math.log2", "math.erf",
             "math.tanh", "math.powf", "math.sin", "math.cos", "math.atan", "math.sqrt", "math.rsqrt",
             "arith.divf")


class NotTaken(Exception):
    """Why a row reduction stays with the default loops (the decision's reason)."""


# ------------------------------------------------------------------ analysis


@dataclass
class Role:
    """How an operand is read in row space: along the outer loops `outer` (positions into the
    group's outer sizes) and, if `row`, along the row."""
    outer: tuple
    row: bool

    def shape(self, sizes: tuple, n: int) -> list:
        return [sizes[i] for i in self.outer] + ([n] if self.row else [])


@dataclass
class RowOp:
    op: object
    reduction: bool
    sizes: tuple  # the non-unit outer loop sizes
    n: int  # the row length
    roles: list  # per input operand: Role, or None for a non-tensor operand
    out_roles: list  # per result: Role (full for elementwise, outer-only for a reduction)
    combiner: str = ""  # reductions: the combining op
    value: object = None  # reductions: the body value combined into the accumulator


def classify(op) -> RowOp:
    """The op in row space, or NotTaken with the reason."""
    kinds = iterator_types(op)
    n_loops = len(kinds)
    if n_loops == 0:
        raise NotTaken("no loops")
    reduced = []
    for d in range(n_loops - 1, -1, -1):
        if kinds[d] != "reduction":
            break
        reduced.insert(0, d)
    if any(k == "reduction" for k in kinds[:n_loops - len(reduced)]) or any(k not in ("parallel", "reduction") for k in kinds):
        raise NotTaken("a reduced loop is not among the innermost ones")
    found = []
    op.walk(lambda inner: (found.append(1) if inner.name == "linalg.index" else None) or ir.WalkResult.ADVANCE)
    if found:
        raise NotTaken("its body reads loop indices (an arg-reduction or a gather)")
    maps = indexing_maps(op)
    operands = list(op.operands)
    sizes = [None] * n_loops
    for value, amap in zip(operands, maps):
        shape = static_shape(value)
        if shape is None:
            if isinstance(value.type, ir.ShapedType):
                raise NotTaken("a dynamic shape")
            continue
        for expr, size in zip(amap.results, shape):
            if isinstance(expr, ir.AffineDimExpr):
                sizes[ir.AffineDimExpr(expr).position] = size
    if any(s is None for s in sizes):
        raise NotTaken("a loop size not given by an operand")
    for r in op.results:
        elem = str(ir.RankedTensorType(r.type).element_type)
        if elem != "f32" and not (elem == "i1" and kinds[-1] == "reduction"):
            raise NotTaken(f"its result is {elem}, not f32")
    row_dims = [d for d in reduced if sizes[d] != 1] if reduced else []
    if reduced and not row_dims:
        row_dims = [reduced[-1]]
    if not reduced:
        row_dims = [n_loops - 1]
    outer_all = [d for d in range(n_loops) if d not in (reduced or [n_loops - 1])]
    outer = [d for d in outer_all if sizes[d] != 1]
    n = 1
    for d in row_dims:
        n *= sizes[d]

    def role(value, amap):
        shape = static_shape(value)
        keep = []
        for expr, size in zip(amap.results, shape):
            if isinstance(expr, ir.AffineConstantExpr):
                if size != 1 or ir.AffineConstantExpr(expr).value != 0:
                    raise NotTaken("an operand is read at a fixed offset")
                continue
            if not isinstance(expr, ir.AffineDimExpr):
                raise NotTaken("an operand is read through a computed index")
            d = ir.AffineDimExpr(expr).position
            if sizes[d] == 1 and d not in row_dims:
                continue
            keep.append(d)
        tail = [d for d in keep if d in row_dims]
        head = [d for d in keep if d not in row_dims]
        if tail and tail != row_dims:
            raise NotTaken("an operand reads part of the row")
        if keep != head + tail:
            raise NotTaken("an operand is read transposed")
        if any(d not in outer for d in head) or head != sorted(head, key=outer.index):
            raise NotTaken("an operand is read transposed")
        # a row of length 1 is one value per row
        return Role(tuple(outer.index(d) for d in head), bool(tail) and n > 1)

    n_in = input_count(op)
    roles = []
    for value, amap in zip(operands[:n_in], maps[:n_in]):
        if not isinstance(value.type, ir.ShapedType):
            roles.append(None)
            continue
        roles.append(role(value, amap))
    out_roles = [role(value, amap) for value, amap in zip(operands[n_in:], maps[n_in:])]
    full = Role(tuple(range(len(outer))), n > 1)
    rowwise = Role(tuple(range(len(outer))), False)
    block = op.regions[0].blocks[0]
    out_args = list(block.arguments)[n_in:]
    row = RowOp(op, bool(reduced), tuple(sizes[d] for d in outer), n, roles, out_roles)
    if not reduced:
        if any(r != full for r in out_roles):
            raise NotTaken("an output is not the full row space")
        if any(len(list(a.uses)) for a in out_args):
            raise NotTaken("its body reads its output")
        return row
    if len(op.results) != 1:
        raise NotTaken("it computes several reductions at once")
    if out_roles[0] != rowwise:
        raise NotTaken("its output is not one value per row")
    acc = out_args[0]
    uses = list(acc.uses)
    yielded = list(block.operations)[-1].operands[0]
    combine = defining_op(yielded)
    if len(uses) != 1 or combine is None or as_operation(uses[0].owner) != combine or combine.name not in COMBINERS:
        raise NotTaken("its body is not one max/min/add/mul into the accumulator")
    others = [v for v in combine.operands if v != acc]
    if len(others) != 1:
        raise NotTaken("its body combines the accumulator with itself")
    row.combiner, row.value = combine.name, others[0]
    if (str(ir.RankedTensorType(op.results[0].type).element_type) == "i1") != (row.combiner in BOOL_COMBINERS):
        raise NotTaken(f"its result is {ir.RankedTensorType(op.results[0].type).element_type} combined by {row.combiner}")
    return row


# ------------------------------------------------------------------ the row program


@dataclass(eq=False)
class Node:
    kind: str  # input | const | arg | extract | op | reduce | cached
    shape: str  # uniform | row | elem
    type: str  # the scalar type
    operands: list = field(default_factory=list)
    text: str = ""  # const: the attribute; op: the name
    attrs: str = ""  # op: the attribute dictionary text
    input: int = -1  # input/extract: which kernel input
    role: Role | None = None
    combiner: str = ""  # reduce
    level: int = 0
    ops: int = 0  # elementwise ops to recompute it (cost)
    expensive: bool = False


def through_reshapes(value):
    """`value` seen through tensor reshapes."""
    while True:
        owner = defining_op(value)
        if owner is None or owner.name not in RESHAPES:
            return value
        value = owner.operands[0]


def uniform_fill(value):
    """The scalar a tensor is filled with (linalg.fill or a broadcasting generic of a scalar), or None."""
    owner = defining_op(through_reshapes(value))
    if owner is None:
        return None
    if owner.name == "linalg.fill":
        return owner.operands[0]
    if owner.name == "linalg.generic" and all(k == "parallel" for k in iterator_types(owner)) and len(owner.results) == 1:
        n_in = input_count(owner)
        block = owner.regions[0].blocks[0]
        y = list(block.operations)[-1].operands[0]
        for i in range(n_in):
            if y == block.arguments[i] and not isinstance(owner.operands[i].type, ir.ShapedType):
                return owner.operands[i]
    return None


class Group:
    """Row ops sharing their rows, turned into one kernel."""

    def __init__(self, rows: list, lanes: int, unroll: int, recompute_ops: int):
        self.rows = rows
        self.ops = [r.op for r in rows]
        self.sizes, self.n = rows[0].sizes, max(r.n for r in rows)
        self.lanes, self.unroll, self.recompute_ops = lanes, unroll, recompute_ops
        self.inputs: list = []  # (value, role) kernel tensor inputs
        self.args: list = []  # captured scalar values passed as arguments
        self.nodes: dict = {}  # ir.Value -> Node
        self.outputs: list = []  # (ir.Value result, Node, Role)
        self.results = {r for row in rows for r in row.op.results}

    # -- building the nodes
    def input_node(self, value, role: Role) -> Node:
        value = through_reshapes(value)  # one view per tensor, whatever reshapes the ops read it through
        key = ("in", value, role.outer, role.row)
        if key in self.nodes:
            return self.nodes[key]
        elem = str(ir.RankedTensorType(value.type).element_type)
        if not (role.row or role.outer):
            self.inputs.append((value, role))
            node = Node("extract", "uniform", elem, input=len(self.inputs) - 1, role=role)
        else:
            self.inputs.append((value, role))
            node = Node("input" if role.row else "extract", "elem" if role.row else "row", elem,
                        input=len(self.inputs) - 1, role=role)
        self.nodes[key] = node
        return node

    def scalar_node(self, value) -> Node:
        """A value from outside the generic bodies (a constant or an argument)."""
        if value in self.nodes:
            return self.nodes[value]
        owner = defining_op(value)
        if owner is not None and owner.name == "arith.constant":
            node = Node("const", "uniform", str(value.type), text=str(owner.attributes["value"]))
        else:
            self.args.append(value)
            node = Node("arg", "uniform", str(value.type), input=len(self.args) - 1)
        self.nodes[value] = node
        return node

    def operand_node(self, row: RowOp, i: int, produced: dict) -> Node:
        value = row.op.operands[i]
        role = row.roles[i]
        if role is None:
            return self.scalar_node(value)
        source = through_reshapes(value)
        if source in produced:
            node, prole = produced[source]
            if prole != role:
                raise NotTaken("an op reads another's result along other loops")
            return node
        if source in self.results:
            raise NotTaken("an op reads another's result along other loops")
        return self.input_node(value, role)

    def build(self, external_uses) -> None:
        """Nodes for every group op (in block order) and the kernel's outputs."""
        produced = {}  # group result -> (node, role)
        full = Role(tuple(range(len(self.sizes))), True)
        for row in self.rows:
            op = row.op
            block = op.regions[0].blocks[0]
            n_in = input_count(op)
            local = {}
            for i in range(n_in):
                local[block.arguments[i]] = self.operand_node(row, i, produced)
            for inner in list(block.operations)[:-1]:
                inner = as_operation(inner)
                if inner.name == "arith.constant":
                    local[inner.results[0]] = Node("const", "uniform", str(inner.results[0].type),
                                                   text=str(inner.attributes["value"]))
                    continue
                if not inner.name.startswith(ELEMENTWISE_DIALECTS) or len(inner.regions) or len(inner.results) != 1:
                    raise NotTaken(f"its body has {inner.name}")
                if row.reduction and inner.name == row.combiner and block.arguments[n_in] in list(inner.operands):
                    continue
                args = []
                for v in inner.operands:
                    if v in local:
                        args.append(local[v])
                    elif isinstance(v.owner, ir.Block) and v.owner == block:
                        raise NotTaken("its body reads its accumulator elsewhere")
                    else:
                        args.append(self.scalar_node(v))
                local[inner.results[0]] = self.op_node(inner, args)
            if row.reduction:
                value = local.get(row.value) or (self.scalar_node(row.value) if row.value not in list(block.arguments)
                                                 else None)
                if value is None:
                    raise NotTaken("its body combines a value it does not compute")
                init_scalar = uniform_fill(op.operands[n_in])
                if init_scalar is not None:
                    init = self.scalar_node(init_scalar)
                else:
                    init = self.operand_node_init(row, n_in, produced)
                if row.n == 1:  # a reduction over one element: combined with its init, per row
                    node = Node("op", "row" if "row" in (value.shape, init.shape) else "uniform", init.type,
                                operands=[init, value], text=row.combiner, level=max(value.level, init.level))
                else:
                    node = Node("reduce", "row", init.type, operands=[value, init], combiner=row.combiner)
                    node.level = max(value.level, init.level) + 1
                produced[op.results[0]] = (node, Role(tuple(range(len(self.sizes))), False))
            else:
                y = list(block.operations)[-1].operands
                for k, r in enumerate(op.results):
                    node = local[y[k]] if y[k] in local else self.scalar_node(y[k])
                    if row.n == 1:  # one value per row
                        produced[r] = (node, Role(full.outer, False))
                        continue
                    if node.shape != "elem":  # a row-constant result: broadcast along the row
                        node = self.op_node(None, [node], broadcast=True)
                    produced[r] = (node, full)
        for row in self.rows:
            for r in row.op.results:
                if external_uses(r):
                    node, role = produced[r]
                    self.outputs.append((r, node, role))
        if not self.outputs:
            raise NotTaken("no result is used")

    def final(self, result):
        """What the kernel returns for `result`: `result`, or the one reshape all its users are."""
        users = [as_operation(use.owner) for use in result.uses]
        if users and all(u.name in RESHAPES and u not in self.ops for u in users) and \
                len({str(u.results[0].type) for u in users}) == 1:
            first = users[0].results[0]
            if all(u == users[0] for u in users):
                return first
        return result

    def operand_node_init(self, row, i, produced) -> Node:
        value = row.op.operands[i]
        source = through_reshapes(value)
        if source in produced:
            return produced[source][0]
        return self.input_node(value, row.out_roles[0])

    def op_node(self, inner, args: list, broadcast: bool = False) -> Node:
        if broadcast:
            arg = args[0]
            return Node("op", "elem", arg.type, operands=[arg], text="broadcast", level=arg.level, ops=1)
        shape = "uniform"
        for a in args:
            if a.shape == "elem":
                shape = "elem"
            elif a.shape == "row" and shape == "uniform":
                shape = "row"
        name = inner.name
        result_type = str(inner.results[0].type)
        attrs = ", ".join(f"{inner.attributes[i].name} = {inner.attributes[i].attr}" for i in range(len(inner.attributes)))
        if name == "math.fpowi" and shape == "elem":
            exponent = args[1]
            if exponent.kind != "const":
                raise NotTaken("math.fpowi with an exponent that is not a constant")
            e = int(exponent.text.split(":")[0].strip())
            if not 0 <= e <= 8:
                raise NotTaken(f"math.fpowi with exponent {e}")
            if e == 0:
                return self.op_node_const_like(args[0], 1.0)
            node = args[0]
            for _ in range(e - 1):
                node = Node("op", "elem", result_type, operands=[node, args[0]], text="arith.mulf",
                            level=max(node.level, args[0].level), ops=node.ops + 1)
            return node
        level = max([a.level for a in args], default=0)
        ops = 1 + sum(a.ops for a in args if a.shape == "elem")
        expensive = name in EXPENSIVE or any(a.expensive for a in args if a.shape == "elem")
        if name == "arith.divf" and shape == "elem" and args[1].shape != "elem" and args[0].shape == "elem":
            # x / s for a per-row s: x * (1/s), the reciprocal once per row
            one = Node("const", "uniform", result_type, text=f"1.0 : {result_type}")
            recip = Node("op", args[1].shape, result_type, operands=[one, args[1]], text="arith.divf",
                         level=args[1].level)
            return Node("op", "elem", result_type, operands=[args[0], recip], text="arith.mulf", attrs=attrs,
                        level=level, ops=ops, expensive=any(a.expensive for a in args if a.shape == "elem"))
        if name == "math.exp" and _minus_its_row_max(args[0]):
            attrs = ", ".join(filter(None, [attrs, NONPOSITIVE]))
        return Node("op", shape, result_type, operands=list(args), text=name, attrs=attrs, level=level, ops=ops,
                    expensive=expensive)

    def op_node_const_like(self, like: Node, value: float) -> Node:
        c = Node("const", "uniform", like.type, text=f"{scalar_literal(value)} : {like.type}")
        return Node("op", "elem", like.type, operands=[c], text="broadcast", level=like.level, ops=1)




def components(members: list) -> list:
    """`members` (RowOps in block order) split into groups linked through their values, directly or
    through reshapes, on the same rows (a row-shaped op joins rows of any length); each in block order."""
    index = {r.op: i for i, r in enumerate(members)}
    parent = list(range(len(members)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, row in enumerate(members):
        for k, value in enumerate(list(row.op.operands)):
            if k < input_count(row.op) and row.roles[k] is None:
                continue
            j = index.get(defining_op(through_reshapes(value)))
            if j is None:
                continue
            other = members[j]
            if other.sizes == row.sizes and (other.n == row.n or 1 in (other.n, row.n)):
                parent[find(i)] = find(j)
    groups: dict = {}
    for i, row in enumerate(members):
        groups.setdefault(find(i), []).append(row)
    return list(groups.values())


def _minus_its_row_max(node: Node) -> bool:
    """Whether `node` is x - max(x) with the max a row reduction of the same x (softmax's shift):
    never positive (NaN aside), so its exp can be the short one (`kernel_ir.NONPOSITIVE`)."""
    if node.kind != "op" or node.text != "arith.subf" or len(node.operands) != 2:
        return False
    x, top = node.operands
    while top.kind == "op" and top.text == "broadcast":
        top = top.operands[0]
    return top.kind == "reduce" and top.combiner in ("arith.maximumf", "arith.maxnumf") and top.operands[0] is x
