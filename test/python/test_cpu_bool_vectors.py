"""Bool tensors read and written by the cpu target's vector code (etc-cpu-bool-vectors-as-bytes).

A bool tensor is one byte per element; LLVM packs a vector of i1 into bits. A GEMM epilogue that
fused `where(mask, ...)` read a causal mask's first bytes as bits and computed a wrong attention
(found by the compiler fuzzer: the model also returned the mask, so the mask was computed in the
delegate instead of folded into the scores). Each model here returns every value it computes, bools
included, and the test compares all of them with eager: bools and exact values bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner


class CausalAttentionReturningItsMask(torch.nn.Module):
    """The fuzzer's finding: the mask is an output, so the delegate computes it and the scores'
    GEMM epilogue reads it as a vector."""

    def __init__(self, t: int):
        super().__init__()
        self.t = t
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        t = self.t
        q, k, v = (self.qkv(x)[..., i * 32:(i + 1) * 32].reshape(3, t, 4, 8).permute(0, 2, 1, 3) for i in range(3))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-2, -1) * 0.35).masked_fill(mask, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(3, t, 32)
        return out, mask


class MaskedLinear(torch.nn.Module):
    """A bool input read by a GEMM epilogue, and a bool output written by one."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 80)

    def forward(self, x, keep):
        y = self.fc(x)
        return torch.where(keep, y, 0.0), y > 0.25


class MaskedConv(torch.nn.Module):
    """The same through a convolution's (window kernel's) epilogue."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 32, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)

    def forward(self, x, keep):
        y = self.conv(x)
        z = torch.where(keep, self.depthwise(y), 1.0)
        return z, z > 0.5


class Elementwise(torch.nn.Module):
    """Bools in and out of fused elementwise code: compares, logical ops, where."""

    def forward(self, a, b, m):
        gt = a > b
        both = gt & ~m
        return torch.where(both, a, b), both, gt | m


def _run(model, inputs):
    edge = etc.to_edge(torch.export.export(model.eval(), inputs)).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert not report.portable, str(report)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    got = method.execute([x.numpy() for x in inputs])
    with torch.no_grad():
        want = model(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype == np.bool_:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("t", [64, 389])
def test_attention_reads_the_causal_mask_it_returns_as_bytes(t):
    torch.manual_seed(0)
    _run(CausalAttentionReturningItsMask(t), (torch.randn(3, t, 32),))


def test_gemm_epilogue_reads_and_writes_bool_tensors_as_bytes():
    torch.manual_seed(1)
    _run(MaskedLinear(), (torch.randn(70, 48), torch.rand(70, 80) > 0.5))


def test_convolution_epilogues_read_and_write_bool_tensors_as_bytes():
    torch.manual_seed(3)
    _run(MaskedConv(), (torch.randn(1, 8, 20, 20), torch.rand(1, 32, 20, 20) > 0.5))


@pytest.mark.parametrize("cols", [64, 130])
def test_fused_elementwise_reads_and_writes_bool_tensors_as_bytes(cols):
    torch.manual_seed(2)
    a, b = torch.randn(9, cols), torch.randn(9, cols)
    _run(Elementwise(), (a, b, torch.rand(9, cols) > 0.5))
