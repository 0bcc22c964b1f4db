"""`etc inspect --plot`: the memory plan (tensor lifetimes against offsets, per mem_id) and the time per
operator as PNGs; the lifetimes drawn are the program's own."""

import pytest
import torch

import etc
from etc.devtools.plots import memory_plan_rows
from etc.errors import EtcError
from etc.tools.etc_main import main as etc_main


class Chain(torch.nn.Module):
    def forward(self, x):
        a = torch.relu(x)
        b = a * 2
        return torch.sigmoid(b) + a


@pytest.fixture(scope="module")
def program():
    return etc.to_edge(torch.export.export(Chain(), (torch.ones(64),))).to_executorch()


def test_memory_plan_rows_are_the_planned_tensors_and_their_lifetimes(program):
    rows = memory_plan_rows(program.pte)
    plan = program.pte.program.execution_plan[0]
    by_value = {r.value: r for r in rows}
    (x,), (out,) = plan.inputs, plan.outputs
    assert by_value[x].first == -1 and by_value[out].last == len(plan.chains[0].instructions)
    assert all(r.nbytes == 64 * 4 and r.mem_id == 1 for r in rows)
    # `a` is read by the last instruction too: it lives from the relu to the end.
    relu_out = plan.chains[0].instructions[0].instr_args.args[-1]
    assert (by_value[relu_out].first, by_value[relu_out].last) == (0, 3)
    # Tensors alive at the same time never share bytes (the planner's promise, seen through the rows).
    for r in rows:
        for s in rows:
            if r.value < s.value and r.first <= s.last and s.first <= r.last:
                assert r.offset + r.nbytes <= s.offset or s.offset + s.nbytes <= r.offset, (r, s)
    with pytest.raises(EtcError, match="no method 'backward'"):
        memory_plan_rows(program.pte, "backward")


def test_etc_inspect_plot_writes_the_two_pngs(program, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    program.save(tmp_path / "chain.pte")
    assert etc_main(["inspect", str(tmp_path / "chain.pte"), "--plot", str(tmp_path / "plots"), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("chain.forward.memory.png", "chain.forward.ops.png"):
        path = tmp_path / "plots" / name
        assert f"wrote {path}" in out and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
