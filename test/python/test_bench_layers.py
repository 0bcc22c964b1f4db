"""Smoke test of the layer sweep's registry (bench/layers.py): every entry builds and
its eager forward runs on its example inputs. No compiling here: `make bench` measures them."""

import subprocess
import sys

import pytest
import torch

from etc.bench.layers import LAYERS, build


def test_registry_imports_without_bench_only_dependencies():
    # a fresh interpreter: executorch and transformers are bench-only, the registry must not need them
    code = ("import sys, etc.bench.layers; "
            "print(sorted(m for m in ('executorch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_registry_entries_are_rated():
    for name, layer in LAYERS.items():
        assert name == layer.name
        assert layer.flops > 0 or layer.bytes > 0, f"{name}: no flops or bytes to rate it by"


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_builds_and_runs_eager(name):
    module, inputs = build(name)
    assert not module.training
    with torch.no_grad():
        out = module(*inputs)
    assert isinstance(out, torch.Tensor) and out.numel() > 0
    assert torch.isfinite(out).all(), f"{name}: non-finite eager output"
