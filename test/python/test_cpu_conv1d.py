"""etc-cpu-conv1d-as-2d against torch: 1-D convolutions (audio front ends, keyword spotters,
conformer depthwise blocks) of every stride, padding, dilation and group count, with and without
bias, batch > 1, odd lengths, compiled whole by CpuPartitioner and run on random inputs. Each
must reach a 2-D kernel (a tuned decision, no `conv_1d` loops); a dynamic length keeps the 1-D op
and the report says why."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from cpu_target_helpers import run_delegated

CONV1D = [  # (in, out, kernel, stride, padding, dilation, groups, bias, (N, L), decision)
    (80, 96, 3, 1, 1, 1, 1, True, (1, 301), "convolution -> gemm"),    # Whisper's first (narrower)
    (64, 64, 3, 2, 1, 1, 1, True, (2, 149), "convolution -> gemm"),    # Whisper's second: stride 2, batch 2
    (24, 40, 5, 1, 0, 2, 1, False, (1, 97), "convolution -> gemm"),    # dilated, no padding, no bias
    (32, 32, 7, 1, 3, 1, 32, True, (1, 203), "window -> window"),      # depthwise (conformer)
    (48, 48, 3, 1, 1, 1, 6, True, (1, 67), "convolution -> grouped"),  # grouped, 8 per group
    (10, 20, 10, 5, 0, 1, 1, True, (1, 1003), "convolution -> gemm"),  # wav2vec2-like: kernel 10, stride 5
]


@pytest.mark.parametrize("cin, cout, k, s, p, d, g, bias, nl, decision", CONV1D)
def test_conv1d_runs_as_a_2d_kernel(cin, cout, k, s, p, d, g, bias, nl, decision):
    model = nn.Sequential(nn.Conv1d(cin, cout, k, s, p, dilation=d, groups=g, bias=bias), nn.GELU())
    lines = run_delegated(model, (nl[0], cin, nl[1]), atol=3e-5, whole=True)
    assert any(decision in line for line in lines), lines
    assert not any("conv_1d" in line for line in lines), lines


def test_padding_given_once_and_the_same_string():
    """`padding="same"` exports one value per dimension; the new height dimension gets 0."""
    lines = run_delegated(nn.Conv1d(32, 48, 5, padding="same"), (1, 32, 101), whole=True)
    assert any("convolution -> gemm" in line for line in lines), lines


def test_a_dynamic_length_keeps_the_1d_op_and_says_so():
    length = torch.export.Dim("length", min=8, max=64)
    x = torch.randn(1, 4, 16)
    lines = run_delegated(nn.Conv1d(4, 6, 3, padding=1), (1, 4, 16), dynamic_shapes=({2: length},),
                          inputs=[x, torch.randn(1, 4, 41)])
    assert any("conv_1d_ncw_fcw has no GEMM kernel" in line for line in lines), lines
