"""The `cpu` target: edge ops -> torch-mlir -> linalg -> LLVM -> object code, run in-process.

    from etc.targets.cpu import CpuPartitioner
    edge = etc.to_edge(ep).to_backend(CpuPartitioner())                 # host CPU
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(target="aarch64-linux-gnu"))
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(target="cortex-m33"))  # thumbv8m.main, hard float
    edge.to_library("build/model", "model")      # the whole program as a C library (library.py)

Stages: `pipeline.py` (`cpu_pipeline`: the registered passes of `passes/` and upstream ones,
from the edge dialect through torch-mlir's torch dialect and linalg to the LLVM dialect, sizes
from the ISA table in `isa.py`; the libraries its passes build with are `lowering/`, edge ->
linalg, and `kernels/`, the tuned kernels), `codegen.py` (LLVM IR and llvmlite object
emission), `link.py` (the object -> a pre-linked image, `image.py`), `blob.py` (the delegate
blob format), `runtime.py` (the runtime backend: checks the CPU, maps the image, calls through
ctypes; `runtime/executorch_backend/` is the same for ExecuTorch), `library.py` (the whole
program as a C library). `decisions.py`: the path each contraction,
window op and reduction took, shown in the delegation report. `lowering/support.py` says what
the partitioner may delegate.

Compile specs (all strings): `target` (host | preset | LLVM triple), `cpu`,
`features`, `float_abi` (32-bit Arm: "hard", the presets' default, or "softfp"), `opt_level` (0-3),
`num_threads` (> 1: the threaded entry of parallel.py, run by up to that many of the runtime's
threads; the object still needs only libc/libm). At load the runtime times the delegate on one
thread and on `num_threads` and keeps the faster (waking a thread costs tens of microseconds: small
models stay on one); the runtime-side compile spec `calibrate_threads=0` turns that off. `profile` ("1"; `CpuPartitioner(profile=True)`): the code
reads a cycle counter between its dispatch regions (`passes/profile_regions.py`) and a recording
run (`enable_etdump=True`) shows each region's time and source lines; absent (the default), the
code is exactly the unprofiled one.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from etc.compiler.delegation import (IN_PLACE_OUTPUTS, BackendDetails, CapabilityPartitioner, CompileSpec,
                                     DelegationSpec, PartitionResult, PreprocessResult, Partition, group_cycle_free,
                                     public_functions, register_backend_details)
from etc.errors import EtcError

BACKEND_ID = "cpu"

__all__ = ["CpuPartitioner", "CpuBackend", "CpuQuantizer", "get_symmetric_quantization_config", "compile_function",
           "is_supported", "BACKEND_ID"]


def __getattr__(name: str):
    """`CpuQuantizer` and its config come from quantizer.py, loaded on first use: it needs
    torchao (the `quantization` extra), which the rest of the target does not."""
    if name in ("CpuQuantizer", "get_symmetric_quantization_config"):
        try:
            from etc.targets.cpu import quantizer
        except ImportError as error:
            raise EtcError(f"etc.targets.cpu.{name} needs torchao ({error}); install etc[quantization]") from None
        return getattr(quantizer, name)
    raise AttributeError(f"module 'etc.targets.cpu' has no attribute '{name}'")


def is_supported(op, target=None) -> tuple[bool, str]:
    """Can the cpu target take `op` when compiling for `target` (host by default)? (bool, reason)."""
    from etc.dialects import custom_ops
    from etc.targets.cpu.isa import resolve_target
    from etc.targets.cpu.lowering.support import is_supported as check

    if custom_ops.is_custom(op):  # left to the operator's own kernel; the delegates around it still run
        name = ir_string(op.operation.attributes["op"])
        return False, (f"custom operator {name}: the cpu target does not compile users' operators; it runs on "
                       "its registered kernel")
    return check(op, resolve_target(target))


def ir_string(attribute) -> str:
    from torch_mlir import ir

    return ir.StringAttr(attribute).value


def _spec_dict(compile_specs) -> dict:
    out = {}
    for s in compile_specs or []:
        value = s.value.decode() if isinstance(s.value, (bytes, bytearray)) else str(s.value)
        out[s.key] = value
    return out


def _derivable(derived: dict, used: dict) -> dict:
    """The recipes of `derived` (the lowering's, naming the weights it read) pointed at the constants
    the blob stores: a weight prepacked into panels is `<fqn>#packed<i>` (the nibble pairs
    [NB, K/8, 64], the scales [NB, G, 16]); of several packs, the ones the recipe computes the
    value from, bit for bit. A recipe no stored pair satisfies leaves its constant stored as bytes."""
    from types import SimpleNamespace

    from etc.targets.cpu.blob import DERIVATIONS

    def refuse(what: str, message: str):
        raise ValueError(message)

    out = {}
    for name, recipe in derived.items():
        if name not in used or recipe["op"] not in DERIVATIONS:
            continue
        compute, check = DERIVATIONS[recipe["op"]]
        table = {n: {"shape": list(a.shape), "dtype": a.dtype.name} for n, a in used.items()}
        packs = {key: [n for n in used if n == recipe[key] or n.startswith(f"{recipe[key]}#packed")]
                 for key in ("weight", "scales")}
        for weight in packs["weight"]:
            for scales in packs["scales"]:
                candidate = {"op": recipe["op"], "weight": weight, "scales": scales}
                try:
                    check(candidate, list(used[name].shape), table, refuse)
                except ValueError:
                    continue
                source = SimpleNamespace(constant=used.__getitem__)
                if compute(source, candidate, list(used[name].shape)).tobytes() == used[name].tobytes():
                    out[name] = candidate
                    break
            if name in out:
                break
    return out


def _threads_for(module, num_threads: int) -> int:
    """The threads a delegate is compiled for. A delegate holding a cond (`scf.if`) is compiled for
    one thread, recorded as a NOT TUNED decision at the cond's line: the compiler fuzzer found a
    cond whose false branch computes through an intermediate buffer, followed by an index_put,
    computing wrong values when its branches ran in the threaded entry (FUZZING.md, open defects).
    A slower delegate, said so, instead of a wrong answer."""
    if num_threads <= 1:
        return num_threads
    from torch_mlir import ir

    from etc.targets.cpu import decisions

    conds = []

    def visit(op):
        if op.name == "scf.if":
            conds.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in conds:
        decisions.record(op, "threads", "one-thread", f"a cond in the delegate runs on one thread, not "
                         f"{num_threads} (its threaded branches computed wrong: FUZZING.md)")
    return 1 if conds else num_threads


def compile_function(func_op, constants: dict, *, target=None, cpu: str | None = None, features: str | None = None,
                     opt_level: int = 3, num_threads: int = 1, keep_ir: bool = False, profile: bool = False,
                     float_abi: str | None = None):
    """An outlined edge function -> (blob bytes, debug info): the cpu pass pipeline from the edge
    dialect to the LLVM dialect, then LLVM to object code (`pipeline.compile_module`)."""
    from torch_mlir import ir

    from etc.targets.cpu import blob, decisions
    from etc.targets.cpu.entry_args import IN_PLACE_ATTR, entry_function
    from etc.targets.cpu.isa import resolve_target
    from etc.targets.cpu.lowering.context import import_for_lowering, program_of
    from etc.targets.cpu.lowering.quantized import read_derived
    from etc.targets.cpu.pipeline import blob_metadata, compile_module

    t0 = time.perf_counter()
    # (result k, argument j) pairs the delegate computes in place (`BackendDetails.in_place_state`)
    in_place = ([int(x) for x in ir.DenseI64ArrayAttr(func_op.attributes[IN_PLACE_OUTPUTS])]
                if IN_PLACE_OUTPUTS in func_op.attributes else [])
    context, module = import_for_lowering(func_op)
    if profile:  # the regions name the user's nodes: keep their locations through the lowering
        from etc.targets.cpu.passes.profile_regions import relocate_like

        relocate_like(func_op, entry_function(module.operation))
    with context, ir.Location.unknown():
        resolved = resolve_target(target, cpu=cpu, features=features, float_abi=float_abi)
        program = program_of(module, constants)  # the weights' data: the int8 lowering reads it, the blob stores it
        if in_place:
            module.operation.attributes[IN_PLACE_ATTR] = ir.DenseI64ArrayAttr.get(in_place)
        num_threads = _threads_for(module, int(num_threads))
        t1 = time.perf_counter()
        result = compile_module(module, resolved, opt_level=opt_level, keep_ir=keep_ir, threads=int(num_threads),
                                constants=program.constants, profile=profile)
        derived = read_derived(module.operation)
    metadata = blob_metadata(result, num_threads)
    if in_place:
        metadata["in_place"] = [[k, j] for k, j in zip(in_place[0::2], in_place[1::2])]
    if profile:  # each region's partition ops, indexed as the compile record lists them
        from etc.targets.cpu.passes.profile_regions import partition_op_indices

        index = partition_op_indices(func_op)
        for region in metadata["profile"]["regions"]:
            region["ops"] = sorted({index[n] for n in region["nodes"] if n in index})
    # The IR's type is the constant's shape: a scalar the edge program stores as [1] is a 0-d
    # tensor here (same bytes); the blob's constant table must agree with the ABI.
    used = {a.name: np.asarray(program.constants[a.name]).reshape(a.shape) for a in result.args
            if a.kind == "constant"}
    data = blob.serialize(metadata, result.object_bytes, used, _derivable(derived, used))
    from etc.targets.cpu.library import NativeCode

    debug = {"triple": resolved.triple, "cpu": resolved.cpu, "object_bytes": len(result.object_bytes),
             "constant_bytes": sum(getattr(v, "nbytes", 0) for v in used.values()),
             "scratch_bytes": result.scratch_bytes, "import_s": t1 - t0, **result.stats,
             "decisions": result.decisions, "decision_summary": decisions.summarize(result.decisions),
             "native": NativeCode.of(result, used, opt_level, metadata.get("in_place", []))}
    if keep_ir:
        debug["llvm_ir"] = result.llvm_ir
    return data, debug


class CpuBackend(BackendDetails):
    """Compile-time backend `cpu`: preprocess an outlined edge function into a cpu blob.

    `in_place_state`: a KV cache's update is computed in the cache's own memory (the program
    passes the buffer as both the input and the output: no copy back after every call). The code
    is correct so: the input is read only by the index_put, elementwise, each element before its
    own position is written (`compiler/delegation._mark_in_place_outputs` checks the first); the
    pair's buffers are not `llvm.noalias` (etc-cpu-entry-abi, etc-cpu-outline-regions) and the
    runtime lets them overlap (the blob's `in_place`)."""

    backend_id = BACKEND_ID
    in_place_state = True

    def preprocess(self, func_op, compile_specs: list, constants: dict) -> PreprocessResult:
        specs = _spec_dict(compile_specs)
        data, debug = compile_function(
            func_op, constants, target=specs.get("target") or None, cpu=specs.get("cpu") or None,
            features=specs.get("features"), float_abi=specs.get("float_abi"),
            opt_level=int(specs.get("opt_level", 3)), num_threads=int(specs.get("num_threads", 1)),
            keep_ir=specs.get("keep_ir") == "1", profile=specs.get("profile") == "1")
        return PreprocessResult(processed_bytes=data, debug_info=debug, report_lines=debug["decision_summary"],
                                native=debug.pop("native"))

    def emit_library(self, plans: list, directory: str, name: str, **options):
        """The program as a C library (library.py): NAME.h, libNAME.a, the size report."""
        from etc.targets.cpu.library import emit_library

        return emit_library(plans, directory, name, **options)


register_backend_details(CpuBackend())


class CpuPartitioner(CapabilityPartitioner):
    """Delegates every op the cpu target can lower for its target (`lowering/support.py`).

    Before partitioning, the program's quantized computations are folded into the
    `etc_quantized` ops that carry their scales (`pipeline`: etc-fold-quantized), which the
    target runs as int8. Whole-model mode: when every op of a method is supported, the method
    becomes one partition (one delegate call). Constant loads go with the partition that uses
    them (so their data moves into its blob) when a single partition does.
    """

    pipeline = "builtin.module(etc-fold-quantized)"

    def __init__(self, target: str | None = None, *, cpu: str | None = None, features: str | None = None,
                 opt_level: int = 3, num_threads: int = 1, profile: bool = False, float_abi: str | None = None,
                 compile_specs: list | None = None):
        specs = [CompileSpec("target", (target or "host").encode()), CompileSpec("opt_level", str(opt_level).encode()),
                 CompileSpec("num_threads", str(num_threads).encode())]
        if profile:  # only when on: an unprofiled program is byte for byte what it was without the option
            specs.append(CompileSpec("profile", b"1"))
        if cpu is not None:
            specs.append(CompileSpec("cpu", cpu.encode()))
        if features is not None:
            specs.append(CompileSpec("features", features.encode()))
        if float_abi is not None:
            specs.append(CompileSpec("float_abi", float_abi.encode()))
        specs += list(compile_specs or [])
        from etc.targets.cpu.isa import resolve_target

        given = _spec_dict(specs)  # the target preprocess compiles for: trials lower for the same one
        self.target = resolve_target(given.get("target") or None, cpu=given.get("cpu") or None,
                                     features=given.get("features"), float_abi=given.get("float_abi"))
        super().__init__(DelegationSpec(BACKEND_ID, specs), partial(is_supported, target=self.target))

    def partition(self, program_ir) -> PartitionResult:
        from etc.compiler.delegation import SIZE_OPS
        from etc.ir.ops import user_op
        from etc.targets.cpu.lowering.quantized import portable_reasons

        result = PartitionResult(partitions=[])
        for func in public_functions(program_ir.module):
            ops = [op.operation for op in func.regions[0].blocks[0].operations]
            body = [op for op in ops if op.name != "func.return"]
            loads = [op for op in body if op.name == "ml_program.global_load_const"]
            # Symbolic sizes are not work: a partition that reads one computes it again (outline).
            work = [op for op in body if op.name != "ml_program.global_load_const" and op.name not in SIZE_OPS]
            # What of a quantized computation the target cannot run as int8 stays on the portable
            # kernels, with the float ops reading it (they would dequantize weights on every call).
            quantized = portable_reasons(work)
            if work and not quantized and self._whole_method_lowers(func, work, program_ir, result.decisions):
                result.partitions.append(Partition(ops=body, spec=self.spec))  # whole-model mode
                continue
            support = {}
            for op in work:
                ok, reason = (False, quantized[op]) if op in quantized else self._check(op)
                support[op] = ok
                if not ok:
                    result.rejected.setdefault(op.name, reason)
            for op in work:  # a branch condition goes with its branch (a delegate takes tensors only)
                if op.name == "tensor.extract" and support[op]:
                    users = {user_op(u) for u in op.result.uses}
                    support[op] = all(support.get(u, False) for u in users)
            if work and all(support.values()):
                result.partitions.append(Partition(ops=body, spec=self.spec))  # whole-model mode
                continue
            # Size ops take part in the cycle check (a partition must not read a size computed
            # from its own result); they are never members.
            flow = [op for op in body if op.name != "ml_program.global_load_const"]
            groups = merge_independent(group_cycle_free(flow, lambda o: support.get(o, False)), body)
            member = {op: i for i, g in enumerate(groups) for op in g}
            extra = {i: [] for i in range(len(groups))}
            for load in loads:
                users = {user_op(u) for r in load.results for u in r.uses}
                parts = {member.get(u) for u in users}
                if len(parts) == 1 and None not in parts:
                    extra[parts.pop()].append(load)
            for i, g in enumerate(groups):
                result.partitions.append(Partition(ops=extra[i] + g, spec=self.spec))
        return result


    def _whole_method_lowers(self, func, work: list, program_ir, decisions: list) -> bool:
        """Fast path: when every op passes the structural check and the whole method lowers in one
        trial, skip the per-op trials (one lowering instead of one per op signature). An op failing
        the structural check is reported with its own reason by the per-op checks; a method whose
        trial fails is a report line (`decisions`) with the reason, then its ops are checked one by
        one."""
        from torch_mlir import ir

        from etc.dialects import custom_ops
        from etc.targets.cpu.lowering.support import structural_check, trial_function

        if any(custom_ops.is_custom(op) for op in work) or not all(structural_check(op)[0] for op in work):
            return False
        try:
            lowers, why = trial_function(func, getattr(program_ir, "constants", {}), self.target)
        except EtcError as error:
            lowers, why = False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        if not lowers:
            name = ir.StringAttr(func.attributes["sym_name"]).value
            decisions.append(f"method '{name}' did not lower whole in one trial ({why}): its ops were "
                             "checked one by one")
        return lowers


def merge_independent(groups: list, ops: list) -> list:
    """Merge partitions when no path between them leaves both (fewer delegate calls).

    `group_cycle_free` joins an op only to a producer's partition, so independent
    branches (x.exp() and x.tanh()) become separate calls; two partitions can be one
    call when no path from one to the other passes through anything else. Paths are
    taken over the graph where every other partition is ONE node (it runs as one call,
    after all its inputs): partition C fed by A (through one member) and feeding B
    (through another) orders A before C before B even when no single op path goes
    A -> ... -> B, so A and B cannot merge (the Llama export's attention: its K/V
    projections and the scores, interleaved with the cache writes left on portable).
    """
    groups = [list(g) for g in groups]
    order = {op: i for i, op in enumerate(ops)}
    merged = True
    while merged and len(groups) > 1:
        merged = False
        successors = _condensed_successors(groups, ops)
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if not _indirect_path(i, j, successors) and not _indirect_path(j, i, successors):
                    groups[i] = sorted(groups[i] + groups[j], key=lambda o: order.get(o, 0))
                    del groups[j]
                    merged = True
                    break
            if merged:
                break
    return groups


def _condensed_successors(groups: list, ops: list) -> dict:
    """Node -> the nodes that read it: a node is a partition (its index) or an op outside all."""
    from etc.ir.ops import defining_op

    node = {op: n for n, g in enumerate(groups) for op in g}
    successors: dict = {}
    for op in ops:
        target = node.get(op, op)
        for v in op.operands:
            producer = defining_op(v)
            if producer is None:
                continue
            source = node.get(producer, producer)
            if source != target:
                successors.setdefault(source, set()).add(target)
    return successors


def _indirect_path(a, b, successors: dict) -> bool:
    """A path a -> x -> ... -> b through at least one other node."""
    stack = [n for n in successors.get(a, ()) if n != b]
    seen = set(stack)
    while stack:
        n = stack.pop()
        for m in successors.get(n, ()):
            if m == b:
                return True
            if m not in seen and m != a:
                seen.add(m)
                stack.append(m)
    return False
