"""No silent fallback: every heavy op of every zoo model and every layer of the benchmark sweep
takes its tuned path in the cpu target, and the program still matches eager.

The cpu pipeline records one decision per contraction, convolution, window op and reduction
(targets/cpu/decisions.py); the delegation report prints them. A decision that is not a tuned
path ("NOT TUNED ... loops: <reason>") fails here, so a strategy that stops applying is a failing
test, not a slower program. The layer sweep (bench/layers.py) is the benchmark's own list,
at the sizes real models have (224x224 images, 32k vocabularies, 128-token sequences).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner
from etc.bench.layers import LAYERS, build
from etc.models.zoo import BENCH_ONLY, ZOO

# Zoo models the cpu target does not take whole yet, and why (the report says it too).
NOT_DELEGATED: dict = {}


def compile_cpu(programs):
    edge = etc.to_edge(programs).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    return edge, report


def backend_lines(report) -> list[str]:
    return [line for lines in report.backend_lines.values() for line in lines]


def assert_tuned(report, name: str) -> None:
    lines = backend_lines(report)
    fallbacks = [line for line in lines if line.startswith("NOT TUNED")]
    assert not fallbacks, f"{name}: ops off their tuned path:\n" + "\n".join(fallbacks) + f"\n\n{report}"


def run_program(edge, inputs: list) -> list:
    program = edge.to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    return [np.asarray(o) for o in method.execute(inputs)]


def max_rel_error(got, want) -> float:
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max() / scale)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_every_layer_of_the_sweep_takes_its_tuned_path(name):
    module, inputs = build(name)
    edge, report = compile_cpu(torch.export.export(module, inputs))
    assert report.partitions == 1 and not report.portable, str(report)
    assert_tuned(report, name)
    assert backend_lines(report), f"{name}: no decision recorded\n{report}"
    got = run_program(edge, list(inputs))
    with torch.no_grad():
        want = module(*inputs)
    assert max_rel_error(got[0], want.numpy()) < 1e-4, name


@pytest.mark.parametrize("name", sorted(ZOO) + sorted(BENCH_ONLY))
def test_every_zoo_model_takes_its_tuned_path(name):
    model = (ZOO.get(name) or BENCH_ONLY[name])()
    edge, report = compile_cpu(model.export())
    if name in NOT_DELEGATED:
        assert report.partitions == 0 or report.portable, f"{name} is delegated now: drop it from NOT_DELEGATED"
        return
    assert not report.portable, str(report)
    assert_tuned(report, name)
