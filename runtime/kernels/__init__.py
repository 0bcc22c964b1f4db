"""The portable kernel library: numpy kernels for ExecuTorch's out-variant operators.

Importing this package registers every kernel. Use `get_kernel("aten::add.out")`
and call it with the operator's arguments in schema order, out tensors last.
"""

from etc.runtime.kernels.registry import get_kernel, has_kernel, kernel, register_kernel, registered_kernels
from etc.runtime.kernels.common import write_out
from etc.runtime.kernels import (backward, creation, elementwise, extras, indexing, linalg,  # noqa: F401
                                nn, reductions, shape)  # (importing registers the kernels)

__all__ = ["get_kernel", "has_kernel", "kernel", "register_kernel", "registered_kernels", "write_out"]
