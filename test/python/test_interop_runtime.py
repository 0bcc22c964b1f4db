"""Interop with the real ExecuTorch: a program emitted by etc loads and runs on
the stock ExecuTorch runtime (`executorch.runtime`) and matches eager PyTorch,
for every zoo model, and keeps a written buffer's state there.

The same with the cpu target: every zoo model compiled with `CpuPartitioner` runs on ExecuTorch
with etc's cpu backend (`etc.runtime.executorch_backend.load()`), through `executorch.runtime` and
through `etc_runner` (ExecuTorch's C++ extension::Module), matching eager and etc's own runtime;
compiled for AArch64, it runs on the AArch64 ExecuTorch under qemu-aarch64.

The other direction (ExecuTorch's portable programs on etc's runtime) is
test_interop_executorch_programs.py. executorch is a test-only dependency: these tests
skip without it.
"""

import numpy as np
import pytest
import torch

import executorch_runner
from etc.models.zoo import ZOO

executorch_runtime = pytest.importorskip("executorch.runtime")
exir = pytest.importorskip("executorch.exir")

MODELS = ["mlp", "small_cnn", "mobilenet_v2", "resnet8", "kws_dscnn", "transformer_encoder", "decoder_lm",
          "lstm", "gru", "two_methods", "dynamic_batch"]


def _max_error(outputs, references) -> float:
    worst = 0.0
    for out, ref in zip(outputs, references):
        out = torch.as_tensor(out)
        worst = max(worst, float((out - ref).abs().max()) / max(1.0, float(ref.abs().max())))
    return worst


def _method_calls(zoo_model):
    """(method name, inputs, eager outputs) for every method of a zoo model."""
    calls = [("forward", zoo_model.module, zoo_model.example_inputs)]
    calls += [(name, module, inputs) for name, (module, inputs) in zoo_model.methods.items()]
    for name, module, inputs in calls:
        with torch.no_grad():
            ref = module(*inputs)
        yield name, list(inputs), list(ref) if isinstance(ref, (tuple, list)) else [ref]


@pytest.mark.parametrize("name", MODELS)
def test_etc_program_runs_on_executorch(name):
    import etc

    zoo_model = ZOO[name]()
    program = etc.to_edge(zoo_model.export()).to_executorch()
    loaded = executorch_runtime.Runtime.get().load_program(program.buffer)
    for method, inputs, reference in _method_calls(zoo_model):
        outputs = loaded.load_method(method).execute(inputs)
        assert len(outputs) == len(reference)
        assert _max_error(outputs, reference) <= 1e-4, method


def test_etc_program_with_state_runs_on_executorch():
    """Buffers the model writes: initial state in the mutable data segment, updated in place by copy.out."""
    import etc

    class RunningSum(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.total.add_(x)
            return self.total * 2

    program = etc.to_edge(torch.export.export(RunningSum(), (torch.ones(3),))).to_executorch()
    method = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward")
    outputs = [method.execute([torch.full((3,), float(k))])[0] for k in (1, 2, 3)]
    assert [o.tolist() for o in outputs] == [[2.0] * 3, [6.0] * 3, [12.0] * 3]


@pytest.fixture(scope="module")
def etc_backend():
    """etc's cpu backend, loaded into this process (built once: a cache keyed by its sources)."""
    from etc.runtime import executorch_backend

    return executorch_backend.load()


def _cpu_program(zoo_model, **target):
    import etc
    from etc.targets.cpu import CpuPartitioner

    edge = etc.to_edge(zoo_model.export()).to_backend(CpuPartitioner(**target))
    assert all(r.partitions >= 1 for r in edge.delegation_reports), edge.delegation_info()
    return edge.to_executorch()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_cpu_delegated_program_runs_on_executorch(name, etc_backend, tmp_path):
    from etc.runtime import Runtime

    zoo_model = ZOO[name]()
    program = _cpu_program(zoo_model)
    loaded = executorch_runtime.Runtime.get().load_program(program.buffer)
    ours = Runtime.get().load_program(program.buffer)
    calls = list(_method_calls(zoo_model))
    for method, inputs, reference in calls:
        outputs = loaded.load_method(method).execute(inputs)
        assert len(outputs) == len(reference)
        assert _max_error(outputs, reference) <= 1e-4, method
        expected = ours.load_method(method).execute([x.numpy() for x in inputs])
        for got, want in zip(outputs, expected):  # the same code on the same inputs
            np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-6, atol=1e-6)
    executorch_runner.run("host", program.buffer, [(m, [x.numpy() for x in i], [r.numpy() for r in ref])
                                                   for m, i, ref in calls], tmp_path)


@executorch_runner.needs_aarch64
@pytest.mark.parametrize("name", sorted(ZOO))
def test_cpu_delegated_program_runs_on_executorch_on_aarch64(name, tmp_path):
    zoo_model = ZOO[name]()
    program = _cpu_program(zoo_model, target="aarch64-linux-gnu")
    executorch_runner.run("aarch64-linux-gnu", program.buffer,
                          [(m, [x.numpy() for x in i], [r.numpy() for r in ref])
                           for m, i, ref in _method_calls(zoo_model)], tmp_path)
