"""The MLIR context the cpu target works in, and a delegate function imported into it."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d  # also registers torch-mlir's passes, which the cpu pipeline runs

_SHARED_CONTEXT = None


def shared_context() -> ir.Context:
    """One torch-aware context for the target's own work (trial lowerings, re-imported delegate
    functions): making a context loads etc's 1577-op dialects, about a second each time."""
    global _SHARED_CONTEXT
    if _SHARED_CONTEXT is None:
        _SHARED_CONTEXT = make_context()
    return _SHARED_CONTEXT


def make_context() -> ir.Context:
    """A context with etc's dialects and torch-mlir's torch dialect (which also registers its passes)."""
    import etc.dialects

    context = etc.dialects.make_context()
    load_torch(context)
    return context


def load_torch(context) -> None:
    """torch-mlir's torch dialect (and its passes) and torch_c (builtin <-> torch casts) in
    `context`, for a pass that builds their ops in a context made without them (`etc-opt`'s)."""
    if not context.is_registered_operation("torch.aten.add.Tensor"):
        torch_d.register_dialect(context)
    if not context.is_registered_operation("torch_c.to_builtin_tensor"):
        # torch_c is loaded by the torch-mlir passes that use it: a pass on an empty module loads it.
        from torch_mlir.passmanager import PassManager

        with context, ir.Location.unknown():
            empty = ir.Module.create()
            PassManager.parse("builtin.module(torch-func-backend-type-conversion)").run(empty.operation)


def import_for_lowering(func_op) -> tuple[ir.Context, ir.Module]:
    """A module in the shared context holding a copy of the outlined function `func_op` (public:
    the cpu pipeline's entry) and the globals it reads; (context, module)."""
    parent = func_op.parent
    texts = []
    used = set()

    def collect(op):
        if op.name == "ml_program.global_load_const":
            used.add(ir.FlatSymbolRefAttr(op.attributes["global"]).value)
        return ir.WalkResult.ADVANCE

    func_op.operation.walk(collect)
    if parent is not None:
        for op in parent.regions[0].blocks[0].operations:
            if op.operation.name == "ml_program.global" and ir.StringAttr(op.attributes["sym_name"]).value in used:
                texts.append(op.operation.get_asm(print_generic_op_form=True))
    texts.append(func_op.operation.get_asm(print_generic_op_form=True))
    context = shared_context()
    with context:
        module = ir.Module.parse("module {\n" + "\n".join(texts) + "\n}")
    fn = [op for op in module.body.operations if op.operation.name == "func.func"][-1].operation
    if "sym_visibility" in fn.attributes:
        del fn.attributes["sym_visibility"]
    return context, module


def program_of(module: ir.Module, constants: dict):
    """A `ProgramIR` of an imported module with the data of the globals it holds (the passes that
    read weights find it there; a constant a pass adds goes into this table, not the program's);
    LoweringError for a global without data."""
    from etc.compiler.ir import ProgramIR
    from etc.errors import LoweringError

    from etc.ir.dtypes import torch_dtype_name_of_element_type

    globals_ = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                if op.operation.name == "ml_program.global"}
    missing = [name for name in globals_ if name not in constants]
    if missing:
        raise LoweringError(f"constant '{missing[0]}' used by a cpu delegate has no data")
    # The dtype of each global from its type: a bfloat16 weight's data is its bits (numpy uint16),
    # which the numpy dtype alone would not tell from uint16.
    dtypes = {name: torch_dtype_name_of_element_type(ir.RankedTensorType(
        ir.TypeAttr(op.attributes["type"]).value).element_type) for name, op in globals_.items()}
    return ProgramIR(module, module.context, {name: constants[name] for name in globals_}, {}, dtypes)
