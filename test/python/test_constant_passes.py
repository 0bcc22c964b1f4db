"""etc-fold-constants and etc-fuse-batch-norm: what they rewrite, and that the
numbers do not change (checked against eager torch through the edge program)."""

import numpy as np
import pytest
import torch
from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from etc.compiler.importer import import_program
from etc.compiler.program import EdgeCompileConfig, decompose
from etc.dialects import make_context
from etc.passes.constant_table import ConstantTable
from etc.passes.convert_aten_to_edge import convert_aten_to_edge
from etc.passes.fold_constants import fold_constants
from etc.passes.fuse_batch_norm import fuse_batch_norm


def _edge_program(model, *inputs):
    decomposed = decompose({"forward": torch.export.export(model, inputs)}, EdgeCompileConfig())
    program = import_program(decomposed)
    with program.context:
        convert_aten_to_edge(program.module)
        PassManager.parse("builtin.module(cse, canonicalize)").run(program.module.operation)
    return program


def _ops(program):
    return [op.operation.name for op in program.func("forward").regions[0].blocks[0].operations]


def test_inline_dense_globals_fold():
    """The etc-opt form: weights inline as dense globals."""
    with make_context():
        module = ir.Module.parse("""
        ml_program.global private @w(dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>) : tensor<3x2xf32>
        func.func @forward(%x: tensor<4x3xf32>) -> tensor<4x2xf32> {
          %w = ml_program.global_load_const @w : tensor<3x2xf32>
          %t = "edge.permute"(%w) {dims = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
          %tt = "edge.permute"(%t) {dims = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
          %y = "edge.mm"(%x, %tt) : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
          return %y : tensor<4x2xf32>
        }""")
        assert fold_constants(module) == 2
        module.operation.verify()
        text = str(module)
        # permute(permute(w)) == w: folded, and the result is recognised as @w itself
        # (no second copy), while the intermediate transpose, now unused, is gone.
        assert "edge.permute" not in text and "@folded" not in text
        assert '"edge.mm"(%arg0, %w)' in text
        np.testing.assert_array_equal(ConstantTable(module).get("w"), [[1, 2], [3, 4], [5, 6]])


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.register_buffer("mask", torch.arange(4) % 2 == 0)

    def forward(self, x):
        return torch.where(self.mask, self.fc(x), 0.0)


def test_weight_transposes_and_masks_fold_without_changing_results():
    model = Linear().eval()
    program = _edge_program(model, torch.randn(3, 8))
    before = _ops(program)
    assert "edge.permute" in before
    assert fold_constants(program.module) >= 1
    program.verify()
    assert "edge.permute" not in _ops(program)
    # The folded weight is the transposed weight.
    transposed = [a for a in program.constants.values() if a.shape == (8, 4)]
    np.testing.assert_allclose(transposed[0], model.fc.weight.detach().numpy().T)


class ConvBn(torch.nn.Module):
    def __init__(self, bias):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        self.bn = torch.nn.BatchNorm2d(6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_fuses_into_conv_numerically_exact(bias):
    model = ConvBn(bias).eval()
    x = torch.randn(2, 3, 8, 8)
    program = _edge_program(model, x)
    assert fuse_batch_norm(program.module) == 1
    program.verify()
    ops = _ops(program)
    assert "edge.p_native_batch_norm_legit_no_training" not in ops and "edge.convolution" in ops
    # Re-run the fused convolution with torch from the program's own constants.
    conv = next(op for op in program.func("forward").regions[0].blocks[0].operations
                if op.operation.name == "edge.convolution")
    table = ConstantTable(program.module)
    weight = torch.from_numpy(table.of_value(conv.operands[1]))
    bias_value = torch.from_numpy(table.of_value(conv.operands[2]))
    fused = torch.relu(torch.nn.functional.conv2d(x, weight, bias_value, padding=1))
    torch.testing.assert_close(fused, model(x), rtol=1e-5, atol=1e-5)


def test_batch_norm_after_shared_conv_is_left_alone():
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    program = _edge_program(Shared().eval(), torch.randn(1, 3, 4, 4))
    assert fuse_batch_norm(program.module) == 0
