"""LLVM dialect -> LLVM IR -> object code for one CPU (the last step of the `cpu` target).

`pipeline.cpu_pipeline` takes linalg on tensors down to the LLVM dialect; this module
translates that to LLVM IR, adds the entry wrapper, and has llvmlite optimize it (O3 for the
target machine: loop and SLP vectorization) and emit an object file (ELF for the triples we
test).

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
from etc.targets.cpu.image import IMPORTS
from etc.targets.cpu.isa import CpuTarget, init_llvm


# --------------------------------------------------------------- arguments
@dataclass
class ArgSpec:
    kind: str  # input | constant | output | scratch | dims (name "in": the inputs' dynamic dims, "out": the outputs')
    dtype: str  # numpy dtype name
    shape: tuple  # a dynamically shaped input/output: at its upper bounds
    name: str = ""  # constant fqn; input/output index as text
    dynamic: tuple = ()  # the dims given at run time (through the `dims` arguments)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict:
        return {"kind": self.kind, "dtype": self.dtype, "rank": len(self.shape), "shape": list(self.shape),
                "name": self.name, **({"dynamic": list(self.dynamic)} if self.dynamic else {})}

    @staticmethod
    def from_json(d: dict) -> "ArgSpec":
        return ArgSpec(d["kind"], d["dtype"], tuple(d["shape"]), d.get("name", ""), tuple(d.get("dynamic", ())))


@dataclass
class CodegenResult:
    object_bytes: bytes
    entry: str
    args: list  # of ArgSpec, entry order
    target: CpuTarget
    scratch_bytes: int = 0
    llvm_ir: str = ""
    threaded: bool = False  # entry(args, tid, nthreads, barrier) rather than entry(args)
    decisions: list = field(default_factory=list)  # decisions.Decision per heavy op
    stats: dict = field(default_factory=dict)
    profile: dict | None = None  # profiled builds: the regions the code times (profile_regions.read_profile)
    # The optimized module as LLVM bitcode: what a native library (library.py) emits its code from, with
    # its own symbol names and relocation model, without running LLVM's optimizer again.
    bitcode: bytes = b""


def check_llvm_dialect(module: ir.Module) -> None:
    """After the pipeline: only LLVM-dialect ops, calling only libc/libm."""
    leftover = _non_llvm_ops(module)
    if leftover:
        raise LoweringError(f"cpu codegen: ops left after lowering to LLVM: {', '.join(sorted(leftover))}")
    _check_declarations(module)


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


def strip_header(text: str) -> str:
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
_FLOAT_TYPE = re.compile(r"\b(half|bfloat|float|double)\b")


def _last_float_type(text: str) -> str:
    """The last floating-point type named in `text`, or None (whole words: "float" inside "bfloat"
    is not one)."""
    found = _FLOAT_TYPE.findall(text)
    return found[-1] if found else None


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
            kind = "R" if _last_float_type(line[: m.start()]) == "bfloat" else "H"
            return f"0x{kind}{digits.upper()}"
        raise LoweringError(f"cpu codegen: unknown float literal f0x{digits}")

    line = _HEX_FLOAT.sub(repl, line)

    def special(m):
        kind = _last_float_type(line[: m.start()])
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
        kind = _last_float_type(line[: m.start()])
        if kind is None or kind == "double":
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


# Functions the object may call: the libc/libm functions the cpu image's loaders provide.
ALLOWED_EXTERNALS = IMPORTS


def check_external_symbols(mod) -> None:
    """Refuse code that calls anything but LLVM intrinsics and libc/libm (no MLIR runtime, no malloc)."""
    bad = []
    for fn in mod.functions:
        if fn.is_declaration and not fn.name.startswith("llvm.") and fn.name not in ALLOWED_EXTERNALS:
            bad.append(fn.name)
    if bad:
        raise LoweringError(f"cpu codegen: generated code calls unsupported external function(s) {', '.join(bad)}")


# LLVM folds etc-cpu-widen-bf16's integer conversions back into bf16 values where it can (a
# select of two rounded results becomes a select of bf16), and a back end without a bf16 convert
# (AVX2, NEON, Cortex-M) legalizes those by widening to f32 and rounding back through compiler-rt's
# __truncsfbf2, which the object cannot link (libc/libm only). The module defines it, internal,
# with torch's rounding (to nearest even, every NaN 0x7FC0); optnone, so that its own select on
# i16 is not folded into a bf16 one that would call it. (A bf16 convert instruction, AVX-512 BF16,
# leaves it unused.)
BF16_ROUNDING = """
define internal bfloat @__truncsfbf2(float %x) noinline optnone nounwind {
  %bits = bitcast float %x to i32
  %high = lshr i32 %bits, 16
  %odd = and i32 %high, 1
  %bias = add i32 %odd, 32767
  %sum = add i32 %bits, %bias
  %top = lshr i32 %sum, 16
  %narrow = trunc i32 %top to i16
  %nan = fcmp uno float %x, %x
  %rounded = select i1 %nan, i16 32704, i16 %narrow
  %result = bitcast i16 %rounded to bfloat
  ret bfloat %result
}
@llvm.compiler.used = appending global [1 x ptr] [ptr @__truncsfbf2], section "llvm.metadata"
"""


def emit_object(llvm_ir: str, target: CpuTarget, *, opt_level: int = 3, internalize=(),
                out_of_line=()) -> tuple[bytes, str, bytes]:
    """Optimize (O`opt_level`, loop and SLP vectorization) and emit an object file; returns the object,
    the optimized module's text and its bitcode (what a native library emits its code from). The
    functions `internalize` names get internal linkage; those `out_of_line` names are never inlined (the
    dispatch regions etc-cpu-outline-regions made: LLVM optimizes them one by one).

    LLVM's loop unrolling is off: the cpu pipeline already unrolls the vector micro-kernels
    (GEMM register tiles, window taps), and unrolling the rest measured no faster (ResNet's
    conv3x3 64@56: 3.04 -> 2.47 ms without it; BERT-2L and the layer sweep within noise) while
    it doubled or quadrupled LLVM's time (BERT-2L compile 7.8 -> 4.1 s; conv3x3 2.6 -> 0.6 s)."""
    import llvmlite.binding as llvm

    init_llvm()
    try:
        llvm_target = llvm.Target.from_triple(target.triple)
    except RuntimeError as e:
        raise LoweringError(f"cpu codegen: LLVM has no target for triple '{target.triple}': {e}") from None
    tm = llvm_target.create_target_machine(cpu=target.cpu, features=target.features, opt=opt_level, reloc="pic",
                                           codemodel="default")
    if "bfloat" in llvm_ir:
        llvm_ir += BF16_ROUNDING
    try:
        mod = llvm.parse_assembly(llvm_ir)
    except RuntimeError as e:
        raise LoweringError(f"cpu codegen: LLVM IR does not parse: {e}") from None
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    for name in internalize:
        fn = mod.get_function(name)
        fn.linkage = "internal"
    for name in out_of_line:
        mod.get_function(name).add_function_attribute("noinline")
    mod.verify()
    check_external_symbols(mod)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)
    optimized = str(mod)
    check_codegen_types(optimized)
    bitcode = mod.as_bitcode()  # before codegen, whose IR passes (CodeGenPrepare) change the module
    return tm.emit_object(mod), optimized, bitcode


# Vector bf16 arithmetic: no back end here legalizes it (x86's aborts the process in LegalizeDAG,
# an assertion, not an error llvmlite could raise). etc-cpu-widen-bf16 computes bf16 in f32, so
# none should reach LLVM; this is the check that it did not, before the one step that cannot fail
# gracefully.
_VECTOR_BF16_ARITHMETIC = re.compile(
    r"^\s*(?:%\S+ = )?(fadd|fsub|fmul|fdiv|frem|fneg|fcmp \w+)(?: \w+)* <\d+ x bfloat>"
    r"|call [^(]*@llvm\.[\w.]*\.v\d+bf16\(", re.MULTILINE)


def check_codegen_types(llvm_ir: str) -> None:
    """Refuse, with a LoweringError naming the instruction, IR whose code generation would abort
    the process (vector bf16 arithmetic): a compiler bug, reported instead of a dead process."""
    found = _VECTOR_BF16_ARITHMETIC.search(llvm_ir)
    if found:
        line = llvm_ir[llvm_ir.rfind("\n", 0, found.start()) + 1:llvm_ir.find("\n", found.end())].strip()
        raise LoweringError(f"cpu codegen: the optimized LLVM IR computes in vector bfloat16, which LLVM cannot "
                            f"compile for this target (a compiler bug, please report it): {line[:200]}")
