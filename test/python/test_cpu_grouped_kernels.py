"""etc-cpu-grouped-kernels against torch: grouped convolutions of every group width (2 to 80
channels per group, odd ones), strides 1 and 2, padding, dilation, non-square kernels, bias or
none, BN + ReLU fused, a residual add, batch > 1, compiled whole by CpuPartitioner and run on
random inputs. Each must take the grouped kernel (a recorded decision), or, where it cannot (a
dynamic batch), say so in the report."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from cpu_target_helpers import random_batchnorm, run_delegated


def check(model, shape, dynamic_shapes=None, inputs=None) -> list[str]:
    return run_delegated(model, shape, dynamic_shapes, inputs)


GROUPED = [  # (in, out, groups, kernel, stride, padding, dilation, H, W, bias)
    (16, 16, 8, 3, 1, 1, 1, 10, 10, True),        # 2 channels per group
    (48, 48, 6, 3, 1, 1, 1, 17, 23, False),       # RegNetY's group width 8, odd plane
    (40, 40, 5, 3, 2, 1, 1, 15, 33, True),        # stride 2, a masked tail
    (15, 10, 5, 3, 1, 1, 1, 9, 37, False),        # 3 in, 2 out per group
    (15, 10, 5, (3, 5), 1, (1, 2), 1, 9, 37, True),  # non-square kernel
    (12, 18, 3, 3, 2, 2, 2, 13, 17, True),        # dilation 2, stride 2, 4 -> 6 per group
    (21, 21, 3, 1, 1, 0, 1, 7, 7, True),          # grouped 1x1 (ShuffleNet), 7 per group
    (64, 64, 2, 3, 1, 1, 1, 6, 5, False),         # 32 per group: several channel blocks
    (160, 80, 2, 1, 1, 0, 1, 5, 40, True),        # 80 in, 40 out per group
    (8, 8, 2, 3, 1, 1, 1, 1, 1, True),            # a 1x1 plane: only padding around it
]


@pytest.mark.parametrize("cin,cout,g,k,s,p,d,h,w,bias", GROUPED)
def test_grouped(cin, cout, g, k, s, p, d, h, w, bias):
    lines = check(nn.Conv2d(cin, cout, k, s, p, dilation=d, groups=g, bias=bias), (1, cin, h, w))
    assert any("convolution -> grouped" in line for line in lines), lines
    assert not any(line.startswith("NOT TUNED") for line in lines), lines


@pytest.mark.parametrize("cin,cout,g,k,s,p,d,h,w,bias", [GROUPED[1], GROUPED[2], GROUPED[6]])
def test_grouped_bn_relu_fused(cin, cout, g, k, s, p, d, h, w, bias):
    model = nn.Sequential(nn.Conv2d(cin, cout, k, s, p, dilation=d, groups=g, bias=bias), random_batchnorm(cout), nn.ReLU())
    lines = check(model, (1, cin, h, w))
    assert any("epilogue -> fused" in line for line in lines), lines
    assert not any(line.startswith("NOT TUNED") for line in lines), lines


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(24, 24, 3, 1, 1, groups=3)

    def forward(self, x):
        return torch.relu(self.conv(x) + x)


def test_grouped_residual_batch3():
    lines = check(_Residual(), (3, 24, 11, 19))
    assert any("convolution -> grouped" in line for line in lines), lines
    assert not any(line.startswith("NOT TUNED") for line in lines), lines


def test_grouped_dynamic_batch_is_a_visible_decision():
    batch = torch.export.Dim("batch", min=1, max=4)
    model = nn.Sequential(nn.Conv2d(12, 12, 3, 1, 1, groups=3), nn.ReLU())
    lines = check(model, (2, 12, 9, 9), dynamic_shapes=({0: batch},),
                  inputs=[torch.randn(1, 12, 9, 9), torch.randn(4, 12, 9, 9)])
    assert any(line.startswith("NOT TUNED") and "convolution -> loops: not static f32" in line for line in lines), lines
