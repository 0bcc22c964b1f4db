"""Models as C libraries (`to_library`, issue 23): the framework tax gone, and Cortex-M sizes and speed.

Host: each zoo model built as a host library and called from a C program (a loop of calls, the CPU
time of the calling thread per call), against the same model on etc's Python runtime (etc cpu,
`Method.execute`), ExecuTorch + XNNPACK through its Python runtime, and torch eager, one thread each.
The C program runs between rounds of the Python calls (`layers.interleaved`), three rounds;
each figure is the median of the rounds' medians.

Cortex-M: each small model built for a Cortex-M33 (mps2-an505) and a Cortex-M55 with MVE
(mps3-an547), float and int8 (PT2E with CpuQuantizer, calibrated on random inputs), linked into
firmware that runs one inference under `qemu-system-arm -icount shift=0`: the library's code,
weights, arena and stack bound, the whole firmware's flash and RAM, and instructions per inference
(QEMU's instruction count: a deterministic proxy for speed, not cycles).

    python -m etc.bench.library [--section host|cortex-m|all] [--models a,b] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from etc.bench.common import executorch_available, executorch_method, executorch_program, executorch_threads, interleaved

HOST_MODELS = None  # every zoo model
CORTEX_M_MODELS = ("mlp", "small_cnn", "kws_dscnn", "two_methods", "dynamic_batch", "lstm", "mobilenet_v2",
                   "resnet8")
QUANTIZABLE = ("mlp", "small_cnn", "kws_dscnn", "mobilenet_v2", "resnet8")
CORTEX_M_BOARDS = ("mps2-an505", "mps3-an547")

_C_TIMER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "%(name)s.h"

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
%(buffers)s
static _Alignas(64) unsigned char arena[%(up)s_ARENA_BYTES + 64];

static int call(void) {
%(call)s
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    %(load)s
    if (%(name)s_init(arena) != 0 || call() != 0) { fprintf(stderr, "the entry failed\n"); return 1; }
    long batch = 0;
    double start = thread_seconds();
    while (thread_seconds() - start < 0.002) { call(); batch++; }  /* about 1 ms of calls a sample */
    batch = batch / 2 > 0 ? batch / 2 : 1;
    double *samples = malloc(sizeof(double) * (size_t)rounds);
    for (int r = 0; r < rounds; r++) {
        double t0 = thread_seconds();
        for (long k = 0; k < batch; k++) call();
        samples[r] = (thread_seconds() - t0) / (double)batch;
    }
    qsort(samples, (size_t)rounds, sizeof(double), compare);
    printf("%%.9g\n", samples[rounds / 2]);
    return 0;
}
"""


def _output_buffers(info: dict, align: int) -> list[str]:
    """C declarations of the method's output buffers `out0, out1, ...`."""
    lines = []
    for p, o in enumerate(info["outputs"]):
        nbytes = int(np.prod(o["shape"])) * np.dtype(o["dtype"]).itemsize
        lines.append(f"static _Alignas({align}) unsigned char out{p}[{max(nbytes, 1)}];")
    return lines


def _entry_call(info: dict, inputs: list) -> tuple[list[str], str]:
    """(C statements declaring the entry's pointer arrays and dims, the entry's call expression)
    over the buffers `in0, ...` and `out0, ...`."""
    names_in = ", ".join(f"in{i}" for i in range(len(inputs))) or "0"
    names_out = ", ".join(f"out{p}" for p in range(len(info["outputs"]))) or "0"
    lines = [f"    const void *inputs[{max(len(inputs), 1)}] = {{{names_in}}};",
             f"    void *outputs[{max(len(info['outputs']), 1)}] = {{{names_out}}};"]
    if not (info["input_dims"] or info["output_dims"]):
        return lines, f"{info['symbol']}(inputs, outputs, arena)"
    dims = [int(inputs[i].shape[d]) for i, d in info["input_dims"]]
    lines += [f"    const int32_t input_dims[{max(len(dims), 1)}] = {{{', '.join(map(str, dims)) or '0'}}};",
              f"    int32_t output_dims[{max(len(info['output_dims']), 1)}];"]
    return lines, f"{info['symbol']}(inputs, input_dims, outputs, output_dims, arena)"


def c_timer(library, method: str, inputs: list, directory: str) -> str:
    """A C program timing `library`'s `method` on `inputs` (read from .bin files beside it)."""
    info = library.sizes["methods"][method]
    buffers, load = [], []
    for i, x in enumerate(inputs):
        path = os.path.join(directory, f"input{i}.bin")
        np.ascontiguousarray(x).tofile(path)
        buffers.append(f"static _Alignas(64) unsigned char in{i}[{max(x.nbytes, 1)}];")
        load.append(f'{{ FILE *f = fopen("{path}", "rb"); if (!f || fread(in{i}, 1, {x.nbytes}, f) != {x.nbytes}) '
                    f'return 2; fclose(f); }}')
    buffers += _output_buffers(info, align=64)
    body, entry = _entry_call(info, inputs)
    body.append(f"    return {entry};")
    return _C_TIMER % {"name": library.name, "up": library.name.upper(), "buffers": "\n".join(buffers),
                       "load": "\n    ".join(load), "call": "\n".join(body)}


def host_row(name: str, runs: int) -> dict:
    """One zoo model's host latencies (seconds of thread CPU time per call)."""
    import torch

    import etc
    from etc.runtime import Runtime
    from etc.targets.cpu import CpuPartitioner
    from etc.models.zoo import BENCH_ONLY, ZOO

    zoo = {**ZOO, **BENCH_ONLY}[name]()
    inputs = [x.numpy() for x in zoo.example_inputs]
    row = {"name": name}
    with tempfile.TemporaryDirectory() as directory:
        edge = etc.to_edge(zoo.export()).to_backend(CpuPartitioner(num_threads=1))
        library = edge.to_library(os.path.join(directory, "lib"), "model", verbose=False)
        row.update(code=library.sizes["code_bytes"], weights=library.sizes["weights_bytes"],
                   arena=library.sizes["arena_bytes"])
        source = os.path.join(directory, "timer.c")
        with open(source, "w") as f:
            f.write(c_timer(library, "forward", inputs, directory))
        binary = os.path.join(directory, "timer")
        built = subprocess.run(["gcc", "-O2", "-std=c11", f"-I{library.directory}", source, library.archive, "-lm",
                                "-o", binary], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"the timing program did not build: {built.stderr[-500:]}")
        program = etc.to_edge(zoo.export()).to_backend(CpuPartitioner(num_threads=1)).to_executorch()
        method = Runtime.get().load_program(program.buffer).load_method("forward")
        calls = {"etc": lambda: method.execute(inputs)}
        module = zoo.module
        torch_inputs = zoo.example_inputs
        calls["eager"] = lambda: module(*torch_inputs)
        if executorch_available():
            et_method = executorch_method(executorch_program(zoo.export(), xnnpack=True))
            et_inputs = list(zoo.example_inputs)
            calls["xnnpack"] = lambda: et_method.execute(et_inputs)
        rounds = {key: [] for key in ["library", *calls]}
        for _ in range(3):
            done = subprocess.run([binary, str(max(runs, 9))], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"the timing program failed: {done.stderr[-500:]}")
            rounds["library"].append(float(done.stdout.split()[-1]))
            cpu, _ = interleaved(calls, runs, budget_s=1.0)
            for key, value in cpu.items():
                rounds[key].append(value)
    row.update({key: statistics.median(values) for key, values in rounds.items()})
    return row


def firmware_main(library, method: str, inputs: list) -> str:
    info = library.sizes["methods"][method]
    lines = ['#include "etc_firmware.h"', f'#include "{library.name}.h"']
    for i, x in enumerate(inputs):
        ctype = {"float32": "float", "int64": "int64_t", "bool": "uint8_t", "int32": "int32_t"}[x.dtype.name]
        flat = x.reshape(-1)
        values = ", ".join(float(v).hex() + "f" for v in flat) if x.dtype == np.float32 else \
            ", ".join(str(int(v)) + ("LL" if x.dtype == np.int64 else "") for v in flat)
        lines.append(f"static const {ctype} in{i}[{max(flat.size, 1)}] = {{{values or '0'}}};")
    lines += _output_buffers(info, align=8)
    up = library.name.upper()
    lines.append(f"static _Alignas({up}_ARENA_ALIGN) unsigned char arena[{up}_ARENA_BYTES > 0 ? {up}_ARENA_BYTES : 1];")
    call, entry = _entry_call(info, inputs)
    # The entry alone: its instructions, and its stack (painted below this frame, measured from the
    # stack pointer at the call).
    call += ["    fw_stack_paint();", "    uintptr_t sp = fw_sp();", "    uint64_t start = fw_instructions();",
             f"    int status = {entry};", "    instructions = fw_instructions() - start;",
             "    stack = fw_stack_used(sp);", "    return status;"]
    lines += ["static size_t stack;", "static uint64_t instructions;", "static int call(void) {", *call, "}",
              "int main(void) {", "    fw_ticks_start();",
              f"    if ({library.name}_init(arena) != 0 || call() != 0) return 2;",  # warm: the same work again
              "    int status = call();",
              '    fw_puts("instructions "); fw_put_int((long)instructions);',
              '    fw_puts(" stack "); fw_put_int((long)stack); fw_newline();', "    return status;", "}", ""]
    return "\n".join(lines)


def cortex_m_rows(name: str, board_name: str) -> list:
    """Float and (where the model quantizes) int8 rows of one model on one board."""
    import etc
    from etc.targets.cpu import CpuPartitioner, firmware
    from etc.models.quantized import quantize
    from etc.models.zoo import ZOO

    board = firmware.board(board_name)
    zoo = ZOO[name]()
    variants = [("float32", zoo.export())]
    if name in QUANTIZABLE:
        variants.append(("int8", {"forward": quantize(zoo)[1]}))
    rows = []
    inputs = [x.numpy() for x in zoo.example_inputs]
    for dtype, programs in variants:
        row = {"name": name, "dtype": dtype, "board": board.machine, "core": board.preset}
        try:
            with tempfile.TemporaryDirectory() as directory:
                edge = etc.to_edge(programs).to_backend(CpuPartitioner(target=board.preset))
                library = edge.to_library(os.path.join(directory, "lib"), "model", verbose=False)
                source = os.path.join(directory, "main.c")
                with open(source, "w") as f:
                    f.write(firmware_main(library, "forward", inputs))
                built = firmware.build_firmware(os.path.join(directory, "bench.elf"), [source], [library], board)
                done = firmware.run_firmware(built.elf, board, icount=True, timeout=1800)
                words = done.stdout.split()
                if done.returncode != 0 or "instructions" not in words:
                    raise RuntimeError(f"exit {done.returncode}: {done.stdout[-300:]}")
                row.update(code=library.sizes["code_bytes"], weights=library.sizes["weights_bytes"],
                           arena=library.sizes["arena_bytes"], stack_bound=library.sizes["stack_bytes"],
                           instructions=int(words[words.index("instructions") + 1]),
                           stack=int(words[words.index("stack") + 1]), flash=built.sizes["flash_bytes"],
                           ram=built.sizes["ram_bytes"] - built.sizes["stack_bytes"])
        except Exception as error:  # noqa: BLE001 - a row says what failed; the others still run
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        rows.append(row)
    return rows


def _us(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:.1f}"


def _kb(n) -> str:
    return "n/a" if n is None else f"{n / 1024:.1f}"


def render_host(rows: list) -> str:
    lines = ["Microseconds per call (median CPU time of the calling thread); the library called from C, the others "
             "through their Python runtimes. Ratios: time over time, below 1.00x the library is faster.", "",
             "| model | library (C) | etc runtime | ET XNNPACK | torch 1t | library vs XNNPACK | "
             "library vs etc runtime "
             "| code KiB | weights KiB | arena KiB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['error']} |||||||||")
            continue
        xnn = r.get("xnnpack")
        lines.append(f"| {r['name']} | {_us(r['library'])} | {_us(r['etc'])} | {_us(xnn)} | {_us(r['eager'])} | "
                     f"{r['library'] / xnn:.2f}x | {r['library'] / r['etc']:.2f}x | {_kb(r['code'])} | "
                     f"{_kb(r['weights'])} | {_kb(r['arena'])} |" if xnn else
                     f"| {r['name']} | {_us(r['library'])} | {_us(r['etc'])} | n/a | {_us(r['eager'])} | n/a | "
                     f"{r['library'] / r['etc']:.2f}x | {_kb(r['code'])} | {_kb(r['weights'])} | {_kb(r['arena'])} |")
    timed = [r for r in rows if "error" not in r and r.get("xnnpack")]
    if timed:
        geomean = float(np.exp(np.mean([np.log(r["library"] / r["xnnpack"]) for r in timed])))
        slower = [r["name"] for r in timed if r["library"] >= r["xnnpack"]]
        lines += ["", f"Geomean library / XNNPACK over {len(timed)} models: {geomean:.2f}x; "
                      + (f"slower than XNNPACK: {', '.join(slower)}." if slower
                         else "every model is faster as a library.")]
    return "\n".join(lines) + "\n"


def render_cortex_m(rows: list) -> str:
    lines = ["One inference under `qemu-system-arm -icount shift=0` (instructions executed, QEMU's count: a "
             "deterministic proxy, not cycles). Library: code, weights, arena (RAM), and the stack bound of the "
             "size report and the stack measured by painting; firmware: the whole image's flash and its RAM "
             "without the reserved stack.", "",
             "| model | core | dtype | instructions | code KiB | weights KiB | arena KiB | stack bound / measured B "
             "| firmware flash KiB | firmware RAM KiB |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['core']} | {r['dtype']} | {r['error']} ||||||")
            continue
        lines.append(f"| {r['name']} | {r['core']} | {r['dtype']} | {r['instructions']:,} | {_kb(r['code'])} | "
                     f"{_kb(r['weights'])} | {_kb(r['arena'])} | {r['stack_bound']} / {r['stack']} | "
                     f"{_kb(r['flash'])} | {_kb(r['ram'])} |")
    return "\n".join(lines) + "\n"


def run(sections=("host", "cortex-m"), models=None, runs: int = 20, log=sys.stderr) -> str:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from etc.models.zoo import ZOO

    executorch_threads(1)
    parts = []
    if "host" in sections:
        rows = []
        for name in models or sorted(ZOO):
            print(f"[bench_library] host {name}", file=log, flush=True)
            try:
                rows.append(host_row(name, runs))
            except Exception as error:  # noqa: BLE001
                rows.append({"name": name, "error": f"{type(error).__name__}: {str(error)[:200]}"})
        parts.append("### Host (x86-64)\n\n" + render_host(rows))
    if "cortex-m" in sections:
        rows = []
        for board in CORTEX_M_BOARDS:
            for name in [m for m in (models or CORTEX_M_MODELS) if m in CORTEX_M_MODELS]:
                print(f"[bench_library] {board} {name}", file=log, flush=True)
                rows += cortex_m_rows(name, board)
        parts.append("### Cortex-M (QEMU)\n\n" + render_cortex_m(rows))
    return "\n".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etc.bench.library", description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", choices=("host", "cortex-m", "all"), default="all")
    parser.add_argument("--models", help="comma-separated zoo names")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    sections = ("host", "cortex-m") if args.section == "all" else (args.section,)
    print(run(sections, args.models.split(",") if args.models else None, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
