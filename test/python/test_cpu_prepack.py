"""Compile-time pre-packing of constant operands (etc-cpu-prepack-constants)."""

import numpy as np
import pytest
import torch
from torch_mlir import ir

from etc.passes.pipeline import run_pipeline
from etc.targets.cpu.entry_args import arg_attrs, arg_label, entry_function
from etc.targets.cpu.passes.prepack_constants import PACK_ATTR, evaluate_pack
from etc.targets.cpu.pipeline import label_arguments

CHAIN = """
func.func @f(%x: tensor<3x8xf32>, %w: tensor<4x8xf32>, %big: tensor<2x2xf32>) -> (tensor<3x6xf32>, tensor<8x3xf32>, tensor<40x40xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %t = linalg.transpose ins(%w : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %p = tensor.pad %t low[0, 0] high[0, 2] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<8x4xf32> to tensor<8x6xf32>
  %e2 = tensor.empty() : tensor<3x6xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%e2 : tensor<3x6xf32>) -> tensor<3x6xf32>
  %mm = linalg.matmul ins(%x, %p : tensor<3x8xf32>, tensor<8x6xf32>) outs(%fill : tensor<3x6xf32>) -> tensor<3x6xf32>
  %e3 = tensor.empty() : tensor<8x3xf32>
  %xt = linalg.transpose ins(%x : tensor<3x8xf32>) outs(%e3 : tensor<8x3xf32>) permutation = [1, 0]
  %grown = tensor.pad %big low[0, 0] high[38, 38] {
  ^bb0(%i: index, %j: index):
    tensor.yield %zero : f32
  } : tensor<2x2xf32> to tensor<40x40xf32>
  return %mm, %xt, %grown : tensor<3x6xf32>, tensor<8x3xf32>, tensor<40x40xf32>
}
"""


@pytest.fixture
def folded():
    rng = np.random.default_rng(0)
    constants = {"w": rng.standard_normal((4, 8)).astype(np.float32),
                 "big": rng.standard_normal((2, 2)).astype(np.float32)}
    from etc.targets.cpu.lowering.context import shared_context

    with shared_context(), ir.Location.unknown():
        module = ir.Module.parse(CHAIN)
        label_arguments(entry_function(module.operation), [("input", "0"), ("constant", "w"), ("constant", "big")])
        run_pipeline(module, "builtin.module(etc-cpu-prepack-constants)")
        attrs = arg_attrs(entry_function(module.operation))
        kinds = [arg_label(a) for a in attrs]
        for a, (kind, name) in zip(attrs, kinds):
            if PACK_ATTR in a:  # what the cpu target does when it writes the blob
                constants[name] = evaluate_pack(ir.StringAttr(a[PACK_ATTR]).value, constants[name.split("#")[0]])
        yield module, str(module), kinds, constants


def test_layout_chain_of_a_weight_becomes_one_packed_constant(folded):
    module, text, kinds, constants = folded
    assert kinds == [("input", "0"), ("constant", "big"), ("constant", "w#packed0")]
    np.testing.assert_array_equal(constants["w#packed0"], np.pad(constants["w"].T, [(0, 0), (0, 2)]))
    # the transpose and pad of the weight are gone; the matmul reads the new argument
    body = [line for line in text.splitlines() if "etc.cpu.pack" not in line]  # the chain lives on in the attribute
    assert not any("tensor<4x8xf32>" in line for line in body)
    assert "linalg.matmul ins(%arg0, %arg2 : tensor<3x8xf32>, tensor<8x6xf32>)" in text
    module.operation.verify()


def test_inputs_and_growing_pads_still_run_at_call_time(folded):
    _, text, kinds, _ = folded
    assert "linalg.transpose ins(%arg0" in text  # derived from an input: not known at compile time
    assert "high[38, 38]" in text  # 2x2 -> 40x40 would ship 400x the bytes
    assert ("constant", "big") in kinds


def test_prepacked_convolutions_match_torch():
    """MobileNet's late 1x1 convolutions: few pixels, packed and transposed filter in the blob."""
    import etc
    from etc.compiler.delegation import delegate
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.runtime import CompiledFunction

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(128, 256, 1), torch.nn.ReLU(),
                                torch.nn.Conv2d(256, 96, 3, padding=1)).eval()
    x = torch.randn(1, 128, 3, 3)
    program_ir = etc.to_edge(torch.export.export(model, (x,))).program_ir
    delegate(program_ir, CpuPartitioner())
    fn = CompiledFunction(program_ir.delegate_blobs[0])
    names = [a["name"] for a in fn.args if a["kind"] == "constant"]
    assert any("#packed" in n for n in names), names
    with torch.no_grad():
        expected = model(x).numpy()
    got = fn(x.numpy())
    assert np.abs(got - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())
