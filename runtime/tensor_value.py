"""One tensor value of a loaded method: its storage (fixed at load) and its current array."""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError

__all__ = ["TensorValue", "logical_view"]


def logical_view(flat: np.ndarray, shape: tuple, dim_order: tuple | None) -> np.ndarray:
    """The first prod(shape) elements of `flat`, laid out in `dim_order`, seen with logical `shape`."""
    count = int(np.prod(shape, dtype=np.int64))
    if dim_order is None:
        return flat[:count].reshape(shape)
    physical = flat[:count].reshape([shape[d] for d in dim_order])
    return physical.transpose(np.argsort(dim_order))


class TensorValue:
    """One tensor value: its storage (fixed at load) and its current array.

    `array` is what a kernel reading the value sees (current shape); `capacity()` is
    what a kernel writing it gets (the whole storage at the upper-bound shape).
    Planned and private tensors own `storage`; a constant's storage is read-only;
    results that are not views of the tensor's own storage are copied into it,
    except for tensors the planner left out, which simply take (alias) the array
    they are given, as ExecuTorch's et_view and MoveCall do.
    """

    __slots__ = ("index", "dtype", "max_shape", "dim_order", "dynamic", "storage", "planned", "constant",
                 "unbound", "array", "_capacity", "_lo", "_hi")

    def __init__(self, index: int, dtype: np.dtype, shape: tuple, dim_order: tuple | None, dynamic: bool,
                 storage: np.ndarray | None, *, planned: bool, constant: bool):
        self.index = index
        self.dtype = dtype
        self.max_shape = shape
        self.dim_order = dim_order
        self.dynamic = dynamic
        self.storage = storage
        self.planned = planned
        self.constant = constant
        self.unbound = False  # DYNAMIC_UNBOUND and unplanned: may outgrow its sizes (storage regrown)
        if storage is not None:
            self._capacity = logical_view(storage.view(dtype), shape, dim_order)
            self._lo = storage.ctypes.data
            self._hi = self._lo + storage.nbytes
        else:
            self._capacity, self._lo, self._hi = None, 0, 0
        self.array = self._capacity

    def capacity(self) -> np.ndarray:
        return self._capacity if self._capacity is not None else self.array

    def regrow(self, shape: tuple, storage: np.ndarray) -> None:
        """New, larger storage for an unbound tensor (the only allocation an execute may make)."""
        self.max_shape = shape
        self.storage = storage
        self._capacity = logical_view(storage.view(self.dtype), shape, self.dim_order)
        self._lo = storage.ctypes.data
        self._hi = self._lo + storage.nbytes
        self.array = self._capacity

    def resize(self, shape: tuple) -> np.ndarray:
        """Re-view the storage with `shape` (the caller checked it fits) and make that current."""
        if shape != self.max_shape or self.array is not self._capacity:
            self.array = (self._capacity if shape == self.max_shape
                          else logical_view(self.storage.view(self.dtype), shape, self.dim_order))
        return self.array

    def owns(self, array: np.ndarray) -> bool:
        if self.storage is None or array.size == 0:
            return False
        start = array.__array_interface__["data"][0]
        return self._lo <= start < self._hi

    def accept(self, result) -> None:
        """Make `result` (a kernel's or backend's output) the current value."""
        if result is self._capacity and result is not None:  # the common case: written in place, full shape
            self.array = result
            return
        if result is None:  # written in place at the shape it was handed over with
            self.array = self.capacity()
            return
        if self.constant:
            raise ExecutionError(f"an instruction writes into constant tensor {self.index}", value=self.index)
        if not isinstance(result, np.ndarray):
            result = np.asarray(result, dtype=self.dtype)
        if self.storage is None or not self.planned:
            # Unplanned: take the array as it is (a view of another value, or one a kernel made).
            self.array = result if result.dtype == self.dtype else result.astype(self.dtype)
            return
        if self.owns(result):
            self.array = result
            return
        if result.size > self._capacity.size or (not self.dynamic and result.shape != self.max_shape):
            raise ExecutionError(
                f"a result of shape {list(result.shape)} does not fit tensor {self.index}, planned as "
                f"{list(self.max_shape)}{' at most' if self.dynamic else ''}", value=self.index)
        target = self.resize(result.shape)
        with np.errstate(all="ignore"):
            np.copyto(target, result, casting="unsafe")

    def describe(self) -> str:
        shape = self.array.shape if self.array is not None else self.max_shape
        return f"tensor {self.dtype}{list(shape)}"
