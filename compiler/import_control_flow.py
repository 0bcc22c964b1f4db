"""Import torch's control-flow higher-order ops as MLIR structured control flow.

    torch.ops.higher_order.cond(pred, true_gm, false_gm, operands)
        -> %p = tensor.extract %pred[] : tensor<i1>
           %r:n = scf.if %p -> (...) { <true_gm's nodes>; scf.yield } else { <false_gm's>; scf.yield }
    torch.ops.higher_order.while_loop(cond_gm, body_gm, carried, additional)
        -> %r:n = scf.while (%c = carried...) : (...) -> (...) {
             <cond_gm's nodes>; %p = tensor.extract ...; scf.condition(%p) %c...   // forwards the carries
           } do { ^bb(%c...): <body_gm's nodes>; scf.yield %new... }

Why `scf` and not ops of our own: its verifiers already check what matters
here (yield types equal the results, the condition forwards the carried types),
canonicalize/cse/dce understand its regions, and `etc-opt` prints it. The
subgraphs' placeholders are bound straight to the operands (and, for
while_loop, the additional inputs to the outer values): regions read values
from above. The predicate stays a bool *tensor* until `tensor.extract`, which
the emitter maps back onto the tensor, because ExecuTorch's JumpFalseCall tests
a bool tensor (all elements true) directly.

A cond on sizes (`x.shape[0] > 4` under a Dim) has an `arith.cmpi` on `index` as its
predicate. Restrictions, each a located UnsupportedConstructError: predicates are bool
tensors or size comparisons; while_loop carries tensors (not
Python ints); a branch or body output has exactly the type of the result it
becomes (torch.export already requires the same shape and dtype). `map` and
`scan` are refused with the same kind of error.
"""

from __future__ import annotations

import operator

import torch
from torch_mlir import ir
from torch_mlir.dialects import arith, scf, tensor as tensor_dialect

from etc.ir.dtypes import torch_dtype_name_of_element_type
from etc.ir.locations import node_location
from etc.ir.ops import as_operation

CONTROL_FLOW_TARGETS = {}  # HigherOrderOperator -> import function, filled below


def import_control_flow(importer, node: torch.fx.Node) -> bool:
    """Import `node` if it is a control-flow op etc handles; False otherwise."""
    handler = CONTROL_FLOW_TARGETS.get(node.target)
    if handler is None:
        return False
    handler(importer, node)
    return True


def _submodule(importer, node: torch.fx.Node, argument) -> torch.fx.GraphModule:
    owner = node.graph.owning_module
    if isinstance(argument, torch.fx.Node) and argument.op == "get_attr":
        module = getattr(owner, argument.target, None)
        if isinstance(module, torch.fx.GraphModule):
            return module
    raise importer._error(node, f"'{node.name}': expected a subgraph argument, got {argument!r}")


def import_subgraph(importer, node: torch.fx.Node, graph_module: torch.fx.GraphModule, inputs: list) -> list:
    """Import the nodes of a branch/body graph at the current insertion point,
    its placeholders bound to `inputs`; return its flattened outputs."""
    graph = graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise importer._error(node, f"'{node.name}': subgraph takes {len(placeholders)} inputs, "
                                    f"{len(inputs)} given")
    for placeholder, value in zip(placeholders, inputs):
        importer.values[placeholder] = value
    skipped = importer._skipped_nodes(graph)
    for inner in graph.nodes:
        if inner.op in ("placeholder", "output") or inner in skipped:
            continue
        importer._import_node(inner)
        _annotate_upper_bounds(importer, inner)
    output = graph.output_node()
    flat, _ = torch.utils._pytree.tree_flatten(output.args[0])
    values = []
    for item in flat:
        if not isinstance(item, torch.fx.Node):
            raise importer._error(node, f"'{node.name}': a branch returns the constant {item!r}; "
                                        "control-flow branches must return tensors")
        values.append(importer._value(item, output))
    return values


def _annotate_upper_bounds(importer, node: torch.fx.Node) -> None:
    """`etc.upper_bounds` on an op inside a region whose results have dynamic dims.

    to_edge annotates top-level ops by their FX node names after import; inside a
    branch the names repeat the main graph's (`add` in both), so the importer writes
    the bounds itself, from the traced shapes and the program's `Dim` ranges."""
    value = importer.values.get(node)
    first = value[0] if isinstance(value, list) and value else value
    if not isinstance(first, ir.Value) or isinstance(first.owner, ir.Block):
        return
    op = as_operation(first.owner)
    results = [r for r in op.results if isinstance(r.type, ir.RankedTensorType)]
    if not results or all(ir.RankedTensorType(r.type).has_static_shape for r in results):
        return
    traced = [t for t in torch.utils._pytree.tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)]
    if len(traced) != len(results):
        return
    flat = [upper for tensor in traced for _, upper in importer._dim_bounds(tensor)]
    op.attributes["etc.upper_bounds"] = ir.DenseI64ArrayAttr.get(flat)


def _tensor_operand(importer, node, value, what: str) -> ir.Value:
    if not isinstance(value, ir.Value) or not isinstance(value.type, ir.RankedTensorType):
        raise importer._error(node, f"'{node.name}': {what} must be a tensor, got {value!r} (etc imports "
                                    "control flow over tensors; make the value a tensor)")
    return value


# Comparisons of sizes (SymBool predicates) -> `arith.cmpi` on `index`; the emitter runs
# them as ExecuTorch's `executorch_prim::<op>.Scalar`, whose Bool result JumpFalseCall reads.
SIZE_COMPARISONS = {operator.eq: "eq", operator.lt: "slt", operator.le: "sle", operator.gt: "sgt",
                    operator.ge: "sge"}


def import_size_comparison(importer, node: torch.fx.Node) -> None:
    predicate = SIZE_COMPARISONS.get(node.target)
    if predicate is None or len(node.args) != 2:
        raise importer._error(node, f"the size condition '{node.name}' ({getattr(node.target, '__name__', node.target)}) "
                                    "is not supported; compare sizes with ==, <, <=, > or >=")
    location = node_location(node)
    lhs, rhs = (importer._index(argument, node, location) for argument in node.args)
    importer.values[node] = arith.CmpIOp(getattr(arith.CmpIPredicate, predicate), lhs, rhs, loc=location).result


def _predicate(importer, node, value, location) -> ir.Value:
    """A bool tensor of one element -> i1 (`tensor.extract`); a size comparison already is one."""
    if isinstance(value, ir.Value) and isinstance(value.type, ir.IntegerType) and value.type.width == 1:
        return value
    value = _tensor_operand(importer, node, value, "the predicate")
    ty = ir.RankedTensorType(value.type)
    if str(ty.element_type) != "i1" or not ty.has_static_shape or any(size != 1 for size in ty.shape):
        raise importer._error(node, f"'{node.name}': the predicate must be a one-element bool tensor, got {ty}")
    zero = [arith.ConstantOp(ir.IndexType.get(), 0, loc=location).result for _ in ty.shape]
    return tensor_dialect.ExtractOp(value, zero, loc=location).result


def _check_types(importer, node, values: list, types: list, what: str) -> None:
    got = [str(v.type) if isinstance(v, ir.Value) else str(v) if isinstance(v, ir.Type) else repr(v)
           for v in values]
    want = [str(t) for t in types]
    if got != want:
        raise importer._error(node, f"'{node.name}': {what} returns ({', '.join(got)}) but the op's results "
                                    f"are ({', '.join(want)}); both branches and the loop body must produce "
                                    "exactly the result types")


def import_cond(importer, node: torch.fx.Node) -> None:
    predicate, true_arg, false_arg, operands = node.args[:4]
    location = node_location(node)
    branches = [_submodule(importer, node, true_arg), _submodule(importer, node, false_arg)]
    if not isinstance(predicate, torch.fx.Node):
        raise importer._error(node, f"'{node.name}': the predicate is the constant {predicate!r}; "
                                    "torch.cond on a constant should have been specialized away")
    condition = _predicate(importer, node, importer._value(predicate, node), location)
    inputs = importer._value(list(operands), node)
    result_types = importer._result_types(node.meta.get("val"), node)
    if_op = scf.IfOp(condition, result_types, has_else=True, loc=location)
    for graph_module, block, label in zip(branches, (if_op.then_block, if_op.else_block), ("true", "false")):
        with ir.InsertionPoint(block):
            outputs = import_subgraph(importer, node, graph_module, inputs)
            _check_types(importer, node, outputs, result_types, f"the {label} branch")
            scf.YieldOp(outputs, loc=location)
    importer.values[node] = list(if_op.results)


def import_while_loop(importer, node: torch.fx.Node) -> None:
    cond_arg, body_arg, carried, additional = node.args[:4]
    location = node_location(node)
    cond_gm, body_gm = _submodule(importer, node, cond_arg), _submodule(importer, node, body_arg)
    inits = [_tensor_operand(importer, node, v, "every carried value") for v in importer._value(list(carried), node)]
    extra = importer._value(list(additional), node)
    types = [v.type for v in inits]
    _check_types(importer, node, importer._result_types(node.meta.get("val"), node), types, "the loop")
    while_op = scf.WhileOp(types, inits, loc=location)
    before = while_op.regions[0].blocks.append(*types, arg_locs=[location] * len(types))
    after = while_op.regions[1].blocks.append(*types, arg_locs=[location] * len(types))
    with ir.InsertionPoint(before):
        outputs = import_subgraph(importer, node, cond_gm, list(before.arguments) + list(extra))
        if len(outputs) != 1:
            raise importer._error(node, f"'{node.name}': the loop condition returns {len(outputs)} values, not one")
        scf.ConditionOp(_predicate(importer, node, outputs[0], location), list(before.arguments), loc=location)
    with ir.InsertionPoint(after):
        outputs = import_subgraph(importer, node, body_gm, list(after.arguments) + list(extra))
        _check_types(importer, node, outputs, types, "the loop body")
        scf.YieldOp(outputs, loc=location)
    importer.values[node] = list(while_op.results)


# ------------------------------------------------------------ map, scan
def _aten(target, arguments: dict, result_type, location) -> ir.Value:
    """One aten op built from `target`'s schema, defaults filled (as the importer does for FX nodes)."""
    from etc.dialects.aten import build_op

    schema = target._schema
    values = {}
    for argument in schema.arguments:
        if argument.name in arguments:
            values[argument.name] = arguments[argument.name]
        elif argument.has_default_value():
            values[argument.name] = argument.default_value
        else:
            values[argument.name] = None
    name = schema.name if target._overloadname == "default" else f"{schema.name}.{target._overloadname}"
    return build_op(name, values, [result_type], loc=location).results[0]


def _import_stacked_loop(importer, node, body_gm, inits: list, xs: list, additional: list, num_carries: int):
    """map / scan as an scf.while over i in [0, n): the body sees row i of every xs
    (index_select + view), its carries are carried, and each per-row output is written
    into row i of its stacked result (index_put). Returns the scf.while's results
    without the counter: the final carries, then the stacked outputs.

    ExecuTorch's emitter writes rows in place with its prim op `et_copy_index`; here the
    loop is made of Core ATen ops only, so it runs through the same planner, emitter and
    portable kernels as everything else (and on stock ExecuTorch), at the price of a copy
    of each stacked output per iteration."""
    location = node_location(node)
    xs = [_tensor_operand(importer, node, x, "every scanned input") for x in xs]
    shapes = [list(ir.RankedTensorType(x.type).shape) for x in xs]
    if not xs or any(not shape or shape[0] < 0 for shape in shapes) or len({shape[0] for shape in shapes}) != 1:
        shown = ", ".join("[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]" for shape in shapes)
        raise importer._error(node, f"'{node.name}': map/scan needs inputs with one static leading size, the "
                                    f"trip count (got {shown}); use torch.while_loop for a dynamic count")
    length = shapes[0][0]
    result_types = importer._result_types(node.meta.get("val"), node)
    stacked_types = result_types[num_carries:]
    i64 = ir.IntegerType.get_signless(64)
    counter_type = ir.RankedTensorType.get([1], i64)
    counter = _aten(torch.ops.aten.full.default, {"size": [1], "fill_value": 0, "dtype": torch.int64},
                    counter_type, location)
    stacked = []
    for ty in stacked_types:
        ty = ir.RankedTensorType(ty)
        if not ty.has_static_shape:
            raise importer._error(node, f"'{node.name}': map/scan outputs of dynamic shape ({ty}) are not supported")
        dtype = getattr(torch, torch_dtype_name_of_element_type(ty.element_type))
        stacked.append(_aten(torch.ops.aten.full.default, {"size": list(ty.shape), "fill_value": 0, "dtype": dtype},
                             ty, location))
    carried = [counter] + list(inits) + stacked
    types = [v.type for v in carried]
    while_op = scf.WhileOp(types, carried, loc=location)
    before = while_op.regions[0].blocks.append(*types, arg_locs=[location] * len(types))
    after = while_op.regions[1].blocks.append(*types, arg_locs=[location] * len(types))
    bool_type = ir.RankedTensorType.get([1], ir.IntegerType.get_signless(1))
    with ir.InsertionPoint(before):
        going = _aten(torch.ops.aten.lt.Scalar, {"self": before.arguments[0], "other": length}, bool_type, location)
        scf.ConditionOp(_predicate(importer, node, going, location), list(before.arguments), loc=location)
    with ir.InsertionPoint(after):
        index = after.arguments[0]
        rows = []
        for x, shape in zip(xs, shapes):
            element = ir.RankedTensorType(x.type).element_type
            picked = _aten(torch.ops.aten.index_select.default, {"self": x, "dim": 0, "index": index},
                           ir.RankedTensorType.get([1] + shape[1:], element), location)
            rows.append(_aten(torch.ops.aten.view.default, {"self": picked, "size": shape[1:]},
                              ir.RankedTensorType.get(shape[1:], element), location))
        carries = list(after.arguments[1: 1 + num_carries])
        outputs = import_subgraph(importer, node, body_gm, carries + rows + list(additional))
        _check_types(importer, node, outputs[:num_carries], [v.type for v in inits], "the combine function's carry")
        new_stacked = []
        for previous, row, ty in zip(after.arguments[1 + num_carries:], outputs[num_carries:], stacked_types):
            ty = ir.RankedTensorType(ty)
            if list(ir.RankedTensorType(row.type).shape) != list(ty.shape)[1:]:
                raise importer._error(node, f"'{node.name}': a per-row output is {row.type}, the stacked result {ty}")
            as_row = _aten(torch.ops.aten.view.default, {"self": row, "size": [1] + list(ty.shape)[1:]},
                           ir.RankedTensorType.get([1] + list(ty.shape)[1:], ty.element_type), location)
            new_stacked.append(_aten(torch.ops.aten.index_put.default,
                                     {"self": previous, "indices": [index], "values": as_row, "accumulate": False},
                                     ty, location))
        step = _aten(torch.ops.aten.add.Scalar, {"self": index, "other": 1}, counter_type, location)
        scf.YieldOp([step] + list(outputs[:num_carries]) + new_stacked, loc=location)
    return list(while_op.results)[1:]


def import_map(importer, node: torch.fx.Node) -> None:
    body_arg, xs, additional = node.args[:3]
    body = _submodule(importer, node, body_arg)
    importer.values[node] = _import_stacked_loop(importer, node, body, [], importer._value(list(xs), node),
                                                 importer._value(list(additional), node), 0)


def import_scan(importer, node: torch.fx.Node) -> None:
    combine_arg, init, xs, additional = node.args[:4]
    combine = _submodule(importer, node, combine_arg)
    inits = [_tensor_operand(importer, node, v, "every carry") for v in importer._value(list(init), node)]
    importer.values[node] = _import_stacked_loop(importer, node, combine, inits, importer._value(list(xs), node),
                                                 importer._value(list(additional), node), len(inits))


CONTROL_FLOW_TARGETS[torch.ops.higher_order.cond] = import_cond
CONTROL_FLOW_TARGETS[torch.ops.higher_order.while_loop] = import_while_loop
CONTROL_FLOW_TARGETS[torch.ops.higher_order.map_impl] = import_map
CONTROL_FLOW_TARGETS[torch.ops.higher_order.scan] = import_scan
