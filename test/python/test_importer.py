"""The importer on small models: one per architecture the issue lists, plus
state handling (globals, mutation, sharing between methods), symbolic sizes,
and located errors for unsupported constructs."""

import inspect
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_mlir import ir

import etc

# Ops are built by the aten dialect (etc.dialects.aten.build_op); these tests
# need it and run as soon as it is part of the tree.
pytest.importorskip("etc.dialects.aten", reason="the aten dialect (etc.dialects.aten) is not in the tree yet")
from etc.compiler.importer import DIM_BOUNDS_ATTR, UNBOUNDED
from etc.compiler.ir import BUFFER, PARAMETER, USER_INPUT, ProgramIR
from etc.errors import UnsupportedConstructError

THIS_FILE = __file__


def export(module, *inputs, dynamic_shapes=None):
    torch.manual_seed(0)
    return torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes)


def body_ops(program: ProgramIR, method: str = "forward"):
    return list(program.func(method).regions[0].blocks[0].operations)


def op_names(program: ProgramIR, method: str = "forward") -> list[str]:
    return [op.operation.name for op in body_ops(program, method)]


def ops_named(program: ProgramIR, name: str, method: str = "forward"):
    return [op for op in body_ops(program, method) if op.operation.name == name]


def line_of(function, text: str) -> int:
    """Line number, in this file, of the line of `function` containing `text`."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def assert_well_formed(program: ProgramIR):
    program.verify()
    text = program.to_text(debug_info=False)
    assert "dense<" not in text and "dense_resource" not in text, "constant bytes leaked into the IR"


# ------------------------------------------------------------------ models
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class DepthwiseCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        return self.depthwise(F.relu(self.bn(self.conv(x)))).mean((2, 3))


class TransformerBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.gate, self.down = nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(mask, float("-inf"))
        x = x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.gelu(self.up(h)) * F.silu(self.gate(h)))


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(6, 10, batch_first=True)
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)

    def forward(self, tokens):
        return self.embed(tokens).sum(1)


class Counter(nn.Module):
    """A buffer written in place every call, and one only read."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(2))
        self.register_buffer("scale", torch.full((2,), 3.0))

    def forward(self, x):
        self.count.add_(1)
        return x * self.scale + self.count


class SizeArithmetic(nn.Module):
    def forward(self, x):
        b = x.shape[0]
        return x.reshape(b * 4, 1) + 1


class DynamicMap(nn.Module):
    def forward(self, xs):
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x: x + 1, xs)


class WritesInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class ComplexValued(nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x)


# --------------------------------------------------------------- structure
def test_mlp_function_signature_globals_and_constants():
    module = MLP()
    program = etc.import_program(export(module, torch.randn(2, 8)))
    assert_well_formed(program)
    assert program.methods == ["forward"]
    function = program.func("forward")
    assert str(function.type) == "(tensor<2x8xf32>) -> tensor<2x4xf32>"
    assert op_names(program).count("aten.linear") == 2 and "aten.relu" in op_names(program)

    globals_ = program.globals()
    assert set(globals_) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    for name, parameter in module.state_dict().items():
        np.testing.assert_array_equal(program.constants[name], parameter.numpy())
        assert "mutable" not in str(globals_[name]) and "#ml_program.extern" in str(globals_[name])
    loads = ops_named(program, "ml_program.global_load_const")
    assert {str(op.attributes["global"]) for op in loads} == {f"@{name}" for name in module.state_dict()}
    signature = program.signatures["forward"]
    assert signature.user_inputs == ["x"]
    assert [(i.kind, i.target) for i in signature.state] == [(PARAMETER, n) for n in module.state_dict()]
    assert signature.dim_bounds == [[(2, 2), (8, 8)]]
    arg_attrs = str(function.arg_attrs)
    assert f"{DIM_BOUNDS_ATTR} = array<i64: 2, 2, 8, 8>" in arg_attrs


def test_every_op_is_located_at_the_users_source_line():
    program = etc.import_program(export(MLP(), torch.randn(2, 8)))
    expected_line = line_of(MLP.forward, "return self.fc2")
    for op in ops_named(program, "aten.linear") + ops_named(program, "aten.relu"):
        location = str(op.location)
        assert re.fullmatch(rf'loc\("(linear|linear_1|relu)"\("{re.escape(THIS_FILE)}":{expected_line}:\d+\)\)',
                            location), location
    assert f'"{THIS_FILE}":{expected_line}:' in str(program)  # print(program) shows locations


def test_cnn_with_batch_norm_and_depthwise_conv():
    module = DepthwiseCNN()
    program = etc.import_program(export(module, torch.randn(1, 3, 8, 8)))
    assert_well_formed(program)
    names = op_names(program)
    assert names.count("aten.conv2d") == 2 and "aten.batch_norm" in names and "aten.mean_dim" in names
    groups = [int(op.attributes["groups"].value) for op in ops_named(program, "aten.conv2d")]
    assert groups == [1, 8]
    for buffer in ("bn.running_mean", "bn.running_var"):
        np.testing.assert_array_equal(program.constants[buffer], module.state_dict()[buffer].numpy())
    kinds = {i.target: i.kind for i in program.signatures["forward"].state}
    assert kinds["bn.running_mean"] == BUFFER and kinds["conv.weight"] == PARAMETER
    assert program.constant_dtypes["bn.num_batches_tracked"] == "int64"


def test_transformer_block():
    x, mask = torch.randn(2, 5, 16), torch.zeros(2, 1, 5, 5, dtype=torch.bool)
    program = etc.import_program(export(TransformerBlock(), x, mask))
    assert_well_formed(program)
    names = set(op_names(program))
    for op in ("aten.layer_norm", "aten.linear", "aten.matmul", "aten.masked_fill_scalar", "aten.softmax_int",
               "aten.gelu", "aten.silu", "aten.permute", "aten.unbind_int"):
        assert op in names, op
    function = program.func("forward")
    assert str(function.type).startswith("(tensor<2x5x16xf32>, tensor<2x1x5x5xi1>) -> tensor<2x5x16xf32>")
    # unbind has three results; getitem picks them apart: q, k and v are distinct values.
    unbind = ops_named(program, "aten.unbind_int")[0]
    assert len(unbind.results) == 3 and all(len(list(r.uses)) == 1 for r in unbind.results)


@pytest.mark.parametrize("cell, op", [(nn.LSTM, "aten.lstm_input"), (nn.GRU, "aten.gru_input")])
def test_recurrent_networks(cell, op):
    program = etc.import_program(export(Recurrent(cell), torch.randn(2, 4, 6)))
    assert_well_formed(program)
    (rnn,) = ops_named(program, op)
    assert len(rnn.results) == (3 if cell is nn.LSTM else 2)
    assert str(rnn.results[0].type) == "tensor<2x4x10xf32>"
    (select,) = ops_named(program, "aten.select_int")
    assert select.operands[0] == rnn.results[0]  # `y, _ = rnn(x)`: result 0 feeds y[:, -1]
    weight_loads = [o for o in rnn.operands
                    if not isinstance(o.owner, ir.Block) and o.owner.name == "ml_program.global_load_const"]
    assert len(weight_loads) == 4  # w_ih, w_hh, b_ih, b_hh by name


def test_embedding_takes_integer_indices():
    program = etc.import_program(export(Embedder(), torch.randint(0, 20, (3, 5))))
    assert_well_formed(program)
    (embedding,) = ops_named(program, "aten.embedding")
    assert str(embedding.operands[1].type) == "tensor<3x5xi64>"
    assert str(embedding.results[0].type) == "tensor<3x5x8xf32>"


def test_dynamic_batch_dimension():
    batch = torch.export.Dim("batch", min=2, max=64)
    program = etc.import_program(export(MLP(), torch.randn(4, 8), dynamic_shapes=({0: batch},)))
    assert_well_formed(program)
    assert str(program.func("forward").type) == "(tensor<?x8xf32>) -> tensor<?x4xf32>"
    assert f"{DIM_BOUNDS_ATTR} = array<i64: 2, 64, 8, 8>" in str(program.func("forward").arg_attrs)
    signature = program.signatures["forward"]
    assert signature.dim_bounds == [[(2, 64), (8, 8)]]
    assert list(signature.symbols.values()) == [(2, 64)]


def test_unbounded_dynamic_dimension_has_max_minus_one():
    batch = torch.export.Dim("batch", min=2)
    program = etc.import_program(export(MLP(), torch.randn(4, 8), dynamic_shapes=({0: batch},)))
    assert program.signatures["forward"].dim_bounds[0][0] == (2, UNBOUNDED)


def test_symbolic_sizes_become_index_arithmetic():
    batch = torch.export.Dim("batch", min=2, max=16)
    program = etc.import_program(export(SizeArithmetic(), torch.randn(3, 4), dynamic_shapes=({0: batch},)))
    assert_well_formed(program)
    (dim,) = ops_named(program, "tensor.dim")
    (product,) = ops_named(program, "arith.muli")
    assert product.operands[0] == dim.result
    (reshape,) = ops_named(program, "aten.reshape")
    assert any(operand == product.result for operand in reshape.operands)
    assert str(reshape.results[0].type) == "tensor<?x1xf32>"


def test_mutated_buffer_is_a_mutable_global_with_a_store():
    module = Counter()
    program = etc.import_program(export(module, torch.randn(2)))
    assert_well_formed(program)
    globals_ = program.globals()
    assert "mutable" in str(globals_["count"]) and "mutable" not in str(globals_["scale"])
    (load,) = ops_named(program, "ml_program.global_load")
    assert str(load.attributes["global"]) == "@count"
    (store,) = ops_named(program, "ml_program.global_store")
    assert str(store.attributes["global"]) == "@count"
    assert store.operands[0].owner.name == "aten.add_scalar"
    assert op_names(program)[-2:] == ["ml_program.global_store", "func.return"]
    assert list(program.signatures["forward"].mutated_buffers) == ["count"]


def test_methods_share_globals_of_the_same_tensors():
    model = MLP()

    class FirstLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model.fc1(x)

    programs = {"forward": export(model, torch.randn(2, 8)), "first": export(FirstLayer(), torch.randn(2, 8))}
    program = etc.import_program(programs)
    assert_well_formed(program)
    assert program.methods == ["forward", "first"]
    assert set(program.globals()) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    first_inputs = {i.target: i.global_name for i in program.signatures["first"].state}
    assert first_inputs["model.fc1.weight"] == "fc1.weight"


def test_same_name_different_tensors_get_distinct_globals():
    programs = {"forward": export(MLP(), torch.randn(2, 8)), "other": export(MLP(), torch.randn(2, 8))}
    program = etc.import_program(programs)
    assert_well_formed(program)
    assert "other/fc1.weight" in program.globals()
    other = {i.target: i.global_name for i in program.signatures["other"].state}
    assert other["fc1.weight"] == "other/fc1.weight"


def test_merge_combines_separately_imported_methods():
    model = MLP()
    first = etc.import_program(export(model, torch.randn(2, 8)))
    second = etc.import_program(export(model, torch.randn(3, 8)))
    merged = ProgramIR.merge({"forward": first, "batch3": second})
    assert_well_formed(merged)
    assert merged.methods == ["forward", "batch3"]
    assert str(merged.func("batch3").type) == "(tensor<3x8xf32>) -> tensor<3x4xf32>"
    assert len(merged.globals()) == 4 and set(merged.constants) == set(first.constants)


def test_user_inputs_are_function_arguments_in_order():
    program = etc.import_program(export(TransformerBlock(), torch.randn(1, 3, 16),
                                        torch.zeros(1, 1, 3, 3, dtype=torch.bool)))
    signature = program.signatures["forward"]
    assert signature.user_inputs == ["x", "mask"]
    assert [i.kind for i in signature.inputs if i.kind == USER_INPUT] == [USER_INPUT, USER_INPUT]


# ------------------------------------------------------------------ errors
def assert_located(error: UnsupportedConstructError, function, text):
    assert error.location is not None
    file, line, _col = error.location.rsplit(":", 2)
    assert (file, int(line)) == (THIS_FILE, line_of(function, text)), error.location
    assert str(error).startswith(f"{error.location}: error: ")


def test_map_over_a_dynamic_size_is_a_located_error():
    rows = torch.export.Dim("rows", min=1, max=8)
    program = torch.export.export(DynamicMap(), (torch.randn(2, 3),), dynamic_shapes=({0: rows},))
    with pytest.raises(UnsupportedConstructError, match=r"map/scan needs inputs with one static leading size") as caught:
        etc.import_program(program)
    assert_located(caught.value, DynamicMap.forward, "control_flow_map(")


def test_non_aten_operator_is_a_located_error():
    @torch.library.custom_op("etc_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    class UsesCustomOp(nn.Module):
        def forward(self, x):
            return twice(x).relu()

    with pytest.raises(UnsupportedConstructError, match="etc_test::twice is not an ATen operator") as caught:
        etc.import_program(export(UsesCustomOp(), torch.randn(3)))
    assert_located(caught.value, UsesCustomOp.forward, "twice(x)")


def test_input_mutation_is_a_located_error():
    with pytest.raises(UnsupportedConstructError, match="writes into its input 'x'") as caught:
        etc.import_program(export(WritesInput(), torch.randn(3)))
    assert_located(caught.value, WritesInput.forward, "x.mul_")


def test_unsupported_dtype_is_a_located_error():
    with pytest.raises(UnsupportedConstructError, match="complex64") as caught:
        etc.import_program(export(ComplexValued(), torch.randn(3, 2)))
    assert_located(caught.value, ComplexValued.forward, "view_as_complex")


def test_bad_arguments_are_reported():
    with pytest.raises(etc.EtcError, match="not a torch.export.ExportedProgram"):
        etc.import_program({"forward": MLP()})
    with pytest.raises(etc.EtcError, match="expects an ExportedProgram"):
        etc.import_program(MLP())


class _SquareRows(torch.nn.Module):
    """[d, d, 6] -> [d * d, 6]: torch writes the size d * d as `d ** 2` (operator.pow) or as a
    product, depending on its sympy caches."""

    def forward(self, x):
        b, t, k = x.shape
        return (x.reshape(b * t, k) * 2).relu()


def test_a_squared_symbolic_size_imports_and_runs():
    """Found by the compiler fuzzer: to_edge refused "symbolic size computation 'pow'". The
    decomposed graph's d * d is written as d ** 2 here (torch's own form, which it picks by its
    caches), then imported and run as to_edge does."""
    import operator

    from etc.compiler.importer import import_program
    from etc.compiler.program import EDGE_PIPELINE, EdgeCompileConfig, EdgeProgram, annotate_upper_bounds, decompose
    from etc.passes.pipeline import run_pipeline
    from etc.runtime import Runtime

    d = torch.export.Dim("d", min=2, max=8)
    ep = torch.export.export(_SquareRows(), (torch.randn(3, 3, 6),), dynamic_shapes=({0: d, 1: d},))
    decomposed = decompose({"forward": ep}, EdgeCompileConfig())
    squares = 0
    for node in decomposed["forward"].graph.nodes:
        same = [str(getattr(a, "meta", {}).get("val")) for a in node.args]
        if node.target is operator.mul and len(same) == 2 and same[0] == same[1] and same[0] != "None":
            node.target, node.args = operator.pow, (node.args[0], 2)
            squares += 1
        squares += node.target is operator.pow
    assert squares
    program_ir = import_program(decomposed)
    annotate_upper_bounds(program_ir, decomposed)
    run_pipeline(program_ir.module, EDGE_PIPELINE)
    edge = EdgeProgram(program_ir, exported_programs={"forward": ep}, config=EdgeCompileConfig())
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for n in (2, 5, 8):
        x = torch.randn(n, n, 6)
        torch.testing.assert_close(method.execute([x])[0], _SquareRows()(x), rtol=1e-5, atol=1e-5)
