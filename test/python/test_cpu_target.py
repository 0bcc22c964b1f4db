"""The `cpu` target end to end: edge program -> CpuPartitioner -> blob -> linked object, against eager torch.

Also: objects for other triples (ELF machine checked), unsupported ops kept out of partitions
with a reason, expanded transcendentals, the generic CPU. The delegate at run time (the runtime
backend's interface, blobs this CPU cannot run, threads) is test_cpu_delegate_runtime.py.
"""

import numpy as np
import pytest
import torch

from cpu_target_helpers import ConvBnRelu, Depthwise, LayerNorm, LinearRelu, Softmax, delegated, edge_program, rel_error
from etc.errors import BackendError
from etc.targets.cpu import CpuPartitioner, blob as cpu_blob
from etc.targets.cpu.runtime import CompiledFunction


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b) * 0.5 + 1.0


class EmbedSplit(torch.nn.Module):
    """Embedding (a gather torch-mlir guards with cf.assert), split (a Tensor[] result), squeeze."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 12)

    def forward(self, tokens):
        a, b = torch.split(self.emb(tokens), [4, 8], dim=-1)
        return a.sum(-1, keepdim=True).squeeze(-1), torch.sigmoid(b)


MODELS = {
    "linear_relu": (LinearRelu, lambda: (torch.randn(4, 32),)),
    "conv_bn_relu": (ConvBnRelu, lambda: (torch.randn(2, 3, 16, 16),)),
    "depthwise": (Depthwise, lambda: (torch.randn(1, 8, 12, 12),)),
    "matmul": (MatMul, lambda: (torch.randn(3, 16, 24), torch.randn(3, 24, 8))),
    "softmax": (Softmax, lambda: (torch.randn(5, 33) * 4,)),
    "layernorm": (LayerNorm, lambda: (torch.randn(2, 7, 48),)),
    "embed_split": (EmbedSplit, lambda: (torch.randint(0, 50, (3, 5)),)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_torch_as_one_delegate(name):
    torch.manual_seed(0)
    cls, make_inputs = MODELS[name]
    model, inputs = cls().eval(), make_inputs()
    program_ir, report = delegated(model, inputs)
    assert report.partitions == 1 and not report.portable, str(report)  # whole-model mode
    fn = CompiledFunction(program_ir.delegate_blobs[0])
    got = fn(*[t.numpy() for t in inputs])
    got = got if isinstance(got, tuple) else (got,)
    with torch.no_grad():
        want = model(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        assert rel_error(g, w.numpy()) <= 1e-4, name


@pytest.mark.parametrize("target, machine, linked", [("aarch64-linux-gnu", 183, True), ("cortex-m7", 40, False)])
def test_cross_target_objects(target, machine, linked):
    """AArch64 code is linked into an image (etc's loaders run it on AArch64 Linux); Cortex-M code,
    which no loader runs, leaves the blob without one (a static library runs it)."""
    torch.manual_seed(0)
    program_ir, report = delegated(LinearRelu(), (torch.randn(4, 32),), target=target)
    assert report.partitions == 1
    parsed = cpu_blob.deserialize(program_ir.delegate_blobs[0])
    assert parsed.image.machine == machine and (parsed.image.size > 0) == linked
    assert parsed.metadata["triple"].startswith(target.split("-")[0] if target != "cortex-m7" else "thumbv7em")
    # Not runnable here: refused at init, never linked.
    with pytest.raises(BackendError, match="compiled for"):
        CompiledFunction(program_ir.delegate_blobs[0])


class WithCumsum(torch.nn.Module):  # sort: an op the cpu target still refuses (cumsum lowers now)
    def forward(self, x):
        return torch.relu(torch.sort(x, 1)[0] * 2.0)


def test_unsupported_op_stays_out_with_a_reason():
    program_ir, report = delegated(WithCumsum(), (torch.randn(3, 5),))
    assert report.portable.get("edge.sort") == 1
    assert "edge.sort" in report.reasons and report.reasons["edge.sort"]
    assert report.delegated.get("edge.relu") == 1 and report.partitions == 1
    fn = CompiledFunction(program_ir.delegate_blobs[0])
    y = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(fn(y), np.maximum(y * 2.0, 0), rtol=1e-6)


class Branches(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x), torch.tanh(x) * 2.0


class ThroughUnsupported(torch.nn.Module):
    def forward(self, x):
        a = torch.relu(x)
        return a + torch.sort(a, 1)[0]


def test_independent_branches_become_one_call():
    program_ir, report = delegated(Branches(), (torch.randn(3, 5),))
    assert report.partitions == 1 and not report.portable
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    e, t = CompiledFunction(program_ir.delegate_blobs[0])(x)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(t, np.tanh(x) * 2.0, rtol=1e-5, atol=1e-6)


def test_partitions_joined_through_an_unsupported_op_stay_apart():
    _, report = delegated(ThroughUnsupported(), (torch.randn(3, 5),))
    # relu -> sort (portable) -> add: one call would need sort both before and after it.
    assert report.partitions == 2 and report.portable == {"edge.sort": 1}


def test_whole_program_runs_on_the_runtime():
    """edge -> to_backend(CpuPartitioner()) -> to_executorch -> .pte -> Runtime: one DelegateCall."""
    pytest.importorskip("etc.runtime.backends")
    from etc.compiler.program import EdgeCompileConfig, EdgeProgram
    from etc.runtime import Runtime

    torch.manual_seed(0)
    model, x = ConvBnRelu().eval(), torch.randn(2, 3, 16, 16)
    edge = EdgeProgram(edge_program(model, (x,)), exported_programs={}, config=EdgeCompileConfig())
    edge = edge.to_backend(CpuPartitioner())
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    program = edge.to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for _ in range(2):  # the second call reuses the linked code and planned memory
        (got,) = method.execute([x.numpy()])
        with torch.no_grad():
            assert rel_error(got, model(x).numpy()) <= 1e-4


def test_zoo_lstm_is_one_delegate():
    """The zoo's LSTM classifier (squeeze.dims, split_with_sizes, gates): one call, eager results."""
    from etc.models.zoo import ZOO

    zoo_model = ZOO["lstm"]()
    program_ir, report = delegated(zoo_model.module, zoo_model.example_inputs)
    assert report.partitions == 1 and not report.portable, str(report)
    got = CompiledFunction(program_ir.delegate_blobs[0])(*[t.numpy() for t in zoo_model.example_inputs])
    with torch.no_grad():
        want = zoo_model.module(*zoo_model.example_inputs)
    assert rel_error(got, want.numpy()) <= 1e-4


class Exp(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x)


def test_expanded_exp_accuracy_and_special_values():
    x = torch.cat([torch.linspace(-100, 100, 4001),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, 88.7, -87.4])])
    program_ir, _ = delegated(Exp(), (x,))
    got = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    want = np.exp(x.numpy().astype(np.float64))
    normal = np.isfinite(want) & (want > 1.2e-38) & (want < 3.4e38)
    assert (np.abs(got[normal] - want[normal]) / want[normal]).max() < 5e-7
    assert got[-6] == np.inf and got[-5] == 0.0 and np.isnan(got[-4]) and got[-3] == 1.0
    assert (got[x.numpy() < -87.5] == 0).all() and (got[x.numpy() > 88.73] == np.inf).all()


def test_expanded_nonpositive_exp_the_attention_kernel_marks():
    """A math.exp marked etc.nonpositive (the fused attention's exp(s - max)): the short expansion,
    ~3e-7 relative down to the smallest normal float, 0 below it and for -inf (no subnormal is
    computed: an x86 assist per masked lane), NaN kept."""
    from etc.targets.cpu.pipeline import compile_linalg_text

    n = 4096
    text = f"""
    func.func @f(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
      %e = tensor.empty() : tensor<{n}xf32>
      %r = linalg.generic {{indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                           iterator_types = ["parallel"]}} ins(%x : tensor<{n}xf32>) outs(%e : tensor<{n}xf32>) {{
      ^bb0(%a: f32, %o: f32):
        %y = math.exp %a {{etc.nonpositive}} : f32
        linalg.yield %y : f32
      }} -> tensor<{n}xf32>
      return %r : tensor<{n}xf32>
    }}
    """
    specials = np.array([-np.inf, np.nan, 0.0, -0.0, -87.3, -87.4, -104.0, -1e-30], dtype=np.float32)
    x = np.concatenate([specials, -np.logspace(-30, 2.1, n - len(specials) - 1000, dtype=np.float32),
                        np.linspace(-120, 0, 1000, dtype=np.float32)]).astype(np.float32)
    got = compile_linalg_text(text)(x)
    want = np.exp(x.astype(np.float64))
    normal = want >= 1.1755e-38
    assert (np.abs(got[normal] - want[normal]) / want[normal]).max() < 4e-7
    assert (got[~normal & ~np.isnan(x)] == 0).all() and np.isnan(got[1]) and got[2] == 1.0 and got[3] == 1.0


class Gelu(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x), torch.erf(x)


def test_expanded_erf_and_exact_gelu_match_torch():
    """GELU's erf runs as the rational fit of etc-cpu-expand-math, not one erff call per element."""
    x = torch.cat([torch.linspace(-8, 8, 4001),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 3.92, -3.91])])
    program_ir, report = delegated(Gelu(), (x,))
    gelu, erf = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    assert np.nanmax(np.abs(erf - torch.erf(x).numpy())) <= 4e-7
    assert np.nanmax(np.abs(gelu - torch.nn.functional.gelu(x).numpy())) <= 1e-6
    assert erf[-7] == 1.0 and erf[-6] == -1.0 and np.isnan(erf[-5]) and np.isnan(gelu[-5])
    assert erf[-4] == 0.0 and np.signbit(erf[-3])


class Tanh(torch.nn.Module):
    """tanh and the tanh GELU on the input as it is (a loop LLVM vectorizes: the expansion's scalar
    form) and after a 2x2/2 max pool of it (the window kernel's vector epilogue: the vector form)."""

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(x, 2, 2)
        return (torch.tanh(x), torch.nn.functional.gelu(x, approximate="tanh"), torch.tanh(y),
                torch.nn.functional.gelu(y, approximate="tanh"))


def test_expanded_tanh_and_tanh_gelu_match_torch():
    """tanh (GPT-2's GELU) runs as etc-cpu-expand-math's series / exp form, not one tanhf per element,
    in both the scalar (division) and the vector (reciprocal + correction) form."""
    values = torch.cat([torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 0.4, -0.4, 9.5]),
                        torch.linspace(-12, 12, 6001), torch.linspace(-0.5, 0.5, 2001), torch.logspace(-30, 0, 61)])
    values = torch.cat([values, torch.zeros(-len(values) % 16)])
    x = values.reshape(1, 1, -1, 16).repeat_interleave(2, 2).repeat_interleave(2, 3)  # each value in a 2x2 block
    program_ir, report = delegated(Tanh(), (x,))
    lines = [line for ls in report.backend_lines.values() for line in ls]
    assert "tuned      window -> window x1" in lines, lines  # the pool's vector epilogue
    outs = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    for tanh, gelu, at in ((outs[0], outs[1], x), (outs[2], outs[3], values)):
        tanh, gelu, at = tanh.reshape(-1), gelu.reshape(-1), at.reshape(-1)
        want = np.tanh(at.numpy().astype(np.float64))
        finite = np.isfinite(want) & (want != 0)
        assert (np.abs(tanh[finite] - want[finite]) / np.abs(want[finite])).max() < 5e-7
        assert np.nanmax(np.abs(gelu - torch.nn.functional.gelu(at, approximate="tanh").numpy())) <= 2e-6
        first = {float(v): (t, g) for v, t, g in zip(at.numpy()[::-1], tanh[::-1], gelu[::-1])}  # v -> its 1st
        assert first[np.inf][0] == 1.0 and first[-np.inf][0] == -1.0 and first[9.5][0] == 1.0
        assert np.isnan(tanh[np.isnan(at.numpy())]).all() and np.isnan(gelu[np.isnan(at.numpy())]).all()
        zeros = at.numpy() == 0
        assert (tanh[zeros] == 0).all() and np.signbit(tanh[zeros & np.signbit(at.numpy())]).all()


class SigmoidSilu(torch.nn.Module):
    """sigmoid and SiLU on the input as it is (a loop LLVM vectorizes: the expansion's scalar form)
    and after a 2x2/2 max pool of it (the window kernel's vector epilogue: the vector form)."""

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(x, 2, 2)
        return torch.sigmoid(x), torch.nn.functional.silu(x), torch.sigmoid(y), torch.nn.functional.silu(y)


def test_expanded_sigmoid_and_silu_at_the_extremes():
    """etc-cpu-expand-math's sigmoid: ~3e-7 relative over the whole range, the denormal sigmoids
    below -87.3 rounded once (torch's own kernel flushes those to 0), exact 0.5 and 1, NaN kept, in
    both the scalar (division) and the vector (reciprocal + correction) form."""
    specials = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 17.0, 88.0, -87.0, -88.5, -103.9, -104.5]
    values = torch.cat([torch.tensor(specials), torch.linspace(-110, 110, 4001), torch.logspace(-30, 2, 400),
                        -torch.logspace(-30, 2, 400)])
    values = torch.cat([values, torch.zeros(-len(values) % 16)])
    x = values.reshape(1, 1, -1, 16).repeat_interleave(2, 2).repeat_interleave(2, 3)  # each value in a 2x2 block
    program_ir, report = delegated(SigmoidSilu(), (x,))
    lines = [line for ls in report.backend_lines.values() for line in ls]
    assert "tuned      window -> window x1" in lines, lines  # the pool's vector epilogue
    sig, silu, vsig, vsilu = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    for got, got_silu, at in ((sig, silu, x), (vsig, vsilu, values)):
        got, got_silu, at = got.reshape(-1), got_silu.reshape(-1), at.reshape(-1)
        xd = at.numpy().astype(np.float64)
        with np.errstate(over="ignore"):
            want = 1 / (1 + np.exp(-xd))
        normal = np.isfinite(xd) & (want > 1.2e-38)
        assert (np.abs(got[normal] - want[normal]) / want[normal]).max() < 4e-7
        tiny = np.isfinite(xd) & (want <= 1.2e-38)  # denormal or zero: within the smallest denormal
        assert tiny.sum() > 100 and np.abs(got[tiny] - want[tiny]).max() <= 2 ** -149
        np.testing.assert_allclose(got_silu, torch.nn.functional.silu(at).numpy(), rtol=4e-7, atol=1e-35)  # torch: 0 below -88.7
        first = {float(v): (g, s) for v, g, s in zip(at.numpy()[::-1], got[::-1], got_silu[::-1])}  # v -> its 1st
        assert first[np.inf] == (1.0, np.inf) and first[-np.inf][0] == 0.0 and np.isnan(first[-np.inf][1])
        nan = np.isnan(at.numpy())
        assert np.isnan(got[nan]).all() and np.isnan(got_silu[nan]).all()
        assert first[0.0][0] == 0.5 and first[17.0] == (1.0, 17.0) and first[88.0] == (1.0, 88.0)
        assert first[-104.5] == (0.0, 0.0) and 0 < first[-88.5][0] < 1.2e-38 and 0 < -first[-87.0][1]
        negative_zero = (at.numpy() == 0) & np.signbit(at.numpy())
        assert negative_zero.any() and (got[negative_zero] == 0.5).all() and np.signbit(got_silu[negative_zero]).all()


class CeilModePool(torch.nn.Module):
    """EfficientNet's pooler: a window far larger than the plane, ceil_mode (torch-mlir pads the
    7x7 input to 1287x1287 for it); and the same as a max pool."""

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(x, 1280, ceil_mode=True), \
            torch.nn.functional.max_pool2d(x, 64, ceil_mode=True)


def test_a_window_larger_than_the_plane_is_a_global_reduction():
    x = torch.randn(1, 96, 7, 5)
    program_ir, report = delegated(CeilModePool(), (x,))
    lines = [line for ls in report.backend_lines.values() for line in ls]
    assert "tuned      window -> row-reduction x2" in lines and not any("NOT TUNED" in line for line in lines), lines
    avg, mx = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    want_avg, want_max = CeilModePool()(x)
    np.testing.assert_allclose(avg, want_avg.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx, want_max.numpy())


class Dtypes(torch.nn.Module):
    def forward(self, x, i):
        return x > 0, x.argmax(-1), i * 3 + 1, torch.where(x > 0, x, 0.1 * x), x.to(torch.float16) * 2


def test_bool_integer_and_half_results_are_exact():
    x, i = torch.randn(4, 6), torch.randint(-5, 5, (4, 6), dtype=torch.int32)
    program_ir, report = delegated(Dtypes(), (x, i))
    assert report.partitions == 1 and not report.portable
    got = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy(), i.numpy())
    for g, w in zip(got, Dtypes()(x, i)):
        assert g.dtype == w.numpy().dtype and np.array_equal(g, w.numpy())


def test_a_failing_pass_of_the_cpu_pipeline_is_an_error_naming_it(monkeypatch):
    """No silent fallback: a GEMM kernel that cannot be built fails the compile, naming the pass."""
    from etc.errors import EtcError
    from etc.targets.cpu.kernels import gemm_match

    def broken(*args, **kwargs):
        raise RuntimeError("kernel bug")

    monkeypatch.setattr(gemm_match, "describe", broken)
    with pytest.raises(EtcError, match="etc-cpu-gemm-kernels.*kernel bug"):
        delegated(MatMul(), (torch.randn(2, 48, 64), torch.randn(2, 64, 96)))


class MixedInterface(torch.nn.Module):
    """A partition whose inputs and outputs differ in shape and dtype (sort stays portable)."""

    def forward(self, x, idx):
        a = torch.relu(x)
        return torch.sort(a, 1)[0], a.sum(1), idx * 2


def test_delegate_with_mixed_input_and_output_types_verifies_and_runs():
    import etc
    from etc.runtime import Runtime

    x, idx = torch.randn(3, 5), torch.arange(4)
    edge = etc.to_edge(torch.export.export(MixedInterface(), (x, idx))).to_backend(CpuPartitioner())
    edge.module.operation.verify()  # one type per variadic group would reject this call
    calls = [op for fn in edge.module.body.operations if "sym_name" in fn.attributes
             for op in fn.regions[0].blocks[0].operations if op.operation.name == "backend.delegate"]
    types = {str(v.type) for call in calls for v in list(call.operands) + list(call.results)}
    assert len(types) >= 3, types
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    got = method.execute([x.numpy(), idx.numpy()])
    for g, want in zip(got, MixedInterface()(x, idx)):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-5, atol=1e-6)


class BroadcastChain(torch.nn.Module):
    """Elementwise ops over merged loops: per-channel bias, scalars, a strided slice, a transpose."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        y = torch.clamp((x + self.bias.view(1, 3, 1, 1)) * 0.5, 0.0, 6.0)
        return y[:, :, 1:4, :] - 1.0, y.transpose(2, 3) * y.transpose(2, 3)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 3, 16, 16), (1, 3, 4, 1)])
def test_elementwise_chains_with_broadcasts_match_torch(shape):
    torch.manual_seed(0)
    model, x = BroadcastChain().eval(), torch.randn(*shape) * 8
    program_ir, report = delegated(model, (x,))
    assert report.partitions == 1 and not report.portable, str(report)
    got = CompiledFunction(program_ir.delegate_blobs[0])(x.numpy())
    with torch.no_grad():
        for g, want in zip(got, model(x)):
            np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-6)


class ConvLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_generic_cpu_means_the_architecture_baseline():
    """cpu='generic' recorded the compiling machine's features (issue 11): now the portable level
    of the triple's architecture, whatever the spec's own features; explicit features still win."""
    from etc.targets.cpu.isa import isa_for, resolve_target

    x86 = resolve_target("x86-64-v3", cpu="generic")  # a preset with AVX2: generic drops it
    assert {"sse4.2", "popcnt", "cx16"} <= set(x86.required_features)
    assert not [f for f in x86.required_features if f.startswith(("avx", "fma", "f16c"))]
    assert isa_for(x86).name == "scalar"  # the ISA table has no SSE row: plain loops, LLVM vectorizes
    arm = resolve_target("aarch64", cpu="generic")  # the preset's cortex-a76 -> armv8-a
    assert (arm.cpu, set(arm.required_features), isa_for(arm).name) == ("generic", {"neon", "fp-armv8"}, "neon")
    assert resolve_target("riscv64-unknown-linux-gnu", cpu="generic").required_features == []
    assert resolve_target("x86-64-v3", cpu="generic", features="").required_features == []
    assert resolve_target("x86-64-v3", cpu="generic", features="+avx2,+fma").required_features == ["avx2", "fma"]
    assert resolve_target("x86-64-v3").required_features == ["avx2", "fma", "f16c"]  # no cpu=: unchanged


def test_the_host_target_sizes_gemm_blocks_by_its_own_l2(tmp_path):
    """The ISA rows assume a typical core's L2 (2 MiB on AVX-512); a host target reads its own
    from the OS, a preset or another CPU keeps the row's, and the GEMM's row blocks follow it."""
    from etc.targets.cpu.isa import CpuTarget, host_l2_kib, isa_for, resolve_target
    from etc.targets.cpu.kernels.gemm_match import KernelConfig, row_block

    cpu0 = tmp_path / "cpu0"
    for index, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "1024K"), ("3", "Unified", "32768K")]):
        d = cpu0 / "cache" / f"index{index}"
        d.mkdir(parents=True)
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert host_l2_kib(str(cpu0)) == 1024
    (cpu0 / "cache" / "index2" / "size").write_text("2M\n")
    assert host_l2_kib(str(cpu0)) == 2048
    assert host_l2_kib(str(tmp_path / "no-such-cpu")) == 0  # the OS does not say: the row's

    avx512 = CpuTarget("x86_64-unknown-linux-gnu", "sapphirerapids", "+avx512f,+avx2,+fma")
    assert isa_for(avx512).l2_kib == 2048
    assert isa_for(CpuTarget(avx512.triple, "znver5", avx512.features, l2_kib=1024)).l2_kib == 1024
    host = resolve_target("host")
    assert host.l2_kib == host_l2_kib()
    assert resolve_target("host", cpu="generic").l2_kib == 0  # another CPU: not the host's cache
    assert resolve_target("host", features=host.features).l2_kib == host.l2_kib
    assert resolve_target("x86-64-v3").l2_kib == 0
    # ResNet-50's 1x1 256->1024 at 14x14 as a GEMM (A the 1 MiB weight): whole on a 2 MiB L2,
    # in row blocks on a 1 MiB one
    rows, k = 1024, 256
    assert row_block(rows, k, k, KernelConfig(16, 6, 64, 2048, l2_bytes=2048 << 10)) == 0
    assert row_block(rows, k, k, KernelConfig(16, 6, 64, 2048, l2_bytes=1024 << 10)) == 258


def test_generic_blob_needs_no_avx_and_matches_torch():
    """A conv + linear model with CpuPartitioner(cpu='generic'): the blob asks for no AVX feature,
    loads past the runtime's feature check and computes what eager torch does."""
    pytest.importorskip("etc.runtime.backends")
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu.isa import generic_baseline, resolve_target

    torch.manual_seed(0)
    model, x = ConvLinear().eval(), torch.randn(2, 3, 8, 8)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner(cpu="generic"))
    assert "0 op(s) on portable kernels" in edge.delegation_info()
    (data,) = edge.program_ir.delegate_blobs
    meta = cpu_blob.deserialize(data).metadata
    host = resolve_target(None)
    _, baseline = generic_baseline(host.arch)
    assert meta["cpu"] == "generic"
    assert meta["required_features"] == [f[1:] for f in baseline.split(",") if f.startswith("+")]
    assert not [f for f in meta["required_features"] if f.startswith("avx")], meta["required_features"]
    if host.arch == "x86_64":
        assert {"sse4.2", "popcnt"} <= set(meta["required_features"])
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    (got,) = method.execute([x.numpy()])
    with torch.no_grad():
        assert rel_error(got, model(x).numpy()) <= 1e-4


class LinearNewGelu(torch.nn.Module):
    """GPT-2's MLP: a Linear and the tanh GELU written with torch.pow(x, 3.0) (transformers'
    NewGELUActivation): the power becomes the GEMM's vectorized epilogue."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 192)

    def forward(self, x):
        h = self.fc(x)
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))


def test_a_power_in_a_gemm_epilogue_is_vectorized_and_matches_torch():
    """A constant integer power in an epilogue: LLVM's powi takes only a scalar exponent, so the
    vectorized epilogue would not verify (GPT-2 failed to compile); it is expanded into products."""
    torch.manual_seed(0)
    model, x = LinearNewGelu().eval(), torch.randn(1, 24, 64)
    program_ir, report = delegated(model, (x,))
    lines = [line for ls in report.backend_lines.values() for line in ls]
    assert any("epilogue -> fused" in line for line in lines), lines
    fn = CompiledFunction(program_ir.delegate_blobs[0], {})
    with torch.no_grad():
        want = model(x)
    assert rel_error(fn(x.numpy())[0], want.numpy()) <= 1e-5
    fn.close()
