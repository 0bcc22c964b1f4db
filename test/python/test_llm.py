"""etc.llm: export a decoder with a static KV cache (one method, dynamic length), generate with
TextGenerator and `etc generate`, and match eager greedy decoding token for token.

The tokenizer is a tiny byte-level BPE trained here (no downloads); the transformers test
skips when transformers is not installed (it is a benchmark-only dependency).
"""

import copy

import numpy as np
import pytest
import torch

tokenizers = pytest.importorskip("tokenizers")

import etc.llm  # noqa: E402
from etc.errors import EtcError, InputError  # noqa: E402
from etc.llm.llama import Llama, LlamaConfig  # noqa: E402

CORPUS = [
    "once upon a time there was a little robot who liked to compile models",
    "the robot ran the model on a tiny device and the device was happy",
    "a little model, a little cache, and a lot of tokens per second",
] * 4
MAX_SEQ_LEN = 8
MAX_CONTEXT_LEN = 48


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def exported(tokenizer_path, tmp_path_factory):
    """(eager model, path of its .pte): the user's own nn.Module (etc.llm.llama), eos = <eos>."""
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(tokenizer_path).get_vocab_size()
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=vocab, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96,
                              max_context_len=MAX_CONTEXT_LEN)).eval()
    program = etc.llm.export_llm(model, max_seq_len=MAX_SEQ_LEN, eos_ids=[0])
    path = tmp_path_factory.mktemp("pte") / "llama.pte"
    program.save(path)
    return model, str(path)


def eager_greedy(model, prompt_ids, max_new_tokens, stop=()):
    """The eager model's own generate loop: prefill the prompt in one call, then one token per call."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids]), torch.arange(len(prompt_ids)))
        out, position = [], len(prompt_ids)
        while len(out) < max_new_tokens:
            token = int(logits[0, -1].argmax())
            out.append(token)
            if token in stop:
                break
            logits = model(torch.tensor([[token]]), torch.tensor([position]))
            position += 1
    return out


def test_metadata_methods(exported, tokenizer_path):
    _, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    meta = generator.metadata
    assert (meta.max_seq_len, meta.max_context_len, meta.eos_ids, meta.bos_id) == (MAX_SEQ_LEN, MAX_CONTEXT_LEN, [0], -1)
    assert meta.vocab_size == generator.tokenizer.get_vocab_size()
    # one method with a dynamic length, planned at its bound
    assert [int(s) for s in generator.program.metadata("forward").input_tensor_meta(0).sizes()] == [1, MAX_SEQ_LEN]


def test_greedy_matches_eager_token_for_token(exported, tokenizer_path):
    """A prompt longer than max_seq_len (a chunked prefill), then 16 decode steps."""
    model, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    prompt = "once upon a time the little robot ran the model on a device"
    prompt_ids = generator.encode(prompt)
    assert len(prompt_ids) > MAX_SEQ_LEN
    result = generator.generate(prompt, max_new_tokens=16, stop_tokens=[])
    assert result.tokens == eager_greedy(model, prompt_ids, 16)
    assert result.stopped_by == "max_new_tokens" and result.stats.generated_tokens == 16
    assert result.text == generator.tokenizer.decode(result.tokens)
    assert result.stats.prefill_tokens_per_second > 0 and result.stats.decode_tokens_per_second > 0


def test_reset_between_prompts_and_streaming(exported, tokenizer_path):
    model, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    pieces = []
    first = generator.generate("the robot", max_new_tokens=10, stop_tokens=[], on_text=pieces.append)
    assert "".join(pieces) == first.text
    generator.generate("a lot of tokens per second and a little cache", max_new_tokens=10, stop_tokens=[])
    again = generator.generate("the robot", max_new_tokens=10, stop_tokens=[])
    assert again.tokens == first.tokens == eager_greedy(model, generator.encode("the robot"), 10)
    # continuing the conversation is the eager loop over the concatenated tokens
    more = generator.generate(" and", max_new_tokens=5, stop_tokens=[], continue_from_cache=True)
    ids = generator.encode("the robot") + again.tokens + generator.encode(" and")
    assert more.tokens == eager_greedy(model, ids, 5)


def test_stop_token_ends_generation(exported, tokenizer_path):
    model, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    ids = generator.encode("once upon a time")
    greedy = eager_greedy(model, ids, 12)
    stop = greedy[4]
    result = generator.generate(ids, max_new_tokens=12, stop_tokens=[stop])
    assert result.tokens == greedy[: greedy.index(stop) + 1] and result.stopped_by == "stop_token"


def test_cache_length_limit_is_a_clear_error(exported, tokenizer_path):
    _, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    with pytest.raises(InputError, match=r"more than the 48 the KV cache holds.*ask for at most 43 new tokens"):
        generator.generate([5, 6, 7, 8, 9], max_new_tokens=44)
    assert len(generator.generate([5, 6, 7, 8, 9], max_new_tokens=None, stop_tokens=[]).tokens) == 43


def test_sampling_is_seeded_and_top_p_narrows(exported, tokenizer_path):
    _, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    a = generator.generate("the robot", max_new_tokens=8, temperature=1.5, seed=7, stop_tokens=[])
    b = generator.generate("the robot", max_new_tokens=8, temperature=1.5, seed=7, stop_tokens=[])
    assert a.tokens == b.tokens
    greedy = generator.generate("the robot", max_new_tokens=8, stop_tokens=[])
    nucleus = generator.generate("the robot", max_new_tokens=8, temperature=1.5, top_p=1e-6, seed=3, stop_tokens=[])
    assert nucleus.tokens == greedy.tokens  # the smallest nucleus is the argmax alone
    sampler = etc.llm.Sampler(temperature=1.0, top_p=0.5, seed=0)
    logits = np.log(np.array([0.45, 0.3, 0.15, 0.1]))
    assert {sampler(logits) for _ in range(200)} == {0, 1}
    with pytest.raises(EtcError, match="top_p"):
        etc.llm.Sampler(top_p=0.0)


def test_etc_generate_cli(exported, tokenizer_path, capsys):
    from etc.tools.etc_main import main

    model, path = exported
    generator = etc.llm.TextGenerator(path, tokenizer_path)
    want = generator.decode(eager_greedy(model, generator.encode("the robot"), 6))  # the eager model's tokens
    assert main(["generate", path, "--tokenizer", tokenizer_path, "--prompt", "the robot",
                 "--max-new-tokens", "6", "--stop-token"]) == 0
    captured = capsys.readouterr()
    assert captured.out == want + "\n"
    assert "prefill:" in captured.err and "decode: 6 tokens" in captured.err and "tokens/s" in captured.err
    assert main(["generate", path, "--tokenizer", tokenizer_path, "--prompt", "x", "--max-new-tokens", "199"]) == 1
    assert "KV cache holds" in capsys.readouterr().err


def test_a_program_without_the_llm_methods_is_refused(tmp_path):
    import etc

    program = etc.to_edge(torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))).to_executorch()
    with pytest.raises(EtcError, match="not an etc.llm export"):
        etc.llm.TextGenerator(program.buffer)


def test_transformers_llama_greedy_matches_generate(tokenizer_path):
    """A transformers Llama from a config: etc's tokens equal transformers' own greedy generate."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(tokenizer_path).get_vocab_size()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    program = etc.llm.export_llm(etc.llm.from_transformers(model, max_context_len=32), max_seq_len=MAX_SEQ_LEN)
    generator = etc.llm.TextGenerator(program.buffer, tokenizer_path)
    assert (generator.metadata.bos_id, generator.metadata.eos_ids) == (-1, [config.eos_token_id])
    ids = generator.encode("once upon a time there was a robot")
    result = generator.generate(ids, max_new_tokens=12, stop_tokens=[])
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, min_new_tokens=12,
                              cache_implementation="dynamic")[0, len(ids):].tolist()
    assert result.tokens == want


def test_program_runs_on_executorch(exported):
    """The same .pte (dynamic length, cache in mutable buffers, metadata methods) on stock ExecuTorch:
    a prefill of 5 tokens and greedy decode steps give the eager loop's tokens."""
    executorch_runtime = pytest.importorskip("executorch.runtime")
    model, path = exported
    program = executorch_runtime.Runtime.get().load_program(path)
    assert int(program.load_method("get_max_context_len").execute([])[0]) == MAX_CONTEXT_LEN
    forward = program.load_method("forward")
    prompt = [5, 9, 13, 2, 77]
    logits = forward.execute([torch.tensor([prompt]), torch.arange(len(prompt))])[0]
    tokens = []
    for step in range(6):
        tokens.append(int(logits[0, -1].argmax()))
        logits = forward.execute([torch.tensor([[tokens[-1]]]), torch.tensor([len(prompt) + step])])[0]
    assert tokens == eager_greedy(model, prompt, 6)


def test_etc_llm_does_not_import_transformers():
    """transformers is a benchmark-only dependency: importing every etc.llm module must not load it
    (etc.llm.hf imports it when from_transformers is called)."""
    import subprocess
    import sys

    code = ("import sys, etc.llm, etc.llm.export, etc.llm.generator, etc.llm.llama, etc.llm.hf, etc.llm.cli; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
