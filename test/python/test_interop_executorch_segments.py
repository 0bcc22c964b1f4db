"""ExecuTorch-made programs at the edges of the format run on etc (issue 11).

ExecuTorch writes a program whose segments are all empty (`external_constants=True`: the
weights go to a .ptd file) as `segments=[DataSegment(0, 0)]` without the extended header;
etc's reader refused it ("the program has segments but no extended header locating them").
Also here: programs without constants, with `torch.cond`, with only a mutable buffer, and in
bfloat16 (which the portable runtime computed on the raw bits).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from etc.errors import ProgramError
from etc.runtime import Runtime
from etc.schema import deserialize_pte

exir = pytest.importorskip("executorch.exir")


def _executorch(module, inputs, **config) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = exir.to_edge(torch.export.export(module, inputs))
        return program.to_executorch(exir.ExecutorchBackendConfig(**config) if config else None).buffer


class Weightless(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))


class BufferOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4))

    def forward(self, x):
        self.cache.add_(x)
        return self.cache * 1.0


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.layer(x)


@pytest.mark.parametrize("make, inputs", [
    (Weightless, (torch.randn(4),)),
    (Cond, (torch.randn(4),)),
    (Cond, (-torch.ones(4),)),
    (BufferOnly, (torch.randn(4),)),
    (lambda: Linear().to(torch.bfloat16), (torch.randn(2, 4, dtype=torch.bfloat16),)),
], ids=["weightless", "cond-true", "cond-false", "buffer-only", "bfloat16"])
def test_executorch_program_runs(make, inputs):
    module = make()
    data = _executorch(make(), inputs)
    method = Runtime.get().load_program(data).load_method("forward")
    for _ in range(2):  # twice: a mutable buffer's state carries over
        with torch.no_grad():
            want = module(*inputs)
        (got,) = method.execute(list(inputs))
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_external_constants_program_loads_and_names_its_missing_data():
    data = _executorch(Linear(), (torch.randn(2, 4),), external_constants=True)
    assert data[8:12] != b"eh00"  # the layout under test: segments, no extended header
    pte = deserialize_pte(data)
    assert pte.constant_data == [] and pte.checksums is False
    program = Runtime.get().load_program(data)
    with pytest.raises(ProgramError, match="tensor 'layer.weight' lives in external data .a .ptd file."):
        program.load_method("forward")
