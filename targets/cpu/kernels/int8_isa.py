"""The int8 dot-product ISAs the int8 kernels (`int8_kernel.py`, `dynamic_linear_kernel.py`) are
written for, each as the LLVM intrinsics of its instructions; the ISA row's `int8_dot` names one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DotIsa:
    """The instructions of one int8 dot-product ISA, as LLVM intrinsics."""
    lanes: int  # i32 lanes per vector
    dot: str  # unsigned x signed bytes, 4 per lane, added to the i32 lane ("": two `pairs`, see `Int8Kernel.dot`)
    pack_dwords: str  # two i32 vectors -> one of i16 (signed saturation, per 128-bit lane)
    pack_words: str  # two i16 vectors -> one of i8 (signed saturation, per 128-bit lane)
    rounding_convert: str | None  # f32 -> i32 rounding to nearest even in one instruction (None: two)
    pairs: str = ""  # without `dot`: i16 x i16, each lane's two products summed into i32 (vpmaddwd)


DOTS = {
    "avx512-vnni": DotIsa(16, "llvm.x86.avx512.vpdpbusd.512", "llvm.x86.avx512.packssdw.512",
                          "llvm.x86.avx512.packsswb.512", "llvm.x86.avx512.mask.cvtps2dq.512"),
    "avx-vnni": DotIsa(8, "llvm.x86.avx512.vpdpbusd.256", "llvm.x86.avx2.packssdw", "llvm.x86.avx2.packsswb", None),
    # AVX2 without VNNI (Zen 1-3, Skylake to Comet Lake): vpdpbusd as two vpmaddwd on the even
    # and the odd bytes widened to i16, exact (a pair of u8 x s8 products fits i32; vpmaddubsw's
    # i16 sums would saturate)
    "avx2-madd": DotIsa(8, "", "llvm.x86.avx2.packssdw", "llvm.x86.avx2.packsswb", None,
                        pairs="llvm.x86.avx2.pmadd.wd"),
}
