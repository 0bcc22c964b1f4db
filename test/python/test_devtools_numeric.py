"""Numeric debugging: a deliberately wrong kernel (registered for this test only) is the first divergence
the debugger names, with the user's line; a correct program agrees with eager everywhere."""

import inspect

import pytest
import torch

import etc
from etc.devtools.numeric import numeric_debug
from etc.errors import EtcError
from etc.runtime.kernels import registry


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        gate = torch.sigmoid(y.mean((2, 3)))
        return torch.softmax(self.fc(gate), dim=-1)


def _line(text: str) -> int:
    source, start = inspect.getsourcelines(Block.forward)
    return start + next(i for i, line in enumerate(source) if text in line)


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():  # batch norm statistics that are not the identity
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    edge = etc.to_edge(torch.export.export(model, (x,)))
    return edge, edge.to_executorch(generate_etrecord=True), x


def test_a_correct_program_agrees_with_eager_at_every_instruction(compiled):
    edge, program, x = compiled
    report = numeric_debug(edge, program, [x])
    assert report.first_divergence() is None, str(report)
    compared = {row.name for row in report.rows}
    assert {"aten::convolution.out", "aten::sigmoid.out", "aten::_softmax.out"} <= compared
    # The convolution's output is compared with the batch norm's eager value (the two were folded).
    conv = next(row for row in report.rows if row.name == "aten::convolution.out")
    assert conv.node.startswith("_native_batch_norm") and conv.source.endswith(f":{_line('self.bn')}")
    assert "all outputs agree with eager" in str(report)


def test_a_wrong_kernel_is_named_first_with_its_source_line(compiled, swap_kernel):
    edge, program, x = compiled
    correct = registry.get_kernel("aten::sigmoid.out")

    def off_by_a_little(self, out):  # test-only: a sigmoid that is slightly wrong
        result = correct(self, out)
        result += 1e-2
        return result

    swap_kernel("aten::sigmoid.out", off_by_a_little)
    report = numeric_debug(edge, program, [x])
    first = report.first_divergence()
    assert first is not None and first.name == "aten::sigmoid.out" and first.node == "sigmoid"
    assert first.source == f"{__file__}:{_line('torch.sigmoid')}"
    later = [row for row in report.rows if row.instruction > first.instruction]
    assert later and all(row.error > report.tolerance for row in later)  # the error propagates to the output
    text = str(report)
    assert "<-- diverges" in text and f"first divergence: instruction {first.instruction} (aten::sigmoid.out" in text


def test_a_delegate_is_compared_at_its_outputs_and_names_its_ops(compiled):
    from etc.targets.cpu import CpuPartitioner

    _, _, x = compiled
    torch.manual_seed(0)
    edge = etc.to_edge(torch.export.export(Block().eval(), (x,))).to_backend(CpuPartitioner())
    report = numeric_debug(edge, edge.to_executorch(generate_etrecord=True), [x], tolerance=1e-4)
    delegates = [row for row in report.rows if row.name == "delegate 'cpu'"]
    assert delegates and report.first_divergence() is None, str(report)
    assert {source for _, source in delegates[0].ops} >= {f"{__file__}:{_line('torch.sigmoid')}"}


def test_numeric_debug_needs_the_compile_record(compiled):
    edge, _, x = compiled
    with pytest.raises(EtcError, match="generate_etrecord=True"):
        numeric_debug(edge, edge.to_executorch(), [x])


def test_a_recorded_run_is_compared_offline(compiled, tmp_path, swap_kernel):
    """A device's run record and debug buffer, saved and compared later against eager on the host."""
    from etc.devtools import RunRecord
    from etc.runtime import Runtime

    edge, program, x = compiled
    correct = registry.get_kernel("aten::sigmoid.out")
    swap_kernel("aten::sigmoid.out", lambda self, out: correct(self, out) * 0.5)
    device = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=1 << 24)
    device.load_method("forward").execute([x])
    device.write_etdump_result_to_file(tmp_path / "run.etdp", tmp_path / "debug.npz")
    program.get_etrecord().save(tmp_path / "m.etrecord")
    swap_kernel.undo()
    record = RunRecord.load(tmp_path / "run.etdp", tmp_path / "debug.npz")
    report = numeric_debug(edge, None, [x], run_record=record, etrecord=tmp_path / "m.etrecord")
    assert report.first_divergence().name == "aten::sigmoid.out"
    with pytest.raises(EtcError, match="no intermediate outputs"):
        numeric_debug(edge, program, [x], run_record=RunRecord.load(tmp_path / "run.etdp"))
