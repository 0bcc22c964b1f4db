"""bfloat16 models on the cpu target: computed in f32, each op's result rounded to bf16 as torch
rounds it (etc-cpu-widen-bf16).

The compiler fuzzer's first CI model (issue 24): a bf16 ReLU -> Linear -> ReLU -> `* 0.75 + 0.5`
aborted the whole process inside LLVM (LegalizeDAG: "Unexpected illegal type!"): the loop
vectorizer made `fmul <4 x bfloat>` of the scalar bf16 epilogue, which the x86 back end cannot
legalize.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import etc
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner
from cpu_target_helpers import host_has



# The host (AVX-512 with its native bf16 conversions) and x86-64-v3 (none: the conversions must
# not become compiler-rt calls).
TARGETS = {
    "host": {},
    "x86-64-v3": pytest.param(dict(target="x86-64-v3"), marks=pytest.mark.skipif(
        not host_has("avx2", "fma"), reason="the host has no AVX2")),
}


class _FuzzerModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 16, bias=False)

    def forward(self, x):
        return F.relu(self.linear(F.relu(x))) * 0.75 + 0.5


class _Elementwise(nn.Module):
    """Only elementwise ops: every intermediate rounds to bf16 in torch, so etc must be bit-exact."""

    def forward(self, x, y):
        return (F.relu(x) * 0.75 + 0.5, (x * y - 1.3) / (y.abs() + 0.25), torch.maximum(x, y) * x,
                torch.where(x > y, x + y, x - 3.0))


def _method(model, example, dynamic_shapes, **options):
    ep = torch.export.export(model, example, dynamic_shapes=dynamic_shapes)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(**options))
    assert "0 op(s) on portable kernels" in edge.delegation_info(), edge.delegation_info()
    return Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")


def _bf16(got) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):  # a numpy array holds bf16 as its uint16 bits
        got = torch.as_tensor(np.asarray(got))
    return got if got.dtype == torch.bfloat16 else got.view(torch.bfloat16)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
def test_bf16_linear_with_an_elementwise_epilogue_compiles_and_matches_eager(target, threads):
    torch.manual_seed(0)
    model = _FuzzerModel().to(torch.bfloat16).eval()
    rows = torch.export.Dim("rows", min=1, max=33)
    method = _method(model, (torch.randn(4, 8, dtype=torch.bfloat16),), ({0: rows},), num_threads=threads,
                     **target)
    for n in (4, 1, 7, 16, 33):
        x = torch.randn(n, 8, dtype=torch.bfloat16)
        with torch.no_grad():
            want = model(x).double()
        got = _bf16(method.execute([x])[0]).double()
        # The 8-term sums are f32 in both, in another order: one bf16 rounding step apart at most.
        assert (got - want).abs().max() <= 2.0 ** -7 * max(1.0, float(want.abs().max())), n


@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
def test_bf16_elementwise_chains_round_every_op_as_torch_does(target):
    rows = torch.export.Dim("rows", min=1, max=100)
    method = _method(_Elementwise(), (torch.randn(5, 24, dtype=torch.bfloat16),
                                      torch.randn(5, 24, dtype=torch.bfloat16)), ({0: rows}, {0: rows}), **target)
    generator = torch.Generator().manual_seed(1)
    for n in (5, 1, 3, 64, 100):
        x = (torch.randn(n, 24, generator=generator) * 3).to(torch.bfloat16)
        y = torch.randn(n, 24, generator=generator).to(torch.bfloat16)
        x[0, :4] = torch.tensor([float("nan"), float("inf"), 1e-40, -0.0])  # NaN, inf, subnormal, -0
        for got, want in zip(method.execute([x, y]), _Elementwise()(x, y)):
            got = _bf16(got)
            assert torch.equal(got.view(torch.int16)[~want.isnan()], want.view(torch.int16)[~want.isnan()]), n
            assert torch.equal(got.isnan(), want.isnan()), n


# What the pipeline emitted for the fuzzer model's epilogue before etc-cpu-widen-bf16: scalar bf16
# arithmetic, which LLVM's loop vectorizer turns into <N x bfloat> fmul/fadd.
_SCALAR_BF16_LOOP = """
define void @epilogue(ptr noalias %0, ptr noalias %1) {
  br label %3
3:
  %4 = phi i64 [ %12, %6 ], [ 0, %2 ]
  %5 = icmp slt i64 %4, 64
  br i1 %5, label %6, label %13
6:
  %7 = getelementptr inbounds float, ptr %0, i64 %4
  %8 = load float, ptr %7, align 4
  %9 = fptrunc float %8 to bfloat
  %10 = fmul bfloat %9, 0xR3F40
  %11 = fadd bfloat %10, 0xR3F00
  %p = getelementptr inbounds bfloat, ptr %1, i64 %4
  store bfloat %11, ptr %p, align 2
  %12 = add i64 %4, 1
  br label %3
13:
  ret void
}
"""


def test_vector_bf16_arithmetic_is_a_lowering_error_not_an_llvm_abort():
    """LLVM's code generator aborts the process on vector bf16 arithmetic (an assertion): the
    optimized IR is checked first, so a compiler bug that lets some through is an error."""
    from etc.errors import LoweringError
    from etc.targets.cpu import codegen
    from etc.targets.cpu.isa import host_target

    with pytest.raises(LoweringError, match="vector bfloat16"):
        codegen.emit_object(_SCALAR_BF16_LOOP, host_target())
