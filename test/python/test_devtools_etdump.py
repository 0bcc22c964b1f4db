"""ExecuTorch's ETDump read as a run record: an etc program profiled on ExecuTorch's runtime, shown by
etc's Inspector with etc's compile record (same instructions, so the same source lines)."""

import pytest
import torch

import etc
from etc.devtools import Inspector
from etc.devtools.etdump import read_executorch_etdump
from etc.errors import EtcError, ProgramError


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.softmax(torch.relu(self.fc(x)), dim=-1)


def test_an_executorch_etdump_reads_as_a_run_record(tmp_path):
    executorch_runtime = pytest.importorskip("executorch.runtime")
    program = etc.to_edge(torch.export.export(Head().eval(), (torch.ones(2, 8),))).to_executorch(
        generate_etrecord=True)
    program.save(tmp_path / "m.pte")
    loaded = executorch_runtime.Runtime.get().load_program(tmp_path / "m.pte", enable_etdump=True)
    method = loaded.load_method("forward")
    for _ in range(3):
        method.execute((torch.randn(2, 8),))
    loaded.write_etdump_result_to_file(str(tmp_path / "run.etdp"), str(tmp_path / "debug.bin"))
    record = read_executorch_etdump(tmp_path / "run.etdp", program=tmp_path / "m.pte")
    assert record.runs("forward") == 3
    etrecord = program.get_etrecord()
    instructions = etrecord.instructions("forward")
    inspector = Inspector(record, etrecord=etrecord)
    assert [r.name for r in inspector.rows] == [r.name for r in instructions]  # etc's labels, etc's order
    assert all(r.calls == 3 and r.source and r.source.startswith(__file__) for r in inspector.rows)
    assert 0 < inspector.coverage("forward") <= 1
    unlabelled = read_executorch_etdump((tmp_path / "run.etdp").read_bytes())
    assert {e.name for e in unlabelled.events if not e.is_execute} == {"OPERATOR_CALL"}
    with pytest.raises(ProgramError, match="not an ExecuTorch ETDump"):
        read_executorch_etdump(program.buffer)
    with pytest.raises(EtcError, match="no method 'backward'"):
        read_executorch_etdump(tmp_path / "run.etdp", program=tmp_path / "m.pte", method="backward")
