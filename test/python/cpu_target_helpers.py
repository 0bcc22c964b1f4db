"""What the cpu target's end-to-end tests share: a model to its edge program and delegated to the
cpu target, the relative error they compare with, and small models."""

import numpy as np
import torch

import etc
from etc.compiler.delegation import delegate
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner


def host_has(*features) -> bool:
    """Does this machine's CPU have every one of `features` (LLVM's names: "avx2", "avx512vnni")?"""
    from etc.targets.cpu.runtime import host_features

    return set(features) <= host_features()


def edge_program(model, inputs):
    """Exported and converted to edge (etc.to_edge)."""
    return etc.to_edge(torch.export.export(model.eval(), inputs)).program_ir


def rel_error(actual, expected) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max()))
    return float(np.abs(np.asarray(actual, dtype=np.float64) - expected).max() / scale)


def delegated(model, inputs, **kwargs):
    program_ir = edge_program(model, inputs)
    report = delegate(program_ir, CpuPartitioner(**kwargs))
    return program_ir, report


def random_batchnorm(channels: int) -> torch.nn.BatchNorm2d:
    """A BatchNorm2d whose folded scale and shift are not the identity (random affine and statistics)."""
    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return bn


def run_delegated(model, shape, dynamic_shapes=None, inputs=None, atol=2e-5, whole=False) -> list[str]:
    """`model` exported on a random input of `shape` (seed 0), delegated to CpuPartitioner (all of
    it when `whole`), run on each of `inputs` (default: that input) and compared with eager;
    returns the delegation report's backend lines (the decisions the tests look for)."""
    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    edge = etc.to_edge(torch.export.export(model, (x,), dynamic_shapes=dynamic_shapes)).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert not (whole and report.portable), str(report)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for x in inputs or [x]:
        with torch.no_grad():
            want = model(x).numpy()
        got = np.asarray(method.execute([x.numpy()])[0])
        assert got.shape == want.shape
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)
    return [line for lines in report.backend_lines.values() for line in lines]


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ConvBnRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.bn = torch.nn.BatchNorm2d(8)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class Depthwise(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        return torch.nn.functional.relu6(self.pw(self.dw(x)))


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1), torch.log_softmax(x, dim=1)


class LayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(48)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.nn.functional.gelu(self.ln(x))
