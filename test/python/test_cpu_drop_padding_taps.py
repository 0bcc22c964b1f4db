"""etc-cpu-drop-padding-taps against torch: convolutions whose outer taps read only zero padding
(DeepLab's dilated 3x3s on a small map, a 3x3 on a 1x1 map, a 5x5 on one row), dense, grouped
and depthwise, strides 1 and 2, odd maps, batch 2, with bias, BN and ReLU; compiled whole by
CpuPartitioner and run on random inputs. Each drops its dead taps (a `taps -> pruned` decision)
and matches torch; where it cannot, the report says why."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from cpu_target_helpers import run_delegated


def check(model, shape, dynamic_shapes=None, inputs=None) -> list[str]:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    return run_delegated(model, shape, dynamic_shapes, inputs, atol=3e-5, whole=True)


PRUNED = [  # (in, out, groups, kernel, stride, padding, dilation, (N, H, W), kept taps)
    (16, 8, 1, 3, 1, 36, 36, (2, 33, 21), "3x3 -> 1x1"),       # DeepLab's ASPP rate 36 at 520, odd map, batch 2
    (9, 7, 1, 3, 2, 6, 6, (1, 5, 9), "3x3 -> 1x3"),            # stride 2: the rows' outer taps dead
    (6, 5, 1, 5, 1, 2, 1, (1, 1, 20), "5x5 -> 1x5"),           # a 5x5 on one row
    (12, 12, 3, 3, 1, 9, 9, (1, 7, 6), "3x3 -> 1x1"),          # grouped (4 per group)
    (10, 10, 10, 3, 1, 1, 1, (1, 1, 1), "3x3 -> 1x1"),         # depthwise on a 1x1 map
]


@pytest.mark.parametrize("cin,cout,g,k,s,p,d,shape,kept", PRUNED)
def test_dead_taps_dropped(cin, cout, g, k, s, p, d, shape, kept):
    n, h, w = shape
    model = nn.Sequential(nn.Conv2d(cin, cout, k, s, p, dilation=d, groups=g), nn.BatchNorm2d(cout), nn.ReLU())
    lines = check(model, (n, cin, h, w))
    assert any(f"taps -> pruned: {kept}:" in line for line in lines), lines
    assert not any(line.startswith("NOT TUNED") for line in lines), lines


def test_crop_is_a_visible_decision():
    """One output of a 3x3 dilation-2 filter, padding 1, on a 3x3 map: the centre tap alone would
    need padding -1. All taps stay (correct, zeros multiplied) and the report says why."""
    lines = check(nn.Conv2d(4, 3, 3, 1, 1, dilation=2), (1, 4, 3, 3))
    assert any(line.startswith("NOT TUNED") and "taps -> all-taps: the live taps would need padding -1" in line
               for line in lines), lines


def test_dynamic_map_is_a_visible_decision():
    width = torch.export.Dim("width", min=2, max=20)
    lines = check(nn.Conv2d(4, 3, 3, 1, 8, dilation=8), (1, 4, 5, 9), dynamic_shapes=({3: width},),
                  inputs=[torch.randn(1, 4, 5, 4), torch.randn(1, 4, 5, 20)])
    assert any(line.startswith("NOT TUNED") and "taps -> all-taps: dynamic map size" in line for line in lines), lines
