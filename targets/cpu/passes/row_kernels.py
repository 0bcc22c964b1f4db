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

import math
import re
from dataclasses import dataclass, field

from etc.passes.pass_api import Pass, option, register_pass

THREAD_SPLIT = "etc.thread_split"  # the loop a threaded entry splits across its threads (parallel.py)
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


def _ir():
    from torch_mlir import ir

    return ir


def _op(x):
    return x.operation if hasattr(x, "operation") else x


def _owner(value):
    ir = _ir()
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return _op(owner)


def _iterators(op) -> list[str]:
    ir = _ir()
    return [re.search(r"parallel|reduction|window", str(a)).group(0) for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _maps(op) -> list:
    ir = _ir()
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _n_inputs(op) -> int:
    return len(op.operands) - len(op.results)


def _static(value) -> list | None:
    ir = _ir()
    t = value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        return None
    return list(t.shape)


def _f(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if math.isinf(value):
        return "0x7F800000" if value > 0 else "0xFF800000"
    return repr(float(value))


def _tt(shape, elem="f32") -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + f"{elem}>"


def _vt(lanes, elem="f32") -> str:
    return f"vector<{lanes}x{elem}>"


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


def _classify(op) -> RowOp:
    """The op in row space, or NotTaken with the reason."""
    ir = _ir()
    kinds = _iterators(op)
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
    maps = _maps(op)
    operands = list(op.operands)
    sizes = [None] * n_loops
    for value, amap in zip(operands, maps):
        shape = _static(value)
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
        shape = _static(value)
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

    n_in = _n_inputs(op)
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
    combine = _owner(yielded)
    if len(uses) != 1 or combine is None or _op(uses[0].owner) != combine or combine.name not in COMBINERS:
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


def _source(value):
    """`value` seen through tensor reshapes."""
    while True:
        owner = _owner(value)
        if owner is None or owner.name not in RESHAPES:
            return value
        value = owner.operands[0]


def _uniform_fill(value):
    """The scalar a tensor is filled with (linalg.fill or a broadcasting generic of a scalar), or None."""
    ir = _ir()
    owner = _owner(_source(value))
    if owner is None:
        return None
    if owner.name == "linalg.fill":
        return owner.operands[0]
    if owner.name == "linalg.generic" and all(k == "parallel" for k in _iterators(owner)) and len(owner.results) == 1:
        n_in = _n_inputs(owner)
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
        ir = _ir()
        value = _source(value)  # one view per tensor, whatever reshapes the ops read it through
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
        owner = _owner(value)
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
        source = _source(value)
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
        ir = _ir()
        produced = {}  # group result -> (node, role)
        full = Role(tuple(range(len(self.sizes))), True)
        for row in self.rows:
            op = row.op
            block = op.regions[0].blocks[0]
            n_in = _n_inputs(op)
            local = {}
            for i in range(n_in):
                local[block.arguments[i]] = self.operand_node(row, i, produced)
            for inner in list(block.operations)[:-1]:
                inner = _op(inner)
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
                init_scalar = _uniform_fill(op.operands[n_in])
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
        users = [_op(use.owner) for use in result.uses]
        if users and all(u.name in RESHAPES and u not in self.ops for u in users) and \
                len({str(u.results[0].type) for u in users}) == 1:
            first = users[0].results[0]
            if all(u == users[0] for u in users):
                return first
        return result

    def operand_node_init(self, row, i, produced) -> Node:
        value = row.op.operands[i]
        source = _source(value)
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
        return Node("op", shape, result_type, operands=list(args), text=name, attrs=attrs, level=level, ops=ops,
                    expensive=expensive)

    def op_node_const_like(self, like: Node, value: float) -> Node:
        c = Node("const", "uniform", like.type, text=f"{_f(value)} : {like.type}")
        return Node("op", "elem", like.type, operands=[c], text="broadcast", level=like.level, ops=1)


# ------------------------------------------------------------------ code generation


class _Writer:
    def __init__(self):
        self.lines: list = []
        self.counter = 0

    def fresh(self, stem="v") -> str:
        self.counter += 1
        return f"%{stem}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append(line)


class Kernel:
    """The text of a group's kernel as a function (arguments: tensor inputs then captured scalars;
    results: the group's used results in their own types)."""

    def __init__(self, group: Group):
        self.g = group
        self.w = _Writer()
        self.top = _Writer()  # uniform values, before the loops
        self.top.counter = 1 << 20
        self.memo: dict = {}  # (node, copy) -> SSA name (scoped by `self.scopes`)
        self.scopes: list = [set()]
        self.ivs: list = []
        self.tensors: dict = {}  # output index -> current SSA name of its tensor
        self.consts: dict = {}

    # -- small helpers
    def index(self, v: int) -> str:
        if v not in self.consts:
            name = f"%ci{v}"
            self.top.emit(f"{name} = arith.constant {v} : index")
            self.consts[v] = name
        return self.consts[v]

    def lookup(self, key):
        return self.memo.get(key)

    def remember(self, key, name):
        self.memo[key] = name
        self.scopes[-1].add(key)

    def push(self):
        self.scopes.append(set())

    def pop(self):
        for key in self.scopes.pop():
            self.memo.pop(key, None)

    def splat(self, scalar: str, elem: str, width: int) -> str:
        v = self.w.fresh("s")
        self.w.emit(f"{v} = vector.broadcast {scalar} : {elem} to {_vt(width, elem)}")
        return v

    # -- values
    def scalar(self, node: Node) -> str:
        """A uniform or per-row node's scalar SSA name."""
        key = (node, None)
        found = self.lookup(key)
        if found is not None:
            return found
        if node.kind == "reduce":
            raise AssertionError("a reduction read before its pass")
        w = self.top if node.shape == "uniform" else self.w
        name = w.fresh("u" if node.shape == "uniform" else "r")
        g = self.g
        if node.kind == "const":
            w.emit(f"{name} = arith.constant {node.text}")
        elif node.kind == "arg":
            name = f"%a{node.input}"
        elif node.kind == "extract":
            value, role = g.inputs[node.input]
            idx = ", ".join(self.ivs[i] for i in role.outer)
            w.emit(f"{name} = tensor.extract %t{node.input}[{idx}] : {self.view_type(node.input)}")
        elif node.kind == "op":
            args = [self.scalar(a) for a in node.operands]
            types = [a.type for a in node.operands]
            attrs = f" {{{node.attrs}}}" if node.attrs else ""
            w.emit(f'{name} = "{node.text}"({", ".join(args)}){attrs} : ({", ".join(types)}) -> {node.type}')
        else:
            raise AssertionError(node.kind)
        if node.shape == "uniform":
            self.memo[key] = name  # visible everywhere
        else:
            self.remember(key, name)
        return name

    def vector(self, node: Node, copy, offset: str, tail: bool) -> str:
        """An elementwise node's vector at row offset `offset` (copy: memo key of this position)."""
        lanes = self.g.lanes
        if node.shape != "elem":
            key = (node, "splat")
            found = self.lookup(key)
            if found is None:
                found = self.splat(self.scalar(node), node.type, lanes)
                self.remember(key, found)
            return found
        key = (node, copy)
        found = self.lookup(key)
        if found is not None:
            return found
        name = self.w.fresh("e")
        vt = _vt(lanes, node.type)
        in_bounds = "false" if tail else "true"
        if node.kind == "input":
            role = self.g.inputs[node.input][1]
            idx = ", ".join([self.ivs[i] for i in role.outer] + [offset])
            pad = "0.0" if node.type.startswith(("f", "bf")) else "0"
            if node.type != "i1":
                padv = self.w.fresh("p")
                self.w.emit(f"{padv} = arith.constant {pad} : {node.type}")
            if node.type == "i1":  # read as the bytes it is stored in (see `function`)
                wide, padv = self.w.fresh("e"), self.w.fresh("p")
                self.w.emit(f"{padv} = arith.constant 0 : i8")
                self.w.emit(f"{wide} = vector.transfer_read %t{node.input}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                            f"{self.view_type(node.input, 'i8')}, {_vt(lanes, 'i8')}")
                self.w.emit(f"{name} = arith.trunci {wide} : {_vt(lanes, 'i8')} to {vt}")
            else:
                self.w.emit(f"{name} = vector.transfer_read %t{node.input}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                            f"{self.view_type(node.input)}, {vt}")
        elif node.kind == "cached":
            out = node.input
            idx = ", ".join(list(self.ivs) + [offset])
            padv = self.w.fresh("p")
            self.w.emit(f"{padv} = arith.constant 0.0 : f32")
            self.w.emit(f"{name} = vector.transfer_read {self.tensors[out]}[{idx}], {padv} {{in_bounds = [{in_bounds}]}} : "
                        f"{self.out_view_type(out)}, {vt}")
        else:
            raise AssertionError(node.kind)
        self.remember(key, name)
        return name

    def view_type(self, i: int, elem: str = "") -> str:
        value, role = self.g.inputs[i]
        ir = _ir()
        elem = elem or str(ir.RankedTensorType(value.type).element_type)
        return _tt(role.shape(self.g.sizes, self.g.n), elem)

    def out_view_type(self, k: int) -> str:
        ir = _ir()
        r, _, role = self.g.outputs[k]
        return _tt(role.shape(self.g.sizes, self.g.n), str(ir.RankedTensorType(r.type).element_type))

    # -- planning
    def plan(self):
        """Passes: reductions by the pass that accumulates them, outputs by the pass that writes
        them, elementwise values a later pass needs again (kept in an output's row or recomputed)."""
        g = self.g
        reduces = []
        seen = set()

        def collect(node):
            if node in seen:
                return
            seen.add(node)
            for a in node.operands:
                collect(a)
            if node.kind == "reduce":
                reduces.append(node)

        for _, node, _ in g.outputs:
            collect(node)
        for r in reduces:
            r.pass_ = r.level - 1
        full_outputs = [k for k, (_, node, role) in enumerate(g.outputs) if role.row]
        last = max([r.pass_ for r in reduces] + [g.outputs[k][1].level for k in full_outputs], default=-1)
        writes = {k: g.outputs[k][1].level for k in full_outputs}
        self.reduces = reduces
        self.writes = writes
        self.last = last
        # values needed again in a later pass: the expensive ones are kept in the row of an output
        # the last pass writes (one value per output), the others recomputed
        self.cache = {}  # node -> output index
        free = [k for k in full_outputs if writes[k] == last]
        for p in range(last + 1):
            roots = [r.operands[0] for r in reduces if r.pass_ == p] + \
                [g.outputs[k][1] for k in full_outputs if writes[k] == p]
            stack, visited = list(roots), set()
            while stack:
                node = stack.pop()
                if node in visited or node.shape != "elem":
                    continue
                visited.add(node)
                if node.level < p and node in self.cache:
                    continue
                if node.level < p and free and (node.ops > g.recompute_ops or node.expensive):
                    self.cache[node] = free.pop(0)
                    continue
                stack.extend(node.operands)
        return self

    # -- emission
    def function(self, name: str) -> str:
        g = self.g
        self.plan()
        ir = _ir()
        args = [f"%in{i}: {v.type}" for i, (v, _) in enumerate(g.inputs)] + \
            [f"%a{i}: {v.type}" for i, v in enumerate(g.args)]
        results = [str(g.final(r).type) for r, _, _ in g.outputs]
        pre = _Writer()
        pre.counter = 1 << 24
        for i, (value, role) in enumerate(g.inputs):
            src = list(ir.RankedTensorType(value.type).shape)
            elem = str(ir.RankedTensorType(value.type).element_type)
            view = role.shape(g.sizes, g.n)
            if elem == "i1" and role.row:
                # A bool tensor holds one byte per element, a vector<Nxi1> load reads N bits: the
                # rows read as vectors are widened to i8 first (what the kernel loads, then truncates).
                _reshape(pre, f"%in{i}", src, view, elem, f"%b{i}")
                ids = ", ".join(f"d{d}" for d in range(len(view)))
                amap = f"affine_map<({ids}) -> ({ids})>"
                its = ", ".join(['"parallel"'] * len(view))
                pre.emit(f"%be{i} = tensor.empty() : {_tt(view, 'i8')}")
                pre.emit(f"%t{i} = linalg.generic {{indexing_maps = [{amap}, {amap}], iterator_types = [{its}]}} "
                         f"ins(%b{i} : {_tt(view, 'i1')}) outs(%be{i} : {_tt(view, 'i8')}) {{")
                pre.emit("^bb0(%x: i1, %y: i8):")
                pre.emit("  %z = arith.extui %x : i1 to i8")
                pre.emit("  linalg.yield %z : i8")
                pre.emit(f"}} -> {_tt(view, 'i8')}")
                continue
            _reshape(pre, f"%in{i}", src, view, elem, f"%t{i}")
        for k, (r, node, role) in enumerate(g.outputs):
            pre.emit(f"%o{k} = tensor.empty() : {self.out_view_type(k)}")
            self.tensors[k] = f"%o{k}"
        # the row loops
        w = self.w
        loop_results = []
        carried = list(range(len(g.outputs)))
        for d, size in enumerate(g.sizes):
            iv = f"%r{d}"
            res = w.fresh("rows")
            inits = ", ".join(f"%x{d}_{k} = {self.tensors[k]}" for k in carried)
            types = ", ".join(self.out_view_type(k) for k in carried)
            w.emit(f"{res}:{len(carried)} = scf.for {iv} = {self.index(0)} to {self.index(size)} step {self.index(1)} "
                   f"iter_args({inits}) -> ({types}) {{")
            loop_results.append(res)
            for k in carried:
                self.tensors[k] = f"%x{d}_{k}"
            self.ivs.append(iv)
        self.push()
        for p in range(self.last + 1):
            self.emit_pass(p)
        # per-row outputs
        for k, (r, node, role) in enumerate(g.outputs):
            if not role.row:
                s = self.scalar(node)
                new = w.fresh("ins")
                idx = ", ".join(self.ivs)
                w.emit(f"{new} = tensor.insert {s} into {self.tensors[k]}[{idx}] : {self.out_view_type(k)}")
                self.tensors[k] = new
        self.pop()
        for d in reversed(range(len(g.sizes))):
            w.emit(f"scf.yield {', '.join(self.tensors[k] for k in carried)} : "
                   f"{', '.join(self.out_view_type(k) for k in carried)}")
            attrs = f" {{{THREAD_SPLIT}}}" if d == 0 else ""
            w.emit("}" + attrs)
            for k in carried:
                self.tensors[k] = f"{loop_results[d]}#{k}"
        post = _Writer()
        post.counter = 1 << 26
        outs = []
        for k, (r, node, role) in enumerate(g.outputs):
            dst = list(ir.RankedTensorType(g.final(r).type).shape)
            elem = str(ir.RankedTensorType(r.type).element_type)
            outs.append(_reshape(post, self.tensors[k], role.shape(g.sizes, g.n), dst, elem, f"%res{k}"))
        lines = [f"func.func private @{name}({', '.join(args)}) -> ({', '.join(results)}) {{"]
        lines += pre.lines + self.top.lines + w.lines + post.lines
        lines.append(f"  return {', '.join(outs)} : {', '.join(results)}")
        lines.append("}")
        return "\n".join(lines)

    def emit_pass(self, p: int) -> None:
        g, w = self.g, self.w
        lanes, unroll = g.lanes, g.unroll
        reduces = [r for r in self.reduces if r.pass_ == p]
        stores = [(node, k) for node, k in self.cache.items() if node.level == p]
        writes = [(g.outputs[k][1], k) for k, wp in self.writes.items() if wp == p]
        if not (reduces or stores or writes):
            return
        written = sorted({k for _, k in stores} | {k for _, k in writes})
        full, tail = divmod(g.n, lanes)
        steps, rest = divmod(full, unroll)
        idents = {}
        for r in reduces:
            ident = w.fresh("id")
            w.emit(f"{ident} = arith.constant dense<{_f(COMBINERS[r.combiner])}> : {_vt(lanes, r.type)}")
            idents[r] = ident
        # scalar values this pass needs, hoisted out of its loop
        self.hoist([r.operands[0] for r in reduces] + [n for n, _ in stores] + [n for n, _ in writes], p)
        accs = {(r, u): idents[r] for r in reduces for u in range(min(unroll, max(full, 1)))}
        nans = [r for r in reduces if r.combiner in NAN_TRACKED]
        if nans:
            clear = w.fresh("nan")
            w.emit(f"{clear} = arith.constant dense<false> : {_vt(lanes, 'i1')}")
            accs.update({(r, u, "nan"): clear for r in nans for u in range(min(unroll, max(full, 1)))})
        if steps:
            res = w.fresh("pass")
            acc_keys = [(r, u) for r in reduces for u in range(unroll)] + \
                [(r, u, "nan") for r in nans for u in range(unroll)]
            names = [f"%acc{p}_{i}" for i in range(len(acc_keys))]
            tnames = [f"%w{p}_{k}" for k in written]
            inits = [f"{n} = {accs[key]}" for n, key in zip(names, acc_keys)] + \
                [f"{n} = {self.tensors[k]}" for n, k in zip(tnames, written)]
            types = [_vt(lanes, "i1" if len(key) == 3 else key[0].type) for key in acc_keys] + \
                [self.out_view_type(k) for k in written]
            j = f"%j{p}"
            w.emit(f"{res}:{len(types)} = scf.for {j} = {self.index(0)} to {self.index(steps * unroll * lanes)} "
                   f"step {self.index(unroll * lanes)} iter_args({', '.join(inits)}) -> ({', '.join(types)}) {{")
            for n, k in zip(tnames, written):
                self.tensors[k] = n
            inner = dict(zip(acc_keys, names))
            self.push()
            for u in range(unroll):
                off = w.fresh("j")
                w.emit(f"{off} = arith.addi {j}, {self.index(u * lanes)} : index")
                self.step(("u", p, u), off, False, reduces, stores, writes, inner, u, p)
            self.pop()
            w.emit(f"scf.yield {', '.join([inner[key] for key in acc_keys] + [self.tensors[k] for k in written])} : "
                   f"{', '.join(types)}")
            w.emit("}")
            for i, key in enumerate(acc_keys):
                accs[key] = f"{res}#{i}"
            for i, k in enumerate(written):
                self.tensors[k] = f"{res}#{len(acc_keys) + i}"
        for i in range(rest):
            off = self.index((steps * unroll + i) * lanes)
            self.push()
            self.step(("l", p, i), off, False, reduces, stores, writes, accs, i, p)
            self.pop()
        if tail:
            off = self.index(full * lanes)
            self.push()
            self.step(("t", p), off, True, reduces, stores, writes, accs, 0, p)
            self.pop()
        for r in reduces:
            parts = [accs[(r, u)] for u in range(unroll) if (r, u) in accs]
            while len(parts) > 1:
                nxt = []
                for a, b in zip(parts[::2], parts[1::2]):
                    nxt.append(_combine(w, r.combiner, a, b, _vt(lanes, r.type)))
                if len(parts) % 2:
                    nxt.append(parts[-1])
                parts = nxt
            v, width = parts[0], lanes
            while width > 1:
                half = width // 2
                lo, hi = w.fresh("lo"), w.fresh("hi")
                w.emit(f"{lo} = vector.extract_strided_slice {v} {{offsets = [0], sizes = [{half}], strides = [1]}} : "
                       f"{_vt(width, r.type)} to {_vt(half, r.type)}")
                w.emit(f"{hi} = vector.extract_strided_slice {v} {{offsets = [{half}], sizes = [{half}], strides = [1]}} : "
                       f"{_vt(width, r.type)} to {_vt(half, r.type)}")
                v, width = _combine(w, r.combiner, lo, hi, _vt(half, r.type)), half
            s = w.fresh("red")
            w.emit(f"{s} = vector.extract {v}[0] : {r.type} from {_vt(1, r.type)}")
            if r.combiner in NAN_TRACKED:  # a NaN anywhere in the row is the result
                flags = [accs[(r, u, "nan")] for u in range(unroll) if (r, u, "nan") in accs]
                while len(flags) > 1:
                    merged = w.fresh("nan")
                    w.emit(f"{merged} = arith.ori {flags[0]}, {flags[1]} : {_vt(lanes, 'i1')}")
                    flags = [merged] + flags[2:]
                anynan, nanv, fixed = w.fresh("nan"), w.fresh("nan"), w.fresh("red")
                w.emit(f"{anynan} = vector.reduction <or>, {flags[0]} : {_vt(lanes, 'i1')} into i1")
                w.emit(f"{nanv} = arith.constant 0x7FC00000 : f32")
                w.emit(f"{fixed} = arith.select {anynan}, {nanv}, {s} : f32")
                s = fixed
            init = self.scalar(r.operands[1])
            total = w.fresh("red")
            w.emit(f'{total} = "{r.combiner}"({init}, {s}) : ({r.type}, {r.type}) -> {r.type}')
            self.remember((r, None), total)

    def hoist(self, roots: list, p: int) -> None:
        """Emit the scalar operands (and their splats) of the elementwise nodes under `roots` now."""
        seen = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.shape != "elem":
                self.vector(node, None, "", False)  # the splat
                continue
            if node in self.cache and node.level < p:
                continue
            stack.extend(node.operands)

    def step(self, copy, offset, tail, reduces, stores, writes, accs, slot, p) -> None:
        """One vector position of a pass: accumulate, then store (every read before any write)."""
        g, w = self.g, self.w
        lanes = g.lanes
        values = {}
        for r in reduces:
            values[r] = self.value_at(r.operands[0], copy, offset, tail, p)
        for node, k in stores + writes:
            values[(node, k)] = self.value_at(node, copy, offset, tail, p)
        mask = None
        if tail and reduces:
            mask = w.fresh("m")
            w.emit(f"{mask} = vector.constant_mask [{g.n % lanes}] : {_vt(lanes, 'i1')}")
        for r in reduces:
            v = values[r]
            if mask is not None:
                ident = w.fresh("id")
                w.emit(f"{ident} = arith.constant dense<{_f(COMBINERS[r.combiner])}> : {_vt(lanes, r.type)}")
                sel = w.fresh("sel")
                w.emit(f"{sel} = arith.select {mask}, {v}, {ident} : {_vt(lanes, 'i1')}, {_vt(lanes, r.type)}")
                v = sel
            accs[(r, slot)] = _combine(w, r.combiner, accs[(r, slot)], v, _vt(lanes, r.type))
            if r.combiner in NAN_TRACKED:
                nan, new = w.fresh("nan"), w.fresh("nan")
                w.emit(f"{nan} = arith.cmpf uno, {v}, {v} : {_vt(lanes)}")
                w.emit(f"{new} = arith.ori {accs[(r, slot, 'nan')]}, {nan} : {_vt(lanes, 'i1')}")
                accs[(r, slot, "nan")] = new
        in_bounds = "false" if tail else "true"
        for node, k in stores + writes:
            new = w.fresh("wr")
            idx = ", ".join(list(self.ivs) + [offset])
            w.emit(f"{new} = vector.transfer_write {values[(node, k)]}, {self.tensors[k]}[{idx}] "
                   f"{{in_bounds = [{in_bounds}]}} : {_vt(lanes)}, {self.out_view_type(k)}")
            self.tensors[k] = new

    def value_at(self, node, copy, offset, tail, p) -> str:
        """`vector`, reading values kept from an earlier pass from their output row."""
        if node.shape == "elem" and node in self.cache and node.level < p:
            key = (node, copy)
            found = self.lookup(key)
            if found is not None:
                return found
            k = self.cache[node]
            read = Node("cached", "elem", "f32", input=k)
            name = self.vector(read, copy, offset, tail)
            self.remember(key, name)
            return name
        if node.shape == "elem" and node.kind == "op" and node.text == "broadcast":
            return self.value_at(node.operands[0], copy, offset, tail, p)
        if node.shape != "elem" or node.kind != "op":
            return self.vector(node, copy, offset, tail)
        key = (node, copy)
        found = self.lookup(key)
        if found is not None:
            return found
        lanes = self.g.lanes
        args = [self.value_at(a, copy, offset, tail, p) for a in node.operands]
        types = [_vt(lanes, a.type) for a in node.operands]
        attrs = f" {{{node.attrs}}}" if node.attrs else ""
        name = self.w.fresh("e")
        self.w.emit(f'{name} = "{node.text}"({", ".join(args)}){attrs} : ({", ".join(types)}) -> {_vt(lanes, node.type)}')
        self.remember(key, name)
        return name


# max/min that propagate NaN: combined lane-wise as a compare and a select (one vmaxps), their NaN
# lanes tracked in a mask accumulator (LLVM's lowering of a NaN-propagating max is five instructions)
NAN_TRACKED = {"arith.maximumf": "ogt", "arith.minimumf": "olt"}


def _combine(w: _Writer, combiner: str, a: str, b: str, vt: str) -> str:
    """`a` combined with `b` (vectors of type `vt`); max/min without their NaN rule (see NAN_TRACKED)."""
    name = w.fresh("c")
    if combiner in NAN_TRACKED:
        cmp = w.fresh("gt")
        w.emit(f"{cmp} = arith.cmpf {NAN_TRACKED[combiner]}, {a}, {b} : {vt}")
        w.emit(f"{name} = arith.select {cmp}, {a}, {b} : {vt.replace('xf32', 'xi1')}, {vt}")
    else:
        w.emit(f'{name} = "{combiner}"({a}, {b}) : ({vt}, {vt}) -> {vt}')
    return name


def _reassociation(big: list, small: list):
    """Groups of consecutive dims of `big` whose products are the dims of `small` (unit dims joining
    a neighbour's group), or None."""
    if not small:
        return [] if all(d == 1 for d in big) else None
    groups, i = [], 0
    for size in small:
        group, product = [], 1
        while i < len(big) and (product != size or (not group)):
            group.append(i)
            product *= big[i]
            i += 1
            if product == size and size != 1:
                break
        if product != size:
            return None
        groups.append(group)
    while i < len(big):  # trailing unit dims join the last group
        if big[i] != 1:
            return None
        groups[-1].append(i)
        i += 1
    return groups


def _reshape(w: _Writer, value: str, src: list, dst: list, elem: str, name: str) -> str:
    """`value` (static shape `src`) as shape `dst` (same elements, same order)."""
    if src != dst and len(src) > len(dst) > 0:
        groups = _reassociation(src, dst)
        if groups is not None:
            w.emit(f"{name} = tensor.collapse_shape {value} {groups} : {_tt(src, elem)} into {_tt(dst, elem)}")
            return name
    if src != dst and len(dst) > len(src) > 0:
        groups = _reassociation(dst, src)
        if groups is not None:
            w.emit(f"{name} = tensor.expand_shape {value} {groups} output_shape [{', '.join(map(str, dst))}] : "
                   f"{_tt(src, elem)} into {_tt(dst, elem)}")
            return name
    if src == dst:
        w.emit(f"{name} = tensor.cast {value} : {_tt(src, elem)} to {_tt(dst, elem)}")
        return name
    current, shape = value, src
    if len(shape) == 0:
        w.emit(f"{name} = tensor.expand_shape {value} [] output_shape [{', '.join(map(str, dst))}] : "
               f"{_tt(src, elem)} into {_tt(dst, elem)}")
        return name
    if len(dst) == 0:
        w.emit(f"{name} = tensor.collapse_shape {value} [] : {_tt(src, elem)} into {_tt(dst, elem)}")
        return name
    numel = math.prod(src)
    if len(shape) > 1:
        flat = w.fresh("flat") if len(dst) > 1 else name
        group = ", ".join(str(i) for i in range(len(shape)))
        w.emit(f"{flat} = tensor.collapse_shape {current} [[{group}]] : {_tt(shape, elem)} into {_tt([numel], elem)}")
        current, shape = flat, [numel]
    if len(dst) > 1:
        group = ", ".join(str(i) for i in range(len(dst)))
        w.emit(f"{name} = tensor.expand_shape {current} [[{group}]] output_shape [{', '.join(map(str, dst))}] : "
               f"{_tt(shape, elem)} into {_tt(dst, elem)}")
        return name
    if current != name:
        w.emit(f"{name} = tensor.cast {current} : {_tt(shape, elem)} to {_tt(dst, elem)}")
    return name


# ------------------------------------------------------------------ the pass


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
        from etc.targets.cpu import decisions
        from etc.targets.cpu.gemm import is_contraction
        from etc.targets.cpu.passes._util import entry_function

        lanes = self.options.lanes
        if lanes < 1 or lanes & (lanes - 1):
            raise self.error(f"{self.name}: lanes must be a power of two, got {lanes}", at=op)
        if self.options.unroll < 1:
            raise self.error(f"{self.name}: unroll must be at least 1", at=op)
        fn = entry_function(op)
        block = fn.regions[0].blocks[0]
        ops = [_op(o) for o in block.operations]
        rows = {}
        for o in ops:
            if o.name != "linalg.generic" or decisions.DECIDED in o.attributes:
                continue
            kinds = _iterators(o)
            is_reduction = "reduction" in kinds
            if is_reduction and (kinds[-1] != "reduction" or is_contraction(o)):
                continue  # a column reduction or a contraction: not a row
            try:
                rows[o] = _classify(o)
            except NotTaken as reason:
                if is_reduction:
                    self.decide(o, "loops", str(reason))
        # groups: row ops linked through their values (directly or through reshapes), same rows
        for members in _components([rows[o] for o in ops if o in rows]):
            if any(r.reduction for r in members):  # elementwise only: the default loops
                self.take(members, block)

    def decide(self, op, path: str, reason: str = "") -> None:
        from etc.targets.cpu import decisions

        ir = _ir()
        decisions.record(op, "reduction", path, reason)
        if path != "row-reduction":
            op.attributes[decisions.DECIDED] = ir.UnitAttr.get(op.context)

    def take(self, members: list, block) -> None:
        position = {_op(o): i for i, o in enumerate(block.operations)}
        ops = [r.op for r in members]
        members_set = set(ops)
        last = max(ops, key=lambda o: position[o])

        def external_users(value, out):
            for use in value.uses:
                user = _op(use.owner)
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

        # An op outside the group using a result before the group's last op (a GEMM between two
        # norms on the same rows) would read the kernel before it runs: the ops before that use
        # and the ops after it are separate groups.
        between = [position.get(user, 1 << 30) for o in ops for r in o.results for user in external_users(r, [])
                   if user.parent == last.parent and position.get(user, 1 << 30) < position[last]]
        if between:
            cut = min(between)
            for part in ([r for r in members if position[r.op] < cut], [r for r in members if position[r.op] > cut]):
                for piece in _components(part):
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
            self.splice(group, text, last)
        except Exception as exc:  # noqa: BLE001 - a rewrite that started must not fail silently
            raise self.error(f"{self.name}: building the row kernel failed: {exc}\n{text}", at=last) from exc
        self.count("taken")

    def splice(self, group: Group, text: str, anchor) -> None:
        ir = _ir()
        holder = ir.Module.parse(text, anchor.context)
        fn = holder.body.operations[0]
        entry = fn.regions[0].blocks[0]
        body = list(entry.operations)
        location = anchor.location

        def relocate(inner):
            inner.location = location
            return ir.WalkResult.ADVANCE

        for inner in body[:-1]:
            inner.operation.move_before(anchor)
            inner.operation.walk(relocate)
        actual = [v for v, _ in group.inputs] + list(group.args)
        for arg, value in zip(entry.arguments, actual):
            arg.replace_all_uses_with(value)
        results = list(body[-1].operands)
        for (r, _, _), new in zip(group.outputs, results):
            final = group.final(r)
            final.replace_all_uses_with(new)
            if final != r:
                for use in list(r.uses):
                    _op(use.owner).erase()
        producers = []
        for o in group.ops:
            for v in o.operands:
                owner = _owner(v)
                if owner is not None and owner not in producers and _source(v) not in group.results:
                    producers.append(owner)
        for o in reversed(group.ops):
            _erase_with_reshapes(o)
        _erase_dead(producers)


def _components(members: list) -> list:
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
            if k < _n_inputs(row.op) and row.roles[k] is None:
                continue
            j = index.get(_owner(_source(value)))
            if j is None:
                continue
            other = members[j]
            if other.sizes == row.sizes and (other.n == row.n or 1 in (other.n, row.n)):
                parent[find(i)] = find(j)
    groups: dict = {}
    for i, row in enumerate(members):
        groups.setdefault(find(i), []).append(row)
    return list(groups.values())


def _erase_with_reshapes(op) -> None:
    """Erase `op` and the reshapes of its results that only fed erased ops."""
    for r in op.results:
        for use in list(r.uses):
            user = _op(use.owner)
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
            if owner.name == "linalg.generic" and _uniform_fill(owner.results[0]) is None:
                continue
            for v in owner.operands:
                inner = _owner(v)
                if inner is not None and inner not in alive:
                    alive.append(inner)
            alive.remove(owner)
            owner.erase()
            changed = True
