"""The cpu target's dynamic linears as native code: int8 activations quantized at run time (per row:
torchao's Int8DynamicActivationIntxWeightConfig; per tensor: CpuQuantizer's dynamic config) x int4
weights in groups (8da4w) or int8 weights per channel or in groups (lowering/quantized_dynamic.py,
etc-cpu-int8-kernels' vpdpbusd kernel with the weights made unsigned operands in registers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchao")

import etc  # noqa: E402
from etc.runtime import Runtime  # noqa: E402
from etc.targets.cpu import CpuPartitioner  # noqa: E402
from etc.models.quantized import sqnr  # noqa: E402
from cpu_target_helpers import host_has  # noqa: E402

X86 = "x86_64-unknown-linux-gnu"



# The four paths: the AVX-512 VNNI kernel (zmm), the AVX-VNNI one (ymm), AVX2's vpmaddwd pairs (x86-64-v3),
# none (x86-64-v2: plain loops).
TARGETS = {
    "avx512-vnni": pytest.param({}, marks=pytest.mark.skipif(not host_has("avx512vnni", "avx512bw"),
                                                             reason="the host has no AVX-512 VNNI")),
    "avx-vnni": pytest.param(dict(target=X86, cpu="alderlake", features="+avx2,+fma,+f16c,+avxvnni"),
                             marks=pytest.mark.skipif(not host_has("avxvnni"), reason="the host has no AVX-VNNI")),
    "avx2-madd": pytest.param(dict(target="x86-64-v3"), marks=pytest.mark.skipif(not host_has("avx2", "fma"),
                                                                                 reason="the host has no AVX2")),
    "none": pytest.param(dict(target=X86, cpu="nehalem", features="+sse4.2,+popcnt"),
                         marks=pytest.mark.skipif(not host_has("sse4.2"), reason="the host has no SSE4.2")),
}


def _config(group: int | None, weight_dtype=torch.int4):
    """torchao's dynamic int8 activations x `weight_dtype` weights in groups of `group` (None: per
    output channel)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerAxis, PerGroup

    return Int8DynamicActivationIntxWeightConfig(
        weight_dtype=weight_dtype, weight_granularity=PerAxis(0) if group is None else PerGroup(group))


class _Block(nn.Module):
    def __init__(self, k: int, hidden: int, out: int):
        super().__init__()
        self.up = nn.Linear(k, hidden, bias=False)
        self.down = nn.Linear(hidden, out, bias=True)

    def forward(self, x):
        return self.down(nn.functional.silu(self.up(x)))


def _program(model, example, dynamic_shapes=None, **target):
    ep = torch.export.export(model, example, dynamic_shapes=dynamic_shapes)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(**target))
    portable = etc.to_edge(ep).to_executorch()
    return edge, edge.to_executorch(), portable


def _method(program):
    return Runtime.get().load_program(program.buffer).load_method("forward")


@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
@pytest.mark.parametrize("bits, k, n, group, bias", [
    (4, 64, 72, 32, True), (4, 96, 101, 32, False), (4, 48, 37, 16, True), (4, 128, 33, 64, True),
    (4, 288, 130, 32, False), (8, 70, 37, None, True), (8, 96, 101, 32, False),
    (8, 200, 40, None, False), (4, 256, 40, 128, True)])
def test_dynamic_linear_matches_eager_and_portable_for_one_and_several_rows(target, bits, k, n, group, bias):
    """Odd column counts (a partial 16-column panel, several panel groups), K in an odd number of
    groups, group sizes 16, 32, 64, int8 weights per channel with K = 70 (not a whole number of
    4-byte dot-product groups); one row (decode), a few (a partial row tile) and the bound. Groups
    of more than 4 byte rows run a K loop (K_UNROLL rows per step): K = 70 and 200 (int8, a
    remainder of 2 rows after it), 128 (int4, 16 rows: no remainder)."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = nn.Linear(k, n, bias=bias).eval()
    quantize_(model, _config(group, torch.int4 if bits == 4 else torch.int8))
    seq = torch.export.Dim("seq", min=1, max=16)
    edge, program, portable = _program(model, (torch.randn(5, k),), ({0: seq},), **target)
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    method, reference = _method(program), _method(portable)
    for length in (1, 3, 16):
        x = torch.randn(length, k)
        with torch.no_grad():
            want = model(x)
        got = torch.as_tensor(np.asarray(method.execute([x])[0]))
        ref = torch.as_tensor(np.asarray(reference.execute([x])[0]))
        # The activation quantization is the portable kernel's float32 arithmetic (the same int8
        # values); the sums differ from its float32 matmul only in rounding.
        assert sqnr(ref, got) >= 100, (length, sqnr(ref, got))
        assert sqnr(want, got) >= 90, (length, sqnr(want, got))


@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
def test_8da4w_block_with_a_dynamic_sequence_matches_eager(target):
    """Two linears around a SiLU: the second's int8 activations come from native float code (a
    value on either side of a rounding step may quantize one step apart from eager's)."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = _Block(64, 96, 37).eval()
    quantize_(model, _config(32))
    seq = torch.export.Dim("seq", min=1, max=16)
    edge, program, _ = _program(model, (torch.randn(1, 5, 64),), ({1: seq},), **target)
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    method = _method(program)
    for length in (1, 7, 16):
        x = torch.randn(1, length, 64)
        with torch.no_grad():
            want = model(x)
        assert sqnr(want, torch.as_tensor(np.asarray(method.execute([x])[0]))) >= 60, length


def test_8da4w_block_on_two_and_three_threads_gives_one_threads_bytes():
    """Per-token activations: each thread quantizes its own rows, then takes its panel groups (or
    the row tiles of the last panels; lit int8-kernels.mlir checks the marks): every length gives
    one thread's bytes, call after call. (The SiLU and the output's copy over the dynamic length
    are default loops, still on thread 0: the report says so.)"""
    from torchao.quantization import quantize_

    from etc.compiler.delegation import CompileSpec

    torch.manual_seed(0)
    model = _Block(64, 224, 37).eval()  # 14 panels: 3 groups of 4, then 2 beside them
    quantize_(model, _config(32))
    seq = torch.export.Dim("seq", min=1, max=40)
    ep = torch.export.export(model, (torch.randn(1, 5, 64),), dynamic_shapes=({1: seq},))
    one = _method(etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch())
    xs = [torch.randn(1, length, 64) for length in (1, 7, 40)]
    want = [np.asarray(one.execute([x])[0]) for x in xs]
    for threads in (2, 3):
        edge = etc.to_edge(ep).to_backend(CpuPartitioner(
            num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")]))
        assert "contraction -> gemm x2" in edge.delegation_info(), edge.delegation_info()
        method = _method(edge.to_executorch())
        for _ in range(3):  # a race would show now and then
            for x, w in zip(xs, want):
                np.testing.assert_array_equal(np.asarray(method.execute([x])[0]), w)


def test_8da4w_llama_is_fully_delegated_and_matches_eager():
    import copy

    from torchao.quantization import quantize_

    from etc.llm.export import export_decoder
    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    model = Llama(LlamaConfig(n_layers=2, full_logits=True)).eval()
    quantize_(model, _config(32), filter_fn=lambda module, fqn: isinstance(module, nn.Linear))
    reference = copy.deepcopy(model)
    programs = export_decoder(model, max_seq_len=8)
    edge = etc.to_edge(programs).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report and "etc_quantized_linear_dynamic" in report, report
    method = _method(edge.to_executorch())
    tokens, positions = torch.randint(0, 512, (1, 5)), torch.arange(5)
    with torch.no_grad():
        want = reference(tokens, positions)
        step = reference(tokens[:, :1], torch.tensor([5]))
    assert sqnr(want, torch.as_tensor(np.asarray(method.execute([tokens, positions])[0]))) >= 60
    assert sqnr(step, torch.as_tensor(np.asarray(method.execute([tokens[:, :1], torch.tensor([5])])[0]))) >= 60


def _decisions(**target) -> list:
    from torchao.quantization import quantize_

    from etc.targets.cpu import compile_function

    torch.manual_seed(0)
    model = _Block(64, 96, 40).eval()
    quantize_(model, _config(32))
    edge = etc.to_edge(torch.export.export(model, (torch.randn(3, 64),)))
    edge.transform(CpuPartitioner.pipeline)  # the quantized computations folded, as to_backend does
    fn = [op for op in edge.program_ir.module.body.operations if op.operation.name == "func.func"][0]
    _, debug = compile_function(fn.operation, edge.program_ir.constants, keep_ir=True, **target)
    return debug


@pytest.mark.skipif(not host_has("avx512vnni", "avx512bw"), reason="the host has no AVX-512 VNNI")
def test_host_8da4w_kernel_is_vpdpbusd_on_zmm():
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import host_target, init_llvm

    debug = _decisions()
    init_llvm()
    host = host_target()
    tm = llvm.Target.from_triple(host.triple).create_target_machine(cpu=host.cpu, features=host.features, opt=3)
    asm = tm.emit_assembly(llvm.parse_assembly(debug["llvm_ir"]))
    dots = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert dots and all("%zmm" in line for line in dots)
    assert [d.path for d in debug["decisions"] if d.kind == "contraction"] == ["gemm", "gemm"]


@pytest.mark.parametrize("target", [dict(target=X86, cpu="nehalem", features="+sse4.2,+popcnt"),
                                    dict(target="aarch64")], ids=["x86-64-v2", "aarch64"])
def test_without_a_dot_product_the_8da4w_linear_is_plain_loops_and_says_why(target):
    debug = _decisions(**target)
    assert debug["object_bytes"] > 0
    assert [(d.path, d.reason) for d in debug["decisions"] if d.kind == "contraction"] == [
        ("loops", "the target has no int8 dot product (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddwd): a dynamic "
                  "linear as plain loops on the weight's bytes")] * 2


def test_avx2_8da4w_kernel_is_vpmaddwd_pairs_on_ymm():
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm, resolve_target

    debug = _decisions(target="x86-64-v3")
    init_llvm()
    t = resolve_target("x86-64-v3")
    tm = llvm.Target.from_triple(t.triple).create_target_machine(cpu=t.cpu, features=t.features, opt=3)
    asm = tm.emit_assembly(llvm.parse_assembly(debug["llvm_ir"]))
    pairs = [line for line in asm.splitlines() if "vpmaddwd" in line]
    assert pairs and all("%ymm" in line for line in pairs) and "vpdpbusd" not in asm
    assert [d.path for d in debug["decisions"] if d.kind == "contraction"] == ["gemm", "gemm"]


def test_pt2e_dynamic_per_tensor_linears_are_native_and_match_the_converted_model():
    """CpuQuantizer's dynamic config: choose_qparams over the whole activation (its eps), int8
    weights per channel; two linears around a GELU, a 3-D input (the linears see [T, K] rows)."""
    from etc.models.quantized import quantize
    from etc.models.zoo import ZooModel

    class Ffn(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(48, 136), nn.Linear(136, 40)

        def forward(self, x):
            return self.down(nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    x = torch.randn(1, 9, 48)
    converted, ep = quantize(ZooModel("ffn", Ffn().eval(), (x,)), is_dynamic=True)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "0 op(s) on portable kernels" in report and "etc_quantized_linear_dynamic x2" in report, report
    native, portable = _method(edge.to_executorch()), _method(etc.to_edge(ep).to_executorch())
    for scale in (1.0, 30.0):  # the per-call range follows the input
        x = scale * torch.randn(1, 9, 48)
        with torch.no_grad():
            want = converted(x)
        got = torch.as_tensor(np.asarray(native.execute([x])[0]))
        assert sqnr(want, got) >= 60
        assert sqnr(torch.as_tensor(np.asarray(portable.execute([x])[0])), got) >= 60


def test_asymmetric_int8_weights_stay_portable_and_the_report_says_why():
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis
    from torchao.quantization.quant_primitives import MappingType

    torch.manual_seed(0)
    model = _Block(64, 96, 40).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0),
                                                           weight_mapping_type=MappingType.ASYMMETRIC))
    edge = etc.to_edge(torch.export.export(model, (torch.randn(3, 64),))).to_backend(CpuPartitioner())
    report = edge.delegation_info()
    assert "portable   edge.etc_quantized_linear_dynamic" in report
    assert "8-bit weights with zero points (the cpu target takes symmetric ones)" in report


def test_8da4w_with_bfloat16_group_scales_matches_eager():
    """torchao's weight_scale_dtype=bfloat16: the program holds the scales as bfloat16 (uint16
    bits in etc's constant table); read as integers they made every output wrong (1.9e6 off)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model = nn.Linear(64, 40, bias=False).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32),
                                                           weight_scale_dtype=torch.bfloat16))
    x = torch.randn(3, 64)
    edge, program, portable = _program(model, (x,))
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    with torch.no_grad():
        want = model(x)
    for prog in (program, portable):
        assert sqnr(want, torch.as_tensor(np.asarray(_method(prog).execute([x])[0]))) >= 90


def test_8da4w_column_sums_are_derived_at_load_not_stored():
    """The zero-point correction's column sums C[n] (one float per output column: 128 KB of a
    32k-vocabulary head) are a constant the blob names with a recipe and no bytes; the runtime
    computes them from the packed weight and scales, bit for bit what the compiler computed."""
    from torchao.quantization import quantize_

    from etc.targets.cpu import blob as cpu_blob

    torch.manual_seed(0)
    model = _Block(64, 96, 37).eval()
    quantize_(model, _config(32))
    edge, program, _ = _program(model, (torch.randn(3, 64),))
    (data,) = edge.program_ir.delegate_blobs
    parsed = cpu_blob.deserialize(data)
    derived = {n: c for n, c in parsed.metadata["constants"].items() if "derive" in c}
    assert sorted(c["shape"] for c in derived.values()) == [[37], [96]]
    for name, info in derived.items():
        assert info["nbytes"] == 0 and info["derive"]["op"] == "int4_colsum" and name.endswith("#colsum")
        assert info["derive"]["weight"].endswith("#packed0") and info["derive"]["scales"].endswith("#packed0")
        sums = parsed.constant(name)
        assert sums.dtype == np.float32 and sums.shape == tuple(info["shape"]) and not sums.flags.writeable
    x = torch.randn(3, 64)
    with torch.no_grad():
        want = model(x)
    assert sqnr(want, torch.as_tensor(np.asarray(_method(program).execute([x])[0]))) >= 60


def test_8da4w_linears_with_equal_weights_share_their_derived_column_sums():
    """Two Linears with the same weight values (a tied or copied weight): the folded program keeps
    one int4 constant for both, so both ask for the same column sums, one constant (asking twice
    was a LoweringError)."""
    from torchao.quantization import quantize_

    from etc.targets.cpu import blob as cpu_blob

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(64, 64, bias=False)
            self.b = nn.Linear(64, 64, bias=False)
            self.b.weight = nn.Parameter(self.a.weight.detach().clone())

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    model = Two().eval()
    quantize_(model, _config(32))
    x = torch.randn(3, 64)
    edge, program, _ = _program(model, (x,))
    assert " 0 op(s) on portable kernels" in edge.delegation_info()
    (data,) = edge.program_ir.delegate_blobs
    constants = cpu_blob.deserialize(data).metadata["constants"]
    assert len([n for n, c in constants.items() if "derive" in c]) == 1
    with torch.no_grad():
        want = model(x)
    assert sqnr(want, torch.as_tensor(np.asarray(_method(program).execute([x])[0]))) >= 60
