"""etc-cpu-row-kernels against torch: softmax, LayerNorm, RMSNorm and plain row reductions, compiled
for the host through the whole cpu pipeline, on random inputs: row lengths that are not a multiple
of the vector width, rows of length 1, large magnitudes (softmax's stability), non-contiguous
inputs, several row reductions sharing their rows, and the decisions the report shows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from etc.compiler.delegation import delegate
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu.runtime import CompiledFunction


def compile_and_run(model, inputs, **kwargs):
    import etc

    model = model.eval()
    program_ir = etc.to_edge(torch.export.export(model, inputs)).program_ir
    report = delegate(program_ir, CpuPartitioner(**kwargs))
    assert report.partitions == 1 and not report.portable, str(report)
    lines = [line for ls in report.backend_lines.values() for line in ls]
    got = CompiledFunction(program_ir.delegate_blobs[0])(*[x.numpy() for x in inputs])
    got = got if isinstance(got, (list, tuple)) else [got]
    with torch.no_grad():
        want = model(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    return [np.asarray(g) for g in got], [w.numpy() for w in want], lines


def row_reductions(lines) -> int:
    assert not any("NOT TUNED" in line for line in lines), lines
    found = [line for line in lines if "reduction -> row-reduction" in line]
    return sum(int(line.rsplit("x", 1)[1]) for line in found)


class Softmax(nn.Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, dim=self.dim)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def assert_close(got, want, rtol=1e-5, atol=1e-6):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", [(2, 3, 37), (4, 128), (3, 1), (5, 16), (2, 7, 15), (1, 1000), (2, 100, 33)])
def test_softmax_matches_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    (got,), (want,), lines = compile_and_run(Softmax(), (x,))
    assert row_reductions(lines) >= 2 or shape[-1] == 1
    assert_close(got, want)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)


def test_softmax_is_stable_at_large_magnitudes():
    torch.manual_seed(0)
    x = torch.randn(4, 67) * 1e4
    x[0, :] = 3e38
    x[1, :5] = -3e38
    x[2, 3] = 90.0  # exp would overflow without subtracting the max
    (got,), (want,), _ = compile_and_run(Softmax(), (x,))
    assert np.isfinite(got).all()
    assert_close(got, want)


def test_softmax_terms_from_one_down_to_nothing():
    """Softmax's exp(x - max) takes etc-cpu-expand-math's short form (never positive): every term
    from 1 down to the smallest normal float as torch's, those below it 0 (torch's are subnormal:
    within 1.2e-38; a normal term over the row's sum may still be subnormal), -inf keys 0, a row of NaN NaN, a row of -inf NaN as in torch."""
    x = torch.linspace(0, -120, 256).repeat(5, 1)
    x[1, ::3] = -float("inf")
    x[2, 7] = float("nan")
    x[3, :] = -float("inf")
    x[4] = x[4].flip(0)
    (got,), (want,), lines = compile_and_run(Softmax(), (x,))
    assert row_reductions(lines) >= 2
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=4e-7, atol=1.2e-38)
    assert (got[1, ::3] == 0).all() and (got[0, -20:] == 0).all()  # exp(-110..-120): flushed


def test_softmax_over_a_large_vocabulary_row():
    torch.manual_seed(0)
    x = torch.randn(2, 32000) * 4
    (got,), (want,), lines = compile_and_run(Softmax(), (x,))
    assert row_reductions(lines) == 2
    assert_close(got, want, rtol=1e-5, atol=1e-8)


class TransposedSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x.transpose(1, 2), dim=-1) * 2.0, torch.softmax(x, dim=1)


def test_softmax_of_non_contiguous_inputs():
    torch.manual_seed(0)
    x = torch.randn(2, 19, 35)
    got, want, lines = compile_and_run(TransposedSoftmax(), (x,))
    for g, w in zip(got, want):
        assert_close(g, w)


@pytest.mark.parametrize("shape", [(2, 128, 768), (197, 768), (3, 5, 33), (4, 1), (6, 17)])
def test_layernorm_matches_torch(shape):
    torch.manual_seed(0)
    norm = nn.LayerNorm(shape[-1])
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(*shape) * 2 + 5
    (got,), (want,), lines = compile_and_run(norm, (x,))
    assert row_reductions(lines) >= 2 or shape[-1] == 1
    assert_close(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("shape", [(1, 32, 288), (3, 7), (2, 1), (5, 4096)])
def test_rmsnorm_matches_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    (got,), (want,), lines = compile_and_run(RMSNorm(shape[-1]), (x,))
    assert row_reductions(lines) >= 1
    assert_close(got, want, rtol=1e-5, atol=1e-6)


class Reductions(nn.Module):
    """Row reductions used on their own, and one whose input is not contiguous."""

    def forward(self, x):
        return x.mean(-1), x.amax(-1, keepdim=True), x.sum(-1) * 2.0, (x * x).sum(1), x.transpose(1, 2).amin(-1)


@pytest.mark.parametrize("shape", [(3, 5, 40), (2, 4, 1), (1, 3, 17)])
def test_plain_row_reductions_match_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 10
    got, want, lines = compile_and_run(Reductions(), (x,))
    assert not any("NOT TUNED" in line for line in lines), lines
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


class NormAttention(nn.Module):
    """LayerNorm -> attention (bmm, scale, softmax, bmm) -> residual: row kernels between GEMMs."""

    def __init__(self, d=48, heads=4):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)
        return x + (p @ v).transpose(1, 2).reshape(b, t, d)


def test_attention_block_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(2, 21, 48)
    (got,), (want,), lines = compile_and_run(NormAttention(), (x,))
    assert row_reductions(lines) >= 4
    assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_threaded_rows_match_one_thread():
    torch.manual_seed(0)
    x = torch.randn(64, 300)
    (got,), (want,), _ = compile_and_run(Softmax(), (x,), num_threads=2)
    assert_close(got, want)


class MaxMin(nn.Module):
    def forward(self, x):
        return x.amax(-1), x.amin(-1), torch.softmax(x, -1)


def test_nan_and_inf_propagate_as_in_torch():
    """Max and min combine lanes with a compare and a select and track NaN lanes aside: a NaN
    anywhere in a row (main loop, leftover vector or masked tail) is the row's max and min."""
    torch.manual_seed(0)
    x = torch.randn(6, 90)
    x[0, 3] = float("nan")       # in the unrolled loop
    x[1, 70] = float("nan")      # a leftover full vector
    x[2, 89] = float("nan")      # the masked tail
    x[3, 5] = float("inf")
    x[4, :] = -float("inf")
    got, want, _ = compile_and_run(MaxMin(), (x,))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        np.testing.assert_allclose(g[ok], w[ok], rtol=1e-5, atol=1e-6)


def test_a_target_without_a_vector_unit_keeps_loops_and_says_why():
    """Row kernels are vector code: Cortex-M gets the default loops, each reduction a decision."""
    import etc

    program_ir = etc.to_edge(torch.export.export(Softmax().eval(), (torch.randn(4, 33),))).program_ir
    report = delegate(program_ir, CpuPartitioner(target="cortex-m7"))
    assert report.partitions == 1 and not report.portable, str(report)
    lines = [line for ls in report.backend_lines.values() for line in ls]
    assert any(line.startswith("NOT TUNED  reduction -> loops: a row reduction etc-cpu-row-kernels did not take "
                               "(a target without a vector unit") for line in lines), lines


class MaskedAttention(nn.Module):
    """torch's safe softmax under a bool mask (BERT/ViT through SDPA): the mask is read along the
    row as vectors (bytes in memory, widened before the kernel), two layers sharing it; the
    reduction finding rows with an unmasked element is a bool one (arith.ori)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.ModuleList([nn.Linear(64, 192) for _ in range(2)])

    def forward(self, x, mask):
        for lin in self.qkv:
            q, k, v = lin(x).view(1, 19, 3, 4, 16).permute(2, 0, 3, 1, 4)
            x = x + torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) \
                .transpose(1, 2).reshape(1, 19, 64)
        return x


def test_bool_masked_attention_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(1, 19, 64)
    mask = torch.rand(1, 1, 19, 19) > 0.3
    mask[..., 0] = True
    (got,), (want,), lines = compile_and_run(MaskedAttention(), (x, mask))
    assert row_reductions(lines) == 6  # max, sum and the bool "any row left" of each layer's softmax
    assert_close(got, want, rtol=1e-4, atol=1e-5)


class AnyAll(nn.Module):
    def forward(self, x):
        return (x > 1.0).any(-1), (x > -1.5).all(-1), torch.softmax(x, -1)


@pytest.mark.parametrize("shape", [(5, 45), (3, 1), (2, 16)])
def test_bool_row_reductions_match_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    got, want, lines = compile_and_run(AnyAll(), (x,))
    assert not any("NOT TUNED" in line for line in lines), lines
    for g, w in zip(got, want):
        if w.dtype == np.bool_:
            np.testing.assert_array_equal(g, w)
        else:
            assert_close(g, w)
