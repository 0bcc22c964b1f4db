"""Bilinear resizing in the cpu target (etc-cpu-lower-resize + etc-cpu-resize-kernels): the vector
kernel's decision and its result against torch on random inputs: DeepLabV3's 256 channels 14 -> 28
both ways of align_corners, non-integer scales whose column blocks read two input vectors, a batch,
an input the caller passes non-contiguous, and a downscale the kernel refuses (with the reason) that
still computes right. test_cpu_ops.py's upsample tests cover odd sizes and sizes of 1."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import etc
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu.isa import isa_for, resolve_target

ISA = isa_for(resolve_target(None))  # the host's: CpuPartitioner() compiles for it


class Resize(torch.nn.Module):
    def __init__(self, size=None, scale=None, align_corners=False):
        super().__init__()
        self.size, self.scale, self.align_corners = size, scale, align_corners

    def forward(self, x):
        return F.interpolate(x, size=self.size, scale_factor=self.scale, mode="bilinear",
                             align_corners=self.align_corners)


def compile_and_run(model, x, call_with=None):
    edge = etc.to_edge(torch.export.export(model.eval(), (x,))).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable, str(report)
    lines = [line for ls in report.backend_lines.values() for line in ls]
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    arg = x if call_with is None else call_with
    return lines, np.asarray(method.execute([arg])[0])


@pytest.mark.parametrize("shape, size, scale, align_corners", [
    ((1, 256, 14, 14), (28, 28), None, False),  # DeepLabV3-MobileNetV3's decoder
    ((1, 256, 14, 14), (28, 28), None, True),
    ((2, 5, 23, 37), None, (1.7, 0.75), False),  # non-integer scales; 16 columns read 22 inputs: two vectors
    ((2, 5, 23, 37), (9, 50), None, True),
])
def test_resize_kernel_matches_torch(shape, size, scale, align_corners):
    torch.manual_seed(0)
    model = Resize(size, scale, align_corners)
    x = torch.randn(*shape)
    lines, got = compile_and_run(model, x)
    assert "tuned      resize -> resize x1" in lines, lines
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_non_contiguous_input_is_resized_as_its_values():
    torch.manual_seed(0)
    model = Resize((20, 31), None, False)
    x = torch.randn(1, 6, 17, 11)
    strided = torch.randn(1, 6, 11, 17).transpose(2, 3)  # same shape as x, not contiguous
    lines, got = compile_and_run(model, x, call_with=strided)
    assert "tuned      resize -> resize x1" in lines, lines
    np.testing.assert_allclose(got, model(strided).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not ISA.vectorizes, reason="host has no vector unit: no column blocks of vectors to exceed")
def test_a_downscale_past_two_vectors_is_loops_with_the_reason_and_still_right():
    """70 -> 20 columns (3.6x): the first block of one vector of output columns (the host's lanes,
    resize_match.analyze) reads more than two vectors of input columns."""
    torch.manual_seed(0)
    model = Resize((7, 20), None, True)
    x = torch.randn(1, 3, 9, 70)
    lines, got = compile_and_run(model, x)
    width = min(ISA.lanes, 20)
    assert any(line.startswith(f"NOT TUNED  resize -> loops: {width} output columns read") and "downscaling" in line
               for line in lines), lines
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)
