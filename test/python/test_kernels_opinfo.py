"""Differential test against torch's own OpInfo sample inputs.

Every OpInfo's samples (float32, int64, bool; contiguous and non-contiguous) run under a
TorchDispatchMode; each aten call that has a kernel (via its out-variant name) is re-run on
our kernel with preallocated outs and compared with what torch computed. This reaches
argument combinations no hand-written table lists (keepdim/dim mixes, 0-d and empty
tensors, odd strides, default arguments).

Not compared: outputs that are unspecified in ATen (indices of ties in sort/topk/kthvalue/
median/mode, uninitialized `empty*`, random ops) and as_strided on a view of a larger
storage (ATen offsets into the whole storage; a .pte tensor is always its own storage).
"""

import collections
import contextlib
import itertools
import sys
import types

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import etc.runtime.kernels as K
from etc.runtime.kernels.coverage import out_variant_of
from etc.schema import from_torch_dtype

if "expecttest" not in sys.modules:  # torch.testing._internal imports it; only TestCase is needed
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest
        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)
try:
    from torch.testing._internal.common_methods_invocations import op_db
except Exception as error:  # pragma: no cover - a torch without its testing internals
    pytest.skip(f"torch's OpInfo database is unavailable: {error}", allow_module_level=True)

DTYPES = {torch.float32, torch.float64, torch.int64, torch.int32, torch.int8, torch.uint8, torch.int16, torch.bool}
SKIP = {"aten::native_dropout.out", "aten::bernoulli.out", "aten::rand.out", "aten::randn.out", "aten::randperm.out",
        "aten::empty.out", "aten::empty_strided.out", "aten::empty_like.out", "aten::new_empty.out",
        "aten::normal.out", "aten::uniform.out", "aten::randint.out", "aten::multinomial.out",
        "aten::exponential.out", "aten::as_strided_copy.out", "aten::_local_scalar_dense.default"}
# outputs (by position) that are unspecified for ties
TIE_INDEX = {"aten::sort.values": 1, "aten::sort.values_stable": 1, "aten::topk.values": 1,
             "aten::kthvalue.values": 1, "aten::median.dim_values": 1, "aten::nanmedian.dim_values": 1,
             "aten::mode.values": 1}
SAMPLES_PER_OP = 4


def _np(v):
    if isinstance(v, torch.Tensor):
        return v.detach().numpy()
    if isinstance(v, (list, tuple)):
        return [_np(x) for x in v]
    if isinstance(v, torch.dtype):
        return int(from_torch_dtype(v))
    if isinstance(v, (torch.memory_format, torch.layout, torch.device)):
        return None
    return v


def flat_tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from flat_tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from flat_tensors(y)


def _alloc(r):
    if isinstance(r, torch.Tensor):
        return np.zeros(tuple(r.shape), r.numpy().dtype)
    return [_alloc(x) for x in r]


class OutKernelDiffer(TorchDispatchMode):
    """Beside every aten op torch runs, etc's out-variant kernel on the same arguments (the out
    schema's, its defaults filled in); `results[name]` gets a line per difference and a None per
    comparison made. A subclass says which calls it takes (`takes`), how it converts values
    (`to_numpy`, `alloc`), what torch's reference is (`reference`) and how one output is compared
    (`difference`)."""

    skip = SKIP

    def __init__(self, results):
        super().__init__()
        self.results = results

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        res = func(*args, **kwargs)
        with _disable_current_modes():
            self.compare(func, args, kwargs, res)
        return res

    def takes(self, ts: list) -> bool:
        return all(t.dtype in DTYPES and t.layout == torch.strided for t in ts)

    def to_numpy(self, v):
        return _np(v)

    def alloc(self, r):
        return _alloc(r)

    def reference(self, name: str, func, args, kwargs, res):
        return res

    def difference(self, g, e) -> str | None:
        g, e = np.asarray(g), e.detach().numpy()
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"is {g.shape} {g.dtype}, torch {e.shape} {e.dtype}"
        if e.dtype.kind == "f":
            tol = 1e-4 if e.dtype == np.float32 else 1e-8
            return None if np.allclose(g, e, rtol=tol, atol=tol, equal_nan=True) else "differs"
        return None if np.array_equal(g, e) else "differs"

    def compare(self, func, args, kwargs, res):
        if func.namespace != "aten":
            return
        try:
            name = out_variant_of(func._schema.name.split("::")[1], func._overloadname)
        except Exception:
            return
        if not name or name in self.skip or not K.has_kernel(name):
            return
        ts = list(flat_tensors((args, kwargs, res)))
        if not self.takes(ts):
            return
        res = self.reference(name, func, args, kwargs, res)
        packet, overload = name.split("::")[1].rsplit(".", 1)
        out_schema = getattr(getattr(torch.ops.aten, packet), overload)._schema
        given = {a.name: v for a, v in zip(func._schema.arguments, args)}
        given.update(kwargs)
        values = []
        for a in out_schema.arguments:
            if a.is_out:
                continue
            if a.name in given:
                values.append(self.to_numpy(given[a.name]))
            elif a.has_default_value():
                values.append(self.to_numpy(a.default_value))
            else:
                return
        n_out = sum(a.is_out for a in out_schema.arguments)
        expected = [res] if isinstance(res, torch.Tensor) else list(res)
        outs = self.alloc(res)
        out_args = [outs] if isinstance(res, torch.Tensor) or n_out == 1 else list(outs)
        where = f"{name} on {[tuple(t.shape) for t in ts]} {sorted({str(t.dtype) for t in ts})}"
        try:
            got = K.get_kernel(name)(*values, *out_args)
        except Exception as error:
            self.results[name].append(f"{where}: raised {type(error).__name__}: {error}")
            return
        got = [got] if isinstance(got, np.ndarray) else list(got)
        if len(got) != len(expected):
            self.results[name].append(f"{where}: {len(got)} outputs, torch has {len(expected)}")
            return
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = None if TIE_INDEX.get(name) == i else self.difference(g, e)
            if problem:
                self.results[name].append(f"{where}: output {i} {problem}")
        self.results[name].append(None)  # one comparison made


@contextlib.contextmanager
def outside_torchs_test_harness():
    """OpInfo sample generation outside torch's own unittest harness, without its bookkeeping.

    `sample_inputs` looks for the running unittest.TestCase with inspect.stack() (reading the
    source of every frame of pytest's deep stack: 0.1 s a call, over half of these tests' time,
    and it finds none here), and the samples' torch.manual_seed records a formatted stack for each
    lazy CUDA/XPU/MTIA seeding (no such device here). Both are skipped; the samples are the same."""
    from torch.testing._internal import common_utils

    devices = [getattr(torch, name) for name in ("cuda", "xpu", "mtia") if hasattr(torch, name)]
    saved = [(common_utils, "extract_test_fn", common_utils.extract_test_fn)]
    saved += [(device, "manual_seed_all", device.manual_seed_all) for device in devices]
    common_utils.extract_test_fn = lambda: None
    for device in devices:
        device.manual_seed_all = lambda seed: None
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def opinfo_samples(opinfo, dtype, count: int) -> list:
    """The first `count` samples of `opinfo` for `dtype` (generated lazily: some OpInfos have hundreds)."""
    with outside_torchs_test_harness():
        return list(itertools.islice(opinfo.sample_inputs("cpu", dtype, requires_grad=False), count))


def _run_opinfos(ops, dtype, noncontiguous):
    results = collections.defaultdict(list)
    for opinfo in ops:
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        try:
            samples = opinfo_samples(opinfo, dtype, SAMPLES_PER_OP)
        except Exception:
            continue
        for sample in samples:
            if noncontiguous:
                try:
                    sample = sample.noncontiguous()
                except Exception:
                    continue
            try:
                with outside_torchs_test_harness(), OutKernelDiffer(results):
                    opinfo.op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                pass  # torch refused the sample itself; nothing to compare
    return results


# split the database in a few chunks: one slow chunk doesn't hide the others' results
_CHUNKS = 4


@pytest.mark.parametrize("chunk", range(_CHUNKS))
@pytest.mark.parametrize("dtype,noncontiguous", [(torch.float32, False), (torch.int64, True), (torch.bool, False)],
                         ids=["float32", "int64-noncontiguous", "bool"])
def test_kernels_agree_with_torch_on_opinfo_samples(chunk, dtype, noncontiguous):
    ops = op_db[chunk::_CHUNKS]
    results = _run_opinfos(ops, dtype, noncontiguous)
    failures = [f for fs in results.values() for f in fs if f is not None]
    compared = sum(f is None for fs in results.values() for f in fs)
    assert not failures, f"{len(failures)} of {compared + len(failures)} calls differ:\n" + "\n".join(failures[:10])
    assert compared > 20
