"""Bare-metal Cortex-M firmware around etc's native libraries, run under QEMU.

    from etc.targets.cpu import firmware
    lib = edge.to_library("build/kws", "kws")            # compiled with CpuPartitioner(target="cortex-m33")
    fw = firmware.build_firmware("build/kws.elf", ["main.c"], [lib], "mps2-an505")
    print(fw.size_report())                              # the whole firmware's flash and RAM
    result = firmware.run_firmware(fw.elf, "mps2-an505")  # exit status = main()'s return value

The files beside this module are the firmware's own code, shipped with the package: `startup.c`
(vector table, reset handler: .data, .bss, FPU/MVE on, `exit(main())`), `semihost.c` +
`etc_firmware.h` (output, exit status, instruction counting and stack painting through Arm
semihosting; no C library stdio, no heap), and one linker script per QEMU board (`sections.ld`
is their common layout; the weights get their own output section, `.etc_weights`). The boards:

    mps2-an505  Cortex-M33 (FPv5-SP)     code 0x10000000, data 0x38000000
    mps2-an500  Cortex-M7 (FPv5-D16)     code 0x0,        data 0x20000000
    mps3-an547  Cortex-M55 (MVE, FPv5)   code 0x0 (ITCM), weights 0x01000000, data 0x21000000
    mps2-an386  Cortex-M4F (FPv4-SP)     code 0x0,        data 0x20000000

The firmware links with `-nostartfiles` and libc/libm only for memcpy/memset and the math
functions a model calls: nothing provides `_sbrk`, so a link that pulled in malloc would fail.
The toolchains come from Debian's packages (`make toolchains`); a missing tool is an EtcError that
says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from etc.errors import EtcError

FIRMWARE_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCES = ("startup.c", "semihost.c")


@dataclass(frozen=True)
class Board:
    machine: str  # QEMU's -M
    preset: str  # the cpu target preset of its core (isa.PRESETS)
    linker_script: str


BOARDS = {
    "mps2-an505": Board("mps2-an505", "cortex-m33", "mps2_an505.ld"),
    "mps2-an500": Board("mps2-an500", "cortex-m7", "mps2_an500.ld"),
    "mps3-an547": Board("mps3-an547", "cortex-m55", "mps3_an547.ld"),
    "mps2-an386": Board("mps2-an386", "cortex-m4", "mps2_an386.ld"),
}

# GCC's name for each core's FPU (Cortex-M55: its FPU and MVE follow from -mcpu).
_FPU = {"cortex-m4": "fpv4-sp-d16", "cortex-m7": "fpv5-d16", "cortex-m33": "fpv5-sp-d16", "cortex-m55": "auto"}


def board(name) -> Board:
    if isinstance(name, Board):
        return name
    if name not in BOARDS:
        raise EtcError(f"unknown board '{name}' (boards: {', '.join(BOARDS)})")
    return BOARDS[name]


def require_tool(name: str) -> str:
    """The path of a toolchain program, or an EtcError saying how to install it."""
    path = shutil.which(name)
    if path is None:
        raise EtcError(f"{name} is not installed: `make toolchains` installs the cross toolchains and QEMU "
                       "(Debian's qemu-user, qemu-system-arm, gcc-aarch64-linux-gnu, gcc-arm-none-eabi, "
                       "libnewlib-arm-none-eabi)")
    return path


def gcc_flags(target) -> list[str]:
    """arm-none-eabi-gcc's flags for code that links with a library built for `target` (a CpuTarget
    of a Cortex-M preset): the core, its FPU and the library's float ABI."""
    if target.cpu not in _FPU:
        raise EtcError(f"no firmware flags for cpu '{target.cpu}' (Cortex-M cores: {', '.join(_FPU)})")
    abi = "hard" if target.triple.endswith("eabihf") else "softfp"
    return ["-mthumb", f"-mcpu={target.cpu}", f"-mfpu={_FPU[target.cpu]}", f"-mfloat-abi={abi}"]


@dataclass
class Firmware:
    elf: str
    board: Board
    sizes: dict

    def size_report(self) -> str:
        s = self.sizes
        return "\n".join([
            f"firmware {os.path.basename(self.elf)} for {self.board.machine} ({self.board.preset})",
            f"  flash {s['flash_bytes']:>9} bytes: code {s['code_bytes']}, weights {s['weights_bytes']}, "
            f"other read-only data {s['rodata_bytes']}, .data initializers {s['data_bytes']}",
            f"  RAM   {s['ram_bytes']:>9} bytes: .data {s['data_bytes']}, .bss {s['bss_bytes']} (the arenas and "
            f"buffers), stack {s['stack_bytes']}"])


def firmware_sizes(elf_path: str) -> dict:
    """Flash and RAM of a linked firmware, from its section headers (as arm-none-eabi-size -A)."""
    from etc.targets.cpu.archive import ElfObject

    with open(elf_path, "rb") as f:
        elf = ElfObject(f.read())
    sizes = {"code_bytes": 0, "weights_bytes": 0, "rodata_bytes": 0, "data_bytes": 0, "bss_bytes": 0,
             "stack_bytes": 0}
    for section in elf.sections:
        kind = section.kind
        if section.name == ".etc_weights":
            sizes["weights_bytes"] += section.size
        elif section.name == ".stack":
            sizes["stack_bytes"] += section.size
        elif kind == "text":
            sizes["code_bytes"] += section.size
        elif kind == "rodata":
            sizes["rodata_bytes"] += section.size
        elif kind == "data":
            sizes["data_bytes"] += section.size
        elif kind == "bss":
            sizes["bss_bytes"] += section.size
    sizes["flash_bytes"] = sizes["code_bytes"] + sizes["weights_bytes"] + sizes["rodata_bytes"] + sizes["data_bytes"]
    sizes["ram_bytes"] = sizes["data_bytes"] + sizes["bss_bytes"] + sizes["stack_bytes"]
    sizes["symbols"] = sorted(elf.defined)
    return sizes


def build_firmware(output: str, sources: list, libraries: list, board_name, *, include_dirs=(),
                   optimize: str = "-O2", stack_bytes: int | None = None, extra_flags=()) -> Firmware:
    """Compile `sources` (C files) with the harness and link them with `libraries` (NativeLibrary, all
    built for the board's core) into `output` (an ELF the board boots)."""
    chosen = board(board_name)
    gcc = require_tool("arm-none-eabi-gcc")
    if not libraries:
        raise EtcError("build_firmware: no library to link")
    target = libraries[0].target
    for library in libraries:
        if (library.target.triple, library.target.cpu) != (target.triple, target.cpu):
            raise EtcError(f"build_firmware: library {library.name} is for {library.target.cpu}, "
                           f"{libraries[0].name} for {target.cpu}")
    if target.cpu != chosen.preset:
        raise EtcError(f"build_firmware: the libraries are for {target.cpu}; board {chosen.machine} has a "
                       f"{chosen.preset} (compile with CpuPartitioner(target='{chosen.preset}'))")
    flags = gcc_flags(target)
    include = [f"-I{FIRMWARE_DIR}"] + [f"-I{d}" for d in include_dirs] + \
        sorted({f"-I{library.directory}" for library in libraries})
    command = [gcc, optimize, *flags, "-ffunction-sections", "-fdata-sections", "-nostartfiles", "-Wall", *include,
               *extra_flags, f"-L{FIRMWARE_DIR}", "-T", chosen.linker_script,
               "-Wl,--gc-sections", "-Wl,--no-warn-rwx-segments",
               *([f"-Wl,--defsym=STACK_SIZE={stack_bytes}"] if stack_bytes else []),
               *[os.path.join(FIRMWARE_DIR, s) for s in SOURCES], *sources,
               *[library.archive for library in libraries], "-Wl,--start-group", "-lm", "-lc", "-Wl,--end-group",
               "-o", output]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise EtcError(f"firmware link failed ({' '.join(command)}):\n{done.stderr.strip()}")
    return Firmware(output, chosen, firmware_sizes(output))


def qemu_command(elf: str, board_name, *, icount: bool = False) -> list:
    chosen = board(board_name)
    return [require_tool("qemu-system-arm"), "-M", chosen.machine, "-nographic", "-monitor", "none", "-serial",
            "none", "-semihosting-config", "enable=on,target=native", *(["-icount", "shift=0"] if icount else []),
            "-kernel", elf]


def run_firmware(elf: str, board_name, *, icount: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    """Boot `elf` on the board under QEMU: its output (`stdout`: QEMU writes the semihosting console to
    stderr, merged here in order) and exit status (main()'s return value; 125 for a fault).
    `icount=True`: one virtual nanosecond per instruction (fw_instructions counts them)."""
    return subprocess.run(qemu_command(elf, board_name, icount=icount), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
