"""Interop of quantized portable programs with the real ExecuTorch (test-only dependency):

- etc's program of a CpuQuantizer-quantized model runs on stock ExecuTorch (its portable
  kernels plus its quantized kernel library) and gives the eager quantized model's output;
- ExecuTorch's own portable program of an XNNPACKQuantizer-quantized model (no delegate)
  runs on etc's runtime;
- the same quantized models compiled with `CpuPartitioner` (int8 native code, the rest on ExecuTorch's
  quantized kernels) run on stock ExecuTorch with etc's cpu backend, through `executorch.runtime` and
  `etc_runner`, and for AArch64 under qemu-aarch64.
"""

import warnings

import numpy as np
import pytest
import torch

import executorch_runner
pytest.importorskip("torchao")
executorch_runtime = pytest.importorskip("executorch.runtime")
exir = pytest.importorskip("executorch.exir")

import etc  # noqa: E402
from etc.runtime import Runtime  # noqa: E402
from etc.models.quantized import quantized_zoo, sqnr  # noqa: E402
from etc.models.zoo import ZOO  # noqa: E402


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


def _cpu_program(ep, **target):
    from etc.targets.cpu import CpuPartitioner

    return etc.to_edge(ep).to_backend(CpuPartitioner(**target)).to_executorch()


INT8_MODELS = [("resnet8", False), ("mlp", False)]  # static int8: convolutions, linears (8da4w: the LLM test)


@pytest.mark.parametrize("name,dynamic", INT8_MODELS)
def test_cpu_delegated_int8_program_runs_on_executorch(name, dynamic, tmp_path):
    from etc.runtime import executorch_backend

    _load_executorch_quantized_kernels()
    executorch_backend.load()
    zoo_model, converted, ep = quantized_zoo(name, dynamic)
    program = _cpu_program(ep)
    inputs = list(zoo_model.example_inputs)
    (got,) = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward").execute(inputs)
    with torch.no_grad():
        want = converted(*inputs)
    assert sqnr(want, got) >= 30
    (ours,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy() for x in inputs])
    assert sqnr(torch.as_tensor(np.asarray(ours)), got) >= 40  # the same int8 code; ExecuTorch's portable kernels
    executorch_runner.run("host", program.buffer, [("forward", [x.numpy() for x in inputs], [want.numpy()])],
                          tmp_path, tolerance=0.05)


@executorch_runner.needs_aarch64
@pytest.mark.parametrize("name,dynamic", INT8_MODELS)
def test_cpu_delegated_int8_program_runs_on_executorch_on_aarch64(name, dynamic, tmp_path):
    zoo_model, converted, ep = quantized_zoo(name, dynamic)
    program = _cpu_program(ep, target="aarch64-linux-gnu")
    inputs = [x.numpy() for x in zoo_model.example_inputs]
    with torch.no_grad():
        want = converted(*zoo_model.example_inputs).numpy()
    executorch_runner.run("aarch64-linux-gnu", program.buffer, [("forward", inputs, [want])], tmp_path, tolerance=0.05)
