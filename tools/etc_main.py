"""`etc`: compile, run and inspect programs from the command line.

    etc compile model.py:MyModel --example-inputs "1x3x32x32" -o model.pte [--backend cpu]
    etc compile exported.pt2 -o model.pte [--etrecord model.etrecord]
    etc compile model.py:MyModel --example-inputs 1x784 --emit-library build/mnist [--name mnist] --target cortex-m33
    etc run model.pte [--inputs a.npy b.npy] [--runs 10]
    etc run --verify model.bpte [--rtol 1e-5 --atol 1e-8]
    etc inspect model.pte [--plot DIR]
    etc inspect quantized.pt2 --quant-report float.pt2
    etc selective-build a.pte b.pte -o selected_operators.yaml
    etc profile model.pte [--runs 10] [--trace trace.json] [--etrecord model.etrecord]
    etc generate model.pte --tokenizer tokenizer.json --prompt "..." [--max-new-tokens N]

User errors (a bad path, a model that does not export, an unsupported op, a
corrupt program) print one diagnostic line and exit 1; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time
import traceback

from etc.errors import EtcError

SCALAR_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                     7: "float64", 11: "bool", 15: "bfloat16"}


class UsageError(EtcError):
    """A command-line argument that cannot be used."""


def _progress(message: str) -> None:
    print(f"[etc] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- compile
def _parse_shape_spec(spec: str):
    """'1x3x32x32' -> float32 tensor; 'int64:1x12' -> integer tokens; 'bool:2x8' -> mask."""
    import torch

    dtype = torch.float32
    if ":" in spec:
        name, spec = spec.split(":", 1)
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype):
            raise UsageError(f"unknown dtype '{name}' in --example-inputs")
    try:
        shape = [int(d) for d in spec.split("x")] if spec else []
    except ValueError:
        raise UsageError(f"bad shape '{spec}' in --example-inputs (expected e.g. 1x3x32x32)") from None
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=torch.bool)
    return torch.randint(0, 8, shape, dtype=dtype)


@contextlib.contextmanager
def _user_code(path: str, doing: str):
    """Errors in the user's model file become one line naming their file:line, not our traceback."""
    try:
        yield
    except SyntaxError as error:
        where = f"{error.filename or path}:{error.lineno}" + (f":{error.offset}" if error.offset else "")
        line = (error.text or "").strip()
        raise UsageError(f"{where}: syntax error: {error.msg}" + (f": {line}" if line else "")) from None
    except Exception as error:  # noqa: BLE001  (any exception of the user's code is theirs to fix)
        if isinstance(error, EtcError):
            raise
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if os.path.abspath(f.filename) == os.path.abspath(path)]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else path
        raise UsageError(f"{where}: {doing} raised {type(error).__name__}: {error}") from None


def load_model(target: str, example_specs: list[str]):
    """'file.py:Class' -> (module instance, example inputs) or a saved .pt2 -> ExportedProgram."""
    import torch

    if target.endswith(".pt2"):
        if not os.path.exists(target):
            raise UsageError(f"no such file: {target}")
        return torch.export.load(target), None
    if ":" not in target:
        raise UsageError(f"expected <file.py>:<Model> or a .pt2 file, got '{target}'")
    path, name = target.rsplit(":", 1)
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    with _user_code(path, "loading it"):
        spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if factory is None:
        raise UsageError(f"{path} has no attribute '{name}'")
    with _user_code(path, f"calling {name}()"):
        model = factory()
    inputs = None
    if isinstance(model, tuple):  # a factory may return (model, example_inputs)
        model, inputs = model
    if example_specs:
        inputs = tuple(_parse_shape_spec(s) for s in example_specs)
    if inputs is None:
        raise UsageError("--example-inputs is required for a model class (e.g. --example-inputs 1x3x32x32)")
    return model.eval(), tuple(inputs)


def cmd_compile(args) -> int:
    import torch

    import etc

    _progress("exporting")
    model, inputs = load_model(args.model, args.example_inputs or [])
    if inputs is None:
        ep = model
    else:  # a forward that raises is the user's error, at the user's line
        with _user_code(args.model.rsplit(":", 1)[0], "exporting it (torch.export.export)"):
            ep = torch.export.export(model, inputs)
    _progress("lowering to the edge dialect")
    edge = etc.to_edge(ep)
    if args.profile and args.backend != "cpu":
        raise UsageError("--profile times the regions inside cpu delegates: use it with --backend cpu")
    if not args.output and not args.emit_library:
        raise UsageError("nothing to write: give -o model.pte, --emit-library DIR, or both")
    if (args.target != "host" or args.float_abi) and args.backend != "cpu" and not args.emit_library:
        raise UsageError("--target and --float-abi choose the cpu backend's target: use them with --backend cpu "
                         "or --emit-library")
    if args.backend == "cpu" or args.emit_library:  # a library is the cpu target's native code
        from etc.targets.cpu import CpuPartitioner

        _progress(f"delegating to the cpu target for {args.target} (MLIR -> LLVM -> object code)")
        edge = edge.to_backend(CpuPartitioner(args.target, profile=args.profile, float_abi=args.float_abi))
        print(edge.delegation_info())
    if args.emit_library:
        name = args.name or os.path.basename(os.path.normpath(args.emit_library))
        _progress(f"writing the library {name} into {args.emit_library}")
        edge.to_library(args.emit_library, name)
        if not args.output:
            return 0
    _progress("planning memory and emitting")
    program = edge.to_executorch(generate_etrecord=bool(args.etrecord))
    program.save(args.output)
    if args.etrecord:
        program.get_etrecord().save(args.etrecord)
        print(f"wrote compile record {args.etrecord}")
    print(program.memory_report())
    print(f"wrote {args.output} ({len(program.buffer)} bytes)")
    return 0


# --------------------------------------------------------------------- run
def _random_input(meta):
    """A random input for a TensorInfo (a dynamic tensor at its upper bound)."""
    import numpy as np

    rng = np.random.default_rng(0)
    dtype = meta.numpy_dtype
    shape = tuple(meta.sizes())
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 8, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _is_bundle(path: str) -> bool:
    from etc.devtools.bundled_program import FILE_IDENTIFIER

    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8] == FILE_IDENTIFIER
    except OSError:
        return False  # load_program reports the unreadable path


def cmd_verify(args) -> int:
    from etc.devtools.bundled_program import BundledProgram

    if not _is_bundle(args.program):
        raise UsageError(f"--verify needs a bundled program (.bpte) with test cases; {args.program} is not one")
    report = BundledProgram.load(args.program).verify(rtol=args.rtol, atol=args.atol)
    print(report)
    return 0 if report.ok else 1


def _program_and_inputs(args, **load_options):
    """(loaded program, method, inputs) for run and profile: a .pte or a .bpte (its program, and its first
    test case's inputs unless --inputs gives some), inputs from --inputs, else random ones."""
    import numpy as np

    from etc.runtime import Runtime

    source, bundled_inputs = args.program, None
    if _is_bundle(args.program):
        from etc.devtools.bundled_program import BundledProgram

        bundle = BundledProgram.load(args.program)
        source = bundle.program
        bundled_inputs = next((suite.test_cases[0].inputs for suite in bundle.method_test_suites
                               if suite.method_name == args.method and suite.test_cases), None)
    selected = getattr(args, "selected_operators", None)
    runtime = Runtime.from_selective_build(selected) if selected else Runtime.get()
    program = runtime.load_program(source, **load_options)
    method = program.load_method(args.method)
    meta = method.metadata
    if args.inputs:
        if len(args.inputs) != meta.num_inputs():
            raise UsageError(f"method '{args.method}' takes {meta.num_inputs()} input(s), "
                             f"{len(args.inputs)} given with --inputs")
        inputs = [np.load(p) for p in args.inputs]
    elif bundled_inputs is not None:
        inputs = bundled_inputs
        print(f"inputs of the bundle's first '{args.method}' test case")
    else:
        inputs = [_random_input(meta.input_tensor_meta(i)) for i in range(meta.num_inputs())]
        print(f"random inputs: {', '.join(str(list(x.shape)) + ' ' + str(x.dtype) for x in inputs)}")
    return program, method, inputs


def cmd_run(args) -> int:
    import numpy as np

    if args.verify:
        return cmd_verify(args)
    _, method, inputs = _program_and_inputs(args)
    outputs = method.execute(inputs)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        method.execute(inputs)
        times.append(time.perf_counter() - start)
    for i, out in enumerate(outputs):
        arr = np.asarray(out)
        print(f"output {i}: shape {list(arr.shape)} {arr.dtype}")
        print(np.array2string(arr, threshold=20, precision=5))
    if times:
        times.sort()
        print(f"median latency over {len(times)} runs: {times[len(times) // 2] * 1e3:.3f} ms")
    return 0


# ----------------------------------------------------------------- profile
def cmd_profile(args) -> int:
    from etc.devtools.inspector import Inspector

    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    program, method, inputs = _program_and_inputs(args, enable_etdump=True)
    for _ in range(args.warmup):
        method.execute(inputs)
    program.run_record.clear()  # warm-up runs (first-touch of the arenas, lazy linking) are not the steady state
    for _ in range(args.runs):
        method.execute(inputs)
    inspector = Inspector(program.run_record, etrecord=args.etrecord, program=program.pte)
    inspector.print_data_tabular()
    print("\ntop operators by time:")
    for name, ms, calls in inspector.top_ops(args.top, method=args.method, regions=True):
        print(f"  {ms / args.runs:9.4f} ms/run  {calls // args.runs:4d} call(s)/run  {name}")
    if args.trace:
        inspector.write_chrome_trace(args.trace)
        print(f"wrote Chrome trace {args.trace} (open it in https://ui.perfetto.dev)")
    if args.etdump:
        program.write_etdump_result_to_file(args.etdump)
        print(f"wrote run record {args.etdump}")
    return 0


# ---------------------------------------------------------- selective build
def cmd_selective_build(args) -> int:
    from etc.runtime.selective_build import SelectiveBuild

    selection = SelectiveBuild.from_programs(*args.programs)
    selection.save(args.output)
    print(f"{len(selection.operators)} operator(s), {len(selection.backends)} backend(s) for "
          f"{len(args.programs)} program(s): wrote {args.output}")
    for name, users in sorted(selection.operators.items()):
        print(f"  {name}  ({', '.join(users)})")
    for name, users in sorted(selection.backends.items()):
        print(f"  backend {name}  ({', '.join(users)})")
    return 0


# ----------------------------------------------------------------- inspect
def cmd_inspect(args) -> int:
    from etc.schema import deserialize_pte

    if args.quant_report:  # `program` is then a quantized torch.export.save file (devtools/quant_report.py)
        from etc.devtools.quant_report import cli

        print(cli(args.program, args.quant_report, method=args.method))
        return 0

    with open(args.program, "rb") as f:
        data = f.read()
    pte = deserialize_pte(data)
    program = pte.program
    print(f"program: {args.program} ({len(data)} bytes), schema version {program.version}")
    print("checksums: " + ("CRC-32 of the program data and of every segment, verified" if pte.checksums else
                           "none (not written by etc): a damaged weight would go unnoticed"))
    constant_bytes = sum(len(b) for b in getattr(pte, "constant_data", []) or [])
    print(f"constant data: {constant_bytes} bytes")
    for plan in program.execution_plan:
        print(f"\nmethod '{plan.name}'")
        for label, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
            for i in indices:
                t = plan.values[i].val
                sizes = getattr(t, "sizes", None)
                dtype = SCALAR_TYPE_NAMES.get(int(getattr(t, "scalar_type", -1)), "?")
                print(f"  {label[:-1]} value {i}: {dtype}{list(sizes) if sizes is not None else ''}")
        ops = sorted({f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators})
        print(f"  operators ({len(ops)}): {', '.join(ops)}")
        for d in plan.delegates:
            print(f"  delegate: backend '{d.id}'")
            for line in _delegate_report(pte, d):
                print(f"    {line}")
        sizes = list(plan.non_const_buffer_sizes)
        for mem_id, size in enumerate(sizes[1:], start=1):
            print(f"  planned memory mem_id {mem_id}: {size} bytes")
        n = sum(len(c.instructions) for c in plan.chains)
        print(f"  instructions: {n}")
    if args.plot:
        _plot(args, pte, data)
    return 0


def _plot(args, pte, data: bytes) -> None:
    """`--plot DIR`: the memory plan of every method, and the time per operator of `--method` over a few runs."""
    from etc.devtools.inspector import Inspector
    from etc.devtools.plots import plot_memory_plan, plot_time_breakdown
    from etc.runtime import Runtime

    os.makedirs(args.plot, exist_ok=True)
    stem = os.path.splitext(os.path.basename(args.program))[0]
    for plan in pte.program.execution_plan:
        if plan.non_const_buffer_sizes and len(plan.non_const_buffer_sizes) > 1:
            path = os.path.join(args.plot, f"{stem}.{plan.name}.memory.png")
            plot_memory_plan(pte, path, plan.name)
            print(f"wrote {path}")
    program = Runtime.get().load_program(data, enable_etdump=True)
    method = program.load_method(args.method)
    inputs = [_random_input(method.metadata.input_tensor_meta(i)) for i in range(method.metadata.num_inputs())]
    method.execute(inputs)
    program.run_record.clear()  # the warm-up run (first touch of the arenas, lazy linking) is not the steady state
    for _ in range(args.runs):
        method.execute(inputs)
    path = os.path.join(args.plot, f"{stem}.{args.method}.ops.png")
    plot_time_breakdown(Inspector(program.run_record, program=pte), path)
    print(f"wrote {path} (random inputs, {args.runs} run(s))")


def _delegate_report(pte, delegate) -> list[str]:
    """What a delegate's backend recorded about its code (cpu: the path of each heavy op)."""
    from etc.schema.program import DataLocation

    ref = delegate.processed
    if delegate.id != "cpu" or ref is None:
        return []
    data = pte.delegate_segments[ref.index] if ref.location == DataLocation.SEGMENT else \
        pte.program.backend_delegate_data[ref.index].data
    from etc.targets.cpu import blob
    from etc.targets.cpu.decisions import Decision, summarize

    try:
        metadata = blob.deserialize(bytes(data)).metadata
    except blob.BlobFormatError as e:
        return [f"(blob not readable: {e})"]
    lines = [f"{metadata.get('triple', '?')} ({metadata.get('cpu', '?')}), entry {metadata.get('entry_abi', 'flat')}, "
             f"scratch {metadata.get('scratch_bytes', 0)} bytes"]
    return lines + summarize([Decision.from_json(d) for d in metadata.get("decisions", [])])


# -------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="etc", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="export, lower and emit a .pte program")
    c.add_argument("model", help="<file.py>:<Model factory or class>, or a saved .pt2 ExportedProgram")
    c.add_argument("--example-inputs", nargs="*", help="input shapes, e.g. 1x3x32x32 int64:1x12")
    c.add_argument("--backend", choices=["portable", "cpu"], default="portable")
    c.add_argument("-o", "--output", help="the .pte to write")
    c.add_argument("--emit-library", metavar="DIR", help="also (or instead) write the program as a C library: "
                   "DIR/NAME.h, DIR/libNAME.a and the size report (compiles with the cpu backend)")
    c.add_argument("--name", help="--emit-library: the library's name, a C identifier (default: DIR's name)")
    c.add_argument("--target", default="host", help="the cpu backend's target: host, a preset (aarch64-linux-gnu, "
                   "cortex-m4, cortex-m7, cortex-m33, cortex-m55, x86-64-v3) or an LLVM triple")
    c.add_argument("--float-abi", choices=["hard", "softfp"], help="32-bit Arm: the float ABI of the firmware "
                   "the code links into (default: hard)")
    c.add_argument("--etrecord", help="also write the compile record (for etc profile and numeric debugging)")
    c.add_argument("--profile", action="store_true",
                   help="cpu delegates time their dispatch regions (etc profile shows them with source lines)")
    c.set_defaults(fn=cmd_compile)

    r = sub.add_parser("run", help="load a program and execute a method")
    r.add_argument("program")
    r.add_argument("--method", default="forward")
    r.add_argument("--inputs", nargs="*", help=".npy files, one per input (random inputs by default)")
    r.add_argument("--runs", type=int, default=10, help="timed runs after the first")
    r.add_argument("--selected-operators", metavar="YAML", help="run on a runtime restricted to this selective "
                                                                "build list, as the device build would be")
    r.add_argument("--verify", action="store_true", help="run every test case of a bundled program (.bpte) and "
                                                         "compare with its expected outputs (exit 1 on a mismatch)")
    r.add_argument("--rtol", type=float, default=1e-5, help="--verify: relative tolerance (ExecuTorch's default)")
    r.add_argument("--atol", type=float, default=1e-8, help="--verify: absolute tolerance (ExecuTorch's default)")
    r.set_defaults(fn=cmd_run)

    p = sub.add_parser("profile", help="time every instruction of a method (a table, top ops, a Chrome trace)")
    p.add_argument("program", help="a .pte, or a .bpte (run on its first test case's inputs)")
    p.add_argument("--method", default="forward")
    p.add_argument("--inputs", nargs="*", help=".npy files, one per input (random inputs by default)")
    p.add_argument("--runs", type=int, default=10, help="recorded runs")
    p.add_argument("--warmup", type=int, default=1, help="unrecorded runs first")
    p.add_argument("--etrecord", help="the compile record (to_executorch(generate_etrecord=True)): edge/aten "
                                      "ops and the ops inside each delegate")
    p.add_argument("--trace", help="write a Chrome trace (JSON) here")
    p.add_argument("--etdump", help="write the run record here")
    p.add_argument("--top", type=int, default=10, help="how many operators to list by time")
    p.set_defaults(fn=cmd_profile)

    s = sub.add_parser("selective-build", help="the kernels and backends a set of programs needs (a runtime "
                                               "built from the list refuses anything else)")
    s.add_argument("programs", nargs="+", help=".pte files")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_selective_build)

    i = sub.add_parser("inspect", help="methods, operators, delegates and planned memory of a program")
    i.add_argument("program")
    i.add_argument("--plot", metavar="DIR", help="write PNGs here: the memory plan of each method (tensor lifetimes "
                                                 "against offsets, per mem_id) and the time per operator")
    i.add_argument("--method", default="forward", help="--plot: the method to time; --quant-report: the method")
    i.add_argument("--quant-report", metavar="FLOAT_PT2",
                   help="PROGRAM is a quantized exported program (.pt2, torch.export.save): print per quantized op "
                        "the SQNR of etc's output against this float one and against the eager quantized model")
    i.add_argument("--runs", type=int, default=5, help="--plot: runs to time")
    i.set_defaults(fn=cmd_inspect)

    from etc.llm.cli import add_parser as add_generate  # etc generate (etc.llm)

    add_generate(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except EtcError as e:
        print(f"etc {args.command}: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"etc {args.command}: error: {e.strerror}: {e.filename}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
