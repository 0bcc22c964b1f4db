"""The one dtype table: torch dtype name <-> MLIR element type <-> the numpy dtype a constant's
bytes are stored as <-> element size <-> the C type of a buffer of it. Every stage (importer, dialects,
passes, emitter, targets, the C library's header) converts through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from etc.errors import UnsupportedConstructError


@dataclass(frozen=True)
class DType:
    """One row of the dtype table: torch name, MLIR element type, numpy dtype
    the bytes are stored as, element size in bytes, the C type a native library's
    buffer of it has (half floats as their bits)."""

    torch_name: str
    mlir: str
    numpy: str
    itemsize: int
    c_type: str


DTYPES: tuple[DType, ...] = (
    DType("float32", "f32", "float32", 4, "float"),
    DType("float64", "f64", "float64", 8, "double"),
    DType("float16", "f16", "float16", 2, "uint16_t"),
    DType("bfloat16", "bf16", "uint16", 2, "uint16_t"),  # numpy has no bfloat16: keep the bits
    DType("int8", "i8", "int8", 1, "int8_t"),
    DType("int16", "i16", "int16", 2, "int16_t"),
    DType("int32", "i32", "int32", 4, "int32_t"),
    DType("int64", "i64", "int64", 8, "int64_t"),
    DType("uint8", "ui8", "uint8", 1, "uint8_t"),
    DType("bool", "i1", "bool", 1, "uint8_t"),
)
_BY_TORCH = {row.torch_name: row for row in DTYPES}
_BY_MLIR = {row.mlir: row for row in DTYPES}
# Each row's storage dtype is its own (bfloat16's bits are the only uint16 buffers: torch.uint16 has no row).
_BY_NUMPY = {row.numpy: row for row in DTYPES}


def torch_dtype_name(dtype) -> str:
    """`torch.float32` -> "float32"."""
    return str(dtype).removeprefix("torch.")


def dtype_row(dtype) -> DType:
    """The table row of a torch dtype (or its name); UnsupportedConstructError otherwise."""
    name = dtype if isinstance(dtype, str) else torch_dtype_name(dtype)
    row = _BY_TORCH.get(name)
    if row is None:
        raise UnsupportedConstructError(
            f"dtype {name} is not supported (supported: {', '.join(_BY_TORCH)})")
    return row


def element_type(dtype) -> ir.Type:
    """The MLIR element type of a torch dtype, in the current context."""
    return ir.Type.parse(dtype_row(dtype).mlir)


def torch_dtype_name_of_element_type(element: ir.Type) -> str:
    row = _BY_MLIR.get(str(element))
    if row is None:
        raise UnsupportedConstructError(f"element type {element} has no torch dtype")
    return row.torch_name


def torch_dtype_name_of_numpy(dtype: np.dtype) -> str:
    """The torch dtype of a numpy array's dtype (a uint16 array is not bfloat16 here: numpy has
    uint16 arrays of its own, and a constant's bfloat16 comes with its torch dtype)."""
    row = _BY_NUMPY.get(np.dtype(dtype).name)
    if row is None or row.torch_name == "bfloat16":
        raise UnsupportedConstructError(f"numpy dtype {dtype} has no torch dtype")
    return row.torch_name


def dtype_row_of_storage(numpy_name: str) -> DType:
    """The row whose buffers are stored as numpy dtype `numpy_name` (compiled code's argument specs
    carry the storage dtype: "uint16" is a bfloat16 buffer)."""
    row = _BY_NUMPY.get(np.dtype(numpy_name).name)
    if row is None:
        raise UnsupportedConstructError(f"no dtype is stored as numpy {numpy_name}")
    return row


# MLIR element types with signedness the table's rows spell signless, and unsigned ones it has no row
# for: the torch dtype of each (programs carry them as ExecuTorch's ScalarType).
_MLIR_ALIASES = {"si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64",
                 "ui16": "uint16", "ui32": "uint32", "ui64": "uint64"}


def scalar_type_of(dtype) -> int:
    """ExecuTorch's ScalarType of a torch dtype (or its name) or an MLIR element type (or its text:
    `f32`, `si8`, `ui16`); an int is already one. SerializationError if it has none."""
    from etc.schema.scalar_type import from_torch_dtype

    if isinstance(dtype, int):
        return int(dtype)
    text = str(dtype).removeprefix("torch.")
    row = _BY_MLIR.get(text)
    name = row.torch_name if row is not None else _MLIR_ALIASES.get(text, text)
    return int(from_torch_dtype(name))


def numpy_dtype(dtype) -> np.dtype:
    """The numpy dtype a constant of this torch dtype is stored as."""
    return np.dtype(dtype_row(dtype).numpy)
