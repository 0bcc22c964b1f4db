"""`make bench`: measure every zoo model side by side and write BENCHMARKS.md.

For each model, in one run on this machine: median latency of etc (portable
numpy kernels), etc with the cpu target (native code), torch eager with 1 and 2
threads, and, when `executorch` is installed, ExecuTorch's portable runtime and
ExecuTorch with XNNPACK; plus compile time, program size, planned memory
against its lifetime lower bound and against ExecuTorch's planner. The machine
is shared and noisy, so only ratios within this run mean anything.

Then the int8 CNNs (bench/int8.py: etc cpu on a CpuQuantizer program against ExecuTorch
+ XNNPACK on an XNNPACKQuantizer one, and both in fp32). Then the models as native libraries
(bench/library.py: called from C on the host; Cortex-M sizes and instructions under QEMU). Then two sections on what we did not tune for: the layer sweep (bench/layers.py:
the layer kinds of real CNNs and transformers at real sizes against torch and XNNPACK)
and real models (bench/hf_models.py: transformers architectures with random weights,
latency, numerics, compile time, and the geomean of etc cpu over ExecuTorch XNNPACK).
Then LLM prefill and decode tokens/s (bench/llm.py: etc.llm exports, etc cpu against
ExecuTorch + XNNPACK on the same program, and torch eager); the real models and the LLMs again
inside one runtime (bench/executorch_backend.py: etc's program through etc's cpu backend for
ExecuTorch against ExecuTorch's through XNNPACK, both in ExecuTorch's runtime); and what profiling
costs and explains (bench/profiling.py). All but the last run in child processes, so that a
crash of the compiler under test is a row.

    python -m etc.bench [--sections zoo,int8,library,layers,models,llm,executorch,profiling]
                              [--models a,b] [--layers a,b]
                              [--real-models a,b] [--runs N] [--output BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings

from etc.bench.common import (executorch_available, executorch_program, executorch_threads, median_seconds, ms,
                              ratio)


def bench_model(name: str, runs: int, with_executorch: bool) -> dict:
    import torch

    import etc
    from etc.runtime import Runtime
    from etc.models.zoo import BENCH_ONLY, ZOO

    zoo_model = {**ZOO, **BENCH_ONLY}[name]()
    inputs = zoo_model.example_inputs
    np_inputs = [t.numpy() for t in inputs]
    row: dict = {"name": name, "is_cnn": zoo_model.is_cnn}

    start = time.perf_counter()
    programs = zoo_model.export()
    edge = etc.to_edge(programs)
    program = edge.to_executorch()
    row["compile_s"] = time.perf_counter() - start
    row["size"] = len(program.buffer)
    report = program.memory_report()
    row["planned"], row["lower_bound"] = report.total_planned_bytes(), report.total_lower_bound()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    row["etc_portable"] = median_seconds(lambda: method.execute(np_inputs), runs=runs)

    try:
        from etc.targets.cpu import CpuPartitioner

        start = time.perf_counter()
        cpu_program = etc.to_edge(zoo_model.export()).to_backend(CpuPartitioner()).to_executorch()
        row["cpu_compile_s"] = time.perf_counter() - start
        cpu_method = Runtime.get().load_program(cpu_program.buffer).load_method("forward")
        row["etc_cpu"] = median_seconds(lambda: cpu_method.execute(np_inputs), runs=runs)
    except Exception as e:  # noqa: BLE001 - a failing target is reported in the table, not fatal
        row["etc_cpu"] = None
        row["cpu_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    try:  # two threads: the delegate calibrates at load and may keep one (see targets/cpu/runtime.py)
        cpu2_program = etc.to_edge(zoo_model.export()).to_backend(CpuPartitioner(num_threads=2)).to_executorch()
        cpu2_method = Runtime.get().load_program(cpu2_program.buffer).load_method("forward")
        row["etc_cpu_2t"] = median_seconds(lambda: cpu2_method.execute(np_inputs), runs=runs)
    except Exception as e:  # noqa: BLE001
        row["etc_cpu_2t"] = None
        row["cpu_2t_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"

    module = zoo_model.module
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with torch.no_grad():
            row[f"torch_{threads}t"] = median_seconds(lambda: module(*inputs), runs=runs)
    torch.set_num_threads(1)

    if with_executorch:
        from executorch.runtime import Runtime as EtRuntime

        for key, xnnpack in (("et_portable", False), ("et_xnnpack", True)):
            try:
                et_program = executorch_program(zoo_model.export(), xnnpack)
                et_method = EtRuntime.get().load_program(et_program.buffer).load_method("forward")
                row[key] = median_seconds(lambda: et_method.execute(list(inputs)), runs=runs)
                if not xnnpack:
                    plan = et_program.executorch_program.execution_plan[0]
                    row["et_planned"] = int(sum(plan.non_const_buffer_sizes))
            except Exception as e:  # noqa: BLE001
                row[key] = None
                row[f"{key}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return row


def _cpu_name() -> str:
    """The CPU's model name and LLVM's name for it: the tables move with the microarchitecture (an
    AMD Zen 5 and an Intel Emerald Rapids VM rank the same kernels differently), so a run names it."""
    import llvmlite.binding as llvm

    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, LLVM {llvm.get_host_cpu_name()}"


def _commit() -> str:
    """The commit measured (`+ changes` when the tree differs from it), or "" outside a git checkout."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f" at {head}{' + changes' if dirty else ''}"


def _header() -> list[str]:
    return ["# Benchmarks", "",
            f"Produced by `make bench` (`python -m etc.bench`){_commit()}, every figure measured in the same run on",
            f"this machine ({platform.machine()}, {_cpu_name()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}).",
            "Latencies are medians in milliseconds after warm-up; the machine is shared and noisy, so compare",
            "ratios within this table only.", ""]


def render(rows: list[dict], with_executorch: bool, gemm_text: str, et_threads: int | None = None,
           header: bool = True) -> str:
    lines = _header() if header else []
    lines += ["## Zoo", ""]
    if not with_executorch:
        lines += ["ExecuTorch columns: `executorch` is not installed in this environment (n/a).", ""]
    else:
        threads = "unknown (this build has no threadpool hook)" if et_threads is None else str(et_threads)
        lines += [f"One thread each: etc cpu (num_threads=1), torch 1t, ExecuTorch's threadpool: {threads}.", ""]
    lines += ["### Latency", "",
              "| model | etc portable | etc cpu | etc cpu 2t | torch 1t | torch 2t | ET portable | ET XNNPACK "
              "| etc cpu vs torch 1t | etc cpu vs ET XNNPACK | etc cpu 2t vs torch 2t |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {ms(r['etc_portable'])} | {ms(r.get('etc_cpu'))} | "
            f"{ms(r.get('etc_cpu_2t'))} | {ms(r['torch_1t'])} | "
            f"{ms(r['torch_2t'])} | {ms(r.get('et_portable'))} | {ms(r.get('et_xnnpack'))} | "
            f"{ratio(r.get('etc_cpu'), r['torch_1t'])} | {ratio(r.get('etc_cpu'), r.get('et_xnnpack'))} | "
            f"{ratio(r.get('etc_cpu_2t'), r['torch_2t'])} |")
    lines += ["", "Ratios are time over time: below 1.00x means etc is faster. `etc cpu 2t` is "
              "`CpuPartitioner(num_threads=2)`: each delegate times one and two threads when it loads and keeps "
              "the faster, so small models stay on one.", "",
              "### Compile time, program size, planned memory", "",
              "| model | compile (s) | cpu compile (s) | .pte bytes | planned bytes | lower bound | planned / bound | ET planned bytes |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bound_ratio = f"{r['planned'] / r['lower_bound']:.3f}" if r["lower_bound"] else "n/a"
        cpu_compile = f"{r['cpu_compile_s']:.2f}" if r.get("cpu_compile_s") is not None else "n/a"
        lines.append(f"| {r['name']} | {r['compile_s']:.2f} | {cpu_compile} | {r['size']} | {r['planned']} | "
                     f"{r['lower_bound']} | {bound_ratio} | {r.get('et_planned', 'n/a')} |")
    errors = [(r["name"], k, v) for r in rows for k, v in r.items() if k.endswith("_error")]
    if errors:
        lines += ["", "### Not measured", ""]
        lines += [f"- {name} ({key[:-6]}): {msg}" for name, key, msg in errors]
    if gemm_text:
        lines += ["", "### Generated GEMM", "", gemm_text]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etc.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="zoo,int8,library,layers,models,threads,llm,executorch,profiling",
                        help="comma-separated parts to run: zoo, layers (layer sweep), models (real models), "
                             "threads (the real models on one and two threads), "
                             "llm (prefill/decode tokens/s), executorch (etc's backend against XNNPACK inside "
                             "ExecuTorch's runtime), profiling (its cost and coverage)")
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    parser.add_argument("--layers", help="comma-separated layer-sweep names (default: all)")
    parser.add_argument("--real-models", help="comma-separated real-model names (default: all)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--no-gemm", action="store_true")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    known = ("zoo", *(key for key, _, _ in _SECTIONS))
    unknown = sorted(set(sections) - set(known))
    if unknown:
        parser.error(f"unknown section(s) {unknown}: choose among {', '.join(known)}")

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    with_executorch = executorch_available()
    et_threads = executorch_threads(1) if with_executorch else None
    parts = []
    minutes = []  # (section, wall minutes): so a whole run can be planned on a quiet machine
    started = time.monotonic()
    if "zoo" in sections:
        from etc.models.zoo import BENCH_ONLY, ZOO

        names = args.models.split(",") if args.models else sorted(ZOO) + sorted(BENCH_ONLY)
        rows = []
        for name in names:
            print(f"[bench] {name}", file=sys.stderr, flush=True)
            rows.append(bench_model(name, args.runs, with_executorch))
        gemm_text = ""
        if not args.no_gemm:
            try:
                from etc.bench.gemm import run as run_gemm

                gemm_text = run_gemm()
            except Exception as e:  # noqa: BLE001
                gemm_text = f"GEMM benchmark failed: {type(e).__name__}: {e}"
        parts.append(render(rows, with_executorch, gemm_text, et_threads, header=False))
        minutes.append(("zoo", (time.monotonic() - started) / 60))
    for key, title, body in _SECTIONS:
        if key in sections:
            section_start = time.monotonic()
            parts.append(_section(title, body, args))
            minutes.append((key, (time.monotonic() - section_start) / 60))
            print(f"[bench] {key} took {minutes[-1][1]:.1f} min", file=sys.stderr, flush=True)
    took = (f"This run took {(time.monotonic() - started) / 60:.0f} min: "
            + ", ".join(f"{key} {m:.1f}" for key, m in minutes) + ".\n")
    summary = [(part.splitlines()[0].removeprefix("## "), line) for part in parts for line in part.splitlines()
               if line.startswith("**Geomean")]
    text = "\n".join(_header() + [took] + [f"{line} See {title}.\n" for title, line in summary]) + "\n" + \
        "\n".join(parts)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)
    return 0


def _int8_text(args) -> str:
    from etc.bench.int8 import run

    intro = ("The zoo CNNs quantized with PT2E (static int8, per-channel weights) and BERT-base-sized transformer "
             "layers with the dynamic config (int8 activations quantized on every call), calibrated on the same "
             "inputs: etc's `CpuQuantizer` program on etc cpu and ExecuTorch's `XNNPACKQuantizer` program on XNNPACK, "
             "and "
             "the fp32 model on both, one thread each, interleaved in one child process per model (`python -m "
             "etc.bench.int8`).\n\n")
    return intro + run(args.models.split(",") if args.models else None, args.runs)


def _library_text(args) -> str:
    from etc.bench.library import run

    intro = ("Each model as a C library (`to_library`), without a runtime: on the host called from C, against etc's "
             "Python runtime, ExecuTorch + XNNPACK and torch eager (one thread each); on Cortex-M cores under QEMU, "
             "float against int8 (`python -m etc.bench.library`).\n\n")
    return intro + run(models=args.models.split(",") if args.models else None, runs=args.runs)


def _layers_text(args) -> str:
    from etc.bench.layers import run

    intro = ("Each layer kind real models have, with its real producer and consumer, at real sizes "
             "(`python -m etc.bench.layers --list`); etc cpu (`CpuPartitioner(num_threads=1)`), torch eager "
             "(1 thread) and ExecuTorch + XNNPACK (1 thread), interleaved in one child process.\n\n")
    return intro + run(args.layers.split(",") if args.layers else None, args.runs, isolate=True)


def _models_text(args) -> str:
    from etc.bench.hf_models import run

    intro = ("Transformers architectures at their real sizes with random weights (`transformers` configs, no "
             "downloads), one thread each, each model in its own child process (`python -m "
             "etc.bench.hf_models`).\n\n")
    return intro + run(args.real_models.split(",") if args.real_models else None, max(3, args.runs // 2))


def _threads_text(args) -> str:
    from etc.bench.threads import run

    intro = ("The real models above on one and two threads: etc (`CpuPartitioner(num_threads=1)` and `(2)`) and "
             "torch eager (`torch.set_num_threads(1)` and `(2)`), each runtime timed in its own blocks of calls "
             "(idle worker threads spin after a call and would take the second core from an interleaved "
             "neighbour), wall time, each model in its own child process (`python -m etc.bench.threads`).\n\n")
    return intro + run(args.real_models.split(",") if args.real_models else None, max(6, args.runs // 2))


def _llm_text(args) -> str:
    from etc.bench.llm import run

    intro = ("Decoder LMs exported once by `etc.llm` (one method, dynamic length, static KV cache), that same "
             "program lowered by etc cpu and by ExecuTorch + XNNPACK, and torch eager, one thread each, each model "
             "in its own child process (`python -m etc.bench.llm`).\n\n")
    return intro + run(runs=max(3, args.runs // 4))


def _executorch_text(args) -> str:
    from etc.bench.executorch_backend import run

    intro = ("The real models and the LLMs above, each model in its own child process (`python -m "
             "etc.bench.executorch_backend`); etc's backend is `etc.runtime.executorch_backend`.\n\n")
    return intro + run(args.real_models.split(",") if args.real_models else None, runs=max(3, args.runs // 2))


def _profiling_text(args) -> str:
    from etc.bench.profiling import run

    return run(runs=max(10, args.runs))


# The sections after the zoo, in report order: (--sections key, title, body).
_SECTIONS = (
    ("int8", "Int8", _int8_text),
    ("library", "Native libraries", _library_text),
    ("layers", "Layer sweep", _layers_text),
    ("models", "Real models", _models_text),
    ("threads", "Two threads", _threads_text),
    ("llm", "LLM", _llm_text),
    ("executorch", "One runtime: etc's backend and XNNPACK inside ExecuTorch", _executorch_text),
    ("profiling", "Profiling", _profiling_text),
)


def _section(title: str, body, args) -> str:
    """A section, or the reason it could not run (a missing bench-only dependency, a bug in the tool)."""
    print(f"[bench] {title.lower()}", file=sys.stderr, flush=True)
    try:
        text = body(args)
    except Exception as e:  # noqa: BLE001 - the other sections still get written
        text = f"Not measured: {type(e).__name__}: {e}\n"
    return f"## {title}\n\n{text}"


if __name__ == "__main__":
    sys.exit(main())
