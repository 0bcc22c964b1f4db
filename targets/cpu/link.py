"""A small static linker: the relocatable ELF object LLVM emits -> a pre-linked image (`image.Image`).

Why link at compile time: a loader that links an object at load time (MCJIT, or a loader of ELF
relocatables) must understand sections, symbols and every relocation type of every architecture,
in each runtime that loads code (etc's Python runtime and its C++ ExecuTorch backend). Linked
here, once, in Python, what is left for a loader is two lists it applies in a few lines of code
(`image.py`), as IREE's embedded ELF loader does with a pre-linked shared object.

Layout, each part starting on a page of `image.SEGMENT_ALIGN[machine]` bytes (empty parts omitted):

    [code sections | call stubs]   read + execute
    [read-only sections | GOT]     read-only once the loader has filled the GOT
    [writable sections, .bss]      read + write

Relocations (x86-64 and AArch64, the small code model's PIC output):
- PC-relative to anything in the image (calls, branches, RIP-relative loads, ADRP/ADD/LDR pairs,
  which are base-independent because the image base is page aligned): resolved here;
- a call to an external function (memcpy, expf, sched_yield): to a stub in the code part that
  jumps through a GOT slot, which is an import; a GOT reference: a GOT slot, an import for an
  external symbol, a fixup (RELATIVE) for one in the image;
- an absolute 64-bit address: a fixup for a symbol in the image, an import for an external.
Anything else (absolute 32-bit relocations of non-PIC code, TLS, an unknown type) is a
LoweringError naming it: the compile fails rather than the loader guess. `.eh_frame` is not
loaded (nothing unwinds through the code: it neither throws nor is unwound by a debugger's
backtrace here), nor are debug or note sections.
"""

from __future__ import annotations

import struct

from etc.errors import LoweringError
from etc.targets.cpu import elf as elf_format
from etc.targets.cpu.image import IMPORTS, MAX_IMAGE, SEGMENT_ALIGN, Image, R, Segment, W, X

X86_64, AARCH64 = 62, 183
_SHN_ABS = elf_format.SHN_ABS
_NOT_LOADED = (".eh_frame",)
_SHT_NOTE = 7


def _fail(message: str):
    raise LoweringError(f"cpu codegen: linking the object code: {message}")


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _Layout:
    """Where each loaded section, stub and GOT slot sits in the image."""

    def __init__(self, elf: elf_format.Elf, machine: int, stub_size: int):
        page = SEGMENT_ALIGN[machine]
        secs = elf.sections
        parts = {"code": [], "ro": [], "rw": []}
        for i in elf.allocated():
            name = elf.section_name(i)
            if name in _NOT_LOADED or secs[i][1] == _SHT_NOTE:
                continue
            flags = secs[i][2]
            parts["code" if flags & elf_format.SHF_EXECINSTR else "rw" if flags & elf_format.SHF_WRITE else "ro"].append(i)
        self.where: dict[int, int] = {}
        undefined = sorted(elf.undefined())
        bad = [name for name in undefined if name not in IMPORTS]
        if bad:
            _fail(f"it calls {', '.join(bad)}, which the cpu target's loaders do not provide (they import only "
                  "libc/libm functions: image.IMPORTS)")
        # Symbols reached through the GOT: every external (by name), and any defined symbol a GOT
        # relocation names (by where it is: section and offset).
        got_keys = list(undefined)
        for _, _, rtype, sym, _ in elf.relocations:
            if sym and rtype in _GOT_TYPES[machine]:
                key = got_key(elf, sym)
                if key not in got_keys:
                    got_keys.append(key)
        self.segments = []
        offset = 0
        for part, prot in (("code", R | X), ("ro", R), ("rw", R | W)):
            start = offset
            for i in parts[part]:
                offset = _align(offset, max(secs[i][8], 1))
                self.where[i] = offset
                offset += secs[i][5]
            if part == "code":
                offset = _align(offset, 16)
                self.stubs = {name: offset + stub_size * k for k, name in enumerate(undefined)}
                offset += stub_size * len(undefined)
            if part == "ro":
                offset = _align(offset, 8)
                self.got = {key: offset + 8 * k for k, key in enumerate(got_keys)}
                offset += 8 * len(got_keys)
            offset = _align(offset, page)
            if offset > start:
                self.segments.append(Segment(start, offset - start, prot))
        self.size = max(offset, page)
        self.page = page
        if self.size > MAX_IMAGE:
            _fail(f"the image needs {self.size} bytes, more than {MAX_IMAGE}")


# Relocation types that name a GOT slot.
_GOT_TYPES = {X86_64: {9, 41, 42}, AARCH64: {311, 312}}


def got_key(elf: elf_format.Elf, sym: int):
    """The GOT slot symbol `sym` uses: an external's name, or a defined symbol's (section, offset)."""
    name, shndx, value = elf.symbols[sym]
    return name if shndx == elf_format.SHN_UNDEF else (shndx, value)


def link(object_bytes: bytes, entry: str) -> Image:
    """The image of `object_bytes` (an ELF64 relocatable for x86-64 or AArch64) with `entry` its entry."""
    elf = elf_format.Elf(object_bytes)
    machine = {"x86_64": X86_64, "aarch64": AARCH64}.get(elf.machine)
    if machine is None:
        _fail(f"ELF machine '{elf.machine}' is not x86-64 or AArch64")
    entry_index = elf.entry_symbol(entry)
    stub_size = 16
    layout = _Layout(elf, machine, stub_size)
    secs = elf.sections
    data_end = max([layout.where[i] + secs[i][5] for i in layout.where if secs[i][1] != elf_format.SHT_NOBITS]
                   + [layout.got[n] + 8 for n in layout.got] + [layout.stubs[n] + stub_size for n in layout.stubs]
                   + [0])
    image = bytearray(data_end)
    for i, at in layout.where.items():
        if secs[i][1] != elf_format.SHT_NOBITS:
            image[at:at + secs[i][5]] = object_bytes[secs[i][4]:secs[i][4] + secs[i][5]]
    fixups: list[int] = []
    imports: list[tuple[int, str]] = []

    def address_in(shndx: int, value: int, name: str) -> int:
        if shndx == _SHN_ABS or shndx >= elf_format.SHN_LORESERVE:
            _fail(f"symbol '{name}' is absolute or common (section {shndx:#x}): not position-independent code")
        if shndx not in layout.where:
            _fail(f"a relocation refers to '{name}' in section '{elf.section_name(shndx)}', which is not loaded")
        return layout.where[shndx] + value

    def address(sym: int) -> tuple[int | None, str]:
        """(image offset of symbol `sym`, None for an external) and its name."""
        name, shndx, value = elf.symbols[sym]
        if shndx == elf_format.SHN_UNDEF:
            return None, name
        return address_in(shndx, value, name or elf.section_name(shndx)), name

    for key, slot in layout.got.items():
        if isinstance(key, str):
            imports.append((slot, key))
        else:
            shndx, value = key
            struct.pack_into("<Q", image, slot, address_in(shndx, value, f"section {shndx}"))
            fixups.append(slot)
    for name, stub in layout.stubs.items():
        _write_stub(machine, image, stub, layout.got[name])

    apply = _apply_x86_64 if machine == X86_64 else _apply_aarch64
    for target, r_offset, rtype, sym, addend in elf.relocations:
        if target not in layout.where or rtype == 0:
            continue  # relocations of sections not loaded (.eh_frame, debug information)
        if addend is None:
            _fail("REL relocations (without addends) are not supported")
        place = layout.where[target] + r_offset
        s, name = address(sym) if sym else (0, "")
        slot = layout.got[got_key(elf, sym)] if sym and rtype in _GOT_TYPES[machine] else None
        apply(image, place, rtype, s, addend, name, slot, layout, fixups, imports)
    entry_offset = address(entry_index)[0]
    fixups.sort()
    imports.sort()
    return Image(machine=machine, data=bytes(image), size=layout.size, align=layout.page, entry=entry_offset,
                 segments=layout.segments, fixups=fixups, imports=imports)


def _write_stub(machine: int, image: bytearray, at: int, slot: int) -> None:
    if machine == X86_64:  # jmp *slot(%rip), padded with int3
        image[at:at + 16] = struct.pack("<BBi", 0xFF, 0x25, slot - (at + 6)) + b"\xcc" * 10
        return
    # adrp x16, slot; ldr x16, [x16, :lo12:slot]; br x16; brk #0
    pages = (slot >> 12) - (at >> 12)
    adrp = 0x90000010 | ((pages & 3) << 29) | (((pages >> 2) & 0x7FFFF) << 5)
    ldr = 0xF9400210 | (((slot & 0xFFF) >> 3) << 10)
    image[at:at + 16] = struct.pack("<IIII", adrp, ldr, 0xD61F0200, 0xD4200000)


def _absolute(image, place, s, addend, name, fixups, imports) -> None:
    """A 64-bit absolute address: a fixup inside the image, an import outside (no addend)."""
    if s is None:
        if addend:
            _fail(f"an absolute address of '{name}' plus {addend}: an import is the function's address itself")
        imports.append((place, name))
        struct.pack_into("<Q", image, place, 0)
    else:
        struct.pack_into("<Q", image, place, s + addend)
        fixups.append(place)


def _check_range(value: int, bits: int, what: str, name: str) -> int:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        _fail(f"{what} to '{name}' out of range ({value} does not fit {bits} signed bits)")
    return value


def _apply_x86_64(image, place, rtype, s, addend, name, slot, layout, fixups, imports) -> None:
    if rtype == 1:  # R_X86_64_64
        _absolute(image, place, s, addend, name, fixups, imports)
    elif rtype == 24:  # R_X86_64_PC64
        if s is None:
            _fail(f"a 64-bit PC-relative reference to external '{name}'")
        struct.pack_into("<q", image, place, s + addend - place)
    elif rtype in (2, 4):  # R_X86_64_PC32, PLT32: S + A - P (an external: its stub)
        target = layout.stubs[name] if s is None else s
        struct.pack_into("<i", image, place, _check_range(target + addend - place, 32, "a call or load", name))
    elif rtype in _GOT_TYPES[X86_64]:  # GOTPCREL, GOTPCRELX, REX_GOTPCRELX: G + GOT + A - P
        struct.pack_into("<i", image, place, _check_range(slot + addend - place, 32, "a GOT load", name))
    elif rtype in (10, 11):
        _fail("absolute 32-bit relocations (R_X86_64_32/32S): not position-independent code (reloc=pic)")
    else:
        _fail(f"x86-64 relocation type {rtype} is not supported")


# AArch64 instruction fields: (lowest bit, width) of the immediate each relocation type writes,
# and the right shift of the value into it.
_A64_LO12 = {277: 0, 278: 0, 284: 1, 285: 2, 286: 3, 299: 4}  # ADD_ABS_LO12_NC, LDST{8,16,32,64,128}_ABS_LO12_NC
_A64_BRANCH = {282: (0, 26), 283: (0, 26), 280: (5, 19), 273: (5, 19), 279: (5, 14)}  # JUMP26 CALL26 CONDBR19
# LD_PREL_LO19 TSTBR14


def _patch(image, place, low: int, width: int, value: int) -> None:
    insn = struct.unpack_from("<I", image, place)[0]
    mask = ((1 << width) - 1) << low
    struct.pack_into("<I", image, place, (insn & ~mask) | ((value << low) & mask))


def _adr(image, place, value: int) -> None:
    """ADR/ADRP's 21-bit immediate: immlo in bits 29-30, immhi in 5-23."""
    _patch(image, place, 29, 2, value & 3)
    _patch(image, place, 5, 19, (value >> 2) & 0x7FFFF)


def _apply_aarch64(image, place, rtype, s, addend, name, slot, layout, fixups, imports) -> None:
    if rtype == 257:  # R_AARCH64_ABS64
        _absolute(image, place, s, addend, name, fixups, imports)
        return
    if rtype in (282, 283) and s is None:  # a call or tail call to an external: its stub
        s = layout.stubs[name]
    if rtype in (311, 312):  # ADR_GOT_PAGE, LD64_GOT_LO12_NC: the symbol's GOT slot
        if rtype == 311:
            _adr(image, place, _check_range((slot >> 12) - (place >> 12), 21, "a GOT page", name))
        else:
            _patch(image, place, 10, 12, (slot & 0xFFF) >> 3)
        return
    if s is None:
        _fail(f"AArch64 relocation type {rtype} to external '{name}' (only calls and GOT loads may name one)")
    value = s + addend
    if rtype in (260, 261, 262):  # PREL64, PREL32, PREL16
        bits = {260: 64, 261: 32, 262: 16}[rtype]
        struct.pack_into({64: "<q", 32: "<i", 16: "<h"}[bits], image, place,
                         _check_range(value - place, bits, "a PC-relative word", name))
    elif rtype in (275, 276):  # ADR_PREL_PG_HI21(_NC): page delta
        _adr(image, place, _check_range((value >> 12) - (place >> 12), 21, "an ADRP", name))
    elif rtype == 274:  # ADR_PREL_LO21
        _adr(image, place, _check_range(value - place, 21, "an ADR", name))
    elif rtype in _A64_LO12:
        shift = _A64_LO12[rtype]
        if (value & 0xFFF) % (1 << shift):
            _fail(f"a {8 << shift}-bit load/store of '{name}' at a misaligned offset {value & 0xFFF}")
        _patch(image, place, 10, 12, (value & 0xFFF) >> shift)
    elif rtype in _A64_BRANCH:
        low, width = _A64_BRANCH[rtype]
        delta = value - place
        if delta % 4:
            _fail(f"a branch to '{name}' at a misaligned distance {delta}")
        _patch(image, place, low, width, _check_range(delta >> 2, width, "a branch", name))
    else:
        _fail(f"AArch64 relocation type {rtype} is not supported")
