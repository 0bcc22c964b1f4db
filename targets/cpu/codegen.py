"""linalg-on-tensors -> object code for one CPU (the back half of the `cpu` target).

    fuse elementwise ops, canonicalize
    f32 exp -> vectorizable arithmetic (fastmath.py)
    apply_codegen_strategy(module, target)     # hook: tiling/packing/vectorization (kernels_strategy.py);
        default: generalize, move reductions outside the unit-stride output loop,
        reassociate innermost reductions
    one-shot-bufferize (function boundaries, identity layouts, arguments read-only)
    buffer-results-to-out-params (static result buffers hoisted: results are written in place)
    scratch planning: every remaining static `memref.alloc` becomes its own argument, passed
        by the entry as `scratch + offset` (the object never calls malloc; the runtime owns the memory)
    linalg -> loops (or parallel loops split per thread, parallel.py) -> cf -> LLVM dialect -> LLVM IR
    + the entry `void <entry>(void **args)` (args in `ArgSpec` order)
    llvmlite: O3 for the target machine, object file (ELF for the triples we test)

ABI: the entry takes one array of data pointers, in this order: inputs, constants,
outputs, then (when `scratch_bytes > 0`) the scratch buffer. All shapes are static
and every buffer is dense row-major, so a data pointer is all the code needs (MLIR's
bare-pointer memref calling convention); the pointers are `noalias` (the runtime
never passes overlapping buffers), which lets LLVM vectorize without alias checks.
The object references libc/libm symbols only (`ALLOWED_EXTERNALS`, checked before
emission: math functions, memcpy/memset, sched_yield for the threaded barrier).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError

# ------------------------------------------------------------------ targets


@dataclass(frozen=True)
class CpuTarget:
    """What to generate code for: an LLVM triple, a CPU name and feature string."""

    triple: str
    cpu: str = "generic"
    features: str = ""  # "+avx2,+fma" (LLVM syntax)
    name: str = ""

    @property
    def pointer_bits(self) -> int:
        arch = self.triple.split("-", 1)[0]
        return 32 if arch.startswith(("thumb", "arm", "riscv32", "i386", "i686")) else 64

    @property
    def required_features(self) -> list[str]:
        """The '+feature' entries: what a CPU must have to run this code."""
        return [f[1:] for f in self.features.split(",") if f.startswith("+")]


def host_target() -> CpuTarget:
    import llvmlite.binding as llvm

    _init_llvm()
    features = llvm.get_host_cpu_features().flatten()
    return CpuTarget(triple=llvm.get_process_triple(), cpu=llvm.get_host_cpu_name(), features=features, name="host")


PRESETS = {
    "aarch64": CpuTarget("aarch64-unknown-linux-gnu", "cortex-a76", "+neon,+fp-armv8", "aarch64"),
    "aarch64-linux-gnu": CpuTarget("aarch64-linux-gnu", "generic", "+neon", "aarch64-linux-gnu"),
    "cortex-m7": CpuTarget("thumbv7em-none-eabihf", "cortex-m7", "", "cortex-m7"),
    "x86-64-v3": CpuTarget("x86_64-unknown-linux-gnu", "haswell", "+avx2,+fma,+f16c", "x86-64-v3"),
}


def resolve_target(spec: str | CpuTarget | None = None, *, cpu: str | None = None,
                   features: str | None = None) -> CpuTarget:
    """'host' (default), a preset name, a CpuTarget, or an LLVM triple (with optional cpu/features)."""
    if isinstance(spec, CpuTarget):
        target = spec
    elif spec in (None, "", "host"):
        target = host_target()
    elif spec in PRESETS:
        target = PRESETS[spec]
    else:
        target = CpuTarget(triple=spec, cpu="generic", features="", name=spec)
    if cpu is not None or features is not None:
        target = CpuTarget(target.triple, cpu or target.cpu, target.features if features is None else features,
                           target.name)
    return target


_LLVM_READY = False


def _init_llvm() -> None:
    global _LLVM_READY
    if not _LLVM_READY:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _LLVM_READY = True


# --------------------------------------------------------------- arguments
@dataclass
class ArgSpec:
    kind: str  # input | constant | output | scratch
    dtype: str  # numpy dtype name
    shape: tuple
    name: str = ""  # constant fqn; input/output index as text

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict:
        return {"kind": self.kind, "dtype": self.dtype, "rank": len(self.shape), "shape": list(self.shape),
                "name": self.name}

    @staticmethod
    def from_json(d: dict) -> "ArgSpec":
        return ArgSpec(d["kind"], d["dtype"], tuple(d["shape"]), d.get("name", ""))


_NUMPY_OF_ELEMENT = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "uint16", "i64": "int64",
                     "i32": "int32", "i16": "int16", "i8": "int8", "ui8": "uint8", "i1": "bool"}


def numpy_dtype_of(element_type) -> str:
    text = str(element_type)
    if text not in _NUMPY_OF_ELEMENT:
        raise LoweringError(f"element type {text} has no buffer form on the cpu target")
    return _NUMPY_OF_ELEMENT[text]


# ----------------------------------------------------------------- strategy
def default_codegen_strategy(module: ir.Module, target: CpuTarget) -> None:
    """The default: generalize named ops and put each reduction's loops outside the innermost
    parallel loop when that loop walks the output and an input contiguously (matmul i,j,k -> i,k,j;
    convolutions with the output column innermost), so that LLVM's loop vectorizer, at O3, gets
    unit-stride loops without a floating-point reduction to reassociate. (After bufferization,
    elementwise generics also merge their loops: see `lower_to_llvm_dialect`.)"""
    run_passes(module, "builtin.module(func.func(linalg-generalize-named-ops))", "generalizing named linalg ops")
    interchange_reductions_outward(module)
    allow_reduction_reassociation(module)


REASSOCIABLE = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf")


def allow_reduction_reassociation(module: ir.Module) -> int:
    """Mark the float arithmetic of reductions over the innermost loop `reassoc contract`, so that
    LLVM may vectorize the sum (split into lanes) and fuse multiply-adds, as BLAS and torch do.
    (Not for loop nests whose innermost loop is parallel: there the vectorizer already has
    its loop, and reassociation let it pick worse ones: a 64-channel conv ran 6x slower.)
    Changes results in the last bits only; elementwise code keeps strict IEEE semantics."""
    changed = 0
    with module.context:
        flags = ir.Attribute.parse("#arith.fastmath<reassoc,contract>")
        generics = []

        def collect(op):
            if op.name == "linalg.generic" and _iterator_kinds(op)[-1:] == ["reduction"]:
                generics.append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(collect)
        for g in generics:
            for inner in g.regions[0].blocks[0].operations:
                if inner.operation.name in REASSOCIABLE:
                    inner.operation.attributes["fastmath"] = flags
                    changed += 1
    return changed


def interchange_reductions_outward(module: ir.Module) -> int:
    """Permute loops of `linalg.generic` ops as described in `default_codegen_strategy`; returns how many."""
    generics = []

    def collect(op):
        if op.name == "linalg.generic":
            generics.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    changed = 0
    with module.context:
        for op in generics:
            perm = _reduction_outward_permutation(op)
            if perm is not None:
                _interchange(op, perm)
                changed += 1
    return changed


def _iterator_kinds(op) -> list[str]:
    kinds = []
    for a in ir.ArrayAttr(op.attributes["iterator_types"]):
        m = re.search(r"parallel|reduction|window", str(a))
        kinds.append(m.group(0) if m else str(a))
    return kinds


def _reduction_outward_permutation(op):
    kinds = _iterator_kinds(op)
    if "reduction" not in kinds or any(k not in ("parallel", "reduction") for k in kinds):
        return None
    uses_index = []

    def find_index(inner):
        if inner.name == "linalg.index":
            uses_index.append(inner)
        return ir.WalkResult.ADVANCE

    op.walk(find_index)
    if uses_index:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n_outputs = len(op.results) if len(op.results) else _count_outputs(op)
    out_map = maps[-1]
    if len(out_map.results) == 0 or n_outputs != 1:
        return None
    last = out_map.results[-1]
    if not isinstance(last, ir.AffineDimExpr):
        return None
    inner = ir.AffineDimExpr(last).position
    if kinds[inner] != "parallel":
        return None
    if not any(len(m.results) and f"d{inner}" in _dims_of(m.results[-1]) for m in maps[:-1]):
        return None
    parallel = [d for d, k in enumerate(kinds) if k == "parallel" and d != inner]
    reductions = [d for d, k in enumerate(kinds) if k == "reduction"]
    perm = parallel + reductions + [inner]
    return None if perm == list(range(len(kinds))) else perm


def _count_outputs(op) -> int:
    sizes = op.attributes["operandSegmentSizes"] if "operandSegmentSizes" in op.attributes else None
    return list(ir.DenseI32ArrayAttr(sizes))[1] if sizes is not None else 1


def _dims_of(expr) -> set:
    return set(re.findall(r"d\d+", str(expr)))


def _interchange(op, perm: list[int]) -> None:
    """New loop p iterates old dim perm[p]: every map becomes map o (d' -> d'[inverse])."""
    n = len(perm)
    inverse = [0] * n
    for p, d in enumerate(perm):
        inverse[d] = p
    substitution = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(inverse[i]) for i in range(n)])
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    new_maps = [ir.AffineMap.get(n, m.n_symbols, [e.compose(substitution) for e in m.results]) for m in maps]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    iterators = list(ir.ArrayAttr(op.attributes["iterator_types"]))
    op.attributes["iterator_types"] = ir.ArrayAttr.get([iterators[d] for d in perm])
    if "linalg.memoized_indexing_maps" in op.attributes:  # the named op's maps, stale now
        del op.attributes["linalg.memoized_indexing_maps"]


_STRATEGY = None


def set_codegen_strategy(fn) -> None:
    """Install `fn(module, target)` (run on linalg-on-tensors, after fusion, before bufferization)."""
    global _STRATEGY
    _STRATEGY = fn


def apply_codegen_strategy(module: ir.Module, target: CpuTarget) -> None:
    """The hook for matmul/conv strategies: `targets/cpu/kernels_strategy.py` may provide
    `apply_codegen_strategy(module, target)`; otherwise the default."""
    fn = _STRATEGY
    if fn is None:
        try:
            from etc.targets.cpu import kernels_strategy  # noqa: F401 - optional, another engineer's module
            fn = getattr(kernels_strategy, "apply_codegen_strategy", None)
        except ImportError:
            fn = None
    (fn or default_codegen_strategy)(module, target)


# ------------------------------------------------------------------ pipeline
def run_passes(module: ir.Module, pipeline: str, what: str) -> None:
    from torch_mlir.passmanager import PassManager

    try:
        pm = PassManager.parse(pipeline, context=module.context)
        pm.run(module.operation)
    except Exception as e:  # noqa: BLE001
        raise LoweringError(f"cpu codegen: {what} failed: {e}") from None


FUSION = "builtin.module(func.func(linalg-fuse-elementwise-ops, canonicalize, cse))"
BUFFERIZE = ("builtin.module(one-shot-bufferize{bufferize-function-boundaries "
             "function-boundary-type-conversion=identity-layout-map}, "
             "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}, canonicalize, cse)")


def _to_llvm(index_bits: int, loops: str = "convert-linalg-to-loops") -> str:
    ib = f"index-bitwidth={index_bits}"
    # Vector ops (the kernels strategy's register tiles) lower before scf/cf: VECTOR_LOWERING of
    # kernels_strategy.py, which checks for convert-vector-to-llvm here before it vectorizes.
    return (f"builtin.module(func.func({loops}), lower-affine, "
            "func.func(convert-vector-to-scf{full-unroll=true}, lower-affine), convert-vector-to-llvm, "
            "canonicalize, convert-scf-to-cf, "
            f"expand-strided-metadata, lower-affine, convert-math-to-llvm, convert-math-to-libm, "
            f"finalize-memref-to-llvm{{{ib}}}, convert-arith-to-llvm{{{ib}}}, convert-cf-to-llvm{{{ib}}}, "
            f"convert-func-to-llvm{{{ib} use-bare-ptr-memref-call-conv=1}}, convert-ub-to-llvm, reconcile-unrealized-casts, canonicalize)")


@dataclass
class CodegenResult:
    object_bytes: bytes
    entry: str
    args: list  # of ArgSpec, entry order
    target: CpuTarget
    scratch_bytes: int = 0
    llvm_ir: str = ""
    threaded: bool = False  # entry(args, tid, nthreads, barrier) rather than entry(args)
    stats: dict = field(default_factory=dict)


def _single_func(module: ir.Module):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise LoweringError(f"cpu codegen expects one function, got {len(funcs)}")
    return funcs[0]


def bufferize(module: ir.Module) -> None:
    """Tensors -> memrefs; inputs and constants read-only, results become trailing out-params."""
    fn = _single_func(module)
    with module.context:
        n = len(fn.regions[0].blocks[0].arguments)
        ro = ir.DictAttr.get({"bufferization.writable": ir.BoolAttr.get(False)})
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([ro] * n)
    run_passes(module, BUFFERIZE, "bufferization")


def _strategy_cleanups(module: ir.Module) -> None:
    """After bufferization, the kernels strategy's clean-ups (self copies left by tiled
    insert_slices; result copies that should have been hoisted), when that module is present."""
    try:
        from etc.targets.cpu import kernels_strategy
    except ImportError:
        return
    for name in ("remove_self_copies", "forward_result_copies"):
        fn = getattr(kernels_strategy, name, None)
        if fn is not None:
            with module.context, ir.Location.unknown():
                fn(module)


def plan_scratch(module: ir.Module, alignment: int = 64) -> list[int]:
    """Replace each static `memref.alloc` by a new trailing function argument; returns their byte
    offsets inside one scratch buffer (the entry wrapper passes `scratch + offset` for each).

    One argument per buffer, rather than views of one scratch argument, keeps every buffer a
    distinct `noalias` pointer for LLVM: with views of a shared base it could not prove that a
    store into one buffer leaves another unchanged, and kept per-row statistics (layer norm's
    mean and rstd) inside the innermost loop, scalar. No lifetime reuse yet (that would break
    `noalias`): the offsets add up. The last entry of the list is the total size.
    """
    fn = _single_func(module)
    allocs = []

    def collect(op):
        if op.name == "memref.alloc":
            allocs.append(op)
        return ir.WalkResult.ADVANCE

    fn.operation.walk(collect)
    if not allocs:
        return []
    offsets = []
    total = 0
    for op in allocs:
        t = ir.MemRefType(op.result.type)
        if not t.has_static_shape or list(op.operands):
            raise LoweringError("cpu codegen: a dynamically sized intermediate buffer is not supported")
        if isinstance(t.layout, ir.AffineMapAttr) and t.layout.value != ir.AffineMap.get_identity(t.rank):
            raise LoweringError(f"cpu codegen: intermediate buffer with layout {t.layout}")
        nbytes = int(np.prod(t.shape, dtype=np.int64)) * _element_bytes(t.element_type)
        total = (total + alignment - 1) // alignment * alignment
        offsets.append(total)
        total += max(nbytes, 1)
    total = (total + alignment - 1) // alignment * alignment
    with module.context, ir.Location.unknown():
        block = fn.regions[0].blocks[0]
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        new_inputs = list(ftype.inputs)
        for op in allocs:
            arg = block.add_argument(op.result.type, ir.Location.unknown())
            new_inputs.append(op.result.type)
            op.result.replace_all_uses_with(arg)
            op.erase()
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(new_inputs, list(ftype.results)))
    deallocs = []

    def collect_dealloc(op):
        if op.name == "memref.dealloc":
            deallocs.append(op)
        return ir.WalkResult.ADVANCE

    fn.operation.walk(collect_dealloc)
    for op in deallocs:
        op.erase()
    return offsets + [total]


def mark_noalias(fn) -> None:
    """Every entry buffer is distinct from every other one the code writes (the runtime guarantees it:
    outputs and scratch never overlap inputs), so LLVM may vectorize without runtime alias checks."""
    with fn.context:
        n = len(fn.regions[0].blocks[0].arguments)
        attr = ir.DictAttr.get({"llvm.noalias": ir.UnitAttr.get()})
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([attr] * n)


def copies_to_linalg(module: ir.Module) -> int:
    """`memref.copy` -> `linalg.copy`: with strided operands the LLVM lowering of memref.copy calls
    MLIR's C runtime (`memrefCopy`), which the object must not depend on; linalg.copy becomes loops."""
    from torch_mlir.dialects import linalg

    copies = []

    def collect(op):
        if op.name == "memref.copy":
            copies.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    with module.context:
        for op in copies:
            with ir.InsertionPoint(op), op.location:
                linalg.copy(op.operands[0], outs=[op.operands[1]])
            op.erase()
    return len(copies)


def _element_bytes(element_type) -> int:
    text = str(element_type)
    if text == "i1":
        return 1
    width = element_type.width if isinstance(element_type, ir.IntegerType) else \
        {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[text]
    return max(1, width // 8)


def _memref_shapes(fn) -> list:
    return [ir.MemRefType(a.type) for a in fn.regions[0].blocks[0].arguments]


def entry_wrapper(inner: str, entry: str, n_slots: int, scratch_offsets: list, index_bits: int, *,
                  threaded: bool = False) -> str:
    """LLVM IR of `void entry(ptr args)`: loads each data pointer and calls the inner function,
    which takes bare pointers (static shapes: MLIR's bare-pointer memref calling convention);
    the last slot, when there are scratch buffers, is the scratch base, and each intermediate
    buffer is passed as `scratch + offset`."""
    ix = f"i{index_bits}"
    if threaded:
        lines = [f"define void @{entry}(ptr %args, {ix} %tid, {ix} %nthreads, ptr %barrier) {{"]
    else:
        lines = [f"define void @{entry}(ptr %args) {{"]
    call_args = []
    loads = n_slots + (1 if scratch_offsets else 0)
    for i in range(loads):
        lines.append(f"  %slot{i} = getelementptr inbounds ptr, ptr %args, {ix} {i}")
        lines.append(f"  %p{i} = load ptr, ptr %slot{i}, align {index_bits // 8}")
    call_args = [f"ptr %p{i}" for i in range(n_slots)]
    for k, offset in enumerate(scratch_offsets):
        lines.append(f"  %s{k} = getelementptr inbounds i8, ptr %p{n_slots}, {ix} {offset}")
        call_args.append(f"ptr %s{k}")
    if threaded:
        call_args += ["ptr %barrier", f"{ix} %tid", f"{ix} %nthreads"]
    lines.append(f"  call void @{inner}({', '.join(call_args)})")
    lines.append("  ret void")
    lines.append("}")
    return "\n".join(lines) + "\n"


def compile_linalg(module: ir.Module, arg_kinds: list, target: CpuTarget | str | None = None, *,
                   entry: str = "etc_cpu_entry", opt_level: int = 3, keep_ir: bool = False,
                   threaded: bool = False, unroll: bool = True, strategy: str = "hook",
                   constants: dict | None = None) -> CodegenResult:
    """linalg-on-tensors module (one func) -> object code.

    `arg_kinds`: (kind, name) for each function argument (input/constant); results become outputs.
    `constants`: the constant arguments' data, to pre-pack weights at compile time (the result's
    constant args may then name packed arrays this call added to `constants`).
    """
    target = resolve_target(target)
    inner = ir.StringAttr(_single_func(module).attributes["sym_name"]).value
    args, n_slots, offsets, index_bits = lower_to_llvm_dialect(module, arg_kinds, target, threaded=threaded,
                                                                 strategy=strategy, constants=constants)
    scratch = offsets[-1] if offsets else 0
    from torch_mlir.dialects import llvm as llvm_d

    from etc.targets.cpu.parallel import BARRIER_FN, barrier_llvm_ir

    llvm_ir = _strip_header(llvm_d.translate_module_to_llvmir(module.operation))
    if threaded:
        llvm_ir = "\n".join(line for line in llvm_ir.splitlines()
                            if not (line.startswith("declare") and f"@{BARRIER_FN}(" in line)) + "\n"
        llvm_ir += barrier_llvm_ir(index_bits)
    llvm_ir += entry_wrapper(inner, entry, n_slots, offsets[:-1], index_bits, threaded=threaded)
    obj, optimized = emit_object(llvm_ir, target, opt_level=opt_level, internalize=[inner], unroll=unroll)
    return CodegenResult(object_bytes=obj, entry=entry, args=args, target=target, scratch_bytes=scratch,
                         llvm_ir=optimized if keep_ir else "", threaded=threaded)


def lower_to_llvm_dialect(module: ir.Module, arg_kinds: list, target: CpuTarget, *, threaded: bool = False,
                          strategy: str = "hook", constants: dict | None = None):
    """The MLIR half of `compile_linalg`: returns (ArgSpecs, number of non-scratch buffers,
    scratch offsets + [total scratch bytes] (empty: none), index bits).

    With `constants` (fqn -> array for the "constant" arguments), layout chains on them are
    evaluated now (prepack.py): the packed arrays are added to `constants` under new names."""
    fn = _single_func(module)
    run_passes(module, FUSION, "elementwise fusion")
    from etc.targets.cpu.fastmath import expand_exp

    expand_exp(module)
    if strategy == "default":  # support trials, and the fallback when the hook's strategy fails
        default_codegen_strategy(module, target)
    else:
        apply_codegen_strategy(module, target)
    if constants is not None:
        from etc.targets.cpu.prepack import fold_constant_arguments

        arg_kinds = fold_constant_arguments(module, arg_kinds, constants)
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    args = []
    for (kind, name), t in zip(arg_kinds, ftype.inputs):
        rt = ir.RankedTensorType(t)
        args.append(ArgSpec(kind, numpy_dtype_of(rt.element_type), tuple(rt.shape), str(name)))
    for i, t in enumerate(ftype.results):
        rt = ir.RankedTensorType(t)
        args.append(ArgSpec("output", numpy_dtype_of(rt.element_type), tuple(rt.shape), str(i)))
    bufferize(module)
    _strategy_cleanups(module)
    # Elementwise loops over views of the planned buffers: merge the loops every operand walks
    # contiguously, or LLVM unrolls a short innermost loop and vectorizes the next with gathers.
    from etc.passes.collapse_elementwise_dims import collapse_elementwise_dims

    collapse_elementwise_dims(module.operation, None)
    offsets = plan_scratch(module)
    mark_noalias(fn)
    memrefs = _memref_shapes(fn)
    n_slots = len(args)
    if len(memrefs) != n_slots + max(0, len(offsets) - 1):
        raise LoweringError(f"cpu codegen: entry has {len(memrefs)} buffers, expected {n_slots} and "
                            f"{max(0, len(offsets) - 1)} scratch buffers")
    if offsets:
        args.append(ArgSpec("scratch", "uint8", (offsets[-1],), "scratch"))
    for spec, t in zip(args[:n_slots], memrefs):
        if tuple(t.shape) != spec.shape:
            raise LoweringError(f"cpu codegen: buffer {spec.kind} {spec.name} has shape {t.shape}, expected {spec.shape}")
    index_bits = 32 if target.pointer_bits == 32 else 64
    copies_to_linalg(module)
    drop_assertions(module)
    loops = "convert-linalg-to-loops"
    if threaded:
        from etc.targets.cpu.parallel import lower_with_thread_splits, partition_top_level_loops

        lower_with_thread_splits(module, fn)
        partition_top_level_loops(fn)
        loops = "canonicalize"
    run_passes(module, _to_llvm(index_bits, loops), "lowering to the LLVM dialect")
    leftover = _non_llvm_ops(module)
    if leftover:
        raise LoweringError(f"cpu codegen: ops left after lowering to LLVM: {', '.join(sorted(leftover))}")
    _check_declarations(module)
    return args, n_slots, offsets, index_bits


def drop_assertions(module: ir.Module) -> int:
    """Remove `cf.assert`s (torch-mlir's shape and index checks): with static shapes they hold by
    construction, and lowered they call puts/abort, which a self-contained object cannot."""
    asserts = []

    def collect(op):
        if op.name == "cf.assert":
            asserts.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for op in asserts:
        op.erase()
    return len(asserts)


def _check_declarations(module: ir.Module) -> None:
    """External functions of the LLVM-dialect module must be libc/libm (see ALLOWED_EXTERNALS)."""
    bad = []
    for op in module.body.operations:
        if op.operation.name != "llvm.func" or len(op.operation.regions[0].blocks) > 0:
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if not name.startswith("llvm.") and name not in ALLOWED_EXTERNALS and name != "etc_cpu_barrier":
            bad.append(name)
    if bad:
        raise LoweringError(f"cpu codegen: generated code calls unsupported external function(s) {', '.join(bad)}")


def _non_llvm_ops(module: ir.Module) -> set:
    names = set()

    def visit(op):
        if not op.name.startswith("llvm.") and op.name != "builtin.module":
            names.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return names


def _strip_header(text: str) -> str:
    """Drop MLIR's datalayout/triple lines (the target machine sets them) and rewrite
    float literals into the syntax of llvmlite's older LLVM."""
    out = []
    for line in text.splitlines():
        if line.startswith(("target datalayout", "target triple")):
            continue
        if "f0x" in line or "inf" in line or "nan" in line or "e+" in line or "e-" in line:
            line = _old_float_literals(line)
        out.append(line)
    return "\n".join(out) + "\n"


_HEX_FLOAT = re.compile(r"\bf0x([0-9A-Fa-f]+)")


def _old_float_literals(line: str) -> str:
    """LLVM 24 prints `f0x3727C5AC` (the type's own bits); LLVM 22 wants `0x<double bits>`
    for float/double, `0xH....` for half and `0xR....` for bfloat."""

    def repl(m):
        digits = m.group(1)
        if len(digits) == 8:
            value = struct.unpack("<f", struct.pack("<I", int(digits, 16)))[0]
            return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
        if len(digits) == 16:
            return "0x" + digits.upper()
        if len(digits) == 4:
            before = line[: m.start()]
            kind = "R" if before.rfind("bfloat") > before.rfind("half") else "H"
            return f"0x{kind}{digits.upper()}"
        raise LoweringError(f"cpu codegen: unknown float literal f0x{digits}")

    line = _HEX_FLOAT.sub(repl, line)

    def special(m):
        before = line[: m.start()]
        kinds = {k: before.rfind(k) for k in ("half", "bfloat", "float", "double")}
        kind = max(kinds, key=kinds.get)
        text = m.group(1)
        negative = text.startswith("-")
        if "inf" in text:
            bits = {"half": "H7C00", "bfloat": "R7F80"}.get(kind, "7FF0000000000000")
            if negative:
                bits = {"half": "HFC00", "bfloat": "RFF80"}.get(kind, "FFF0000000000000")
        else:
            bits = {"half": "H7E00", "bfloat": "R7FC0"}.get(kind, "7FF8000000000000")
        return "0x" + bits

    line = _SPECIAL_FLOAT.sub(special, line)

    def decimal(m):
        before = line[: m.start()]
        kinds = {k: before.rfind(k) for k in ("half", "bfloat", "float", "double")}
        kind = max(kinds, key=kinds.get)
        if kinds[kind] < 0 or kind == "double":
            return m.group(0)
        value = float(m.group(0))
        if kind == "float":  # LLVM 22 takes a decimal float only when exact; spell its bits as a double
            single = struct.unpack("<f", struct.pack("<f", value))[0]
            return "0x%016X" % struct.unpack("<Q", struct.pack("<d", single))[0]
        if kind == "half":
            return "0xH%04X" % struct.unpack("<H", np.float16(value).tobytes())[0]
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return "0xR%04X" % rounded

    return _DECIMAL_FLOAT.sub(decimal, line)


_DECIMAL_FLOAT = re.compile(r"(?<![\w%@.\"$])[-+]?\d+\.\d+e[-+]\d+")


_SPECIAL_FLOAT = re.compile(r"(?<![\w%@.\"$-])([+-]?inf|[+-]?qnan|[+-]?nan)(?![\w.(])")


# Functions the object may call: libm/libc entry points LLVM emits for math ops and memory intrinsics.
ALLOWED_EXTERNALS = frozenset({
    "memcpy", "memmove", "memset", "expf", "exp", "exp2f", "exp2", "logf", "log", "log2f", "log2", "log10f", "log10",
    "log1pf", "log1p", "expm1f", "expm1", "powf", "pow", "sinf", "sin", "cosf", "cos", "tanf", "tan", "asinf",
    "asin", "acosf", "acos", "atanf", "atan", "atan2f", "atan2", "sinhf", "sinh", "coshf", "cosh", "tanhf", "tanh",
    "asinhf", "asinh", "acoshf", "acosh", "atanhf", "atanh", "erff", "erf", "erfcf", "erfc", "sqrtf", "sqrt",
    "cbrtf", "cbrt", "fmodf", "fmod", "roundf", "round", "roundevenf", "roundeven", "truncf", "trunc", "floorf",
    "floor", "ceilf", "ceil", "fabsf", "fabs", "copysignf", "copysign", "fmaf", "fma", "fminf", "fmin", "fmaxf",
    "fmax", "rintf", "rint", "nearbyintf", "nearbyint", "tgammaf", "lgammaf",
    "sched_yield",  # only the barrier of threaded entries (parallel.py) calls it
})


def check_external_symbols(mod) -> None:
    """Refuse code that calls anything but LLVM intrinsics and libc/libm (no MLIR runtime, no malloc)."""
    bad = []
    for fn in mod.functions:
        if fn.is_declaration and not fn.name.startswith("llvm.") and fn.name not in ALLOWED_EXTERNALS:
            bad.append(fn.name)
    if bad:
        raise LoweringError(f"cpu codegen: generated code calls unsupported external function(s) {', '.join(bad)}")


def emit_object(llvm_ir: str, target: CpuTarget, *, opt_level: int = 3, internalize=(),
                unroll: bool = True) -> tuple[bytes, str]:
    import llvmlite.binding as llvm

    _init_llvm()
    try:
        llvm_target = llvm.Target.from_triple(target.triple)
    except RuntimeError as e:
        raise LoweringError(f"cpu codegen: LLVM has no target for triple '{target.triple}': {e}") from None
    tm = llvm_target.create_target_machine(cpu=target.cpu, features=target.features, opt=opt_level, reloc="pic",
                                           codemodel="default")
    try:
        mod = llvm.parse_assembly(llvm_ir)
    except RuntimeError as e:
        raise LoweringError(f"cpu codegen: LLVM IR does not parse: {e}") from None
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    for name in internalize:
        fn = mod.get_function(name)
        fn.linkage = "internal"
    mod.verify()
    check_external_symbols(mod)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = unroll
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)
    return tm.emit_object(mod), str(mod)
