"""Ops real models produce that used to leave the cpu delegate (issue 9), each as the pattern the
model has: GPT-2/Llama attention masks (index.Tensor, cumsum, arange-derived masks), Swin's
relative-position bias gather, ConvNeXt/Swin's as_strided, DeepLabV3/LR-ASPP's bilinear upsample,
KV-cache style index_put and the scatter/pad/mask ops around them.

Each model must become ONE cpu delegate (nothing left on portable kernels) and match eager torch,
also on odd shapes (odd sizes, widths that are not a multiple of 16, size-1 dims).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import etc
from etc.targets.cpu import CpuPartitioner


def one_delegate(model, inputs):
    """Export -> edge -> CpuPartitioner -> .pte: asserts the method is one cpu delegate call (the
    delegation report has no op on portable kernels, the execution plan no kernel call but the
    state write-back of a mutated buffer); returns the loaded method."""
    from etc.runtime import Runtime
    from etc.schema import deserialize_pte

    edge = etc.to_edge(torch.export.export(model.eval(), inputs)).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable, str(report)
    program = edge.to_executorch()
    (plan,) = deserialize_pte(program.buffer).program.execution_plan
    calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
    kinds = [type(c).__name__ if not hasattr(c, "op_index") else plan.operators[c.op_index].name for c in calls]
    assert kinds.count("DelegateCall") == 1 and set(kinds) <= {"DelegateCall", "aten::copy"}, kinds
    return Runtime.get().load_program(program.buffer).load_method("forward")


def assert_matches(got, want, *, rtol=1e-5, atol=1e-5):
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), w.detach().numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:  # -inf in masks must stay -inf
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def check(model, inputs, **tol):
    method = one_delegate(model, inputs)
    with torch.no_grad():
        want = model(*inputs)
    assert_matches(method.execute([t.numpy() for t in inputs]), want, **tol)


# ------------------------------------------------------------------ index.Tensor
class GPT2PaddingMask(torch.nn.Module):
    """transformers' masking_utils: padding_mask[batch_idx, kv_idx] with arange-derived index
    tensors broadcast to [B, 1, 1, S], and'ed with a causal mask from aranges."""

    def forward(self, scores, attention_mask):
        b, _, s, _ = scores.shape
        batch_idx = torch.arange(b)[:, None, None, None]
        kv_idx = torch.arange(s)[None, None, None, :]
        q_idx = torch.arange(s)[None, None, :, None]
        padding = attention_mask.bool()[batch_idx, kv_idx]  # [B, 1, 1, S]
        allowed = padding & (kv_idx <= q_idx)
        return torch.where(allowed, scores, torch.finfo(scores.dtype).min).softmax(-1)


class LlamaCausalMask(torch.nn.Module):
    """A cached causal mask indexed by position ids (x[:, :, ids][..., :n]) added to scores."""

    def __init__(self, max_len=16):
        super().__init__()
        self.register_buffer("causal", torch.full((max_len, max_len), float("-inf")).triu(1))

    def forward(self, scores, ids):
        n = scores.shape[-1]
        return scores + self.causal[None, None][:, :, ids][..., :n]


class RelativePositionBias(torch.nn.Module):
    """Swin: table[relative_position_index] -> [heads, N, N] added to the attention scores; the
    table is computed from an input here so the gather is not folded at compile time."""

    def __init__(self, window=4, heads=3):
        super().__init__()
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("index", (rel[..., 0] * (2 * window - 1) + rel[..., 1]).flatten())
        self.n, self.heads = window * window, heads

    def forward(self, scores, table):
        bias = table[self.index].view(self.n, self.n, self.heads).permute(2, 0, 1)
        return scores + bias.unsqueeze(0)


class Index2d(torch.nn.Module):
    """x[rows[:, None], cols] (two broadcast index tensors) and x[:, cols] (a None entry)."""

    def forward(self, x, rows, cols):
        return x[rows[:, None], cols], x[:, cols] * 2.0


@pytest.mark.parametrize("b, s", [(1, 7), (2, 5), (1, 1), (3, 17)])
def test_gpt2_padding_mask(b, s):
    torch.manual_seed(0)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, : s // 2] = 0  # left padding
    check(GPT2PaddingMask(), (torch.randn(b, 2, s, s), mask))


@pytest.mark.parametrize("n", [5, 1, 13])
def test_llama_causal_mask(n):
    torch.manual_seed(0)
    check(LlamaCausalMask(), (torch.randn(1, 2, n, n), torch.arange(n)))


@pytest.mark.parametrize("window, heads", [(4, 3), (3, 1), (7, 2)])
def test_swin_relative_position_bias(window, heads):
    torch.manual_seed(0)
    n = window * window
    check(RelativePositionBias(window, heads), (torch.randn(2, heads, n, n), torch.randn((2 * window - 1) ** 2, heads)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(6, 5), (17, 1), (1, 33)])
def test_index_with_broadcast_and_none(shape, dtype):
    torch.manual_seed(0)
    rows = torch.randint(0, shape[0], (3,), dtype=dtype)
    cols = torch.randint(0, shape[1], (4,), dtype=dtype)
    rows[0] = -1  # negative indices count from the end
    check(Index2d(), (torch.randn(*shape), rows, cols))


# ------------------------------------------------------------------ upsampling
class Upsample(torch.nn.Module):
    def __init__(self, mode, align_corners=None, scale=None, size=None):
        super().__init__()
        self.mode, self.align_corners, self.scale, self.size = mode, align_corners, scale, size

    def forward(self, x):
        return F.interpolate(x, size=self.size, scale_factor=self.scale, mode=self.mode,
                             align_corners=self.align_corners)


class UpsampleBothCorners(torch.nn.Module):
    """Bilinear with and without align_corners in one delegate (one compile for both lowerings)."""

    def __init__(self, scale=None, size=None):
        super().__init__()
        self.centers, self.corners = Upsample("bilinear", False, scale, size), Upsample("bilinear", True, scale, size)

    def forward(self, x):
        return self.centers(x), self.corners(x)


class DeepLabHead(torch.nn.Module):
    """DeepLabV3 / LR-ASPP: a 1x1 conv on low-resolution features, upsampled back to the input's
    size (bilinear, align_corners=False), then a skip add."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.cls = torch.nn.Conv2d(8, 3, 1)

    def forward(self, x):
        y = self.cls(torch.relu(self.down(x)))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False) + x


@pytest.mark.parametrize("scale, size", [(2.0, None), (1.5, None), (0.5, None), (None, (13, 17)), (None, (1, 19))])
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 1, 3, 9)])
def test_upsample_bilinear(shape, scale, size):
    torch.manual_seed(0)
    check(UpsampleBothCorners(scale, size), (torch.randn(*shape),))


@pytest.mark.parametrize("scale, size", [(2.0, None), (3.0, None), (None, (13, 17))])
def test_upsample_nearest(scale, size):
    torch.manual_seed(0)
    check(Upsample("nearest", None, scale, size), (torch.randn(1, 3, 5, 7),))


@pytest.mark.parametrize("shape", [(1, 2, 1, 16), (1, 1, 4, 1)])
def test_upsample_bilinear_from_size_1(shape):
    check(Upsample("bilinear", False, 2.0), (torch.randn(*shape),))
    check(Upsample("bilinear", True, None, (3, 5)), (torch.randn(*shape),))


@pytest.mark.parametrize("hw", [(32, 32), (29, 45)])
def test_deeplab_head(hw):
    torch.manual_seed(0)
    check(DeepLabHead(), (torch.randn(1, 3, *hw),), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ cumsum
class PositionIds(torch.nn.Module):
    """GPT-2 (transformers < 5) position ids: cumsum of the attention mask, padding set to 1, then
    the position embedding."""

    def __init__(self, positions=64):
        super().__init__()
        self.wpe = torch.nn.Embedding(positions, 8)

    def forward(self, attention_mask):
        ids = attention_mask.long().cumsum(-1) - 1
        ids = ids.masked_fill(attention_mask == 0, 1)
        return self.wpe(ids)


class PackedSequenceMask(torch.nn.Module):
    """Llama (transformers 5 masking_utils): cumsum of a bool mask (int64 result), indexed by
    [batch_idx, q_idx] and [batch_idx, kv_idx] with arange-derived index tensors, compared."""

    def forward(self, attention_mask):
        b, s = attention_mask.shape
        pos = attention_mask.bool().cumsum(-1)
        batch_idx = torch.arange(b)[:, None, None, None]
        q = pos[batch_idx, torch.arange(s)[None, None, :, None]]
        k = pos[batch_idx, torch.arange(s)[None, None, None, :]]
        return (q == k) & (torch.arange(s)[None, :] <= torch.arange(s)[:, None])


class Cumsum(torch.nn.Module):
    def __init__(self, dim, dtype=None):
        super().__init__()
        self.dim, self.dtype = dim, dtype

    def forward(self, x):
        return torch.cumsum(x, self.dim, dtype=self.dtype)


@pytest.mark.parametrize("b, s", [(2, 7), (1, 1), (3, 33)])
def test_gpt2_position_ids(b, s):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[-1, : s // 3] = 0
    check(PositionIds(), (mask,))


@pytest.mark.parametrize("b, s", [(1, 7), (2, 16), (1, 1)])
def test_llama_packed_sequence_mask(b, s):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, : s // 2] = 0
    check(PackedSequenceMask(), (mask,))


@pytest.mark.parametrize("shape, dim", [((3, 5), 1), ((3, 5), 0), ((2, 1, 17), -1), ((4, 33, 2), 1), ((1,), 0),
                                        ((2, 64), 1)])
def test_cumsum_float(shape, dim):
    torch.manual_seed(0)
    check(Cumsum(dim), (torch.randn(*shape),), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, out", [(torch.int32, None), (torch.int64, None), (torch.bool, None),
                                        (torch.int32, torch.float32), (torch.float32, torch.float64)])
def test_cumsum_dtypes(dtype, out):
    torch.manual_seed(0)
    x = (torch.randn(3, 13) * 100).to(dtype)
    check(Cumsum(1, out), (x,))


# ------------------------------------------------------------------ as_strided
class AsStrided(torch.nn.Module):
    def __init__(self, size, stride, offset=0):
        super().__init__()
        self.size, self.stride, self.offset = size, stride, offset

    def forward(self, x):
        return torch.as_strided(x, self.size, self.stride, self.offset) * 2.0


AS_STRIDED = {
    # window partition of a [1, 8, 12, 3] NHWC map into 4x4 windows (a transpose as strides)
    "windows": ((1, 8, 12, 3), (2, 3, 4, 4, 3), (4 * 12 * 3, 4 * 3, 12 * 3, 3, 1), 0),
    # Swin patch merging / ConvNeXt 2x2 stem: every other row and column
    "stride_2": ((1, 9, 11, 5), (1, 5, 6, 5), (9 * 11 * 5, 2 * 11 * 5, 2 * 5, 1), 0),
    # a channel slice at an offset, size-1 dims with arbitrary strides
    "offset": ((2, 7, 5), (2, 1, 3, 5), (35, 999, 5, 1), 10),
    # a broadcast (stride 0)
    "broadcast": ((4, 6), (3, 4, 6), (0, 6, 1), 0),
    # overlapping sliding windows (unfold): a gather with a constant index tensor
    "sliding": ((2, 17), (2, 7, 5), (17, 2, 1), 0),
    # the box's last row runs past the storage (only its first elements are read): padded
    "past_end": ((3, 10), (2, 3, 3), (12, 4, 1), 7),
    # strides that do not divide each other: a gather
    "non_dividing": ((3, 10), (3, 2, 3), (10, 4, 1), 0),
    # a plain transpose with an odd width
    "transpose": ((5, 19), (19, 5), (1, 19), 0),
}


@pytest.mark.parametrize("name", sorted(AS_STRIDED))
def test_as_strided(name):
    torch.manual_seed(0)
    shape, size, stride, offset = AS_STRIDED[name]
    check(AsStrided(size, stride, offset), (torch.randn(*shape),))


class SwinPooler(torch.nn.Module):
    """transformers' Swin pooler: AdaptiveAvgPool1d(1) over the tokens, whose decomposition ends in
    an as_strided of [B, C, 1, 1] with strides (C, 1, C, C) (the real models' as_strided)."""

    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool1d(1)

    def forward(self, x):
        return torch.flatten(self.pool(x.transpose(1, 2)), 1)


@pytest.mark.parametrize("shape", [(1, 49, 24), (2, 7, 5), (1, 1, 3)])
def test_swin_pooler(shape):
    torch.manual_seed(0)
    check(SwinPooler(), (torch.randn(*shape),))


def test_as_strided_int():
    check(AsStrided((3, 4), (1, 3), 0), (torch.arange(12, dtype=torch.int32).reshape(4, 3),))


# ------------------------------------------------------------------ ops around them
class Attention(torch.nn.Module):
    """scaled_dot_product_attention decomposed: causal (arange-derived mask) or with a float mask."""

    def __init__(self, causal):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


class Scatters(torch.nn.Module):
    def forward(self, x, row, col):
        a = torch.slice_scatter(x, col.expand(x.shape[0], 2) * 3.0, 1, 1, 3)
        b = torch.select_scatter(x, row, 0, x.shape[0] - 1)
        return a, b


class PadMaskGather(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 6)

    def forward(self, x, ids, idx):
        e = self.emb(ids)  # [B, S, 6]
        e = e.masked_fill(ids[..., None] == 0, -1e4)
        p = F.pad(x, (1, 2, 0, 3), value=0.5)
        return e, p, torch.gather(x, 1, idx), torch.where(x > 0, x, torch.zeros_like(x))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("s, d", [(5, 8), (1, 16), (17, 12)])
def test_sdpa(causal, s, d):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, s, d) for _ in range(3))
    inputs = (q, k, v) if causal else (q, k, v, torch.randn(s, s))
    check(Attention(causal), inputs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 5), (1, 17)])
def test_slice_and_select_scatter(shape):
    torch.manual_seed(0)
    check(Scatters(), (torch.randn(*shape), torch.randn(shape[1]), torch.randn(1, 2)))


@pytest.mark.parametrize("b, s", [(2, 5), (1, 1)])
def test_embedding_mask_pad_gather_where(b, s):
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (b, s))
    ids[0, 0] = 0
    x = torch.randn(3, 7)
    check(PadMaskGather(), (x, ids, torch.randint(0, 7, (3, 4))))


# ------------------------------------------------------------------ index_put
class KVCacheUpdate(torch.nn.Module):
    """A static KV cache: cache[:, :, pos] = k (index_put with None entries, values broadcast) or
    index_copy_ along the sequence dim, then attention over the whole cache."""

    def __init__(self, heads=2, length=16, dim=4, copy=False):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, heads, length, dim))
        self.copy = copy

    def forward(self, k, pos, q):
        if self.copy:
            self.cache.index_copy_(2, pos, k)
        else:
            self.cache[:, :, pos] = k
        return q @ self.cache.transpose(-1, -2)


class IndexPut(torch.nn.Module):
    def __init__(self, accumulate):
        super().__init__()
        self.accumulate = accumulate

    def forward(self, x, rows, cols, values):
        a = torch.index_put(x, (rows,), values[: rows.shape[0]], accumulate=self.accumulate)
        b = torch.index_put(x, (rows[:, None], cols), torch.tensor(2.5), accumulate=self.accumulate)
        return a, b


class IndexPutApart(torch.nn.Module):
    """Indexed dims that are not adjacent (x[i, :, j] = v): x[indices] puts the index dims first."""

    def forward(self, x, i, j, values):
        y = x * 1.0
        y[i, :, j] = values
        return y


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.parametrize("new", [1, 3])
def test_kv_cache_update(copy, new):
    torch.manual_seed(0)
    model = KVCacheUpdate(copy=copy)
    k, q = torch.randn(1, 2, new, 4), torch.randn(1, 2, 1, 4)
    pos = torch.arange(5, 5 + new)
    method = one_delegate(model, (k, pos, q))
    with torch.no_grad():
        want = KVCacheUpdate(copy=copy)(k, pos, q)
    assert_matches(method.execute([k.numpy(), pos.numpy(), q.numpy()]), want)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("shape", [(6, 5), (17, 1), (3, 33)])
def test_index_put(accumulate, shape):
    torch.manual_seed(0)
    rows = torch.tensor([0, shape[0] - 1, -1, 1 % shape[0]])  # a negative index, a duplicate
    cols = torch.randint(0, shape[1], (2,))
    x, values = torch.randn(*shape), torch.randn(4, shape[1])
    if not accumulate:  # duplicates: ATen leaves the winner unspecified; give both the same values
        values[2] = values[1]
    check(IndexPut(accumulate), (x, rows, cols, values))


def test_index_put_with_dims_apart():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5)
    check(IndexPutApart(), (x, torch.tensor([0, 3]), torch.tensor([4, -1]), torch.randn(2, 3)))


class EmptySlice(torch.nn.Module):
    def forward(self, x):
        return x[:, :0] * 2.0, x + 1.0


def test_zero_size_tensors_stay_portable_instead_of_failing_the_compile():
    x = torch.randn(3, 4)
    edge = etc.to_edge(torch.export.export(EmptySlice(), (x,))).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and report.delegated == {"edge.add_scalar": 1}, str(report)
    assert "zero-size" in report.reasons["edge.mul_scalar"]
    from etc.runtime import Runtime

    empty, plus = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x.numpy()])
    assert empty.shape == (3, 0)
    np.testing.assert_allclose(plus, x.numpy() + 1.0)


# ------------------------------------------------------------------ permutes (etc-cpu-block-transposes)
class _PermuteResidual(torch.nn.Module):
    """ConvNeXt's block end: NHWC -> NCHW, scaled, plus the residual, and an NCHW -> NHWC
    permute of the result (each a transposed read that etc-cpu-block-transposes may block)."""

    def __init__(self, channels):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.randn(channels))

    def forward(self, x, y):
        z = x + (self.gamma * y).permute(0, 3, 1, 2)
        return z, z.permute(0, 2, 3, 1) * 2.0


@pytest.mark.parametrize("c,h,w", [(384, 14, 14), (96, 56, 56), (5, 33, 37), (70, 9, 1), (1, 3, 3)],
                         ids=["384c14", "96c56", "odd", "unit-width", "one-channel"])
@pytest.mark.parametrize("threads", [1, 2])
def test_permutes_match_torch(c, h, w, threads):
    """Blocked or not (the pass decides by the lines a pass touches), every permute computes
    torch's result: blocks that do not divide the loop, unit dims, inputs read non-contiguously
    (y is given transposed, x as an NHWC tensor's NCHW view), one and two threads."""
    model = _PermuteResidual(c).eval()
    x = torch.randn(1, h, w, c).permute(0, 3, 1, 2)  # NCHW view of NHWC memory
    y = torch.randn(1, w, h, c).transpose(1, 2)  # [1, h, w, c], not contiguous
    ep = torch.export.export(model, (x, y))
    from etc.runtime import Runtime

    program = etc.to_edge(ep).to_backend(CpuPartitioner(num_threads=threads)).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with torch.no_grad():
        want = model(x, y)
    got = method.execute([x.numpy(), y.numpy()])
    for g, wt in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), wt.numpy())


class _AccumulateThenAffine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        h = x.index_put((torch.tensor([4, 12, 9, 12]),), self.p, accumulate=True)
        return (h * 0.75 + 0.5) * 0.75 + 0.5 + x


@pytest.mark.parametrize("threads", [1, 2])
def test_index_put_accumulate_then_elementwise_compiles_for_one_and_two_threads(threads):
    """Found by the compiler fuzzer: etc-collapse-elementwise-dims gave a collapse_shape of unit
    dims ([1, 1, 1], strides [16, 1, 1]) the stride 1 where memref.collapse_shape's rule gives 16;
    the two-thread pipeline's next verification refused the module (InternalError from to_backend)."""
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime

    torch.manual_seed(0)
    module = _AccumulateThenAffine().eval()
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    edge = etc.to_edge(torch.export.export(module, (torch.randn(16),))).to_backend(partitioner)
    assert "0 op(s) on portable kernels" in edge.delegation_info(), edge.delegation_info()
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for _ in range(2):
        x = torch.randn(16)
        with torch.no_grad():
            torch.testing.assert_close(method.execute([x])[0], module(x), rtol=1e-6, atol=1e-6)


class _EmbedThenAccumulate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.p = torch.nn.Parameter(torch.randn(1, 5, 8))

    def forward(self, x):
        return self.emb(x).index_put((torch.tensor([0]),), self.p, accumulate=True)


def test_index_read_back_at_the_top_level_keeps_its_bytes_on_two_threads():
    """Found by the compiler fuzzer (a silent wrong result, sometimes a corrupted heap): the index
    of the index_put, normalized into a scratch buffer and read back at the top level to slice the
    output, shared its bytes with the sum the next nest writes (etc-cpu-plan-scratch saw their
    lifetimes end and start in turn). On two threads each runs that read after the barrier, and one
    thread's sum overwrote the index the other had yet to read: the slice landed anywhere. Each
    load starts the worker thread afresh, the way the race showed (in about half the first calls)."""
    from etc.compiler.delegation import CompileSpec
    from etc.runtime import Runtime

    torch.manual_seed(0)
    module = _EmbedThenAccumulate().eval()
    x = torch.randint(0, 10, [2, 5], generator=torch.Generator().manual_seed(0))
    partitioner = CpuPartitioner(num_threads=2, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    buffer = etc.to_edge(torch.export.export(module, (x,))).to_backend(partitioner).to_executorch().buffer
    with torch.no_grad():
        want = module(x)
    for _ in range(60):
        method = Runtime.get().load_program(buffer).load_method("forward")
        torch.testing.assert_close(method.execute([x])[0], want, rtol=1e-6, atol=1e-6)
