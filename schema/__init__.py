"""The `.pte` program format (wire-compatible with ExecuTorch).

- `etc.schema.program`: dataclasses for every table, union and enum of the schema,
  and `PteFile` (a Program plus its segment payloads, free of offsets).
- `etc.schema.scalar_type`: ScalarType <-> numpy/torch dtypes, element sizes.
"""

from etc.schema import program
from etc.schema.program import *  # noqa: F401,F403  (the schema's names are the API)
from etc.schema.program import PteFile, ScalarType
from etc.schema.scalar_type import (element_size, from_numpy_dtype, from_torch_dtype, to_numpy_dtype,
                                    to_torch_dtype)
