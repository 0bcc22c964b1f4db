"""Selective build: the operator and backend list of a set of programs; a runtime built from it runs them,
binds nothing else, and refuses a program outside it with the operator, method and instruction named."""

import numpy as np
import pytest
import torch

import etc
from etc.runtime.selective_build import SelectiveBuild
from etc.errors import BackendError, EtcError, KernelNotFoundError
from etc.runtime import Runtime
from etc.tools.etc_main import main as etc_main


class AddRelu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x + 1)


class MulSigmoid(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 2)


def _program(module):
    return etc.to_edge(torch.export.export(module, (torch.ones(4),))).to_executorch()


def test_a_runtime_from_the_list_runs_its_programs_and_refuses_others(tmp_path, capsys):
    first, second = _program(AddRelu()), _program(MulSigmoid())
    first.save(tmp_path / "a.pte")
    second.save(tmp_path / "b.pte")
    assert etc_main(["selective-build", str(tmp_path / "a.pte"), "-o", str(tmp_path / "sel.json")]) == 0
    assert "aten::relu.out  (a.pte)" in capsys.readouterr().out
    runtime = Runtime.from_selective_build(tmp_path / "sel.json")
    assert runtime.operator_registry.operator_names == {"aten::add.Scalar_out", "aten::relu.out"}
    assert runtime.backend_registry.registered_backend_names == [] and not runtime.backend_registry.is_available("cpu")
    out = runtime.load_program(tmp_path / "a.pte").load_method("forward").execute([np.zeros(4, np.float32)])
    np.testing.assert_array_equal(out[0], np.ones(4, np.float32))
    with pytest.raises(KernelNotFoundError) as refused:
        runtime.load_program(tmp_path / "b.pte")
    text = str(refused.value)
    assert "needs operator 'aten::mul.Scalar_out', which is outside this runtime's selective build" in text
    assert "method 'forward', instruction 0" in text and "also needs aten::sigmoid.out" in text
    assert etc_main(["run", str(tmp_path / "b.pte"), "--selected-operators", str(tmp_path / "sel.json")]) == 1
    assert "needs operator 'aten::mul.Scalar_out'" in capsys.readouterr().err
    both = SelectiveBuild.from_programs(tmp_path / "a.pte") | SelectiveBuild.from_programs(second)
    assert set(both.operators) == {"aten::add.Scalar_out", "aten::relu.out", "aten::mul.Scalar_out",
                                   "aten::sigmoid.out"}
    assert Runtime(selective_build=both).load_program(tmp_path / "b.pte").method_names == {"forward"}


def test_the_restricted_runtime_binds_only_listed_kernels():
    program = _program(AddRelu())
    selection = SelectiveBuild.from_programs(program)
    table = selection.kernel_table()
    assert callable(table["aten::add.Scalar_out"])
    with pytest.raises(KernelNotFoundError, match="not in this runtime's selective build"):
        table["aten::mul.out"]  # noqa: B018 - registered in etc, but not selected


def test_backends_are_selected_too(tmp_path):
    from etc.targets.cpu import CpuPartitioner

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x))

    program = etc.to_edge(torch.export.export(Mlp(), (torch.ones(2, 8),))).to_backend(CpuPartitioner()).to_executorch()
    selection = SelectiveBuild.from_programs(program)
    assert set(selection.backends) == {"cpu"}
    selection.save(tmp_path / "sel.json")
    assert SelectiveBuild.load(tmp_path / "sel.json") == selection
    portable_only = SelectiveBuild(operators=dict(selection.operators))
    with pytest.raises(BackendError, match="backend 'cpu', which is outside this runtime's selective build"):
        Runtime(selective_build=portable_only).load_program(program.buffer)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(EtcError, match="not a selected_operators.yaml"):
        Runtime.from_selective_build(tmp_path / "bad.json")
    (tmp_path / "all.json").write_text('{"operators": {}, "include_all_operators": true}')
    with pytest.raises(EtcError, match="selects all operators"):
        Runtime.from_selective_build(tmp_path / "all.json")


def test_the_list_is_executorchs_selected_operators_yaml_both_ways(tmp_path):
    """torchgen's SelectiveBuilder (what ExecuTorch's build uses) reads etc's list, and etc's runtime reads
    the list ExecuTorch's gen_oplist writes for the same program."""
    yaml = pytest.importorskip("yaml")
    selector = pytest.importorskip("torchgen.selective_build.selector")
    program = _program(AddRelu())
    program.save(tmp_path / "a.pte")
    ours = SelectiveBuild.from_programs(tmp_path / "a.pte")
    ours.save(tmp_path / "ours.yaml")
    builder = selector.SelectiveBuilder.from_yaml_dict(yaml.safe_load((tmp_path / "ours.yaml").read_text()))
    assert builder.is_operator_selected("aten::add.Scalar_out") and builder.is_operator_selected("aten::relu.out")
    assert not builder.is_operator_selected("aten::mul.out")
    gen_oplist = pytest.importorskip("executorch.codegen.tools.gen_oplist")
    gen_oplist.gen_oplist(output_path=tmp_path / "theirs.yaml", model_file_path=str(tmp_path / "a.pte"))
    theirs = SelectiveBuild.load(tmp_path / "theirs.yaml")
    assert set(theirs.operators) == set(ours.operators)
    runtime = Runtime.from_selective_build(tmp_path / "theirs.yaml")
    assert runtime.load_program(tmp_path / "a.pte").method_names == {"forward"}
