"""The cpu blob's code: a pre-linked, position-independent image, and what a loader may assume of it.

`link.py` lays out a relocatable object's sections at compile time and resolves every relocation it
can; what depends on where the image lands or on the process is left to the loader, in two lists
(IREE's embedded-ELF loader applies the same kinds):

- `fixups`: offsets of 8-byte words holding an image offset; the loader adds the base address
  (ELF's RELATIVE: a GOT slot or data pointing into the image);
- `imports`: (offset, name): the 8-byte slot gets the address of the C library function `name`
  (ELF's GLOB_DAT / JUMP_SLOT: the GOT slots the call stubs jump through). Only `IMPORTS` exist.

So a loader maps `size` bytes read-write, copies `data` to the start (the rest is zero: .bss and
page padding), applies both lists, then gives each segment its protection (code read+execute,
constants read-only; nothing is ever writable and executable) and calls `entry`. etc's Python
runtime (`runtime.map_image`) and its ExecuTorch backend (`runtime/executorch_backend/`, C++)
are that loader, in two languages.

`check` is what both loaders rely on, so a blob whose CRC matched but that was made by hand (or
by a buggy writer) is an error, never a write out of bounds: every segment inside the image, page
aligned, none writable and executable; the entry in executable code; every fixup and import slot
inside the image, in a data segment (code is never patched), each fixup's value inside the image.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

R, W, X = 1, 2, 4  # segment protections
MACHINES = {62: "x86_64", 183: "aarch64"}  # ELF e_machine values the loaders run
# Segments start on this boundary: the largest page the architecture's Linux kernels use, so each
# segment's protection can be set on its own pages (AArch64 kernels use 4, 16 or 64 KiB pages).
SEGMENT_ALIGN = {62: 4096, 183: 65536}
MAX_IMAGE = 1 << 30

# What an image may import: libc/libm functions the generated code calls (math the cpu pipeline
# does not expand, memory intrinsics, and sched_yield for the threaded entry's barrier). The C++
# backend's table of addresses (runtime/executorch_backend/imports.cpp) lists the same names.
IMPORTS = frozenset({
    "memcpy", "memmove", "memset", "expf", "exp", "exp2f", "exp2", "logf", "log", "log2f", "log2", "log10f", "log10",
    "log1pf", "log1p", "expm1f", "expm1", "powf", "pow", "sinf", "sin", "cosf", "cos", "tanf", "tan", "asinf",
    "asin", "acosf", "acos", "atanf", "atan", "atan2f", "atan2", "sinhf", "sinh", "coshf", "cosh", "tanhf", "tanh",
    "asinhf", "asinh", "acoshf", "acosh", "atanhf", "atanh", "erff", "erf", "erfcf", "erfc", "sqrtf", "sqrt",
    "cbrtf", "cbrt", "fmodf", "fmod", "roundf", "round", "roundevenf", "roundeven", "truncf", "trunc", "floorf",
    "floor", "ceilf", "ceil", "fabsf", "fabs", "copysignf", "copysign", "fmaf", "fma", "fminf", "fmin", "fmaxf",
    "fmax", "rintf", "rint", "nearbyintf", "nearbyint", "tgammaf", "lgammaf",
    "sched_yield",  # only the barrier of threaded entries (parallel.py) calls it
})


@dataclass
class Segment:
    offset: int
    size: int
    prot: int  # R, R|X or R|W


@dataclass
class Image:
    machine: int  # ELF e_machine
    data: bytes  # the image's first len(data) bytes; the rest of `size` is zero
    size: int  # bytes to map (a multiple of `align`)
    align: int  # segment alignment the image was laid out for
    entry: int  # offset of the entry function
    segments: list = field(default_factory=list)  # of Segment
    fixups: list = field(default_factory=list)  # offsets of image-relative 8-byte words
    imports: list = field(default_factory=list)  # (offset, symbol name)


def unlinked(machine: int) -> Image:
    """The image of code for a machine no loader runs (a Cortex-M object): none. Such a blob still
    records what was compiled (its triple, arguments, decisions) and every loader refuses it by its
    triple; the way to run that code is a static library (`EdgeProgram.to_library`)."""
    return Image(machine=machine, data=b"", size=0, align=0, entry=0)


def check(image: Image, fail) -> None:
    """Call `fail(message)` (which raises) unless `image` keeps every promise of the module docstring."""
    if image.machine not in MACHINES:
        if image != unlinked(image.machine):
            fail(f"code for machine {image.machine}, which no loader runs, must be an empty image")
        return
    align = image.align
    if align not in (4096, 16384, 65536):
        fail(f"segment alignment {align} is not a page size (4, 16 or 64 KiB)")
    if not 0 < image.size <= MAX_IMAGE or image.size % align:
        fail(f"size {image.size} is not a multiple of {align} up to {MAX_IMAGE}")
    if len(image.data) > image.size:
        fail(f"{len(image.data)} stored bytes exceed its size {image.size}")
    end = 0
    for k, seg in enumerate(image.segments):
        if seg.offset < end or seg.offset % align or seg.size <= 0 or seg.size % align \
                or seg.offset + seg.size > image.size:
            fail(f"segment {k} [{seg.offset}, +{seg.size}) overlaps another, is not page aligned, or lies "
                 f"outside the {image.size}-byte image")
        if seg.prot not in (R, R | X, R | W):
            fail(f"segment {k} has protection {seg.prot} (read, read+execute or read+write only)")
        end = seg.offset + seg.size
    code = [(s.offset, s.offset + s.size) for s in image.segments if s.prot & X]
    if not any(lo <= image.entry < hi for lo, hi in code):
        fail(f"entry {image.entry} is not in an executable segment")

    def in_data(offset: int) -> bool:
        return 0 <= offset <= image.size - 8 and not any(lo < offset + 8 and offset < hi for lo, hi in code)

    for offset in image.fixups:
        if not in_data(offset):
            fail(f"fixup at {offset} is not an 8-byte word in a data segment of the image")
        value = struct.unpack("<Q", bytes(image.data[offset:offset + 8]).ljust(8, b"\0"))[0]
        if value >= image.size:
            fail(f"fixup at {offset} points {value} bytes in, outside the {image.size}-byte image")
    for offset, name in image.imports:
        if not in_data(offset):
            fail(f"import slot at {offset} is not an 8-byte word in a data segment of the image")
        if name not in IMPORTS:
            fail(f"imports '{name}', which is not one of the C library functions a cpu image may call")
