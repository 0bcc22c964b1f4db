"""The program-manager API: to_edge / transform / to_backend / to_executorch, as users call it."""

import pytest
import torch

import etc
from etc.compiler.program import EdgeCompileConfig, ExecutorchBackendConfig
from etc.errors import EtcError, LoweringError


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Encoder(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return torch.sigmoid(self.net.fc(x))


def _export(module, *shape):
    return torch.export.export(module.eval(), (torch.randn(*shape),))


def test_edge_program_prints_edge_ir_with_user_locations():
    edge = etc.to_edge(_export(Net(), 2, 8))
    text = str(edge)
    assert "edge.addmm" in text and "edge.relu" in text and "aten." not in text
    assert "test_program_manager.py" in text  # locations point at the user's source
    assert edge.methods == ["forward"]


def test_two_methods_share_weights_and_both_run():
    from etc.runtime import Runtime

    net = Net().eval()
    edge = etc.to_edge({"forward": _export(net, 2, 8), "encode": _export(Encoder(net), 3, 8)})
    program = edge.to_executorch()
    loaded = Runtime.get().load_program(program.buffer)
    assert sorted(loaded.method_names) == ["encode", "forward"]
    x = torch.randn(3, 8)
    (y,) = loaded.load_method("encode").execute([x])
    torch.testing.assert_close(y, torch.sigmoid(net.fc(x)).detach(), rtol=1e-5, atol=1e-5)
    # One copy of the shared (folded, transposed) weight and of the bias, for both methods.
    assert len(edge.program_ir.constants) == 2


def test_transform_runs_pipeline_strings_and_pass_names():
    edge = etc.to_edge(_export(Net(), 2, 8))
    edge.transform("builtin.module(cse, etc-dce)")
    edge.transform(["etc-fold-constants"])
    with pytest.raises(EtcError, match="etc-no-such-pass"):
        edge.transform("builtin.module(etc-no-such-pass)")


def test_memory_report_per_method_and_mem_id():
    program = etc.to_edge(_export(Net(), 2, 8)).to_executorch(ExecutorchBackendConfig(alignment=64))
    report = program.memory_report()
    pools = report.methods["forward"].pools
    assert set(pools) == {1}
    assert pools[1].planned_bytes >= pools[1].lower_bound > 0
    assert "planned bytes" in str(report)


def test_save_and_reload(tmp_path):
    from etc.runtime import Runtime

    program = etc.to_edge(_export(Net(), 2, 8)).to_executorch()
    path = tmp_path / "net.pte"
    program.save(path)
    assert path.read_bytes() == program.buffer
    assert Runtime.get().load_program(path).method_names == {"forward"}


def test_op_without_edge_form_fails_at_the_user_line():
    class Norm(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.vector_norm(x, dim=1)

    config = EdgeCompileConfig(preserve_ops=(torch.ops.aten.linalg_vector_norm.default,))
    with pytest.raises(LoweringError, match=r"aten::linalg_vector_norm.*no edge form") as info:
        etc.to_edge(_export(Norm(), 2, 8), compile_config=config)
    assert "test_program_manager.py" in str(info.value.location)


def test_bad_inputs_to_to_edge_are_clear():
    with pytest.raises(EtcError, match="ExportedProgram"):
        etc.to_edge(Net())
    with pytest.raises(EtcError, match="method 'forward' is a Net"):
        etc.to_edge({"forward": Net()})


class _Doubled(torch.nn.Module):
    def forward(self, x):
        return (x * 2).relu()


@pytest.mark.parametrize("partitioner", [None, "cpu"])
def test_methods_with_same_node_names_keep_their_own_size_bounds(partitioner):
    """Found by the compiler fuzzer: two methods whose graphs both have a node `mul` of dynamic
    shape. The upper bounds were collected by node name over all methods, so the second method's
    ([4, 4]) replaced the first's ([16, 8]): its planned buffers were too small, and a call at its
    largest size failed (or, in a delegate, wrote out of bounds)."""
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    big, small = torch.export.Dim("n", min=1, max=16), torch.export.Dim("m", min=1, max=4)
    methods = {"forward": torch.export.export(_Doubled(), (torch.randn(3, 8),), dynamic_shapes=({0: big},)),
               "small": torch.export.export(_Doubled(), (torch.randn(3, 4),), dynamic_shapes=({0: small},))}
    edge = etc.to_edge(methods)
    if partitioner:
        edge = edge.to_backend(CpuPartitioner())
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    for name, shape in (("forward", (16, 8)), ("small", (4, 4)), ("forward", (1, 8))):
        x = torch.randn(*shape)
        assert torch.equal(program.load_method(name).execute([x])[0], (x * 2).relu())
