"""schema/program.fbs and schema/program.py describe the same wire format, field for field.

program.py drives the serializer and reader; program.fbs is the human (and flatc)
readable text. This parses the .fbs and checks every enum, union, table, field
order and field type against the dataclasses, so the two cannot drift apart.
"""

from __future__ import annotations

import os
import re

import pytest

from etc.schema import program as P
from etc.schema.kinds import Blob, Scalar, Str, Table, Union, Vector, wire_fields

FBS = os.path.join(os.path.dirname(P.__file__), "program.fbs")
SCALAR_FORMATS = {"byte": "b", "ubyte": "B", "bool": "?", "int": "i", "uint": "I", "uint32": "I", "long": "q",
                  "int64": "q", "ulong": "Q", "uint64": "Q", "double": "d"}


def parse_fbs(text: str):
    text = re.sub(r"//[^\n]*", "", text)
    enums = {name: dict((k, int(v)) for k, v in re.findall(r"(\w+)\s*=\s*(-?\d+)", body))
             for name, body in re.findall(r"enum\s+(\w+)\s*:\s*\w+\s*\{([^}]*)\}", text)}
    unions = {name: [m.strip() for m in body.split(",") if m.strip()]
              for name, body in re.findall(r"union\s+(\w+)\s*\{([^}]*)\}", text)}
    tables = {}
    for name, body in re.findall(r"table\s+(\w+)\s*\{([^}]*)\}", text):
        tables[name] = [(field, ftype.strip(), attrs) for field, ftype, attrs in
                        re.findall(r"(\w+)\s*:\s*([\w\[\] ]+?)\s*(?:=\s*[\w.-]+\s*)?(\([^)]*\))?\s*;", body)]
    return enums, unions, tables, re.search(r'file_identifier\s+"(\w+)"', text).group(1)


ENUMS, UNIONS, TABLES, IDENTIFIER = parse_fbs(open(FBS).read())


def test_identifier_and_table_set():
    assert IDENTIFIER.encode() == P.FILE_IDENTIFIER
    assert set(TABLES) == set(P.TABLES)


@pytest.mark.parametrize("enum", [P.ScalarType, P.TensorShapeDynamism, P.TensorDataLocation, P.DataLocation,
                                  P.DeviceType])
def test_enums_match(enum):
    assert ENUMS[enum.__name__] == {member.name: member.value for member in enum}


def kind_matches(kind, ftype: str, attrs: str) -> bool:
    vector = re.fullmatch(r"\[\s*(\w+)\s*\]", ftype)
    if isinstance(kind, Blob):
        align = re.search(r"force_align:\s*(\d+)", attrs or "")
        return ftype == "[ubyte]" and (int(align.group(1)) if align else 1) == kind.align
    if isinstance(kind, Scalar):
        if ftype in ENUMS:
            return kind.enum is not None and kind.enum.__name__ == ftype
        return kind.enum is None and SCALAR_FORMATS.get(ftype) == kind.fmt
    if isinstance(kind, Str):
        return ftype == "string"
    if isinstance(kind, Table):
        return ftype == kind.name
    if isinstance(kind, Union):
        return ftype in UNIONS and tuple(UNIONS[ftype]) == kind.members
    if isinstance(kind, Vector) and vector:
        return kind_matches(kind.element, vector.group(1), "")
    return False


@pytest.mark.parametrize("name", sorted(P.TABLES))
def test_table_fields_match_in_order(name):
    fbs_fields = TABLES[name]
    py_fields = wire_fields(P.TABLES[name])
    assert [f for f, _, _ in fbs_fields] == [f for f, _ in py_fields], "field order is the vtable layout"
    for (field, ftype, attrs), (_, kind) in zip(fbs_fields, py_fields):
        assert kind_matches(kind, ftype, attrs), f"{name}.{field}: .fbs says {ftype} {attrs}, program.py {kind}"
