"""The data the methods of one program share as the emitter writes them: constants (stored once per
distinct bytes), the mutable buffers' initial state, delegate blobs, and constants that go into
external .ptd files (`external_constants`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from etc.errors import LoweringError
from etc.ir.locations import format_location

__all__ = ["DEFAULT_EXTERNAL_TAG", "ProgramData", "external_tag_function"]


def _where(op) -> str:
    return format_location(op.location)


@dataclass
class ProgramData:
    """What the methods of one program share: constants and delegate blobs."""

    constants: dict  # fqn -> numpy array (from ProgramIR)
    constant_index: dict = field(default_factory=dict)  # fqn -> data_buffer_idx (>= 1)
    constant_data: list = field(default_factory=list)  # bytes, index i-1 for data_buffer_idx i
    constant_by_bytes: dict = field(default_factory=dict)  # bytes -> data_buffer_idx: equal constants stored once
    delegate_blobs: list = field(default_factory=list)  # bytes
    mutable_index: dict = field(default_factory=dict)  # fqn -> index in the mutable data segment (>= 1)
    mutable_data: list = field(default_factory=list)  # bytes, index i-1 for data_buffer_idx i
    # `external_constants`: fqn -> the name of the .ptd that holds it, or None (in the program).
    external_tag: Callable | None = None
    external_data: dict = field(default_factory=dict)  # tag -> PtdFile

    def external(self, name: str, op, scalar_type, sizes: list[int]) -> str | None:
        """The .ptd tag of constant `name` when it goes outside the program (its data then added to
        that file under `name`, with its layout), else None."""
        tag = self.external_tag(name) if self.external_tag is not None else None
        if tag is None:
            return None
        if not isinstance(tag, str) or not tag or "/" in tag or "\\" in tag:
            raise LoweringError(f"external_constants gave {tag!r} for constant '{name}': a .ptd name must be a "
                                "non-empty str without a path separator (or None to keep it in the program)",
                                location=_where(op))
        if name not in self.constants:
            raise LoweringError(f"constant '{name}' has no data in the program's constant table", location=_where(op))
        from etc.schema.flat_tensor import DataEntry, PtdFile, TensorLayout

        ptd = self.external_data.setdefault(tag, PtdFile())
        if name not in ptd.entries:
            ptd.entries[name] = DataEntry(np.ascontiguousarray(self.constants[name]).tobytes(), TensorLayout(
                scalar_type=scalar_type, sizes=list(sizes), dim_order=list(range(len(sizes)))))
        return tag

    def mutable(self, name: str, op) -> int:
        """The mutable-data index of a buffer the program writes (its initial state), or 0 when that
        state is all zeros.

        Zeros are not stored: planned memory starts zeroed (etc's runtime allocates its arenas with
        np.zeros; ExecuTorch's Module and pybindings value-initialize theirs, and a static C arena is
        zero-initialized), so a fresh KV cache costs the program nothing, as in ExecuTorch's own
        programs, instead of its full size (a 2k-token cache of a 1B model is over 100 MB). The
        tensor still names its buffer (`ExtraTensorInfo.fully_qualified_name`), which is how a
        runtime tells state that lives from one execute to the next from a planned intermediate.
        """
        if name not in self.mutable_index:
            if name not in self.constants:
                raise LoweringError(f"buffer '{name}' has no initial data in the program's constant table",
                                    location=_where(op))
            data = np.ascontiguousarray(self.constants[name]).tobytes()
            if data.count(0) == len(data):
                self.mutable_index[name] = 0
            else:
                self.mutable_data.append(data)
                self.mutable_index[name] = len(self.mutable_data)
        return self.mutable_index[name]

    def constant(self, name: str, op) -> int:
        if name not in self.constant_index:
            if name not in self.constants:
                raise LoweringError(f"constant '{name}' has no data in the program's constant table", location=_where(op))
            data = np.ascontiguousarray(self.constants[name]).tobytes()
            # Constants are read-only: tensors with the same bytes (a quantized model's all-zero
            # zero points, one per layer) share one buffer, as in ExecuTorch's programs.
            if data not in self.constant_by_bytes:
                self.constant_data.append(data)
                self.constant_by_bytes[data] = len(self.constant_data)
            self.constant_index[name] = self.constant_by_bytes[data]
        return self.constant_index[name]


DEFAULT_EXTERNAL_TAG = "_default_external_constant"  # ExecuTorch's name for the .ptd of external_constants=True


def external_tag_function(option) -> Callable | None:
    """`ExecutorchBackendConfig.external_constants` as fqn -> .ptd name or None."""
    if option is True:
        return lambda name: DEFAULT_EXTERNAL_TAG
    if not option:
        return None
    if callable(option):
        return option
    raise LoweringError(f"external_constants must be a bool or a callable (fqn -> .ptd name or None), "
                        f"got {type(option).__name__}")
