"""Delegation: the Partitioner API and `to_backend`, shaped like ExecuTorch's.

A `Partitioner` looks at each method and says which ops a backend takes
(`partition()` returns `Partition`s, each with a `DelegationSpec`: backend id and
compile specs) and, for the report, why it left the others. `delegate()` then:

1. checks every partition is cycle-free (a partition that reaches itself through
   an op outside it cannot become one call) and splits it where it is not;
2. outlines each partition into a private `func.func`, its inputs the values it
   uses from outside and its outputs the values used after it; constants used
   only inside move with it (and so into its blob);
3. replaces the partition by one `backend.delegate` op and moves the ops that
   depended on it below the new call;
4. calls the backend's `preprocess(func, compile_specs, constants)` for the blob.

The API types (`Partitioner`, `CompileSpec`, `BackendDetails`, ...) are `partitioner.py`'s,
importable from here.

A partitioner never crashes the compile on an op it does not know: `supported_ops`
helpers wrap the check so that an exception means "not supported, here is why".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from etc.compiler.partitioner import (BACKENDS, IN_PLACE_OUTPUTS, BackendDetails, CapabilityPartitioner,  # noqa: F401
                                      CompileSpec, DelegationSpec, Partition, PartitionResult, Partitioner,
                                      PreprocessResult, group_cycle_free, public_functions, register_backend_details,
                                      worth_delegating)
from etc.errors import EtcError, LoweringError
from etc.ir.ops import as_operation, defining_op, user_op

__all__ = ["BACKENDS", "BackendDetails", "CapabilityPartitioner", "CompileSpec", "DelegationReport", "DelegationSpec",
           "IN_PLACE_OUTPUTS", "Partition", "PartitionResult", "Partitioner", "PreprocessResult", "SIZE_OPS", "delegate",
           "group_cycle_free", "outline", "partition_interface", "public_functions", "register_backend_details"]


# ---------------------------------------------------------------- outlining
@dataclass
class DelegationReport:
    """Per backend: which ops were delegated, which stayed on portable kernels and why."""

    backend_ids: set = field(default_factory=set)
    delegated: dict = field(default_factory=dict)  # op name -> count
    portable: dict = field(default_factory=dict)  # op name -> count
    reasons: dict = field(default_factory=dict)  # op name -> why it was not delegated
    partitions: int = 0
    backend_lines: dict = field(default_factory=dict)  # delegate function name -> the backend's report lines
    pipeline: str = ""  # what ran on the program before partitioning (`Partitioner.pipeline`)
    decisions: list = field(default_factory=list)  # the partitioner's (`PartitionResult.decisions`)

    def __str__(self) -> str:
        lines = [f"delegation to {', '.join(sorted(self.backend_ids)) or '(none)'}: "
                 f"{self.partitions} partition(s), {sum(self.delegated.values())} op(s) delegated, "
                 f"{sum(self.portable.values())} op(s) on portable kernels"]
        if self.pipeline:
            lines.append(f"  program pipeline: {self.pipeline}")
        lines.extend(f"  partitioner: {line}" for line in self.decisions)
        for name, count in sorted(self.delegated.items()):
            lines.append(f"  delegated  {name} x{count}")
        for name, count in sorted(self.portable.items()):
            why = self.reasons.get(name, "not in a partition")
            lines.append(f"  portable   {name} x{count}: {why}")
        for delegate_name, backend_lines in self.backend_lines.items():
            if backend_lines:
                lines.append(f"  inside {delegate_name}:")
                lines.extend(f"    {line}" for line in backend_lines)
        return "\n".join(lines)


def delegate(program_ir, partitioner: Partitioner) -> DelegationReport:
    """`to_backend`: outline the partitions and replace each by a `backend.delegate` call."""
    from torch_mlir import ir

    from etc.dialects.backend import DELEGATE_SLOTS

    if not isinstance(partitioner, Partitioner):
        raise EtcError(f"to_backend expects a Partitioner, got {type(partitioner).__name__}")
    if partitioner.pipeline:
        from etc.passes.pipeline import run_pipeline

        run_pipeline(program_ir.module, partitioner.pipeline)
    result = partitioner.partition(program_ir)
    result.partitions = [piece for partition in result.partitions for piece in _split_at_control_flow(partition)]
    report = DelegationReport(reasons=dict(result.rejected), pipeline=partitioner.pipeline or "",
                              decisions=list(result.decisions))
    if not hasattr(program_ir, "delegate_blobs"):
        program_ir.delegate_blobs = []
    if not hasattr(program_ir, "delegate_native"):  # by blob index, beside delegate_blobs
        program_ir.delegate_native = [None] * len(program_ir.delegate_blobs)
    delegated_ops = set()
    with program_ir.context, ir.Location.unknown():
        counter = _existing_delegate_count(program_ir.module)
        for partition in result.partitions:
            backend = BACKENDS.get(partition.spec.backend_id)
            if backend is None:
                raise LoweringError(f"no compile-time backend registered for '{partition.spec.backend_id}'")
            inputs, outputs = partition_interface(partition)
            if max(len(inputs), len(outputs)) > DELEGATE_SLOTS:
                why = (f"its partition has {len(inputs)} inputs and {len(outputs)} outputs; "
                       f"a delegate call takes at most {DELEGATE_SLOTS} of each")
                for op in partition.ops:
                    report.reasons.setdefault(op.name, why)
                continue
            for op in partition.ops:
                delegated_ops.add(op)
                report.delegated[op.name] = report.delegated.get(op.name, 0) + 1
            func_name = f"delegate_{partition.spec.backend_id}_{counter}"
            counter += 1
            outlined, call = outline(program_ir, partition, func_name, interface=(inputs, outputs))
            if getattr(backend, "in_place_state", False):
                _mark_in_place_outputs(outlined, call)
            processed = backend.preprocess(outlined, partition.spec.compile_specs, program_ir.constants)
            program_ir.delegate_blobs.append(bytes(processed.processed_bytes))
            program_ir.delegate_native.append(processed.native)  # what to_library builds from
            report.backend_lines[func_name] = list(processed.report_lines)
            call.attributes["etc.blob_index"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), len(program_ir.delegate_blobs) - 1)
            report.backend_ids.add(partition.spec.backend_id)
            report.partitions += 1
        for func in public_functions(program_ir.module):
            for op in func.regions[0].blocks[0].operations:
                name = op.operation.name
                if name.startswith("edge."):
                    report.portable[name] = report.portable.get(name, 0) + 1
                elif len(op.operation.regions):
                    _report_control_flow(report, op.operation)
    return report


# Control flow (scf.if / scf.while from torch.cond / torch.while_loop) stays outside delegates:
# the portable runtime runs it as jumps over one instruction list (compiler/emit_control_flow.py).
CONTROL_FLOW_REASON = ("control flow runs on the portable runtime as jumps (JumpFalseCall); "
                       "delegates take straight-line code")
NESTED_REASON = "inside a branch or loop body: stays on portable kernels with its control flow"


def _report_control_flow(report: DelegationReport, op) -> None:
    report.portable[op.name] = report.portable.get(op.name, 0) + 1
    report.reasons[op.name] = CONTROL_FLOW_REASON

    def count(nested):
        name = nested.name
        if name.startswith("edge."):
            key = f"{name} (in {op.name})"
            report.portable[key] = report.portable.get(key, 0) + 1
            report.reasons[key] = NESTED_REASON
        return _walk_advance()
    for region in op.regions:
        for block in region.blocks:
            for nested in block.operations:
                nested.operation.walk(count)


def _walk_advance():
    from torch_mlir import ir

    return ir.WalkResult.ADVANCE


def _split_at_control_flow(partition: Partition) -> list:
    """Split a partition at every region-holding op (scf.if, scf.while) between its members.

    Such an op reads values of the partition inside its regions without naming them
    as operands, so a partitioner that follows operands only may put ops before and
    after it into one partition: one call cannot run both before and after it.
    Pieces in program order are each cycle-free (a member-to-member path through an
    outside op stays within one piece or already crossed the split).
    """
    ops = partition.ops
    if len(ops) < 2:
        return [partition]
    block_ops = [o.operation for o in ops[0].block.operations]
    position = {op: i for i, op in enumerate(block_ops)}
    members = sorted(ops, key=lambda o: position.get(o, 0))
    loads = [op for op in members if op.name == "ml_program.global_load_const"]
    work = [op for op in members if op.name != "ml_program.global_load_const"] or members
    pieces, current = [], [work[0]]
    for previous, op in zip(work, work[1:]):
        between = block_ops[position[previous] + 1: position[op]]
        if any(len(o.regions) for o in between):
            pieces.append(current)
            current = []
        current.append(op)
    pieces.append(current)
    if len(pieces) == 1:
        return [partition]
    # A constant load goes with the first piece that uses it (not with the piece its position falls
    # in, which would hand the constant on from one delegate to the next as an output).
    piece_of = {op: i for i, piece in enumerate(pieces) for op in piece}
    for load in loads:
        if load in piece_of:
            continue
        users = [piece_of.get(user_op(use)) for result in load.results for use in result.uses]
        users = [i for i in users if i is not None]
        pieces[min(users) if users else 0].append(load)
    pieces = [sorted(piece, key=lambda o: position.get(o, 0)) for piece in pieces]
    return [Partition(ops=piece, spec=partition.spec) for piece in pieces if worth_delegating(piece)]


def _mark_in_place_outputs(outlined, call) -> None:
    """Let the delegate update mutable buffers in their own storage (etc-in-place-state, for a backend
    with `in_place_state`): for each buffer the method loads only as operand j of `call` and stores
    only from its result k (`passes/in_place_state.buffer_updates`), where inside the partition
    argument j is read by nothing but the `self` of the index_put returned as output k. The outlined
    function gets `etc.in_place_outputs = array<i64: k, j, ...>` (result k is computed in argument
    j's memory, for the backend), the call `etc.in_place_state` (for the planner and the emitter,
    which pass the buffer as both and copy nothing back)."""
    from torch_mlir import ir

    from etc.passes.in_place_state import ATTRIBUTE, IN_PLACE_OPS, buffer_updates, state_attribute

    method = call.operation.parent
    entry = outlined.regions[0].blocks[0]
    returned = list(list(entry.operations)[-1].operands)
    symbols, pairs = [None] * len(call.results), []
    for symbol, old, new in buffer_updates(method):
        if defining_op(new) != call.operation:
            continue
        (use,) = list(old.uses)
        if user_op(use) != call.operation:
            continue
        j, k = use.operand_number, ir.OpResult(new).result_number
        arg_uses = list(entry.arguments[j].uses)
        if len(arg_uses) != 1 or arg_uses[0].operand_number != 0 or user_op(arg_uses[0]).name not in IN_PLACE_OPS:
            continue
        update = user_op(arg_uses[0]).results[0]
        if [n for n, v in enumerate(returned) if v == update] != [k]:
            continue
        symbols[k] = symbol
        pairs += [k, j]
    if pairs:
        outlined.attributes[IN_PLACE_OUTPUTS] = ir.DenseI64ArrayAttr.get(pairs)
        call.attributes[ATTRIBUTE] = state_attribute(symbols)


def _existing_delegate_count(module) -> int:
    return sum(1 for op in module.body.operations
               if op.operation.name == "func.func" and "delegate_" in str(op.attributes["sym_name"]))


def outline(program_ir, partition: Partition, func_name: str, interface=None):
    """Move `partition.ops` into a private function; return (func op, backend.delegate op).
    `interface`: the partition's (inputs, outputs) when the caller already has them."""
    from torch_mlir import ir
    from torch_mlir.dialects import func as func_d

    ops = partition.ops
    inputs, outputs = interface or partition_interface(partition)
    sizes, inputs = _size_computations(inputs, set(ops))
    module = program_ir.module
    with ir.InsertionPoint(module.body):
        ftype = ir.FunctionType.get([v.type for v in inputs], [v.type for v in outputs])
        fn = func_d.FuncOp(func_name, ftype)
        fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
        entry = fn.add_entry_block()
    _record_bounds(fn, inputs)
    mapping = {v: entry.arguments[i] for i, v in enumerate(inputs)}
    with ir.InsertionPoint(entry):
        for op in sizes + ops:
            clone = op.clone()
            for i, v in enumerate(op.operands):
                if v in mapping:
                    clone.operands[i] = mapping[v]
            if len(op.regions):  # a branch's ops read the method's values directly
                for inner in _nested(clone):
                    for i, v in enumerate(inner.operands):
                        if v in mapping:
                            inner.operands[i] = mapping[v]
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
        func_d.ReturnOp([mapping[v] for v in outputs])

    # The call goes where the last member was; ops between the members that
    # depend on them move below it (there is no cycle, so none of them feeds the call).
    last = ops[-1]
    from etc.ir.shapes import UPPER_BOUNDS_ATTR, upper_bounds
    from etc.dialects.backend import delegate as delegate_op

    specs = {s.key: s.value.decode("latin-1") if isinstance(s.value, bytes) else str(s.value)
             for s in partition.spec.compile_specs}
    with ir.InsertionPoint(last), last.location:
        call = delegate_op(inputs, [v.type for v in outputs], partition.spec.backend_id, func_name, specs)
    call.move_after(last)
    bounds = [upper_bounds(v) for v in outputs]
    if any(not ir.RankedTensorType(v.type).has_static_shape for v in outputs) and None not in bounds:
        call.attributes[UPPER_BOUNDS_ATTR] = ir.DenseI64ArrayAttr.get([s for b in bounds for s in b])
    for old, new in zip(outputs, call.results):
        old.replace_all_uses_with(new)
    _sink_dependents(ops, call)
    for op in reversed(ops):
        op.erase()
    return fn, call


# Pure ops on symbolic sizes (`index` values: the importer's tensor.dim and arith ops).
SIZE_OPS = frozenset({"tensor.dim", "arith.constant", "arith.addi", "arith.subi", "arith.muli", "arith.floordivsi",
                      "arith.remsi", "arith.maxsi", "arith.minsi"})


def _size_computations(inputs: list, members: set) -> tuple[list, list]:
    """A symbolic size a partition reads from outside is computed again inside its function (the
    ops that compute it, cloned in order), so that a delegate takes tensors, not sizes; the tensors
    those ops measure become inputs instead. Returns (ops to clone, the partition's inputs)."""
    from torch_mlir import ir

    chain, seen = [], set()

    def visit(value):
        owner = value.owner
        if isinstance(owner, ir.Block):
            return False
        op = as_operation(owner)
        if op in members or op.name not in SIZE_OPS:
            return False
        if op not in seen:
            if not all(visit(v) for v in op.operands if isinstance(v.type, ir.IndexType)):
                return False  # a size from elsewhere: the partition takes it as it is
            seen.add(op)
            chain.append(op)
        return True

    new_inputs = []
    for v in inputs:
        if isinstance(v.type, ir.IndexType) and visit(v):
            continue
        new_inputs.append(v)
    for op in chain:
        for v in op.operands:
            if not isinstance(v.type, ir.IndexType) and v not in new_inputs:
                new_inputs.append(v)
    return chain, new_inputs


def _record_bounds(fn, inputs: list) -> None:
    """`etc.dim_bounds` on the delegate function's arguments with dynamic dims (a back end compiles
    for the upper bounds; the lower bound of a value computed in the method is 0)."""
    from torch_mlir import ir

    from etc.ir.shapes import DIM_BOUNDS_ATTR, upper_bounds

    dynamic = [isinstance(v.type, ir.RankedTensorType) and not ir.RankedTensorType(v.type).has_static_shape
               for v in inputs]
    if not any(dynamic):
        return
    attrs = []
    for v, is_dynamic in zip(inputs, dynamic):
        bounds = upper_bounds(v) if is_dynamic else None
        if bounds is None:
            attrs.append(ir.DictAttr.get({}))
            continue
        t = ir.RankedTensorType(v.type)
        owner = v.owner
        lows = None
        if isinstance(owner, ir.Block):  # a method argument: its own lower bounds
            parent = owner.owner
            parent = as_operation(parent)
            d = ir.DictAttr(ir.ArrayAttr(parent.attributes["arg_attrs"])[v.arg_number])
            lows = [int(x) for x in ir.DenseI64ArrayAttr(d[DIM_BOUNDS_ATTR])][0::2]
        pairs = []
        for i, upper in enumerate(bounds):
            low = upper if not t.is_dynamic_dim(i) else (lows[i] if lows else 0)
            pairs += [low, upper]
        attrs.append(ir.DictAttr.get({DIM_BOUNDS_ATTR: ir.DenseI64ArrayAttr.get(pairs)}))
    fn.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def partition_interface(partition: Partition):
    """The partition's inputs (values defined outside it, in first-use order) and
    outputs (its results used outside it): the delegate call's operands and results."""
    from torch_mlir import ir

    members = set(partition.ops)
    inputs, seen = [], set()
    for op in partition.ops:
        for inner in _nested(op):  # a branch's ops read values of the method too
            for v in inner.operands:
                owner = v.owner
                owner_op = None if isinstance(owner, ir.Block) else as_operation(owner)
                if owner_op is not None and _top_level(owner_op) in members:
                    continue
                if owner_op is None and _top_level(owner.owner) in members:
                    continue  # an argument of a member's own region
                if v not in seen:
                    seen.add(v)
                    inputs.append(v)
    outputs = [r for op in partition.ops for r in op.results
               if any(_top_level(user_op(u)) not in members for u in r.uses)]
    return inputs, outputs


def _nested(op) -> list:
    """`op` and every op inside its regions (in post-order: `op` last)."""
    found = []

    def visit(inner):
        found.append(as_operation(inner))
        return _walk_advance()

    op.walk(visit)
    return found


def _top_level(op):
    """The op of the function's body that holds `op` (itself when it is one)."""
    op = as_operation(op)
    while True:
        parent = op.parent
        if parent is None or parent.name in ("func.func", "builtin.module"):
            return op
        op = as_operation(parent)


def _sink_dependents(ops: list, call) -> None:
    """Move ops that sit between the partition's members and use its results below `call`."""
    members = set(ops)
    block_ops = [o.operation for o in ops[0].block.operations]
    start = block_ops.index(ops[0])
    end = block_ops.index(call)
    tainted = set()
    to_move = []
    for op in block_ops[start:end]:
        if op in members:
            tainted.add(op)
            continue
        for v in op.operands:
            owner = v.owner
            owner_op = as_operation(owner)
            if owner_op in tainted or owner_op == call:
                tainted.add(op)
                to_move.append(op)
                break
    anchor = call
    for op in to_move:
        op.move_after(anchor)
        anchor = op
