"""Emission: an edge-dialect, memory-planned program -> a `.pte` PteFile.

These tests build the edge program stage by stage (decompose, import, convert,
plan) so that they check the emitter alone; the end-to-end tests run the same
through `etc.to_edge(...).to_executorch()` and the runtime."""

import pytest
import torch
from torch_mlir.passmanager import PassManager

import etc.compiler.emitter as emitter
import etc.dialects.out_variants as out_variants
from etc.compiler.importer import import_program
from etc.compiler.program import EdgeCompileConfig, annotate_upper_bounds, decompose
from etc.errors import LoweringError
from etc.passes.convert_aten_to_edge import convert_aten_to_edge
from etc.passes.memory_planning import plan_memory
from etc.schema import deserialize_pte, serialize_pte
from etc.schema import program as S


def _edge(model, *inputs, dynamic_shapes=None):
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    decomposed = decompose({"forward": ep}, EdgeCompileConfig())
    program = import_program(decomposed)
    annotate_upper_bounds(program, decomposed)
    with program.context:
        convert_aten_to_edge(program.module)
        PassManager.parse("builtin.module(cse, canonicalize)").run(program.module.operation)
        plan_memory(program.module)
    return program


@pytest.fixture()
def all_out_variants(monkeypatch):
    """Every ATen out variant counts as a kernel: these tests are about emission, not the kernel library."""
    kernels = set(out_variants.out_variants().values()) | set(out_variants.VIEW_COPY_KERNELS.values())
    monkeypatch.setattr(emitter, "registered_kernel_names", lambda: kernels)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2.0


def test_kernel_calls_constants_and_plan(all_out_variants):
    program = _edge(Mlp(), torch.randn(2, 4))
    pte = deserialize_pte(serialize_pte(emitter.emit_program(program)))
    plan = pte.program.execution_plan[0]
    assert plan.name == "forward"
    operators = [f"{o.name}.{o.overload}" for o in plan.operators]
    assert "aten::addmm.out" in operators and "aten::relu.out" in operators and "aten::mul.Scalar_out" in operators
    # The weight and bias are constants with data in the constant segment.
    constants = [v.val for v in plan.values if isinstance(v.val, S.Tensor) and v.val.data_buffer_idx > 0]
    assert len(constants) == 2
    assert sorted(len(pte.constant_data[c.data_buffer_idx - 1]) for c in constants) == [12, 48]
    # Planned buffers: slot 0 reserved, activations planned in mem_id 1.
    assert plan.non_const_buffer_sizes[0] == 0 and plan.non_const_buffer_sizes[1] > 0
    output = plan.values[plan.outputs[0]].val
    assert output.allocation_info is not None and output.allocation_info.memory_id == 1
    assert output.sizes == [2, 3]
    # A kernel call names its out tensor among the schema args and again as the result.
    relu = next(i for i in plan.chains[0].instructions
                if plan.operators[i.instr_args.op_index].name == "aten::relu")
    assert relu.instr_args.args[-1] == relu.instr_args.args[-2]


def test_int_lists_are_boxed_int_evalues(all_out_variants):
    class Reshape(torch.nn.Module):
        def forward(self, x):
            return (x + 1).reshape(3, 2)

    program = _edge(Reshape(), torch.randn(2, 3))
    plan = emitter.emit_program(program).program.execution_plan[0]
    view = next(i.instr_args for i in plan.chains[0].instructions
                if plan.operators[i.instr_args.op_index].name == "aten::view_copy")
    size_list = plan.values[view.args[1]].val
    assert isinstance(size_list, S.IntList)
    assert [plan.values[i].val.int_val for i in size_list.items] == [3, 2]


def test_dynamic_dims_are_emitted_at_their_upper_bound(all_out_variants):
    batch = torch.export.Dim("batch", min=1, max=8)
    program = _edge(Mlp(), torch.randn(2, 4), dynamic_shapes={"x": {0: batch}})
    plan = emitter.emit_program(program).program.execution_plan[0]
    x = plan.values[plan.inputs[0]].val
    assert x.sizes == [8, 4] and x.shape_dynamism == S.TensorShapeDynamism.DYNAMIC_BOUND


def test_missing_kernel_is_a_compile_error_at_the_user_line(monkeypatch):
    monkeypatch.setattr(emitter, "registered_kernel_names", lambda: {"aten::addmm.out", "aten::permute_copy.out"})
    program = _edge(Mlp(), torch.randn(2, 4))
    with pytest.raises(LoweringError, match=r"no kernel for 'aten::relu.out'") as info:
        emitter.emit_program(program)
    assert "test_emitter.py" in str(info.value.location)


def test_return_conventions_match_executorch(all_out_variants):
    """After the schema arguments ExecuTorch's kernels take the return value: the
    out tensor, a TensorList of outs for several returns, the out list again for `-> ()`."""

    class Model(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.max(x, dim=1)
            a, b = torch.split(x, [1, 2], dim=1)
            return values, indices, a + 1, b + 1

    program = _edge(Model(), torch.randn(2, 3))
    plan = emitter.emit_program(program).program.execution_plan[0]
    calls = {f"{plan.operators[i.instr_args.op_index].name}.{plan.operators[i.instr_args.op_index].overload}":
             i.instr_args.args for i in plan.chains[0].instructions}
    max_args = calls["aten::max.dim_max"]
    assert len(max_args) == 6  # self, dim, keepdim, max, max_values, (max, max_values)
    assert plan.values[max_args[-1]].val.items == max_args[3:5]
    split_args = calls["aten::split_with_sizes_copy.out"]
    assert len(split_args) == 5 and split_args[-1] == split_args[-2]
    assert isinstance(plan.values[split_args[-1]].val, S.TensorList)


def test_sizes_computed_at_run_time_become_prim_op_calls(monkeypatch):
    kernels = set(out_variants.out_variants().values()) | set(out_variants.VIEW_COPY_KERNELS.values())
    kernels |= {"aten::sym_size.int"} | set(emitter.SYMBOLIC_ARITHMETIC.values())
    monkeypatch.setattr(emitter, "registered_kernel_names", lambda: kernels)

    class Flatten(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] * 3, -1) + 1

    batch = torch.export.Dim("batch", min=1, max=16)
    program = _edge(Flatten(), torch.randn(2, 3, 4), dynamic_shapes={"x": {0: batch}})
    plan = emitter.emit_program(program).program.execution_plan[0]
    names = [plan.operators[i.instr_args.op_index].name for i in plan.chains[0].instructions]
    assert names[:2] == ["aten::sym_size", "executorch_prim::mul"]
    size_call, mul_call = (plan.chains[0].instructions[k].instr_args for k in (0, 1))
    assert mul_call.args[0] == size_call.args[-1]  # the product reads the size the first call wrote
    view = next(i.instr_args for i in plan.chains[0].instructions
                if plan.operators[i.instr_args.op_index].name == "aten::view_copy")
    assert plan.values[view.args[1]].val.items[0] == mul_call.args[-1]
