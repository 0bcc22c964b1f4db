"""View-copy kernels (view_copy, permute_copy, slice_copy, ...) and other layout ops
(cat, stack, flip, repeat, pads, clone, _to_copy).

Tensor[] outputs (split_copy, unbind_copy, ...) are lists of arrays; their kernels
return the list of written views.
"""

from __future__ import annotations

import numpy as np

from etc.errors import ExecutionError
from etc.runtime.kernels.common import (normalize_dim, normalize_dims, result_type, sizes, to_dtype,
                                        write_out)
from etc.runtime.kernels.registry import kernel


def infer_size(size, numel: int) -> tuple[int, ...]:
    """`size` with its -1 (at most one) inferred so the product is `numel`."""
    size = [int(s) for s in size]
    infer = [i for i, s in enumerate(size) if s == -1]
    if len(infer) > 1:
        raise ExecutionError(f"view: only one dimension can be inferred, got size {size}")
    known = int(np.prod([s for s in size if s != -1], dtype=np.int64))
    if infer:
        if known == 0 or numel % known:
            raise ExecutionError(f"view: shape {size} is invalid for input of size {numel}")
        size[infer[0]] = numel // known
    elif known != numel:
        raise ExecutionError(f"view: shape {size} is invalid for input of size {numel}")
    if any(s < 0 for s in size):
        raise ExecutionError(f"view: negative dimension in size {size}")
    return tuple(size)


@kernel("aten::view_copy.out", "aten::_unsafe_view.out")
def view_copy_out(self, size, out=None):
    return write_out(out, np.reshape(self, infer_size(size, self.size)))


@kernel("aten::alias_copy.out", "aten::detach_copy.out", "aten::lift_fresh_copy.out")
def alias_copy_out(self, out=None):
    return write_out(out, self)


@kernel("aten::clone.out")
def clone_out(self, memory_format=None, out=None):
    return write_out(out, self)


@kernel("aten::_to_copy.out")
def to_copy_out(self, non_blocking=False, memory_format=None, out=None):
    # the dtype conversion is the out tensor's dtype
    return write_out(out, self)


@kernel("dim_order_ops::_to_dim_order_copy.out")
def to_dim_order_copy_out(self, non_blocking=False, dim_order=None, out=None):
    return write_out(out, self)


@kernel("aten::copy.out")
def copy_out(self, src, non_blocking=False, out=None):
    return write_out(out, np.broadcast_to(src, self.shape))


@kernel("aten::permute_copy.out")
def permute_copy_out(self, dims, out=None):
    dims = normalize_dims(dims, self.ndim, empty_means_all=False)
    if sorted(dims) != list(range(self.ndim)):
        raise ExecutionError(f"permute: dims {list(dims)} are not a permutation of {self.ndim} dims")
    return write_out(out, np.transpose(self, dims))


@kernel("aten::t_copy.out")
def t_copy_out(self, out=None):
    if self.ndim > 2:
        raise ExecutionError(f"t: expected a tensor of at most 2 dims, got {self.ndim}")
    return write_out(out, self.T)


@kernel("aten::transpose_copy.int_out")
def transpose_copy_out(self, dim0, dim1, out=None):
    if self.ndim == 0:
        return write_out(out, self)
    return write_out(out, np.swapaxes(self, normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)))


def expand_shape(shape, size):
    size = [int(s) for s in size]
    if len(size) < len(shape):
        raise ExecutionError(f"expand: the number of sizes ({len(size)}) must be at least the tensor's rank "
                             f"({len(shape)})")
    lead = len(size) - len(shape)
    result = []
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise ExecutionError(f"expand: size -1 not allowed for a new leading dimension {i}")
            result.append(s)
            continue
        cur = shape[i - lead]
        if s == -1:
            result.append(cur)
        elif cur == 1 or cur == s:
            result.append(s)
        else:
            raise ExecutionError(f"expand: size {s} doesn't match the existing size {cur} at dim {i}")
    return tuple(result)


@kernel("aten::expand_copy.out")
def expand_copy_out(self, size, implicit=False, out=None):
    return write_out(out, np.broadcast_to(self, expand_shape(self.shape, size)))


def slice_indices(length: int, start, end, step) -> slice:
    step = 1 if step is None else int(step)
    if step <= 0:
        raise ExecutionError(f"slice: step must be positive, got {step}")
    start = 0 if start is None else int(start)
    end = length if end is None else int(end)
    if start < 0:
        start += length
    if end < 0:
        end += length
    start = min(max(start, 0), length)
    end = min(max(end, start), length)
    return slice(start, end, step)


@kernel("aten::slice_copy.Tensor_out")
def slice_copy_out(self, dim=0, start=None, end=None, step=1, out=None):
    dim = normalize_dim(dim, self.ndim)
    index = [slice(None)] * self.ndim
    index[dim] = slice_indices(self.shape[dim], start, end, step)
    return write_out(out, self[tuple(index)])


@kernel("aten::select_copy.int_out")
def select_copy_out(self, dim, index, out=None):
    dim = normalize_dim(dim, self.ndim)
    n = self.shape[dim]
    index = int(index)
    if not -n <= index < n:
        raise ExecutionError(f"select: index {index} out of range for dimension {dim} of size {n}")
    return write_out(out, np.take(self, index % n if n else index, axis=dim))


@kernel("aten::unsqueeze_copy.out")
def unsqueeze_copy_out(self, dim, out=None):
    return write_out(out, np.expand_dims(self, normalize_dim(dim, self.ndim + 1)))


def _squeeze(self, dims):
    dims = [d for d in dims if self.shape[d] == 1]
    return np.squeeze(self, axis=tuple(dims)) if dims else self


@kernel("aten::squeeze_copy.out")
def squeeze_copy_out(self, out=None):
    return write_out(out, _squeeze(self, range(self.ndim)))


@kernel("aten::squeeze_copy.dim_out")
def squeeze_copy_dim_out(self, dim, out=None):
    if self.ndim == 0:
        normalize_dim(dim, 0)
        return write_out(out, self)
    return write_out(out, _squeeze(self, [normalize_dim(dim, self.ndim)]))


@kernel("aten::squeeze_copy.dims_out")
def squeeze_copy_dims_out(self, dim, out=None):
    if self.ndim == 0:
        return write_out(out, self)
    return write_out(out, _squeeze(self, normalize_dims(dim, self.ndim, empty_means_all=False)))


def _write_list(outs, values, op):
    if len(outs) != len(values):
        raise ExecutionError(f"{op}: {len(values)} results but {len(outs)} output tensors")
    return [write_out(o, v) for o, v in zip(outs, values)]


def split_sizes_of(length, split_size):
    split_size = int(split_size)
    if split_size < 0 or (split_size == 0 and length != 0):
        raise ExecutionError(f"split: split_size must be positive, got {split_size}")
    if length == 0:
        return [0]
    n = -(-length // split_size)
    return [min(split_size, length - i * split_size) for i in range(n)]


def _split(self, split_sizes, dim):
    dim = normalize_dim(dim, self.ndim)
    split_sizes = [int(s) for s in split_sizes]
    if sum(split_sizes) != self.shape[dim] or any(s < 0 for s in split_sizes):
        raise ExecutionError(f"split_with_sizes: sizes {split_sizes} don't sum to dimension {dim}'s size "
                             f"{self.shape[dim]}")
    bounds = np.cumsum([0] + split_sizes)
    index = [slice(None)] * self.ndim
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[dim] = slice(int(lo), int(hi))
        parts.append(self[tuple(index)])
    return parts


@kernel("aten::split_with_sizes_copy.out")
def split_with_sizes_copy_out(self, split_sizes, dim=0, out=None):
    return _write_list(out, _split(self, split_sizes, dim), "split_with_sizes_copy")


@kernel("aten::split_copy.Tensor_out")
def split_copy_out(self, split_size, dim=0, out=None):
    d = normalize_dim(dim, self.ndim)
    return _write_list(out, _split(self, split_sizes_of(self.shape[d], split_size), d), "split_copy")


@kernel("aten::unbind_copy.int_out")
def unbind_copy_out(self, dim=0, out=None):
    dim = normalize_dim(dim, self.ndim)
    return _write_list(out, [np.take(self, i, axis=dim) for i in range(self.shape[dim])], "unbind_copy")


@kernel("aten::diagonal_copy.out")
def diagonal_copy_out(self, offset=0, dim1=0, dim2=1, out=None):
    d1, d2 = normalize_dim(dim1, self.ndim), normalize_dim(dim2, self.ndim)
    if d1 == d2:
        raise ExecutionError("diagonal: dim1 and dim2 cannot be the same")
    return write_out(out, np.diagonal(self, offset=int(offset), axis1=d1, axis2=d2))


@kernel("aten::as_strided_copy.out")
def as_strided_copy_out(self, size, stride, storage_offset=None, out=None):
    size, stride = sizes(size), sizes(stride)
    offset = int(storage_offset or 0)
    flat = np.ascontiguousarray(self).reshape(-1)
    if len(size) != len(stride):
        raise ExecutionError(f"as_strided: {len(size)} sizes but {len(stride)} strides")
    if any(s < 0 for s in stride):
        raise ExecutionError("as_strided: negative strides are not supported")
    if all(s > 0 for s in size):
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if offset < 0 or last >= flat.size:
            raise ExecutionError(f"as_strided: size {list(size)} stride {list(stride)} offset {offset} reaches "
                                 f"outside the storage of {flat.size} elements")
    base = flat[offset:] if offset < flat.size else flat[:0]
    view = np.lib.stride_tricks.as_strided(base, shape=size, strides=[s * flat.itemsize for s in stride],
                                           writeable=False)
    return write_out(out, view)


# --------------------------------------------------------------------------- cat / stack / flip / repeat / pads


@kernel("aten::cat.out")
def cat_out(tensors, dim=0, out=None):
    tensors = list(tensors)
    dtype = result_type(*[t for t in tensors]) if tensors else out.dtype
    # legacy: 1-D empty tensors are skipped
    parts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not parts:
        return write_out(out, np.zeros((0,), dtype))
    d = normalize_dim(dim, parts[0].ndim)
    return write_out(out, np.concatenate([to_dtype(t, dtype) for t in parts], axis=d))


@kernel("aten::stack.out")
def stack_out(tensors, dim=0, out=None):
    tensors = list(tensors)
    dtype = result_type(*tensors)
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return write_out(out, np.stack([to_dtype(t, dtype) for t in tensors], axis=d))


@kernel("aten::flip.out")
def flip_out(self, dims, out=None):
    dims = normalize_dims(dims, self.ndim, empty_means_all=False)
    return write_out(out, np.flip(self, axis=dims) if dims else self)


@kernel("aten::roll.out")
def roll_out(self, shifts, dims=(), out=None):
    shifts = [int(s) for s in shifts]
    if not dims:
        return write_out(out, np.roll(self.reshape(-1), shifts[0]).reshape(self.shape))
    return write_out(out, np.roll(self, shifts, axis=normalize_dims(dims, self.ndim, empty_means_all=False)))


@kernel("aten::repeat.out")
def repeat_out(self, repeats, out=None):
    repeats = sizes(repeats)
    if len(repeats) < self.ndim:
        raise ExecutionError(f"repeat: {len(repeats)} repeats for a tensor of rank {self.ndim}")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    return write_out(out, np.tile(x, repeats))


@kernel("aten::repeat_interleave.Tensor_out")
def repeat_interleave_out(repeats, output_size=None, out=None):
    return write_out(out, np.repeat(np.arange(repeats.shape[0], dtype=repeats.dtype), repeats))


@kernel("aten::tril.out")
def tril_out(self, diagonal=0, out=None):
    return write_out(out, np.tril(self, int(diagonal)))


@kernel("aten::triu.out")
def triu_out(self, diagonal=0, out=None):
    return write_out(out, np.triu(self, int(diagonal)))


def _pad_widths(ndim, pad, op):
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise ExecutionError(f"{op}: padding of length {len(pad)} for a tensor of rank {ndim}")
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


@kernel("aten::constant_pad_nd.out")
def constant_pad_nd_out(self, pad, value=0, out=None):
    widths = _pad_widths(self.ndim, pad, "constant_pad_nd")
    x, pos = _crop(self, widths)  # negative padding crops
    return write_out(out, np.pad(x, pos, mode="constant", constant_values=to_dtype(value, self.dtype)))


def _crop(x, widths):
    """`x` with negative padding widths applied (they crop); returns (cropped, positive widths)."""
    crop = tuple(slice(max(-lo, 0), x.shape[i] - max(-hi, 0)) for i, (lo, hi) in enumerate(widths))
    return x[crop], [(max(lo, 0), max(hi, 0)) for lo, hi in widths]


def _pad_source(n, lo, hi, mode):
    """For each output position along a padded dim, the input position it reads (ATen's mapping:
    negative padding crops, reflection mirrors about the edge element, replication clamps)."""
    j = np.arange(n + lo + hi) - lo
    if mode == "reflect":
        j = np.abs(j)
        j = np.where(j > n - 1, 2 * (n - 1) - j, j)
    return np.clip(j, 0, n - 1)


def _make_pad(mode, nd, name):
    def pad_kernel(self, padding, out=None):
        if len(padding) != 2 * nd:
            raise ExecutionError(f"{name}: expected {2 * nd} padding values, got {len(padding)}")
        widths = _pad_widths(self.ndim, padding, name)
        x = self
        for i, (lo, hi) in enumerate(widths):
            if not (lo or hi):
                continue
            n = self.shape[i]
            if n == 0 or n + lo + hi < 0:
                raise ExecutionError(f"{name}: can't pad dimension {i} of size {n} by ({lo}, {hi})")
            if mode == "reflect" and (lo >= n or hi >= n):
                raise ExecutionError(f"{name}: padding ({lo}, {hi}) must be smaller than the input dimension {n}")
            x = np.take(x, _pad_source(n, lo, hi, mode), axis=i)
        return write_out(out, x)
    pad_kernel.__name__ = name
    return pad_kernel


for _nd in (1, 2, 3):
    kernel(f"aten::reflection_pad{_nd}d.out")(_make_pad("reflect", _nd, f"reflection_pad{_nd}d"))
    kernel(f"aten::replication_pad{_nd}d.out")(_make_pad("edge", _nd, f"replication_pad{_nd}d"))


@kernel("aten::pixel_shuffle.out")
def pixel_shuffle_out(self, upscale_factor, out=None):
    r = int(upscale_factor)
    *lead, c, h, w = self.shape
    x = self.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    x = x.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return write_out(out, x.reshape(*lead, c // (r * r), h * r, w * r))


@kernel("aten::pixel_unshuffle.out")
def pixel_unshuffle_out(self, downscale_factor, out=None):
    r = int(downscale_factor)
    *lead, c, h, w = self.shape
    n = len(lead)
    x = self.reshape(*lead, c, h // r, r, w // r, r)
    x = x.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return write_out(out, x.reshape(*lead, c * r * r, h // r, w // r))

