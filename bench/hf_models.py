"""Real models: transformers architectures at their real sizes, random weights, no downloads.

    python -m etc.bench.hf_models [--only name1,name2] [--runs N] [--timeout S]

Each model is built from its `transformers` config (`XxxConfig(...)` -> `XxxModel` /
`...ForImageClassification` / `...ForCausalLM`, `torch.manual_seed(0)`), in eval mode,
wrapped to return one plain tensor and exported with `torch.export.export`. For each, in a
child process with a timeout (so a crash or a hang of a compiler under test is a row, not
the end of the run): etc's compile time (`to_edge` + `to_backend(CpuPartitioner())` +
`to_executorch()`) against ExecuTorch's (`to_edge_transform_and_lower` with XNNPACK +
`to_executorch()`), both after the same `torch.export`; the delegation summary; the max
abs difference of etc's output against eager; and the median latency of etc cpu, torch
eager and ExecuTorch + XNNPACK, one thread each, called in turn (interleaved), in CPU time
of the calling thread (see `layers.interleaved`).

When the etc side crashes, the model is measured again without it, so its row still has
torch and XNNPACK. Needs `transformers` (a bench-only dependency, see the Makefile).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

from etc.bench.common import (emit, error_text, executorch_threads, interleaved, measure_models, ms, not_tuned_lines,
                              ratio, run_child)

ms2 = functools.partial(ms, digits=2)  # this table's milliseconds


@dataclass(frozen=True)
class Model:
    name: str
    what: str
    build: Callable  # () -> (nn.Module returning one tensor, example inputs tuple)


class _Plain:
    """Wraps a transformers model so that forward returns its first output as a tensor."""

    @staticmethod
    def wrap(model, **kwargs):
        import torch

        class Plain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                out = self.model(x, return_dict=False, **kwargs)
                return out[0] if isinstance(out, (tuple, list)) else out

        return Plain().eval()


def _calibrate_batch_norm(model, batch) -> None:
    """Give BatchNorm the running statistics of its real input, as training would.

    With random weights and BN's initial statistics (mean 0, variance 1) activations shrink
    layer after layer: MobileNetV2's logits came out ~1e-21 and EfficientNet's and
    MobileViT's were denormal or zero, which times denormal arithmetic (10x slower on x86)
    and checks nothing. One forward pass in train mode with a cumulative average sets each
    BN's statistics to what it sees, so each normalises to unit variance as in a trained model.
    BN's scale and shift are reset to torch's 1 and 0 first: transformers initialises them like
    any weight (N(0, 0.02)), and EfficientNet-B0's features then reached the classifier at 1e-18,
    its logits were the classifier's bias exactly and the max-abs-diff column compared nothing."""
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in model.modules():  # HF's EfficientNet init still vanished through the SE gates: torch's default
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.reset_parameters()
    for bn in bns:  # transformers' init draws BN's scale from N(0, 0.02): each BN shrank activations ~50x
        bn.reset_parameters()
        bn.momentum = None
    model.train()
    with torch.no_grad():
        model(batch)
    model.eval()


def _global_mean_pooler(model) -> None:
    """HF's EfficientNet pools with `nn.AvgPool2d(hidden_dim=1280, ceil_mode=True)` over its 7x7 map: the
    map's mean, written as a 1280-wide window that ExecuTorch's XNNPACK partitioner refuses, so its
    column timed the portable avg_pool2d (2-5 s) instead of XNNPACK. The same mean as `x.mean((2, 3))`,
    which every runtime here delegates, makes the row compare the backends."""
    import torch

    class GlobalMean(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3), keepdim=True)

    model.efficientnet.pooler = GlobalMean()


def _image(cls_name: str, config_name: str, size: int = 224, adjust=None, **config):
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, config_name)(**config)
        model = getattr(transformers, cls_name)(cfg)
        if adjust is not None:
            adjust(model)
        _calibrate_batch_norm(model, torch.randn(2, 3, size, size))
        return _Plain.wrap(model.eval()), (torch.randn(1, 3, size, size),)
    return build


def _text(cls_name: str, config_name: str, tokens: int, vocab: int, **config):
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, config_name)(vocab_size=vocab, **config)
        model = getattr(transformers, cls_name)(cfg).eval()
        return _Plain.wrap(model, use_cache=False), (torch.randint(0, vocab, (1, tokens)),)
    return build


def _whisper_encoder(frames: int, **config):
    """Whisper's audio encoder alone (two convolutions, then transformer layers over frames / 2
    positions): input_features [1, num_mel_bins, frames]."""
    def build():
        import torch
        import transformers

        torch.manual_seed(0)
        cfg = transformers.WhisperConfig(max_source_positions=frames // 2, **config)
        encoder = transformers.WhisperModel(cfg).get_encoder().eval()
        return _Plain.wrap(encoder), (torch.randn(1, cfg.num_mel_bins, frames),)
    return build


MODELS: dict[str, Model] = {m.name: m for m in [
    Model("mobilenet_v2", "MobileNetV2 1.0, 224, ImageNet head",
          _image("MobileNetV2ForImageClassification", "MobileNetV2Config", 224, image_size=224, num_labels=1000)),
    Model("efficientnet_b0", "EfficientNet-B0, 224",
          _image("EfficientNetForImageClassification", "EfficientNetConfig", 224, adjust=_global_mean_pooler,
                 image_size=224, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280, dropout_rate=0.2,
                 num_labels=1000)),
    Model("resnet50", "ResNet-50, 224",
          _image("ResNetForImageClassification", "ResNetConfig", 224, num_labels=1000)),
    Model("regnety_400mf", "RegNetY-400MF, 224 (grouped 3x3s of group width 8, squeeze-excitation)",
          _image("RegNetForImageClassification", "RegNetConfig", 224, embedding_size=32,
                 hidden_sizes=[48, 104, 208, 440], depths=[1, 3, 6, 6], groups_width=8, layer_type="y",
                 num_labels=1000)),
    Model("convnext_t", "ConvNeXt-T, 224",
          _image("ConvNextForImageClassification", "ConvNextConfig", 224, num_labels=1000)),
    Model("vit_b16", "ViT-B/16, 224",
          _image("ViTForImageClassification", "ViTConfig", 224, num_labels=1000)),
    Model("vit_b16_384", "ViT-B/16, 384 (577 tokens)",
          _image("ViTForImageClassification", "ViTConfig", 384, image_size=384, num_labels=1000)),
    Model("whisper_tiny_enc", "Whisper-tiny encoder (384 wide, 4 layers, 6 heads), 3000 mel frames -> 1500 tokens",
          _whisper_encoder(3000, d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                           decoder_layers=1, decoder_attention_heads=6, decoder_ffn_dim=1536, num_mel_bins=80)),
    Model("mobilevit_s", "MobileViT-S, 256",
          _image("MobileViTForImageClassification", "MobileViTConfig", 256, image_size=256, num_labels=1000)),
    Model("gpt2_2l", "GPT-2 (768 wide, 2 layers), 128 tokens, hidden states (no LM head)",
          _text("GPT2Model", "GPT2Config", 128, 50257, n_layer=2)),
    Model("bert_4l", "BERT-base width, 4 layers, 128 tokens, hidden states",
          _text("BertModel", "BertConfig", 128, 30522, num_hidden_layers=4)),
    Model("llama_15m", "Llama stories15M (dim 288, 6 layers, 6 heads, FFN 768), 32-token prefill, "
          "logits, no KV cache",
          _text("LlamaForCausalLM", "LlamaConfig", 32, 32000, hidden_size=288, num_hidden_layers=6,
                num_attention_heads=6, num_key_value_heads=6, intermediate_size=768,
                max_position_embeddings=256)),
    Model("llama_15m_512", "Llama stories15M sizes, 512-token prefill (causal attention over 512 keys), logits",
          _text("LlamaForCausalLM", "LlamaConfig", 512, 32000, hidden_size=288, num_hidden_layers=6,
                num_attention_heads=6, num_key_value_heads=6, intermediate_size=768,
                max_position_embeddings=512)),
]}


# ---------------------------------------------------------------- one model, in the child
def _etc_program(module, inputs):
    """etc's program of `module` (CpuPartitioner, one thread), its compile time and delegation emitted."""
    import torch

    import etc
    from etc.targets.cpu import CpuPartitioner

    ep = torch.export.export(module, inputs)
    start, start_cpu = time.perf_counter(), time.process_time()
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(num_threads=1))
    program = edge.to_executorch()
    compile_s, compile_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    reports = edge.delegation_reports
    portable = {}
    for r in reports:
        for op, n in r.portable.items():
            portable[op] = portable.get(op, 0) + n
    emit(etc_compile_s=compile_s, etc_compile_cpu_s=compile_cpu_s, etc_partitions=sum(r.partitions for r in reports),
          etc_delegated_ops=sum(sum(r.delegated.values()) for r in reports),
          etc_portable_ops=sum(portable.values()),
          etc_portable=", ".join(f"{op.removeprefix('edge.')} x{n}" for op, n in sorted(portable.items())),
          etc_not_tuned=not_tuned_lines(reports))
    return program


def _executorch_call(backend: str, runtime, buffer, inputs, expected) -> Callable:
    """Load `buffer` on ExecuTorch's runtime, run it once (emitting `<backend>_maxdiff`), and return the
    call to time; the call keeps the buffer alive (the loaded program reads that memory)."""
    loaded = runtime.get().load_program(buffer)
    method = loaded.load_method("forward")
    emit(stage=f"{backend} execute")
    got = method.execute(list(inputs))[0]
    emit(**{f"{backend}_maxdiff": float((got - expected).abs().max())})
    kept = (buffer, loaded)
    return lambda: kept and method.execute(list(inputs))


def measure(name: str, runs: int, backends: set, budget_s: float = 4.0) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    module, inputs = MODELS[name].build()
    with torch.no_grad():
        expected = module(*inputs)
    scale = float(expected.abs().max())
    emit(name=name, ref_max=scale)
    calls = {}
    if "torch" in backends:
        calls["torch"] = lambda: module(*inputs)

    if "etc" in backends or "etc_executorch" in backends:
        try:
            emit(stage="etc compile")
            etc_program = _etc_program(module, inputs)
        except Exception as e:  # noqa: BLE001 - reported in the row
            emit(etc_error=error_text(e))
            etc_program = None
    if "etc" in backends and etc_program is not None:
        try:
            from etc.runtime import Runtime

            emit(stage="etc load")
            method = Runtime.get().load_program(etc_program.buffer).load_method("forward")
            emit(stage="etc execute")
            got = method.execute(list(inputs))[0]
            emit(etc_maxdiff=float((got - expected).abs().max()))
            np_inputs = [t.numpy() for t in inputs]
            calls["etc"] = lambda: etc_program and method.execute(np_inputs)
        except Exception as e:  # noqa: BLE001 - reported in the row
            emit(etc_error=error_text(e))
    if "etc_executorch" in backends and etc_program is not None:
        try:  # the same program on ExecuTorch's runtime, with etc's cpu backend (bench/executorch_backend.py)
            from executorch.runtime import Runtime as EtRuntime

            from etc.runtime import executorch_backend
            emit(stage="etc_executorch load", et_threads=executorch_threads(1))
            executorch_backend.load()
            calls["etc_executorch"] = _executorch_call("etc_executorch", EtRuntime, etc_program.buffer, inputs,
                                                       expected)
        except Exception as e:  # noqa: BLE001 - reported in the row
            emit(etc_executorch_error=error_text(e))

    if "xnnpack" in backends:
        try:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
            from executorch.exir import to_edge_transform_and_lower
            from executorch.runtime import Runtime as EtRuntime

            emit(stage="xnnpack compile", et_threads=executorch_threads(1))
            ep = torch.export.export(module, inputs)
            start, start_cpu = time.perf_counter(), time.process_time()
            et_edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            et_program = et_edge.to_executorch()
            emit(xnnpack_compile_s=time.perf_counter() - start,
                  xnnpack_compile_cpu_s=time.process_time() - start_cpu)
            plan = et_program.executorch_program.execution_plan[0]
            emit(xnnpack_portable_ops=sorted(
                plan.operators[i.instr_args.op_index].name for chain in plan.chains for i in chain.instructions
                if type(i.instr_args).__name__ == "KernelCall"))
            emit(stage="xnnpack load")
            calls["xnnpack"] = _executorch_call("xnnpack", EtRuntime, et_program.buffer, inputs, expected)
        except Exception as e:  # noqa: BLE001
            emit(xnnpack_error=error_text(e))

    emit(stage="timing " + ",".join(calls))
    cpu, wall = interleaved(calls, runs, budget_s)
    emit(**cpu, **{f"{key}_wall": t for key, t in wall.items()}, stage="done")


# ---------------------------------------------------------------- the parent
def _child(name: str, runs: int, backends: list, timeout_s: float) -> tuple[dict, str | None]:
    """(fields the child reported, None or why it ended early)."""
    cmd = [sys.executable, "-m", "etc.bench.hf_models", "--child", name, "--runs", str(runs),
           "--backends", ",".join(backends)]
    return run_child(cmd, timeout_s)


def measure_isolated(name: str, runs: int, timeout_s: float) -> dict:
    backends = ["etc", "torch", "xnnpack"]
    row, failure = _child(name, runs, backends, timeout_s)
    row["name"] = name
    if failure is None:
        return row
    stage = row.get("stage", "")
    culprit = "etc" if stage.startswith(("etc", "timing")) else "xnnpack" if stage.startswith("xnnpack") else None
    row[f"{culprit or 'etc'}_error"] = failure
    if culprit is None:
        return row
    # measure the others without the backend that crashed
    again, failure2 = _child(name, runs, [b for b in backends if b != culprit], timeout_s)
    for key, value in again.items():
        row.setdefault(key, value)
        if key in ("torch", "xnnpack", "etc"):
            row[key] = value
    if failure2:
        row["rerun_error"] = failure2
    row.pop(culprit, None)
    return row


def _s(t) -> str:
    return "n/a" if t is None else f"{t:.1f}"


def _portable_text(ops) -> str:
    """ExecuTorch's kernel calls outside its XNNPACK delegates, counted by operator."""
    if ops is None:
        return "n/a"
    if not ops:
        return "0"
    counts = {op: ops.count(op) for op in dict.fromkeys(ops)}
    return f"{len(ops)}: " + ", ".join(f"{op}" + (f" x{n}" if n > 1 else "") for op, n in counts.items())


def geomean_etc_over_xnnpack(rows: list[dict], *, all_delegated: bool = False) -> tuple[float | None, int]:
    """Geomean of etc / XNNPACK over the models both ran; `all_delegated`: only those ExecuTorch ran
    wholly in XNNPACK (no op left to its portable kernels, which can dominate: below)."""
    ratios = [r["etc"] / r["xnnpack"] for r in rows if r.get("etc") and r.get("xnnpack")
              and not (all_delegated and r.get("xnnpack_portable_ops", []))]
    if not ratios:
        return None, 0
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)), len(ratios)


def render(rows: list[dict]) -> str:
    lines = ["| model | etc cpu ms | torch 1t ms | XNNPACK ms | etc/torch | etc/XNNPACK | etc max abs diff "
             "| etc ops outside delegates | ExecuTorch ops outside XNNPACK |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        error = r.get("etc_error")
        etc_ms = ms2(r.get("etc")) if r.get("etc") is not None else (
            "n/a" if not error else error if error.startswith(("crashed", "timed out")) else
            f"failed: {error.split(':')[0]} (below)")
        diff = r.get("etc_maxdiff")
        diff_text = "n/a" if diff is None else f"{diff:.2g} (of {r.get('ref_max', 0):.2g})"
        if r.get("ref_max") is not None and r["ref_max"] < 1e-6:
            diff_text += " degenerate output: timings include denormals"
        outside = r.get("etc_portable_ops")
        outside_text = "n/a" if outside is None else (
            f"{outside} of {outside + r.get('etc_delegated_ops', 0)} ({r.get('etc_partitions', '?')} partition(s))")
        lines.append(f"| {r['name']} | {etc_ms} | {ms2(r.get('torch'))} | {ms2(r.get('xnnpack'))} | "
                     f"{ratio(r.get('etc'), r.get('torch'))} | {ratio(r.get('etc'), r.get('xnnpack'))} | "
                     f"{diff_text} | {outside_text} | {_portable_text(r.get('xnnpack_portable_ops'))} |")
    gm, n = geomean_etc_over_xnnpack(rows)
    lines += ["", f"**Geomean etc cpu / ExecuTorch XNNPACK over the {n} model(s) both ran: "
              f"{'n/a' if gm is None else f'{gm:.2f}x'}** (below 1.00x etc is faster)."]
    gm_all, n_all = geomean_etc_over_xnnpack(rows, all_delegated=True)
    if n_all != n:
        lines += ["", f"Over the {n_all} model(s) ExecuTorch ran wholly in XNNPACK (an op it leaves to its portable "
                  f"kernels can dominate its time): {'n/a' if gm_all is None else f'{gm_all:.2f}x'}."]
    lines += ["", "Compile time (seconds, after the same `torch.export`): etc is `to_edge` + "
              "`to_backend(CpuPartitioner())` + `to_executorch()`; ExecuTorch is `to_edge_transform_and_lower` "
              "(XNNPACK) + `to_executorch()`. Wall time, and the process's CPU time (what the shared machine's "
              "load does not inflate).", "",
              "| model | etc compile s | ExecuTorch compile s | etc CPU s | ExecuTorch CPU s | etc/ExecuTorch (CPU) |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {_s(r.get('etc_compile_s'))} | {_s(r.get('xnnpack_compile_s'))} | "
                     f"{_s(r.get('etc_compile_cpu_s'))} | {_s(r.get('xnnpack_compile_cpu_s'))} | "
                     f"{ratio(r.get('etc_compile_cpu_s'), r.get('xnnpack_compile_cpu_s'))} |")
    measured = [r for r in rows if "etc_not_tuned" in r]
    off_path = [(r["name"], r["etc_not_tuned"]) for r in measured if r["etc_not_tuned"]]
    if measured:
        lines += ["", "Decisions off the tuned path (the delegation report's NOT TUNED lines): "
                  + ("none, in every model." if not off_path else "")]
        if off_path:
            lines += [""] + [f"- {name}: " + "; ".join(line.removeprefix("NOT TUNED").strip() for line in found)
                             for name, found in off_path]
    portable = [(r["name"], r["etc_portable"]) for r in rows if r.get("etc_portable")]
    if portable:
        lines += ["", "Ops etc ran outside its cpu delegates (portable kernels), per model:", ""]
        lines += [f"- {name}: {ops}" for name, ops in portable]
    problems = [(r["name"], k[:-6], v) for r in rows for k, v in r.items() if k.endswith("_error")]
    if problems:
        lines += ["", "Failures:", ""]
        lines += [f"- {name} ({who}): {msg}" for name, who, msg in problems]
    lines += ["", "Models: " + "; ".join(f"`{m.name}` {m.what}" for m in MODELS.values() if
                                          any(r["name"] == m.name for r in rows)) + "."]
    return "\n".join(lines) + "\n"


def run(only: list[str] | None = None, runs: int = 10, timeout_s: float = 1200.0, log=sys.stderr) -> str:
    rows = measure_models(MODELS, only, lambda name: measure_isolated(name, runs, timeout_s), label="bench_models",
                          log=log, note=lambda row: f" { {k: v for k, v in row.items() if k.endswith('_error')} or ''}")
    return render(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated model names (default: all): " + ", ".join(MODELS))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per model and child")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--backends", default="etc,torch,xnnpack", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measure(args.child, args.runs, set(args.backends.split(",")))
        return 0
    print(run(args.only.split(",") if args.only else None, args.runs, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
