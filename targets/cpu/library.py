"""The cpu target's native library: a whole program as C-callable functions over caller-owned memory.

    edge = etc.to_edge(ep).to_backend(CpuPartitioner(target="cortex-m33"))
    library = edge.to_library("build/kws", "kws")     # kws.h, libkws.a (kws.o + kws_weights.o)
    print(library.size_report())                      # code, weights, arena, stack (also kws_size.json)

What it writes (the IREE static-library / TVM AOT design: nothing is interpreted on the device):
- `NAME.h`: per method M, `int NAME_M(const void *const *inputs, void *const *outputs, void *arena)`
  (a method with dynamic dims also takes `const int32_t *input_dims` after `inputs` and
  `int32_t *output_dims` after `outputs`), 0 or an error code (`NAME_ERROR_*`: a NULL or misaligned
  pointer, a size outside its Dim's range or disagreeing with a shared Dim, overlapping buffers; the
  code never runs then), a typed `static inline NAME_M_run(...)` on top, `NAME_init(arena)` (the
  mutable buffers' initial values), and every size as a macro: `NAME_ARENA_BYTES`/`_ALIGN`,
  `NAME_M_NUM_INPUTS`/`_OUTPUTS`, `NAME_M_INPUT<i>_{NAME,DTYPE,CTYPE,RANK,SHAPE,NUMEL,BYTES}`, each
  dynamic dim's `_DIM<d>_MIN`/`_MAX`, `NAME_M_STATE<s>_{OFFSET,BYTES}`.
- `NAME.o` (the code of every method, the entry wrappers) and `NAME_weights.o` (every constant the
  code reads, once even when several methods read it, as const data in section
  `.rodata.etc_weights.NAME`, 64-byte aligned: placeable in flash with `*(.rodata.etc_weights*)`),
  and `libNAME.a` holding both. The code calls nothing but memcpy/memset/memmove and the libm
  functions the model needs (and, on Arm, the EABI helpers LLVM calls them through); no heap, no
  static constructors, no global mutable data.
- `NAME_size.json` and `size_report()`: code, weights, arena, and on 32-bit Arm the stack the entries
  use, from LLVM's own frame descriptions (`stack_bound`).

The arena (caller-owned, `NAME_ARENA_ALIGN`-aligned, `NAME_ARENA_BYTES`): the mutable buffers first
(`NAME_STATE_BYTES`, kept between calls; `NAME_init` writes their initial values), then the scratch
one call uses. One call at a time per arena; two arenas run two calls at once.

How the objects are made: the delegate's optimized LLVM module (`NativeCode.bitcode`, kept by
`to_backend`) is linked with entry wrappers written here as LLVM IR, and llvmlite emits the object
(codegen only: LLVM's optimizer already ran), with this library's symbol names (unique per method
and per library: two libraries link into one program) and the relocation model of the target's OS
(static on bare metal, PIC on Linux). No C compiler or binutils is needed to make a library.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from etc.errors import LoweringError
from etc.targets.cpu.isa import CpuTarget

ARENA_ALIGN = 64  # the code places its scratch buffers at 64-byte offsets (plan-scratch), weights too
WEIGHTS_ALIGN = 64

# Error codes of the entries (NAME_ERROR_<name>); 0 is NAME_OK.
ERRORS = {"NULL": (1, "a NULL inputs/outputs/dims/arena pointer"),
          "ALIGNMENT": (2, "the arena not NAME_ARENA_ALIGN-aligned, or a tensor not aligned to its element"),
          "DIMS": (3, "a dynamic size outside its Dim's range, or disagreeing with another input's"),
          "OVERLAP": (4, "an output overlapping an input, another output or the arena")}

# ExecuTorch's ScalarType codes and the C types of the buffers (uint16_t: float16/bfloat16 bits).
C_DTYPES = {"uint8": (0, "uint8_t"), "int8": (1, "int8_t"), "int16": (2, "int16_t"), "int32": (3, "int32_t"),
           "int64": (4, "int64_t"), "float16": (5, "uint16_t"), "float32": (6, "float"), "float64": (7, "double"),
           "bool": (11, "uint8_t"), "uint16": (15, "uint16_t")}


@dataclass
class NativeCode:
    """One compiled delegate as a library is built from it (kept by `to_backend`, beside the blob)."""

    bitcode: bytes  # the optimized LLVM module (codegen.CodegenResult.bitcode)
    entry: str  # its entry function: void entry(void **args)
    args: list  # codegen.ArgSpec, in entry order
    constants: dict  # constant argument name -> the array the code reads (packed, full width)
    scratch_bytes: int
    target: CpuTarget
    opt_level: int = 3
    in_place: list = field(default_factory=list)  # [output k, input j]: k computed in j's memory
    threaded: bool = False

    @classmethod
    def of(cls, result, constants: dict, opt_level: int, in_place) -> "NativeCode":
        return cls(result.bitcode, result.entry, list(result.args), dict(constants), int(result.scratch_bytes),
                   result.target, int(opt_level), [list(p) for p in in_place], bool(result.threaded))


@dataclass
class NativeLibrary:
    """What `to_library` wrote: the files, the target, and the sizes."""

    directory: str
    name: str
    target: CpuTarget
    header: str
    archive: str
    objects: list
    size_json: str
    sizes: dict
    methods: list

    def size_report(self) -> str:
        s = self.sizes
        lines = [f"library {self.name} for {self.target.triple} ({self.target.cpu})",
                 f"  {'code':>10} {'weights':>10} {'arena':>10} {'state':>10} {'stack':>10}",
                 f"  {s['code_bytes']:>10} {s['weights_bytes']:>10} {s['arena_bytes']:>10} {s['state_bytes']:>10} "
                 f"{s['stack_bytes'] if s.get('stack_bytes') is not None else '-':>10}",
                 f"  code: {s['code']['text']} text + {s['code']['rodata']} read-only data (constant pools); "
                 f"{s['code']['data'] + s['code']['bss']} writable",
                 f"  calls: {', '.join(s['undefined']) or 'nothing'}"]
        if s.get("stack_bytes") is not None:
            lines.append(f"  stack: {s['stack_bytes']} bytes for the deepest entry, from LLVM's frame sizes over "
                         "the call graph" + (f", plus what {', '.join(s['stack_external'])} use"
                                             if s["stack_external"] else ""))
        return "\n".join(lines)


# ----------------------------------------------------------------------- the build
def emit_library(plans: list, directory: str, name: str, *, verbose: bool = True) -> NativeLibrary:
    """Write the library of `plans` (compiler/library.py: one per method) into `directory`."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise LoweringError(f"to_library: the library name '{name}' is not a C identifier")
    targets = {(p.native.target.triple, p.native.target.cpu, p.native.target.features) for p in plans}
    if len(targets) != 1:
        raise LoweringError(f"to_library: the methods were compiled for different targets: {sorted(targets)}")
    target = plans[0].native.target
    if not _is_elf(target):
        raise LoweringError(f"to_library: {target.triple} is not an ELF target (Linux or bare metal)")
    for plan in plans:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", plan.name) or plan.name == "init":
            raise LoweringError(f"to_library: method '{plan.name}' cannot be a C function {name}_{plan.name} "
                                "(a C identifier other than 'init')")
        if plan.native.threaded:
            raise LoweringError(f"to_library: method '{plan.name}' was compiled with num_threads > 1; a library "
                                "entry runs on its caller's thread: compile with CpuPartitioner(num_threads=1)")
    os.makedirs(directory, exist_ok=True)
    layout = _Layout(name, plans)
    methods = [_MethodBuild(name, plan, layout) for plan in plans]
    code = _code_module(name, methods, layout, target)
    code_object = _emit(code, target, nounwind=True)
    stack = _stack_report(code, target, [m.symbol for m in methods]) if _is_arm32(target) else None
    weights_object = _emit(_weights_module(name, layout), target, nounwind=True)
    paths = {"header": os.path.join(directory, f"{name}.h"), "code": os.path.join(directory, f"{name}.o"),
             "weights": os.path.join(directory, f"{name}_weights.o"),
             "archive": os.path.join(directory, f"lib{name}.a"), "json": os.path.join(directory, f"{name}_size.json")}
    with open(paths["header"], "w") as f:
        f.write(_header(name, methods, layout, target))
    with open(paths["code"], "wb") as f:
        f.write(code_object)
    with open(paths["weights"], "wb") as f:
        f.write(weights_object)
    from etc.targets.cpu.archive import ElfObject, write_archive

    write_archive(paths["archive"], [(f"{name}.o"[-15:], code_object), (f"{name}_w.o"[-15:], weights_object)])
    code_elf, weights_elf = ElfObject(code_object), ElfObject(weights_object)
    code_sizes = code_elf.sizes()
    sizes = {"library": name, "triple": target.triple, "cpu": target.cpu, "features": target.features,
             "code": code_sizes, "code_bytes": sum(code_sizes.values()),
             "weights_bytes": sum(weights_elf.sizes().values()), "weight_tensors": len(layout.weights),
             "arena_bytes": layout.arena_bytes, "state_bytes": layout.state_bytes,
             "undefined": sorted(set(code_elf.undefined) - set(weights_elf.defined)),
             "methods": {m.plan.name: {"symbol": m.symbol, "scratch_bytes": m.native.scratch_bytes,
                                       "arena_bytes": m.arena_end, **m.interface(),
                                       **({"stack_bytes": stack["entries"][m.symbol]} if stack else {})}
                         for m in methods}}
    if stack is not None:
        sizes["stack_bytes"] = max(stack["entries"].values())
        sizes["stack_external"] = stack["external"]
    with open(paths["json"], "w") as f:
        json.dump(sizes, f, indent=1)
    library = NativeLibrary(directory, name, target, paths["header"], paths["archive"],
                            [paths["code"], paths["weights"]], paths["json"], sizes, [p.name for p in plans])
    if verbose:
        print(library.size_report())
    return library


def _is_elf(target: CpuTarget) -> bool:
    return not any(os_name in target.triple for os_name in ("darwin", "macos", "ios", "windows", "wasm"))


def _is_arm32(target: CpuTarget) -> bool:
    return target.arch.startswith(("thumb", "arm")) and not target.arch.startswith("arm64")


def _bare_metal(target: CpuTarget) -> bool:
    parts = target.triple.split("-")
    return len(parts) >= 3 and parts[2] == "none"


# ----------------------------------------------------------------------- memory
class _Layout:
    """The weights (one symbol per distinct constant, shared by methods) and the arena: each method's
    mutable buffers at fixed offsets first, then the scratch of one call."""

    def __init__(self, name: str, plans: list):
        self.weights: list[bytes] = []  # symbol k -> bytes
        self._by_bytes: dict[bytes, int] = {}
        self.state: dict = {}  # (method, symbol) -> (offset, nbytes, initial symbol or None (zeros))
        offset = 0
        for plan in plans:
            for buffer in plan.state:
                nbytes = int(buffer.initial.nbytes)
                initial = np.ascontiguousarray(buffer.initial)
                init = None if not initial.any() else self.weight(initial.tobytes())
                self.state[(plan.name, buffer.symbol)] = (offset, nbytes, init)
                offset = _align(offset + nbytes, ARENA_ALIGN)
        self.state_bytes = offset
        self.arena_bytes = offset  # grown by each method's scratch

    def weight(self, data: bytes) -> int:
        k = self._by_bytes.get(data)
        if k is None:
            k = self._by_bytes[data] = len(self.weights)
            self.weights.append(data)
        return k


def _bound(dim) -> int:
    """A dimension's size, or a dynamic one's upper bound."""
    return int(dim.hi) if hasattr(dim, "hi") else int(dim)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _MethodBuild:
    """One method's entry: where each of the code's arguments comes from."""

    def __init__(self, name: str, plan, layout: _Layout):
        self.plan, self.native = plan, plan.native
        self.symbol = f"{name}_{plan.name}"
        self.code_symbol = f"{name}_{plan.name}_code"
        native = self.native
        for i, spec in enumerate(plan.inputs):  # a dynamic input's bound: the smaller of its Dim's and the code's
            operand = [j for j, (kind, index) in enumerate(plan.operands) if kind == "input" and index == i]
            arg = next((a for a in native.args if a.kind == "input" and int(a.name) in operand), None)
            for d in spec.dynamic:
                dim = spec.dims[d]
                bound = arg.shape[d] if arg is not None else dim.hi if dim.hi >= 0 else 2**31 - 1
                hi = bound if dim.hi < 0 else min(dim.hi, bound)
                spec.dims[d] = type(dim)(dim.expr, max(dim.lo, 0), hi, dim.name)
        # Inputs: the code's dynamic dims are the method inputs' (in the order of the code's input arguments).
        self.input_dims = [(i, d) for i, spec in enumerate(plan.inputs) for d in spec.dynamic]
        self.output_dims = []  # (output position, dim)
        out_args = {int(a.name): a for a in native.args if a.kind == "output"}
        for p, (kind, k) in enumerate(plan.outputs):
            dynamic = plan.inputs[k].dynamic if kind == "input" else list(out_args[k].dynamic)
            static = [d for d, size in enumerate(plan.output_specs[p].dims) if size is None]
            if kind == "result" and sorted(static) != sorted(dynamic):
                raise LoweringError(f"to_library: method '{plan.name}' output {p}: the code gives dims {dynamic} at "
                                    f"run time, the program {static}")
            self.output_dims += [(p, d) for d in dynamic]
            # The output's upper-bound shape: the code's buffer's, or the (bounded) input's it returns.
            plan.output_specs[p].dims = list(out_args[k].shape) if kind == "result" else list(plan.inputs[k].dims)
        # The arena: state (the layout's), then scratch, then temporaries for state written by copy.
        offset = layout.state_bytes
        self.scratch_offset = offset
        offset = _align(offset + native.scratch_bytes, ARENA_ALIGN)
        self.temps = {}  # result k -> arena offset of a temporary
        results_returned = {k for kind, k in plan.outputs if kind == "result"}
        for buffer in plan.state:
            if buffer.result is not None and not buffer.in_place:
                self.temps[buffer.result] = offset
                offset = _align(offset + int(buffer.initial.nbytes), ARENA_ALIGN)
        for a in native.args:  # a result nobody reads still needs a buffer
            if a.kind == "output" and int(a.name) not in results_returned and int(a.name) not in self.temps and \
                    not any(b.result == int(a.name) and b.in_place for b in plan.state):
                self.temps[int(a.name)] = offset
                offset = _align(offset + a.nbytes, ARENA_ALIGN)
        self.arena_end = offset
        layout.arena_bytes = max(layout.arena_bytes, offset)
        self.constants = {a.name: layout.weight(self._constant_bytes(a)) for a in native.args if a.kind == "constant"}
        self.operand_constants = {j: layout.weight(np.ascontiguousarray(plan.constants[symbol]).tobytes())
                                  for j, (kind, symbol) in enumerate(plan.operands) if kind == "constant"}
        self.state_offsets = {b.symbol: layout.state[(plan.name, b.symbol)][0] for b in plan.state}

    def interface(self) -> dict:
        """The entry's tensors as the header declares them (for tools and harnesses)."""
        def tensor(spec, dynamic):
            out = {"name": spec.name, "dtype": spec.dtype, "shape": [_bound(d) for d in spec.dims], "dynamic": dynamic}
            if dynamic and any(spec is s for s in self.plan.inputs):  # the smallest size each dim takes
                out["min"] = [d.lo if hasattr(d, "lo") else int(d) for d in spec.dims]
            return out

        return {"inputs": [tensor(s, s.dynamic) for s in self.plan.inputs],
                "outputs": [tensor(s, [d for q, d in self.output_dims if q == p])
                            for p, s in enumerate(self.plan.output_specs)],
                "input_dims": [list(x) for x in self.input_dims], "output_dims": [list(x) for x in self.output_dims],
                "state": [{"name": b.symbol, "offset": self.state_offsets[b.symbol], "bytes": int(b.initial.nbytes)}
                          for b in self.plan.state]}

    def _constant_bytes(self, arg) -> bytes:
        data = np.ascontiguousarray(self.native.constants[arg.name]).tobytes()
        if len(data) != arg.nbytes:
            raise LoweringError(f"to_library: constant '{arg.name}' has {len(data)} bytes, the code reads {arg.nbytes}")
        return data


# ----------------------------------------------------------------------- LLVM IR
class _Ir:
    """A function body as LLVM IR text, with fresh value and block names."""

    def __init__(self, ix: str):
        self.ix = ix
        self.lines: list[str] = []
        self.count = 0

    def value(self, text: str) -> str:
        self.count += 1
        name = f"%v{self.count}"
        self.lines.append(f"  {name} = {text}")
        return name

    def emit(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def fail_if(self, condition: str, code: int) -> None:
        """Return `code` when `condition` (an i1) holds."""
        self.count += 1
        ok = f"ok{self.count}"
        self.emit(f"br i1 {condition}, label %fail{code}, label %{ok}")
        self.lines.append(f"{ok}:")

    def gep(self, base: str, offset: int) -> str:
        return self.value(f"getelementptr inbounds i8, ptr {base}, {self.ix} {offset}") if offset else base

    def address(self, pointer: str) -> str:
        return self.value(f"ptrtoint ptr {pointer} to {self.ix}")


def _entry_ir(m: _MethodBuild, layout: _Layout, name: str, ix: str) -> str:
    """`int NAME_M(inputs, [input_dims,] outputs, [output_dims,] arena)`: check, bind, call, finish."""
    plan, native = m.plan, m.native
    ir = _Ir(ix)
    dynamic = bool(m.input_dims or m.output_dims)
    params = ["ptr %inputs"] + (["ptr %input_dims"] if dynamic else []) + ["ptr %outputs"] + \
             (["ptr %output_dims"] if dynamic else []) + ["ptr %arena"]
    null, alignment, dims_error, overlap = (ERRORS[k][0] for k in ("NULL", "ALIGNMENT", "DIMS", "OVERLAP"))

    def is_null(pointer):
        return ir.value(f"icmp eq ptr {pointer}, null")

    # The pointer arrays and the pointers in them.
    inputs, outputs = [], []
    for array, count, into in (("%inputs", len(plan.inputs), inputs), ("%outputs", len(plan.outputs), outputs)):
        if count:
            ir.fail_if(is_null(array), null)
        for i in range(count):
            slot = ir.value(f"getelementptr inbounds ptr, ptr {array}, {ix} {i}")
            pointer = ir.value(f"load ptr, ptr {slot}, align {int(ix[1:]) // 8}")
            ir.fail_if(is_null(pointer), null)
            into.append(pointer)
    if dynamic:
        if m.input_dims:
            ir.fail_if(is_null("%input_dims"), null)
        if m.output_dims:
            ir.fail_if(is_null("%output_dims"), null)
    if layout.arena_bytes:
        ir.fail_if(is_null("%arena"), null)
        misaligned = ir.value(f"and {ix} {ir.address('%arena')}, {ARENA_ALIGN - 1}")
        ir.fail_if(ir.value(f"icmp ne {ix} {misaligned}, 0"), alignment)
    for pointer, spec in list(zip(inputs, plan.inputs)) + list(zip(outputs, plan.output_specs)):
        size = np.dtype(spec.dtype).itemsize
        if size > 1:
            low = ir.value(f"and {ix} {ir.address(pointer)}, {size - 1}")
            ir.fail_if(ir.value(f"icmp ne {ix} {low}, 0"), alignment)
    # Dynamic dims: each in its range, shared Dims equal, derived ones (2*s0) as computed.
    dims, symbols = {}, {}
    for position, (i, d) in enumerate(m.input_dims):
        slot = ir.value(f"getelementptr inbounds i32, ptr %input_dims, {ix} {position}")
        value = ir.value(f"sext i32 {ir.value(f'load i32, ptr {slot}, align 4')} to i64")
        dim = plan.inputs[i].dims[d]
        ir.fail_if(ir.value(f"icmp slt i64 {value}, {dim.lo}"), dims_error)
        ir.fail_if(ir.value(f"icmp sgt i64 {value}, {dim.hi}"), dims_error)
        dims[(i, d)] = value
        if dim.expr.isidentifier():
            if dim.expr in symbols:
                ir.fail_if(ir.value(f"icmp ne i64 {value}, {symbols[dim.expr]}"), dims_error)
            else:
                symbols[dim.expr] = value
    for (i, d), value in dims.items():
        expr = plan.inputs[i].dims[d].expr
        if not expr.isidentifier():
            expected = _expression_ir(ir, expr, symbols, plan.name)
            if expected is not None:
                ir.fail_if(ir.value(f"icmp ne i64 {value}, {expected}"), dims_error)

    def nbytes(spec, index=None) -> str:
        """The bytes of input `index` at its run-time sizes (i64), or an output's at its bounds."""
        static = np.dtype(spec.dtype).itemsize
        factors = []
        for d, size in enumerate(spec.dims):
            if index is not None and (index, d) in dims:
                factors.append(dims[(index, d)])
            else:
                static *= int(size.hi if hasattr(size, "hi") else size)
        total = str(static)
        for factor in factors:
            total = ir.value(f"mul i64 {total}, {factor}")
        return total

    def to_ix(value: str) -> str:
        return value if ix == "i64" or not value.startswith("%") else ir.value(f"trunc i64 {value} to {ix}")

    # No output may overlap an input, another output or the arena (the code's buffers are noalias).
    ranges = []
    for i, pointer in enumerate(inputs):
        ranges.append(("input", pointer, to_ix(nbytes(plan.inputs[i], i))))
    for p, pointer in enumerate(outputs):
        ranges.append(("output", pointer, to_ix(nbytes(plan.output_specs[p]))))
    if layout.arena_bytes:
        ranges.append(("arena", "%arena", str(layout.arena_bytes)))
    for a in range(len(ranges)):
        for b in range(a + 1, len(ranges)):
            if "output" not in (ranges[a][0], ranges[b][0]) and "arena" not in (ranges[a][0], ranges[b][0]):
                continue
            (_, pa, na), (_, pb, nb) = ranges[a], ranges[b]
            lo_a, lo_b = ir.address(pa), ir.address(pb)
            hi_a, hi_b = ir.value(f"add {ix} {lo_a}, {na}"), ir.value(f"add {ix} {lo_b}, {nb}")
            both = ir.value(f"and i1 {ir.value(f'icmp ult {ix} {lo_a}, {hi_b}')}, "
                            f"{ir.value(f'icmp ult {ix} {lo_b}, {hi_a}')}")
            nonempty = ir.value(f"and i1 {ir.value(f'icmp ne {ix} {na}, 0')}, {ir.value(f'icmp ne {ix} {nb}, 0')}")
            ir.fail_if(ir.value(f"and i1 {both}, {nonempty}"), overlap)
    # The code's argument array.
    result_pointer = {}
    for p, (kind, k) in enumerate(plan.outputs):
        if kind == "result" and k not in result_pointer:
            result_pointer[k] = outputs[p]
    state = {b.symbol: ir.gep("%arena", m.state_offsets[b.symbol]) for b in plan.state}
    for b in plan.state:
        if b.result is not None and b.in_place:
            result_pointer[b.result] = state[b.symbol]
    for k, offset in m.temps.items():
        result_pointer[k] = ir.gep("%arena", offset)
    args = ir.value(f"alloca [{len(native.args)} x ptr], align 8")
    dims_out = None
    for position, a in enumerate(native.args):
        if a.kind == "input":
            kind, index = plan.operands[int(a.name)]
            pointer = inputs[index] if kind == "input" else state[index] if kind == "state" else \
                f"@{name}_weight{m.operand_constants[int(a.name)]}"
        elif a.kind == "constant":
            pointer = f"@{name}_weight{m.constants[a.name]}"
        elif a.kind == "output":
            pointer = result_pointer[int(a.name)]
        elif a.kind == "scratch":
            pointer = ir.gep("%arena", m.scratch_offset)
        elif a.kind == "dims" and a.name == "in":
            pointer = ir.value(f"alloca [{max(a.shape[0], 1)} x i64], align 8")
            k = 0
            for b in native.args:
                if b.kind != "input":
                    continue
                for d in b.dynamic:
                    kind, index = plan.operands[int(b.name)]
                    if kind != "input" or (index, d) not in dims:
                        raise LoweringError(f"to_library: method '{plan.name}': the code's input {b.name} has a "
                                            f"dynamic dim {d} that is no dynamic dim of a method input")
                    slot = ir.value(f"getelementptr inbounds i64, ptr {pointer}, {ix} {k}")
                    ir.emit(f"store i64 {dims[(index, d)]}, ptr {slot}, align 8")
                    k += 1
        elif a.kind == "dims" and a.name == "out":
            pointer = dims_out = ir.value(f"alloca [{max(a.shape[0], 1)} x i64], align 8")
        else:
            raise LoweringError(f"to_library: the code takes an argument of kind '{a.kind}' this library cannot pass")
        slot = ir.value(f"getelementptr inbounds ptr, ptr {args}, {ix} {position}")
        ir.emit(f"store ptr {pointer}, ptr {slot}, align {int(ix[1:]) // 8}")
    ir.emit(f"call void @{m.code_symbol}(ptr {args})")
    # After the call: state written by copy, outputs returned twice or returned inputs, output dims.
    for b in plan.state:
        if b.result is not None and not b.in_place:
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {state[b.symbol]}, ptr {result_pointer[b.result]}, "
                    f"{ix} {int(b.initial.nbytes)}, i1 false)")
    for p, (kind, k) in enumerate(plan.outputs):
        if kind == "result" and result_pointer[k] is not outputs[p] and result_pointer[k] != outputs[p]:
            size = to_ix(nbytes(plan.output_specs[p]))
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {outputs[p]}, ptr {result_pointer[k]}, {ix} {size}, "
                    "i1 false)")
        elif kind == "input":
            size = to_ix(nbytes(plan.inputs[k], k))
            ir.emit(f"call void @llvm.memmove.p0.p0.{ix}(ptr {outputs[p]}, ptr {inputs[k]}, {ix} {size}, i1 false)")
    code_dims_out = [(int(a.name), d) for a in native.args if a.kind == "output" for d in a.dynamic]
    for position, (p, d) in enumerate(m.output_dims):
        kind, k = plan.outputs[p]
        if kind == "input":
            value = dims[(k, d)]
        else:
            slot = ir.value(f"getelementptr inbounds i64, ptr {dims_out}, {ix} {code_dims_out.index((k, d))}")
            value = ir.value(f"load i64, ptr {slot}, align 8")
        slot = ir.value(f"getelementptr inbounds i32, ptr %output_dims, {ix} {position}")
        ir.emit(f"store i32 {ir.value(f'trunc i64 {value} to i32')}, ptr {slot}, align 4")
    ir.emit("ret i32 0")
    fails = []
    for code in sorted({c for c, _ in ERRORS.values()}):
        fails += [f"fail{code}:", f"  ret i32 {code}"]
    return "\n".join([f"define i32 @{m.symbol}({', '.join(params)}) {{", "entry:", *ir.lines, *fails, "}"]) + "\n"


def _expression_ir(ir: _Ir, expr: str, symbols: dict, method: str):
    """A derived size ("2*s0", "s0 + 1") as i64 IR over the known symbols, or None if one is unknown."""
    import ast

    ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "sdiv", ast.Mod: "srem"}

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return str(node.value)
        if isinstance(node, ast.Name):
            if node.id not in symbols:
                raise KeyError(node.id)
            return symbols[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ir.value(f"{ops[type(node.op)]} i64 {walk(node.left)}, {walk(node.right)}")
        raise LoweringError(f"to_library: method '{method}': the size expression '{expr}' is not supported")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except KeyError:
        return None


def _init_ir(name: str, layout: _Layout, ix: str) -> str:
    """`int NAME_init(void *arena)`: every mutable buffer to its initial value."""
    ir = _Ir(ix)
    if layout.state_bytes:
        ir.fail_if(ir.value("icmp eq ptr %arena, null"), ERRORS["NULL"][0])
        misaligned = ir.value(f"and {ix} {ir.address('%arena')}, {ARENA_ALIGN - 1}")
        ir.fail_if(ir.value(f"icmp ne {ix} {misaligned}, 0"), ERRORS["ALIGNMENT"][0])
    for (offset, nbytes, init) in layout.state.values():
        pointer = ir.gep("%arena", offset)
        if init is None:
            ir.emit(f"call void @llvm.memset.p0.{ix}(ptr {pointer}, i8 0, {ix} {nbytes}, i1 false)")
        else:
            ir.emit(f"call void @llvm.memcpy.p0.p0.{ix}(ptr {pointer}, ptr @{name}_weight{init}, {ix} {nbytes}, "
                    "i1 false)")
    ir.emit("ret i32 0")
    fails = [f"fail{c}:\n  ret i32 {c}" for c in (ERRORS["NULL"][0], ERRORS["ALIGNMENT"][0])]
    return "\n".join([f"define i32 @{name}_init(ptr %arena) {{", "entry:", *ir.lines, *fails, "}"]) + "\n"


def _code_module(name: str, methods: list, layout: _Layout, target: CpuTarget):
    """One LLVM module: every method's optimized code (its entry renamed NAME_M_code, internal) and the
    entry wrappers (optimized here at O2: written plainly, each check a branch)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm

    init_llvm()
    ix = f"i{target.index_bits}"
    lines = [f"declare void @{m.code_symbol}(ptr)" for m in methods]
    lines += [f"declare void @llvm.memcpy.p0.p0.{ix}(ptr, ptr, {ix}, i1)",
              f"declare void @llvm.memmove.p0.p0.{ix}(ptr, ptr, {ix}, i1)",
              f"declare void @llvm.memset.p0.{ix}(ptr, i8, {ix}, i1)"]
    lines += [f"@{name}_weight{k} = external hidden constant [{len(data)} x i8], align {WEIGHTS_ALIGN}"
              for k, data in enumerate(layout.weights)]
    text = "\n".join(lines) + "\n" + "".join(_entry_ir(m, layout, name, ix) for m in methods) + \
        _init_ir(name, layout, ix)
    tm = _target_machine(target)
    try:
        module = llvm.parse_assembly(text)
    except RuntimeError as error:
        raise LoweringError(f"to_library: the entry wrappers are not valid LLVM IR: {error}") from None
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    module.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    for m in methods:
        code = llvm.parse_bitcode(m.native.bitcode)
        entry = code.get_function(m.native.entry)
        entry.name = m.code_symbol
        module.link_in(code)
        module.get_function(m.code_symbol).linkage = "internal"
    for fn in module.functions:  # only the entries are exported
        if not fn.is_declaration and fn.name not in {m.symbol for m in methods} | {f"{name}_init"}:
            fn.linkage = "internal"
    module.verify()
    return module


def _weights_module(name: str, layout: _Layout):
    """Every weight as `@NAME_weight<k>`: const bytes in section .rodata.etc_weights.NAME."""
    import llvmlite.binding as llvm

    lines = []
    for k, data in enumerate(layout.weights):
        lines.append(f"@{name}_weight{k} = hidden constant [{len(data)} x i8] {_bytes_literal(data)}, "
                     f"section \".rodata.etc_weights.{name}\", align {WEIGHTS_ALIGN}")
    return llvm.parse_assembly("\n".join(lines) + "\n")


_HEX = np.array([ord(c) for c in "0123456789ABCDEF"], dtype=np.uint8)


def _bytes_literal(data: bytes) -> str:
    """c"\\XX\\XX..." (every byte escaped: fast for megabytes, and any byte is fine)."""
    if not data:
        return "zeroinitializer"
    raw = np.frombuffer(data, dtype=np.uint8)
    text = np.empty((raw.size, 3), dtype=np.uint8)
    text[:, 0] = ord("\\")
    text[:, 1] = _HEX[raw >> 4]
    text[:, 2] = _HEX[raw & 15]
    return 'c"' + text.tobytes().decode("ascii") + '"'


def _target_machine(target: CpuTarget):
    import llvmlite.binding as llvm

    try:
        llvm_target = llvm.Target.from_triple(target.triple)
    except RuntimeError as error:
        raise LoweringError(f"to_library: LLVM has no target for '{target.triple}': {error}") from None
    # Static addresses on bare metal (no GOT in the firmware); position-independent on Linux, so the
    # library also links into PIE executables and shared objects.
    reloc = "static" if _bare_metal(target) else "pic"
    return llvm_target.create_target_machine(cpu=target.cpu, features=target.features, opt=3, reloc=reloc,
                                             codemodel="default")


def _emit(module, target: CpuTarget, *, nounwind: bool) -> bytes:
    """The object of a copy of `module` (codegen changes the module it runs on). `nounwind`: the
    functions cannot unwind (C callers; on Arm their EHABI entries are then EXIDX_CANTUNWIND, where
    unwindable ones would reference __aeabi_unwind_cpp_pr0 and pull the unwinder into firmware)."""
    import llvmlite.binding as llvm

    copy = llvm.parse_bitcode(module.as_bitcode())
    if nounwind:
        for fn in copy.functions:
            if not fn.is_declaration:
                fn.add_function_attribute("nounwind")
    return _target_machine(target).emit_object(copy)


# ----------------------------------------------------------------------- stack
_DIRECTIVE = re.compile(r"^\s*\.(save|vsave|pad)\s+(.*)$")
_CALL = re.compile(r"^\s*(?:bl|blx|b|b\.w)\s+([A-Za-z_.$][\w.$]*)\s*$")
_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):")


def stack_bound(assembly: str, entries: list) -> dict:
    """The most stack each entry can use, from the assembly LLVM writes for 32-bit Arm: each function's
    frame as its EHABI unwind directives state it (`.save {r4, lr}`: 4 bytes a register, `.vsave
    {d8, d9}`: 8 a d-register, `.pad #N`), plus the deepest callee over the call graph (`bl`, and `b`
    to a function: a tail call). Functions outside the module (libm, memcpy) are listed, not counted.
    {"entries": {symbol: bytes}, "frames": {function: bytes}, "external": [names]}."""
    frames, calls, current = {}, {}, None
    functions = set()
    for line in assembly.splitlines():
        label = _LABEL.match(line)
        if label and not label.group(1).startswith(".L"):
            current = label.group(1)
            functions.add(current)
            frames.setdefault(current, 0)
            calls.setdefault(current, set())
            continue
        if current is None:
            continue
        directive = _DIRECTIVE.match(line)
        if directive:
            kind, operand = directive.groups()
            if kind == "pad":
                frames[current] += int(operand.strip().lstrip("#"), 0)
            else:
                registers = _register_list(operand)
                frames[current] += sum(8 if r.startswith("d") else 4 for r in registers)
            continue
        call = _CALL.match(line)
        if call and not call.group(1).startswith(".L"):
            calls[current].add(call.group(1))
    external = sorted({c for cs in calls.values() for c in cs if c not in functions})
    depth: dict = {}

    def deepest(fn, path=()):
        if fn not in functions:
            return 0
        if fn in path:
            raise LoweringError(f"stack bound: {fn} is recursive")
        if fn not in depth:
            depth[fn] = frames[fn] + max((deepest(c, path + (fn,)) for c in calls[fn]), default=0)
        return depth[fn]

    return {"entries": {e: deepest(e) for e in entries}, "frames": frames, "external": external}


def _register_list(text: str) -> list:
    """"{r4, r5, lr}" / "{d8-d11}" -> the registers."""
    out = []
    for item in text.strip().strip("{}").split(","):
        item = item.strip()
        if "-" in item:
            first, last = item.split("-")
            prefix = first.rstrip("0123456789")
            for n in range(int(first[len(prefix):]), int(last.strip()[len(prefix):]) + 1):
                out.append(f"{prefix}{n}")
        elif item:
            out.append(item)
    return out


def _stack_report(module, target: CpuTarget, entries: list) -> dict:
    """stack_bound over the assembly of the same code (with unwind directives: the object has none)."""
    import llvmlite.binding as llvm

    copy = llvm.parse_bitcode(module.as_bitcode())
    return stack_bound(_target_machine(target).emit_assembly(copy), entries)


# ----------------------------------------------------------------------- the header
def _header(name: str, methods: list, layout: _Layout, target: CpuTarget) -> str:
    up = name.upper()
    guard = f"{up}_H"
    out = [f"/* {name}.h: generated by etc for {target.triple} ({target.cpu}). Do not edit.",
           f" * Link lib{name}.a (or {name}.o and {name}_weights.o). Every function returns {up}_OK (0) or an",
           f" * error code; on an error nothing is written. One call at a time per arena. */",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "", "#ifdef __cplusplus",
           'extern "C" {', "#endif", "", f"#define {up}_OK 0"]
    for key, (code, what) in ERRORS.items():
        out.append(f"#define {up}_ERROR_{key} {code}  /* {what.replace('NAME', up)} */")
    out += ["",
            f"/* The arena: caller-owned working memory, {up}_ARENA_ALIGN-aligned. Its first {up}_STATE_BYTES",
            f" * hold the mutable buffers (kept between calls; {name}_init sets them), the rest one call's scratch. */",
            f"#define {up}_ARENA_BYTES {layout.arena_bytes}", f"#define {up}_ARENA_ALIGN {ARENA_ALIGN}",
            f"#define {up}_STATE_BYTES {layout.state_bytes}", f"#define {up}_NUM_METHODS {len(methods)}", "",
            f"/* Writes every mutable buffer's initial value into the arena (call once before the first call). */",
            f"int {name}_init(void *arena);", ""]
    for m in methods:
        out += _method_header(name, m, layout)
    out += ["#ifdef __cplusplus", "}", "#endif", f"#endif  /* {guard} */", ""]
    return "\n".join(out)


def _method_header(name: str, m: _MethodBuild, layout: _Layout) -> list:
    plan = m.plan
    up = f"{name}_{plan.name}".upper()
    out = [f"/* ---- method {plan.name} ---- */", f"#define {up}_NUM_INPUTS {len(plan.inputs)}",
           f"#define {up}_NUM_OUTPUTS {len(plan.outputs)}"]
    if m.input_dims or m.output_dims:
        out += [f"#define {up}_NUM_INPUT_DIMS {len(m.input_dims)}  /* input_dims: "
                + ", ".join(f"input {i} dim {d}" for i, d in m.input_dims) + " */",
                f"#define {up}_NUM_OUTPUT_DIMS {len(m.output_dims)}  /* output_dims: "
                + ", ".join(f"output {p} dim {d}" for p, d in m.output_dims) + " */"]
    for role, specs in (("INPUT", plan.inputs), ("OUTPUT", plan.output_specs)):
        for i, spec in enumerate(specs):
            code, ctype = C_DTYPES[spec.dtype]
            bounds = [int(d.hi) if hasattr(d, "hi") else int(d) for d in spec.dims]
            if role == "OUTPUT" and plan.outputs[i][0] == "input":
                bounds = [int(d.hi) if hasattr(d, "hi") else int(d) for d in plan.inputs[plan.outputs[i][1]].dims]
            numel = math.prod(bounds)
            p = f"{up}_{role}{i}"
            dynamic = [d for d, size in enumerate(spec.dims) if hasattr(size, "hi")] if role == "INPUT" else \
                [d for q, d in m.output_dims if q == i]
            out += [f'#define {p}_NAME "{spec.name}"',
                    f"#define {p}_DTYPE {code}  /* {spec.dtype if spec.dtype != 'uint16' else 'bfloat16'} "
                    "(ExecuTorch ScalarType) */",
                    f"#define {p}_CTYPE {ctype}", f"#define {p}_RANK {len(bounds)}",
                    *([f"#define {p}_SHAPE {{{', '.join(str(b) for b in bounds)}}}"
                       + ("  /* upper bounds */" if dynamic else "")] if bounds else []),  # (a scalar has none)
                    f"#define {p}_NUMEL {numel}", f"#define {p}_BYTES {numel * np.dtype(spec.dtype).itemsize}"]
            for d in dynamic:
                if role == "INPUT":
                    dim = spec.dims[d]
                    out += [f"#define {p}_DIM{d}_MIN {dim.lo}  /* Dim '{dim.name}' */",
                            f"#define {p}_DIM{d}_MAX {dim.hi}"]
                else:
                    out += [f"#define {p}_DIM{d}_MAX {bounds[d]}"]
    for s, b in enumerate(plan.state):
        offset, nbytes, _ = layout.state[(plan.name, b.symbol)]
        out += [f'#define {up}_STATE{s}_NAME "{b.symbol}"',
                f"#define {up}_STATE{s}_OFFSET {offset}  /* in the arena */", f"#define {up}_STATE{s}_BYTES {nbytes}"]
    dynamic = bool(m.input_dims or m.output_dims)
    params = ["const void *const *inputs"] + (["const int32_t *input_dims"] if dynamic else []) + \
             ["void *const *outputs"] + (["int32_t *output_dims"] if dynamic else []) + ["void *arena"]
    out += [f"int {m.symbol}({', '.join(params)});"]
    # The typed entry: named arguments, a dynamic input's sizes after it, an output's sizes after it.
    typed, names = [], set()

    def ident(text: str) -> str:
        base = re.sub(r"\W", "_", text) or "arg"
        base = base if not base[0].isdigit() else f"_{base}"
        candidate, n = base, 1
        while candidate in names or candidate in ("arena", "inputs", "outputs", "input_dims", "output_dims"):
            candidate, n = f"{base}_{n}", n + 1
        names.add(candidate)
        return candidate

    in_names = [ident(spec.name) for spec in plan.inputs]
    out_names = [ident(spec.name) for spec in plan.output_specs]
    for i, spec in enumerate(plan.inputs):
        typed.append(f"const {C_DTYPES[spec.dtype][1]} *{in_names[i]}")
        typed += [f"int32_t {in_names[i]}_dim{d}" for ii, d in m.input_dims if ii == i]
    for p, spec in enumerate(plan.output_specs):
        typed.append(f"{C_DTYPES[spec.dtype][1]} *{out_names[p]}")
        typed += [f"int32_t *{out_names[p]}_dim{d}" for q, d in m.output_dims if q == p]
    body = [f"    const void *inputs[{max(len(plan.inputs), 1)}] = {{{', '.join(in_names) or '0'}}};",
            f"    void *outputs[{max(len(plan.outputs), 1)}] = {{{', '.join(out_names) or '0'}}};"]
    call_args = ["inputs", "outputs", "arena"]
    if dynamic:
        values = [f"{in_names[i]}_dim{d}" for i, d in m.input_dims]
        body.append(f"    int32_t input_dims[{max(len(values), 1)}] = {{{', '.join(values) or '0'}}};")
        body.append(f"    int32_t output_dims[{max(len(m.output_dims), 1)}];")
        call_args = ["inputs", "input_dims", "outputs", "output_dims", "arena"]
    body.append(f"    int status = {m.symbol}({', '.join(call_args)});")
    for position, (p, d) in enumerate(m.output_dims):
        body.append(f"    if (status == 0 && {out_names[p]}_dim{d}) *{out_names[p]}_dim{d} = output_dims[{position}];")
    body.append("    return status;")
    out += [f"static inline int {m.symbol}_run({', '.join(typed + ['void *arena'])}) {{", *body, "}", ""]
    return out
