"""Compile record, run record and Inspector: instructions mapped to the model's source lines, timed runs,
delegates broken down into the ops they contain, a Chrome trace, and `etc profile`."""

import inspect
import json
import sys

import numpy as np
import pytest
import torch

import etc
from etc.devtools import CompileRecord, Inspector, RunRecord
from etc.errors import EtcError
from etc.runtime import Runtime
from etc.tools.etc_main import main as etc_main
from etc.models.zoo import ZOO


@pytest.fixture(scope="module")
def resnet():
    zoo_model = ZOO["resnet8"]()
    program = etc.to_edge(zoo_model.export()).to_executorch(generate_etrecord=True)
    return zoo_model, program


@pytest.fixture(scope="module")
def transformer():
    zoo_model = ZOO["transformer_encoder"]()
    program = etc.to_edge(zoo_model.export()).to_executorch(generate_etrecord=True)
    return zoo_model, program


def _recorded(program, inputs, runs=2, debug_buffer_size=0):
    loaded = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=debug_buffer_size)
    method = loaded.load_method("forward")
    for _ in range(runs):
        method.execute(inputs)
    return loaded


def test_the_compile_record_maps_every_instruction_to_its_op_and_source_line(resnet, tmp_path):
    _, program = resnet
    record = program.get_etrecord()
    instructions = record.instructions("forward")
    assert len(instructions) == len(program.pte.program.execution_plan[0].chains[0].instructions)
    kernels = [r for r in instructions if r.kind == "kernel"]
    assert kernels and all(r.ops[0].op.startswith("edge.") and r.ops[0].aten.startswith("aten::") for r in kernels)
    assert all(r.ops[0].file.endswith("zoo.py") and r.ops[0].line > 0 for r in kernels)
    convolutions = [r for r in kernels if r.ops[0].op == "edge.convolution"]
    # Batch norm folded into the convolution: the value is the batch norm's, the line the convolution's.
    assert convolutions and all(r.ops[0].node.startswith("_native_batch_norm_legit_no_training")
                                for r in convolutions)
    assert all(list(r.outputs.values())[0][0] == r.ops[0].node for r in convolutions)
    path = tmp_path / "resnet.etrecord"
    record.save(path)
    assert CompileRecord.load(path) == record
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(EtcError, match="not an etc compile record"):
        CompileRecord.load(tmp_path / "bad.json")
    with pytest.raises(EtcError, match="generate_etrecord=True"):
        etc.to_edge(torch.export.export(torch.nn.ReLU(), (torch.ones(2),))).to_executorch().get_etrecord()


def test_the_inspector_joins_times_with_ops_and_writes_a_chrome_trace(transformer, tmp_path):
    zoo_model, program = transformer
    loaded = _recorded(program, list(zoo_model.example_inputs), runs=3)
    record = loaded.run_record
    assert record.runs("forward") == 3
    inspector = Inspector(record, etrecord=program.get_etrecord(), program=program.buffer)
    instructions = program.get_etrecord().instructions("forward")
    names = [r.name for r in inspector.rows]
    assert names[0] == "Method::set_inputs" and names[-1] == "Method::get_outputs"  # the copies are rows too
    assert [r.instruction for r in inspector.rows[1:-1]] == [r.instruction for r in instructions]
    assert all(row.calls == 3 and len(row.times_ns) == 3 for row in inspector.rows)
    assert all(row.source and "zoo.py:" in row.source for row in inspector.rows[1:-1] if row.name != "move")
    assert 0 < inspector.coverage("forward") <= 1  # instruction spans nest inside the execute's
    top = inspector.top_ops(3)
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1] and top[0][2] % 3 == 0
    table = inspector.format_table()
    assert "aten::addmm.out" in table and "forward: 3 execute(s)" in table
    path = tmp_path / "trace.json"
    inspector.write_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len([e for e in complete if e["cat"] == "execute"]) == 3
    assert len(complete) == 3 * 3 + 3 * len(instructions)
    assert all("zoo.py:" in e["args"]["source"] for e in complete
               if e["cat"] == "instruction" and not e["name"].startswith("Method::"))
    # Without a compile record, the program's own stack traces still give the source lines.
    plain = Inspector(record, program=program.pte)
    assert [r.source for r in plain.rows] == [r.source for r in inspector.rows]


def test_a_delegate_row_lists_the_ops_inside_it_with_their_lines():
    from etc.targets.cpu import CpuPartitioner

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

        def forward(self, x):
            hidden = torch.relu(self.fc1(x))
            return torch.softmax(self.fc2(hidden), dim=-1)

    ep = torch.export.export(Head().eval(), (torch.randn(2, 16),))
    program = etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch(generate_etrecord=True)
    loaded = _recorded(program, [np.ones((2, 16), np.float32)])
    inspector = Inspector(loaded.run_record, etrecord=program.get_etrecord())
    delegates = [r for r in inspector.rows if r.name == "delegate 'cpu'"]
    assert len(delegates) == 1 and delegates[0].calls == 2
    inner = [r for r in inspector.rows if r.parent == delegates[0].instruction]
    assert {r.aten for r in inner} >= {"aten::addmm", "aten::relu", "aten::_softmax"}
    lines = {r.source.rsplit(":", 1)[1] for r in inner}
    this_file = __file__
    assert all(r.source.startswith(this_file) for r in inner) and len(lines) == 2  # the two lines of forward
    assert inspector.top_ops(1)[0][0] == "delegate 'cpu'"


def test_the_debug_buffer_keeps_intermediate_outputs_within_its_budget(resnet, tmp_path):
    zoo_model, program = resnet
    inputs = list(zoo_model.example_inputs)
    loaded = _recorded(program, inputs, runs=1, debug_buffer_size=1 << 26)
    record = loaded.run_record
    assert record.dropped_outputs == 0
    last = max(record.intermediates)
    (value, array), = record.intermediates[last]
    with torch.no_grad():
        expected = zoo_model.module(*inputs).numpy()
    np.testing.assert_allclose(array, expected, rtol=1e-4, atol=1e-4)
    loaded.write_etdump_result_to_file(tmp_path / "run.etdp", tmp_path / "debug.npz")
    again = RunRecord.load(tmp_path / "run.etdp", tmp_path / "debug.npz")
    assert again.events == record.events and sorted(again.intermediates) == sorted(record.intermediates)
    np.testing.assert_array_equal(again.intermediates[last][0][1], array)
    with pytest.raises(EtcError, match="give a debug_buffer_path"):
        record.save(tmp_path / "x.etdp")
    small = _recorded(program, inputs, runs=1, debug_buffer_size=4096).run_record
    assert small.dropped_outputs > 0 and small.debug_bytes <= 4096
    with pytest.raises(EtcError, match="needs enable_etdump=True"):
        Runtime.get().load_program(program.buffer, debug_buffer_size=100)
    with pytest.raises(EtcError, match="loaded without enable_etdump"):
        Runtime.get().load_program(program.buffer).write_etdump_result_to_file(tmp_path / "y.etdp")


def test_to_dataframe_has_the_rows_or_says_how_to_get_pandas(transformer, monkeypatch):
    zoo_model, program = transformer
    inspector = Inspector(_recorded(program, list(zoo_model.example_inputs), runs=1).run_record,
                          etrecord=program.get_etrecord())
    pytest.importorskip("pandas")  # the [devtools] extra, installed by make's stamp
    frame = inspector.to_dataframe()
    assert len(frame) == len(inspector.rows) and list(frame.columns) == list(Inspector.COLUMNS)
    assert frame["calls"].iloc[0] == 1 and frame["source"].str.contains("zoo.py:").any()
    monkeypatch.setitem(sys.modules, "pandas", None)  # as on a machine without the extra
    with pytest.raises(EtcError, match=r"pip install 'etc\[devtools\]'"):
        inspector.to_dataframe()


def test_etc_profile_prints_the_table_and_writes_a_trace(tmp_path, capsys):
    (tmp_path / "tiny.py").write_text(
        "import torch\n\n"
        "class Tiny(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(6, 3)\n\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.fc(x))\n")

    def cli(*args):
        return etc_main([str(a) for a in args])

    assert cli("compile", tmp_path / "tiny.py:Tiny", "--example-inputs", "2x6", "-o", tmp_path / "t.pte",
               "--etrecord", tmp_path / "t.etrecord") == 0
    assert "wrote compile record" in capsys.readouterr().out
    assert cli("profile", tmp_path / "t.pte", "--runs", "4", "--etrecord", tmp_path / "t.etrecord",
               "--trace", tmp_path / "trace.json", "--etdump", tmp_path / "run.etdp") == 0
    out = capsys.readouterr().out
    assert "aten::addmm.out" in out and "tiny.py:9" in out
    assert "forward: 4 execute(s)" in out and "top operators by time" in out
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert RunRecord.load(tmp_path / "run.etdp").runs("forward") == 4
    assert cli("profile", tmp_path / "t.pte", "--runs", "0") == 1
    assert "--runs must be at least 1" in capsys.readouterr().err


def test_control_flow_rows_count_the_branch_taken():
    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: torch.sin(v) + 1, lambda v: torch.cos(v) * 2, (x,))

    program = etc.to_edge(torch.export.export(Branch(), (torch.ones(4),))).to_executorch(generate_etrecord=True)
    record = program.get_etrecord()
    jumps = [r for r in record.instructions() if r.kind == "jump"]
    assert jumps and all(r.name == "jump_false" and r.ops[0].op == "scf.if" for r in jumps)
    loaded = Runtime.get().load_program(program.buffer, enable_etdump=True)
    method = loaded.load_method("forward")
    for sign in (1, 1, -1):
        method.execute([np.full(4, sign, np.float32)])
    inspector = Inspector(loaded.run_record, etrecord=record)
    calls = {row.name: row.calls for row in inspector.rows}
    assert calls["aten::sin.out"] == 2 and calls["aten::cos.out"] == 1 and calls["aten::sum.IntList_out"] == 3
    # Every event's label is the one the compile record gives its instruction.
    assert all(record.instruction(e.method, e.chain, e.instruction).name == e.name
               for e in loaded.run_record.events if e.chain >= 0)


def test_a_backend_that_times_its_regions_gets_one_row_per_region_with_its_lines():
    """The runtime side of per-region times: a test-only backend that runs a chain of unary ops and reports
    each as a region through `execute_profiled`, which the runtime calls only while recording."""
    from etc.compiler.delegation import (BackendDetails, CapabilityPartitioner, DelegationSpec, PreprocessResult,
                                         register_backend_details)
    from etc.runtime import Backend, log, register_backend, unregister_backend

    unary = {"edge.relu": lambda v: np.maximum(v, 0), "edge.sigmoid": lambda v: 1 / (1 + np.exp(-v)),
             "edge.tanh": np.tanh}

    class UnaryDetails(BackendDetails):
        backend_id = "etc_test_unary"

        def preprocess(self, func_op, compile_specs, constants):
            names = [op.name for op in func_op.regions[0].blocks[0].operations if op.name != "func.return"]
            return PreprocessResult(",".join(names).encode())

    class UnaryBackend(Backend):
        backend_id = "etc_test_unary"
        plain_calls = 0

        def init(self, blob, compile_specs):
            return blob.decode().split(",")

        def execute(self, handle, args):
            UnaryBackend.plain_calls += 1
            return self.execute_profiled(handle, args, None)

        def execute_profiled(self, handle, args, events):
            value = args[0]
            for index, name in enumerate(handle):
                start = log.now_ns()
                value = unary[name](value)
                if events is not None:
                    events.add(name.replace("edge.", ""), log.now_ns() - start, ops=[index])
            np.copyto(args[-1], value)

    class Chain(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x * 2)
            return torch.tanh(torch.sigmoid(y))

    register_backend_details(UnaryDetails())
    register_backend(UnaryBackend())
    try:
        partitioner = CapabilityPartitioner(DelegationSpec("etc_test_unary"), lambda op: op.name in unary)
        edge = etc.to_edge(torch.export.export(Chain(), (torch.ones(8),))).to_backend(partitioner)
        program = edge.to_executorch(generate_etrecord=True)
        x = np.linspace(-2, 2, 8, dtype=np.float32)
        expected = np.tanh(1 / (1 + np.exp(-np.maximum(2 * x, 0))))
        plain = Runtime.get().load_program(program.buffer).load_method("forward")
        np.testing.assert_allclose(plain.execute([x])[0], expected, rtol=1e-6)
        assert UnaryBackend.plain_calls == 1  # not recording: the plain execute
        loaded = _recorded(program, [x], runs=2)
        assert UnaryBackend.plain_calls == 1  # recording: execute_profiled instead
        regions = loaded.run_record.delegate_events
        assert [e.name for e in regions] == ["relu", "sigmoid", "tanh"] * 2
        inspector = Inspector(loaded.run_record, etrecord=program.get_etrecord())
        delegate = next(r for r in inspector.rows if r.name == "delegate 'etc_test_unary'")
        inner = [r for r in inspector.rows if r.parent == delegate.instruction]
        assert [r.name for r in inner] == ["relu", "sigmoid", "tanh"] and all(r.calls == 2 for r in inner)
        line = inspect.getsourcelines(Chain.forward)[1]
        assert inner[0].source == f"{__file__}:{line + 1}" and inner[2].source == f"{__file__}:{line + 2}"
        assert sum(sum(r.times_ns) for r in inner) <= sum(delegate.times_ns)  # regions nest in the call
        trace = inspector.chrome_trace()["traceEvents"]
        assert len([e for e in trace if e.get("cat") == "delegate region"]) == 6
    finally:
        unregister_backend("etc_test_unary")


def test_a_loop_keeps_the_last_iteration_of_each_instruction_in_the_debug_buffer():
    class Loop(torch.nn.Module):
        def forward(self, x):
            return torch._higher_order_ops.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, torch.sin(v) + 1),
                                                      (torch.tensor(0), x))[1]

    program = etc.to_edge(torch.export.export(Loop(), (torch.ones(4),))).to_executorch()
    loaded = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=1 << 20)
    (out,) = loaded.load_method("forward").execute([np.ones(4, np.float32)])
    record = loaded.run_record
    sines = [e for e in record.events if e.name == "aten::sin.out"]
    assert len(sines) == 5  # one event per iteration
    assert record.debug_bytes == sum(a.nbytes for outputs in record.intermediates.values() for _, a in outputs)
    (value, last), = record.intermediates[("forward", 0, sines[0].chain, sines[0].instruction)]
    expected = np.ones(4, np.float32)
    for _ in range(4):
        expected = np.sin(expected) + 1
    np.testing.assert_allclose(last, np.sin(expected), rtol=1e-6)  # the fifth iteration's sin
    np.testing.assert_allclose(out, np.sin(expected) + 1, rtol=1e-6)


def test_every_name_the_devtools_docstring_lists_is_importable():
    """The docstring named `read_executorch_etdump`, which `etc.devtools` did not export (issue 24)."""
    import re

    import etc.devtools

    listed = re.findall(r"^- `(\w+)`", etc.devtools.__doc__, flags=re.M) + ["read_executorch_etdump"]
    assert len(listed) >= 8
    for name in listed:
        assert getattr(etc.devtools, name) is not None, name
    assert set(etc.devtools.__all__) >= set(listed)
