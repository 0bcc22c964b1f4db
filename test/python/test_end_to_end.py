"""Every zoo model: export -> to_edge -> to_executorch -> .pte -> runtime, matching eager PyTorch.

Tolerance (the issue's bar): max abs error <= 1e-4 relative to the output's scale.
"""

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.models.zoo import ZOO


def _max_rel_error(actual, expected) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max()) if expected.size else 1.0)
    return float(np.abs(actual - expected).max() / scale) if expected.size else 0.0


def _compile(name):
    zoo_model = ZOO[name]()
    programs = zoo_model.export()
    edge = etc.to_edge(programs)
    return zoo_model, edge, edge.to_executorch()


def _eager(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return out if isinstance(out, (tuple, list)) else (out,)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_matches_eager(name):
    zoo_model, edge, program = _compile(name)
    loaded = Runtime.get().load_program(program.buffer)
    methods = {"forward": (zoo_model.module, zoo_model.example_inputs)}
    methods.update(zoo_model.methods)
    assert sorted(loaded.method_names) == sorted(methods)
    for method_name, (module, inputs) in methods.items():
        expected = _eager(module, inputs)
        outputs = loaded.load_method(method_name).execute([t.numpy() for t in inputs])
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            assert got.shape == tuple(want.shape)
            assert _max_rel_error(got, want.numpy()) <= 1e-4, method_name


def test_dynamic_batch_runs_at_other_sizes():
    zoo_model, _, program = _compile("dynamic_batch")
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for batch in (1, 7, 32):
        x = torch.randn(batch, 16)
        (got,) = method.execute([x.numpy()])
        assert _max_rel_error(got, _eager(zoo_model.module, (x,))[0].numpy()) <= 1e-4


class _ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("partitioner", [None, "cpu"])
def test_conv_with_batch_norm_over_a_dynamic_batch(partitioner):
    """Found by the compiler fuzzer: etc-fuse-batch-norm's new convolution did not keep the
    `etc.upper_bounds` of the one it replaced, so a conv + batch norm over a dynamic batch failed
    to plan ("dimension 0 ... has no upper bound")."""
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model = _ConvBn().eval()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 2.0)
    batch = torch.export.Dim("batch", min=1, max=6)
    edge = etc.to_edge(torch.export.export(model, (torch.randn(2, 3, 5, 5),), dynamic_shapes=({0: batch},)))
    assert "edge.p_native_batch_norm" not in str(edge)
    if partitioner:
        edge = edge.to_backend(CpuPartitioner())
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for n in (1, 6, 3):
        x = torch.randn(n, 3, 5, 5)
        with torch.no_grad():
            torch.testing.assert_close(method.execute([x])[0], model(x), rtol=1e-5, atol=1e-5)


def test_memory_report_planned_is_at_least_lower_bound():
    _, _, program = _compile("resnet8")
    report = program.memory_report()
    text = str(report)
    assert "forward" in text


class _RunningSum(torch.nn.Module):
    """A buffer the model writes (state kept across calls, as in a KV cache)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))
        self.scale = torch.nn.Parameter(torch.full((3,), 2.0))

    def forward(self, x):
        self.total.add_(x)
        return self.total * self.scale


def test_buffer_mutation_persists_across_calls():
    program = etc.to_edge(torch.export.export(_RunningSum(), (torch.ones(3),))).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    eager = _RunningSum()
    for step in range(1, 4):
        x = torch.full((3,), float(step))
        (got,) = method.execute([x.numpy()])
        np.testing.assert_allclose(got, eager(x).detach().numpy())
    # A fresh load starts again from the buffer's initial value.
    (again,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([np.ones(3, np.float32)])
    np.testing.assert_allclose(again, [2.0, 2.0, 2.0])


def test_kernel_failure_points_at_the_users_line(swap_kernel):
    """The emitter records each instruction's source position; the runtime names it in errors."""
    from etc.errors import ExecutionError
    from etc.runtime.kernels import registry

    class Model(torch.nn.Module):
        def forward(self, x):
            y = x * 3.0
            return torch.sigmoid(y)  # the failing line

    program = etc.to_edge(torch.export.export(Model(), (torch.ones(4),))).to_executorch()

    def broken(*args):
        raise RuntimeError("boom")

    swap_kernel("aten::sigmoid.out", broken)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with pytest.raises(ExecutionError, match="boom") as info:
        method.execute([np.ones(4, np.float32)])
    assert "test_end_to_end.py" in str(info.value) and "the failing line" not in str(info.value.method)
