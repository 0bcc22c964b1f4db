"""Two threads on the real models: what a second core buys etc and torch eager, each in its own blocks.

    python -m etc.bench.threads [--only name1,name2] [--runs N] [--timeout S]

For each real model of `bench/hf_models.py` (transformers architectures at their real sizes,
random weights), in a child process with a timeout: etc's program for one thread
(`CpuPartitioner(num_threads=1)`) and for two (`num_threads=2`: each delegate times one and two
threads when it loads and keeps the faster), and torch eager at `torch.set_num_threads(1)` and
`(2)`. The four are timed in blocks of calls, never interleaved call by call: a runtime's idle
worker threads spin for a while after its call and would steal the second core from the next
runtime's first call. Rounds of the four blocks repeat so that machine noise spreads over all;
each figure is the median wall time of its calls (CPU time of the calling thread does not count
the second thread's work). The speedup is one thread's time over two threads'.

The question the table answers (issue 27): does etc gain at least what torch gains from a
second core, on every model? Both outputs are checked against eager first.

Then the int8 vision models of `bench/int8.py` (ResNet-18 and the 224 x 224 ones), quantized twice
as there (etc's `CpuQuantizer`, ExecuTorch's `XNNPACKQuantizer`): etc's int8 program on one and two
threads against ExecuTorch + XNNPACK's with its threadpool at one and two (XNNPACK binds the pool
when a method loads, so each of its blocks resets the pool and loads the method again), the same
blocks; etc's two-thread bytes checked against its one-thread bytes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from etc.bench.common import emit, measure_models, ratio, run_child
from etc.bench.hf_models import MODELS, ms2

RUNTIMES = ("etc_1t", "etc_2t", "torch_1t", "torch_2t")
INT8 = ("resnet18", "mobilenet_v2_224", "resnet50_224", "efficientnet_lite0_224")


def _blocks(calls: dict, rounds: int, per_block: int) -> dict:
    """{key: median wall seconds}: `rounds` rounds, each a block of `per_block` calls of every key
    in turn (its first call of the block not counted: the other runtime's threads still spin)."""
    times = {key: [] for key in calls}
    for _ in range(rounds):
        for key, (setup, fn) in calls.items():
            setup()
            fn()
            for _ in range(per_block):
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) for key, t in times.items()}


def measure(name: str, runs: int) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    import etc
    from etc.runtime import Runtime, log
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.runtime import LOG_SOURCE

    torch.set_num_threads(1)
    module, inputs = MODELS[name].build()
    with torch.no_grad():
        expected = module(*inputs)
    emit(name=name, stage="etc compile")
    ep = torch.export.export(module, inputs)
    np_inputs = [t.numpy() for t in inputs]
    calls = {}
    kept_one = []  # the delegates of the two-thread program that measured one thread faster at load
    previous = log.set_pal(log_sink=lambda r: kept_one.append(r.message) if r.source == LOG_SOURCE else None)
    for threads in (1, 2):
        program = etc.to_edge(ep).to_backend(CpuPartitioner(num_threads=threads)).to_executorch()
        method = Runtime.get().load_program(program.buffer).load_method("forward")
        if threads == 2:
            log.reset_pal(previous)
            emit(etc_2t_kept_one="; ".join(m.removeprefix("cpu delegate: ") for m in kept_one))
        got = method.execute(np_inputs)[0]
        emit(**{f"etc_{threads}t_maxdiff": float((torch.as_tensor(got) - expected).abs().max())})
        calls[f"etc_{threads}t"] = (lambda: None, lambda m=method, p=program: p and m.execute(np_inputs))
    for threads in (1, 2):
        calls[f"torch_{threads}t"] = (lambda n=threads: torch.set_num_threads(n), lambda: module(*inputs))
    emit(stage="timing")
    start = time.perf_counter()
    with torch.no_grad():
        for _, fn in calls.values():
            fn()
        one_round = time.perf_counter() - start
        # About `runs` calls per runtime, in 3-5 rounds; fewer calls per block for slow models.
        rounds = 5 if one_round < 1.0 else 3
        medians = _blocks(calls, rounds, max(2, -(-runs // rounds)))
    torch.set_num_threads(1)
    emit(**medians, stage="done")


def measure_int8(name: str, runs: int) -> None:
    """In the child: etc int8 on one and two threads against XNNPACK int8 on one and two."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    import torch

    import etc
    from etc.bench.common import executorch_method, executorch_program, executorch_threads
    from etc.bench.int8 import _real_models
    from etc.models.quantized import quantize
    from etc.models.zoo import BENCH_ONLY, ZOO
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    torch.set_num_threads(1)
    torch.manual_seed(0)
    zoo_model = {**ZOO, **BENCH_ONLY, **_real_models()}[name]()
    zoo_model.module.eval()
    inputs = list(zoo_model.example_inputs)
    np_inputs = [x.numpy() for x in inputs]
    emit(name=name, stage="etc int8 compile")
    _, ep = quantize(zoo_model)
    calls, outputs = {}, {}
    for threads in (1, 2):
        program = etc.to_edge(ep).to_backend(CpuPartitioner(num_threads=threads)).to_executorch()
        method = Runtime.get().load_program(program.buffer).load_method("forward")
        outputs[threads] = np.asarray(method.execute(np_inputs)[0])
        calls[f"etc_{threads}t"] = (lambda: None, lambda m=method, p=program: p and m.execute(np_inputs))
    emit(etc_same_bytes=bool(np.array_equal(outputs[1], outputs[2])))
    emit(stage="xnnpack int8 lowering")
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                          get_symmetric_quantization_config)

    _, xep = quantize(zoo_model, quantizer=XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)))
    xprogram = executorch_program(xep, xnnpack=True)
    loaded = {}

    def xnnpack_block(threads: int) -> None:
        executorch_threads(threads)
        loaded["method"] = executorch_method(xprogram)  # the delegate takes the pool it loads with

    for threads in (1, 2):
        calls[f"xnnpack_{threads}t"] = (lambda n=threads: xnnpack_block(n), lambda: loaded["method"].execute(inputs))
    emit(stage="timing")
    start = time.perf_counter()
    for setup, fn in calls.values():
        setup()
        fn()
    rounds = 5 if time.perf_counter() - start < 1.0 else 3
    medians = _blocks(calls, rounds, max(2, -(-runs // rounds)))
    executorch_threads(1)
    emit(**medians, stage="done")


def _child(name: str, runs: int, timeout_s: float) -> dict:
    mode = "--int8-child" if name.startswith("int8:") else "--child"
    row, failure = run_child([sys.executable, "-m", "etc.bench.threads", mode, name.removeprefix("int8:"),
                              "--runs", str(runs)], timeout_s)
    row["name"] = name
    if failure:
        row["error"] = failure
    return row


def speedup(row: dict, runtime: str) -> float | None:
    one, two = row.get(f"{runtime}_1t"), row.get(f"{runtime}_2t")
    return one / two if one and two else None


def _against(r: dict, other: str) -> str:
    """A row's cells from etc's 1t figure to the verdict: etc's and `other`'s times and speedups,
    etc 2t over `other` 2t, and whether etc gains at least what `other` gains."""
    etc_s, other_s = speedup(r, "etc"), speedup(r, other)
    verdict = "n/a" if etc_s is None or other_s is None else ("yes" if etc_s >= other_s else "**no**")
    return (f"{ms2(r.get('etc_1t'))} | {ms2(r.get('etc_2t'))} | {'n/a' if etc_s is None else f'{etc_s:.2f}x'} | "
            f"{ms2(r.get(f'{other}_1t'))} | {ms2(r.get(f'{other}_2t'))} | "
            f"{'n/a' if other_s is None else f'{other_s:.2f}x'} | {ratio(r.get('etc_2t'), r.get(f'{other}_2t'))} | "
            f"{verdict}")


def render(rows: list[dict]) -> str:
    lines = ["| model | etc 1t ms | etc 2t ms | etc speedup | torch 1t ms | torch 2t ms | torch speedup "
             "| etc 2t vs torch 2t | etc gains at least torch's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {_against(r, 'torch')} |")
    both = [(speedup(r, "etc"), speedup(r, "torch")) for r in rows]
    both = [(e, t) for e, t in both if e and t]
    if both:
        geo = [math.exp(sum(math.log(x[i]) for x in both) / len(both)) for i in (0, 1)]
        lines += ["", f"**Geomean speedup of a second thread over {len(both)} model(s): etc {geo[0]:.2f}x, torch "
                  f"{geo[1]:.2f}x** (one thread's time over two threads'); etc gains at least torch's on "
                  f"{sum(e >= t for e, t in both)} of {len(both)}."]
    kept = [(r["name"], r["etc_2t_kept_one"]) for r in rows if r.get("etc_2t_kept_one")]
    if kept:
        lines += ["", "Delegates of the two-thread program that kept one thread (each times both at load and "
                  "keeps the faster):", ""] + [f"- {name}: {what}" for name, what in kept]
    worst = max((r.get(f"etc_{t}t_maxdiff", 0.0) for r in rows for t in (1, 2)), default=0.0)
    lines += ["", f"Largest |etc - eager| over the models and both thread counts: {worst:.2g}."]
    problems = [(r["name"], r["error"]) for r in rows if r.get("error")]
    if problems:
        lines += ["", "Failures:", ""] + [f"- {name}: {msg}" for name, msg in problems]
    return "\n".join(lines) + "\n"


def render_int8(rows: list[dict]) -> str:
    lines = ["| model | etc int8 1t ms | etc int8 2t ms | etc speedup | XNNPACK int8 1t ms | XNNPACK int8 2t ms "
             "| XNNPACK speedup | etc 2t vs XNNPACK 2t | etc gains at least XNNPACK's | etc 2t bytes = 1t bytes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = {True: "yes", False: "**no**"}.get(r.get("etc_same_bytes"), "n/a")
        lines.append(f"| {r['name']} | {_against(r, 'xnnpack')} | {same} |")
    problems = [(r["name"], r["error"]) for r in rows if r.get("error")]
    if problems:
        lines += ["", "Failures:", ""] + [f"- {name}: {msg}" for name, msg in problems]
    return "\n".join(lines) + "\n"


def run(only: list[str] | None = None, runs: int = 10, timeout_s: float = 1200.0, log=sys.stderr) -> str:
    measure = lambda name: _child(name, runs, timeout_s)  # noqa: E731
    note = lambda row: f" {row['error']}" if row.get("error") else ""  # noqa: E731
    fp32 = [n for n in only if n in MODELS] if only else None
    int8 = [n for n in only if n in INT8] if only else list(INT8)
    text = render(measure_models(MODELS, fp32, measure, label="bench_threads", log=log, note=note)) \
        if fp32 is None or fp32 else ""
    if int8:
        rows = measure_models({f"int8:{n}": n for n in INT8}, [f"int8:{n}" for n in int8], measure,
                              label="bench_threads", log=log, note=note)
        for row in rows:
            row["name"] = row["name"].removeprefix("int8:")
        text += ("\nInt8 (`python -m etc.bench.threads --only " + ",".join(INT8) + "`): etc's `CpuQuantizer` "
                 "program against ExecuTorch + XNNPACK's `XNNPACKQuantizer` one, each on one and two threads, "
                 "the same blocks.\n\n" + render_int8(rows))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated model names (default: all): "
                        + ", ".join((*MODELS, *INT8)))
    parser.add_argument("--runs", type=int, default=10, help="calls per runtime (in 3-5 blocks)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per model")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--int8-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # a failure exits nonzero: run_child reports its stage and last stderr line in the row
        measure(args.child, args.runs)
        return 0
    if args.int8_child:
        measure_int8(args.int8_child, args.runs)
        return 0
    print(run(args.only.split(",") if args.only else None, args.runs, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
