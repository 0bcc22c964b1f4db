"""The entry function of a cpu module and its arguments' labels (what each argument is to the runtime)."""

from __future__ import annotations

from torch_mlir import ir

from etc.errors import PassError

ARG_ATTR = "etc.cpu.arg"  # on each entry argument: "input:<i>", "constant:<fqn>", "output:<i>", "scratch:<offset>"


# On the lowered module: array<i64: k, j, ...> (output k is computed in input j's memory, the
# backend's `in_place_state`): those two buffers may be one, so neither is noalias.
IN_PLACE_ATTR = "etc.cpu.in_place"


def in_place_pairs(module_op) -> list[tuple[int, int]]:
    """(output k, input j) pairs of `IN_PLACE_ATTR` on the module (none without it)."""
    if IN_PLACE_ATTR not in module_op.attributes:
        return []
    flat = [int(x) for x in ir.DenseI64ArrayAttr(module_op.attributes[IN_PLACE_ATTR])]
    return list(zip(flat[0::2], flat[1::2]))


def entry_function(module_op):
    """The module's one public func.func (the delegate's body); PassError if there is not exactly one."""
    funcs = [op.operation for op in module_op.regions[0].blocks[0].operations
             if op.operation.name == "func.func" and "sym_visibility" not in op.operation.attributes]
    if len(funcs) != 1:
        raise PassError(f"the cpu pipeline expects one public function, found {len(funcs)}")
    return funcs[0]


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


def in_place_arguments(module_op) -> dict:
    """{output argument: input argument} of the entry for each `IN_PLACE_ATTR` pair: the two
    buffers the caller may pass as one."""
    pairs = in_place_pairs(module_op)
    if not pairs:
        return {}
    fn = entry_function(module_op)
    labels = {arg_label(a): arg for arg, a in zip(fn.regions[0].blocks[0].arguments, arg_attrs(fn))}
    return {labels[("output", str(k))]: labels[("input", str(j))] for k, j in pairs
            if ("output", str(k)) in labels and ("input", str(j)) in labels}


def update_function_type(fn) -> None:
    """Make `function_type` match the entry block's arguments (after adding or erasing some)."""
    block = fn.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    with fn.context:
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], list(ftype.results)))
