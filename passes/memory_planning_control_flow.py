"""Memory planning across control flow: the lifetimes `etc-memory-planning` gives values that
branches and loops read, yield or carry (see the rules below)."""

from __future__ import annotations

from etc.ir.ops import as_operation

__all__ = ["branch_local_yields", "control_flow_last_uses", "extend_branch_results", "flatten_regions"]

# `scf.if` and `scf.while` (torch.cond / torch.while_loop) run as jumps over one
# instruction list (compiler/emit_control_flow.py), so the schedule is the ops in
# that order, nested ones in place. Three rules keep the plan safe:
# - a value defined outside a loop and read inside it lives to the loop's end
#   (every iteration reads it); a loop's carries (its results, which its block
#   arguments share) live from the loop's start to its end at least;
# - an `scf.if` result is the yielded value of the branch taken (ExecuTorch moves
#   the EValue, it does not copy), so every yielded value lives as long as the
#   result is used;
# - a yielded value computed inside its branch (with nothing of its alias group
#   outside that branch) shares the result's storage: only one branch runs.
def flatten_regions(block):
    """(ops in pre-order, {op: tuple of enclosing (region op, region index)})."""
    ops, enclosing = [], {}

    def visit(block, outer):
        for op in block.operations:
            op = op.operation
            ops.append(op)
            enclosing[op] = outer
            for index, region in enumerate(op.regions):
                for inner in region.blocks:
                    visit(inner, outer + ((op, index),))
    visit(block, ())
    return ops, enclosing


def _definer(analysis, value):
    """The op defining `value` (a block argument: the op holding its block; None for function arguments)."""
    owner = value.owner
    if isinstance(owner, analysis.ir.Block):
        parent = owner.owner
        parent = parent.operation if parent is not None and hasattr(parent, "operation") else parent
        return None if parent is None or parent == analysis.func else parent
    return as_operation(owner)


def _inside(analysis, op, region_op) -> bool:
    return op is not None and (op == region_op or any(outer == region_op for outer, _ in analysis.enclosing[op]))


def control_flow_last_uses(analysis) -> dict:
    step_of = {op: step for step, op in enumerate(analysis.ops, start=1)}
    end_of = {}
    for op in analysis.ops:
        for outer, _ in analysis.enclosing[op]:
            end_of[outer] = step_of[op]
    last_use: dict = {}
    for op in analysis.ops:
        step = step_of[op]
        loops = [outer for outer, _ in analysis.enclosing[op] if outer.name == "scf.while"]
        for operand in op.operands:
            use = step
            definer = _definer(analysis, operand)
            for loop in loops:
                if not _inside(analysis, definer, loop):
                    use = max(use, end_of[loop])
            last_use[operand] = max(last_use.get(operand, 0), use)
        if op.name == "scf.while":
            for result in op.results:
                last_use[result] = max(last_use.get(result, 0), end_of.get(op, step))
    return last_use


def _yields(op) -> list:
    """The terminators of an scf.if's branches, with the region index."""
    found = []
    for index, region in enumerate(op.regions):
        for block in region.blocks:
            operations = list(block.operations)
            if operations and operations[-1].operation.name == "scf.yield":
                found.append((index, operations[-1].operation))
    return found


def extend_branch_results(analysis, last_use: dict) -> None:
    for op in analysis.ops:  # pre-order: an outer if's results first, then the inner ifs it yields
        if op.name != "scf.if":
            continue
        for _, terminator in _yields(op):
            for result, value in zip(op.results, terminator.operands):
                last_use[value] = max(last_use.get(value, 0), last_use.get(result, 0))


def branch_local_yields(analysis, find) -> list:
    """(scf.if result, yielded value) pairs that may share storage."""
    pairs = []
    members: dict = {}
    for value in analysis.infos:
        members.setdefault(find(value), []).append(value)
    for op in analysis.ops:
        if op.name != "scf.if":
            continue
        for index, terminator in _yields(op):
            for result, value in zip(op.results, terminator.operands):
                if result not in analysis.infos or value not in analysis.infos:
                    continue
                group = members.get(find(value), [value])
                if all((op, index) in analysis.enclosing.get(_definer(analysis, member), ()) for member in group):
                    pairs.append((result, value))
    return pairs
