"""LLM benchmarks: prefill and decode tokens/s of `etc.llm` exports, against ExecuTorch+XNNPACK and torch.

    python -m etc.bench.llm [--only llama_15m,gpt2_4l] [--runs N] [--decode-tokens N] [--timeout S]

Each model (random weights, no downloads) is exported ONCE with `etc.llm.export_decoder`: one
method `forward(tokens[1, T], input_pos[T])` with T dynamic in [1, 128] and the static KV cache
in mutable buffers (index_copy_). That same ExportedProgram goes to etc (`to_edge` +
`to_backend(CpuPartitioner(num_threads=1))` + `to_executorch()`) and to ExecuTorch
(`to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])` + `to_executorch()`,
run by `executorch.runtime` with its threadpool at 1 thread); torch eager runs the module
itself on 1 thread.

Measured per round, each backend in turn (interleaved), in CPU time of the calling thread
(all three compute on it with one thread, see `layers.interleaved`): a prefill of 32
tokens and one of 128 (each from cache position 0), then `--decode-tokens` decode calls of one
token each at positions 128, 129, ... (steady state: the cache holds the prompt). Tokens/s are
from the medians over rounds.

`llama_15m_8da4w` is the same Llama quantized by torchao as ExecuTorch's export_llama `-qmode 8da4w`
(int4 weights in groups of 32, int8 activations per token): that one quantized export goes to etc
(the 8da4w kernel of the cpu target) and to ExecuTorch's XnnpackPartitioner (XNNPACK's own
dynamically quantized int4 linears); program sizes (.pte bytes) are given for every model.
XNNPACK stores the group scales as bfloat16, rounding float32 ones (its program then computes
other numbers than the model); etc stores what the model has. `llama_15m_8da4w_bf16` quantizes
with bfloat16 scales, the same numbers on both.

Also measured, as ExecuTorch's export_llama does without `--enable_dynamic_shape`: a second
export with a static length of 1 (the decode-only program), on etc and XNNPACK. It tells the
cost of the dynamic length apart from the rest.

Each model runs in its own child process with a timeout (as bench/hf_models.py does), so a
crash or hang of a compiler under test is a row, not the end of the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

MAX_SEQ_LEN = 128  # the prefill bound of the dynamic export (a prompt of 128 is one call)
MAX_CONTEXT_LEN = 256  # cache positions: a 128-token prompt + the decoded tokens fit
PROMPTS = (32, 128)


@dataclass(frozen=True)
class Model:
    name: str
    what: str
    build: Callable  # () -> decoder module in etc.llm's protocol (tokens, input_pos) -> logits
    backends: tuple = ()  # the backends measured (default: all of BACKENDS)


def _llama_15m():
    import torch

    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=32000, dim=288, n_layers=6, n_heads=6, n_kv_heads=6, hidden_dim=768,
                             max_context_len=MAX_CONTEXT_LEN)).eval()


def _llama_15m_8da4w(scale_dtype=None):
    """The same Llama, its Linears quantized by torchao as ExecuTorch's export_llama `-qmode 8da4w` does:
    int8 activations quantized per token at run time, int4 weights in groups of 32 (symmetric);
    `scale_dtype` torchao's `weight_scale_dtype` (None: float32 group scales)."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    module = _llama_15m()
    quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32),
                                                            weight_scale_dtype=scale_dtype),
              filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear))
    return module


def _llama_15m_8da4w_bf16():
    import torch

    return _llama_15m_8da4w(torch.bfloat16)


def _gpt2(layers: int):
    def build():
        import torch
        import transformers

        from etc.llm.hf import from_transformers

        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=layers)).eval()
        return from_transformers(model, max_context_len=MAX_CONTEXT_LEN)
    return build


MODELS: dict[str, Model] = {m.name: m for m in [
    Model("llama_15m", "etc.llm's Llama at stories15M's size (dim 288, 6 layers, 6 heads, FFN 768, vocab 32000)",
          _llama_15m),
    Model("llama_15m_8da4w", "llama_15m with torchao's 8da4w (Int8DynamicActivationIntxWeightConfig: int4 weights "
          "in groups of 32, int8 activations per token), the same quantized export to both", _llama_15m_8da4w,
          backends=("etc", "xnnpack", "torch")),
    Model("llama_15m_8da4w_bf16", "llama_15m_8da4w with bfloat16 group scales (torchao's weight_scale_dtype): "
          "XNNPACK rounds float32 scales to bfloat16 when it packs them, so these are the same numbers on "
          "both, and the program sizes compare like for like", _llama_15m_8da4w_bf16, backends=("etc", "xnnpack")),
    Model("gpt2_4l", "transformers GPT-2 (768 wide, 4 layers, 12 heads, vocab 50257) through etc.llm.hf",
          _gpt2(4)),
]}


# ---------------------------------------------------------------- one model, in the child
# The child's protocol is common's (emit, run_child): JSON lines to the parent, a failing backend a one-line error in
# its row (printed under Failures in BENCHMARKS.md), a crash or a timeout a row too (run_child).
from etc.bench.common import emit, error_text, executorch_method, executorch_program, executorch_threads, \
    measure_models, not_tuned_lines, run_child  # noqa: E402


class _Backend:
    """`run(tokens[1, T], positions[T]) -> logits` of one backend, on its inputs' own types."""

    def __init__(self, run, convert):
        self.run, self.convert = run, convert

    def __call__(self, tokens, positions):
        return self.run(self.convert(tokens), self.convert(positions))


def _etc_program(programs: dict, stats: dict, prefix: str):
    import etc
    from etc.targets.cpu import CpuPartitioner

    start, start_cpu = time.perf_counter(), time.process_time()
    edge = etc.to_edge(programs).to_backend(CpuPartitioner(num_threads=1))
    program = edge.to_executorch()
    stats[f"{prefix}_compile_s"] = time.perf_counter() - start
    stats[f"{prefix}_pte_bytes"] = len(program.buffer)
    stats[f"{prefix}_compile_cpu_s"] = time.process_time() - start_cpu
    reports = [r for r in edge.delegation_reports]
    stats[f"{prefix}_partitions"] = sum(r.partitions for r in reports)
    stats[f"{prefix}_delegated_ops"] = sum(sum(r.delegated.values()) for r in reports)
    stats[f"{prefix}_portable_ops"] = sum(sum(r.portable.values()) for r in reports)
    stats[f"{prefix}_not_tuned"] = not_tuned_lines(reports)
    return program


def _etc_backend(programs: dict, stats: dict, prefix: str):
    from etc.runtime import Runtime

    program = _etc_program(programs, stats, prefix)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    return _Backend(lambda t, p: method.execute([t, p])[0], lambda x: x.numpy())


def _etc_executorch_backend(programs: dict, stats: dict, prefix: str):
    """etc's program on ExecuTorch's runtime with etc's cpu backend (bench/executorch_backend.py)."""
    import executorch.runtime  # noqa: F401 - ExecuTorch's runtime in the process before etc's backend registers in it

    from etc.runtime import executorch_backend

    stats["et_threads"] = executorch_threads(1)
    executorch_backend.load()
    method = executorch_method(_etc_program(programs, stats, prefix))
    return _Backend(lambda t, p: method.execute([t, p])[0], lambda x: x)


def _xnnpack_backend(exported, stats: dict, prefix: str):
    stats["et_threads"] = executorch_threads(1)
    start, start_cpu = time.perf_counter(), time.process_time()
    program = executorch_program(exported, xnnpack=True)
    stats[f"{prefix}_compile_s"] = time.perf_counter() - start
    stats[f"{prefix}_compile_cpu_s"] = time.process_time() - start_cpu
    stats[f"{prefix}_pte_bytes"] = len(program.buffer)
    plan = program.executorch_program.execution_plan[0]
    stats[f"{prefix}_delegate_calls"] = sum(
        1 for chain in plan.chains for i in chain.instructions if type(i.instr_args).__name__ == "DelegateCall")
    stats[f"{prefix}_kernel_calls"] = sum(
        1 for chain in plan.chains for i in chain.instructions if type(i.instr_args).__name__ == "KernelCall")
    method = executorch_method(program)
    return _Backend(lambda t, p: method.execute([t, p])[0], lambda x: x)


def _torch_backend(module):
    return _Backend(lambda t, p: module(t, p), lambda x: x)


def _max_diff(got, expected) -> float:
    import torch

    return float((torch.as_tensor(got).reshape(expected.shape) - expected).abs().max())


def measure(name: str, runs: int, decode_tokens: int, backends: set, budget_s: float = 20.0) -> None:
    import copy
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from etc.llm.export import export_decoder

    torch.set_num_threads(1)
    module = MODELS[name].build()
    # Exported before eager runs it: eager's calls below write its KV cache, and a user exports a fresh
    # model (whose zero cache the program does not store).
    fresh = copy.deepcopy(module)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # (with autograd on, the cache buffers written here could not be deep-copied)
        vocab = int(module(torch.zeros((1, 1), dtype=torch.int64), torch.zeros(1, dtype=torch.int64)).shape[-1])
        prompt = torch.randint(0, vocab, (1, max(PROMPTS)), generator=generator)
        next_tokens = torch.randint(0, vocab, (1, decode_tokens), generator=generator)
        expected = module(prompt[:, :PROMPTS[0]], torch.arange(PROMPTS[0]))  # the check: a 32-token prefill
    emit(name=name, ref_max=float(expected.abs().max()), stage="export")

    start = time.perf_counter()
    programs = export_decoder(fresh, max_seq_len=MAX_SEQ_LEN)
    pristine = copy.deepcopy(programs["forward"])  # ExecuTorch's copy: neither lowering sees the other's
    emit(export_s=time.perf_counter() - start)
    static = None  # the static 1-token (decode-only) export, built when a backend wants it

    def decode_only():
        nonlocal static
        if static is None:
            exported = export_decoder(fresh, max_seq_len=1, max_context_len=MAX_CONTEXT_LEN)["forward"]
            static = (exported, copy.deepcopy(exported))
        return static

    makers = {
        "etc": lambda stats: _etc_backend(programs, stats, "etc"),
        "etc_executorch": lambda stats: _etc_executorch_backend(programs, stats, "etc_executorch"),
        "xnnpack": lambda stats: _xnnpack_backend(pristine, stats, "xnnpack"),
        "torch": lambda stats: _torch_backend(module),
        "etc_static": lambda stats: _etc_backend({"forward": decode_only()[0]}, stats, "etc_static"),
        "xnnpack_static": lambda stats: _xnnpack_backend(decode_only()[1], stats, "xnnpack_static"),
    }
    calls = {}
    for key in [k for k in makers if k in backends]:
        emit(stage=f"{key} compile")
        stats: dict = {}
        try:
            backend = makers[key](stats)
            emit(**stats, stage=f"{key} check")
            with torch.no_grad():
                if key.endswith("_static"):  # token by token, as a runner without a dynamic length prefills
                    for i in range(PROMPTS[0]):
                        got = backend(prompt[:, i:i + 1], torch.tensor([i]))
                else:
                    got = backend(prompt[:, :PROMPTS[0]], torch.arange(PROMPTS[0]))
            emit(**{f"{key}_maxdiff": _max_diff(got, expected[:, -1:, :])})
            calls[key] = backend
        except Exception as e:  # noqa: BLE001 - reported in the row
            emit(**{f"{key}_error": error_text(e)})

    emit(stage="timing " + ",".join(calls))
    samples = {key: {} for key in calls}
    positions = torch.arange(max(PROMPTS))
    decode_positions = [torch.tensor([max(PROMPTS) + i]) for i in range(decode_tokens)]
    decode_inputs = [next_tokens[:, i:i + 1] for i in range(decode_tokens)]
    deadline = time.perf_counter() + budget_s
    done = 0
    with torch.no_grad():
        while done < runs or (done < 3 * runs and time.perf_counter() < deadline):
            for key, backend in calls.items():
                if not key.endswith("_static"):
                    for length in PROMPTS:
                        t, p = backend.convert(prompt[:, :length]), backend.convert(positions[:length])
                        start = time.thread_time()
                        backend.run(t, p)
                        samples[key].setdefault(f"prefill{length}", []).append(time.thread_time() - start)
                else:  # the decode below reads a cache: fill it the only way this program can
                    for i in range(max(PROMPTS)):
                        backend(prompt[:, i:i + 1], positions[i:i + 1])
                inputs = [(backend.convert(t), backend.convert(p)) for t, p in zip(decode_inputs, decode_positions)]
                start = time.thread_time()
                for t, p in inputs:
                    backend.run(t, p)
                samples[key].setdefault("decode", []).append((time.thread_time() - start) / decode_tokens)
            done += 1
            if done >= runs and time.perf_counter() > deadline:
                break
    result = {}
    for key, kinds in samples.items():
        for kind, times in kinds.items():
            tokens = 1 if kind == "decode" else int(kind.removeprefix("prefill"))
            result[f"{key}_{kind}_tps"] = tokens / statistics.median(times)
    emit(**result, rounds=done, stage="done")


# ---------------------------------------------------------------- the parent
BACKENDS = ("etc", "xnnpack", "torch", "etc_static", "xnnpack_static")  # (and "etc_executorch": bench_executorch)


def measure_in_child(name: str, runs: int, decode_tokens: int, backends, timeout_s: float) -> tuple[dict, str | None]:
    cmd = [sys.executable, "-m", "etc.bench.llm", "--child", name, "--runs", str(runs),
           "--decode-tokens", str(decode_tokens), "--backends", ",".join(backends)]
    # One thread each: numpy's BLAS (etc's portable matmuls) would otherwise compute on other threads too,
    # which the calling thread's CPU time does not count.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return run_child(cmd, timeout_s, env)


def _backends(name: str) -> tuple:
    model = MODELS.get(name)
    return (model.backends if model is not None else ()) or BACKENDS


def measure_isolated(name: str, runs: int, decode_tokens: int, timeout_s: float) -> dict:
    """The model's row; when a backend crashes the child, the others are measured again without it."""
    backends = list(_backends(name))
    row, failure = measure_in_child(name, runs, decode_tokens, backends, timeout_s)
    row["name"] = name
    while failure is not None:
        stage = row.get("stage", "")
        culprit = next((b for b in sorted(backends, key=len, reverse=True) if stage.startswith(b + " ")), None)
        if culprit is None or culprit not in backends:
            row["error"] = failure
            return row
        row[f"{culprit}_error"] = failure
        backends.remove(culprit)
        again, failure = measure_in_child(name, runs, decode_tokens, backends, timeout_s)
        for key, value in again.items():
            if key not in row or key.endswith("_tps") or key == "stage":
                row[key] = value
    return row


def _tps(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _bytes(value) -> str:
    return "n/a" if value is None else f"{value / 2 ** 20:.2f} MiB"


def _speed(a, b) -> str:
    """a's tokens/s over b's: above 1.00x a is faster."""
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def render(rows: list[dict], decode_tokens: int) -> str:
    lines = ["Tokens/s (higher is better); ratios are etc's tokens/s over the other's (above 1.00x etc is "
             "faster). Done when (issue 12): etc decode >= 1.00x of XNNPACK, prefill >= 0.83x (within 1.2x).", "",
             "| model | phase | etc cpu | ExecuTorch XNNPACK | torch 1t | etc/XNNPACK | etc/torch |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        phases = [(f"prefill {n}", f"prefill{n}") for n in PROMPTS] + [("decode", "decode")]
        for label, kind in phases:
            etc_, et, eager = (r.get(f"{k}_{kind}_tps") for k in ("etc", "xnnpack", "torch"))
            lines.append(f"| {r['name']} | {label} | {_tps(etc_)} | {_tps(et)} | {_tps(eager)} | "
                         f"{_speed(etc_, et)} | {_speed(etc_, eager)} |")
        etc_, et = r.get("etc_static_decode_tps"), r.get("xnnpack_static_decode_tps")
        if "etc_static" not in _backends(r["name"]):
            continue
        lines.append(f"| {r['name']} | decode, static 1-token export | {_tps(etc_)} | {_tps(et)} | "
                     f"{_tps(r.get('torch_decode_tps'))} | {_speed(etc_, et)} | "
                     f"{_speed(etc_, r.get('torch_decode_tps'))} |")
    lines += ["", "Program sizes (.pte bytes of the dynamic-length export; etc's ratio over XNNPACK's, below 1.00x "
              "etc is smaller):", "", "| model | etc cpu | ExecuTorch XNNPACK | etc/XNNPACK |", "|---|---|---|---|"]
    for r in rows:
        etc_, et = r.get("etc_pte_bytes"), r.get("xnnpack_pte_bytes")
        lines.append(f"| {r['name']} | {_bytes(etc_)} | {_bytes(et)} | {_speed(etc_, et)} |")
    lines += ["", "How each program ran (the dynamic-length export unless said):", ""]
    for r in rows:
        parts = []
        for key, what in (("etc", "etc cpu"), ("etc_static", "etc cpu static")):
            if r.get(f"{key}_partitions") is not None:
                off_path = r.get(f"{key}_not_tuned") or []
                parts.append(f"{what}: {r[f'{key}_partitions']} delegate partition(s), "
                             f"{r.get(f'{key}_portable_ops', 0)} op(s) on portable kernels, decisions off the "
                             "tuned path: " + ("; ".join(line.removeprefix("NOT TUNED").strip() for line in off_path)
                                               or "none"))
        for key, what in (("xnnpack", "XNNPACK"), ("xnnpack_static", "XNNPACK static")):
            if r.get(f"{key}_delegate_calls") is not None:
                parts.append(f"{what}: {r[f'{key}_delegate_calls']} delegate call(s) + "
                             f"{r[f'{key}_kernel_calls']} portable kernel call(s)")
        diffs = [f"{k.removesuffix('_maxdiff')} {v:.2g}" for k, v in r.items() if k.endswith("_maxdiff")]
        if diffs:
            parts.append(f"max abs diff of the last logits against eager (of {r.get('ref_max', 0):.2g}): "
                         + ", ".join(diffs))
        compile_ = [f"{k.removesuffix('_compile_cpu_s')} {v:.1f}" for k, v in r.items() if k.endswith("_compile_cpu_s")]
        if compile_:
            parts.append("compile CPU s: " + ", ".join(compile_))
        lines.append(f"- {r['name']}: " + "; ".join(parts) + ".")
    problems = [(r["name"], k[:-6] or "run", v) for r in rows for k, v in r.items() if k.endswith("error")]
    if problems:
        lines += ["", "Failures:", ""]
        lines += [f"- {name} ({who}): {msg}" for name, who, msg in problems]
    lines += ["", f"Prefill: one call with the whole prompt from position 0 (`max_seq_len` {MAX_SEQ_LEN}, cache "
              f"{MAX_CONTEXT_LEN} positions). Decode: {decode_tokens} calls of one token at positions 128 on, "
              "per round; CPU time of the calling thread, medians over interleaved rounds. The static rows are "
              "a second export with a fixed length of 1 (ExecuTorch's export_llama without "
              "`--enable_dynamic_shape`: the runner then prefills token by token); torch's figure there is its "
              "decode above. Models: " + "; ".join(f"`{m.name}` {m.what}" for m in MODELS.values()
                                                   if any(r["name"] == m.name for r in rows)) + "."]
    return "\n".join(lines) + "\n"


def run(only: list[str] | None = None, runs: int = 5, decode_tokens: int = 64, timeout_s: float = 1800.0,
        log=sys.stderr) -> str:
    rows = measure_models(MODELS, only, lambda name: measure_isolated(name, runs, decode_tokens, timeout_s),
                          label="bench_llm", log=log)
    return render(rows, decode_tokens)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated model names (default: all): " + ", ".join(MODELS))
    parser.add_argument("--runs", type=int, default=5, help="interleaved rounds (at least)")
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per model and child")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--backends", default=",".join(BACKENDS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.decode_tokens < 1 or max(PROMPTS) + args.decode_tokens > MAX_CONTEXT_LEN:
        parser.error(f"--decode-tokens must be in [1, {MAX_CONTEXT_LEN - max(PROMPTS)}]")
    if args.child:
        measure(args.child, args.runs, args.decode_tokens, set(args.backends.split(",")))
        return 0
    print(run(args.only.split(",") if args.only else None, args.runs, args.decode_tokens, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
