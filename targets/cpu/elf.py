"""A validating reader of the 64-bit little-endian ELF relocatable objects LLVM emits for the cpu target.

Why: the linker (`link.py`) trusts the object's numbers: a section offset past the end would copy
garbage into code, a relocation offset past its section would patch another part of the image,
a symbol index out of range would pick any address, an entry in a data section would jump into
data. So every number it uses is checked here first, and anything out of range is a
`LoweringError` naming it (the object comes from LLVM at compile time: a bad one is a compiler
bug, caught before a blob is written, never a loader's problem).
"""

from __future__ import annotations

import struct

from etc.errors import LoweringError

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
_AARCH64_WIDTHS = {0: 0, 257: 8, 258: 4, 259: 2, 260: 8, 261: 4, 262: 2}  # others: one instruction


def _fail(message: str):
    raise LoweringError(f"cpu codegen: the object code is not a valid ELF object: {message}")


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

    def section_name(self, index: int) -> str:
        """Section `index`'s name from the section-name string table ('' when there is none)."""
        shstrndx = struct.unpack_from("<H", self.data, 0x3E)[0]
        if not 0 < shstrndx < len(self.sections) or self.sections[shstrndx][1] != SHT_STRTAB:
            return ""
        table, size = self.sections[shstrndx][4], self.sections[shstrndx][5]
        name = self.sections[index][0]
        end = self.data.find(b"\0", table + name, table + size) if name < size else -1
        return self.data[table + name:end].decode("latin-1") if end >= 0 else ""

    def allocated(self) -> list[int]:
        return [i for i, sec in enumerate(self.sections) if sec[2] & SHF_ALLOC and sec[5] > 0]

    def undefined(self) -> set:
        return {name for name, shndx, _ in self.symbols if shndx == SHN_UNDEF and name}

    def entry_symbol(self, name: str) -> int:
        """The index of function `name`, defined in an executable section (never a jump into data)."""
        for k, (symbol, shndx, _) in enumerate(self.symbols):
            if symbol == name and shndx not in (SHN_UNDEF, SHN_ABS):
                if self.symbol_types[k] != STT_FUNC or not self.sections[shndx][2] & SHF_EXECINSTR:
                    raise LoweringError(f"cpu codegen: the entry '{name}' is not a function in executable code")
                return k
        raise LoweringError(f"cpu codegen: entry symbol '{name}' not found in the object code")
