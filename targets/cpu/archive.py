"""Static archives and ELF section sizes for the native library (library.py), without binutils.

`write_archive(path, members)`: a `libNAME.a` in the System V / GNU `ar` format every Unix linker
reads: the "!<arch>\\n" magic, then per member a 60-byte text header (name, mtime, owner, mode,
size, "`\\n") and its bytes padded to an even length; first the symbol index member "/" (big-endian
count, each symbol's member header offset, the NUL-terminated names) that `ranlib` would write,
since linkers look symbols up there. Everything is deterministic (mtime, uid, gid 0).

`ElfObject(data)`: the sections (name, type, flags, size) and the defined and undefined global
symbols of a 32- or 64-bit little-endian ELF relocatable: what the size report adds up and the
archive index lists. It reads only what LLVM writes for these objects and checks every range.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from etc.errors import LoweringError

SHT_NOBITS = 8
SHT_SYMTAB = 2
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHN_UNDEF = 0
STB_LOCAL = 0


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    size: int

    @property
    def kind(self) -> str:
        """text (code), rodata (read-only data), data (initialized writable), bss, or "" (not loaded)."""
        if not self.flags & SHF_ALLOC:
            return ""
        if self.flags & SHF_EXECINSTR:
            return "text"
        if self.type == SHT_NOBITS:
            return "bss"
        return "data" if self.flags & SHF_WRITE else "rodata"


class ElfObject:
    def __init__(self, data: bytes):
        self.data = data
        if len(data) < 52 or data[:4] != b"\x7fELF" or data[5] != 1:
            raise LoweringError("native library: not a little-endian ELF object")
        self.is64 = data[4] == 2
        if self.is64:
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        else:
            shoff, = struct.unpack_from("<I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        self.machine, = struct.unpack_from("<H", data, 0x12)
        if shoff + shnum * shentsize > len(data) or shstrndx >= max(shnum, 1):
            raise LoweringError("native library: ELF section table out of range")
        raw = []
        for i in range(shnum):
            at = shoff + i * shentsize
            if self.is64:
                name, kind, flags, _, offset, size, link, info, _, entsize = struct.unpack_from("<IIQQQQIIQQ", data, at)
            else:
                name, kind, flags, _, offset, size, link, info, _, entsize = struct.unpack_from("<IIIIIIIIII", data, at)
            raw.append((name, kind, flags, offset, size, link, entsize))
        strtab = raw[shstrndx]
        self.sections = [Section(self._string(strtab, r[0]), r[1], r[2], r[4]) for r in raw]
        self.defined, self.undefined = [], []
        for r in raw:
            if r[1] != SHT_SYMTAB:
                continue
            names = raw[r[5]] if r[5] < len(raw) else None
            entsize = r[6] or (24 if self.is64 else 16)
            if names is None or r[3] + r[4] > len(data):
                raise LoweringError("native library: ELF symbol table out of range")
            for at in range(r[3], r[3] + r[4] - entsize + 1, entsize):
                if self.is64:
                    name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, at)
                else:
                    name, _, _, info, _, shndx = struct.unpack_from("<IIIBBH", data, at)
                if info >> 4 == STB_LOCAL or name == 0:
                    continue
                (self.undefined if shndx == SHN_UNDEF else self.defined).append(self._string(names, name))

    def _string(self, table, offset: int) -> str:
        start = table[3] + offset
        if start >= len(self.data) or offset >= table[4]:
            raise LoweringError("native library: ELF string out of range")
        end = self.data.index(b"\0", start)
        return self.data[start:end].decode()

    def sizes(self) -> dict:
        """Bytes per kind (text, rodata, data, bss) over the loaded sections."""
        out = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
        for section in self.sections:
            if section.kind:
                out[section.kind] += section.size
        return out


def _header(name: str, size: int) -> bytes:
    text = f"{name:<16}{0:<12}{0:<6}{0:<6}{644:<8}{size:<10}`\n"
    assert len(text) == 60
    return text.encode()


def write_archive(path: str, members: list[tuple[str, bytes]]) -> None:
    """`members`: (file name, ELF object bytes); the symbol index lists each one's defined globals."""
    for name, _ in members:
        if len(name) > 15 or "/" in name:
            raise LoweringError(f"native library: archive member name '{name}' longer than 15 characters")
    symbols = [(symbol, k) for k, (_, data) in enumerate(members) for symbol in ElfObject(data).defined]
    names = b"".join(s.encode() + b"\0" for s, _ in symbols)
    index_size = 4 + 4 * len(symbols) + len(names)
    offset = 8 + 60 + index_size + (index_size & 1)
    offsets = []
    for name, data in members:
        offsets.append(offset)
        offset += 60 + len(data) + (len(data) & 1)
    index = struct.pack(">I", len(symbols)) + b"".join(struct.pack(">I", offsets[k]) for _, k in symbols) + names
    out = [b"!<arch>\n", _header("/", len(index)), index, b"\n" if len(index) & 1 else b""]
    for name, data in members:
        out += [_header(name + "/", len(data)), data, b"\n" if len(data) & 1 else b""]
    with open(path, "wb") as f:
        f.write(b"".join(out))
