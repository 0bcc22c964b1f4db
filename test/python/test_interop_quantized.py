"""Interop of quantized portable programs with the real ExecuTorch (test-only dependency):

- etc's program of a CpuQuantizer-quantized model runs on stock ExecuTorch (its portable
  kernels plus its quantized kernel library) and gives the eager quantized model's output;
- ExecuTorch's own portable program of an XNNPACKQuantizer-quantized model (no delegate)
  runs on etc's runtime.
"""

import warnings

import pytest
import torch

pytest.importorskip("torchao")
executorch_runtime = pytest.importorskip("executorch.runtime")
exir = pytest.importorskip("executorch.exir")

import etc  # noqa: E402
from etc.runtime import Runtime  # noqa: E402
from models.quantized import quantized_zoo, sqnr  # noqa: E402
from models.zoo import ZOO  # noqa: E402


def _load_executorch_quantized_kernels():
    import importlib

    importlib.import_module("executorch.kernels.quantized")  # registers quantized_decomposed::* kernels


@pytest.mark.parametrize("name,dynamic", [("resnet8", False), ("mlp", True)])
def test_etc_quantized_program_runs_on_executorch(name, dynamic):
    _load_executorch_quantized_kernels()
    zoo_model, converted, ep = quantized_zoo(name, dynamic)
    program = etc.to_edge(ep).to_executorch()
    method = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward")
    (got,) = method.execute(list(zoo_model.example_inputs))
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 30


@pytest.mark.parametrize("name", ["small_cnn"])
def test_executorch_quantized_program_runs_on_etc(name):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    _load_executorch_quantized_kernels()  # ExecuTorch's to_executorch needs their out variants registered
    zoo_model = ZOO[name]()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    captured = torch.export.export(zoo_model.module.eval(), zoo_model.example_inputs).module()
    prepared = prepare_pt2e(captured, quantizer)
    prepared(*zoo_model.example_inputs)
    converted = convert_pt2e(prepared)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buffer = exir.to_edge(torch.export.export(converted, zoo_model.example_inputs)).to_executorch().buffer
    method = Runtime.get().load_program(buffer).load_method("forward")
    (got,) = method.execute(list(zoo_model.example_inputs))
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs)
    assert sqnr(want, got) >= 30


def test_etc_quantized_program_is_no_larger_than_executorchs():
    """Same int8 weights, and equal constants (the all-zero per-channel zero points) stored once."""
    _load_executorch_quantized_kernels()
    _, _, ep = quantized_zoo("resnet8")
    ours = len(etc.to_edge(ep).to_executorch().buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = len(exir.to_edge(ep).to_executorch().buffer)
    assert ours <= theirs
