"""Zoo models quantized with etc's CpuQuantizer (PT2E, torchao's prepare/convert), for the tests.

`quantize(zoo_model, is_dynamic=False, quantizer=None)` calibrates on the model's example input plus a few
random batches of its shape (seeded), and returns (converted GraphModule, exported program of it).
"""

from __future__ import annotations

import functools

import torch


def quantize(zoo_model, *, is_dynamic: bool = False, is_per_channel: bool = True, calibration_batches: int = 4,
             quantizer=None):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    inputs = zoo_model.example_inputs
    captured = torch.export.export(zoo_model.module.eval(), inputs).module()
    quantizer = quantizer or CpuQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=is_per_channel, is_dynamic=is_dynamic))
    prepared = prepare_pt2e(captured, quantizer)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        prepared(*inputs)
        for _ in range(calibration_batches):
            prepared(*[torch.randn(x.shape, generator=generator) if x.dtype.is_floating_point else x
                       for x in inputs])  # (masks and token ids as given)
    converted = convert_pt2e(prepared)
    return converted, torch.export.export(converted, inputs)


def sqnr(signal, noisy) -> float:
    """Signal-to-quantization-noise ratio in dB (inf for an exact match)."""
    signal, noisy = torch.as_tensor(signal).double(), torch.as_tensor(noisy).double()
    noise = (signal - noisy).pow(2).sum()
    if float(noise) == 0.0:
        return float("inf")
    return float(10 * torch.log10(signal.pow(2).sum() / noise))


@functools.lru_cache(maxsize=None)
def quantized_zoo(name: str, is_dynamic: bool = False):
    """(zoo model, converted GraphModule, ExportedProgram) of a zoo model, quantized once per test
    session (calibration is the slow part; several test files use the same models)."""
    from etc.models.zoo import ZOO

    zoo_model = ZOO[name]()
    converted, ep = quantize(zoo_model, is_dynamic=is_dynamic)
    return zoo_model, converted, ep
