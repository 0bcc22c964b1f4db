"""A validating reader of the 64-bit little-endian ELF relocatable objects in cpu blobs.

Why: the runtime links a blob's object code itself (`runtime.load_elf_x86_64`) or
through MCJIT, and both trust the object's numbers: a section offset past the
end reads garbage into code, a relocation offset past its section writes into
another part of the mapping (or out of it: SIGSEGV), a symbol index out of
range picks any address, an entry in a data section jumps into data (SIGILL).
So every number the linker uses is checked here first, and anything out of
range is a `BackendError` naming it. The blob's CRC (`blob.deserialize`) has
already matched by then; this is what keeps a mis-built or hand-made object
from taking the process down.
"""

from __future__ import annotations

import struct

from etc.errors import BackendError

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 0, 2, 3, 4, 8, 9
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
STT_FUNC = 2
ET_REL = 1
MACHINES = {62: "x86_64", 183: "aarch64"}
_MAX_ALIGN = 1 << 16

# Bytes a relocation of each type writes at its offset (the loader's x86-64 set; aarch64's data
# relocations, its instruction relocations patch one 4-byte instruction).
_X86_64_WIDTHS = {0: 0, 1: 8, 2: 4, 4: 4, 9: 4, 10: 4, 11: 4, 24: 8, 41: 4, 42: 4}
_AARCH64_WIDTHS = {0: 0, 257: 8, 258: 4, 259: 2, 260: 8, 261: 4, 262: 2}


def _fail(message: str):
    raise BackendError(f"cpu delegate: its object code is not a valid ELF object: {message}")


class Elf:
    """Sections, symbols and relocations of an ELF64 LE relocatable, every index and range checked.

    `sections`: (name, type, flags, addr, offset, size, link, info, align, entsize);
    `symbols`: (name, shndx, value); `symbol_types[k]` its STT_*; `relocations`: (target
    section, offset, type, symbol index, addend or None for REL).
    """

    def __init__(self, data: bytes):
        self.data = data
        if not self.is_elf64le(data):
            _fail("not a 64-bit little-endian ELF file")
        e_type, machine = struct.unpack_from("<HH", data, 16)
        if e_type != ET_REL:
            _fail(f"ELF type {e_type} is not a relocatable object (1)")
        self.machine = MACHINES.get(machine, "other")
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        if shentsize != 64 or not 1 <= shnum < SHN_LORESERVE or shoff + shnum * 64 > len(data):
            _fail(f"section header table ({shnum} x {shentsize} bytes at {shoff}) does not fit its "
                  f"{len(data)} bytes")
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
        for i, (_, sh_type, _, _, offset, size, _, _, align, _) in enumerate(self.sections):
            if sh_type not in (SHT_NULL, SHT_NOBITS) and offset + size > len(data):
                _fail(f"section {i} (bytes {offset}..{offset + size}) runs past the end ({len(data)} bytes)")
            if align > _MAX_ALIGN or align & (align - 1):
                _fail(f"section {i} has alignment {align}")
        self.symbols: list[tuple[str, int, int]] = []
        self.symbol_types: list[int] = []
        self.relocations: list[tuple[int, int, int, int, int | None]] = []
        symtabs = [i for i, sec in enumerate(self.sections) if sec[1] == SHT_SYMTAB]
        if len(symtabs) > 1:
            _fail(f"{len(symtabs)} symbol tables")
        if symtabs:
            self._read_symbols(symtabs[0])
        for i, sec in enumerate(self.sections):
            if sec[1] in (SHT_RELA, SHT_REL):
                self._read_relocations(i, sec, symtabs[0] if symtabs else None)

    @staticmethod
    def is_elf64le(data: bytes) -> bool:
        return len(data) >= 64 and data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1

    def _read_symbols(self, index: int):
        _, _, _, _, offset, size, link, _, _, entsize = self.sections[index]
        if entsize != 24 or size % 24:
            _fail(f"symbol table entries of {entsize} bytes in {size}")
        if link >= len(self.sections) or self.sections[link][1] != SHT_STRTAB:
            _fail(f"symbol table names section {link}, not a string table")
        strtab, strsize = self.sections[link][4], self.sections[link][5]
        for k in range(size // 24):
            name_off, info, _, shndx, value, sym_size = struct.unpack_from("<IBBHQQ", self.data, offset + k * 24)
            end = self.data.find(b"\0", strtab + name_off, strtab + strsize) if name_off < strsize else -1
            if end < 0:
                _fail(f"symbol {k}: its name (offset {name_off}) is not a string of the string table")
            name = self.data[strtab + name_off:end].decode("latin-1")
            if shndx not in (SHN_UNDEF, SHN_ABS) and not (shndx < len(self.sections)
                                                          and value + sym_size <= self.sections[shndx][5]):
                _fail(f"symbol {k} ('{name}') at {value} (+{sym_size}) lies outside its section {shndx}")
            self.symbols.append((name, shndx, value))
            self.symbol_types.append(info & 0xF)

    def _read_relocations(self, index: int, sec, symtab: int | None):
        _, sh_type, _, _, offset, size, link, target, _, entsize = sec
        step = 24 if sh_type == SHT_RELA else 16
        if entsize != step or size % step:
            _fail(f"relocation section {index}: entries of {entsize} bytes in {size}")
        if link != symtab or not 0 < target < len(self.sections):
            _fail(f"relocation section {index} refers to symbol table {link} and section {target}")
        widths = _X86_64_WIDTHS if self.machine == "x86_64" else _AARCH64_WIDTHS
        target_size = self.sections[target][5]
        for k in range(size // step):
            r_offset, r_info = struct.unpack_from("<QQ", self.data, offset + k * step)
            addend = struct.unpack_from("<q", self.data, offset + k * step + 16)[0] if sh_type == SHT_RELA else None
            rtype, sym = r_info & 0xFFFFFFFF, r_info >> 32
            if sym >= len(self.symbols):
                _fail(f"relocation {k} of section {index} names symbol {sym} (the table has {len(self.symbols)})")
            if r_offset + widths.get(rtype, 4) > target_size:
                _fail(f"relocation {k} of section {index} patches bytes {r_offset}.. of section {target}, which "
                      f"has {target_size}")
            self.relocations.append((target, r_offset, rtype, sym, addend))

    def allocated(self) -> list[int]:
        return [i for i, sec in enumerate(self.sections) if sec[2] & SHF_ALLOC and sec[5] > 0]

    def undefined(self) -> set:
        return {name for name, shndx, _ in self.symbols if shndx == SHN_UNDEF and name}

    def entry_symbol(self, name: str) -> int:
        """The index of function `name`, defined in an executable section (never a jump into data)."""
        for k, (symbol, shndx, _) in enumerate(self.symbols):
            if symbol == name and shndx not in (SHN_UNDEF, SHN_ABS):
                if self.symbol_types[k] != STT_FUNC or not self.sections[shndx][2] & SHF_EXECINSTR:
                    raise BackendError(f"cpu delegate: its entry '{name}' is not a function in executable code")
                return k
        raise BackendError(f"cpu delegate: entry symbol '{name}' not found in its object code")


# x86-64 relocations computing S + A or S + A - P (R_X86_64_64, PC32, PLT32, 32, 32S, PC64): the same
# bytes whether S is a symbol or its section's start with the symbol's offset added to A.
_X86_64_SECTION_RELATIVE = frozenset({1, 2, 4, 10, 11, 24})
STB_LOCAL, STT_SECTION = 0, 3
# Section types whose contents never index the symbol table except through relocations (NULL,
# PROGBITS, SYMTAB, STRTAB, RELA, NOTE, NOBITS, X86_64_UNWIND).
_PLAIN_SECTION_TYPES = frozenset({0, 1, 2, 3, 4, 7, 8, 0x70000001})


def compact(data: bytes) -> bytes:
    """`data` (an x86-64 relocatable object) without the symbols nothing needs: its file and
    local function symbols, and the `.LCPI*` labels of its constant pools, which relocations
    name only because the pools are mergeable sections, a linker feature our loader does not
    use. Such a relocation is rewritten to the label's section plus its offset (the bytes the
    loader writes do not change), and the string table keeps section and global names only.

    Why: those symbols were a fifth of a small int8 CNN's object code (77 symbols and their names
    for 8 KB of code). Other formats and machines' objects are returned as they are."""
    if not Elf.is_elf64le(data):
        return data
    elf = Elf(data)
    if elf.machine != "x86_64":
        return data
    symtabs = [i for i, sec in enumerate(elf.sections) if sec[1] == SHT_SYMTAB]
    shstrndx = struct.unpack_from("<H", data, 0x3E)[0]
    if len(symtabs) != 1 or elf.sections[symtabs[0]][6] != shstrndx \
            or any(sec[1] not in _PLAIN_SECTION_TYPES for sec in elf.sections):
        return data  # not the one-string-table layout LLVM writes, or sections that index symbols
    symtab = symtabs[0]
    sec_sym = elf.sections[symtab]
    strtab = sec_sym[6]
    binds = [data[sec_sym[4] + 24 * k + 4] >> 4 for k in range(len(elf.symbols))]
    # Locals that must stay named: a relocation whose value depends on the symbol itself (GOT), or
    # one not in a section.
    pinned = {sym for _, _, rtype, sym, _ in elf.relocations
              if sym and (rtype not in _X86_64_SECTION_RELATIVE or elf.symbols[sym][1] in (SHN_UNDEF, SHN_ABS))}
    keep_local = [k for k in range(1, len(elf.symbols))
                  if binds[k] == STB_LOCAL and k in pinned]
    globals_ = [k for k in range(1, len(elf.symbols)) if binds[k] != STB_LOCAL]
    sections_named = sorted({elf.symbols[sym][1] for _, _, rtype, sym, _ in elf.relocations
                             if sym and binds[sym] == STB_LOCAL and sym not in pinned
                             and elf.symbols[sym][1] not in (SHN_UNDEF, SHN_ABS)})

    names = bytearray(b"\0")
    name_at = {}

    def intern(name: str) -> int:
        if not name:
            return 0
        if name not in name_at:
            name_at[name] = len(names)
            names.extend(name.encode("latin-1") + b"\0")
        return name_at[name]

    section_names = []
    for sec in elf.sections:
        end = data.find(b"\0", elf.sections[strtab][4] + sec[0])
        section_names.append(intern(data[elf.sections[strtab][4] + sec[0]:end].decode("latin-1")))

    symbols = [bytes(24)]
    new_index = {}
    section_symbol = {}
    for shndx in sections_named:
        section_symbol[shndx] = len(symbols)
        symbols.append(struct.pack("<IBBHQQ", 0, (STB_LOCAL << 4) | STT_SECTION, 0, shndx, 0, 0))
    for k in keep_local + globals_:
        new_index[k] = len(symbols)
        raw = bytearray(data[sec_sym[4] + 24 * k:sec_sym[4] + 24 * k + 24])
        struct.pack_into("<I", raw, 0, intern(elf.symbols[k][0]))
        symbols.append(bytes(raw))
    first_global = 1 + len(sections_named) + len(keep_local)

    relocated = {}  # relocation section index -> its new bytes
    for i, sec in enumerate(elf.sections):
        if sec[1] != SHT_RELA:
            continue
        out = bytearray(data[sec[4]:sec[4] + sec[5]])
        for k in range(sec[5] // 24):
            r_offset, r_info, addend = struct.unpack_from("<QQq", out, 24 * k)
            rtype, sym = r_info & 0xFFFFFFFF, r_info >> 32
            if sym in new_index:
                sym = new_index[sym]
            elif sym:
                _, shndx, value = elf.symbols[sym]
                sym, addend = section_symbol[shndx], addend + value
            struct.pack_into("<QQq", out, 24 * k, r_offset, (sym << 32) | rtype, addend)
        relocated[i] = bytes(out)

    contents = {i: data[sec[4]:sec[4] + sec[5]] for i, sec in enumerate(elf.sections) if sec[1] != SHT_NOBITS}
    contents.update(relocated)
    contents[symtab] = b"".join(symbols)
    contents[strtab] = bytes(names)
    out = bytearray(data[:64])
    headers = []
    for i, sec in enumerate(elf.sections):
        name, sh_type, flags, addr, offset, size, link, info, align, entsize = sec
        if i in contents and i != 0:
            offset = -len(out) % max(align, 1) + len(out)
            out.extend(bytes(offset - len(out)))
            out.extend(contents[i])
            size = len(contents[i])
        if i == symtab:
            info = first_global
        headers.append(struct.pack("<IIQQQQIIQQ", section_names[i], sh_type, flags, addr, offset, size, link, info,
                                   align, entsize))
    out.extend(bytes(-len(out) % 8))
    struct.pack_into("<Q", out, 0x28, len(out))
    out.extend(b"".join(headers))
    return bytes(Elf(bytes(out)).data)
