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
import os
import re
from dataclasses import dataclass, field

from etc.errors import LoweringError
from etc.targets.cpu.isa import CpuTarget
from etc.targets.cpu.library_header import header_text
from etc.targets.cpu.library_ir import code_module, emit_object, weights_module
from etc.targets.cpu.library_layout import (ARENA_ALIGN, C_DTYPES, ERRORS, WEIGHTS_ALIGN, ArenaLayout, MethodBuild,
                                            is_arm32, is_elf)
from etc.targets.cpu.library_stack import stack_bound, stack_report

__all__ = ["ARENA_ALIGN", "C_DTYPES", "ERRORS", "WEIGHTS_ALIGN", "NativeCode", "NativeLibrary", "emit_library",
           "stack_bound"]

# The parts: library_layout.py (weights, arena, each method's arguments), library_ir.py (entry
# wrappers as LLVM IR, objects), library_header.py (NAME.h), library_stack.py (stack bound).


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


def emit_library(plans: list, directory: str, name: str, *, verbose: bool = True) -> NativeLibrary:
    """Write the library of `plans` (compiler/library.py: one per method) into `directory`."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise LoweringError(f"to_library: the library name '{name}' is not a C identifier")
    targets = {(p.native.target.triple, p.native.target.cpu, p.native.target.features) for p in plans}
    if len(targets) != 1:
        raise LoweringError(f"to_library: the methods were compiled for different targets: {sorted(targets)}")
    target = plans[0].native.target
    if not is_elf(target):
        raise LoweringError(f"to_library: {target.triple} is not an ELF target (Linux or bare metal)")
    for plan in plans:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", plan.name) or plan.name == "init":
            raise LoweringError(f"to_library: method '{plan.name}' cannot be a C function {name}_{plan.name} "
                                "(a C identifier other than 'init')")
        if plan.native.threaded:
            raise LoweringError(f"to_library: method '{plan.name}' was compiled with num_threads > 1; a library "
                                "entry runs on its caller's thread: compile with CpuPartitioner(num_threads=1)")
    os.makedirs(directory, exist_ok=True)
    layout = ArenaLayout(name, plans)
    methods = [MethodBuild(name, plan, layout) for plan in plans]
    code = code_module(name, methods, layout, target)
    code_object = emit_object(code, target, nounwind=True)
    stack = stack_report(code, target, [m.symbol for m in methods]) if is_arm32(target) else None
    weights_object = emit_object(weights_module(name, layout), target, nounwind=True)
    paths = {"header": os.path.join(directory, f"{name}.h"), "code": os.path.join(directory, f"{name}.o"),
             "weights": os.path.join(directory, f"{name}_weights.o"),
             "archive": os.path.join(directory, f"lib{name}.a"), "json": os.path.join(directory, f"{name}_size.json")}
    with open(paths["header"], "w") as f:
        f.write(header_text(name, methods, layout, target))
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
