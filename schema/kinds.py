"""Wire kinds of schema fields: the one table the serializer and reader are driven by.

Every dataclass field of `etc.schema.program` carries one of these kinds in its
metadata. The field's position among the flatbuffer fields of its table is its
vtable slot (a union takes two slots: its type tag, then its value), so field
order in `program.py` *is* the wire layout and must match ExecuTorch's schema.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


@dataclass(frozen=True)
class Scalar:
    """A fixed-size scalar (optionally an enum): `fmt` is its struct format."""

    fmt: str
    enum: type[IntEnum] | None = None

    @functools.cached_property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)


@dataclass(frozen=True)
class Str:
    """A flatbuffer string, as a Python `str` (UTF-8 on the wire)."""


@dataclass(frozen=True)
class Blob:
    """A `[ubyte]` vector of opaque data, as Python `bytes`; `align` is its force_align."""

    align: int = 1


@dataclass(frozen=True)
class Table:
    """A sub-table, as an instance of the named dataclass or None when absent."""

    name: str


@dataclass(frozen=True)
class Vector:
    """A vector of scalars, strings or tables, as a Python list (None when absent)."""

    element: Scalar | Str | Table


@dataclass(frozen=True)
class Union:
    """A union: its member table names in tag order (tag 0 is NONE)."""

    members: tuple[str, ...]


Kind = Scalar | Str | Blob | Table | Vector | Union

# Scalar formats of the flatbuffer base types.
UBYTE, BYTE, BOOL = Scalar("B"), Scalar("b"), Scalar("?")
INT, UINT = Scalar("i"), Scalar("I")
LONG, ULONG = Scalar("q"), Scalar("Q")
DOUBLE = Scalar("d")


def fb(kind: Kind, default: Any = None) -> Any:
    """A dataclass field of wire kind `kind`.

    Scalars default to their flatbuffer default (0, or `default`); everything
    else defaults to None (absent on the wire) unless given a factory.
    """
    if isinstance(kind, Scalar) and default is None:
        default = kind.enum(0) if kind.enum is not None else (False if kind.fmt == "?" else 0)
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata={"fb": kind})
    return dataclasses.field(default=default, metadata={"fb": kind})


@functools.cache
def wire_fields(cls) -> tuple[tuple[str, Kind], ...]:
    """The (name, kind) pairs of a schema dataclass in vtable order (cached: read for every table decoded)."""
    return tuple((f.name, f.metadata["fb"]) for f in dataclasses.fields(cls) if "fb" in f.metadata)


class SchemaTable:
    """Base of every schema dataclass: normalizes blob fields to `bytes`.

    Producers may hand a list of ints for a `[ubyte]` blob (e.g. a compile
    spec value); storing `bytes` keeps equality between written and read-back
    programs meaningful.
    """

    def __post_init__(self):
        for name, kind in wire_fields(type(self)):
            value = getattr(self, name)
            if isinstance(kind, Blob) and value is not None and not isinstance(value, bytes):
                object.__setattr__(self, name, bytes(value))
            elif isinstance(kind, Scalar) and kind.enum is not None and not isinstance(value, kind.enum):
                try:
                    object.__setattr__(self, name, kind.enum(value))
                except ValueError:
                    pass  # left as is; the serializer reports it with its place
