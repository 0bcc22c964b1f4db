"""Ops users' models contain that to_edge refused (issue 11), now decomposed (compiler/decompositions.py).

`F.pad(mode="reflect")` (and Conv's `padding_mode="reflect"`) failed at import: torch's
reflection-pad decomposition writes `sub(number, tensor)`, which has no Scalar overload with
the number first (now `rsub.Scalar`, dialects/aten.py). `adaptive_max_pool1d/2d`, `median.dim`,
`round.decimals` and `linalg_vector_norm` had no edge form at all.

Each decomposition is checked against the ATen op itself on torch's OpInfo samples (every call
of the op a sample makes is re-run through the decomposition), then each op end to end
through etc (export, to_edge, the portable runtime) against eager torch.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import etc
from etc.compiler.decompositions import etc_decompositions
from etc.runtime import Runtime

if "expecttest" not in sys.modules:
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest
        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

aten = torch.ops.aten
OPINFOS = {  # the OpInfos whose samples call each decomposed op
    aten.linalg_vector_norm.default: [("linalg.vector_norm", "")],
    aten.round.decimals: [("round", "decimals_0"), ("round", "decimals_3"), ("round", "decimals_neg_3")],
    aten.adaptive_max_pool2d.default: [("nn.functional.adaptive_max_pool1d", ""),
                                       ("nn.functional.adaptive_max_pool2d", "")],
    aten.median.dim: [("median", "")],
}


class _Compare(TorchDispatchMode):
    """Re-runs every call of `op` through its decomposition and records the differences."""

    def __init__(self, op, decomposition, log):
        super().__init__()
        self.op, self.decomposition, self.log = op, decomposition, log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func is self.op:
            with _disable_current_modes():
                ours = self.decomposition(*args, **kwargs)
                self.log.append((args, kwargs, self.check(result, ours)))
        return result

    @staticmethod
    def check(want, got) -> str | None:
        want = want if isinstance(want, (tuple, list)) else (want,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for i, (w, g) in enumerate(zip(want, got)):
            if w.shape != g.shape or w.dtype != g.dtype:
                return f"output {i}: {tuple(g.shape)} {g.dtype}, ATen {tuple(w.shape)} {w.dtype}"
            if not torch.allclose(g.double(), w.double(), rtol=1e-5, atol=1e-6, equal_nan=True):
                return f"output {i} differs: {g} vs {w}"
        return None


@pytest.mark.parametrize("op", sorted(OPINFOS, key=str), ids=str)
def test_decomposition_matches_aten_on_opinfo_samples(op):
    decomposition = etc_decompositions()[op]
    log = []
    for name, variant in OPINFOS[op]:
        (opinfo,) = [o for o in op_db if o.name == name and o.variant_test_name == variant]
        for dtype in (torch.float32, torch.int64):
            if dtype not in opinfo.supported_dtypes("cpu"):
                continue
            for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=False):
                with _Compare(op, decomposition, log):
                    opinfo.op(sample.input, *sample.args, **sample.kwargs)
    failures = [f"{[getattr(a, 'shape', a) for a in args]} {kwargs}: {problem}" for args, kwargs, problem in log
                if problem is not None]
    assert not failures, "\n".join(failures[:10])
    assert len(log) >= 5, f"only {len(log)} calls of {op} compared"


def test_median_propagates_nan_like_aten():
    x = torch.tensor([[3.0, float("nan"), 1.0, float("nan")], [4.0, 2.0, 3.0, 1.0]])
    values, indices = etc_decompositions()[aten.median.dim](x, 1)
    want = torch.median(x, dim=1)
    assert torch.equal(indices, want.indices) and torch.allclose(values, want.values, equal_nan=True)


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


END_TO_END = {
    "reflect_pad1d": (lambda x: F.pad(x, (2, 1), mode="reflect"), (torch.randn(2, 3, 6),)),
    "reflect_pad2d": (lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), (torch.randn(1, 2, 5, 6),)),
    "conv_reflect": (lambda: torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), (torch.randn(1, 2, 5, 6),)),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 3), (torch.randn(1, 2, 10),)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
                            (torch.randn(1, 2, 7, 5),)),
    "adaptive_max_pool2d_divisible": (lambda x: F.adaptive_max_pool2d(x, 2), (torch.randn(2, 3, 8, 6),)),
    "median_dim": (lambda x: torch.median(x, dim=1), (torch.randn(3, 6),)),
    "round_decimals": (lambda x: (torch.round(x, decimals=2), torch.round(x * 1000, decimals=-2)),
                       (torch.randn(3, 5),)),
    "linalg_vector_norm": (lambda x: (torch.linalg.vector_norm(x, dim=-1), torch.linalg.vector_norm(x, ord=3.0),
                                      torch.linalg.vector_norm(x, ord=float("inf"), dim=0)), (torch.randn(3, 5),)),
    "embedding_bag_include_last_offset": (
        lambda: torch.nn.EmbeddingBag(10, 4, mode="mean", include_last_offset=True),
        (torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 5, 8]))),
}


@pytest.mark.parametrize("name", sorted(END_TO_END))
def test_op_runs_end_to_end(name):
    make, inputs = END_TO_END[name]
    torch.manual_seed(0)
    module = make() if make.__code__.co_argcount == 0 else _Fn(make)
    module.eval()
    program = etc.to_edge(torch.export.export(module, inputs)).to_executorch()
    got = Runtime.get().load_program(program.buffer).load_method("forward").execute(list(inputs))
    with torch.no_grad():
        want = module(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
