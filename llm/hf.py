"""transformers decoder-only LMs (Llama, GPT-2, ...) in etc.llm's decoder protocol.

    model = transformers.LlamaForCausalLM(config)          # or from_pretrained
    program = etc.llm.export_llm(etc.llm.hf.from_transformers(model, max_context_len=256), max_seq_len=64)

transformers is optional for etc (a benchmark dependency): it is imported when these
functions run, never when etc.llm is imported. The wrapper is transformers' own
`TorchExportableModuleWithStaticCache` (the recipe transformers maintains for ExecuTorch:
its StaticCache layers become registered buffers written with index_copy_), called with
our protocol's positional `(tokens, input_pos)`.
"""

from __future__ import annotations

from etc.errors import EtcError


def _require_transformers():
    try:
        import transformers  # noqa: F401
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache
    except ImportError as error:
        raise EtcError("etc.llm.hf needs the transformers package (pip install transformers)") from error
    return TorchExportableModuleWithStaticCache


def from_transformers(model, *, max_context_len: int, full_logits: bool = False):
    """Wrap a transformers causal LM with a static KV cache of `max_context_len` positions.

    full_logits=False returns the last position's logits only (`logits_to_keep=1`, as
    ExecuTorch's export_llama does by default): a prefill then skips the vocabulary projection
    of every other prompt token."""
    import torch

    wrapper_class = _require_transformers()
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit is not None and max_context_len > limit:
        raise EtcError(f"from_transformers: max_context_len {max_context_len} is more than the model's "
                       f"{limit} positions")
    model.eval()
    model.generation_config.use_cache = True
    model.generation_config.cache_implementation = "static"

    class TransformersDecoder(torch.nn.Module):
        """`(tokens, input_pos) -> logits` over transformers' static-cache export wrapper."""

        # torch.export's non-strict mode traces this wrapper into a graph that torch's own
        # run_decompositions then fails on (aot_stage2_export: "expected compiled_fn to be
        # GraphModule"); the strict (dynamo) trace decomposes cleanly.
        export_strict = True

        def __init__(self):
            super().__init__()
            self.decoder = wrapper_class(model, batch_size=1, max_cache_len=max_context_len)
            # export_llm's default stop tokens. No BOS: a transformers tokenizer adds its own where
            # the model wants one (Llama's does, GPT-2's does not), as transformers' generate expects.
            eos = getattr(config, "eos_token_id", None)
            self.eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

        def forward(self, tokens, input_pos):
            if full_logits:
                return self.decoder(input_ids=tokens, cache_position=input_pos)
            # The export wrapper's own forward, plus logits_to_keep (which it does not pass on).
            wrapper = self.decoder
            for layer in wrapper.static_cache.layers:
                layer.cumulative_length.copy_(input_pos[0])
            return wrapper.model(input_ids=tokens, attention_mask=None, past_key_values=wrapper.static_cache,
                                 use_cache=True, logits_to_keep=1).logits

    return TransformersDecoder()
