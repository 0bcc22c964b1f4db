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

import functools
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

    The class is what `class X(dialect.Operation, name=...)` with the fields as annotations
    makes (the same field definitions, accessors, `Adaptor` and IRDL; test_dialects checks it),
    written as class bodies: upstream's class hooks parse every annotation, write an `__init__`
    signature and set each accessor on the finished class one by one (slow on nanobind types),
    about a second of every process's start for aten's 1,577 ops (each `etc-opt`, each `etc`
    command). The keyword `__init__` is generated on first call (etc builds through `create`).
    """
    defs = [_field_def(name, kind) for name, kind in fields]
    operands = [d for d in defs if isinstance(d, ext.OperandDef)]
    results = [d for d in defs if isinstance(d, ext.ResultDef)]
    operand_segments = _segments(operands)
    result_segments = _segments(results)
    name = f"{dialect.DIALECT_NAMESPACE}.{op_name}"
    body = dict(namespace or {})
    adaptor = {"OPERATION_NAME": name}
    for d in defs:
        if isinstance(d, ext.AttributeDef):
            body[d.name] = adaptor[d.name] = _attribute_accessor(d.name)
    operand_key = tuple(operand_segments) if operand_segments else None
    result_key = tuple(result_segments) if result_segments else None
    for i, d in enumerate(operands):
        body[d.name] = _accessor(_op_operands, i, d.variadicity, operand_key)
        adaptor[d.name] = _accessor(_adaptor_operands, i, d.variadicity, operand_key)
    for i, d in enumerate(results):
        body[d.name] = _accessor(_op_results, i, d.variadicity, result_key)
    body.update(
        _fields=defs, _traits=[Pure] if pure else [], _op_name=op_name, OPERATION_NAME=name,
        _ODS_REGIONS=(0, True), _ODS_OPERAND_SEGMENTS=operand_segments,
        _ODS_RESULT_SEGMENTS=result_segments, __init__=_build_on_first_call,
        Adaptor=type("Adaptor", (ir.OpAdaptor,), adaptor))
    if verifier is not None:
        body["verify_invariants"] = verifier
    cls = type(class_name, (_table_base(dialect),), body)
    cls.Adaptor._operation_cls = cls
    return cls


_VARIADICITY = {
    OPERAND: ext.Variadicity.single, OPTIONAL_OPERAND: ext.Variadicity.optional,
    VARIADIC_OPERAND: ext.Variadicity.variadic, ATTRIBUTE: ext.Variadicity.single,
    RESULT: ext.Variadicity.single, OPTIONAL_RESULT: ext.Variadicity.optional,
    VARIADIC_RESULT: ext.Variadicity.variadic,
}
_SEGMENT = {ext.Variadicity.single: 1, ext.Variadicity.optional: 0, ext.Variadicity.variadic: -1}


# The field definitions and accessors below are memoized: aten's ops repeat a few hundred field names
# and a few segment layouts, so sharing them (they hold no per-op state) takes a third off every
# process's start.
@functools.cache
def _field_def(name: str, kind: str):
    """The upstream field definition that the annotation `name: _ANNOTATIONS[kind]` parses to."""
    variadicity = _VARIADICITY[kind]
    if kind == ATTRIBUTE:
        return ext.AttributeDef(name, variadicity, Any)
    if kind in (OPERAND, OPTIONAL_OPERAND, VARIADIC_OPERAND):
        return ext.OperandDef(name, variadicity, Any)
    return ext.ResultDef(name, variadicity, Any)


def _segments(defs) -> list[int] | None:
    """Upstream's segment template: None when every value is single."""
    if all(d.variadicity == ext.Variadicity.single for d in defs):
        return None
    return [_SEGMENT[d.variadicity] for d in defs]


# Where an accessor finds its values and their segment sizes, on an op and on its adaptor.
def _op_operands(view):
    return view.operation.operands, view.operation.attributes, "operandSegmentSizes"


def _op_results(view):
    return view.operation.results, view.operation.attributes, "resultSegmentSizes"


def _adaptor_operands(view):
    return view.operands, view.attributes, "operandSegmentSizes"


@functools.cache
def _attribute_accessor(name: str) -> property:
    return property(lambda self: self.attributes[name])


@functools.cache
def _accessor(values_of: Callable, index: int, variadicity, segments: tuple | None) -> property:
    """Value `index` as upstream's accessor reads it: one value, None or a range."""
    if segments is None:
        return property(lambda self: values_of(self)[0][index])

    def read(self):
        values, attributes, sizes = values_of(self)
        return ext.normalize_value_range(ext.segmented_accessor(values, attributes[sizes], index), variadicity)
    return property(read)


_TABLE_BASES: dict[type, type] = {}


def _table_base(dialect: type) -> type:
    """`dialect.Operation` whose class hook only registers the op: `define_op` wrote the body."""
    base = _TABLE_BASES.get(dialect)
    if base is None:
        base = type(f"{dialect.__name__}TableOperation", (dialect.Operation,),
                    {"__init_subclass__": classmethod(lambda cls: cls._dialect_obj.operations.append(cls))})
        _TABLE_BASES[dialect] = base
    return base


def _build_on_first_call(self, *args, **kwargs):
    """Upstream's keyword builder, generated when the op class is first called."""
    cls = type(self)
    cls._generate_init_method(cls._fields)
    cls.__init__(self, *args, **kwargs)


# Each dialect's IRDL definition as MLIR bytecode, made once per process and read by every later
# context (each `to_edge` makes one). A dialect of table-defined ops gets its definition written as
# text (`table_irdl`): upstream emits it op by op through the Python builders and canonicalizes
# it, about half a second for aten's 1,577 ops, at every process's start.
_IRDL_BYTECODE: dict = {}


def load(dialect: type, context: ir.Context | None = None) -> None:
    """Load `dialect` into `context` (the current one by default), once."""
    context = context or ir.Context.current
    if context.is_dialect_loaded(dialect.DIALECT_NAMESPACE):
        return
    with context, ir.Location.unknown(context):
        bytecode = _IRDL_BYTECODE.get(dialect)
        if bytecode is None and not _is_table_dialect(dialect):
            dialect.load()  # upstream: emits, canonicalizes, loads, registers the Python classes
        else:
            module = ir.Module.parse(table_irdl(dialect) if bytecode is None else bytecode)
            _load_definition(dialect, module, register_classes=bytecode is None)
        if bytecode is None:
            buffer = io.BytesIO()
            dialect._mlir_module.operation.write_bytecode(buffer)
            _IRDL_BYTECODE[dialect] = buffer.getvalue()


def _is_table_dialect(dialect: type) -> bool:
    return not dialect.types and not dialect.attributes and all(
        _TABLE_BASES.get(dialect) in op.__bases__ for op in dialect.operations)


def table_irdl(dialect: type) -> str:
    """The IRDL of a dialect of `define_op` ops, as upstream's emission prints after
    `canonicalize, cse` (test_dialects compares the two): one `irdl.any` per field."""
    lines = [f"irdl.dialect @{dialect.DIALECT_NAMESPACE} {{"]
    groups = ((ext.OperandDef, "operands"), (ext.AttributeDef, "attributes"), (ext.ResultDef, "results"))
    for op in dialect.operations:
        if not op._fields:
            lines.append(f"  irdl.operation @{op._op_name}")
            continue
        lines.append(f"  irdl.operation @{op._op_name} {{")
        count = 0
        for kind, keyword in groups:
            fields = [f for f in op._fields if isinstance(f, kind)]
            if not fields:
                continue
            names = []
            for f in fields:
                lines.append(f"    %{count} = irdl.any")
                if kind is ext.AttributeDef:
                    names.append(f'"{f.name}" = %{count}')
                else:
                    prefix = {ext.Variadicity.single: "", ext.Variadicity.optional: "optional ",
                              ext.Variadicity.variadic: "variadic "}[f.variadicity]
                    names.append(f"{f.name}: {prefix}%{count}")
                count += 1
            body = ", ".join(names)
            lines.append(f"    irdl.{keyword} {{{body}}}" if kind is ext.AttributeDef else f"    irdl.{keyword}({body})")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _load_definition(dialect: type, module: ir.Module, *, register_classes: bool) -> None:
    """What upstream's load does after emitting: load the definition and attach the traits (per
    context); register the Python classes (once per process)."""
    from torch_mlir.dialects import irdl

    irdl.load_dialects(module)
    dialect._mlir_module = module
    for op in dialect.operations:
        op._attach_traits()
    if register_classes:
        ext._cext.globals._register_dialect_impl(dialect.DIALECT_NAMESPACE, dialect, replace=True)
        for op in dialect.operations:
            ext._cext.register_operation(dialect, replace=True)(op)
            ext._cext.register_op_adaptor(op, replace=True)(op.Adaptor)
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
