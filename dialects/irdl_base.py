"""Our thin layer over MLIR's Python-defined dialects (`torch_mlir.dialects.ext`).

`dialects.ext` is young and its names still move between LLVM revisions
(`infer_type` became `infer_result`, the verify hook was renamed). Everything
in etc that defines ops goes through this module, so an upstream rename is a
one-file change:

- `Dialect` / `Operand` / `Result` / `Pure`: re-exported as they are.
- `define_op(dialect, name, fields, ...)`: an op class from a field table
  (the aten and edge dialects generate two thousand ops from data, so they
  cannot be written as class statements).
- `load(dialect)`: idempotent per context (upstream raises on a second load).
- `create(...)`: builds an op through `ir.Operation.create`.

A limit to know: IRDL treats each operand constraint as a *variable*, so all
elements of one variadic group must have the same type. That is fine for
`index` groups, but not for tensor lists (`cat` of differently shaped
tensors): those use numbered optional slots (see `opinfo.LIST_SLOTS`).
"""

from __future__ import annotations

import io
import keyword
import re
from typing import Any, Callable, Optional, Sequence

from torch_mlir import ir
from torch_mlir.dialects import ext

Dialect = ext.Dialect
Operand = ext.Operand
Result = ext.Result
Pure = ext.Pure

# Field kinds of `define_op`'s table.
OPERAND = "operand"
OPTIONAL_OPERAND = "optional_operand"
VARIADIC_OPERAND = "variadic_operand"
ATTRIBUTE = "attribute"
RESULT = "result"
OPTIONAL_RESULT = "optional_result"
VARIADIC_RESULT = "variadic_result"

_ANNOTATIONS = {
    OPERAND: Operand[Any],
    OPTIONAL_OPERAND: Optional[Operand[Any]],
    VARIADIC_OPERAND: Sequence[Operand[Any]],
    ATTRIBUTE: Any,
    RESULT: Result[Any],
    OPTIONAL_RESULT: Optional[Result[Any]],
    VARIADIC_RESULT: Sequence[Result[Any]],
}

# Generated accessors are properties on the op class: a field called `name`
# or `location` would hide the OpView's own.
_RESERVED = frozenset(dir(ir.OpView)) | {"self"}


def field_name(name: str, suffix: str = "") -> str:
    """A schema name usable as an op field: IRDL wants lower case without
    leading or double underscores, Python an identifier that hides nothing on
    OpView. `self` -> `self_`, `from` -> `from_`, `LU_data` -> `lu_data`,
    `self` + `_dynamic` -> `self_dynamic`."""
    name = re.sub("_+", "_", name.lower()).strip("_") + suffix
    if keyword.iskeyword(name) or name in _RESERVED:
        return name + "_"
    return name


def define_op(dialect: type, op_name: str, class_name: str, fields: Sequence[tuple[str, str]], *,
              pure: bool = True, verifier: Callable | None = None, namespace: dict | None = None) -> type:
    """Define `<dialect>.<op_name>` from `fields = [(field, kind), ...]` in order.

    `verifier(op) -> bool` runs as the op's verifier; it reports through
    `op.location.emit_error` and returns False on failure.
    """
    body = dict(namespace or {})
    body["__annotations__"] = {name: _ANNOTATIONS[kind] for name, kind in fields}
    if verifier is not None:
        body["verify_invariants"] = verifier
    traits = [Pure] if pure else []
    return type(class_name, (dialect.Operation,), body, name=op_name, traits=traits)


# Each dialect's IRDL definition as MLIR bytecode, emitted once per process. Emitting it op by op
# through the Python builders (and canonicalizing it) takes about half a second for aten's 1577
# ops, in every new context (each `to_edge` makes one); reading the bytecode, a fifth of that.
_IRDL_BYTECODE: dict = {}


def load(dialect: type, context: ir.Context | None = None) -> None:
    """Load `dialect` into `context` (the current one by default), once."""
    context = context or ir.Context.current
    if context.is_dialect_loaded(dialect.DIALECT_NAMESPACE):
        return
    with context, ir.Location.unknown(context):
        bytecode = _IRDL_BYTECODE.get(dialect)
        if bytecode is None:  # the first context: upstream's load emits, canonicalizes, loads, registers
            dialect.load()
            buffer = io.BytesIO()
            dialect._mlir_module.operation.write_bytecode(buffer)
            _IRDL_BYTECODE[dialect] = buffer.getvalue()
            return
        # What upstream's load does after emitting: load the definition, attach the traits (per
        # context); the Python classes stay registered from the first load.
        from torch_mlir.dialects import irdl

        module = ir.Module.parse(bytecode)
        irdl.load_dialects(module)
        dialect._mlir_module = module
        for op in dialect.operations:
            op._attach_traits()
        for type_ in dialect.types:
            ext._cext.register_type_caster(ir.DynamicType.lookup_typeid(type_.type_name), replace=True)(type_)
        for attr in dialect.attributes:
            ext._cext.register_type_caster(ir.DynamicAttr.lookup_typeid(attr.attr_name), replace=True)(attr)


def create(op_class: type, fields: Sequence[tuple[str, str]], values: dict, *, loc=None) -> ir.Operation:
    """Create an op of `op_class` from `values` (field -> ir.Value / list / None
    for operands, ir.Attribute for attributes, ir.Type / list of types for results)
    at the current insertion point.

    We build through `ir.Operation.create` rather than the generated
    `__init__`, which drops falsy attributes (a `false` BoolAttr, `0 : i64`).
    """
    operands, operand_segments, results, result_segments, attributes = [], [], [], [], {}
    variadic_operands = variadic_results = False
    for name, kind in fields:
        value = values.get(name)
        if kind == OPERAND:
            operands.append(value)
            operand_segments.append(1)
        elif kind == OPTIONAL_OPERAND:
            variadic_operands = True
            operands += [] if value is None else [value]
            operand_segments.append(0 if value is None else 1)
        elif kind == VARIADIC_OPERAND:
            variadic_operands = True
            operands += list(value or [])
            operand_segments.append(len(value or []))
        elif kind == ATTRIBUTE:
            attributes[name] = value
        elif kind == RESULT:
            results.append(value)
            result_segments.append(1)
        elif kind == OPTIONAL_RESULT:
            variadic_results = True
            results += [] if value is None else [value]
            result_segments.append(0 if value is None else 1)
        elif kind == VARIADIC_RESULT:
            variadic_results = True
            results += list(value or [])
            result_segments.append(len(value or []))
    for value in operands:
        if not isinstance(value, ir.Value):
            raise TypeError(f"{op_class.OPERATION_NAME}: operand {value!r} is not an MLIR value")
    if variadic_operands:
        attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(operand_segments)
    if variadic_results:
        attributes["resultSegmentSizes"] = ir.DenseI32ArrayAttr.get(result_segments)
    return ir.Operation.create(op_class.OPERATION_NAME, results=results, operands=operands,
                               attributes=attributes, loc=loc)
