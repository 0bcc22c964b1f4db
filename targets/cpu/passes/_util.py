"""Small IR helpers shared by the cpu pipeline's passes."""

from __future__ import annotations

from torch_mlir import ir

from etc.errors import PassError

ARG_ATTR = "etc.cpu.arg"  # on each entry argument: "input:<i>", "constant:<fqn>", "output:<i>", "scratch:<offset>"


def entry_function(module_op):
    """The module's one public func.func (the delegate's body); PassError if there is not exactly one."""
    funcs = [op.operation for op in module_op.regions[0].blocks[0].operations
             if op.operation.name == "func.func" and "sym_visibility" not in op.operation.attributes]
    if len(funcs) != 1:
        raise PassError(f"the cpu pipeline expects one public function, found {len(funcs)}")
    return funcs[0]


def walk(op, names) -> list:
    """Every op under `op` (itself included) whose name is in `names`, in walk order."""
    found = []

    def visit(inner):
        if inner.name in names:
            found.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def defining_op(value):
    """The operation that produces `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


def arg_attrs(fn) -> list[dict]:
    """Each argument's attribute dictionary, as a Python dict of name -> Attribute."""
    n = len(fn.regions[0].blocks[0].arguments)
    if "arg_attrs" not in fn.attributes:
        return [{} for _ in range(n)]
    out = []
    for entry in ir.ArrayAttr(fn.attributes["arg_attrs"]):
        d = ir.DictAttr(entry)
        out.append({d[i].name: d[i].attr for i in range(len(d))})
    return out + [{} for _ in range(n - len(out))]


def set_arg_attrs(fn, attrs: list[dict]) -> None:
    with fn.context:
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in attrs])


def arg_label(attrs: dict) -> tuple[str, str] | None:
    """(kind, name) from an argument's `etc.cpu.arg`, or None."""
    if ARG_ATTR not in attrs:
        return None
    kind, _, name = ir.StringAttr(attrs[ARG_ATTR]).value.partition(":")
    return kind, name


def update_function_type(fn) -> None:
    """Make `function_type` match the entry block's arguments (after adding or erasing some)."""
    block = fn.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    with fn.context:
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results)))


def run_upstream(op, pipeline: str, what: str, error) -> None:
    """Run an upstream pass pipeline on `op`; a failure is `error(message)` (the pass's located error)."""
    from torch_mlir.passmanager import PassManager

    try:
        PassManager.parse(pipeline, context=op.context).run(op)
    except Exception as e:  # noqa: BLE001 - MLIR reports through a generic exception
        raise error(f"{what} failed: {e}") from None
