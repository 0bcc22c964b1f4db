"""How a loader without LLVM checks a CPU feature: LLVM feature name -> a hardware probe.

A cpu blob records the LLVM features its code was compiled for (`required_features`). etc's
Python runtime compares them with llvmlite's host feature list; the C++ ExecuTorch backend
(`runtime/executorch_backend/`) has no LLVM, so the blob also carries, per feature, the bit that
says whether this CPU has it, and the C++ loader only evaluates bits:

- x86-64: a CPUID bit (leaf, subleaf, register, bit), plus the XCR0 state bits the OS must save for
  the feature's registers (AVX: YMM; AVX-512: opmask and ZMM; AMX: tile state), as LLVM's own host
  detection (`sys::getHostCPUFeatures`) decides them;
- AArch64 Linux: a bit of the kernel's AT_HWCAP / AT_HWCAP2 auxiliary vector (`asm/hwcap.h`).

A feature this table does not know gets the probe `UNPROBED`: the C++ loader then refuses the blob
("cannot check feature X") rather than run code it cannot vouch for; etc's Python runtime still
checks it by name. The table covers every feature LLVM's host detection reports on x86-64 and
the features of the AArch64 presets and of Linux's cpuinfo, so a blob compiled for a real CPU has
a probe for each.
"""

from __future__ import annotations

from typing import NamedTuple


class Probe(NamedTuple):
    kind: int  # NONE, X86_CPUID or LINUX_HWCAP
    leaf: int = 0  # x86: CPUID leaf (EAX); hwcap: 1 (AT_HWCAP) or 2 (AT_HWCAP2)
    subleaf: int = 0  # x86: ECX
    register: int = 0  # x86: EAX, EBX, ECX, EDX = 0..3
    bit: int = 0
    os_state: int = 0  # x86: XCR0 bits that must all be set (the OS saves those registers)


NONE, X86_CPUID, LINUX_HWCAP = 0, 1, 2
UNPROBED = Probe(NONE)
EAX, EBX, ECX, EDX = range(4)
XCR0_AVX = 0x6  # SSE and YMM state
XCR0_AVX512 = 0xE6  # + opmask, ZMM_Hi256, Hi16_ZMM
XCR0_AMX = 0x60000  # XTILECFG and XTILEDATA


def _x86(leaf, subleaf, register, bit, os_state=0):
    return Probe(X86_CPUID, leaf, subleaf, register, bit, os_state)


# LLVM's x86 feature names (llvm/lib/TargetParser/Host.cpp, getHostCPUFeatures).
X86 = {
    "cx8": _x86(1, 0, EDX, 8), "cmov": _x86(1, 0, EDX, 15), "mmx": _x86(1, 0, EDX, 23),
    "fxsr": _x86(1, 0, EDX, 24), "sse": _x86(1, 0, EDX, 25), "sse2": _x86(1, 0, EDX, 26),
    "sse3": _x86(1, 0, ECX, 0), "pclmul": _x86(1, 0, ECX, 1), "ssse3": _x86(1, 0, ECX, 9),
    "fma": _x86(1, 0, ECX, 12, XCR0_AVX), "cx16": _x86(1, 0, ECX, 13), "sse4.1": _x86(1, 0, ECX, 19),
    "sse4.2": _x86(1, 0, ECX, 20), "crc32": _x86(1, 0, ECX, 20), "movbe": _x86(1, 0, ECX, 22),
    "popcnt": _x86(1, 0, ECX, 23), "aes": _x86(1, 0, ECX, 25), "xsave": _x86(1, 0, ECX, 26, XCR0_AVX),
    "avx": _x86(1, 0, ECX, 28, XCR0_AVX), "f16c": _x86(1, 0, ECX, 29, XCR0_AVX), "rdrnd": _x86(1, 0, ECX, 30),
    "sahf": _x86(0x80000001, 0, ECX, 0), "lzcnt": _x86(0x80000001, 0, ECX, 5), "sse4a": _x86(0x80000001, 0, ECX, 6),
    "prfchw": _x86(0x80000001, 0, ECX, 8), "xop": _x86(0x80000001, 0, ECX, 11, XCR0_AVX),
    "lwp": _x86(0x80000001, 0, ECX, 15), "fma4": _x86(0x80000001, 0, ECX, 16, XCR0_AVX),
    "tbm": _x86(0x80000001, 0, ECX, 21), "mwaitx": _x86(0x80000001, 0, ECX, 29), "64bit": _x86(0x80000001, 0, EDX, 29),
    "clzero": _x86(0x80000008, 0, EBX, 0), "rdpru": _x86(0x80000008, 0, EBX, 4),
    "wbnoinvd": _x86(0x80000008, 0, EBX, 9),
    "fsgsbase": _x86(7, 0, EBX, 0), "sgx": _x86(7, 0, EBX, 2), "bmi": _x86(7, 0, EBX, 3),
    "avx2": _x86(7, 0, EBX, 5, XCR0_AVX), "bmi2": _x86(7, 0, EBX, 8), "invpcid": _x86(7, 0, EBX, 10),
    "rtm": _x86(7, 0, EBX, 11), "avx512f": _x86(7, 0, EBX, 16, XCR0_AVX512), "avx512dq": _x86(7, 0, EBX, 17, XCR0_AVX512),
    "rdseed": _x86(7, 0, EBX, 18), "adx": _x86(7, 0, EBX, 19), "avx512ifma": _x86(7, 0, EBX, 21, XCR0_AVX512),
    "clflushopt": _x86(7, 0, EBX, 23), "clwb": _x86(7, 0, EBX, 24), "avx512cd": _x86(7, 0, EBX, 28, XCR0_AVX512),
    "sha": _x86(7, 0, EBX, 29), "avx512bw": _x86(7, 0, EBX, 30, XCR0_AVX512), "avx512vl": _x86(7, 0, EBX, 31, XCR0_AVX512),
    "avx512vbmi": _x86(7, 0, ECX, 1, XCR0_AVX512), "pku": _x86(7, 0, ECX, 4), "waitpkg": _x86(7, 0, ECX, 5),
    "avx512vbmi2": _x86(7, 0, ECX, 6, XCR0_AVX512), "shstk": _x86(7, 0, ECX, 7), "gfni": _x86(7, 0, ECX, 8),
    "vaes": _x86(7, 0, ECX, 9, XCR0_AVX), "vpclmulqdq": _x86(7, 0, ECX, 10, XCR0_AVX),
    "avx512vnni": _x86(7, 0, ECX, 11, XCR0_AVX512), "avx512bitalg": _x86(7, 0, ECX, 12, XCR0_AVX512),
    "avx512vpopcntdq": _x86(7, 0, ECX, 14, XCR0_AVX512), "rdpid": _x86(7, 0, ECX, 22), "kl": _x86(7, 0, ECX, 23),
    "cldemote": _x86(7, 0, ECX, 25), "movdiri": _x86(7, 0, ECX, 27), "movdir64b": _x86(7, 0, ECX, 28),
    "enqcmd": _x86(7, 0, ECX, 29),
    "uintr": _x86(7, 0, EDX, 5), "avx512vp2intersect": _x86(7, 0, EDX, 8, XCR0_AVX512), "serialize": _x86(7, 0, EDX, 14),
    "tsxldtrk": _x86(7, 0, EDX, 16), "pconfig": _x86(7, 0, EDX, 18), "amx-bf16": _x86(7, 0, EDX, 22, XCR0_AMX),
    "avx512fp16": _x86(7, 0, EDX, 23, XCR0_AVX512), "amx-tile": _x86(7, 0, EDX, 24, XCR0_AMX),
    "amx-int8": _x86(7, 0, EDX, 25, XCR0_AMX),
    "sha512": _x86(7, 1, EAX, 0), "sm3": _x86(7, 1, EAX, 1), "sm4": _x86(7, 1, EAX, 2), "raoint": _x86(7, 1, EAX, 3),
    "avxvnni": _x86(7, 1, EAX, 4, XCR0_AVX), "avx512bf16": _x86(7, 1, EAX, 5, XCR0_AVX512),
    "cmpccxadd": _x86(7, 1, EAX, 7), "amx-fp16": _x86(7, 1, EAX, 21, XCR0_AMX), "hreset": _x86(7, 1, EAX, 22),
    "avxifma": _x86(7, 1, EAX, 23, XCR0_AVX), "avxvnniint8": _x86(7, 1, EDX, 4, XCR0_AVX),
    "avxneconvert": _x86(7, 1, EDX, 5, XCR0_AVX), "amx-complex": _x86(7, 1, EDX, 8, XCR0_AMX),
    "avxvnniint16": _x86(7, 1, EDX, 10, XCR0_AVX), "prefetchi": _x86(7, 1, EDX, 14), "usermsr": _x86(7, 1, EDX, 15),
    "xsaveopt": _x86(0xD, 1, EAX, 0, XCR0_AVX), "xsavec": _x86(0xD, 1, EAX, 1, XCR0_AVX),
    "xsaves": _x86(0xD, 1, EAX, 3, XCR0_AVX), "ptwrite": _x86(0x14, 0, EBX, 4), "widekl": _x86(0x19, 0, EBX, 2),
}


def _hwcap(word, bit):
    return Probe(LINUX_HWCAP, word, 0, 0, bit)


# LLVM's AArch64 feature names -> Linux's HWCAP_* / HWCAP2_* bits (arch/arm64/include/uapi/asm/hwcap.h).
AARCH64_LINUX = {
    "fp-armv8": _hwcap(1, 0), "neon": _hwcap(1, 1), "aes": _hwcap(1, 3), "sha2": _hwcap(1, 6), "crc": _hwcap(1, 7),
    "lse": _hwcap(1, 8), "fullfp16": _hwcap(1, 9), "rdm": _hwcap(1, 12), "jsconv": _hwcap(1, 13),
    "complxnum": _hwcap(1, 14), "rcpc": _hwcap(1, 15), "ccpp": _hwcap(1, 16), "sha3": _hwcap(1, 17),
    "sm4": _hwcap(1, 19), "dotprod": _hwcap(1, 20), "sve": _hwcap(1, 22), "fp16fml": _hwcap(1, 23),
    "dit": _hwcap(1, 24), "lse2": _hwcap(1, 25), "rcpc-immo": _hwcap(1, 26), "flagm": _hwcap(1, 27),
    "ssbs": _hwcap(1, 28), "sb": _hwcap(1, 29), "pauth": _hwcap(1, 30),
    "ccdp": _hwcap(2, 0), "sve2": _hwcap(2, 1), "sve2-aes": _hwcap(2, 2), "sve2-bitperm": _hwcap(2, 4),
    "sve2-sha3": _hwcap(2, 5), "sve2-sm4": _hwcap(2, 6), "altnzcv": _hwcap(2, 7), "fptoint": _hwcap(2, 8),
    "f32mm": _hwcap(2, 10), "f64mm": _hwcap(2, 11), "i8mm": _hwcap(2, 13), "bf16": _hwcap(2, 14),
    "rand": _hwcap(2, 16), "bti": _hwcap(2, 17), "mte": _hwcap(2, 18),
}

TABLES = {62: X86, 183: AARCH64_LINUX}  # ELF e_machine -> its table


def probe(machine: int, feature: str) -> Probe:
    """The probe of LLVM feature `feature` on ELF machine `machine` (UNPROBED: no table has it)."""
    return TABLES.get(machine, {}).get(feature, UNPROBED)
