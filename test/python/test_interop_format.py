"""Wire compatibility with the real ExecuTorch (executorch==1.5.1, test-only; skipped when absent).

Both directions:
- ExecuTorch writes (torch.export -> to_edge -> to_executorch, and an XNNPACK-delegated
  program when its partitioner imports): our reader parses the file, our serializer
  writes it back byte for byte, and the stock runtime runs our bytes with the same
  outputs as the original.
- We write: ExecuTorch's own Python deserializer reads our every-feature program
  with every field equal to ours, its C++ runtime loads it with internal-consistency
  verification, and our hand-built aten::add.out program runs on the stock runtime.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.exir")
et_runtime = pytest.importorskip("executorch.runtime")

from pte_samples import ADD_CONSTANT, add_constant_program, every_feature_program  # noqa: E402
from etc import schema as S  # noqa: E402


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x)) + 1


class ConvBnMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)).mean(dim=(2, 3))


class TwoOutputs(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(dim=1, keepdim=True) * y, torch.cat([x, x * 2], dim=0).to(torch.int32)


class Counter(torch.nn.Module):
    """Mutates a buffer: state carried across executions."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 2


MODELS = {
    "linear_relu": (LinearRelu, lambda: (torch.randn(2, 4),)),
    "conv_bn_mean": (ConvBnMean, lambda: (torch.randn(1, 2, 5, 5),)),
    "two_outputs": (TwoOutputs, lambda: (torch.randn(3, 4), torch.randn(3, 1))),
    "counter": (Counter, lambda: (torch.randn(3),)),
}


def export_with_executorch(name: str, delegate: bool = False) -> tuple[torch.nn.Module, bytes]:
    from executorch.exir import to_edge, to_edge_transform_and_lower

    torch.manual_seed(0)
    model_class, make_inputs = MODELS[name]
    model = model_class().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = torch.export.export(model, make_inputs())
        if delegate:
            partitioner = pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
            edge = to_edge_transform_and_lower(exported, partitioner=[partitioner.XnnpackPartitioner()])
        else:
            edge = to_edge(exported)
        return model, edge.to_executorch().buffer


CASES = [(name, False) for name in MODELS] + [("linear_relu", True)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}{'-xnnpack' if d else ''}" for n, d in CASES])
def executorch_program(request):
    name, delegate = request.param
    model, data = export_with_executorch(name, delegate)
    return name, model, data


def run_stock(data: bytes, inputs, times: int = 1):
    method = et_runtime.Runtime.get().load_program(data).load_method("forward")
    return [list(method.execute(list(inputs))) for _ in range(times)]


def test_reader_parses_and_serializer_reproduces_executorch_files(executorch_program):
    name, _, data = executorch_program
    pte = S.deserialize_pte(data)
    assert [plan.name for plan in pte.program.execution_plan] == ["forward"]
    ours = S.serialize_pte(pte)
    assert ours == data
    assert S.deserialize_pte(ours) == pte


def test_stock_runtime_runs_our_reserialization_identically(executorch_program):
    name, model, data = executorch_program
    ours = S.serialize_pte(S.deserialize_pte(data))
    torch.manual_seed(1)
    inputs = MODELS[name][1]()
    expected = run_stock(data, inputs, times=2)
    actual = run_stock(ours, inputs, times=2)
    for want_run, got_run in zip(expected, actual):
        assert len(want_run) == len(got_run)
        for want, got in zip(want_run, got_run):
            assert torch.equal(want, got)
    eager = model(*inputs)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for want, got in zip(eager, actual[0]):
        torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-4, atol=1e-5)


def test_delegated_program_keeps_its_blob_in_a_segment():
    _, data = export_with_executorch("linear_relu", delegate=True)
    pte = S.deserialize_pte(data)
    (delegate,) = pte.program.execution_plan[0].delegates
    assert delegate.id == "XnnpackBackend" and delegate.processed.location == S.DataLocation.SEGMENT
    assert len(pte.delegate_blob(delegate.processed)) > 0 and pte.named_data  # weights as named data


# ------------------------------------------------------------------ we write
def same_as_executorch(ours, theirs, path: str):
    """Field-by-field equality of our dataclass tree and ExecuTorch's (exir.schema), by field name."""
    if dataclasses.is_dataclass(ours):
        assert type(ours).__name__ == type(theirs).__name__, path
        for field in dataclasses.fields(ours):
            assert hasattr(theirs, field.name), f"{path}.{field.name} unknown to ExecuTorch"
            same_as_executorch(getattr(ours, field.name), getattr(theirs, field.name), f"{path}.{field.name}")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            same_as_executorch(a, b, f"{path}[{i}]")
    elif isinstance(ours, enum.Enum):
        assert int(ours) == int(theirs), path
    elif isinstance(ours, bytes):
        assert bytes(theirs) == ours, path
    else:
        assert ours == theirs, path


def single_mutable_segment_program() -> S.PteFile:
    """every_feature_program with its mutable state in one segment (ExecuTorch's Python reader handles one)."""
    pte = every_feature_program()
    pte.mutable_data = [pte.mutable_data[0] + pte.mutable_data[1]]
    counter = pte.program.execution_plan[0].values[12].val
    counter.extra_tensor_info.mutable_data_segments_idx = 0
    counter.data_buffer_idx = 2
    return pte


def test_executorch_python_reader_reads_every_field_we_write():
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = single_mutable_segment_program()
    theirs = deserialize_pte_binary(S.serialize_pte(pte, constant_tensor_alignment=32))
    program = theirs.program
    # ExecuTorch's reader folds segments back into inline form: compare payloads through it.
    for index, data in enumerate(pte.constant_data, start=1):
        assert bytes(program.constant_buffer[index].storage)[:len(data)] == data
    for key, data in pte.named_data.items():
        assert theirs.named_data.buffers[theirs.named_data.pte_data[key].buffer_index] == data
    for ours_plan, their_plan in zip(pte.program.execution_plan, program.execution_plan):
        for ours_delegate, their_delegate in zip(ours_plan.delegates, their_plan.delegates):
            inline = program.backend_delegate_data[their_delegate.processed.index].data
            assert bytes(inline) == pte.delegate_blob(ours_delegate.processed)
        ours_plan = dataclasses.replace(ours_plan, delegates=[dataclasses.replace(d, processed=None)
                                                               for d in ours_plan.delegates])
        their_plan.delegates = [dataclasses.replace(d, processed=None) for d in their_plan.delegates]
        same_as_executorch(ours_plan, their_plan, f"plan {ours_plan.name}")


def test_stock_runtime_verifies_our_every_feature_program():
    data = S.serialize_pte(every_feature_program(), segment_alignment=4096)
    program = et_runtime.Runtime.get().load_program(data, verification=et_runtime.Verification.InternalConsistency)
    assert set(program.method_names) == {"forward", "reset"}


@pytest.mark.parametrize("alignments", [{}, {"segment_alignment": 4096, "constant_tensor_alignment": 64}])
def test_hand_built_add_program_runs_on_stock_runtime(alignments):
    data = S.serialize_pte(add_constant_program(alpha=2), **alignments)
    x = torch.randn(2, 3)
    (out,) = run_stock(data, (x,))[0]
    torch.testing.assert_close(out, x + 2 * torch.from_numpy(ADD_CONSTANT), rtol=0, atol=0)
    assert S.deserialize_pte(data) == add_constant_program(alpha=2)


def test_stock_runtime_rejects_what_our_reader_rejects():
    """A sample corruption: both refuse an out-of-range value index (ours says where)."""
    pte = add_constant_program()
    pte.program.execution_plan[0].chains[0].instructions[0].instr_args.args[0] = 40
    data = S.serialize_pte(pte)
    from etc.errors import ProgramError

    with pytest.raises(ProgramError, match=r"args\[0\]: value index 40 is out of range"):
        S.deserialize_pte(data)
    with pytest.raises(RuntimeError):
        run_stock(data, (torch.zeros(2, 3),))
    assert np.array_equal(ADD_CONSTANT, np.frombuffer(S.deserialize_pte(data, validate=False).constant(1),
                                                      np.float32).reshape(2, 3))
