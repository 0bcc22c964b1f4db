"""etc-cpu-winograd-convs against torch: 3x3 stride-1 convolutions computed as Winograd F(2x2, 3x3)
(ResNet's, and odd ones: two images, odd maps, padding 0 and 2, no bias, a residual add, an input
in channels-last memory), compiled whole by CpuPartitioner and run on random inputs; each takes
the `winograd` path and matches torch. Those the rule leaves direct (few channels, few tiles) say
why and match too. The transform constants themselves are checked against a direct correlation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from cpu_target_helpers import random_batchnorm, run_delegated
from etc.targets.cpu.passes.winograd_convs import INPUT_TRANSFORM, OUTPUT_TRANSFORM, transformed_filter


def _matrix(rows, width: int) -> np.ndarray:
    """A transform table (rows of (index, then (index, sign) pairs)) as its matrix."""
    m = np.zeros((len(rows), width))
    for i, row in enumerate(rows):
        m[i, row[0]] = 1.0
        for at in range(1, len(row), 2):
            m[i, row[at]] += row[at + 1]
    return m


def test_transforms_compute_the_correlation():
    """A^T [(G g G^T) * (B^T d B)] A is the 2x2 'valid' correlation of a 4x4 tile d with a 3x3
    filter g, for random tiles and filters (float64: exact up to roundoff)."""
    rng = np.random.default_rng(0)
    bt, at = _matrix(INPUT_TRANSFORM, 4), _matrix(OUTPUT_TRANSFORM, 4)
    for _ in range(20):
        g, d = rng.standard_normal((3, 3)), rng.standard_normal((4, 4))
        u = transformed_filter(g.reshape(1, 1, 3, 3).astype(np.float32)).reshape(4, 4).astype(np.float64)
        want = np.array([[np.sum(d[i:i + 3, j:j + 3] * g.astype(np.float32)) for j in range(2)] for i in range(2)])
        np.testing.assert_allclose(at @ (u * (bt @ d @ bt.T)) @ at.T, want, atol=1e-6)


class ConvBlock(nn.Module):
    """conv -> BN -> (+ input) -> ReLU: ResNet's basic-block halves."""

    def __init__(self, cin, cout, padding=1, bias=True, residual=False):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(cin, cout, 3, 1, padding, bias=bias), random_batchnorm(cout)
        self.residual = residual

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.relu(y + x if self.residual else y)


TAKEN = [  # (in, out, padding, bias, residual, (N, H, W), tiles)
    (64, 64, 1, True, False, (1, 14, 14), 49),     # ResNet-18's 256@14 in miniature
    (64, 96, 1, False, False, (2, 15, 13), 112),   # two images, odd map: the last tiles cropped
    (96, 64, 0, True, False, (1, 9, 29), 56),      # 'valid': a 7x27 output
    (64, 64, 2, True, False, (1, 13, 13), 64),     # padding 2: a 15x15 output
    (64, 64, 1, True, True, (1, 14, 14), 49),      # residual add and ReLU after the transform
]


@pytest.mark.parametrize("cin,cout,p,bias,residual,shape,tiles", TAKEN)
def test_winograd_matches_torch(cin, cout, p, bias, residual, shape, tiles):
    n, h, w = shape
    lines = run_delegated(ConvBlock(cin, cout, p, bias, residual), (n, cin, h, w), atol=5e-5, whole=True)
    assert any(f"convolution -> winograd: F(2x2,3x3) over {tiles} tiles: {cin} -> {cout} channels" in line
               for line in lines), lines
    assert not any(line.startswith("NOT TUNED") for line in lines), lines


def test_winograd_reads_a_channels_last_input():
    """The caller's input in channels-last memory (a permuted view): the same result."""
    torch.manual_seed(1)
    x = torch.randn(1, 14, 14, 64).permute(0, 3, 1, 2)
    assert not x.is_contiguous()
    lines = run_delegated(ConvBlock(64, 64), (1, 64, 14, 14), inputs=[x], atol=5e-5, whole=True)
    assert any("convolution -> winograd" in line for line in lines), lines


@pytest.mark.parametrize("cin,cout,shape,reason", [
    (32, 32, (1, 28, 28),
     "32 -> 32 channels: the transforms cost more than the multiplies saved (C*O/(C+O) = 16 < 32)"),
    (64, 64, (1, 7, 7), "16 output tiles of 2x2 (fewer than 49): the batched GEMM is too narrow"),
])
def test_direct_when_winograd_does_not_pay(cin, cout, shape, reason):
    from etc.targets.cpu.isa import isa_for, resolve_target

    if isa_for(resolve_target("host")).name != "avx512":
        pytest.skip("the thresholds in the reasons are the AVX-512 row's; this host has another")
    n, h, w = shape
    lines = run_delegated(ConvBlock(cin, cout), (n, cin, h, w), atol=5e-5, whole=True)
    assert any(f"convolution -> direct: {reason}" in line for line in lines), lines
    assert not any("winograd" in line for line in lines), lines


def test_thresholds_come_from_the_isa_row_and_keep_the_bmm_a_gemm_kernel():
    """Each vector ISA row takes Winograd only over at least half a GEMM panel of tiles (fewer fill
    under half of the bmm's padded panel: 1.28-1.46x the direct kernel's time at 25 tiles); the
    scalar row never; the pipeline passes the row's thresholds."""
    from etc.targets.cpu.isa import ISA_TABLE, PRESETS, isa_for
    from etc.targets.cpu.pipeline import cpu_pipeline

    for name, isa in ISA_TABLE.items():
        if isa.vectorizes:
            assert isa.winograd_min_tiles >= isa.gemm_nr // 2 and isa.winograd_min_channels > 0, name
        else:
            assert isa.winograd_min_tiles == 0, name
    for name, target in PRESETS.items():
        isa = isa_for(target)
        assert (f"etc-cpu-winograd-convs{{min-channels={isa.winograd_min_channels} "
                f"min-tiles={isa.winograd_min_tiles}}}") in cpu_pipeline(target), name


def test_avx2_takes_winograd_at_fewer_channels():
    """32 -> 32 channels over 14x14: left direct on AVX-512 (the test above), taken on the
    x86-64-v3 preset (AVX2, where it measured 0.75-0.89x the direct kernel's time); same result."""
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model, x = ConvBlock(32, 32).eval(), torch.randn(1, 32, 14, 14)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner(target="x86-64-v3"))
    assert "convolution -> winograd: F(2x2,3x3) over 49 tiles: 32 -> 32 channels" in edge.delegation_info()
    got = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x.numpy()])[0]
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(got), model(x).numpy(), atol=5e-5, rtol=1e-5)
