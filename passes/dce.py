"""etc-dce: erase ops whose results are unused and that have no side effects.

Walks every block backwards (uses before definitions, so a whole dead chain
goes in one sweep; nested regions before the op holding them). An op is erased
when none of its results is used and MLIR says it would be trivially dead:
it has no memory effects (aten/edge ops are `Pure`, `arith`, `tensor.empty`,
`ml_program.global_load_const`...) or, for region-holding ops with recursive
memory effects (`scf.if`, `scf.for`), nothing inside has any. Terminators
(`func.return`), symbols (`func.func`, `ml_program.global`), writes
(`ml_program.global_store`, `memref.store`), calls, delegates and unregistered
ops are kept.

MLIR's Python API cannot query an op's memory effects, so the pass asks MLIR
itself: a clone of the op (same operands, so the real values gain a use for a
moment) goes into a scratch function with its results unused, `trivial-dce`
runs there, and the clone is erased if it survived. The answer is cached per
op name for ops without regions; ops with regions are asked one by one, since
their effects depend on their bodies.
"""

from __future__ import annotations

from etc.passes.pass_api import Pass, register_pass


class _PurityOracle:
    """Asks MLIR whether an unused op would be trivially dead."""

    def __init__(self, context):
        from torch_mlir import ir, passmanager

        self._ir = self.ir = ir
        self.context = context
        self._cache: dict[str, bool] = {}
        self._pm = passmanager.PassManager.parse("builtin.module(func.func(trivial-dce))", context=context)
        self._pm.enable_verifier(False)  # probes use values defined outside the scratch function

    def _scratch(self):
        ir = self._ir
        with self.context, ir.Location.unknown():
            module = ir.Module.create()
            with ir.InsertionPoint(module.body):
                func = ir.Operation.create("func.func", regions=1, attributes={
                    "sym_name": ir.StringAttr.get("probe"),
                    "function_type": ir.TypeAttr.get(ir.FunctionType.get([], []))})
            block = func.regions[0].blocks.append()
            with ir.InsertionPoint(block):
                ir.Operation.create("func.return")
        return module, block

    def removable(self, op) -> bool:
        ir = self._ir
        name = op.name
        if not self.context.is_registered_operation(name):
            return False
        if len(op.regions) == 0 and name in self._cache:
            return self._cache[name]
        module, block = self._scratch()
        terminator = block.operations[0]
        with self.context, ir.Location.unknown():
            # A clone keeps the real operands: an op's effects may name them (memref.store writes
            # its memref operand), so a probe without them could not even be asked.
            probe = op.clone(ip=ir.InsertionPoint(terminator))
        self._pm.run(module.operation)
        dead = len(block.operations) == 1
        if not dead:
            probe.erase()  # a clone still uses values of the real IR
        if len(op.regions) == 0:
            self._cache[name] = dead
        return dead


def _has_symbol(op) -> bool:
    return "sym_name" in op.attributes


@register_pass
class DeadCodeElimination(Pass):
    """Erase side-effect-free ops whose results are unused, walking each block backwards.

    Unlike upstream `trivial-dce`, it reports what it erased (statistic
    `erased`) and never touches symbols; unlike `remove-dead-values` it keeps
    function signatures and block arguments.
    """

    name = "etc-dce"
    summary = "Erase ops without side effects whose results are unused"

    def run(self, op) -> None:
        oracle = _PurityOracle(op.context)
        self.count("erased", 0)
        self._sweep_op(op, oracle, top=True)

    def _sweep_op(self, op, oracle, top: bool = False) -> bool:
        """Sweep the regions of `op`, then decide about `op` itself; True if it was erased."""
        for region in op.regions:
            for block in reversed(list(region.blocks)):
                for child in reversed(list(block.operations)):
                    self._sweep_op(child.operation, oracle)
        if top or _has_symbol(op) or len(op.successors) or op.has_trait(oracle.ir.IsTerminatorTrait):
            return False
        if any(len(list(result.uses)) for result in op.results):
            return False
        if not oracle.removable(op):
            return False
        op.erase()
        self.count("erased")
        return True
