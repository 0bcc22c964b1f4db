"""etc-in-place-state: update a mutable buffer in its own storage instead of copying it back.

A model that writes a buffer in place (a KV cache's `index_copy_`) comes out of torch.export
functionalized: the method loads the old value, computes a whole new tensor, and stores it:

    %old = ml_program.global_load @cache
    %new = "edge.index_put"(%old, %pos, %kv)        // a copy of the cache with one row replaced
    ...                                             // attention reads %new
    ml_program.global_store @cache = %new           // emitted as copy.out: the whole cache again

Emitted as it is, each call copies the whole buffer twice (into %new, then back into the
buffer) to change one row: for an LLM decode step that is every KV cache twice per token.

When nothing can tell the difference, this pass marks the op computing the new value with
`etc.in_place_state = [@cache]` (one entry per result, `unit` for the others): the memory
planner leaves that result unplanned, the emitter gives it the buffer's own storage (the
kernel's `out` is the buffer, which is also its `self`) and drops the store, which would copy
the buffer into itself. Nothing can tell the difference when, in the method's function:
- the op is `edge.index_put` (its out variant writes `out = self` then the new rows, which
  in place is just the new rows; etc's and ExecuTorch's kernels both accept `out` being `self`);
- `@cache` has exactly one `global_load` and one `global_store`, both in the function's
  body (not inside a branch or loop), and the loaded value has one use: the op's `self`;
  so no one reads the old value after the op has overwritten it, and nothing else writes
  the buffer;
- the stored value is the op's result and it is not returned (a returned tensor is copied
  out by the runtime; the buffer's storage stays the method's own).

The op's other users read the buffer, which holds the new value from the op to the end of
the call and, as the stored state, into the next one. Ops inside a delegate are the
backend's: a delegate writes its outputs into planned memory and the store copies them back.
"""

from __future__ import annotations

from etc.ir.ops import defining_op, user_op
from etc.passes.pass_api import Pass, register_pass

ATTRIBUTE = "etc.in_place_state"
IN_PLACE_OPS = frozenset({"edge.index_put"})


def _symbol(op) -> str:
    from torch_mlir import ir

    return ir.FlatSymbolRefAttr(op.attributes["global"]).value


def _same(a, b) -> bool:
    return a is not None and b is not None and a.operation == b.operation


def _walk(block):
    for op in block.operations:
        op = op.operation
        yield op
        for region in op.regions:
            for nested in region.blocks:
                yield from _walk(nested)


def buffer_updates(func) -> list:
    """(symbol, old, new) for each buffer `func` updates with nothing else reading or writing it:
    one `global_load` (result `old`, with exactly one use) and one `global_store` (of `new`, not
    returned), both in the function's body. Whether the op using `old` and computing `new` may do
    so in the same storage is its caller's question."""
    body = func.regions[0].blocks[0]
    loads: dict = {}
    stores: dict = {}
    returned: list = []
    for op in _walk(body):
        if op.name == "ml_program.global_load":
            loads.setdefault(_symbol(op), []).append(op)
        elif op.name == "ml_program.global_store":
            stores.setdefault(_symbol(op), []).append(op)
        elif op.name == "func.return" and _same(op.parent, func):
            returned = list(op.operands)
    found = []
    for symbol, symbol_stores in stores.items():
        symbol_loads = loads.get(symbol, [])
        if len(symbol_stores) != 1 or len(symbol_loads) != 1:
            continue
        store, load = symbol_stores[0], symbol_loads[0]
        if not (_same(store.parent, func) and _same(load.parent, func)):  # both in the function's body
            continue
        new, old = store.operands[0], load.results[0]
        if new in returned or len(list(old.uses)) != 1:
            continue
        found.append((symbol, old, new))
    return found


def in_place_updates(func) -> list:
    """(op, symbol) for each op of `func` whose result may be written into buffer `symbol` directly."""
    found = []
    for symbol, old, new in buffer_updates(func):
        producer = defining_op(new)
        if not hasattr(producer, "name") or producer.name not in IN_PLACE_OPS or not _same(producer.parent, func):
            continue
        (use,) = list(old.uses)
        if _same(user_op(use), producer) and use.operand_number == 0:
            found.append((producer, symbol))
    return found


def state_attribute(symbols: list):
    """`etc.in_place_state` for an op's results: each result's buffer symbol, or None."""
    from torch_mlir import ir

    return ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(s) if s else ir.UnitAttr.get() for s in symbols])


def mark_in_place_state(module) -> int:
    """Mark every in-place buffer update of the module's public functions; returns how many."""
    module_op = module.operation
    count = 0
    for op in module_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "func.func" or "sym_visibility" in op.attributes:
            continue
        for producer, symbol in in_place_updates(op):
            with op.context:
                producer.attributes[ATTRIBUTE] = state_attribute(
                    [symbol if n == 0 else None for n in range(len(producer.results))])
            count += 1
    return count


def in_place_symbols(op) -> list:
    """The buffer each result of `op` is written into (None where it has its own storage)."""
    from torch_mlir import ir

    if ATTRIBUTE not in op.attributes:
        return [None] * len(op.results)
    return [None if isinstance(a, ir.UnitAttr) or str(a) == "unit" else ir.FlatSymbolRefAttr(a).value
            for a in ir.ArrayAttr(op.attributes[ATTRIBUTE])]


@register_pass
class InPlaceState(Pass):
    """Mark buffer updates (`global_load` -> `index_put` -> `global_store`) that can write the buffer itself."""

    name = "etc-in-place-state"
    summary = "Let a mutable buffer's update (index_put) write the buffer's own storage"

    def run(self, op) -> None:
        self.count("marked", mark_in_place_state(op))
