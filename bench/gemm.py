"""GEMM/convolution throughput of the cpu target's GEMM kernels (etc-cpu-gemm-kernels, targets/cpu/kernels/gemm_*.py).

    python -m etc.bench.gemm [--runs N] [--quick] [--only TEXT]

For matmuls of every size from 256 to 2048 (square and not; B an activation, as attention's
and a user's matmul read it), the transformer layers' Linear shapes (B a weight, packed when
the blob is built: ViT-B 197x768x3072 and 197x3072x768 (577 rows at 384x384), BERT-base at 128 tokens 128x768x768,
Whisper-tiny's encoder 1500x384x1536), a ResNet 3x3 64->64 convolution at 56x56 and a
MobileNet 1x1 32->64 convolution at 48x48: median GFLOP/s of the code the cpu pipeline
generates (the GEMM kernel; the matmuls also with a bias + ReLU epilogue fused into it; plain
loops for contrast at the small shapes: the kernel's min-flops set past the shape's), against

  * the single-core FP32 peak: f32 lanes x FMA pipes x 2 flops x clock. Nominal from
    /proc/cpuinfo's clock (a VM reports its TSC clock, not the boost clock), and measured
    by a generated loop of independent vector FMA chains (what the core really sustains now:
    boost included), as many as the vector registers hold beside the loop's two operands and
    spare ones (`peak_chains`: 24 of AVX-512's 32, 12 of AVX2's 16; 24 on AVX2 spilled and
    read 38 GFLOP/s on a Zen 3 that sustains 101);
  * numpy's BLAS matmul on the same GEMM shape (for a convolution: filter [F, C*KH*KW] x
    patches [C*KH*KW, OH*OW], the im2col not counted), at 1 thread when OpenBLAS lets us set
    it, else at its own thread count (stated).

`run() -> str` returns the markdown table `bench/report.py` embeds. The machine is shared:
compare ratios within one run only.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import statistics
import time

import numpy as np

from etc.bench.common import interleaved

FMA_UNITS = 2  # 512-bit FMA pipes per core assumed on AVX-512 x86 (Zen 4/5, Skylake-SP Gold/Platinum)


def _median_seconds(fn, runs: int, budget_s: float = 1.5) -> tuple[float, float]:
    """(median wall-clock seconds, median CPU seconds of this thread) per call.

    On a shared, oversubscribed machine a call longer than a scheduler time slice is often
    preempted: wall time then counts other processes' work, CPU time does not."""
    fn()
    wall, cpu = [], []
    deadline = time.perf_counter() + budget_s
    while len(wall) < runs or (len(wall) < 3 * runs and time.perf_counter() < deadline):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
        if len(wall) >= 3 and time.perf_counter() > deadline:
            break
    return statistics.median(wall), statistics.median(cpu)


def cpu_mhz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("cpu mhz"):
                    return float(line.split(":")[1])
    except OSError:
        pass
    return None


def peak_chains() -> int:
    """FMA chains the peak loop runs: enough to cover the FMA latency on every pipe, few enough
    to stay in the vector registers (the loop's x and y and a spare pair beside them)."""
    from etc.targets.cpu.isa import isa_for, resolve_target

    registers = isa_for(resolve_target(None)).vector_registers or 16
    return min(24, registers - 4)


def peak_loop_ir(width: int, chains: int) -> str:
    """LLVM IR: `void peak(i64 n, ptr buf)` running `chains` independent a = a*x + y vector chains."""
    v = f"<{width} x float>"
    lines = [f"declare {v} @llvm.fma.v{width}f32({v}, {v}, {v})",
             "define void @peak(i64 %n, ptr %buf) {",
             "entry:",
             f"  %x = load {v}, ptr %buf, align 4",
             f"  %py = getelementptr float, ptr %buf, i64 {width}",
             f"  %y = load {v}, ptr %py, align 4",
             "  br label %loop",
             "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    for c in range(chains):
        lines.append(f"  %a{c} = phi {v} [%x, %entry], [%b{c}, %loop]")
    for c in range(chains):
        lines.append(f"  %b{c} = call {v} @llvm.fma.v{width}f32({v} %a{c}, {v} %x, {v} %y)")
    lines += ["  %i1 = add i64 %i, 1", "  %done = icmp eq i64 %i1, %n", "  br i1 %done, label %exit, label %loop",
              "exit:"]
    acc = "%b0"
    for c in range(1, chains):
        lines.append(f"  %s{c} = fadd {v} {acc}, %b{c}")
        acc = f"%s{c}"
    lines += [f"  store {v} {acc}, ptr %buf, align 4", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def peak_loop(width: int, chains: int | None = None, iterations: int = 1 << 20):
    """The FMA-chain loop (`peak_loop_ir`) compiled for the host: a call running `iterations`
    steps, its `.flops` the flops one call does."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm, resolve_target

    init_llvm()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = resolve_target(None)
    tm = llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.cpu, features=target.features,
                                                                      opt=2)
    chains = chains or peak_chains()
    mod = llvm.parse_assembly(peak_loop_ir(width, chains))
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(engine.get_function_address("peak"))
    buf = np.full(2 * width, 0.5, np.float32)
    buf[width:] = 0.25

    def call():
        fn(iterations, buf.ctypes.data)

    call.engine = engine  # keeps the code alive
    call.flops = chains * width * 2 * iterations
    return call


def measured_peak_gflops(width: int, chains: int | None = None, iterations: int = 1 << 20) -> float:
    """Best of a few runs of the FMA-chain loop (the best run is the least disturbed by neighbours)."""
    call = peak_loop(width, chains, iterations)
    best = float("inf")
    for _ in range(7):
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return call.flops / best / 1e9


class _OpenBlasThreads:
    """Set OpenBLAS's thread count for numpy (scipy-openblas symbols), when the library is found."""

    def __init__(self):
        self.lib = None
        for pattern in ("numpy.libs/libscipy_openblas*.so", "numpy/.libs/libscipy_openblas*.so",
                        "scipy_openblas64/lib/libscipy_openblas*.so"):
            for path in glob.glob(os.path.join(os.path.dirname(os.path.dirname(np.__file__)), pattern)):
                try:
                    lib = ctypes.CDLL(path)
                    lib.scipy_openblas_get_num_threads64_
                    self.lib = lib
                    break
                except (OSError, AttributeError):
                    continue
            if self.lib:
                break

    def get(self) -> int | None:
        return int(self.lib.scipy_openblas_get_num_threads64_()) if self.lib else None

    def set(self, n: int) -> None:
        if self.lib:
            self.lib.scipy_openblas_set_num_threads64_(ctypes.c_int(n))


def matmul_text(m: int, k: int, n: int, epilogue: bool = False) -> str:
    """C = A[m, k] x B[k, n]; `epilogue`: then + bias[n] and ReLU (the GEMM kernel fuses it)."""
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    bias = f", %bias: {t([n])}" if epilogue else ""
    lines = [f"func.func @mm(%a: {t([m, k])}, %b: {t([k, n])}{bias}) -> {t([m, n])} {{",
             "  %z = arith.constant 0.0 : f32",
             f"  %e = tensor.empty() : {t([m, n])}",
             f"  %c = linalg.fill ins(%z : f32) outs(%e : {t([m, n])}) -> {t([m, n])}",
             f"  %r = linalg.matmul ins(%a, %b : {t([m, k])}, {t([k, n])}) outs(%c : {t([m, n])}) -> {t([m, n])}"]
    if epilogue:
        lines += [f"  %o = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) "
                  "-> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = [\"parallel\", \"parallel\"]} "
                  f"ins(%r, %bias : {t([m, n])}, {t([n])}) outs(%e : {t([m, n])}) {{",
                  "  ^bb0(%x: f32, %y: f32, %out: f32):",
                  "    %s = arith.addf %x, %y : f32",
                  "    %p = arith.maximumf %s, %z : f32",
                  "    linalg.yield %p : f32",
                  f"  }} -> {t([m, n])}",
                  f"  return %o : {t([m, n])}", "}"]
    else:
        lines += [f"  return %r : {t([m, n])}", "}"]
    return "\n".join(lines) + "\n"


def compile_case(text: str, weight: bool, inputs: list, target):
    """(compiled function, its input arrays): every argument an input, or (`weight`) all but the
    first constants of the program (B and the bias), as a Linear's weight is."""
    from torch_mlir import ir

    from etc.targets.cpu import blob, runtime
    from etc.targets.cpu.lowering.context import shared_context
    from etc.targets.cpu.pipeline import blob_metadata, compile_linalg, compile_linalg_text

    if not weight:
        return compile_linalg_text(text, target=target), inputs
    constants = {f"c{i}": v for i, v in enumerate(inputs) if i > 0}
    kinds = [("input", "0")] + [("constant", name) for name in constants]
    with shared_context(), ir.Location.unknown():
        result = compile_linalg(ir.Module.parse(text), kinds, target, constants=constants)
    used = {a.name for a in result.args if a.kind == "constant"}
    data = blob.serialize(blob_metadata(result, 1), result.object_bytes,
                          {k: v for k, v in constants.items() if k in used})
    return runtime.CompiledFunction(data), inputs[:1]


def conv_text(c: int, hw: int, f: int, k: int, pad: int) -> tuple[str, tuple]:
    """conv2d NCHW (batch 1, stride 1) with bias, padding as torch-mlir materializes it (tensor.pad)."""
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    hp = hw + 2 * pad
    o = hp - k + 1
    x, xp, w, out = [1, c, hw, hw], [1, c, hp, hp], [f, c, k, k], [1, f, o, o]
    lines = [f"func.func @conv(%x: {t(x)}, %w: {t(w)}, %b: {t([f])}) -> {t(out)} {{",
             "  %z = arith.constant 0.0 : f32"]
    src = "%x"
    if pad:
        lines += [f"  %xp = tensor.pad %x low[0, 0, {pad}, {pad}] high[0, 0, {pad}, {pad}] {{",
                  "  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):", "    tensor.yield %z : f32",
                  f"  }} : {t(x)} to {t(xp)}"]
        src = "%xp"
    lines += [f"  %e = tensor.empty() : {t(out)}",
              f"  %bb = linalg.broadcast ins(%b : {t([f])}) outs(%e : {t(out)}) dimensions = [0, 2, 3]",
              "  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : "
              f"vector<2xi64>}} ins({src}, %w : {t(xp)}, {t(w)}) outs(%bb : {t(out)}) -> {t(out)}",
              f"  return %r : {t(out)}", "}"]
    return "\n".join(lines) + "\n", tuple(out)


# (M, K, N) of the matmuls (B an activation) and of the transformer Linears (B a weight).
MATMULS = [(256, 256, 256), (384, 384, 384), (512, 512, 512), (768, 768, 768), (1024, 1024, 1024),
           (2048, 2048, 2048), (256, 2048, 256), (2048, 256, 2048), (512, 1024, 2048), (1024, 384, 768)]
LINEARS = [("ViT-B MLP up", 197, 768, 3072), ("ViT-B MLP down", 197, 3072, 768),
           ("ViT-B/16 @384 MLP up", 577, 768, 3072), ("ViT-B/16 @384 MLP down", 577, 3072, 768),
           ("BERT-base proj", 128, 768, 768), ("Whisper-tiny enc MLP up", 1500, 384, 1536)]


def cases(quick: bool = False, only: str = "") -> list[dict]:
    """The bench's cases; `only`: those whose name contains it (case-insensitive)."""
    rng = np.random.default_rng(0)
    out = []
    linears = [(f"linear {m}x{k}x{n} ({name})", m, k, n, True) for name, m, k, n in LINEARS]
    for name, m, k, n, weight in [(f"matmul {m}x{k}x{n}", m, k, n, False) for m, k, n in MATMULS] + linears:
        if (quick and m * k * n > 1 << 30) or only.lower() not in name.lower():
            continue
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        bias = rng.standard_normal((n,), np.float32)
        out.append(dict(name=name, text=matmul_text(m, k, n), inputs=[a, b], flops=2 * m * k * n, gemm=(a, b),
                        weight=weight, epilogue=(matmul_text(m, k, n, True), [a, b, bias]),
                        default=m * k * n <= 1 << 24))
    for name, (c, hw, f, k, pad) in (("conv 3x3 64->64 @56x56 (ResNet)", (64, 56, 64, 3, 1)),
                                     ("conv 1x1 32->64 @48x48 (MobileNet)", (32, 48, 64, 1, 0))):
        if only.lower() not in name.lower():
            continue
        text, oshape = conv_text(c, hw, f, k, pad)
        x = rng.standard_normal((1, c, hw, hw), np.float32)
        w = rng.standard_normal((f, c, k, k), np.float32)
        bias = rng.standard_normal((f,), np.float32)
        P = oshape[2] * oshape[3]
        gemm = (w.reshape(f, -1), rng.standard_normal((c * k * k, P), np.float32))
        out.append(dict(name=name, text=text, inputs=[x, w, bias], flops=2 * f * P * c * k * k, gemm=gemm,
                        weight=False, epilogue=None, default=True))
    return out


def _check(got, expected, name: str) -> None:
    scale = max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(got - expected).max()) / scale < 1e-4, f"{name}: results differ"


def run(runs: int = 10, quick: bool = False, only: str = "") -> str:
    from etc.targets.cpu.isa import isa_for, resolve_target
    from etc.targets.cpu.pipeline import compile_linalg_text

    target = resolve_target(None)
    isa = isa_for(target)
    width = isa.lanes if isa.vectorizes else 4
    mhz = cpu_mhz()
    nominal = width * FMA_UNITS * 2 * mhz / 1e3 if mhz else None
    measured = measured_peak_gflops(width)
    peak = peak_loop(width, iterations=1 << 17)  # ~1 ms: called in turn with each row's kernels
    blas = _OpenBlasThreads()
    default_threads = blas.get()
    blas.set(1)
    threads = blas.get() or default_threads
    rows = []
    try:
        for case in cases(quick, only):
            compiled, inputs = compile_case(case["text"], case["weight"], list(case["inputs"]), target)
            outs = [np.empty(o["shape"], np.float32) for o in compiled.outputs]
            a, b = case["gemm"]
            calls = {"kernel": lambda: compiled.run(inputs, outs), "numpy": lambda: a @ b, "peak": peak}
            if case["epilogue"] is not None:  # a matmul: its GEMM operands are A and B themselves
                text, values = case["epilogue"]
                fused, e_inputs = compile_case(text, case["weight"], list(values), target)
                outs_e = [np.empty(o["shape"], np.float32) for o in fused.outputs]
                calls["epilogue"] = lambda: fused.run(e_inputs, outs_e)
            # In turn, round after round: a neighbour's burst slows all three alike, so the
            # ratios within a row hold even when the machine is busy.
            cpu, wall = interleaved(calls, runs, budget_s=3.0)
            t_s, t_np = (wall["kernel"], cpu["kernel"]), (wall["numpy"], cpu["numpy"])
            t_e = (wall["epilogue"], cpu["epilogue"]) if "epilogue" in calls else None
            got = outs[0].copy()
            if case["epilogue"] is not None:
                _check(got, a.astype(np.float64) @ b, case["name"])
                _check(outs_e[0], np.maximum(a.astype(np.float64) @ b + values[2], 0), case["name"] + " + epilogue")
            t_d = None
            if case["default"]:
                plain = compile_linalg_text(case["text"], target=target, gemm_min_flops=1 << 62)
                outs_d = [np.empty(o["shape"], np.float32) for o in plain.outputs]
                t_d = _median_seconds(lambda: plain.run(list(case["inputs"]), outs_d), max(3, runs // 3))
                _check(got, outs_d[0], case["name"])
            rows.append((case, t_s, t_e, t_d, t_np, peak.flops / cpu["peak"] / 1e9))
    finally:
        if default_threads:
            blas.set(default_threads)
    gf = lambda c, t: c["flops"] / t[1] / 1e9  # noqa: E731 - CPU time
    gw = lambda c, t: c["flops"] / t[0] / 1e9  # noqa: E731 - wall clock
    lines = [
        f"Host: {target.cpu} ({target.triple}); GEMM kernel tile {isa.gemm_mr}x{isa.gemm_nr} f32, "
        f"kc={isa.gemm_kc} ({width} lanes)." if isa.vectorizes else f"Host: {target.cpu}: no vector unit (plain loops).",
        f"Single-core FP32 peak: measured {measured:.0f} GFLOP/s ({peak_chains()} independent {width}-lane FMA "
        "chains, best of 7)"
        + (f"; nominal {nominal:.0f} GFLOP/s = {width} lanes x {FMA_UNITS} FMA units x 2 x {mhz / 1e3:.2f} GHz "
           "(/proc/cpuinfo; a VM reports its base/TSC clock, boost makes the measured peak higher)" if nominal else "")
        + ".",
        f"numpy: OpenBLAS matmul at {threads} thread(s) on the same GEMM shape"
        + (f" (its default is {default_threads})" if default_threads and default_threads != threads else "")
        + "; for convolutions the filter x im2col GEMM without the im2col. Median of "
        f"{runs}..{5 * runs} rounds, each calling the kernel, the kernel with the epilogue and numpy in turn. "
        "GFLOP/s from the calling thread's CPU time (the machine is shared and "
        "oversubscribed: calls longer than a time slice get preempted, which inflates wall time; the wall-clock "
        "figure is shown too). Each round also runs about 1 ms of the peak loop: the kernel's share of it in the "
        "same rounds (median against median) holds when the machine's load changes during the run, which "
        "moves every figure measured at another time. Compare ratios within this table. matmul: B an activation (an input); linear: B "
        "a weight (a constant, packed when the blob is built). Epilogue: + bias and ReLU, fused into the kernel.",
        "",
        "| shape | etc GEMM kernel GFLOP/s (wall) | % of measured peak | % of the peak loop in the same rounds "
        "(with epilogue) | % of nominal peak | with epilogue GFLOP/s "
        "| with epilogue % of measured peak | plain loops GFLOP/s | numpy GFLOP/s (wall) | kernel / numpy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, t_s, t_e, t_d, t_np, row_peak in rows:
        s = gf(case, t_s)
        e = gf(case, t_e) if t_e else None
        same = f"{100 * s / row_peak:.0f}%" + (f" ({100 * e / row_peak:.0f}%)" if e else "")
        lines.append(f"| {case['name']} | {s:.1f} ({gw(case, t_s):.1f}) | {100 * s / measured:.0f}% | {same} | "
                     f"{(f'{100 * s / nominal:.0f}%' if nominal else 'n/a')} | "
                     f"{(f'{e:.1f}' if e else 'n/a')} | {(f'{100 * e / measured:.0f}%' if e else 'n/a')} | "
                     f"{(f'{gf(case, t_d):.1f}' if t_d else 'n/a')} | {gf(case, t_np):.1f} ({gw(case, t_np):.1f}) | "
                     f"{t_np[1] / t_s[1]:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etc.bench.gemm", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="skip the shapes above 2^30 multiply-adds")
    parser.add_argument("--only", default="", metavar="TEXT",
                        help="only the shapes whose name contains TEXT (e.g. 'linear', '384x384', 'conv')")
    args = parser.parse_args(argv)
    print(run(runs=args.runs, quick=args.quick, only=args.only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
