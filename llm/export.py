"""Export a decoder-only LM with a static KV cache to one `.pte` program (ExecuTorch's
`export_llama`, in our shape).

    program = etc.llm.export_llm(model, max_seq_len=128, eos_ids=[2])
    program.save("model.pte")

`model` follows the protocol of `etc.llm.llama` (`forward(tokens[1, T], input_pos[T]) ->
logits[1, T, vocab]`, the cache in mutable buffers); `etc.llm.hf.from_transformers` wraps
a transformers Llama/GPT-2 into it.

One method, `forward`, with a dynamic length T in [1, max_seq_len]: a prefill is one call
with the whole prompt, a decode a call with one token. Why one method and not two
(prefill + decode): a `.pte` method's mutable buffers are that method's own state (etc's
runtime and ExecuTorch's both give each method its own planned copy), so two methods
would hold two caches and a decode would not see what the prefill wrote. ExecuTorch's
`export_llama --enable_dynamic_shape` makes the same choice.

The program also carries ExecuTorch's metadata methods (no inputs, one int64 output each),
which the runner reads instead of needing side files: `get_max_seq_len` (tokens per
call), `get_max_context_len` (cache positions), `get_vocab_size`, `get_bos_id` and
`get_eos_ids` (a list; empty when the model has none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etc.errors import EtcError

METADATA_METHODS = ("get_max_seq_len", "get_max_context_len", "get_vocab_size", "get_bos_id", "get_eos_ids")


@dataclass
class LLMMetadata:
    max_seq_len: int
    max_context_len: int
    vocab_size: int
    bos_id: int = -1
    eos_ids: list = field(default_factory=list)


def _constant_method(values):
    """An ExportedProgram with no inputs returning `values` (int64)."""
    import torch

    class Constant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("value", torch.tensor(values, dtype=torch.int64))

        def forward(self):
            return self.value.clone()

    return torch.export.export(Constant(), ())


def _cache_length(model) -> int | None:
    """The sequence length of the first value-cache buffer ([1, heads, positions, head_dim]; key caches
    may be stored transposed, value caches are not)."""
    for name, buffer in model.named_buffers():
        if buffer.dim() == 4 and any(key in name for key in ("v_cache", "value_cache", "values")):
            return int(buffer.shape[2])
    return None


def export_decoder(model, *, max_seq_len: int, max_context_len: int | None = None, vocab_size: int | None = None,
                   bos_id: int | None = None, eos_ids=(), strict: bool | None = None) -> dict:
    """torch.export the decoder with a dynamic length, plus the metadata methods:
    {method name: ExportedProgram}, ready for `etc.to_edge`."""
    import torch

    model.eval()
    if strict is None:  # a wrapper may know which torch.export mode traces it (etc.llm.hf)
        strict = bool(getattr(model, "export_strict", False))
    if not eos_ids:  # ... and its stop tokens (etc.llm.hf: from the model's config)
        eos_ids = getattr(model, "eos_ids", ())
    if max_context_len is None:
        max_context_len = _cache_length(model)
        if max_context_len is None:
            raise EtcError("export_llm: cannot find the KV cache's length in the model's buffers; "
                           "pass max_context_len")
    if not 1 <= max_seq_len <= max_context_len:
        raise EtcError(f"export_llm: max_seq_len ({max_seq_len}) must be between 1 and the cache length "
                       f"({max_context_len})")
    example_length = min(2, max_seq_len)
    tokens = torch.zeros((1, example_length), dtype=torch.int64)
    positions = torch.arange(example_length, dtype=torch.int64)
    dynamic_shapes = None
    if max_seq_len > 1:
        length = torch.export.Dim("seq_len", min=1, max=max_seq_len)
        dynamic_shapes = ({1: length}, {0: length})
    state = {name: buffer.clone() for name, buffer in model.named_buffers()}
    with torch.no_grad():
        exported = torch.export.export(model, (tokens, positions), dynamic_shapes=dynamic_shapes, strict=strict)
        if vocab_size is None:
            vocab_size = int(model(tokens, positions).shape[-1])
    for name, buffer in model.named_buffers():  # the probe call above wrote the cache: put it back
        buffer.copy_(state[name])
    metadata = LLMMetadata(max_seq_len, max_context_len, vocab_size, -1 if bos_id is None else int(bos_id),
                           [int(t) for t in eos_ids])
    programs = {"forward": exported}
    for name, value in zip(METADATA_METHODS, (metadata.max_seq_len, metadata.max_context_len, metadata.vocab_size,
                                              metadata.bos_id, metadata.eos_ids)):
        programs[name] = _constant_method(value)
    return programs


def export_llm(model, *, max_seq_len: int, max_context_len: int | None = None, vocab_size: int | None = None,
               bos_id: int | None = None, eos_ids=(), partitioner=None, strict: bool | None = None):
    """Export, lower and emit a decoder-only LM: an `ExecutorchProgram` (`.save(path)`, `.buffer`).

    max_seq_len: the most tokens one call takes (the prefill bound); max_context_len: cache
    positions (read from the cache buffers when not given); eos_ids: the stop tokens the runner
    uses by default; partitioner: optional, as in `EdgeProgram.to_backend`.
    """
    from etc.compiler.program import to_edge

    programs = export_decoder(model, max_seq_len=max_seq_len, max_context_len=max_context_len,
                              vocab_size=vocab_size, bos_id=bos_id, eos_ids=eos_ids, strict=strict)
    edge = to_edge(programs)
    if partitioner is not None:
        edge = edge.to_backend(partitioner)
    return edge.to_executorch()


def read_metadata(program) -> LLMMetadata:
    """The metadata methods of a loaded program (etc's runtime Program)."""
    missing = [name for name in METADATA_METHODS if name not in program.method_names]
    if "forward" not in program.method_names or missing:
        raise EtcError(f"this program is not an etc.llm export: it lacks method(s) "
                       f"{', '.join((['forward'] if 'forward' not in program.method_names else []) + missing)} "
                       "(export it with etc.llm.export_llm)")
    values = {}
    for name in METADATA_METHODS:
        out = program.load_method(name).execute([])[0]
        values[name] = [int(v) for v in out.reshape(-1)] if name == "get_eos_ids" else int(out)
    return LLMMetadata(values["get_max_seq_len"], values["get_max_context_len"], values["get_vocab_size"],
                       values["get_bos_id"], values["get_eos_ids"])
