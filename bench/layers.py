"""Layer sweep: the layer kinds real models have, each with its real producer and consumer.

    python -m etc.bench.layers [--only name1,name2] [--runs N] [--isolate]

Each entry of `LAYERS` (bench/layer_zoo.py) is a small pure-torch `nn.Module` at a real size (MobileNetV2,
EfficientNet, ResNet, ConvNeXt, BERT/GPT-2 and Llama stories15M shapes), with the ops a
real model puts right before and after it (BN + ReLU6 after a depthwise conv, a residual
add after a ResNet conv, the view/transpose around attention...), so that fusion and
layout choices are measured where they matter. For each layer, in one run and one thread
each: the etc cpu target, torch eager, and ExecuTorch + XNNPACK; the three are called in
turn (interleaved), so that a busy second core slows them alike, and the medians are
reported with GFLOP/s (compute-bound layers) or GB/s (memory-bound layers; a GEMV decode
row's GB/s counts its weight bytes, against the copy bandwidth measured once here).

A backend that fails on a layer prints its error in that row; the sweep goes on. With
`--isolate` the layers run in a child process (a new one after a crash), so that a crash
(a signal) or a hang is a row too.

This module imports neither executorch nor transformers at import time: a test imports
`LAYERS` and builds each entry.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

from etc.bench.common import (error_text, executorch_method, executorch_program, executorch_threads, interleaved, ms,
                              ratio)
from etc.bench.layer_zoo import LAYERS, Layer, build  # noqa: F401 (build: this module's API too)


# ---------------------------------------------------------------- measuring
def memory_bandwidth(nbytes: int = 256 << 20, runs: int = 5) -> float:
    """Copy bandwidth in bytes/s (read + write counted) of one large numpy copy, one thread."""
    import numpy as np

    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return 2.0 * nbytes / min(times)


def _etc_callable(module, inputs):
    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner

    edge = etc.to_edge(torch.export.export(module, inputs)).to_backend(CpuPartitioner(num_threads=1))
    portable = sum(sum(r.portable.values()) for r in edge.delegation_reports)
    program = edge.to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    np_inputs = [t.numpy() for t in inputs]
    return (lambda: method.execute(np_inputs)), (lambda: method.execute(list(inputs))[0]), portable


def _xnnpack_callable(module, inputs):
    method = executorch_method(executorch_program(torch.export.export(module, inputs), xnnpack=True))
    return (lambda: method.execute(list(inputs))), (lambda: method.execute(list(inputs))[0])


def measure(name: str, runs: int = 20, budget_s: float = 2.0) -> dict:
    """One layer, all three backends, interleaved: {name, etc, torch, xnnpack (seconds or
    None), *_error, etc_maxdiff, xnnpack_maxdiff, etc_portable_ops}."""
    torch.set_num_threads(1)
    module, inputs = build(name)
    row: dict = {"name": name}
    with torch.no_grad():
        expected = module(*inputs)
    calls = {"torch": lambda: module(*inputs)}
    try:
        call, check, row["etc_portable_ops"] = _etc_callable(module, inputs)
        row["etc_maxdiff"] = float((check() - expected).abs().max())
        calls["etc"] = call
    except Exception as e:  # noqa: BLE001 - a failing backend is a row, not the end of the sweep
        row["etc_error"] = error_text(e, 100)
    try:
        executorch_threads(1)
        call, check = _xnnpack_callable(module, inputs)
        row["xnnpack_maxdiff"] = float((check() - expected).abs().max())
        calls["xnnpack"] = call
    except Exception as e:  # noqa: BLE001
        row["xnnpack_error"] = error_text(e, 100)
    cpu, wall = interleaved(calls, runs, budget_s, warmup=3)
    for key in ("etc", "torch", "xnnpack"):
        row[key] = cpu.get(key)
        row[f"{key}_wall"] = wall.get(key)
    return row


def measure_in_children(names: list[str], runs: int, timeout_s: float = 600.0, log=sys.stderr) -> list[dict]:
    """`measure` each layer in a child process (one child for all while none crashes): a crash
    or a layer that takes longer than `timeout_s` is reported in its row, and a new child goes
    on with the layers after it."""
    import collections
    import threading

    rows, todo = [], list(names)
    while todo:
        cmd = [sys.executable, "-m", "etc.bench.layers", "--only", ",".join(todo), "--runs", str(runs),
               "--json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stderr_tail = collections.deque(maxlen=5)  # drained as it comes, so the child never blocks on it
        threading.Thread(target=stderr_tail.extend, args=(proc.stderr,), daemon=True).start()
        timed_out = []
        current = None

        def kill():
            timed_out.append(True)
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            timer.cancel()
            if "start" in msg:
                current = msg["start"]
                print(f"[bench_layers] {current}", file=log, flush=True)
                timer = threading.Timer(timeout_s, kill)
                timer.start()
            else:
                rows.append(msg)
                todo.remove(msg["name"])
                current = None
        timer.cancel()
        code = proc.wait()
        if current is None:
            if todo:  # the child ended between layers without saying why: do not loop forever
                rows += [{"name": n, "etc_error": f"not measured (child exit {code})"} for n in todo]
            break
        if timed_out:
            why = f"timed out after {timeout_s:.0f} s"
        elif code < 0:
            why = f"crashed (signal {-code})"
        else:
            tail = [t.strip() for t in stderr_tail if t.strip()][-1:] or [""]
            why = f"exit {code}: {tail[0][:100]}"
        rows.append({"name": current, "etc_error": why, "etc": None, "torch": None, "xnnpack": None})
        todo.remove(current)
    order = {n: i for i, n in enumerate(names)}
    return sorted(rows, key=lambda r: order[r["name"]])


# ---------------------------------------------------------------- the table
def _rate(layer: Layer, t) -> str:
    if t is None:
        return "n/a"
    if layer.flops:
        return f"{layer.flops / t / 1e9:.1f}"
    return f"{layer.bytes / t / 1e9:.1f}"


def render(rows: list[dict], bandwidth: float | None = None) -> str:
    lines = ["| layer | etc cpu ms | torch 1t ms | XNNPACK ms | etc/torch | etc/XNNPACK | unit | etc | torch "
             "| XNNPACK | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        layer = LAYERS[r["name"]]
        unit = "GFLOP/s" if layer.flops else ("GB/s (weights)" if layer.gemv else "GB/s")
        notes = []
        for key in ("etc", "xnnpack", "torch"):
            if r.get(f"{key}_error"):
                notes.append(f"{key}: {r[key + '_error']}".replace("|", "/"))
        if r.get("etc_portable_ops"):
            notes.append(f"etc: {r['etc_portable_ops']} op(s) outside the delegate")
        for key in ("etc", "xnnpack"):
            diff = r.get(f"{key}_maxdiff")
            if diff is not None and diff > 1e-3:
                notes.append(f"{key} max abs diff {diff:.2g}")
        lines.append(f"| {r['name']} | {ms(r.get('etc'))} | {ms(r.get('torch'))} | {ms(r.get('xnnpack'))} | "
                     f"{ratio(r.get('etc'), r.get('torch'))} | {ratio(r.get('etc'), r.get('xnnpack'))} | {unit} | "
                     f"{_rate(layer, r.get('etc'))} | {_rate(layer, r.get('torch'))} | "
                     f"{_rate(layer, r.get('xnnpack'))} | {'; '.join(notes)} |")
    notes = ["", "One thread each, interleaved calls, medians of the calling thread's CPU time (the machine is "
             "shared: wall time would count other processes' time slices; the JSON rows of `--isolate` keep "
             "both). Ratios are time over time: below 1.00x etc is faster. "
             "GFLOP/s counts a multiply-add as 2 flops (convolutions and matmuls only; BN, activations and "
             "softmax not counted); GB/s counts the bytes the layer must read and write once."]
    if bandwidth:
        notes.append(f"GEMV rows (decode, 1 token) count the weight bytes read per call; this machine's "
                     f"copy bandwidth (one thread, 256 MiB numpy copy, read + write) is "
                     f"{bandwidth / 1e9:.1f} GB/s.")
    return "\n".join(lines + notes) + "\n"


def run(only: list[str] | None = None, runs: int = 20, isolate: bool = False, log=sys.stderr) -> str:
    """The layer sweep's markdown (what bench/report.py embeds)."""
    names = only or list(LAYERS)
    unknown = [n for n in names if n not in LAYERS]
    if unknown:
        raise SystemExit(f"unknown layer(s) {unknown}; known: {', '.join(LAYERS)}")
    bandwidth = memory_bandwidth()
    if isolate:
        return render(measure_in_children(names, runs, log=log), bandwidth)
    rows = []
    for name in names:
        print(f"[bench_layers] {name}", file=log, flush=True)
        rows.append(measure(name, runs))
    return render(rows, bandwidth)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated layer names (default: all); --list to see them")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--isolate", action="store_true",
                        help="measure in a child process, a new one after a crash: a crash is a row")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one row, for --isolate
    args = parser.parse_args(argv)
    if args.list:
        for layer in LAYERS.values():
            print(f"{layer.name:30s} {layer.what}")
        return 0
    import warnings

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    only = args.only.split(",") if args.only else None
    if args.json:  # the child of --isolate: one JSON line as each layer starts and one with its row
        for name in only or list(LAYERS):
            print(json.dumps({"start": name}), flush=True)
            print(json.dumps(measure(name, args.runs)), flush=True)
        return 0
    print(run(only, args.runs, args.isolate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
