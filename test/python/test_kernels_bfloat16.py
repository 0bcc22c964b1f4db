"""Every kernel's bfloat16 path, through the registry, against torch computing in bfloat16 (issue 11).

The defect: the runtime handed bfloat16 tensors to kernels as plain uint16 arrays, so kernels
computed on the bits: `x.float()` of [1, -2, 0.5] gave [16256, 49152, 16128] and a bf16
`nn.Linear` gave values near 1e32. The old bf16 test only copied bits, so it passed.

Here torch's OpInfo samples run in bfloat16 (and the first of each non-contiguous) under a TorchDispatchMode;
each aten call with a kernel is re-run on it with its bf16 tensors as the runtime holds them
(uint16 bits tagged `common.BFLOAT16`) and its outs preallocated the same way, and compared
with torch's bf16 result. The registry computes in float32 and rounds once; torch rounds at
the same point for most ops, so the tolerance is a few bf16 ulps, not a float32 one. And end
to end: bf16 programs (a CNN, a transformer block) match torch run in bf16.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.runtime.kernels.common import BFLOAT16, bfloat16_to_float32, is_bfloat16
from etc.schema import from_torch_dtype
from cpu_target_helpers import host_has
from test_kernels_opinfo import SKIP, OutKernelDiffer, op_db, opinfo_samples, outside_torchs_test_harness

OTHER_DTYPES = {torch.int64, torch.int32, torch.bool, torch.uint8}
# Fewer samples than the float32 run: the bf16 path is the same conversion around every kernel,
# so two argument mixes per op (and one non-contiguous) reach it; the float32 run covers the rest.
SAMPLES_PER_OP = 2
# bf16 has 8 significant bits: torch and the registry may round intermediate results at
# different points (a sum of bf16 products, say): a few ulps apart.
RTOL, ATOL = 3e-2, 3e-2
# Not comparable in bf16: ties decided by rounding (argmax of equal bf16 values is fine, but
# sort/topk order equal keys arbitrarily), random ops.
BF16_SKIP = SKIP | {"aten::sort.values", "aten::sort.values_stable", "aten::topk.values", "aten::argsort.stable_out",
                    "aten::kthvalue.values", "aten::median.dim_values", "aten::nanmedian.dim_values",
                    "aten::mode.values", "aten::unique_consecutive.out", "aten::_unique2.out", "aten::unique_dim.out"}

# Ops whose bf16 ATen kernel rounds intermediate values to bf16 (not a property of the op):
# checked against torch's float32 result on the same bf16 inputs instead.
FLOAT32_REFERENCE = {"aten::grid_sampler_2d.out"}


def _np(v):
    if isinstance(v, torch.Tensor):
        v = v.detach()
        if v.dtype == torch.bfloat16:
            return v.view(torch.int16).numpy().view(BFLOAT16)
        return v.numpy()
    if isinstance(v, (list, tuple)):
        return [_np(x) for x in v]
    if isinstance(v, torch.dtype):
        return int(from_torch_dtype(v))
    if isinstance(v, (torch.memory_format, torch.layout, torch.device)):
        return None
    return v


def _alloc(r):
    if isinstance(r, torch.Tensor):
        return np.zeros(tuple(r.shape), BFLOAT16 if r.dtype == torch.bfloat16 else r.numpy().dtype)
    return [_alloc(x) for x in r]


def _values(a) -> np.ndarray:
    a = np.asarray(a)
    return bfloat16_to_float32(a).reshape(a.shape) if is_bfloat16(a) else a


class _Bfloat16Differ(OutKernelDiffer):
    """The calls with a bf16 tensor among only the dtypes bf16 programs mix with; bf16 outputs
    must come back tagged bfloat16 and match at bf16's precision."""

    skip = BF16_SKIP

    def takes(self, ts: list) -> bool:
        return any(t.dtype == torch.bfloat16 for t in ts) and all(
            t.dtype in OTHER_DTYPES | {torch.bfloat16} and t.layout == torch.strided for t in ts)

    def to_numpy(self, v):
        return _np(v)

    def alloc(self, r):
        return _alloc(r)

    def reference(self, name: str, func, args, kwargs, res):
        if name not in FLOAT32_REFERENCE:
            return res
        # torch rounds this op's intermediates to bf16 (grid coordinates): compare with its float32
        # result on the same bf16 inputs, rounded once, which is what the registry computes.
        up = lambda v: v.float() if isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 else v  # noqa: E731
        return func(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()}).to(torch.bfloat16)

    def difference(self, g, e) -> str | None:
        is_bf16 = e.dtype == torch.bfloat16
        if is_bf16 and not is_bfloat16(np.asarray(g)):
            return f"is {np.asarray(g).dtype}, not tagged bfloat16"
        g, e = _values(g), (e.detach().float() if is_bf16 else e.detach()).numpy()
        if g.shape != e.shape:
            return f"is {g.shape}, torch {e.shape}"
        if e.dtype.kind == "f":
            scale = float(np.nanmax(np.abs(e), initial=0)) if np.isfinite(e).any() else 1.0
            if not np.allclose(g, e, rtol=RTOL, atol=ATOL * max(1.0, scale), equal_nan=True):
                return f"differs (max abs diff {np.nanmax(np.abs(g - e)) if g.size else 0})"
            return None
        return None if np.array_equal(g, e) else "differs"


def _run_opinfos(ops):
    """Up to SAMPLES_PER_OP samples per op, and the first one again non-contiguous."""
    results = collections.defaultdict(list)
    for opinfo in ops:
        if torch.bfloat16 not in opinfo.supported_dtypes("cpu"):
            continue
        try:
            samples = opinfo_samples(opinfo, torch.bfloat16, SAMPLES_PER_OP)
        except Exception:
            continue
        if samples:
            try:
                samples.append(samples[0].noncontiguous())
            except Exception:
                pass
        for sample in samples:
            try:
                with outside_torchs_test_harness(), _Bfloat16Differ(results):
                    opinfo.op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                pass  # torch refused the sample itself; nothing to compare
    return results


_CHUNKS = 2


@pytest.mark.parametrize("chunk", range(_CHUNKS))
def test_kernels_agree_with_torch_in_bfloat16(chunk):
    results = _run_opinfos(op_db[chunk::_CHUNKS])
    failures = [f for fs in results.values() for f in fs if f is not None]
    compared = sum(f is None for fs in results.values() for f in fs)
    assert not failures, f"{len(failures)} of {compared + len(failures)} calls differ:\n" + "\n".join(failures[:15])
    assert compared > 100


# ------------------------------------------------------------------ end to end
def _etc_run(module, inputs, delegate: bool):
    from etc.targets.cpu import CpuPartitioner

    edge = etc.to_edge(torch.export.export(module, inputs))
    if delegate:
        edge = edge.to_backend(CpuPartitioner())
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    return method.execute(list(inputs))



@pytest.mark.skipif(not host_has("avx2", "fma"), reason="runs AVX2 code")
def test_bfloat16_on_a_core_without_a_bf16_convert_rounds_as_torch_does():
    """Without a bf16 convert instruction (AVX2, NEON, Cortex-M) LLVM rounds the bf16 values it
    folded back out of etc-cpu-widen-bf16's integer code through compiler-rt's __truncsfbf2: the
    module defines it (torch's rounding), or the object would not link. The ReLU6's clamp is such
    a select; subnormals keep their bits (a bf16 convert that flushes them would not)."""
    from etc.targets.cpu import CpuPartitioner

    class Clamp(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.relu6(x * 2.0) + x

    x = torch.tensor([1e-39, -1e-39, 9.2e-41, float("nan"), 3.0, -2.5, 7.0, 0.0] * 4, dtype=torch.bfloat16)
    edge = etc.to_edge(torch.export.export(Clamp(), (x,))).to_backend(CpuPartitioner("x86-64-v3"))
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    (got,) = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x])
    want = Clamp()(x)
    nan = want.isnan()  # eager's NaN bits vary by op (0xFFFF here); etc's are c10's 0x7FC0
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16)), (got, want)


def test_bfloat16_models_compile_for_cores_without_a_bf16_convert():
    from etc.targets.cpu import CpuPartitioner

    module = _SmallCnn().eval().to(torch.bfloat16)
    ep = torch.export.export(module, (torch.randn(1, 3, 12, 12, dtype=torch.bfloat16),))
    for target in ("x86-64-v3", "aarch64", "cortex-m7"):
        program = etc.to_edge(ep).to_backend(CpuPartitioner(target)).to_executorch()
        assert program.buffer


def _close_in_bf16(got, want, scale_rtol=5e-2):
    """Within a few bf16 ulps of the output's scale: etc rounds once per op from float32, eager
    torch rounds inside some ops too."""
    assert got.dtype == want.dtype == torch.bfloat16
    got, want = got.float(), want.float()
    scale = max(1.0, float(want.abs().max()))
    assert float((got - want).abs().max()) <= scale_rtol * scale, (got, want)


def test_bfloat16_input_cast_to_float_is_its_value():
    """The issue's example: [1, -2, 0.5] came back as its bits [16256, 49152, 16128]."""
    class ToFloat(torch.nn.Module):
        def forward(self, x):
            return x.float()

    x = torch.tensor([1, -2, 0.5], dtype=torch.bfloat16)
    (got,) = _etc_run(ToFloat(), (x,), delegate=False)
    assert torch.equal(got, torch.tensor([1, -2, 0.5]))


class _SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 8, 3, groups=8, padding=1), torch.nn.ReLU6(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1)).softmax(-1)


@pytest.mark.parametrize("delegate", [False, True], ids=["portable", "cpu"])
@pytest.mark.parametrize("model, shape", [
    (_SmallCnn, (2, 3, 12, 12)),
    (lambda: torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True), (2, 6, 32)),
], ids=["cnn", "transformer_block"])
def test_bfloat16_models_match_torch_in_bfloat16(model, shape, delegate):
    torch.manual_seed(0)
    module = model().eval().to(torch.bfloat16)
    x = torch.randn(*shape, dtype=torch.bfloat16)
    with torch.no_grad():
        want = module(x)
    (got,) = _etc_run(module, (x,), delegate)
    _close_in_bf16(got, want)
