"""etc-cpu-edge-to-torch: the delegate function's edge ops -> torch-dialect ops of the same ATen name.

The first pass of the cpu pipeline. Its input is a module with one public `func.func` of edge
ops on builtin tensors (an outlined delegate function), the `ml_program.global`s it reads, and
the importer's `index` ops on symbolic sizes. The function is rebuilt on `!torch.vtensor`s:

  * each edge op becomes the torch op of its ATen name (`lowering/torch_ops.py`: its schema
    arguments as torch values, ADAPTERS for the overloads torch-mlir lacks; an op the torch
    dialect does not know is a `torch.operator` of its name, for a later pass of ours);
  * each constant it reads becomes a trailing argument, in first-use order, labelled
    `etc.cpu.arg = "constant:<global>"` (the data stays in the program's constant table; the
    globals go when nothing reads them: `symbol-dce`); the inputs are labelled `"input:<i>"`, all
    read-only (`bufferization.writable = false`), a dynamically shaped one with its `etc.dim_bounds`;
  * symbolic sizes become torch's int ops, a `torch.cond` branch (`scf.if`) a `torch.prim.If`;
  * the results' upper bounds go on the function (`etc.cpu.result_bounds`), what
    etc-cpu-dynamic-shapes falls back on.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.errors import LoweringError
from etc.ir.shapes import UPPER_BOUNDS_ATTR
from etc.passes.pass_api import Pass, register_pass
from etc.targets.cpu.entry_args import ARG_ATTR, entry_function
from etc.targets.cpu.lowering.context import load_torch
from etc.targets.cpu.lowering.torch_ops import (SIZE_OPS, TorchBuilder, adapt, dim_bounds, kept_results,
                                                result_bounds, size_value, torch_operation, vtensor_type)
from etc.targets.cpu.passes.dynamic_shapes import RESULT_BOUNDS_ATTR


@register_pass
class EdgeToTorch(Pass):
    """Rebuild the entry function on torch-dialect ops (see the module docstring)."""

    name = "etc-cpu-edge-to-torch"
    summary = "Edge ops -> torch-dialect ops of the same ATen name; constants -> labelled arguments"

    def run(self, module_op) -> None:
        load_torch(module_op.context)
        old = entry_function(module_op)
        with module_op.context, ir.Location.unknown():
            edge_to_torch(old)
        old.erase()


def edge_to_torch(func_op) -> None:
    """A torch-dialect copy of the edge function `func_op`, inserted in front of it (same name)."""
    from torch_mlir.dialects import func as func_d

    name = ir.StringAttr(func_op.attributes["sym_name"]).value
    block = func_op.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    # Constants nothing reads (a batch norm's num_batches_tracked) do not become arguments.
    loads = [op for op in ops if op.name == "ml_program.global_load_const" and any(True for _ in op.result.uses)]
    const_types: dict = {}
    for op in loads:
        const_types.setdefault(ir.FlatSymbolRefAttr(op.attributes["global"]).value, vtensor_type(op.result.type))
    ret = ops[-1]
    if ret.name != "func.return":
        raise LoweringError(f"delegate function {name} does not end in func.return")
    result_types = [vtensor_type(v.type) for v in ret.operands]
    input_types = [vtensor_type(a.type) for a in block.arguments]
    with ir.InsertionPoint(func_op):
        fn = func_d.FuncOp(name, ir.FunctionType.get(input_types + list(const_types.values()), result_types))
        entry = fn.add_entry_block()
    bounds = dim_bounds(func_op)
    labels = [{ARG_ATTR: ir.StringAttr.get(f"input:{i}")} for i in range(len(block.arguments))]
    labels += [{ARG_ATTR: ir.StringAttr.get(f"constant:{c}")} for c in const_types]
    for i, attrs in enumerate(labels):
        attrs["bufferization.writable"] = ir.BoolAttr.get(False)
        if i in bounds:
            attrs["etc.dim_bounds"] = ir.DenseI64ArrayAttr.get(bounds[i])
    fn.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in labels])
    results = [result_bounds(v) for v in ret.operands]
    if any(b is not None for b in results):
        fn.attributes[RESULT_BOUNDS_ATTR] = ir.ArrayAttr.get(
            [ir.DenseI64ArrayAttr.get([int(x) for x in (b or [])]) for b in results])
    tensors = dict(zip(block.arguments, entry.arguments))
    const_args = dict(zip(const_types, list(entry.arguments)[len(block.arguments):]))
    builder = TorchBuilder()
    with ir.InsertionPoint(entry):
        for op in ops:
            if op.name == "func.return":
                with op.location:
                    func_d.ReturnOp([tensors[v] for v in op.operands])
            else:
                _lower_op(op, tensors, builder, const_args)


def _lower_op(op, tensors: dict, builder: TorchBuilder, const_args: dict) -> None:
    """The torch form of one edge-function op at the current insertion point (its results into
    `tensors`); a branch (scf.if of torch.cond) recursively, as torch.prim.If."""
    from etc.dialects import decode_op

    with op.location:
        if op.name == "ml_program.global_load_const":
            sym = ir.FlatSymbolRefAttr(op.attributes["global"]).value
            if sym in const_args:
                tensors[op.result] = const_args[sym]
        elif op.name in SIZE_OPS:
            tensors[op.result] = size_value(op, builder, tensors)
        elif op.name == "tensor.extract":  # a 0-d bool tensor read as a branch condition
            tensors[op.result] = ir.Operation.create("torch.aten.Bool.Tensor", results=[ir.Type.parse("!torch.bool")],
                                                     operands=[tensors[op.operands[0]]]).result
        elif op.name == "scf.if":
            branch = ir.Operation.create("torch.prim.If", results=[vtensor_type(r.type) for r in op.results],
                                         operands=[tensors[op.operands[0]]], regions=2)
            for source, target in zip(op.regions, branch.regions):
                block = target.blocks.append()
                outer = builder.cache
                builder.cache = dict(outer)  # constants made inside stay inside
                with ir.InsertionPoint(block):
                    for inner in source.blocks[0].operations:
                        inner = inner.operation
                        if inner.name == "scf.yield":
                            with inner.location:
                                ir.Operation.create("torch.prim.If.yield",
                                                    operands=[tensors[v] for v in inner.operands])
                        else:
                            _lower_op(inner, tensors, builder, const_args)
                builder.cache = outer
            for old, new in zip(op.results, branch.results):
                tensors[old] = new
        elif op.name.startswith("edge."):
            info = type(op.opview).OP_INFO
            target, arguments, values = adapt(info, decode_op(op), op)
            operands = [builder.value(a, values.get(a.name), tensors) for a in arguments]
            kept = kept_results(info, op)
            rtypes = [vtensor_type(op.results[i].type) for i in kept]
            name, attributes = torch_operation(target, op.context)
            if UPPER_BOUNDS_ATTR in op.attributes and any(not ir.RankedTensorType(op.results[i].type).has_static_shape
                                                          for i in kept):
                # a dynamically shaped result keeps its bounds: an expansion over a dynamic dim reads them
                attributes = {**attributes, UPPER_BOUNDS_ATTR: op.attributes[UPPER_BOUNDS_ATTR]}
            if any(r["kind"] == "variadic_result" for r in info.returns):
                # A `Tensor[]` return is one !torch.list value in torch-mlir; unpack it.
                listed = ir.Operation.create(name, operands=operands, attributes=attributes,
                                             results=[ir.Type.parse("!torch.list<vtensor>")])
                new = ir.Operation.create("torch.prim.ListUnpack", results=rtypes, operands=[listed.result])
            else:
                new = ir.Operation.create(name, results=rtypes, operands=operands, attributes=attributes)
            for i, repl in zip(kept, new.results):
                tensors[op.results[i]] = repl
        else:
            raise LoweringError(f"'{op.name}' inside a cpu delegate has no lowering", location=str(op.location))
