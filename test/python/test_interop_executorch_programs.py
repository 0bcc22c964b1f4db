"""Interop, direction 2: programs written by the real ExecuTorch run on etc's runtime.

`executorch.exir.to_edge(ep).to_executorch().buffer` (pip executorch, a test-only
dependency) is loaded by `etc.runtime` and must match eager PyTorch within
max abs error <= 1e-4 * max(1, output scale). Besides the zoo, small modules
cover what ExecuTorch's emitter produces for control flow (torch.cond ->
JumpFalseCall/MoveCall, map -> a prim-op loop with et_copy_index), run-time
sizes (sym_size + IntList) and mutable buffers (copy_ write-back).

A zoo model whose program needs a kernel the portable library does not have
yet is skipped with the operator's name as the reason. The models whose export
takes several seconds are marked `slow` (`-m "not slow"` leaves them out: about
a minute of CPU for everything, well under that without them).
"""

import warnings

import pytest
import torch

from etc.errors import KernelNotFoundError
from etc.runtime import Runtime
from etc.models.zoo import ZOO

exir = pytest.importorskip("executorch.exir")

FAST = ["mlp", "small_cnn", "resnet8", "two_methods", "dynamic_batch"]
SLOW = ["mobilenet_v2", "mobilenet_v1_025", "kws_dscnn", "transformer_encoder", "decoder_lm", "lstm", "gru"]


def _executorch_buffer(programs) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return exir.to_edge(programs).to_executorch().buffer


def _error(got, want) -> float:
    got, want = torch.as_tensor(got).detach().double(), torch.as_tensor(want).detach().double()
    assert got.shape == want.shape
    if want.numel() == 0:
        return 0.0
    return float((got - want).abs().max()) / max(1.0, float(want.abs().max()))


def _eager(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _load_or_skip(program, method):
    try:
        return program.load_method(method)
    except KernelNotFoundError as error:
        pytest.skip(f"the portable kernels lack {error.operator}")


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_executorch_zoo_program_matches_eager(name):
    zoo_model = ZOO[name]()
    program = Runtime.get().load_program(_executorch_buffer(zoo_model.export()))
    calls = {"forward": (zoo_model.module, zoo_model.example_inputs), **zoo_model.methods}
    assert sorted(program.method_names) == sorted(calls)
    for method_name, (module, inputs) in calls.items():
        method = _load_or_skip(program, method_name)
        expected = _eager(module, inputs)
        outputs = method.execute(list(inputs))
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            assert isinstance(got, torch.Tensor)  # torch in, torch out
            assert _error(got, want) <= 1e-4, method_name
        # The arenas are reused: running again gives the same answer.
        for got, want in zip(method.execute(list(inputs)), expected):
            assert _error(got, want) <= 1e-4, method_name


def test_executorch_dynamic_batch_at_every_size_within_bounds():
    zoo_model = ZOO["dynamic_batch"]()
    program = Runtime.get().load_program(_executorch_buffer(zoo_model.export()))
    method = _load_or_skip(program, "forward")
    meta = program.metadata("forward")
    assert meta.input_tensor_meta(0).dynamic and meta.input_tensor_meta(0).sizes() == (32, 16)
    for batch in (32, 1, 7, 32, 5):
        x = torch.randn(batch, 16)
        (got,) = method.execute([x.numpy()])  # numpy in, numpy out
        assert got.shape == (batch, 4)
        assert _error(got, _eager(zoo_model.module, (x,))[0]) <= 1e-4


class _Reshaper(torch.nn.Module):
    """Sizes computed at run time: x.shape[0] * 2 reaches a view through sym_size and an IntList."""

    def forward(self, x):
        return (x.reshape(x.shape[0] * 2, -1) + 1).sum(0, keepdim=True) * x.shape[0]


def test_executorch_symbolic_sizes():
    batch = torch.export.Dim("batch", min=1, max=8)
    ep = torch.export.export(_Reshaper(), (torch.ones(4, 6),), dynamic_shapes=({0: batch},))
    method = _load_or_skip(Runtime.get().load_program(_executorch_buffer(ep)), "forward")
    for rows in (4, 1, 8, 3):
        x = torch.randn(rows, 6)
        (got,) = method.execute([x])
        assert _error(got, _Reshaper()(x)) <= 1e-4


class _Counter(torch.nn.Module):
    """A mutable buffer: ExecuTorch plans it and writes it back with copy_ at the end of each call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


def test_executorch_mutable_buffer_state_persists_across_executes():
    ep = torch.export.export(_Counter(), (torch.ones(3),))
    program = Runtime.get().load_program(_executorch_buffer(ep))
    method = _load_or_skip(program, "forward")
    x = torch.tensor([1.0, 2.0, 3.0])
    results = [method.execute([x])[0].tolist() for _ in range(3)]
    assert results == [[2, 4, 6], [4, 8, 12], [6, 12, 18]]


class _Branch(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))


def test_executorch_cond_runs_both_branches():
    ep = torch.export.export(_Branch(), (torch.ones(3),))
    method = _load_or_skip(Runtime.get().load_program(_executorch_buffer(ep)), "forward")
    for x in (torch.tensor([1.0, 2.0, -0.5]), torch.tensor([-1.0, 0.5, -2.0])):
        (got,) = method.execute([x])
        assert _error(got, _Branch()(x)) <= 1e-6


class _Mapper(torch.nn.Module):
    def forward(self, xs, y):
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x, y: x * 3 + y, xs, y)


def test_executorch_map_loop():
    xs, y = torch.randn(4, 3), torch.randn(3)
    ep = torch.export.export(_Mapper(), (xs, y))
    method = _load_or_skip(Runtime.get().load_program(_executorch_buffer(ep)), "forward")
    for _ in range(2):  # the loop resets its counter for the next call
        (got,) = method.execute([xs, y])
        assert _error(got, xs * 3 + y) <= 1e-6


class _LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(5, 3)

    def forward(self, x):
        return torch.relu(self.linear(x))


class _StandInXnnpack:
    """Registered as "XnnpackBackend": it cannot read XNNPACK's blob, so it computes the model with
    torch, which is enough to check the DelegateCall plumbing on ExecuTorch's own layout."""

    backend_id = "XnnpackBackend"

    def __init__(self, module):
        self.module, self.blobs, self.calls = module, [], []

    def is_available(self):
        return True

    def init(self, blob, compile_specs):
        self.blobs.append(bytes(blob))
        return len(self.blobs) - 1

    def execute(self, handle, args):
        self.calls.append([getattr(a, "shape", a) for a in args])
        x, out = args
        with torch.no_grad():
            out[...] = self.module(torch.from_numpy(x.copy())).numpy()
        return [out]


@pytest.mark.slow  # importing XNNPACK's partitioner alone takes seconds
def test_executorch_xnnpack_delegate_needs_its_backend():
    from etc.errors import BackendError
    from etc.runtime import register_backend, unregister_backend

    partitioner = pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    module, x = _LinearRelu().eval(), torch.randn(2, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = exir.to_edge_transform_and_lower(torch.export.export(module, (x,)),
                                                partitioner=[partitioner.XnnpackPartitioner()])
        buffer = edge.to_executorch().buffer
    program = Runtime.get().load_program(buffer)
    assert program.metadata("forward").backends == ["XnnpackBackend"]
    unregister_backend("XnnpackBackend")
    with pytest.raises(BackendError, match=r"'XnnpackBackend', which is not registered \(registered backends: "):
        program.load_method("forward")
    stand_in = _StandInXnnpack(module)
    register_backend(stand_in)
    try:
        method = Runtime.get().load_program(buffer).load_method("forward")
        assert len(stand_in.blobs) == 1 and len(stand_in.blobs[0]) > 0
        (got,) = method.execute([x])
        assert stand_in.calls == [[(2, 5), (2, 3)]]  # inputs then outputs, numpy views
        assert _error(got, module(x)) <= 1e-6
    finally:
        unregister_backend("XnnpackBackend")


class _Lookup(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(4, 3)

    def forward(self, ids):
        return self.table(ids) * 2  # the line a bad index is reported at


def test_executorch_stacktrace_points_a_kernel_failure_at_the_users_line():
    from executorch.exir import ExecutorchBackendConfig

    from etc.errors import ExecutionError

    module = _Lookup().eval()
    ep = torch.export.export(module, (torch.tensor([0, 1]),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffer = exir.to_edge(ep).to_executorch(ExecutorchBackendConfig(emit_stacktrace=True)).buffer
    method = _load_or_skip(Runtime.get().load_program(buffer), "forward")
    assert _error(method.execute([torch.tensor([3, 1])])[0], module(torch.tensor([3, 1]))) <= 1e-6
    with pytest.raises(ExecutionError) as info:
        method.execute([torch.tensor([1, 9])])
    error = info.value
    assert error.operator == "aten::embedding.out" and error.instruction is not None
    assert error.location is not None and error.location.startswith(__file__ + ":")
    assert "self.table(ids) * 2" in str(error)


def test_executorch_unplanned_inputs_and_outputs():
    """alloc_graph_input/output=False: ExecuTorch expects the caller's buffers; we give them storage of our own."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    zoo_model = ZOO["dynamic_batch"]()
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False,
                                                                            alloc_graph_output=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffer = exir.to_edge(zoo_model.export()).to_executorch(config).buffer
    method = _load_or_skip(Runtime.get().load_program(buffer), "forward")
    for batch in (5, 32, 1):
        x = torch.randn(batch, 16)
        (got,) = method.execute([x])
        assert _error(got, _eager(zoo_model.module, (x,))[0]) <= 1e-4


class _StartedCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.tensor([1.0, 2.0, 3.0]))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


def test_executorch_initialized_mutable_buffer_starts_from_its_serialized_state():
    """InitializedMutableBufferPass stores the buffer's initial value in a mutable-data segment."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    ep = torch.export.export(_StartedCounter(), (torch.ones(3),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["total"])])
        buffer = exir.to_edge(ep).to_executorch(config).buffer
    method = _load_or_skip(Runtime.get().load_program(buffer), "forward")
    ones = torch.ones(3)
    assert [method.execute([ones])[0].tolist() for _ in range(3)] == [[4, 6, 8], [6, 8, 10], [8, 10, 12]]
    # A freshly loaded program starts over from the serialized state.
    fresh = Runtime.get().load_program(buffer).load_method("forward")
    assert fresh.execute([ones])[0].tolist() == [4, 6, 8]


class _RunningSum(torch.nn.Module):
    def forward(self, xs):
        from torch._higher_order_ops.scan import scan

        def combine(carry, x):
            total = carry + x
            return total, total * 2

        return scan(combine, torch.zeros(3), xs)


def test_executorch_scan_loop_with_a_carry():
    """scan: the carry is copied back (aten::copy_) each iteration, the ys stacked with et_copy_index."""
    xs = torch.randn(4, 3)
    ep = torch.export.export(_RunningSum(), (xs,))
    method = _load_or_skip(Runtime.get().load_program(_executorch_buffer(ep)), "forward")
    expected = _RunningSum()(xs)
    for _ in range(2):
        outputs = method.execute([xs])
        assert len(outputs) == 2
        for got, want in zip(outputs, expected):
            assert _error(got, want) <= 1e-6
