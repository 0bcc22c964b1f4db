"""Locations and dtype tables of the importer: unit tests that need no model."""

import inspect
import os

import numpy as np
import pytest
import torch
from torch_mlir import ir

from etc.ir import dtypes as program_ir
from etc.ir.locations import (SourcePosition, format_location, location_name, named_location,
                                    source_position, user_source_position)
from etc.errors import UnsupportedConstructError

TORCH_DIR = os.path.dirname(torch.__file__)
THIS_FILE = os.path.abspath(__file__)


def indented_line() -> int:
    """The number of a line whose first non-blank character is at column 9."""
    if True:
        return inspect.currentframe().f_lineno


def trace(*frames):
    """A stack trace in the format torch.export stores in node.meta["stack_trace"]."""
    return "".join(f'  File "{path}", line {line}, in {func}\n    code\n' for path, line, func in frames)


def test_innermost_user_frame_is_chosen_over_torch_frames():
    stack = trace(("/home/user/model.py", 10, "forward"),
                  ("/home/user/blocks.py", 42, "forward"),
                  (os.path.join(TORCH_DIR, "nn/modules/linear.py"), 134, "forward"))
    position = user_source_position(stack)
    assert (position.file, position.line) == ("/home/user/blocks.py", 42)


def test_torch_relative_frames_and_generated_code_are_not_user_code():
    stack = trace(("torch/fx/passes/runtime_assert.py", 24, "insert"), ("<eval_with_key>.3", 5, "forward"))
    assert user_source_position(stack) is None


def test_no_trace_gives_no_position():
    assert user_source_position(None) is None
    assert user_source_position("") is None


def test_column_is_the_first_code_character_of_the_line():
    line = indented_line()
    position = user_source_position(trace((THIS_FILE, line, "f")))
    assert position == SourcePosition(THIS_FILE, line, 9)


def test_named_location_round_trips_to_file_line_col():
    with ir.Context():
        location = named_location("relu_1", SourcePosition("/m.py", 7, 3))
        assert str(location) == 'loc("relu_1"("/m.py":7:3))'
        assert format_location(location) == "/m.py:7:3"
        assert location_name(location) == "relu_1"
        fused = ir.Location.fused([ir.Location.unknown(), location])
        assert source_position(fused) == SourcePosition("/m.py", 7, 3)
        callsite = ir.Location.callsite(ir.Location.file("/callee.py", 1, 2), [ir.Location.file("/caller.py", 3, 4)])
        assert format_location(callsite) == "/callee.py:1:2"
        assert format_location(named_location("x")) == "'x'"
        assert format_location(ir.Location.unknown()) is None


@pytest.mark.parametrize("dtype, mlir", [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"),
                                         (torch.int64, "i64"), (torch.int8, "i8"), (torch.uint8, "ui8"),
                                         (torch.bool, "i1")])
def test_dtype_table_maps_torch_to_mlir_and_back(dtype, mlir):
    with ir.Context():
        element = program_ir.element_type(dtype)
        assert str(element) == mlir
        assert program_ir.torch_dtype_name_of_element_type(element) == str(dtype).removeprefix("torch.")
    assert np.dtype(program_ir.numpy_dtype(dtype)).itemsize == torch.empty((), dtype=dtype).element_size()


def test_unsupported_dtype_is_an_unsupported_construct():
    with pytest.raises(UnsupportedConstructError, match="complex64"):
        program_ir.dtype_row(torch.complex64)
