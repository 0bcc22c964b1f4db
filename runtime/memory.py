"""Planned memory: one arena per mem_id, allocated once per loaded method.

`non_const_buffer_sizes[k]` is the size of arena k (slot 0 is reserved and
mem_ids are 1-based, as in the `.pte` format). Tensors are views into their
arena at their planned offset, so an inference allocates nothing. Arenas are
aligned to 64 bytes, which native delegates rely on for vector loads.
"""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError, ProgramError


def aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """A zeroed uint8 array of `nbytes` whose data pointer is a multiple of `alignment`."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


class MemoryManager:
    def __init__(self, buffer_sizes, *, alignment: int = 64):
        self.alignment = alignment
        self.buffer_sizes = [int(size) for size in buffer_sizes]
        self.arenas = [None]
        for mem_id, size in enumerate(self.buffer_sizes[1:], start=1):
            try:
                self.arenas.append(aligned_bytes(size, alignment))
            except (MemoryError, ValueError):
                # numpy's _ArrayMemoryError is a MemoryError: a (corrupted?) plan asking for more than exists.
                raise ExecutionError(f"cannot allocate planned memory id {mem_id} of {size} bytes "
                                     "(non_const_buffer_sizes)") from None
        self.private_bytes = 0

    def view(self, mem_id: int, offset: int, nbytes: int, *, where: str) -> np.ndarray:
        if not 1 <= mem_id < len(self.arenas):
            raise ProgramError(f"{where}: memory id {mem_id} has no planned buffer "
                               f"(the program plans {len(self.arenas) - 1})")
        arena = self.arenas[mem_id]
        if offset < 0 or offset + nbytes > arena.size:
            raise ProgramError(f"{where}: bytes [{offset}, {offset + nbytes}) lie outside memory id {mem_id} "
                               f"({arena.size} bytes)")
        return arena[offset:offset + nbytes]

    def private(self, nbytes: int) -> np.ndarray:
        """Storage for a tensor the program did not plan (e.g. an unplanned input), allocated at load."""
        self.private_bytes += nbytes
        return aligned_bytes(nbytes, self.alignment)

    @property
    def planned_bytes(self) -> int:
        return sum(self.buffer_sizes[1:])
