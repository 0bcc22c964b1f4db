"""Emission of structured control flow (`scf.if`, `scf.while`) as ExecuTorch runs it:
jumps over one chain of instructions, no delegate and no sub-program.

`scf.if %p` (torch.cond) is laid out as ExecuTorch's emitter lays out cond:

    JumpFalseCall(p, else)          p: the bool tensor (the runtime jumps unless all of it is true)
    <then ops>  MoveCall(yield_i -> result_i)
    JumpFalseCall(False, end)       an unconditional jump
  else:
    <else ops>  MoveCall(yield_i -> result_i)
  end:

`scf.while` (torch.while_loop; ExecuTorch's own emitter has no while_loop) uses
the same instructions, the carries being planned tensors the loop copies into:

    aten::clone.out(init_i, out=carry_i)       once, before the loop
  top:
    <condition ops>
    JumpFalseCall(p, exit)
    <body ops>  aten::clone.out(yield_i, out=carry_i)
    JumpFalseCall(False, top)
  exit:                                        the results are the carries

Copies, not moves, for carries: a MoveCall would leave the carry's EValue
pointing at the body's output storage, which the next iteration writes while
reading the carry (ExecuTorch's scan emitter copies for the same reason).
Both block arguments of the loop and its results are the carry EValues.
"""

from __future__ import annotations

from etc.errors import LoweringError
from etc.ir.locations import format_location
from etc.passes.memory_planning import result_alloc


def _where(op):
    return format_location(op.location)


def _jump(emitter, condition_index: int, op):
    """Append a JumpFalseCall (destination patched by the caller); return it."""
    call = emitter.S.JumpFalseCall(cond_value_index=condition_index, destination_instruction=-1)
    emitter.instruction(call, op)
    return call


def _copy(emitter, destination: int, source: int, op) -> None:
    """`aten::clone.out(src, out=dst)`: the carry takes the source's value *and shape* (a carry of
    dynamic shape is resized within its bound; `copy.out` would broadcast into the old shape)."""
    kernel = "aten::clone.out"
    if kernel not in emitter.kernels:
        raise LoweringError(f"no kernel for '{kernel}' (copying a loop's carried value)", location=_where(op))
    args = [source, emitter.scalar(None), destination, destination]
    emitter.instruction(emitter.S.KernelCall(op_index=emitter.operator(kernel), args=args), op)


def _index(emitter, value, op) -> int:
    if value not in emitter.index:
        raise LoweringError("an operand of control flow is not defined by an emitted value", location=_where(op))
    return emitter.index[value]


def emit_extract(emitter, op) -> None:
    """`tensor.extract %p[]` of a predicate: JumpFalseCall reads the bool tensor itself."""
    from torch_mlir import ir

    ty = ir.RankedTensorType(op.operands[0].type)
    users = [use.owner for result in op.results for use in result.uses]
    names = {user.operation.name if hasattr(user, "operation") else user.name for user in users}
    if str(ty.element_type) != "i1" or not names <= {"scf.if", "scf.condition"}:
        raise LoweringError("tensor.extract is emitted only as the predicate of scf.if / scf.condition",
                            location=_where(op))
    emitter.index[op.results[0]] = _index(emitter, op.operands[0], op)


def emit_if(emitter, op) -> None:
    results = [emitter.tensor(r, alloc=result_alloc(op, n)) for n, r in enumerate(op.results)]
    to_else = _jump(emitter, _index(emitter, op.operands[0], op), op)
    to_end = None
    for number, region in enumerate(op.regions):
        if number == 1:
            to_end = _jump(emitter, emitter.scalar(False), op)
            to_else.destination_instruction = len(emitter.instructions)
        if not len(region.blocks):
            continue
        block = region.blocks[0]
        emitter.emit_block(block, skip_terminator=True)
        terminator = list(block.operations)[-1].operation
        for source, destination in zip(terminator.operands, results):
            source_index = _index(emitter, source, terminator)
            if source_index != destination:
                emitter.instruction(emitter.S.MoveCall(move_from=source_index, move_to=destination), terminator)
    if to_end is None:  # no else region: the jump skips the then branch
        to_else.destination_instruction = len(emitter.instructions)
    else:
        to_end.destination_instruction = len(emitter.instructions)


def emit_while(emitter, op) -> None:
    carries = []
    for n, result in enumerate(op.results):
        if result_alloc(op, n) is None:
            raise LoweringError("a loop's carried value has no planned storage; plan memory before emitting",
                                location=_where(op))
        carries.append(emitter.tensor(result, alloc=result_alloc(op, n)))
    for init, carry in zip(op.operands, carries):
        _copy(emitter, carry, _index(emitter, init, op), op)
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    for block in (before, after):
        for argument, carry in zip(block.arguments, carries):
            emitter.index[argument] = carry
    top = len(emitter.instructions)
    emitter.emit_block(before, skip_terminator=True)
    condition = list(before.operations)[-1].operation
    forwarded = list(condition.operands)[1:]
    if forwarded != list(before.arguments):
        raise LoweringError("scf.condition must forward the loop's carried values unchanged (as torch.while_loop "
                            "does) to be emitted", location=_where(condition))
    to_exit = _jump(emitter, _index(emitter, condition.operands[0], condition), condition)
    emitter.emit_block(after, skip_terminator=True)
    terminator = list(after.operations)[-1].operation
    arguments = list(after.arguments)
    for position, (value, carry) in enumerate(zip(terminator.operands, carries)):
        if value in arguments and arguments.index(value) != position:
            raise LoweringError("a loop body that returns one carried value in another one's place (a swap) "
                                "cannot be emitted with in-place copies; compute the new value (e.g. x.clone())",
                                location=_where(terminator))
        if value in arguments:
            continue  # carried through unchanged
        _copy(emitter, carry, _index(emitter, value, terminator), terminator)
    back = _jump(emitter, emitter.scalar(False), terminator)
    back.destination_instruction = top
    to_exit.destination_instruction = len(emitter.instructions)


# arith.cmpi predicate (its integer value) -> ExecuTorch's prim op.
_COMPARISONS = {0: "executorch_prim::eq.Scalar", 2: "executorch_prim::lt.Scalar", 3: "executorch_prim::le.Scalar",
                4: "executorch_prim::gt.Scalar", 5: "executorch_prim::ge.Scalar"}


def emit_compare(emitter, op) -> None:
    """A size comparison (a cond on `x.shape[0] > 4`): a prim op writing a Bool EValue,
    which JumpFalseCall reads as ExecuTorch does."""
    from torch_mlir import ir

    predicate = int(ir.IntegerAttr(op.attributes["predicate"]).value)
    kernel = _COMPARISONS.get(predicate)
    if kernel is None or kernel not in emitter.kernels:
        raise LoweringError(f"no prim op for the size comparison '{op.attributes['predicate']}'", location=_where(op))
    args = [_index(emitter, value, op) for value in op.operands]
    result = emitter.add_value(emitter.S.Bool(bool_val=False))  # not shared: the prim op writes it
    emitter.index[op.results[0]] = result
    emitter.instruction(emitter.S.KernelCall(op_index=emitter.operator(kernel), args=args + [result]), op)


EMITTERS = {"scf.if": emit_if, "scf.while": emit_while, "tensor.extract": emit_extract, "arith.cmpi": emit_compare}
