"""etc-cpu-gemm-epilogue-rows end to end: GEMM kernels whose long epilogue (SiLU, GELU, a sigmoid,
a residual add after them) runs one tile row at a time give torch's results, with partial row
blocks and column panels, the residual read from its own buffer, and on two threads. Compiled for
x86-64-v3, whose ISA row applies the pass (isa.py); the tests count the tiles it rewrote."""

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu.isa import ISA_TABLE
from etc.targets.cpu.passes import gemm_epilogue_rows
from cpu_target_helpers import host_has, random_batchnorm, rel_error

pytestmark = pytest.mark.skipif(not host_has("avx2", "fma"), reason="runs x86-64-v3 code (AVX2, FMA)")


class ConvBnSilu(torch.nn.Module):
    """EfficientNet's expansion: a 1x1 convolution, BN and SiLU (40 filters: a partial row block of
    4; 13x13 pixels: a partial column panel)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(16, 40, 1, bias=False), random_batchnorm(40)

    def forward(self, x):
        return torch.nn.functional.silu(self.bn(self.conv(x)))


class ConvSiluResidual(torch.nn.Module):
    """A 3x3 convolution, SiLU, then the block's input added: the epilogue reads a second tile."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(24, 24, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.silu(self.conv(x)) + x


class LinearGelu(torch.nn.Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.fc, self.approximate = torch.nn.Linear(48, 70), approximate

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x), approximate=self.approximate)


class LinearSigmoid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 96)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)) * 3.0


CASES = {
    "conv1x1-bn-silu": (ConvBnSilu, (1, 16, 13, 13)),
    "conv3x3-silu-residual": (ConvSiluResidual, (1, 24, 10, 10)),
    "linear-gelu": (lambda: LinearGelu(), (37, 48)),
    "linear-gelu-tanh": (lambda: LinearGelu("tanh"), (2, 19, 48)),
    "linear-sigmoid": (LinearSigmoid, (50, 64)),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_long_epilogues_row_by_row_match_torch(name, threads, monkeypatch):
    rewritten = []
    rewrite = gemm_epilogue_rows._rewrite
    monkeypatch.setattr(gemm_epilogue_rows, "_rewrite", lambda *a: rewritten.append(rewrite(*a)))
    build, shape = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(*shape)
    partitioner = CpuPartitioner(target="x86-64-v3", num_threads=threads)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(partitioner)
    assert not edge.delegation_reports[-1].portable, str(edge.delegation_reports[-1])
    assert rewritten, "no epilogue was applied row by row"
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randn(*shape) * 4
        with torch.no_grad():
            want = model(x).numpy()
        got = np.asarray(method.execute([x.numpy()])[0])
        assert rel_error(got, want) < 2e-6, name


def test_dynamic_rows_with_a_long_epilogue_match_torch(monkeypatch):
    """A dynamic token count: whole row blocks take the rows loop, the single rows after them do not."""
    rewritten = []
    rewrite = gemm_epilogue_rows._rewrite
    monkeypatch.setattr(gemm_epilogue_rows, "_rewrite", lambda *a: rewritten.append(rewrite(*a)))
    torch.manual_seed(0)
    model = LinearGelu().eval()
    tokens = torch.export.Dim("tokens", min=1, max=64)
    exported = torch.export.export(model, (torch.randn(8, 48),), dynamic_shapes=({0: tokens},))
    edge = etc.to_edge(exported).to_backend(CpuPartitioner(target="x86-64-v3"))
    assert not edge.delegation_reports[-1].portable and rewritten
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for n in (1, 5, 6, 7, 13, 64):
        x = torch.randn(n, 48) * 4
        with torch.no_grad():
            want = model(x).numpy()
        assert rel_error(np.asarray(method.execute([x.numpy()])[0]), want) < 2e-6, n


def test_the_avx2_row_applies_it_and_the_others_keep_epilogues_in_registers():
    """The rows loop was measured on an AVX2 core only (gemm_epilogue_rows.py); elsewhere min-ops is 0."""
    assert ISA_TABLE["avx2"].gemm_epilogue_rows > 0
    assert all(row.gemm_epilogue_rows == 0 for name, row in ISA_TABLE.items() if name != "avx2")
