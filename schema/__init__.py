"""The `.pte` program format, wire-compatible with ExecuTorch.

- `etc.schema.program`: one dataclass per table of the schema (Program,
  ExecutionPlan, EValue, Tensor, KernelCall, ...), the enums (ScalarType, ...),
  and `PteFile` = a Program plus its segment payloads, free of file offsets.
- `serialize_pte(pte, *, segment_alignment=128, constant_tensor_alignment=16,
  delegate_alignment=None) -> bytes` (raises SerializationError).
- `deserialize_pte(data, *, validate=True, verify_checksums=True) -> PteFile`: checks
  every offset, length, tag and index, and etc's per-segment CRCs (`checksums`);
  raises ProgramError saying what and where.
- `checksums`: the CRC trailer etc writes after ExecuTorch's data; `input_dims`: the
  `torch.export.Dim` constraints of a method's inputs, carried as named data.
- `validate_pte(pte)`: the semantic checks alone (for programs built in memory).
- dtype helpers: `element_size`, `to/from_numpy_dtype`, `to/from_torch_dtype`.
- `schema/program.fbs`: the same schema as FlatBuffers text.
"""

from etc.schema import program
from etc.schema.program import *  # noqa: F401,F403  (the schema's table/enum names are the API)
from etc.schema.program import FILE_IDENTIFIER, SCHEMA_VERSION, TABLES, PteFile, ScalarType
from etc.schema.reader import deserialize_pte
from etc.schema.scalar_type import (element_size, from_numpy_dtype, from_torch_dtype, to_numpy_dtype,
                                    to_torch_dtype)
from etc.schema.serializer import serialize_pte
from etc.schema.validate import tensor_nbytes, validate_pte
