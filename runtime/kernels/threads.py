"""The BLAS thread count behind numpy's matmul (conv, mm, linear kernels).

OpenBLAS starts one thread per core; on a small or shared machine, busy-waiting
threads can make a matmul tens of times slower than one thread. The runtime (or a
user) may call `set_blas_threads(1)`. Nothing here runs on import: the setting is
process-wide, so it is the embedding application's choice.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads_64_", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads_64_", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _library():
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _symbol(names):
    lib = _library()
    if lib is None:
        return None
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def blas_threads() -> int | None:
    """OpenBLAS's current thread count (None if numpy's BLAS isn't a recognisable OpenBLAS)."""
    fn = _symbol(_GETTERS)
    return int(fn()) if fn is not None else None


def set_blas_threads(count: int) -> bool:
    """Set OpenBLAS's thread count for the whole process; False if it can't be found."""
    fn = _symbol(_SETTERS)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int]
    fn(int(count))
    return True
