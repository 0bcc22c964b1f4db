"""The cpu target's back end: ONE pass pipeline from the edge dialect to the LLVM dialect.

    cpu_pipeline(target, threads=1)   # the pipeline string (etc-opt runs any prefix of it)
    compile_module(module, target, ...) -> CodegenResult   # pipeline + LLVM IR -> object code

Input contract: a module with one public `func.func` of edge ops on ranked tensors (an outlined
delegate function, `lowering.context.import_for_lowering`) and the `ml_program.global`s it reads,
their data in the module's `ProgramIR` (or inline, as a lit test writes them). The first passes
(`EDGE_TO_LINALG`) take it to linalg on tensors whose entry arguments carry
`etc.cpu.arg = "input:<i>" | "constant:<fqn>"` and `bufferization.writable = false`: where
`start="linalg"` enters the pipeline (a hand-written linalg module, labelled by
`label_arguments`). Between steps, everything travels on the IR: the path each heavy op took
(`etc.cpu.decisions` on the module), weights packed at blob-build time (`etc.cpu.pack` on the
entry's arguments), constants the runtime derives at load (`etc.cpu.derived`), the scratch plan
(`etc.cpu.arg = "scratch:<offset>"`, `etc.cpu.scratch_bytes`) and the entry's ABI (`etc.cpu.abi`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from torch_mlir import ir

from etc.errors import LoweringError
from etc.targets.cpu.isa import ISA_TABLE, CpuTarget, isa_for, resolve_target


# Edge -> linalg on tensors: our passes onto torch-mlir's torch dialect, then its own pipelines.
EDGE_TO_LINALG = (
    "etc-cpu-conv1d-as-2d",  # 1-D convolutions as 2-D ones of height 1 (the 2-D kernels take them)
    "etc-cpu-drop-padding-taps",  # convolution taps that read only zero padding (dilated, small maps)
    "etc-cpu-edge-to-torch",  # edge ops -> torch ops of the same ATen name; constants -> arguments
    "etc-cpu-lower-quantized",  # the folded int8 ops -> linalg (the weights' data from the constant table)
    "etc-cpu-lower-resize",  # bilinear interpolation -> a gather over compile-time tap tables
    "etc-cpu-expand-torch-ops",  # what torch-mlir does not lower to our codegen -> what it does
    "symbol-dce",  # the globals the constant arguments replaced
    "torchdynamo-export-to-torch-backend-pipeline",
    "torch-backend-to-linalg-on-tensors-backend-pipeline",
)
STARTS = ("edge", "linalg")


def cpu_pipeline(target: CpuTarget, *, threads: int = 1, gemm_min_flops: int | None = None,
                 profile: bool = False, start: str = "edge", tuned: bool = True,
                 attention_min_keys: int | None = None) -> str:
    """The pass pipeline for `target`, its sizes from the ISA table (isa.py), from the edge dialect
    (`start="linalg"`: from its linalg stage on); `gemm_min_flops=0` makes the GEMM kernel take
    every contraction (tests of odd sizes), `attention_min_keys` overrides the fused attention's
    threshold (tests and benches comparing both paths); `profile=True` adds `etc-cpu-profile-regions`
    (counter reads between the dispatch regions; off: not in the pipeline). `tuned=False` is
    the partitioner's trial (`lowering/support.py`): the same pipeline for the same target with
    the ISA table's scalar row, so no kernel is built. A tuned kernel never makes an op
    unsupported (it takes an op or records why not), and one that fails to build must fail the
    compile, not turn into "not supported" in a trial."""
    from etc.targets.cpu.passes.profile_regions import COUNTER_ARCHES

    if start not in STARTS:
        raise LoweringError(f"cpu pipeline: start={start!r} is not one of {', '.join(STARTS)}")
    if profile and target.arch not in COUNTER_ARCHES:
        raise LoweringError(f"cpu target: profile=True needs a user-mode cycle counter ({', '.join(COUNTER_ARCHES)}); "
                            f"{target.triple} has none")
    isa = isa_for(target) if tuned else ISA_TABLE["scalar"]
    ib = f"index-bitwidth={target.index_bits}"
    loops = f"etc-cpu-split-threads{{threads={threads}}}" if threads > 1 else "func.func(convert-linalg-to-loops)"
    # A target without a vector unit (Cortex-M) records every contraction as plain loops and has
    # no window or row kernels (they are vector code).
    plane = " plane-epilogue=true" if isa.window_plane_epilogue else ""
    windows = ([f"etc-cpu-window-kernels{{lanes={isa.lanes}{plane}}}", f"etc-cpu-grouped-kernels{{lanes={isa.lanes}}}"]
               if isa.vectorizes else [])
    rows = [f"etc-cpu-row-kernels{{lanes={isa.lanes}}}"] if isa.vectorizes else []
    attention = ([f"etc-cpu-attention-kernels{{lanes={isa.lanes} registers={isa.vector_registers}"
                  + (f" min-keys={attention_min_keys}" if attention_min_keys is not None else "") + "}"]
                 if isa.vectorizes else [])
    tile = (f"lanes={isa.lanes} mr={isa.gemm_mr or 1} nr={isa.gemm_nr or isa.lanes} kc={isa.gemm_kc or 1} "
            f"kc-strided={isa.gemm_kc_strided or isa.gemm_kc or 1} l2-kib={isa.l2_kib or 1}")
    # convert-vector-to-llvm converts memrefs with a 64-bit index whatever the target: a 32-bit
    # target takes etc's, which converts with its width (passes/vector_to_llvm.py).
    vector_to_llvm = ("convert-vector-to-llvm" if target.index_bits == 64
                      else f"etc-cpu-vector-to-llvm{{index-bitwidth={target.index_bits}}}")
    # 3x3 stride-1 convolutions as Winograd F(2x2,3x3), on edge ops (after the dead taps are cut).
    winograd = (f"etc-cpu-winograd-convs{{min-channels={isa.winograd_min_channels} "
                f"min-tiles={isa.winograd_min_tiles}}}")
    edge_steps = list(EDGE_TO_LINALG)
    edge_steps.insert(edge_steps.index("etc-cpu-drop-padding-taps") + 1, winograd)
    steps = [
        *(edge_steps if start == "edge" else ()),
        # Int8 contractions -> dot-product kernels with the requantization in registers (lowering/quantized_gemm.py).
        f"etc-cpu-int8-kernels{{dot={isa.int8_dot} mr={isa.int8_rows} panels={max(1, isa.gemm_nr // 16)}}}",
        # Long attention (QK^T, mask, softmax, times V) -> one kernel that never stores the scores.
        *attention,
        # Roots of dispatch regions, before fusion can put a producer into their operands: each
        # contraction becomes a call to its kernel, which fusion cannot enter, then is inlined and tiled.
        f"etc-cpu-gemm-kernels{{{tile}" + (f" min-flops={gemm_min_flops}" if gemm_min_flops is not None else "") + "}",
        # Bilinear resizes -> vector kernels (or a recorded reason), before fusion merges their gather away.
        f"etc-cpu-resize-kernels{{lanes={isa.lanes if isa.vectorizes else 1}}}",
        "etc-cpu-fuse-elementwise",
        # Each kernel takes its accumulator init and its elementwise consumer (applied in registers).
        f"etc-cpu-gemm-regions{{{tile}}}",
        f"etc-cpu-tile-gemm-kernels{{{tile}}}",
        # Window ops and grouped convolutions are named ops fusion leaves alone; their fused
        # consumer becomes the epilogue.
        *windows,
        # Row reductions with their elementwise ops on the same rows (softmax, norms): one kernel per row.
        *rows,
        # bf16 arithmetic in f32, each result rounded to bf16 as torch rounds it (LLVM cannot
        # legalize vector bf16 arithmetic), after the kernels made their vector code.
        "etc-cpu-widen-bf16",
        f"etc-cpu-expand-math{{reciprocal-estimates={str(isa.reciprocal_estimates).lower()}}}",
        "etc-cpu-prepack-constants",
        # Elementwise ops reading an input transposed (permutes): blocked so the reads stay in L1.
        "etc-cpu-block-transposes",
        "etc-cpu-default-loops",
        # Tensors -> the caller's buffers (an op never takes one tensor.empty twice: bufferization
        # would alias the two).
        "etc-cpu-distinct-inits",
        "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
        "etc-cpu-distinct-results",
        "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}",
        "canonicalize", "cse",
        # Dynamic dims: static buffers at the upper bounds plus the sizes as arguments.
        "etc-cpu-dynamic-shapes",
        "etc-cpu-forward-result-copies",
        "etc-collapse-elementwise-dims",
        "etc-cpu-plan-scratch{alignment=64}",
        "etc-cpu-entry-abi",
        "etc-cpu-copies-to-linalg",
        "etc-cpu-drop-assertions",
        # Each GEMM tile's output lines fetched for writing while its k loop runs (where the ISA row says it pays).
        f"etc-cpu-prefetch-gemm-tiles{{f32-tiles={str(isa.gemm_prefetch).lower()}}}",
        # A long tile epilogue (SiLU, GELU) one tile row at a time, where the ISA row's registers would spill.
        f"etc-cpu-gemm-epilogue-rows{{min-ops={isa.gemm_epilogue_rows}}}",
        # Loops, then the LLVM dialect (vector ops lower before scf and cf).
        loops,
        *(["etc-cpu-profile-regions"] if profile else []),
        # Each dispatch region its own function: LLVM's loop passes stay linear in the model's size.
        "etc-cpu-outline-regions",
        "lower-affine", "func.func(convert-vector-to-scf{full-unroll=true}, lower-affine)", vector_to_llvm,
        "canonicalize", "convert-scf-to-cf", "expand-strided-metadata", "lower-affine",
        "convert-math-to-llvm", "convert-math-to-libm",
        f"finalize-memref-to-llvm{{{ib}}}", f"convert-arith-to-llvm{{{ib}}}", f"convert-cf-to-llvm{{{ib}}}",
        f"convert-func-to-llvm{{{ib} use-bare-ptr-memref-call-conv=1}}", "convert-ub-to-llvm",
        "reconcile-unrealized-casts",
        # LLVM packs a vector of i1 into bits; a bool tensor is one byte per element.
        "etc-cpu-bool-vectors-as-bytes",
        "canonicalize",
    ]
    return "builtin.module(" + ", ".join(steps) + ")"


def label_arguments(fn, arg_kinds: list, dim_bounds: dict | None = None, result_bounds: list | None = None) -> None:
    """Mark the entry's arguments with the pipeline's input contract (kind:name, read-only, and
    `etc.dim_bounds` on those with dynamic dims: `dim_bounds` maps an argument's position to its
    lo0, hi0, lo1, hi1, ...; bounds already on the function's arguments are kept)."""
    from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs, set_arg_attrs
    from etc.targets.cpu.passes.dynamic_shapes import RESULT_BOUNDS_ATTR

    with fn.context:
        attrs = arg_attrs(fn)
        for i, (kind, name) in enumerate(arg_kinds):
            attrs[i][ARG_ATTR] = ir.StringAttr.get(f"{kind}:{name}")
            attrs[i]["bufferization.writable"] = ir.BoolAttr.get(False)
            if dim_bounds and i in dim_bounds:
                attrs[i]["etc.dim_bounds"] = ir.DenseI64ArrayAttr.get([int(x) for x in dim_bounds[i]])
        set_arg_attrs(fn, attrs)
        if result_bounds and any(b is not None for b in result_bounds):  # what etc-cpu-dynamic-shapes falls back on
            fn.attributes[RESULT_BOUNDS_ATTR] = ir.ArrayAttr.get(
                [ir.DenseI64ArrayAttr.get([int(x) for x in (b or [])]) for b in result_bounds])


def run_cpu_pipeline(module: ir.Module, target: CpuTarget, *, start: str = "edge", threads: int = 1,
                     verify: bool = False, gemm_min_flops: int | None = None, profile: bool = False,
                     tuned: bool = True, attention_min_keys: int | None = None) -> None:
    """Run `cpu_pipeline` on `module` (in place, down to the LLVM dialect).

    The pipeline verifies the module after it; `verify=True` verifies after every pass (the
    tests do; a large model pays seconds for it)."""
    from etc.passes.pipeline import run_pipeline

    run_pipeline(module, cpu_pipeline(target, threads=threads, gemm_min_flops=gemm_min_flops, profile=profile,
                                      start=start, tuned=tuned, attention_min_keys=attention_min_keys), verify=verify)
    if not module.operation.verify():
        raise LoweringError("cpu codegen: the pipeline left an invalid module")


def compile_module(module: ir.Module, target: "CpuTarget | str | None" = None, *, start: str = "edge",
                   entry: str = "etc_cpu_entry", opt_level: int = 3, keep_ir: bool = False, threads: int = 1,
                   constants: dict | None = None, verify: bool = False, gemm_min_flops: int | None = None,
                   profile: bool = False, attention_min_keys: int | None = None):
    """A module (see the input contract above) -> `codegen.CodegenResult` (object code + ABI).

    The entry's results become outputs. `constants`: the constant arguments' data; packed
    constants the pipeline asked for (`etc.cpu.pack`) are evaluated and added to it.
    `profile=True`: the code also times its dispatch regions (`result.profile`:
    passes/profile_regions.py)."""
    from torch_mlir.dialects import llvm as llvm_d

    from etc.targets.cpu import codegen, decisions
    from etc.targets.cpu.entry_args import entry_function
    from etc.targets.cpu.parallel import BARRIER_FN, barrier_llvm_ir
    from etc.targets.cpu.passes.entry_abi import read_abi
    from etc.targets.cpu.passes.prepack_constants import evaluate_pack
    from etc.targets.cpu.passes.profile_regions import read_profile

    target = resolve_target(target)
    t0 = time.perf_counter()
    inner = ir.StringAttr(entry_function(module.operation).attributes["sym_name"]).value
    run_cpu_pipeline(module, target, start=start, threads=threads, verify=verify, gemm_min_flops=gemm_min_flops,
                     profile=profile, attention_min_keys=attention_min_keys)
    t1 = time.perf_counter()
    codegen.check_llvm_dialect(module)
    abi = read_abi(module)
    args, offsets = [], []
    for a in abi:
        if a["kind"] == "scratch":
            offsets.append(int(a["shape"][0]))
            continue
        if a.get("pack") and constants is not None:
            # Always evaluated: a "#packed<i>" left in `constants` by an earlier compile of the same
            # function (the partitioner's trial) may be another pack of the same weight.
            source = a["name"].rsplit("#packed", 1)[0]
            packed = evaluate_pack(a["pack"], constants[source])
            # MLIR's integers are signless: a uint8 weight (4-bit pairs) is read as i8 bytes.
            constants[a["name"]] = packed.view(np.dtype(a["dtype"])) if packed.dtype == np.uint8 else packed
        args.append(codegen.ArgSpec(a["kind"], a["dtype"], tuple(a["shape"]), a["name"], a.get("dynamic", ())))
    scratch = ir.IntegerAttr(module.operation.attributes["etc.cpu.scratch_bytes"]).value
    if offsets:
        args.append(codegen.ArgSpec("scratch", "uint8", (scratch,), "scratch"))
    threaded = threads > 1
    llvm_ir = codegen.strip_header(llvm_d.translate_module_to_llvmir(module.operation))
    if threaded:
        llvm_ir = "\n".join(line for line in llvm_ir.splitlines()
                            if not (line.startswith("declare") and f"@{BARRIER_FN}(" in line)) + "\n"
        llvm_ir += barrier_llvm_ir(target.index_bits)
    n_slots = len(args) - (1 if offsets else 0)
    llvm_ir += codegen.entry_wrapper(inner, entry, n_slots, offsets, target.index_bits, threaded=threaded)
    regions = [name for name in _function_names(module) if name.startswith(f"{inner}_region")]
    obj, optimized, bitcode = codegen.emit_object(llvm_ir, target, opt_level=opt_level,
                                                  internalize=[inner, *regions], out_of_line=regions)
    return codegen.CodegenResult(object_bytes=obj, entry=entry, args=args, target=target, scratch_bytes=scratch,
                                 llvm_ir=optimized if keep_ir else "", threaded=threaded,
                                 decisions=decisions.read(module), profile=read_profile(module), bitcode=bitcode,
                                 stats={"pipeline_s": t1 - t0, "llvm_s": time.perf_counter() - t1})

def compile_linalg(module: ir.Module, arg_kinds: list, target: "CpuTarget | str | None" = None, *,
                   dim_bounds: dict | None = None, result_bounds: list | None = None, **options):
    """A linalg-on-tensors module (one public func) -> `codegen.CodegenResult`: its arguments
    labelled (`arg_kinds`: (kind, name) of each, "input"/"constant"; `label_arguments`), then the
    cpu pipeline from its linalg stage (`compile_module` with `start="linalg"` and `options`)."""
    from etc.targets.cpu.entry_args import entry_function

    label_arguments(entry_function(module.operation), arg_kinds, dim_bounds, result_bounds)
    return compile_module(module, target, start="linalg", **options)


@dataclass
class Lowered:
    """A delegate function at the pipeline's linalg stage (`lower_to_linalg`)."""

    module: ir.Module  # linalg on tensors, one public function
    arguments: list  # per argument: (kind, name), as its `etc.cpu.arg` label says
    constants: dict  # the constant arguments' data


def lower_to_linalg(func_op, constants: dict) -> Lowered:
    """An outlined edge function through the pipeline's first passes (`EDGE_TO_LINALG`, the
    target-independent ones: no Winograd rewrite, which depends on the target's vector unit), for
    tools and tests that look at or compile what the back end starts from."""
    from etc.passes.pipeline import run_pipeline
    from etc.targets.cpu.entry_args import arg_attrs, arg_label, entry_function
    from etc.targets.cpu.lowering.context import import_for_lowering, program_of

    context, module = import_for_lowering(func_op)
    with context, ir.Location.unknown():
        program = program_of(module, constants)
        run_pipeline(module, "builtin.module(" + ", ".join(EDGE_TO_LINALG) + ")", verify=False)
        labels = [arg_label(a) for a in arg_attrs(entry_function(module.operation))]
    return Lowered(module, labels, {name: program.constants[name] for kind, name in labels if kind == "constant"})


def _function_names(module: ir.Module) -> list[str]:
    """The names of the module's functions (llvm.func after the pipeline)."""
    return [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations
            if op.operation.name in ("llvm.func", "func.func")]


def blob_metadata(result, threads: int) -> dict:
    """The blob header of a compiled function (`codegen.CodegenResult`): what the runtime checks
    and calls, and the decisions `etc inspect` prints."""
    target = result.target
    return {
        "producer": "etc cpu target",
        "triple": target.triple,
        "cpu": target.cpu,
        "required_features": target.required_features,
        "entry": result.entry,
        "args": [a.to_json() for a in result.args],
        "scratch_bytes": result.scratch_bytes,
        "num_threads": int(threads),
        # "flat": void entry(void **args); "threaded": void entry(void **args, intptr tid, intptr nthreads,
        # int32_t barrier[2]), called from nthreads threads at once (see parallel.py).
        "entry_abi": "threaded" if result.threaded else "flat",
        "decisions": [d.to_json() for d in result.decisions],
        # Profiled builds: where the counter reads go in the scratch buffer and what each region computed.
        **({"profile": result.profile} if result.profile is not None else {}),
    }


def compile_linalg_text(text: str, *, target=None, threads: int = 1, opt_level: int = 3,
                        gemm_min_flops: int | None = None, profile: bool = False):
    """linalg-on-tensors text (one public func, every argument an input) -> a callable
    `runtime.CompiledFunction` (f(*arrays) -> outputs): the whole cpu pipeline, for tests and tools."""
    from etc.targets.cpu import blob, runtime
    from etc.targets.cpu.entry_args import entry_function
    from etc.targets.cpu.lowering.context import shared_context

    target = resolve_target(target)
    with shared_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        fn = entry_function(module.operation)
        n = len(fn.regions[0].blocks[0].arguments)
        result = compile_linalg(module, [("input", str(i)) for i in range(n)], target, opt_level=opt_level,
                                threads=threads, verify=True, gemm_min_flops=gemm_min_flops, profile=profile)
    function = runtime.CompiledFunction(blob.serialize(blob_metadata(result, threads), result.object_bytes, {}))
    function.decisions = result.decisions
    return function


def main(argv=None) -> int:
    """`python -m etc.targets.cpu.pipeline [--target T] [--threads N] [--from edge|linalg] [--run FILE
    [--emit mlir|llvm-ir]]`: print the cpu pipeline for a target, from the edge dialect to the LLVM
    dialect (paste it, or any prefix of it, into `etc-opt --pass-pipeline=...`), or run it on each
    function of a file (an edge-dialect module; `--from linalg`: linalg on tensors whose entry
    arguments carry `etc.cpu.arg`) and print the LLVM dialect, or the optimized LLVM IR of the object."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m etc.targets.cpu.pipeline", description=main.__doc__.split("\n")[0])
    parser.add_argument("--target", default="host", help="host, a preset (x86-64-v3, aarch64, cortex-m7) or a triple")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="the pipeline of CpuPartitioner(profile=True)")
    parser.add_argument("--from", dest="start", choices=STARTS, default="edge",
                        help="where the pipeline starts: the edge dialect, or its linalg stage")
    parser.add_argument("--run", metavar="FILE", help="run the pipeline on each function of FILE ('-': stdin)")
    parser.add_argument("--emit", choices=("mlir", "llvm-ir"), default="mlir",
                        help="what --run prints: the LLVM dialect module, or the object's optimized LLVM IR")
    args = parser.parse_args(argv)
    target = resolve_target(args.target)
    pipeline = cpu_pipeline(target, threads=args.threads, profile=args.profile, start=args.start)
    if not args.run:
        print(pipeline)
        return 0
    from etc.errors import EtcError
    from etc.passes.pipeline import run_pipeline
    from etc.targets.cpu.lowering.context import import_for_lowering, shared_context

    text = sys.stdin.read() if args.run == "-" else open(args.run).read()
    try:
        with shared_context(), ir.Location.unknown():
            source = ir.Module.parse(text)
            for fn in [op.operation for op in source.body.operations if op.operation.name == "func.func"]:
                _, module = import_for_lowering(fn)  # the function (public) and the globals it reads
                if args.emit == "mlir":
                    run_pipeline(module, pipeline)
                    print(module)
                    continue
                result = compile_module(module, target, start=args.start, threads=args.threads, keep_ir=True,
                                        profile=args.profile)
                layout = ", ".join(f"{a.kind}:{a.dtype}{list(a.shape)}" for a in result.args)
                print(f"// target: {target.triple} ({target.cpu})\n// entry {result.entry}(args): {layout}\n"
                      + result.llvm_ir)
    except (EtcError, ir.MLIRError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
