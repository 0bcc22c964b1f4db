"""Decompositions to_edge adds to torch's Core ATen table: ops users' models contain that
have no Core ATen form of their own, so that they reach the portable kernels instead of
being refused ("... has no edge form").

- `linalg_vector_norm` (Swin-V2's cosine attention): torch's own decomposition
  (`torch._decomp`), which its default export table leaves out.
- `round.decimals`: ATen's formula, `round(x * 10^d) / 10^d` (`round(x / 10^-d) * 10^-d`
  for d < 0), in the input's dtype (torch's decomposition goes through prims).
- `adaptive_max_pool2d` (and `adaptive_max_pool1d`, which torch decomposes to it):
  `max_pool2d_with_indices` when the output divides the input, else one window per output
  cell (ATen's windows: [floor(i*in/out), ceil((i+1)*in/out))), indices made global.
- `median.dim`: sort, then the lower middle element (ATen's median is the lower one of an
  even count), with NaN propagated as ATen does (a row with a NaN has median NaN at the
  index of its first NaN).
"""

from __future__ import annotations


def _median_dim(x, dim: int, keepdim: bool = False):
    import torch

    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.long)
    dim = dim % x.dim()
    n = x.shape[dim]
    values, indices = torch.sort(x, dim=dim)
    middle = (n - 1) // 2
    value = values.narrow(dim, middle, 1)
    index = indices.narrow(dim, middle, 1)
    if x.is_floating_point():
        nan = torch.isnan(x)
        has_nan = nan.any(dim=dim, keepdim=True)
        first_nan = torch.argmax(nan.to(torch.int32), dim=dim, keepdim=True)
        value = torch.where(has_nan, torch.full_like(value, float("nan")), value)
        index = torch.where(has_nan, first_nan, index)
    if not keepdim:
        value, index = value.squeeze(dim), index.squeeze(dim)
    return value, index


def _round_decimals(x, decimals: int = 0):
    import torch

    if decimals >= 0:
        scale = float(10 ** decimals)
        return torch.round(x * scale) / scale
    scale = float(10 ** -decimals)
    return torch.round(x / scale) * scale


def _adaptive_max_pool2d(x, output_size):
    import torch

    aten = torch.ops.aten
    out_h, out_w = output_size
    height, width = x.shape[-2], x.shape[-1]
    if height % out_h == 0 and width % out_w == 0:
        kernel = [height // out_h, width // out_w]
        return aten.max_pool2d_with_indices.default(x, kernel, kernel)
    rows_values, rows_indices = [], []
    for i in range(out_h):
        h0, h1 = (i * height) // out_h, -((-(i + 1) * height) // out_h)
        values, indices = [], []
        for j in range(out_w):
            w0, w1 = (j * width) // out_w, -((-(j + 1) * width) // out_w)
            window = x[..., h0:h1, w0:w1]
            value, local = aten.max_pool2d_with_indices.default(window, [h1 - h0, w1 - w0], [h1 - h0, w1 - w0])
            values.append(value)
            indices.append((local // (w1 - w0) + h0) * width + local % (w1 - w0) + w0)
        rows_values.append(torch.cat(values, dim=-1))
        rows_indices.append(torch.cat(indices, dim=-1))
    return torch.cat(rows_values, dim=-2), torch.cat(rows_indices, dim=-2)


def etc_decompositions() -> dict:
    """{OpOverload: decomposition} that to_edge adds to torch's default table."""
    import torch
    from torch._decomp import decomposition_table

    aten = torch.ops.aten
    return {aten.linalg_vector_norm.default: decomposition_table[aten.linalg_vector_norm.default],
            aten.round.decimals: _round_decimals,
            aten.adaptive_max_pool2d.default: _adaptive_max_pool2d,
            aten.median.dim: _median_dim}
