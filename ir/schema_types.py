"""The schema-type table: one row per torch schema argument type (`int`, `int[]`, `ScalarType`,
`Tensor?[]`, ...), the one place that knows how the spellings of a type relate and what its enum
codes are.

Three stages turn a schema value into something else, each by the row's `kind`:
- the dialects encode it as an MLIR attribute and back (`dialects/opinfo.py`, `encode_value` /
  `decode_value`);
- the cpu target emits it as a torch-mlir value (`targets/cpu/lowering/torch_ops.py`,
  `TorchBuilder.value`);
- the emitter writes it as a `.pte` EValue (`compiler/emitter.py`, `argument`).
Each keeps its column as a dict keyed by `kind` in its own layer (this module imports nothing above
the base), and none of them reads a type string itself: `schema_type` (through `spelled`) is the
one normalization of torchgen's spellings (`SymInt` is an `int` that may be symbolic, `int[2]` and
`List[int]` are `int[]`, a trailing `?` or `Optional[...]` makes any type optional).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from etc.errors import UnsupportedConstructError
from etc.schema.scalar_type import SCALAR_TYPE_OF_TORCH_NAME

# What a consumer does with a value of the type. Tensors are operands; every other kind is a value.
TENSOR_KINDS = frozenset({"tensor", "tensor_list", "optional_tensor_list"})
VALUE_KINDS = frozenset({"int", "int_list", "float", "float_list", "bool", "bool_list", "str", "scalar",
                         "dtype", "enum", "device", "generator"})


@dataclass(frozen=True)
class SchemaType:
    """One row: the canonical spelling, the kind consumers dispatch on, the element row of a list,
    the other spellings of the same type, and the codes of an enum (c10's numbering, which
    torch-mlir and ExecuTorch's Int EValues both use), keyed by the torch name of the value."""

    name: str
    kind: str
    element: str | None = None
    aliases: tuple[str, ...] = ()
    codes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    symbolic: bool = False  # every value may be a symbolic size, whatever the spelling (`Scalar`)

    def code(self, value) -> int:
        """The enum code of `value` (a torch dtype/memory format/layout or its name; an int is
        already a code)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        name = str(value).removeprefix("torch.")
        if name not in self.codes:
            raise UnsupportedConstructError(
                f"{self.name} value '{name}' is not supported (supported: {', '.join(self.codes)})")
        return self.codes[name]

    def value_name(self, code: int) -> str:
        """Inverse of `code`: the torch name of an enum code."""
        for name, number in self.codes.items():
            if number == code:
                return name
        raise UnsupportedConstructError(f"{self.name} code {code} is not known")


# c10::ScalarType codes of dtypes ExecuTorch's ScalarType leaves out (complex): torch-mlir takes them.
_COMPLEX_SCALAR_TYPES = {"complex32": 8, "complex64": 9, "complex128": 10}

SCHEMA_TYPES: tuple[SchemaType, ...] = (
    SchemaType("Tensor", "tensor"),
    SchemaType("Tensor[]", "tensor_list", element="Tensor"),
    SchemaType("Tensor?[]", "optional_tensor_list", element="Tensor"),
    SchemaType("int", "int", aliases=("SymInt",)),
    SchemaType("int[]", "int_list", element="int", aliases=("SymInt[]",)),
    SchemaType("float", "float"),
    SchemaType("float[]", "float_list", element="float"),
    SchemaType("bool", "bool"),
    SchemaType("bool[]", "bool_list", element="bool"),
    SchemaType("str", "str"),
    SchemaType("Scalar", "scalar", symbolic=True),
    SchemaType("ScalarType", "dtype", codes=MappingProxyType(
        {name: int(st) for name, st in SCALAR_TYPE_OF_TORCH_NAME.items()} | _COMPLEX_SCALAR_TYPES)),
    SchemaType("MemoryFormat", "enum", codes=MappingProxyType(
        {"contiguous_format": 0, "preserve_format": 1, "channels_last": 2, "channels_last_3d": 3})),
    SchemaType("Layout", "enum", codes=MappingProxyType({"strided": 0, "sparse_coo": 1})),
    SchemaType("Device", "device"),
    SchemaType("Generator", "generator"),
)
_BY_SPELLING = {spelling: row for row in SCHEMA_TYPES for spelling in (row.name, *row.aliases)}


@dataclass(frozen=True)
class Spelled:
    """A type string read against the table: its row, whether `None` is allowed, and whether its
    values may be symbolic sizes (`SymInt`, `SymInt[]`, `Scalar`)."""

    type: SchemaType
    optional: bool
    symbolic: bool


_OPTIONAL = re.compile(r"Optional\[(.*)\]")
_LIST = re.compile(r"List\[(.*)\]")
_SIZED = re.compile(r"(.+?)\[\d*\]")


def _canonical(text: str) -> tuple[str, bool]:
    """(spelling with list sizes and List[...] rewritten to `X[]`, optional)."""
    text = text.strip()
    match = _OPTIONAL.fullmatch(text)
    if match:
        return _canonical(match.group(1))[0], True
    if text.endswith("?"):
        return _canonical(text[:-1])[0], True
    match = _LIST.fullmatch(text)
    if match:
        element, optional = _canonical(match.group(1))
        return element + ("?" if optional else "") + "[]", False
    match = _SIZED.fullmatch(text)
    if match:
        return match.group(1) + "[]", False
    return text, False


@lru_cache(maxsize=None)
def spelled(type_text: str) -> Spelled:
    """The one reading of a schema type string: `int[2]?` -> (int[], optional), `SymInt` -> (int,
    symbolic), `List[Optional[Tensor]]` -> Tensor?[]. UnsupportedConstructError names an unknown type."""
    canonical, optional = _canonical(type_text)
    row = _BY_SPELLING.get(canonical)
    if row is None:
        raise UnsupportedConstructError(
            f"schema type '{type_text}' is not supported (supported: {', '.join(r.name for r in SCHEMA_TYPES)})")
    return Spelled(row, optional, row.symbolic or canonical.startswith("SymInt"))


def schema_type(type_text: str) -> SchemaType:
    """The row of a schema type string (see `spelled`)."""
    return spelled(type_text).type
