"""`OpInfo`: what every generated aten/edge op knows about its ATen operator,
and the encoding of schema arguments as MLIR operands and attributes.

The encoding (ARCHITECTURE.md, "Dialects") is one table here, used both ways:
`encode_arguments` when the importer builds an op from FX values, and
`decode_arguments` when a later stage (emitter, cpu target) needs the schema
values back. Keeping both directions in one file is what keeps them inverse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from torch_mlir import ir

from etc.errors import UnsupportedConstructError
from etc.ir.dtypes import element_type, torch_dtype_name_of_element_type
from etc.ir.ops import as_operation
from etc.ir.schema_types import SchemaType, schema_type, spelled

TABLE_PATH = Path(__file__).with_name("aten_ops.json")

# `ShapedType.get_dynamic_size()`: marks a symbolic entry in an i64 attribute;
# its value is the next operand of the argument's `<name>_dynamic` group.
DYNAMIC = -(2**63)

# IRDL requires every element of a variadic operand group to have the same
# type (a constraint is a variable), which tensor lists (`cat`, `split`
# results, LSTM weights) do not. A tensor list is therefore a run of numbered
# optional slots, `tensors_0 .. tensors_{N-1}`, positional (an absent slot is
# a None of a `Tensor?[]`, whose length is its `_mask` attribute).
LIST_SLOTS = 64


@dataclass(frozen=True)
class ArgInfo:
    name: str  # the schema's name (`self`)
    field: str  # the op field (`self_`)
    type: str  # torchgen type text (`Tensor?`, `SymInt[]`, `ScalarType?`)
    kind: str  # operand | optional_operand | variadic_operand | optional_list_operand | attribute
    default: str | None = None
    dynamic: str | None = None  # field of the symbolic-values operand group
    mask: str | None = None  # field of the presence mask of a `Tensor?[]`

    @property
    def schema_type(self) -> SchemaType:
        """The row of the schema-type table (etc.ir.schema_types) this argument's type reads as."""
        return schema_type(self.type)

    @property
    def base(self) -> str:
        """The canonical type name (`int[2]?` -> `int[]`, `SymInt` -> `int`)."""
        return self.schema_type.name

    @property
    def optional(self) -> bool:
        return spelled(self.type).optional


@dataclass(frozen=True)
class OpInfo:
    name: str  # `add_tensor` (without the dialect prefix)
    torch_name: str  # `aten::add.Tensor`
    core: bool
    arguments: tuple[ArgInfo, ...]
    returns: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def fields(self) -> list[tuple[str, str]]:
        """`define_op` fields in IRDL order: schema arguments, then dynamic/mask groups, then results."""
        out = []
        for a in self.arguments:
            if a.kind in ("variadic_operand", "optional_list_operand"):
                out += [(slot, "optional_operand") for slot in list_slots(a.field)]
            else:
                out.append((a.field, a.kind))
        for a in self.arguments:
            if a.dynamic:
                out.append((a.dynamic, "variadic_operand"))
            if a.mask:
                out.append((a.mask, "attribute"))
        for r in self.returns:
            if r["kind"] == "variadic_result":
                out += [(slot, "optional_result") for slot in list_slots(r["field"])]
            else:
                out.append((r["field"], r["kind"]))
        return out

    @property
    def out_variant(self) -> str | None:
        """The out-variant kernel name (`aten::add.out`) the portable runtime runs."""
        from etc.dialects.out_variants import out_variant_name

        return out_variant_name(self.torch_name)


def list_slots(field: str) -> list[str]:
    return [f"{field.rstrip('_')}_{i}" for i in range(LIST_SLOTS)]


@lru_cache(maxsize=None)
def load_table() -> tuple[OpInfo, ...]:
    from etc.dialects.quantized_ops import table_entries

    table = json.loads(TABLE_PATH.read_text())
    infos = []
    for op in list(table["ops"]) + list(table_entries()):  # ATen, then PT2E/torchao quantization ops
        args = tuple(ArgInfo(**a) for a in op["arguments"])
        infos.append(OpInfo(name=op["name"], torch_name=op["torch_name"], core=op["core"], arguments=args,
                            returns=tuple(op["returns"])))
    return tuple(infos)


@lru_cache(maxsize=None)
def by_torch_name() -> dict[str, OpInfo]:
    return {info.torch_name: info for info in load_table()}


# ------------------------------------------------------------------ encoding
# The dialects' column of the schema-type table (etc.ir.schema_types): one (encode, decode) pair per
# kind. `encode(value, dynamic)` -> attribute, symbolic entries (ir.Values of index type) written as
# DYNAMIC and appended to `dynamic`; `decode(attr, dynamic)` -> value, taking them back in order.
def _i64(value: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


def _encode_int(value, dynamic):
    if isinstance(value, ir.Value):
        dynamic.append(value)
        return _i64(DYNAMIC)
    return _i64(int(value))


def _decode_int(attr, dynamic):
    value = ir.IntegerAttr(attr).value
    return dynamic.pop(0) if value == DYNAMIC else value


def _encode_int_list(value, dynamic):
    if isinstance(value, int):  # `int[2] stride=1` style broadcast default
        value = [value]
    items = []
    for item in value:
        if isinstance(item, ir.Value):
            dynamic.append(item)
            items.append(DYNAMIC)
        else:
            items.append(int(item))
    return ir.DenseI64ArrayAttr.get(items)


def _encode_scalar(value, dynamic):
    if isinstance(value, ir.Value):
        dynamic.append(value)
        return _i64(DYNAMIC)
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return _i64(value)
    if isinstance(value, float):
        return ir.FloatAttr.get_f64(value)
    raise UnsupportedConstructError(f"a Scalar of type {type(value).__name__} is not supported")


def _decode_scalar(attr, dynamic):
    if isinstance(attr, ir.BoolAttr):
        return ir.BoolAttr(attr).value
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    return _decode_int(attr, dynamic)


def _encode_dtype(value, dynamic):
    if isinstance(value, int):  # a schema default as its ScalarType number (torchao's `output_dtype=6`)
        value = schema_type("ScalarType").value_name(value)
    return ir.TypeAttr.get(element_type(value))


def _decode_dtype(attr, dynamic):
    return getattr(_torch(), torch_dtype_name_of_element_type(ir.TypeAttr(attr).value))


def _encode_generator(value, dynamic):
    raise UnsupportedConstructError("a torch.Generator is not supported")


ATTRIBUTE_OF_KIND = {
    "int": (_encode_int, _decode_int),
    "int_list": (_encode_int_list, lambda attr, dynamic: [dynamic.pop(0) if v == DYNAMIC else v
                                                          for v in ir.DenseI64ArrayAttr(attr)]),
    "float": (lambda value, dynamic: ir.FloatAttr.get_f64(float(value)),
              lambda attr, dynamic: ir.FloatAttr(attr).value),
    "float_list": (lambda value, dynamic: ir.DenseF64ArrayAttr.get([float(v) for v in value]),
                   lambda attr, dynamic: list(ir.DenseF64ArrayAttr(attr))),
    "bool": (lambda value, dynamic: ir.BoolAttr.get(bool(value)), lambda attr, dynamic: ir.BoolAttr(attr).value),
    "bool_list": (lambda value, dynamic: ir.DenseBoolArrayAttr.get([bool(v) for v in value]),
                  lambda attr, dynamic: [bool(v) for v in ir.DenseBoolArrayAttr(attr)]),
    "str": (lambda value, dynamic: ir.StringAttr.get(str(value)), lambda attr, dynamic: ir.StringAttr(attr).value),
    "scalar": (_encode_scalar, _decode_scalar),
    "dtype": (_encode_dtype, _decode_dtype),
    # MemoryFormat, Layout: by torch name (`channels_last`), readable in the IR.
    "enum": (lambda value, dynamic: ir.StringAttr.get(str(value).removeprefix("torch.")),
             lambda attr, dynamic: getattr(_torch(), ir.StringAttr(attr).value)),
    "device": (lambda value, dynamic: ir.StringAttr.get(str(_torch().device(value))),
               lambda attr, dynamic: _torch().device(ir.StringAttr(attr).value)),
    "generator": (_encode_generator, None),
}


def _torch():
    import torch

    return torch


def encode_value(arg: ArgInfo, value: Any, dynamic: list) -> ir.Attribute:
    """One non-tensor schema value -> its attribute; symbolic entries (ir.Value
    of index type) become DYNAMIC and are appended to `dynamic`."""
    if value is None:
        return ir.UnitAttr.get()
    codec = ATTRIBUTE_OF_KIND.get(arg.schema_type.kind)
    if codec is None:
        raise UnsupportedConstructError(f"arguments of type '{arg.type}' are not supported")
    try:
        return codec[0](value, dynamic)
    except UnsupportedConstructError as error:
        raise UnsupportedConstructError(f"argument '{arg.name}': {error.message}") from None


def decode_value(arg: ArgInfo, attr: ir.Attribute, dynamic: list) -> Any:
    """Inverse of `encode_value`; symbolic entries come back as the ir.Values
    taken in order from `dynamic`."""
    if isinstance(attr, ir.UnitAttr) or str(attr) == "unit":
        return None
    codec = ATTRIBUTE_OF_KIND.get(arg.schema_type.kind)
    if codec is None or codec[1] is None:
        raise UnsupportedConstructError(f"cannot decode an argument of type '{arg.type}'")
    return codec[1](attr, dynamic)


def decode_op(op) -> dict[str, Any]:
    """Schema argument name -> value for an aten or edge op (inverse of `build_op`)."""
    operation = as_operation(op)
    view = operation.opview
    info: OpInfo = type(view).OP_INFO
    values: dict[str, Any] = {}
    for arg in info.arguments:
        if arg.kind in ("operand", "optional_operand"):
            values[arg.name] = getattr(view, arg.field)
        elif arg.kind == "variadic_operand":
            slots = [getattr(view, slot) for slot in list_slots(arg.field)]
            values[arg.name] = [v for v in slots if v is not None]
        elif arg.kind == "optional_list_operand":
            count = len(ir.DenseBoolArrayAttr(operation.attributes[arg.mask]))
            values[arg.name] = [getattr(view, slot) for slot in list_slots(arg.field)[:count]]
        else:
            dynamic = list(getattr(view, arg.dynamic)) if arg.dynamic else []
            values[arg.name] = decode_value(arg, operation.attributes[arg.field], dynamic)
    return values
