"""Matrix products: mm, bmm, addmm, baddbmm, matmul-like ops."""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import BOOL, result_type, to_dtype, write_out
from etc.runtime.kernels.registry import kernel


def compute_dtype(dtype) -> np.dtype:
    """Where to accumulate a product: half precision in float32 (as ATen's opmath does)."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype == BOOL:
        return np.dtype(np.int64)
    return dtype


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in ATen's result dtype (accumulating half in float32, bool as 'any')."""
    dtype = result_type(a, b)
    cd = compute_dtype(dtype)
    res = np.matmul(to_dtype(a, cd), to_dtype(b, cd))
    if dtype == BOOL:
        return res != 0
    return res.astype(dtype, copy=False)


def _check_mm(a, b, op):
    if a.ndim != 2 or b.ndim != 2:
        raise ExecutionError(f"{op}: expected 2-D matrices, got shapes {list(a.shape)} and {list(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ExecutionError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied")


@kernel("aten::mm.out")
def mm_out(self, mat2, out=None):
    _check_mm(self, mat2, "mm")
    return write_out(out, matmul(self, mat2))


@kernel("aten::bmm.out")
def bmm_out(self, mat2, out=None):
    if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]:
        raise ExecutionError(f"bmm: shapes {list(self.shape)} and {list(mat2.shape)} cannot be multiplied")
    return write_out(out, matmul(self, mat2))


def _scaled_sum(inp, prod, beta, alpha):
    dtype = result_type(inp, prod)
    cd = compute_dtype(dtype)
    prod = to_dtype(prod, cd)
    if alpha != 1:
        prod = prod * to_dtype(alpha, cd)
    if beta == 0:
        res = np.broadcast_to(prod, np.broadcast_shapes(prod.shape, inp.shape))
    else:
        i = to_dtype(inp, cd)
        if beta != 1:
            i = i * to_dtype(beta, cd)
        res = prod + i
    return res.astype(dtype, copy=False)


@kernel("aten::addmm.out")
def addmm_out(self, mat1, mat2, beta=1, alpha=1, out=None):
    _check_mm(mat1, mat2, "addmm")
    return write_out(out, _scaled_sum(self, matmul(mat1, mat2), beta, alpha))


@kernel("aten::baddbmm.out")
def baddbmm_out(self, batch1, batch2, beta=1, alpha=1, out=None):
    return write_out(out, _scaled_sum(self, matmul(batch1, batch2), beta, alpha))


@kernel("aten::addbmm.out")
def addbmm_out(self, batch1, batch2, beta=1, alpha=1, out=None):
    prod = matmul(batch1, batch2)
    prod = prod.sum(axis=0, dtype=compute_dtype(prod.dtype)).astype(prod.dtype)
    return write_out(out, _scaled_sum(self, prod, beta, alpha))


@kernel("aten::addmv.out")
def addmv_out(self, mat, vec, beta=1, alpha=1, out=None):
    return write_out(out, _scaled_sum(self, matmul(mat, vec), beta, alpha))


@kernel("aten::mv.out")
def mv_out(self, vec, out=None):
    return write_out(out, matmul(self, vec))


@kernel("aten::dot.out", "aten::vdot.out")
def dot_out(self, tensor, out=None):
    return write_out(out, matmul(self, tensor))


@kernel("aten::_cdist_forward.out")
def cdist_forward_out(x1, x2, p, compute_mode=None, out=None):
    dtype = result_type(x1, x2)
    cd = compute_dtype(dtype)
    a = to_dtype(x1, cd)[..., :, None, :]
    b = to_dtype(x2, cd)[..., None, :, :]
    d = np.abs(a - b)
    if p == 0:
        res = (d != 0).sum(-1).astype(cd)
    elif p == float("inf"):
        res = d.max(-1, initial=0)
    elif p == 1:
        res = d.sum(-1)
    elif p == 2:
        res = np.sqrt((d * d).sum(-1))
    else:
        res = (d ** p).sum(-1) ** (1.0 / p)
    return write_out(out, res.astype(dtype))


@kernel("aten::_pdist_forward.out")
def pdist_forward_out(self, p=2, out=None):
    n = self.shape[0]
    i, j = np.triu_indices(n, 1)
    d = np.abs(self[i].astype(compute_dtype(self.dtype)) - self[j])
    if p == 0:
        res = (d != 0).sum(-1)
    elif p == float("inf"):
        res = d.max(-1, initial=0)
    else:
        res = (d ** p).sum(-1) ** (1.0 / p)
    return write_out(out, res.astype(self.dtype))

