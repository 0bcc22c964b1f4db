"""A small Llama with a static KV cache, written the way etc.llm exports decoders.

The protocol every exported decoder follows (the user's own module, this one, or a
transformers model through `etc.llm.hf`):

    forward(tokens: int64[1, T], input_pos: int64[T]) -> logits: float[1, T, vocab] (or [1, 1, vocab]:
                                                                 the last position's only)

`input_pos` holds the cache positions of the T tokens (ExecuTorch's `cache_position`).
The keys and values live in registered buffers ([1, heads, head_dim, max_context_len] and
[1, heads, max_context_len, head_dim]) written in place with `index_copy_`, so the exported program carries them as
mutable state: one call of T tokens is a prefill, one of a single token a decode, and
the cache stays in the program between calls. Attention reads the whole cache with a
mask of the positions written so far (`cache index <= query position`), so entries
past the current position (stale ones from an earlier prompt included) never matter:
"reset" is starting again at position 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class LlamaConfig:
    vocab_size: int = 512
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 128
    max_context_len: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    # False: logits of the last position only ([1, 1, vocab]), ExecuTorch's export_llama default; a
    # prefill then skips the output projection of every other prompt token (the runner needs none).
    full_logits: bool = False


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x, cos, sin):
    """RoPE in the rotate-half form (cos and sin repeat the frequencies over both halves)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.dim // config.n_heads
        self.wq = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)
        # Keys are cached transposed ([.., head_dim, positions]): attention multiplies by them as they
        # are stored, so a decode step transposes its one new key instead of the whole cache.
        self.register_buffer("k_cache", torch.zeros(1, config.n_kv_heads, self.head_dim, config.max_context_len),
                             persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, config.n_kv_heads, config.max_context_len, self.head_dim),
                             persistent=False)

    def forward(self, x, input_pos, cos, sin, mask):
        length = x.shape[1]
        q = self.wq(x).view(1, length, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(1, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(1, length, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        self.k_cache.index_copy_(3, input_pos, k.transpose(2, 3))
        self.v_cache.index_copy_(2, input_pos, v)
        keys, values = self.k_cache, self.v_cache
        repeat = self.n_heads // self.n_kv_heads
        if repeat > 1:  # grouped-query attention: each cached head serves `repeat` query heads
            keys = keys.repeat_interleave(repeat, dim=1)
            values = values.repeat_interleave(repeat, dim=1)
        scores = (q @ keys) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ values
        return self.wo(out.transpose(1, 2).reshape(1, length, self.n_heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden_dim, bias=False)
        self.w2 = nn.Linear(config.hidden_dim, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x, input_pos, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), input_pos, cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """Decoder-only Llama (RMSNorm, RoPE, grouped-query attention, SwiGLU) with a static KV cache."""

    def __init__(self, config: LlamaConfig | None = None):
        super().__init__()
        self.config = config = config or LlamaConfig()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        head_dim = config.dim // config.n_heads
        freqs = 1.0 / (config.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(config.max_context_len).float(), freqs)
        self.register_buffer("rope_cos", torch.cat([angles.cos()] * 2, dim=-1), persistent=False)
        self.register_buffer("rope_sin", torch.cat([angles.sin()] * 2, dim=-1), persistent=False)
        self.register_buffer("positions", torch.arange(config.max_context_len), persistent=False)

    def forward(self, tokens, input_pos):
        x = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
        mask = self.positions[None, :] <= input_pos[:, None]  # [T, max_context_len]
        for layer in self.layers:
            x = layer(x, input_pos, cos, sin, mask)
        if not self.config.full_logits:
            x = x[:, -1:, :]
        return self.output(self.norm(x))
