"""Interop with the real ExecuTorch: a program emitted by etc loads and runs on
the stock ExecuTorch runtime (`executorch.runtime`) and matches eager PyTorch,
for every zoo model, and keeps a written buffer's state there.

The other direction (ExecuTorch's portable programs on etc's runtime) is
test_interop_executorch_programs.py. executorch is a test-only dependency: these tests
skip without it.
"""

import pytest
import torch

from models.zoo import ZOO

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
