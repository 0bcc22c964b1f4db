"""The one dtype table (etc/ir/dtypes.py) against torch, numpy, ExecuTorch's ScalarType and the C
types a native library's header declares."""

import numpy as np
import pytest
import torch

from etc.errors import UnsupportedConstructError
from etc.ir.dtypes import (DTYPES, dtype_row, dtype_row_of_storage, numpy_dtype, scalar_type_of,
                           torch_dtype_name_of_numpy)
from etc.targets.cpu.library_layout import C_DTYPES

# ExecuTorch's ScalarType numbers (runtime/core/portable_type/scalar_type.h), written out here so the
# table is checked against the format, not against itself.
EXECUTORCH_SCALAR_TYPE = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
                          "float32": 6, "float64": 7, "bool": 11, "bfloat16": 15}
C_SIZES = {"float": 4, "double": 8, "uint16_t": 2, "int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8,
           "uint8_t": 1}


@pytest.mark.parametrize("row", DTYPES, ids=lambda r: r.torch_name)
def test_row_agrees_with_torch_numpy_and_the_format(row):
    dtype = getattr(torch, row.torch_name)
    assert torch.empty((), dtype=dtype).element_size() == row.itemsize
    assert numpy_dtype(dtype).itemsize == row.itemsize
    assert C_SIZES[row.c_type] == row.itemsize
    assert scalar_type_of(dtype) == EXECUTORCH_SCALAR_TYPE[row.torch_name]
    assert dtype_row_of_storage(row.numpy) is row


def test_library_header_codes_come_from_the_table():
    # the header's dtype code of a buffer is its ScalarType; a uint16 buffer holds bfloat16 bits
    assert C_DTYPES["uint16"] == (15, "uint16_t", "bfloat16")
    assert {torch_name: code for code, _, torch_name in C_DTYPES.values()} == EXECUTORCH_SCALAR_TYPE


def test_numpy_dtypes_without_a_torch_dtype_are_refused():
    assert torch_dtype_name_of_numpy(np.dtype("float16")) == "float16"
    with pytest.raises(UnsupportedConstructError, match="uint16"):
        torch_dtype_name_of_numpy(np.dtype("uint16"))  # bfloat16's storage, not a torch dtype of its own
    with pytest.raises(UnsupportedConstructError, match="complex64"):
        dtype_row_of_storage("complex64")
    with pytest.raises(UnsupportedConstructError, match="complex64"):
        dtype_row(torch.complex64)
