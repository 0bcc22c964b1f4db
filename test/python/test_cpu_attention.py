"""etc-cpu-attention-kernels against torch: the fused (flash) attention kernel on random inputs,
compiled through the cpu pipeline with the threshold lowered so small shapes take it (fast tests),
and whole layers at real sizes through CpuPartitioner with the default rule: causal and not,
float and bool masks broadcast over heads, rows and keys not a multiple of the tile, one token,
head dims 32/48/64/80/128, batch > 1, an explicit scale, repeated K/V (GQA), a fully masked row, and
the decisions (fused, or three-op with the reason)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from etc.targets.cpu.isa import isa_for, resolve_target

needs_simd = pytest.mark.skipif(not isa_for(resolve_target(None)).vectorizes, reason="no vector unit on this host")
pytestmark = needs_simd


def compile_edge(model, inputs, min_keys=1):
    """The model's edge function through the whole cpu pipeline (fused attention from `min_keys`
    keys): (callable on numpy arrays, attention decisions)."""
    from torch_mlir import ir

    import etc
    from etc.targets.cpu import blob
    from etc.targets.cpu.pipeline import blob_metadata, compile_module, lower_to_linalg
    from etc.targets.cpu.runtime import CompiledFunction

    program_ir = etc.to_edge(torch.export.export(model.eval(), inputs)).program_ir
    (fn,) = [o for o in program_ir.module.body.operations if o.operation.name == "func.func"]
    low = lower_to_linalg(fn.operation, program_ir.constants)
    with low.module.context, ir.Location.unknown():
        result = compile_module(low.module, None, start="linalg", constants=low.constants,
                                attention_min_keys=min_keys)
    used = {a.name: np.asarray(low.constants[a.name]).reshape(a.shape) for a in result.args if a.kind == "constant"}
    function = CompiledFunction(blob.serialize(blob_metadata(result, 1), result.object_bytes, used))
    return function, [d for d in result.decisions if d.kind == "attention"]


def check(model, inputs, min_keys=1, want_path="flash", rtol=2e-5, atol=2e-6):
    function, attention = compile_edge(model, inputs, min_keys)
    assert [d.path for d in attention] == [want_path], [str(d) for d in attention]
    got = function(*[x.numpy() for x in inputs])
    got = got[0] if isinstance(got, (list, tuple)) else got
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)
    return attention


class Sdpa(nn.Module):
    def forward(self, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None)


class Manual(nn.Module):
    """Attention as HF eager code writes it: matmul, times the scale, plus a mask buffer, softmax, matmul."""

    def __init__(self, t, d, causal):
        super().__init__()
        self.scale = d ** -0.5
        self.register_buffer("mask", torch.full((t, t), float("-inf")).triu(1) if causal else torch.zeros(t, t))

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale + self.mask
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def qkv(b, h, t, d):
    torch.manual_seed(0)
    return torch.randn(b, h, t, d), torch.randn(b, h, t, d), torch.randn(b, h, t, d)


# (batch, heads, queries, keys, head dim, causal, scale, float mask shape, K/V heads): each one
# attention of one module (one compile for all: the tests' time is mostly compiling).
VARIANTS = [
    (1, 2, 37, 37, 64, False, None, None, None),   # rows and keys not a multiple of the tiles (32 x 32)
    (2, 3, 70, 70, 32, True, None, None, None),    # batch > 1, causal (tiles above the diagonal skipped)
    (1, 2, 45, 45, 80, False, None, None, None),   # head dim 80: five vectors
    (1, 1, 1, 1, 48, False, None, None, None),     # one token
    (1, 2, 19, 53, 32, False, 0.3, None, None),    # an explicit scale, more keys than queries
    (2, 3, 29, 29, 32, False, None, (2, 1, 29, 29), None),  # a float mask broadcast over the heads
    (1, 6, 41, 41, 32, True, None, None, 2),       # K/V heads repeated for 3 query heads each (GQA)
    (1, 2, 40, 130, 128, False, None, None, None),  # head dim 128: the block's scores and accumulators one
                                                    # type (two tiles: etc-cpu-distinct-inits keeps them apart)
]


class Variants(nn.Module):
    def forward(self, *tensors):
        outs, it = [], iter(tensors)
        for b, h, t, s, d, causal, scale, mask, kv in VARIANTS:
            q, k, v = next(it), next(it), next(it)
            if kv:
                k, v = (x.repeat_interleave(h // kv, dim=1) for x in (k, v))
            m = next(it) if mask else None
            outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, scale=scale))
        return tuple(outs)


def test_attention_variants_match_torch():
    torch.manual_seed(0)
    inputs = []
    for b, h, t, s, d, causal, scale, mask, kv in VARIANTS:
        inputs += [torch.randn(b, h, t, d), torch.randn(b, kv or h, s, d), torch.randn(b, kv or h, s, d)]
        if mask:
            inputs.append(torch.randn(*mask))
    model = Variants().eval()
    function, attention = compile_edge(model, tuple(inputs))
    assert [d.path for d in attention] == ["flash"] * len(VARIANTS), [str(d) for d in attention]
    got = function(*[x.numpy() for x in inputs])
    with torch.no_grad():
        want = model(*inputs)
    for variant, g, w in zip(VARIANTS, got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=2e-5, atol=2e-6, err_msg=str(variant))


def test_bool_mask_and_a_fully_masked_row():
    """A bool mask becomes an additive -inf mask; torch's safe softmax gives 0 for a row with every
    key masked, as the kernel does."""
    q, k, v = qkv(1, 2, 40, 64)
    mask = torch.rand(1, 1, 40, 40) > 0.4
    mask[..., 0] = True
    mask[0, 0, 7] = False  # row 7: nothing to attend to
    check(Sdpa(), (q, k, v, mask))


def test_hf_eager_attention():
    """The scale as a Python float (an f64 constant truncated in the body), a causal mask buffer."""
    check(Manual(50, 48, True), qkv(1, 2, 50, 48))


def test_below_threshold_is_the_three_op_path_with_its_reason():
    (decision,) = check(Sdpa(), qkv(1, 2, 37, 32), min_keys=64, want_path="three-op")
    assert "37 keys < min-keys=64" in decision.reason


def test_unsupported_score_op_is_a_reported_decision():
    class Softcap(nn.Module):  # tanh on the scores (Gemma's soft-capping): not +, -, *, /
        def forward(self, q, k, v):
            return torch.softmax(torch.tanh(q @ k.transpose(-1, -2)), dim=-1) @ v

    (decision,) = check(Softcap(), qkv(1, 2, 30, 32), want_path="three-op", rtol=1e-4, atol=1e-5)
    assert "other than +, -, *, /" in decision.reason


class EncoderLayer(nn.Module):
    """A Whisper/ViT-like pre-norm encoder layer (sdpa, GELU MLP)."""

    def __init__(self, dim, heads, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("dim, heads, tokens, causal", [
    (96, 2, 600, False),   # Whisper-like: 600 frames, head dim 48
    (96, 2, 512, True),    # Llama-like prefill at 512 tokens, causal
])
def test_whole_layer_through_the_partitioner(dim, heads, tokens, causal):
    """The default rule (fused from 256 keys) inside a whole model, delegated by CpuPartitioner."""
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    model, x = EncoderLayer(dim, heads, causal).eval(), torch.randn(1, tokens, dim)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner())
    report = "\n".join(str(r) for r in edge.delegation_reports)
    assert "attention -> flash" in report, report
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    (got,) = method.execute([x.numpy()])
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dynamic_sequence_length_is_a_reported_decision():
    """A sequence length only known at run time (an LLM's prefill) keeps the three-op path, which
    handles dynamic sizes; the report says why."""
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    t = torch.export.Dim("t", min=2, max=600)
    q, k, v = qkv(1, 2, 40, 32)
    model = Sdpa().eval()
    ep = torch.export.export(model, (q, k, v), dynamic_shapes=({2: t}, {2: t}, {2: t}))
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())
    report = "\n".join(str(r) for r in edge.delegation_reports)
    assert "attention -> three-op: dynamic sizes" in report, report
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    (got,) = method.execute([q.numpy(), k.numpy(), v.numpy()])
    np.testing.assert_allclose(got, model(q, k, v).numpy(), rtol=2e-5, atol=2e-6)
