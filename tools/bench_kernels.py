"""GFLOP/s of the cpu target's kernel strategy (matmul, convolutions) against the machine's FP32 peak
and single-thread BLAS.

    python -m etc.tools.bench_kernels [--sizes 256,512,1024] [--no-convs] [--baseline] [--repeats 7]

Measures `targets/cpu/kernels_strategy.py` (the module codegen's `apply_codegen_strategy` hook
imports); `tools/bench_gemm.py` measures `targets/cpu/strategy.py`. Each kernel goes through
`etc.targets.cpu.gemm` (linalg -> kernels_strategy -> bufferize -> LLVM -> llvmlite MCJIT, called
through ctypes on numpy buffers). Reported: median GFLOP/s from the thread's CPU time (on the
shared machine long calls get preempted, which inflates wall time; wall-clock shown too), % of
(a) the nominal peak  = f32 lanes x FMA units x 2 x clock (clock from /proc/cpuinfo: the base clock a
    VM reports; turbo makes the real peak higher; FMA units assumed 2 per core, as on AMD Zen 4/5 and
    Intel server cores),
(b) the measured peak = a JIT-compiled loop of independent vector FMAs (what one core really sustains
    now, turbo included),
and the ratio to single-threaded BLAS: torch (torch.set_num_threads(1)) in this process, and
numpy's OpenBLAS in a subprocess with OPENBLAS_NUM_THREADS=1.
The machine is shared: compare numbers of one run only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np


def _cpuinfo() -> dict:
    info = {"model": "?", "mhz": None, "flags": set()}
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and info["model"] == "?":
            info["model"] = value
        elif key == "cpu MHz" and info["mhz"] is None:
            info["mhz"] = float(value)
        elif key in ("flags", "Features") and not info["flags"]:
            info["flags"] = set(value.split())
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"CPU max MHz:\s*([\d.]+)", out)
        if m:
            info["max_mhz"] = float(m.group(1))
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def nominal_peak(info: dict) -> tuple[float, str]:
    flags = info["flags"]
    lanes = 16 if "avx512f" in flags else 8 if "avx" in flags else 4
    fma_units = 2
    mhz = info.get("max_mhz") or info["mhz"] or 0.0
    gflops = lanes * fma_units * 2 * mhz / 1000.0
    return gflops, f"{lanes} f32 lanes x {fma_units} FMA units (assumed) x 2 flop x {mhz:.0f} MHz"


def measured_peak(lanes: int, seconds: float = 0.2) -> float:
    """GFLOP/s of a loop of `chains` independent <lanes x float> FMA chains (no memory traffic)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu import codegen

    target = codegen.host_target()
    chains = 24
    vt = f"<{lanes} x float>"
    lines = [f"declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})",
             "define float @peak(i64 %n, float %s) {",
             "entry:",
             f"  %x0 = insertelement {vt} undef, float %s, i32 0",
             f"  %x = shufflevector {vt} %x0, {vt} undef, <{lanes} x i32> zeroinitializer",
             "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    for c in range(chains):
        lines.append(f"  %a{c} = phi {vt} [%x, %entry], [%b{c}, %loop]")
    for c in range(chains):
        lines.append(f"  %b{c} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{c}, {vt} %x, {vt} %x)")
    lines += ["  %i1 = add i64 %i, 1", "  %done = icmp eq i64 %i1, %n", "  br i1 %done, label %exit, label %loop",
              "exit:"]
    acc = "%b0"
    for c in range(1, chains):
        lines.append(f"  %s{c} = fadd {vt} {acc}, %b{c}")
        acc = f"%s{c}"
    lines += [f"  %r = extractelement {vt} {acc}, i32 0", "  ret float %r", "}"]
    codegen._init_llvm()
    tm = llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.cpu, features=target.features,
                                                                      opt=3, reloc="pic", codemodel="default")
    mod = llvm.parse_assembly("\n".join(lines))
    mod.triple = target.triple
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(tm.emit_object(mod)))
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(engine.get_function_address("peak"))
    n = 1 << 16
    while True:
        t0 = time.perf_counter()
        fn(n, 0.5)
        dt = time.perf_counter() - t0
        if dt > 0.02:
            break
        n *= 4
    reps = max(3, int(seconds / dt))
    best = min(_cpu_timed(lambda: fn(n, 0.5)) for _ in range(reps))
    _keep.append(engine)
    return chains * lanes * 2 * n / best / 1e9


_keep = []


def _cpu_timed(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_seconds(fn, repeats: int) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) per call, medians."""
    fn()  # warm up (page faults, caches)
    one = _timed(fn)
    inner = max(1, int(0.02 / max(one, 1e-9)))
    cpu, wall = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(inner):
            fn()
        cpu.append((time.thread_time() - c0) / inner)
        wall.append((time.perf_counter() - t0) / inner)
    return statistics.median(cpu), statistics.median(wall)


def gflops(flops: float, fn, repeats: int) -> tuple[float, float]:
    cpu, wall = median_seconds(fn, repeats)
    return flops / max(cpu, 1e-12) / 1e9, flops / wall / 1e9


_NUMPY_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np
out = {}
for s in json.loads(sys.argv[1]):
    a = np.random.rand(s, s).astype(np.float32); b = np.random.rand(s, s).astype(np.float32)
    a @ b
    one = time.perf_counter(); a @ b; one = time.perf_counter() - one
    inner = max(1, int(0.02 / max(one, 1e-9)))
    samples = []
    for _ in range(int(sys.argv[2])):
        t0 = time.thread_time()
        for _ in range(inner):
            a @ b
        samples.append((time.thread_time() - t0) / inner)
    out[s] = 2.0 * s ** 3 / statistics.median(samples) / 1e9
print(json.dumps(out))
"""


def numpy_single_thread(sizes, repeats: int) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-c", _NUMPY_SCRIPT, json.dumps(list(sizes)), str(repeats)],
                           capture_output=True, text=True, env=env, timeout=600)
        return {int(k): v for k, v in json.loads(r.stdout).items()}
    except Exception:  # noqa: BLE001
        return {}


def conv_cases():
    # name, (n, c, h, w, f, kh, kw), stride, pad
    return [("resnet 3x3 64->64 @56 (nchw)", (1, 64, 56, 56, 64, 3, 3), 1, 1),
            ("resnet 1x1 256->64 @56 (nchw)", (1, 256, 56, 56, 64, 1, 1), 1, 0),
            ("mobilenet 1x1 32->64 @112 (nchw)", (1, 32, 112, 112, 64, 1, 1), 1, 0)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-convs", action="store_true")
    ap.add_argument("--baseline", action="store_true", help="also time the cpu target's default strategy")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    import torch

    from etc.targets.cpu import gemm

    torch.set_num_threads(1)
    info = _cpuinfo()
    peak_nominal, assumption = nominal_peak(info)
    lanes = 16 if "avx512f" in info["flags"] else 8 if "avx" in info["flags"] else 4
    peak_measured = measured_peak(lanes)
    np_st = numpy_single_thread(sizes, args.repeats)

    rows = []
    rng = np.random.default_rng(0)
    for s in sizes:
        a = rng.random((s, s), dtype=np.float32)
        b = rng.random((s, s), dtype=np.float32)
        c = np.empty((s, s), np.float32)
        k = gemm.compile_linalg_text(gemm.matmul_ir(s, s, s))
        k(a, b, out=[c])
        err = float(np.abs(c - a @ b).max() / max(1.0, float(np.abs(c).max())))
        flops = 2.0 * s ** 3
        ours = gflops(flops, lambda: k(a, b, out=[c]), args.repeats)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        tref = gflops(flops, lambda: torch.mm(ta, tb), args.repeats)[0]
        base = None
        if args.baseline:
            kb = gemm.compile_linalg_text(gemm.matmul_ir(s, s, s), strategy="default")
            base = gflops(flops, lambda: kb(a, b, out=[c]), max(3, args.repeats // 2))[0]
        rows.append((f"matmul {s}x{s}x{s}", ours, tref, np_st.get(s), base, err))
    if not args.no_convs:
        for name, (n, ci, h, w, f, kh, kw), stride, pad in conv_cases():
            x = rng.random((n, ci, h, w), dtype=np.float32)
            wt = rng.random((f, ci, kh, kw), dtype=np.float32)
            k = gemm.compile_linalg_text(gemm.conv_ir(n, ci, h, w, f, kh, kw, stride=stride, pad=pad))
            y = k(x, wt)
            tx, tw = torch.from_numpy(x), torch.from_numpy(wt)
            ref = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad)
            err = float((torch.from_numpy(y) - ref).abs().max() / max(1.0, float(ref.abs().max())))
            flops = 2.0 * y.size * ci * kh * kw
            ours = gflops(flops, lambda: k(x, wt, out=[y]), args.repeats)
            tref = gflops(flops, lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad),
                          args.repeats)[0]
            base = None
            if args.baseline:
                kb = gemm.compile_linalg_text(gemm.conv_ir(n, ci, h, w, f, kh, kw, stride=stride, pad=pad),
                                              strategy="default")
                base = gflops(flops, lambda: kb(x, wt, out=[y]), max(3, args.repeats // 2))[0]
            rows.append((name, ours, tref, None, base, err))

    if not args.no_convs:
        for c, hw, stride, layout in ((32, 112, 1, "nchw"), (144, 56, 2, "nchw"), (32, 112, 1, "nhwc"),
                                      (144, 56, 2, "nhwc")):
            text = gemm.conv_ir(1, c, hw, hw, c, 3, 3, stride=stride, pad=1, layout=layout, depthwise=True)
            x = rng.random((1, c, hw, hw) if layout == "nchw" else (1, hw, hw, c), dtype=np.float32)
            wt = rng.random((c, 3, 3) if layout == "nchw" else (3, 3, c), dtype=np.float32)
            k = gemm.compile_linalg_text(text)
            kb = gemm.compile_linalg_text(text, strategy="default")
            y = k(x, wt)
            tx = torch.from_numpy(x) if layout == "nchw" else torch.from_numpy(x).permute(0, 3, 1, 2)
            tw = torch.from_numpy(wt).unsqueeze(1) if layout == "nchw" else \
                torch.from_numpy(wt).permute(2, 0, 1).unsqueeze(1)
            ref = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1, groups=c)
            if layout == "nhwc":
                ref = ref.permute(0, 2, 3, 1)
            err = float((torch.from_numpy(y) - ref).abs().max() / max(1.0, float(ref.abs().max())))
            flops = 2.0 * y.size * 9
            ours = gflops(flops, lambda: k(x, wt, out=[y]), args.repeats)
            tref = gflops(flops, lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1, groups=c),
                          args.repeats)[0]
            base = gflops(flops, lambda: kb(x, wt, out=[y]), args.repeats)[0]
            rows.append((f"depthwise 3x3 {c}ch @{hw} s{stride} ({layout})", ours, tref, None,
                         base if args.baseline else None, err))

    print(f"CPU: {info['model']}; nominal peak {peak_nominal:.1f} GFLOP/s ({assumption}); "
          f"measured FMA peak {peak_measured:.1f} GFLOP/s (1 core, now)")
    print("GFLOP/s from thread CPU time (wall-clock in parentheses). BLAS references single-threaded: "
          "torch.set_num_threads(1); numpy with OPENBLAS_NUM_THREADS=1.\n")
    head = ("| kernel | etc GFLOP/s (wall) | % nominal peak | % measured peak | torch 1T | etc/torch | "
            "numpy 1T | etc/numpy |")
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if args.baseline:
        head += " default strategy |"
        sep += "---:|"
    print(head)
    print(sep)
    for name, (ours, wall), tref, npv, base, err in rows:
        line = (f"| {name} | {ours:.1f} ({wall:.1f}) | {100 * ours / peak_nominal:.0f}% | "
                f"{100 * ours / peak_measured:.0f}% | "
                f"{tref:.1f} | {ours / tref:.2f} | " + (f"{npv:.1f} | {ours / npv:.2f} |" if npv else "- | - |"))
        if args.baseline:
            line += f" {base:.1f} |" if base else " - |"
        print(line)
    worst = max(r[5] for r in rows)
    print(f"\nmax relative error vs reference: {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
