"""`TextGenerator`: the runner around an `etc.llm` program (ExecuTorch's llm runner, in Python).

    generator = etc.llm.TextGenerator("model.pte", "tokenizer.json")
    result = generator.generate("Once upon a time", max_new_tokens=64, on_text=print_piece)
    print(result.text, result.stats)       # prefill/decode tokens and tokens/s

What it does per `generate` call:
- encodes the prompt with the `tokenizers` library (a tokenizer.json, or a
  `tokenizers.Tokenizer`), or takes token ids directly, and prepends the program's BOS
  id when it has one and the prompt does not start with it;
- starts again at cache position 0 (the reset between prompts: the program's attention
  masks positions past the current one, so nothing needs clearing), unless
  `continue_from_cache=True` continues after the previous call's tokens;
- checks the cache-length limit before running anything: prompt + new tokens must fit in
  the `get_max_context_len` positions the program was exported with (InputError
  otherwise, naming the numbers);
- prefills the prompt in calls of up to `get_max_seq_len` tokens, then decodes one token
  per call, streaming each new piece of text to `on_text` (decoded from all tokens so
  far, so multi-token characters come out whole) and stopping at a stop token (the
  program's `get_eos_ids` unless `stop_tokens` is given) or after `max_new_tokens`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from etc.errors import EtcError, InputError
from etc.llm.sampling import Sampler


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        # The first generated token comes from the prefill's logits: decode calls made the rest.
        calls = max(self.generated_tokens - 1, 0)
        return calls / self.decode_seconds if self.decode_seconds else 0.0

    def __str__(self) -> str:
        return (f"prefill: {self.prompt_tokens} tokens in {self.prefill_seconds:.3f} s "
                f"({self.prefill_tokens_per_second:.1f} tokens/s); decode: {self.generated_tokens} tokens in "
                f"{self.decode_seconds:.3f} s ({self.decode_tokens_per_second:.1f} tokens/s)")


@dataclass
class GenerationResult:
    tokens: list  # the generated token ids (the stop token included when one ended the generation)
    text: str
    stopped_by: str  # "stop_token", "max_new_tokens"
    stats: GenerationStats = field(default_factory=GenerationStats)


def _load_tokenizer(tokenizer):
    if tokenizer is None or not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise EtcError("reading a tokenizer.json needs the tokenizers package (pip install 'etc[llm]')") from error
    if not os.path.exists(tokenizer):
        raise EtcError(f"no such tokenizer file: {tokenizer}")
    try:
        return Tokenizer.from_file(os.fspath(tokenizer))
    except Exception as error:  # noqa: BLE001 - the library's own parse error, as a user error
        raise EtcError(f"cannot read tokenizer {tokenizer}: {error}") from None


class TextGenerator:
    """Generates text with an `etc.llm` program on etc's runtime."""

    def __init__(self, program, tokenizer=None, *, data_path=None):
        from etc.llm.export import read_metadata
        from etc.runtime import Runtime
        from etc.runtime.runtime import Program

        if not isinstance(program, Program):  # data_path: the weights' .ptd (export_llm(external_weights=True))
            program = Runtime.get().load_program(program, data_path=data_path)
        self.program = program
        self.metadata = read_metadata(program)
        self.method = program.load_method("forward")
        self.tokenizer = _load_tokenizer(tokenizer)
        self.position = 0  # cache positions holding this conversation's tokens

    # ---------------------------------------------------------------- tokens
    def encode(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise EtcError("a text prompt needs a tokenizer (TextGenerator(program, tokenizer=...))")
            ids = list(self.tokenizer.encode(prompt).ids)
        else:
            ids = [int(t) for t in prompt]
        if self.metadata.bos_id >= 0 and (not ids or ids[0] != self.metadata.bos_id):
            ids.insert(0, self.metadata.bos_id)
        return ids

    def decode(self, tokens) -> str:
        if self.tokenizer is None:
            return " ".join(str(t) for t in tokens)
        return self.tokenizer.decode(list(tokens))

    def reset(self) -> None:
        """Forget the conversation: the next call starts at cache position 0."""
        self.position = 0

    # ------------------------------------------------------------------ model
    def _forward(self, tokens: list[int]) -> np.ndarray:
        """Run `tokens` at the next cache positions; the last position's logits."""
        ids = np.asarray([tokens], dtype=np.int64)
        positions = np.arange(self.position, self.position + len(tokens), dtype=np.int64)
        logits = np.asarray(self.method.execute([ids, positions])[0])
        self.position += len(tokens)
        return logits.reshape(-1, logits.shape[-1])[-1]  # [1, T, vocab], or [1, vocab] (last token only)

    def _check_fits(self, prompt_length: int, max_new_tokens: int) -> None:
        total = self.position + prompt_length + max_new_tokens
        if prompt_length == 0:
            raise InputError("the prompt is empty: there is no token to start from")
        if total > self.metadata.max_context_len:
            used = f"{self.position} cached + " if self.position else ""
            raise InputError(
                f"{used}{prompt_length} prompt tokens + {max_new_tokens} new tokens = {total} positions, more than "
                f"the {self.metadata.max_context_len} the KV cache holds (exported max_context_len); ask for at "
                f"most {max(self.metadata.max_context_len - self.position - prompt_length, 0)} new tokens, "
                "shorten the prompt, or export with a longer cache")

    def generate(self, prompt, *, max_new_tokens: int | None = 32, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, stop_tokens=None, on_text=None, on_token=None,
                 continue_from_cache: bool = False) -> GenerationResult:
        """Generate up to `max_new_tokens` tokens after `prompt` (text, or a list of token ids).

        max_new_tokens=None fills the cache. `on_text(piece)` streams text, `on_token(id)` ids.
        """
        if not continue_from_cache:
            self.reset()
        prompt_ids = self.encode(prompt)
        if max_new_tokens is None:
            max_new_tokens = self.metadata.max_context_len - self.position - len(prompt_ids)
        if max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self._check_fits(len(prompt_ids), max_new_tokens)
        sampler = Sampler(temperature, top_p, seed)
        stops = set(self.metadata.eos_ids if stop_tokens is None else (int(t) for t in stop_tokens))
        stats = GenerationStats(prompt_tokens=len(prompt_ids))
        generated: list[int] = []
        text = emitted = ""
        stopped_by = "max_new_tokens"

        start = time.perf_counter()
        logits = None
        for offset in range(0, len(prompt_ids), self.metadata.max_seq_len):
            logits = self._forward(prompt_ids[offset: offset + self.metadata.max_seq_len])
        stats.prefill_seconds = time.perf_counter() - start

        start = time.perf_counter()
        while len(generated) < max_new_tokens:
            token = sampler(logits)
            generated.append(token)
            if on_token is not None:
                on_token(token)
            if token in stops:
                stopped_by = "stop_token"
                break
            text = self.decode(generated)
            # Stream what is settled: a partial UTF-8 sequence decodes to U+FFFD until its last byte comes.
            if (on_text is not None and len(text) > len(emitted) and text.startswith(emitted)
                    and not text.endswith("\ufffd")):
                on_text(text[len(emitted):])
                emitted = text
            if len(generated) < max_new_tokens:
                logits = self._forward([token])
        stats.decode_seconds = time.perf_counter() - start
        if on_text is not None and len(text) > len(emitted) and text.startswith(emitted):
            on_text(text[len(emitted):])  # the end: what is left, settled or not
        stats.generated_tokens = len(generated)
        return GenerationResult(generated, text, stopped_by, stats)
