"""The `aten` dialect: one op per functional ATen overload, generated from torch's schemas.

The op table is `aten_ops.json` (regenerate with `python -m etc.dialects.gen_aten_ops`);
no op is written by hand. `aten.add_tensor` is `aten::add.Tensor`:

    %2 = "aten.add_tensor"(%0, %1) {alpha = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>

Every op is pure (no memory effects: the IR has value semantics, the importer
functionalizes), so upstream `cse` and dead-code elimination apply.
`build_op` and `decode_op` convert between schema values and op operands and
attributes (see `opinfo.py` for the encoding).
"""

from __future__ import annotations

from typing import Any, Mapping

from torch_mlir import ir

from etc.dialects import irdl_base
from etc.dialects.shapes import verify_shapes
from etc.dialects.opinfo import LIST_SLOTS, OpInfo, by_torch_name, encode_value, list_slots, load_table
from etc.dialects.opinfo import decode_op  # noqa: F401 - this module's API, with build_op (opinfo defines it)
from etc.errors import UnsupportedConstructError


class Aten(irdl_base.Dialect, name="aten"):
    """ATen operators as imported from torch.export, before decomposition."""


def _class_name(info: OpInfo) -> str:
    return "".join(part.capitalize() for part in info.name.split("_") if part) + "Op"


def _verify_tensors(op) -> bool:
    """Operands of Tensor arguments and all results are ranked tensors; symbolic
    size operands are `index`; the result shapes are torch's for the operands (shapes.py)."""
    info = op.OP_INFO
    operation = op.operation
    for value in list(operation.results):
        if not isinstance(value.type, ir.RankedTensorType):
            op.location.emit_error(f"'{operation.name}' ({info.torch_name}) must produce ranked tensors, "
                                   f"got {value.type}")
            return False
    for value in list(operation.operands):
        if not isinstance(value.type, (ir.RankedTensorType, ir.IndexType)):
            op.location.emit_error(f"'{operation.name}' ({info.torch_name}) takes ranked tensors and index "
                                   f"sizes, got an operand of type {value.type}")
            return False
    return verify_shapes(op)


def define_ops(dialect: type, infos, verifier=None) -> dict[str, type]:
    """Define one op class per OpInfo on `dialect`; returns name -> class."""
    classes = {}
    for info in infos:
        cls = irdl_base.define_op(dialect, info.name, _class_name(info), info.fields,
                                  verifier=verifier, namespace={"OP_INFO": info})
        classes[info.name] = cls
    return classes


OPS: dict[str, type] = define_ops(Aten, load_table(), verifier=_verify_tensors)


def op_class(torch_name: str, dialect_ops: Mapping[str, type] | None = None) -> type | None:
    info = by_torch_name().get(torch_name)
    if info is None:
        return None
    return (dialect_ops or OPS).get(info.name)


def build_op(torch_name: str, arguments: Mapping[str, Any], result_types: list[ir.Type], *,
             loc: ir.Location | None = None, dialect_ops: Mapping[str, type] | None = None) -> ir.Operation:
    """Create the op for `torch_name` (`aten::add.Tensor`) at the current insertion point.

    `arguments` maps schema argument names to values: ir.Value for tensors
    (None for an absent optional, lists for `Tensor[]`), Python values for the
    rest, ir.Value of `index` type for symbolic sizes.
    """
    torch_name, arguments = _number_first(torch_name, arguments)
    torch_name = _scalar_overload(torch_name, arguments)
    cls = op_class(torch_name, dialect_ops)
    if cls is None:
        from etc.dialects import quantized_ops

        if quantized_ops.is_quantization_op(torch_name):
            supported = ", ".join(sorted(quantized_ops.importable_names()))
            raise UnsupportedConstructError(
                f"quantization operator {torch_name} is not supported by etc (a quantization scheme it has no "
                f"kernel for; supported: {supported})")
        raise UnsupportedConstructError(
            f"operator {torch_name} has no op in the aten dialect (it is not a functional ATen overload "
            "with encodable arguments)")
    info: OpInfo = cls.OP_INFO
    kwargs: dict[str, Any] = {}
    for arg in info.arguments:
        value = arguments.get(arg.name)
        if arg.kind in ("operand", "optional_operand"):
            if arg.kind == "operand" and value is None:
                raise UnsupportedConstructError(f"{torch_name}: tensor argument '{arg.name}' is missing")
            kwargs[arg.field] = value
        elif arg.kind in ("variadic_operand", "optional_list_operand"):
            items = list(value or [])
            _check_list_length(torch_name, arg.name, len(items))
            kwargs.update(zip(list_slots(arg.field), items))
            if arg.mask:
                kwargs[arg.mask] = ir.DenseBoolArrayAttr.get([v is not None for v in items])
        else:
            dynamic: list = []
            kwargs[arg.field] = encode_value(arg, value, dynamic)
            if arg.dynamic:
                kwargs[arg.dynamic] = dynamic
            elif dynamic:
                raise UnsupportedConstructError(f"{torch_name}: argument '{arg.name}' cannot be symbolic")
    results = list(result_types)
    for ret in info.returns:
        if ret["kind"] == "variadic_result":
            _check_list_length(torch_name, "result", len(results))
            kwargs.update(zip(list_slots(ret["field"]), results))
            results = []
        else:
            if not results:
                raise UnsupportedConstructError(f"{torch_name}: fewer result types than results")
            kwargs[ret["field"]] = results.pop(0)
    return irdl_base.create(cls, info.fields, kwargs, loc=loc)


def _check_list_length(torch_name: str, name: str, length: int) -> None:
    if length > LIST_SLOTS:
        raise UnsupportedConstructError(
            f"{torch_name}: a list of {length} tensors for '{name}'; etc supports at most {LIST_SLOTS} "
            "(split the operation, e.g. concatenate in two steps)")


def _is_number(value) -> bool:
    return isinstance(value, (int, float, bool))


# `op.Tensor(number, tensor)`: ATen wraps the number as a 0-d tensor; there is no Scalar
# overload with the number first, so it becomes the mirrored Scalar op (torch's own
# decompositions write `sub(size - 1, index)`, e.g. reflection padding).
_NUMBER_FIRST = {
    "aten::sub.Tensor": lambda a: ("aten::rsub.Scalar", {"self": a["other"], "other": a["self"],
                                                         "alpha": a.get("alpha", 1)}),
    "aten::add.Tensor": lambda a: ("aten::add.Scalar", {"self": a["other"], "other": a["self"]})
    if a.get("alpha", 1) == 1 else None,
    "aten::mul.Tensor": lambda a: ("aten::mul.Scalar", {"self": a["other"], "other": a["self"]}),
}


def _number_first(torch_name: str, arguments: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    if torch_name in _NUMBER_FIRST and _is_number(arguments.get("self")) and not _is_number(arguments.get("other")):
        mirrored = _NUMBER_FIRST[torch_name](arguments)
        if mirrored is not None:
            return mirrored
    return torch_name, arguments


def _scalar_overload(torch_name: str, arguments: Mapping[str, Any]) -> str:
    """torch.export passes Python numbers to Tensor arguments (`div.Tensor(x, 2.0)`,
    a "wrapped number"); ATen treats them as the Scalar overload (`div.Scalar`),
    which is what we build: same argument names, Scalar where a number was given."""
    info = by_torch_name().get(torch_name)
    if info is None:
        return torch_name
    numbers = {a.name for a in info.arguments
               if a.base == "Tensor" and isinstance(arguments.get(a.name), (int, float, bool))}
    if not numbers:
        return torch_name
    base = torch_name.split(".", 1)[0]
    for candidate in _overloads(base):
        if len(candidate.arguments) != len(info.arguments):
            continue
        if all(c.name == a.name and (c.base == "Scalar" if a.name in numbers else c.type == a.type)
               for c, a in zip(candidate.arguments, info.arguments)):
            return candidate.torch_name
    raise UnsupportedConstructError(
        f"{torch_name}: a number was given for tensor argument(s) {', '.join(sorted(numbers))} and the operator "
        "has no Scalar overload")


_OVERLOADS: dict[str, list] | None = None


def _overloads(base: str) -> list:
    global _OVERLOADS
    if _OVERLOADS is None:
        _OVERLOADS = {}
        for info in load_table():
            _OVERLOADS.setdefault(info.torch_name.split(".", 1)[0], []).append(info)
    return _OVERLOADS.get(base, [])


