"""One random model checked end to end: exported, compiled for each target configuration, run at
several sizes within its bounds, every output compared with torch eager.

This file is the half of the compiler fuzzer (`model_fuzzer.py`) that runs in the worker child,
and it is copied verbatim into every reproduction script the fuzzer prints: it imports only
torch, numpy and etc, so a failure reproduces from that one script on any checkout.

A model is data (`spec`, a dict of JSON values) plus the Python source of its module:

    source    defines `class Model(torch.nn.Module)`; its methods other than `forward` are
              listed in `methods` (a program with several methods exports each separately)
    dtype     "float32", "bfloat16" (the module and its float inputs cast) or "int8" (PT2E with
              etc.targets.cpu.CpuQuantizer, calibrated on the example sizes: the converted
              module is the eager reference)
    dims      {name: [min, max]}: the torch.export Dims, shared by every input naming them
    methods   [{"name", "inputs": [{"shape", "dtype", "layout", "high"}], "outputs": [{"exact",
              "err"}]}]; a shape lists sizes as [const, [dim names]] (their product)
    calls     [{dim: size}]: the run-time sizes, in call order (the first is the export's
              example); a stateful model sees its own state across calls, on both sides
    seed      the inputs' seed

The tolerance of an output is derived from the ops that computed it (the generator's `err`, in
units of the dtype's roundoff, relative to the output's largest magnitude): `exact` outputs (data
movement, selection, integer math: every op's result representable) must be bit-identical.
"""

from __future__ import annotations

import copy
import traceback

import numpy as np
import torch

# Target configurations: name -> CpuPartitioner keyword arguments (None: portable kernels only).
# "cpu-2threads" turns the load-time calibration off, so both threads run even where one would
# be faster (which is every model this small).
CONFIGS = {
    "portable": None,
    "cpu": {},
    "cpu-2threads": {"num_threads": 2, "calibrate": False},
    "cpu-profile": {"profile": True},
    # The one-thread cpu compile as a C library (`to_library`), called from a C harness built with
    # the system cc (test/python/library_harness.py), where the model qualifies: float32 or int8
    # (a bf16 buffer is raw bits in C), every method one delegate call.
    "library": {},
}

# What `to_library` refuses by design (the model does not qualify): counted, not a failure.
LIBRARY_REFUSALS = ("every method must be one delegate call", "is not supported")

# The unit roundoff of each float dtype: an output's tolerance is err * UNIT * its magnitude.
UNIT = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "int8": 2.0 ** -24}


class Mismatch(Exception):
    """An output that is not what eager computes (the fuzzer's finding)."""


def size_value(size, env) -> int:
    const, names = size
    value = const
    for name in names:
        value *= env[name]
    return value


def _float_dtype(spec):
    return torch.bfloat16 if spec["dtype"] == "bfloat16" else torch.float32


def make_input(info, env, dtype, generator, *, layout=None):
    """One input at the sizes of `env`: random normal floats, or int64 in [0, high); laid out
    as `layout` says (the same values either way): "contiguous", "transposed" (made
    reversed and permuted back) or "strided" (every other element of a buffer twice as wide)."""
    shape = [size_value(s, env) for s in info["shape"]]
    layout = layout or info.get("layout", "contiguous")
    if info["dtype"] == "int64":
        make = lambda sizes: torch.randint(0, info["high"], sizes, generator=generator)  # noqa: E731
    elif info["dtype"] == "bool":
        make = lambda sizes: torch.rand(sizes, generator=generator) > 0.5  # noqa: E731
    else:
        make = lambda sizes: torch.randn(sizes, generator=generator).to(dtype)  # noqa: E731
    if layout == "transposed" and len(shape) >= 2:
        return make(shape[::-1]).permute(*reversed(range(len(shape))))
    if layout == "strided" and shape:
        return make(shape[:-1] + [2 * shape[-1]])[..., ::2]
    return make(shape)


def dynamic_shapes(spec, method):
    dims = {name: torch.export.Dim(name, min=lo, max=hi) for name, (lo, hi) in spec["dims"].items()}
    shapes = []
    for info in method["inputs"]:
        shapes.append({d: dims[names[0]] for d, (const, names) in enumerate(info["shape"]) if names} or None)
    return tuple(shapes)


def build(spec, model_class=None):
    """The eager module: the source executed (or `model_class`, a reproduction script's own
    class), seeded, in eval mode, cast to the dtype."""
    if model_class is None:
        import sys
        import types

        # A real module: torch.export's tracer of while_loop bodies imports the functions' module.
        module = types.ModuleType("fuzzed_model")
        sys.modules[module.__name__] = module
        exec(compile(spec["source"], "<fuzzed model>", "exec"), module.__dict__)  # noqa: S102
        model_class = module.Model
    torch.manual_seed(spec["seed"])
    model = model_class().eval()
    if spec["dtype"] == "bfloat16":
        model = model.to(torch.bfloat16)
    return model


def bound_method(model, name):
    """`model` with `forward` replaced by its method `name` (same parameters, same fully qualified
    names: the methods of one program share their weights)."""
    if name == "forward":
        return model
    cls = type(model)
    bound = copy.copy(model)
    bound.__class__ = type(f"{cls.__name__}_{name}", (cls,), {"forward": getattr(cls, name)})
    return bound


def call_inputs(spec, method, env, call_index, *, noncontiguous=True):
    generator = torch.Generator().manual_seed(spec["seed"] * 1000 + call_index)
    dtype = _float_dtype(spec)
    return [make_input(info, env, dtype, generator, layout=None if noncontiguous else "contiguous")
            for info in method["inputs"]]


def quantize(spec, method, module, example, shapes):
    """PT2E int8: `module` captured, prepared with CpuQuantizer, calibrated, converted."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from etc.targets.cpu import CpuQuantizer, get_symmetric_quantization_config

    captured = torch.export.export(module, tuple(example), dynamic_shapes=shapes).module()
    quantizer = CpuQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=spec.get("per_channel",
                                                                                                        True)))
    prepared = prepare_pt2e(captured, quantizer)
    with torch.no_grad():
        for k in range(3):
            prepared(*call_inputs(spec, method, spec["calls"][0], 100 + k, noncontiguous=False))
    return convert_pt2e(prepared)


def export_methods(spec, model):
    """{method: (eager callable, ExportedProgram)} at the first call's sizes."""
    out = {}
    for method in spec["methods"]:
        module = bound_method(model, method["name"])
        example = call_inputs(spec, method, spec["calls"][0], 0, noncontiguous=False)
        shapes = dynamic_shapes(spec, method)
        if spec["dtype"] == "int8":
            module = quantize(spec, method, module, example, shapes)
        ep = torch.export.export(module, tuple(example), dynamic_shapes=shapes)
        out[method["name"]] = (module, ep)
    return out


def eager_outputs(spec, modules):
    """{method: [outputs of each call]}: each method on its own copy of the module, as each
    method of a program has its own state."""
    out = {}
    for method in spec["methods"]:
        module = copy.deepcopy(modules[method["name"]][0])
        results = []
        with torch.no_grad():
            for k, env in enumerate(spec["calls"]):
                got = module(*call_inputs(spec, method, env, k))
                got = list(got) if isinstance(got, (tuple, list)) else [got]
                results.append([g.detach().clone() for g in got])
        out[method["name"]] = results
    return out


def to_edge(exported):
    import etc

    return etc.to_edge({name: ep for name, (_, ep) in exported.items()})


def copy_edge(edge):
    """A copy of the EdgeProgram `edge` in the same context (to_backend changes the program it is
    given; a copy per target configuration costs milliseconds, another to_edge a second)."""
    from torch_mlir import ir

    from etc.compiler.ir import ProgramIR
    from etc.compiler.program import EdgeProgram

    source = edge.program_ir
    module = ir.Module.parse(source.module.operation.get_asm(enable_debug_info=True), source.context)
    program_ir = ProgramIR(module, source.context, dict(source.constants), copy.deepcopy(source.signatures),
                           dict(source.constant_dtypes))
    return EdgeProgram(program_ir, exported_programs=edge.exported_programs, config=edge.config)


def compile_program(edge, config):
    """The .pte bytes of the program for one target configuration, and its delegation report."""
    from etc.compiler.delegation import CompileSpec
    from etc.targets.cpu import CpuPartitioner

    edge = copy_edge(edge)
    options = CONFIGS[config]
    if options is not None:
        options = dict(options)
        specs = [] if options.pop("calibrate", True) else [CompileSpec("calibrate_threads", b"0")]
        edge = edge.to_backend(CpuPartitioner(compile_specs=specs, **options))
    return edge.to_executorch().buffer, edge.delegation_info()


def quantization_steps(module) -> float:
    """What int8 may change in an output of a converted (PT2E) module: one step of the coarsest
    quantizer per quantize op on the way (etc's int8 kernels requantize with one f32 fma where the
    reference rounds a float product: an element may land one step off at a rounding tie), 0 for
    a float module."""
    steps = [float(node.args[1]) for node in getattr(module, "graph", None).nodes
             if node.op == "call_function" and "quantize_per_tensor" in str(node.target)
             and "dequantize" not in str(node.target)] if hasattr(module, "graph") else []
    return 2.0 * len(steps) * max(steps) if steps else 0.0


def tolerance(spec, output, want, allowance=0.0):
    """Absolute tolerance of one output: 0 where exact, else err units of roundoff at its scale
    (at least 1: the units are of O(1) values), plus `allowance` (quantization steps)."""
    if output["exact"] and not allowance:
        return 0.0
    scale = float(want.abs().max()) if want.numel() else 0.0
    rounding = 0.0 if output["exact"] else max(output["err"], 1.0) * UNIT[spec["dtype"]] * max(scale, 1.0)
    return rounding + allowance * max(scale, 1.0)


def compare(spec, method, call, got, want, allowance=0.0):
    """Raise Mismatch naming the first output that differs beyond its tolerance."""
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} outputs, eager has {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        g = torch.as_tensor(g)
        where = f"method {method['name']!r} call {call} output {i}"
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            raise Mismatch(f"{where}: {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}")
        if w.dtype in (torch.bool, torch.int64, torch.int32, torch.int8, torch.uint8):
            if not torch.equal(g, w):
                bad = int((g != w).sum())
                raise Mismatch(f"{where}: {bad} of {w.numel()} integer elements differ")
            continue
        g64, w64 = g.double(), w.double()
        finite = torch.isfinite(w64)
        if not torch.equal(torch.isfinite(g64), finite) or not torch.equal(g64[~finite].nan_to_num(),
                                                                          w64[~finite].nan_to_num()):
            raise Mismatch(f"{where}: non-finite values differ ({int((~torch.isfinite(g64)).sum())} in etc, "
                           f"{int((~finite).sum())} in eager)")
        output = method["outputs"][i]
        tol = tolerance(spec, output, w64[finite], allowance)
        diff = (g64 - w64)[finite].abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        if allowance and diff.numel():
            # int8: a step off here and there (rounding ties), never most of the tensor off.
            strict = tolerance(spec, output, w64[finite])
            off = int((diff > strict).sum())
            if off > max(2, diff.numel() // 20):
                raise Mismatch(f"{where}: {off} of {diff.numel()} elements differ from eager beyond {strict:.3g} "
                               f"(int8: a few at rounding ties, never more than 5%); max {worst:.4g}")
        if worst > tol:
            at = int(diff.argmax())
            kind = ("bit-exact expected" if tol == 0 else
                    f"tolerance {tol:.3g} ({output['err']:g} units" + (f", {allowance:.3g} for int8)" if allowance else ")"))
            raise Mismatch(f"{where}: max |etc - eager| = {worst:.4g} at flat index {at} "
                           f"(etc {float(g64[finite][at]):.6g}, eager {float(w64[finite][at]):.6g}); {kind}")


def check_library(spec, edge, reference, allowances, directory):
    """Build the program as a C library in `directory`, call each method from a C harness (every buffer
    at the edge of a guard page, in turn) on each call's inputs and compare with eager there; raise
    Mismatch if an output differs or the harness dies. Returns "ran", or why the model does not
    qualify (then nothing ran)."""
    import os
    import subprocess
    import sys

    import etc
    from etc.errors import LoweringError
    from etc.targets.cpu import CpuPartitioner, firmware

    if spec["dtype"] == "bfloat16":
        return "not applicable: bfloat16 (its C buffers are raw bits; the harness compares numbers)"
    sys.path.insert(0, os.path.join(os.path.dirname(etc.__file__), "test", "python"))
    from library_harness import Case, harness_source

    edge = copy_edge(edge).to_backend(CpuPartitioner())
    try:
        library = edge.to_library(os.path.join(directory, "lib"), "fuzzed", verbose=False)
    except LoweringError as refusal:
        if any(phrase in str(refusal) for phrase in LIBRARY_REFUSALS):
            return "refused: " + str(refusal).splitlines()[0][:200]
        raise
    cases = []
    for method in spec["methods"]:
        steps, tolerances = [], []
        for k, env in enumerate(spec["calls"]):
            inputs = [np.ascontiguousarray(x.numpy()) for x in call_inputs(spec, method, env, k)]
            want = reference[method["name"]][k]
            steps.append((inputs, [w.numpy() for w in want]))
            tolerances.append([tolerance(spec, out, w.double()[torch.isfinite(w.double())], allowances[method["name"]])
                               if w.is_floating_point() else 0.0 for out, w in zip(method["outputs"], want)])
        cases.append(Case(library, method["name"], steps, tolerances=tolerances, label=f"method {method['name']}"))
    source = os.path.join(directory, "harness.c")
    with open(source, "w") as f:
        f.write(harness_source(cases, mode="guard"))
    binary = os.path.join(directory, "harness")
    built = subprocess.run([firmware.require_tool("cc"), "-O1", "-std=c11", "-D_DEFAULT_SOURCE", "-DETC_GUARD",
                            f"-I{library.directory}", source, library.archive, "-lm", "-o", binary],
                           capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        raise RuntimeError(f"the C harness does not build:\n{built.stderr[-3000:]}")
    done = subprocess.run([binary], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or "PASSED 0" not in done.stdout:
        how = f"exit {done.returncode}" if done.returncode >= 0 else f"signal {-done.returncode}"
        raise Mismatch(f"the library's C harness failed ({how}): {done.stdout[-2000:]}{done.stderr[-1000:]}")
    return "ran"


def run_program(spec, data, config, reference, allowances):
    from etc.runtime import Runtime

    program = Runtime.get().load_program(data, enable_etdump=config == "cpu-profile")
    for method in spec["methods"]:
        loaded = program.load_method(method["name"])
        for k, env in enumerate(spec["calls"]):
            got = loaded.execute(call_inputs(spec, method, env, k))
            compare(spec, method, k, got, reference[method["name"]][k], allowances[method["name"]])


def check(spec, configs=tuple(CONFIGS), progress=None, model_class=None):
    """{"status": "ok" | "mismatch" | "error" | "invalid", "config", "stage", "detail", "report"}.

    "invalid": torch itself refused the model (export or eager): the generator's fault.
    "error": etc raised while compiling or running it. "mismatch": it computed something else."""
    progress = progress or (lambda stage: None)
    stage, config = "build", None
    try:
        model = build(spec, model_class)
        stage = "export"
        progress(stage)
        exported = export_methods(spec, model)
        stage = "eager"
        reference = eager_outputs(spec, exported)
        allowances = {name: quantization_steps(module) for name, (module, _) in exported.items()}
    except Exception:  # noqa: BLE001  (torch refused the generated model: the generator's fault)
        return {"status": "invalid", "stage": stage, "config": None, "detail": traceback.format_exc(limit=-8)}
    reports = {}
    try:
        stage = "to_edge"
        progress(stage)
        edge = to_edge(exported)
    except Exception as error:  # noqa: BLE001
        return {"status": "error", "stage": stage, "config": None,
                "detail": f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=-8)}"}
    for config in configs:
        try:
            stage = "compile"
            progress(f"{stage} {config}")
            if config == "library":
                import tempfile

                with tempfile.TemporaryDirectory() as directory:
                    reports[config] = check_library(spec, edge, reference, allowances, directory)
                continue
            data, reports[config] = compile_program(edge, config)
            stage = "run"
            progress(f"{stage} {config}")
            run_program(spec, data, config, reference, allowances)
        except Mismatch as mismatch:
            return {"status": "mismatch", "stage": stage, "config": config, "detail": str(mismatch),
                    "report": reports.get(config, "")}
        except Exception as error:  # noqa: BLE001  (an EtcError or worse: either way a finding)
            return {"status": "error", "stage": stage, "config": config,
                    "detail": f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=-8)}",
                    "report": reports.get(config, "")}
    return {"status": "ok", "stage": "done", "config": None, "detail": "", "reports": reports}
