"""etc.llm: export decoder-only LMs with a static KV cache and generate text with them.

    import etc.llm
    program = etc.llm.export_llm(etc.llm.Llama(etc.llm.LlamaConfig()), max_seq_len=32)
    program.save("model.pte")
    generator = etc.llm.TextGenerator("model.pte", "tokenizer.json")
    print(generator.generate("Once upon a time", max_new_tokens=32).text)

or from the command line: `etc generate model.pte --tokenizer tokenizer.json --prompt "..."`.
transformers models go through `etc.llm.hf.from_transformers` (transformers is imported
only there). Names resolve lazily, so `import etc.llm` imports no torch model code.
"""

from __future__ import annotations

_EXPORTS = {
    "export_llm": "etc.llm.export",
    "export_decoder": "etc.llm.export",
    "read_metadata": "etc.llm.export",
    "LLMMetadata": "etc.llm.export",
    "TextGenerator": "etc.llm.generator",
    "GenerationResult": "etc.llm.generator",
    "GenerationStats": "etc.llm.generator",
    "Sampler": "etc.llm.sampling",
    "Llama": "etc.llm.llama",
    "LlamaConfig": "etc.llm.llama",
    "from_transformers": "etc.llm.hf",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'etc.llm' has no attribute {name!r}")
