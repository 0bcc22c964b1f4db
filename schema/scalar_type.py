"""ScalarType <-> numpy / torch dtypes, and element sizes.

numpy has no bfloat16 or float8: those types are carried as their bits
(uint16 / uint8 arrays), the same convention as `ProgramIR.constants`.
torch is imported lazily so the schema (and the runtime) work without it.
"""

from __future__ import annotations

import numpy as np

from etc.errors import SerializationError
from etc.schema.program import ScalarType

# (scalar type, element size in bytes, numpy dtype that holds it, torch dtype attribute name)
_TABLE = (
    (ScalarType.BYTE, 1, np.uint8, "uint8"),
    (ScalarType.CHAR, 1, np.int8, "int8"),
    (ScalarType.SHORT, 2, np.int16, "int16"),
    (ScalarType.INT, 4, np.int32, "int32"),
    (ScalarType.LONG, 8, np.int64, "int64"),
    (ScalarType.HALF, 2, np.float16, "float16"),
    (ScalarType.FLOAT, 4, np.float32, "float32"),
    (ScalarType.DOUBLE, 8, np.float64, "float64"),
    (ScalarType.BOOL, 1, np.bool_, "bool"),
    (ScalarType.QINT8, 1, np.int8, "qint8"),
    (ScalarType.QUINT8, 1, np.uint8, "quint8"),
    (ScalarType.QINT32, 4, np.int32, "qint32"),
    (ScalarType.BFLOAT16, 2, np.uint16, "bfloat16"),
    (ScalarType.QUINT4X2, 1, np.uint8, "quint4x2"),
    (ScalarType.QUINT2X4, 1, np.uint8, "quint2x4"),
    (ScalarType.BITS16, 2, np.uint16, "bits16"),
    (ScalarType.FLOAT8E5M2, 1, np.uint8, "float8_e5m2"),
    (ScalarType.FLOAT8E4M3FN, 1, np.uint8, "float8_e4m3fn"),
    (ScalarType.FLOAT8E5M2FNUZ, 1, np.uint8, "float8_e5m2fnuz"),
    (ScalarType.FLOAT8E4M3FNUZ, 1, np.uint8, "float8_e4m3fnuz"),
    (ScalarType.UINT16, 2, np.uint16, "uint16"),
    (ScalarType.UINT32, 4, np.uint32, "uint32"),
    (ScalarType.UINT64, 8, np.uint64, "uint64"),
)

_ELEMENT_SIZE = {st: size for st, size, _, _ in _TABLE}
_TO_NUMPY = {st: np.dtype(dt) for st, _, dt, _ in _TABLE}
# numpy -> ScalarType: the plain type of each dtype (never a quantized or bit-carrier type).
_FROM_NUMPY = {np.dtype(dt): st for st, _, dt, _ in _TABLE if st in (
    ScalarType.BYTE, ScalarType.CHAR, ScalarType.SHORT, ScalarType.INT, ScalarType.LONG, ScalarType.HALF,
    ScalarType.FLOAT, ScalarType.DOUBLE, ScalarType.BOOL, ScalarType.UINT16, ScalarType.UINT32, ScalarType.UINT64)}
_TORCH_NAME = {st: name for st, _, _, name in _TABLE}
# torch dtype name -> ScalarType, for every scalar type with a torch dtype (ScalarType numbers are c10's).
SCALAR_TYPE_OF_TORCH_NAME = {name: st for st, name in _TORCH_NAME.items()}


def element_size(scalar_type: ScalarType | int) -> int:
    """Bytes per element of `scalar_type`."""
    try:
        return _ELEMENT_SIZE[ScalarType(scalar_type)]
    except (ValueError, KeyError):
        raise SerializationError(f"unknown scalar type {scalar_type}") from None


def to_numpy_dtype(scalar_type: ScalarType | int) -> np.dtype:
    """The numpy dtype whose arrays hold `scalar_type` data (bits for bfloat16/float8)."""
    try:
        return _TO_NUMPY[ScalarType(scalar_type)]
    except (ValueError, KeyError):
        raise SerializationError(f"unknown scalar type {scalar_type}") from None


def from_numpy_dtype(dtype) -> ScalarType:
    """The ScalarType of a numpy dtype (uint16 maps to UINT16, not BFLOAT16)."""
    dtype = np.dtype(dtype)
    if dtype not in _FROM_NUMPY:
        raise SerializationError(f"numpy dtype {dtype} has no .pte scalar type")
    return _FROM_NUMPY[dtype]


def to_torch_dtype(scalar_type: ScalarType | int):
    """The torch dtype of `scalar_type` (imports torch)."""
    import torch

    name = _TORCH_NAME.get(ScalarType(scalar_type))
    dtype = getattr(torch, name, None) if name else None
    if dtype is None:
        raise SerializationError(f"scalar type {ScalarType(scalar_type).name} has no torch dtype here")
    return dtype


def from_torch_dtype(dtype) -> ScalarType:
    """The ScalarType of a torch dtype (imports nothing: matches by name)."""
    name = str(dtype).removeprefix("torch.")
    for st, torch_name in _TORCH_NAME.items():
        if torch_name == name:
            return st
    raise SerializationError(f"torch dtype {dtype} has no .pte scalar type")
