"""The cpu target's kernel toolkit (targets/cpu/kernel_ir.py) and the front of its pipeline as passes:
the text writer and the one splice, the partitioner's program pipeline, trials for its own target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_mlir import ir

import etc
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu.kernel_ir import KernelText, f32_literal, scalar_literal, splice, tensor_type


def test_kernel_text_declares_index_constants_once_ahead_and_names_sections_apart():
    t = KernelText()
    pre = t.section()
    a = t.add("%x", 4)
    b = t.mul(a, 4)
    pre.emit("%y = arith.constant 1 : index")
    with t.nested():
        t.emit(f"{t.fresh('z')} = arith.addi {b}, {t.index(-1)} : index")
    text = t.function("k", ["%x: index"], ["index"], [b], sections=[pre, t])
    lines = text.splitlines()
    assert lines[1:3] == ["  %idxm1 = arith.constant -1 : index", "  %idx4 = arith.constant 4 : index"]
    assert lines[3] == "  %y = arith.constant 1 : index"  # the section first, in the order asked
    assert lines[-3].startswith("    %z")  # nested one level deeper
    names = [line.split("=")[0].strip() for line in lines if "=" in line]
    assert len(names) == len(set(names))
    with ir.Context():
        ir.Module.parse(text)  # valid MLIR


def test_splice_puts_the_body_at_the_op_it_replaces_with_its_location():
    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse('func.func @f(%a: f32) -> f32 {\n  %r = "test.op"(%a) : (f32) -> f32 loc("user.py":3:4)\n'
                                 '  return %r : f32\n}')
        op = module.body.operations[0].regions[0].blocks[0].operations[0].operation
        t = KernelText()
        t.emit("%two = arith.constant 2.0 : f32")
        t.emit("%r = arith.mulf %arg0, %two : f32")
        (result,) = splice(t.function("k", ["%arg0: f32"], ["f32"], ["%r"]), [op.operands[0]], op)
        op.results[0].replace_all_uses_with(result)
        op.erase()
        body = [o.operation for o in module.body.operations[0].regions[0].blocks[0].operations]
        assert [o.name for o in body] == ["arith.constant", "arith.mulf", "func.return"]
        assert body[1].operands[0] == module.body.operations[0].regions[0].blocks[0].arguments[0]
        assert all(str(o.location) == 'loc("user.py":3:4)' for o in body[:2])  # the replaced op's line


def test_literals_are_exact_float32_values():
    for value in (0.1, 1e-5, -2.5, float("inf"), float("-inf"), 3.4028235e38):
        bits = f32_literal(value)
        assert np.frombuffer(int(bits, 16).to_bytes(4, "little"), np.float32)[0] == np.float32(value)
    assert scalar_literal(True) == "true" and scalar_literal(float("-inf")) == "0xFF800000"
    assert tensor_type([2, -1, 3], "i8") == "tensor<2x?x3xi8>"


class _Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def test_the_partitioner_folds_quantized_computations_as_a_visible_program_pipeline():
    edge = etc.to_edge(torch.export.export(_Tiny(), (torch.randn(2, 8),))).to_backend(CpuPartitioner())
    assert "program pipeline: builtin.module(etc-fold-quantized)" in edge.delegation_info()


@pytest.mark.parametrize("target, triple", [("aarch64-linux-gnu", "aarch64-unknown-linux-gnu"),
                                            ("cortex-m7", "thumbv7em-unknown-none-eabihf")])
def test_support_trials_lower_for_the_partitioners_own_target(monkeypatch, target, triple):
    """No hidden x86-64: a trial lowering (the whole method, then an op alone) runs the pipeline
    for the target the delegate is compiled for."""
    from etc.targets.cpu.lowering import support
    from etc.targets.cpu import pipeline

    seen = []
    real = pipeline.run_cpu_pipeline

    def spy(module, target_, **kwargs):
        seen.append(target_.triple)
        return real(module, target_, **kwargs)

    monkeypatch.setattr(pipeline, "run_cpu_pipeline", spy)
    monkeypatch.setattr(support, "_TRIAL_CACHE", {})
    edge = etc.to_edge(torch.export.export(_Tiny(), (torch.randn(2, 8),))).to_backend(CpuPartitioner(target))
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    assert seen and set(seen) == {triple}
