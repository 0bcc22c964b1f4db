"""Bounded dynamic shapes in the cpu target: one delegate compiled for the upper bounds, run at
every size within them (etc-cpu-dynamic-shapes: flat buffers at the bound, sizes in `dims`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import etc
from etc.errors import InputError
from etc.runtime import Runtime
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu.isa import host_target, isa_for
from etc.targets.cpu.pipeline import compile_linalg_text


class NormActSoftmax(torch.nn.Module):
    """Row reductions, elementwise chains and a residual add on [B, T, 48] (no contraction)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(48)

    def forward(self, x, y):
        h = torch.nn.functional.gelu(self.norm(x)) + y
        return h.softmax(-1), (h * 2.0).mean(1)


def _compile(module, inputs, dynamic_shapes):
    ep = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    return report, method


@pytest.fixture(scope="module")
def norm_act_softmax():
    torch.manual_seed(0)
    module = NormActSoftmax().eval()
    batch, tokens = torch.export.Dim("batch", min=1, max=4), torch.export.Dim("tokens", min=1, max=64)
    inputs = (torch.randn(2, 8, 48), torch.randn(2, 8, 48))
    report, method = _compile(module, inputs, ({0: batch, 1: tokens}, {0: batch, 1: tokens}))
    return module, report, method


def test_a_model_with_dims_is_one_delegate(norm_act_softmax):
    _, report, _ = norm_act_softmax
    assert report.partitions == 1 and not report.portable, str(report)


@pytest.mark.parametrize("batch,tokens", [(1, 1), (2, 8), (3, 17), (4, 64), (1, 63)])
def test_every_size_within_the_bounds_matches_eager(norm_act_softmax, batch, tokens):
    module, _, method = norm_act_softmax
    x, y = torch.randn(batch, tokens, 48), torch.randn(batch, tokens, 48)
    got = method.execute([x.numpy(), y.numpy()])
    with torch.no_grad():
        want = module(x, y)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_sizes_run_in_any_order(norm_act_softmax):
    """The same planned buffers serve a large call after a small one and back."""
    module, _, method = norm_act_softmax
    for tokens in (64, 1, 33, 2, 64):
        x, y = torch.randn(2, tokens, 48), torch.randn(2, tokens, 48)
        got = method.execute([x.numpy(), y.numpy()])
        with torch.no_grad():
            np.testing.assert_allclose(got[0], module(x, y)[0].numpy(), rtol=1e-5, atol=1e-5)


def test_a_size_above_the_bound_is_an_input_error(norm_act_softmax):
    _, _, method = norm_act_softmax
    x = np.zeros((2, 65, 48), dtype=np.float32)
    with pytest.raises(InputError, match="65"):
        method.execute([x, x])


def test_linear_layers_with_dynamic_rows_take_the_gemm_kernel():
    """A dynamic row count (tokens, batch) keeps the tuned GEMM kernel and its fused epilogue."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 40), torch.nn.Tanh()).eval()
    tokens = torch.export.Dim("tokens", min=1, max=32)
    report, method = _compile(module, (torch.randn(4, 64),), ({0: tokens},))
    assert report.partitions == 1 and not report.portable, str(report)
    lines = [line for lines in report.backend_lines.values() for line in lines]
    # Where the host's ISA row prefetches for the f32 tiles, their weights' next panels are not
    # prefetched (etc-cpu-prefetch-gemm-tiles spreads that over a static count of row blocks): a
    # recorded decision, the only one off the tuned path.
    prefetch = "NOT TUNED  prefetch -> no-next-panel: a packed weight's next panel is not prefetched: the row " \
        "blocks' loop bounds are not constants"
    assert [line for line in lines if line.startswith("NOT TUNED")] == [line for line in lines if prefetch in line] \
        and any(prefetch in line for line in lines) == isa_for(host_target()).gemm_prefetch, "\n".join(lines)
    assert any("contraction -> gemm x2" in line for line in lines), "\n".join(lines)
    for n in (1, 5, 6, 7, 32):
        x = torch.randn(n, 64)
        np.testing.assert_allclose(method.execute([x.numpy()])[0], module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_partitions_merge_only_without_a_path_through_another_partition():
    """A -> u1 -> C -> u2 -> B (u1, u2 left on portable): A and B have no op path between them, but C
    runs as one call after u1 and before u2, so one call for A and B would have to run both before
    u1 and after u2. merge_independent keeps them apart (the Llama export's attention needed this)."""
    from torch_mlir import ir

    from etc.targets.cpu import merge_independent

    text = """
    func.func @f(%x: f32) -> (f32, f32, f32) {
      %a = arith.negf %x : f32
      %u1 = arith.addf %a, %a : f32
      %c1 = arith.negf %u1 : f32
      %c2 = arith.negf %x : f32
      %u2 = arith.addf %c2, %c2 : f32
      %b = arith.negf %u2 : f32
      return %b, %c1, %a : f32, f32, f32
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        ops = [op.operation for op in module.body.operations[0].regions[0].blocks[0].operations]
        a, u1, c1, c2, u2, b = ops[:6]
        groups = merge_independent([[a], [c1, c2], [b]], ops)
        assert sorted(len(g) for g in groups) == [1, 1, 2]
        # Without C in between, A and B are independent: one call.
        assert len(merge_independent([[a], [b]], ops)) == 1


LINALG = """
func.func @f(%x: tensor<?x?xf32> {etc.dim_bounds = array<i64: 1, 6, 1, 40>}) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = tensor.dim %x, %c0 : tensor<?x?xf32>
  %n = tensor.dim %x, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %r = linalg.exp ins(%x : tensor<?x?xf32>) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""


def test_the_blob_records_bounds_and_dynamic_dims():
    function = compile_linalg_text(LINALG)
    kinds = [(a["kind"], a.get("name"), a["shape"], a.get("dynamic")) for a in function.args]
    assert ("input", "0", [6, 40], [0, 1]) in kinds and ("output", "0", [6, 40], [0, 1]) in kinds
    assert ("dims", "in", [2], None) in kinds and ("dims", "out", [2], None) in kinds
    for shape in [(1, 1), (6, 40), (3, 7), (5, 33)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        out = function(x)
        assert out.shape == shape
        np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    from etc.errors import BackendError

    with pytest.raises(BackendError, match=r"compiled for \(<=6, <=40\)"):
        function(np.zeros((7, 3), dtype=np.float32))


@pytest.mark.parametrize("options", [{"num_threads": 2}, {"profile": True}], ids=["threads", "profile"])
def test_threaded_and_profiled_delegates_take_dynamic_sizes(options):
    torch.manual_seed(0)
    module = NormActSoftmax().eval()
    batch, tokens = torch.export.Dim("batch", min=1, max=4), torch.export.Dim("tokens", min=1, max=64)
    ep = torch.export.export(module, (torch.randn(2, 8, 48), torch.randn(2, 8, 48)),
                             dynamic_shapes=({0: batch, 1: tokens}, {0: batch, 1: tokens}))
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(**options))
    assert edge.delegation_reports[-1].partitions == 1 and not edge.delegation_reports[-1].portable
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for shape in [(1, 1, 48), (4, 64, 48), (3, 9, 48)]:
        x, y = torch.randn(*shape), torch.randn(*shape)
        got = method.execute([x.numpy(), y.numpy()])
        with torch.no_grad():
            for g, w in zip(got, module(x, y)):
                np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


class TinyDecoder(torch.nn.Module):
    """A KV-cache write at dynamic positions (index_put), a gather of rows at them (index.Tensor),
    attention over the whole cache and a Linear: the shape of an LLM step of T tokens."""

    def __init__(self, positions=32, dim=16):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, positions, dim))
        self.register_buffer("table", torch.randn(positions, dim))
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x, pos):
        self.cache[:, pos] = x
        scores = x @ self.cache.transpose(1, 2)  # [1, T, positions]
        return self.proj(scores.softmax(-1) @ self.cache + self.table[pos])


def test_a_decoder_step_with_dynamic_positions_is_one_delegate():
    torch.manual_seed(0)
    tokens = torch.export.Dim("tokens", min=1, max=8)
    eager, compiled = TinyDecoder().eval(), TinyDecoder().eval()
    compiled.load_state_dict(eager.state_dict())
    ep = torch.export.export(compiled, (torch.randn(1, 3, 16), torch.arange(3)),
                             dynamic_shapes=({1: tokens}, {0: tokens}))
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable, str(report)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    start = 0
    for n in (3, 1, 8, 1, 2):  # a prompt, then steps: the cache carries over between calls
        x, pos = torch.randn(1, n, 16), torch.arange(start, start + n)
        got = method.execute([x.numpy(), pos.numpy()])[0]
        with torch.no_grad():
            want = eager(x, pos)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        start += n


def test_a_transformers_gpt2_export_is_one_delegate():
    """GPT-2 (transformers, through etc.llm) with a dynamic length: its views to sizes computed at
    run time are bounded by torch's own bounds; the whole method is one delegate, prompt and
    decode steps match eager."""
    transformers = pytest.importorskip("transformers")
    from etc.llm.export import export_decoder
    from etc.llm.hf import from_transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=512, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    edge = etc.to_edge(export_decoder(from_transformers(model, max_context_len=64), max_seq_len=16))
    edge = edge.to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable, str(report)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    eager = from_transformers(model, max_context_len=64)
    tokens, start = torch.randint(0, 512, (1, 11)), 0
    for n in (11, 1, 1):
        chunk, pos = tokens[:, :n] if n > 1 else torch.tensor([[start + 3]]), torch.arange(start, start + n)
        with torch.no_grad():
            want = eager(chunk, pos).numpy()
        np.testing.assert_allclose(method.execute([chunk.numpy(), pos.numpy()])[0], want, rtol=1e-4, atol=1e-5)
        start += n


@pytest.mark.parametrize("threads", [1, 2])
def test_a_llama_export_updates_its_caches_in_place_at_one_and_two_threads(threads):
    """etc.llm's Llama with a dynamic length: one delegate that updates its KV caches in their own
    memory (no copy back), at one thread and at two (where what thread 0 reads, the run-time sizes
    and the views at them, every thread reads again after the barrier); prompt and decode steps
    match eager."""
    from etc.llm.export import export_decoder
    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=2, n_kv_heads=2, hidden_dim=64, max_context_len=32)
    model = Llama(config).eval()
    eager = Llama(config).eval()
    eager.load_state_dict(model.state_dict())
    edge = etc.to_edge(export_decoder(model, max_seq_len=8)).to_backend(CpuPartitioner(num_threads=threads))
    assert edge.delegation_reports[-1].partitions == 1
    program = edge.to_executorch()
    names = [op.name for op in program.pte.program.execution_plan[0].operators]
    assert not [n for n in names if n.startswith("aten::copy")]
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    start = 0
    for n in (5, 1, 3, 1, 8, 1):
        tokens, pos = torch.randint(0, 64, (1, n)), torch.arange(start, start + n)
        with torch.no_grad():
            want = eager(tokens, pos).numpy()
        np.testing.assert_allclose(method.execute([tokens.numpy(), pos.numpy()])[0], want, rtol=1e-4, atol=1e-5)
        start += n


def test_sizes_are_bounded_through_views_of_inferred_sizes():
    """torch-mlir's view(-1): `size < 0 ? numel / (size < 0 ? 1 : size) : size`. The comparison is
    decided by the size's range, and numel / size is an expression of the run-time dim (768, not
    the 98304 interval arithmetic gives): buffers are planned at what they can hold, not GBs."""
    from torch_mlir import ir

    from etc.targets.cpu.lowering.context import shared_context
    from etc.targets.cpu.size_ranges import index_range

    text = """
    func.func @f(%x: memref<?x768xf32> {etc.dim_bounds = array<i64: 1, 128, 768, 768>}) -> (index, i64) {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0 : i64
      %one = arith.constant 1 : i64
      %c768 = arith.constant 768 : i64
      %d = memref.dim %x, %c0 : memref<?x768xf32>
      %t = arith.index_cast %d : index to i64
      %negative = arith.cmpi slt, %t, %zero : i64
      %numel = arith.muli %t, %c768 : i64
      %den = arith.select %negative, %one, %t : i64
      %per_row = arith.divsi %numel, %den : i64
      %rows = arith.select %negative, %per_row, %t : i64
      %size = arith.index_cast %rows : i64 to index
      return %size, %per_row : index, i64
    }"""
    with shared_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        ret = list(module.body.operations[0].regions[0].blocks[0].operations)[-1]
        size, per_row = ret.operands
        assert index_range(size) == (1, 128)
        assert index_range(per_row) == (768, 768)


class _MergeRows(torch.nn.Module):
    """(x.reshape(b * t, k) * 2).reshape(b, t, k): two dynamic dims merged and split again."""

    def forward(self, x):
        b, t, k = x.shape
        return (x.reshape(b * t, k) * 2).reshape(b, t, k)


class _HeadsMerge(torch.nn.Module):
    """An attention head merge: [b, t, h, d] -> transpose -> [b, h, t, d] -> back -> [b, t, h * d]."""

    def forward(self, x):
        b, t, h, d = x.shape
        y = x.transpose(1, 2).reshape(b, h, t * d) + 1.0
        return y.reshape(b, h, t, d).transpose(1, 2).reshape(b, t, h * d)


def _two_dims(max_b=8, max_t=64):
    return torch.export.Dim("b", min=1, max=max_b), torch.export.Dim("t", min=1, max=max_t)


# Each of these returned NaN, garbage or wrote out of bounds with two dynamic dims: torch-mlir's
# aten.view lowering took [b, t, 64] -> [b * t, 64] for a cast of [b, t, 64] to [b, 1, 64].
@pytest.mark.parametrize("name", ["linear", "mlp", "merge_rows", "heads_merge"])
def test_views_over_two_dynamic_dims_match_eager_at_every_size(name):
    torch.manual_seed(0)
    b, t = _two_dims()
    module, example, dims = {
        "linear": (torch.nn.Linear(64, 128), torch.randn(2, 5, 64), {0: b, 1: t}),
        "mlp": (torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64),
                                    torch.nn.Softmax(-1)), torch.randn(2, 5, 64), {0: b, 1: t}),
        "merge_rows": (_MergeRows(), torch.randn(2, 5, 64), {0: b, 1: t}),
        "heads_merge": (_HeadsMerge(), torch.randn(2, 5, 4, 8), {0: b, 1: t}),
    }[name]
    module = module.eval()
    report, method = _compile(module, (example,), (dims,))
    assert report.partitions == 1 and not report.portable, str(report)
    for size in [(2, 5), (1, 1), (8, 1), (1, 2), (3, 7), (8, 64), (5, 33)]:
        x = torch.randn(*size, *example.shape[2:])
        got = method.execute([x.numpy()])[0]
        with torch.no_grad():
            want = module(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"size {size}")


class _Cumsums(torch.nn.Module):
    def forward(self, x):
        return x.cumsum(-2), (x > 0).cumsum(0)


def test_cumsum_over_a_dynamic_dim_matches_eager_at_every_size():
    """Found by the compiler fuzzer: a cumsum along a dynamic dim returned its input unchanged
    (the scan's steps were counted from the dynamic sentinel: none ran)."""
    n = torch.export.Dim("n", min=1, max=6)
    report, method = _compile(_Cumsums(), (torch.randn(3, 3, 8),), ({0: n, 1: n},))
    assert report.partitions == 1 and not report.portable, str(report)
    for size in range(1, 7):
        x = torch.randn(size, size, 8)
        got = method.execute([x])
        want = _Cumsums()(x)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        assert torch.equal(got[1], want[1])


class _WriteRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rows = torch.nn.Parameter(torch.randn(2, 1, 7))

    def forward(self, x):
        y = x.clone()
        y[:, torch.tensor([2, 0])] = self.rows
        return y * 0.5


def test_index_put_into_a_dynamic_tensor_stays_portable_and_says_why():
    """Found by the compiler fuzzer: the cpu lowering of index_put multiplied the dynamic sentinel
    into its [pre, P, post] view, and the compile crashed (SIGSEGV in an MLIR pass). A dynamically
    shaped tensor is now a portable decision with its reason."""
    d = torch.export.Dim("d", min=1, max=5)
    module = _WriteRows().eval()
    report, method = _compile(module, (torch.randn(1, 3, 4, 7),), ({2: d},))
    assert "index_put into a dynamically shaped tensor" in str(report), str(report)
    for n in (1, 5, 3):
        x = torch.randn(1, 3, n, 7)
        with torch.no_grad():
            assert torch.equal(method.execute([x])[0], module(x))
