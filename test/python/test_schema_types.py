"""The schema-type table (etc.ir.schema_types): every type the op table uses has a row, every
spelling reads as its row, each attribute kind round-trips through the dialects' encoding, the
enum codes are c10's, and an unknown type is a clear error naming it."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch_mlir import ir

from etc.compiler.emitter import EVALUE_OF_KIND
from etc.dialects import opinfo
from etc.dialects.opinfo import ArgInfo, decode_value, encode_value
from etc.errors import UnsupportedConstructError
from etc.ir.schema_types import SCHEMA_TYPES, TENSOR_KINDS, VALUE_KINDS, schema_type, spelled
from etc.schema import ScalarType
from etc.targets.cpu.lowering.torch_ops import TORCH_VALUE_OF_KIND


def _types_of_the_op_table() -> set[str]:
    table = json.loads(opinfo.TABLE_PATH.read_text())
    return {a["type"] for op in table["ops"] for a in op["arguments"]}


def test_every_type_of_the_op_table_has_a_row():
    types = _types_of_the_op_table()
    assert len(types) > 20
    for text in types:
        row = schema_type(text)
        assert row.kind in TENSOR_KINDS | VALUE_KINDS, text


@pytest.mark.parametrize("text, name, optional, symbolic", [
    ("int", "int", False, False), ("SymInt", "int", False, True), ("SymInt?", "int", True, True),
    ("int[]", "int[]", False, False), ("int[2]", "int[]", False, False), ("int[1]?", "int[]", True, False),
    ("SymInt[]", "int[]", False, True), ("List[int]", "int[]", False, False),
    ("Optional[List[int]]", "int[]", True, False), ("float[]", "float[]", False, False),
    ("List[float]", "float[]", False, False), ("bool[3]", "bool[]", False, False),
    ("Tensor", "Tensor", False, False), ("Tensor?", "Tensor", True, False), ("Optional[Tensor]", "Tensor", True, False),
    ("Tensor[]", "Tensor[]", False, False), ("List[Tensor]", "Tensor[]", False, False),
    ("Tensor?[]", "Tensor?[]", False, False), ("List[Optional[Tensor]]", "Tensor?[]", False, False),
    ("Scalar", "Scalar", False, True), ("Scalar?", "Scalar", True, True), ("ScalarType?", "ScalarType", True, False),
    ("MemoryFormat?", "MemoryFormat", True, False), ("Layout", "Layout", False, False),
    ("Device?", "Device", True, False), ("Generator?", "Generator", True, False), ("str", "str", False, False),
])
def test_spellings_read_as_their_row(text, name, optional, symbolic):
    spelling = spelled(text)
    assert (spelling.type.name, spelling.optional, spelling.symbolic) == (name, optional, symbolic)


@pytest.mark.parametrize("text", ["Dimname", "Stream", "SymInt?[]", "Storage", "int[][]", "Tensor!"])
def test_an_unknown_type_is_an_error_naming_it(text):
    with pytest.raises(UnsupportedConstructError, match=f"schema type '{re.escape(text)}' is not supported"):
        schema_type(text)


def test_rows_are_consistent_and_every_consumer_has_a_column():
    names = [row.name for row in SCHEMA_TYPES]
    assert len(names) == len(set(names))
    for row in SCHEMA_TYPES:
        assert row.kind in TENSOR_KINDS | VALUE_KINDS
        assert row.element is None or schema_type(row.element).name == row.element
        assert (row.element is not None) == row.kind.endswith("_list")
    # The cpu lowering gives every value kind but a Generator a torch value; the emitter writes the
    # kinds it does not list as scalar EValues.
    assert set(TORCH_VALUE_OF_KIND) == VALUE_KINDS - {"generator"}
    assert set(EVALUE_OF_KIND) <= TENSOR_KINDS | VALUE_KINDS


def test_enum_codes_are_c10s():
    dtype = schema_type("ScalarType")
    c10 = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
           torch.float32: 6, torch.float64: 7, torch.complex64: 9, torch.bool: 11, torch.qint8: 12,
           torch.bfloat16: 15, torch.float8_e4m3fn: 24, torch.uint16: 27}
    for value, code in c10.items():
        assert dtype.code(value) == code and dtype.value_name(code) == str(value).removeprefix("torch.")
    assert dtype.code(int(ScalarType.FLOAT)) == 6  # a code is already a code
    assert schema_type("MemoryFormat").code(torch.channels_last) == 2
    assert schema_type("Layout").code(torch.strided) == 0
    with pytest.raises(UnsupportedConstructError, match="MemoryFormat value 'nonsense' is not supported"):
        schema_type("MemoryFormat").code("nonsense")


SYMBOL = object()  # stands for a symbolic size: the ir.Value is made inside the context


@pytest.mark.parametrize("type_text, value", [
    ("int", 7), ("SymInt", -3), ("SymInt", SYMBOL), ("int[]", [1, 2, 3]), ("SymInt[]", [4, SYMBOL, 5]),
    ("float", 0.25), ("float[]", [1.5, -2.0]), ("bool", True), ("bool[]", [True, False]), ("str", "tanh"),
    ("Scalar", 3), ("Scalar", 2.5), ("Scalar", False), ("Scalar", SYMBOL), ("ScalarType", torch.bfloat16),
    ("ScalarType", torch.int8), ("MemoryFormat", torch.channels_last), ("Layout", torch.strided),
    ("Device", torch.device("cpu")), ("int?", None),
])
def test_each_value_kind_round_trips_through_its_attribute(type_text, value):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f(%n: index) { return }")
        symbol = module.body.operations[0].regions[0].blocks[0].arguments[0]

        def real(v):
            return symbol if v is SYMBOL else [real(x) for x in v] if isinstance(v, list) else v

        arg = ArgInfo("x", "x", type_text, "attribute")
        dynamic: list = []
        attr = encode_value(arg, real(value), dynamic)
        assert decode_value(arg, attr, list(dynamic)) == real(value)


def test_a_generator_value_is_a_clear_error():
    with ir.Context(), pytest.raises(UnsupportedConstructError, match="argument 'generator'.*Generator"):
        encode_value(ArgInfo("generator", "generator", "Generator?", "attribute"), torch.Generator(), [])


def test_an_integer_dtype_default_reads_as_its_dtype():
    with ir.Context():
        arg = ArgInfo("output_dtype", "output_dtype", "ScalarType", "attribute")
        assert decode_value(arg, encode_value(arg, 6, []), []) is torch.float32
