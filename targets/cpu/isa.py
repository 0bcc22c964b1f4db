"""What the cpu target generates code for: the target (triple, CPU, features) and its ISA table.

`resolve_target(spec)` turns "host", a preset name or an LLVM triple into a `CpuTarget`;
`isa_for(target)` gives the one `Isa` row every pass of the cpu pipeline reads its sizes from
(vector lanes, the GEMM register tile, the window kernels' vector width). There is no other
table: a pass that needs a size takes it as an option and `cpu_pipeline` fills the options
from this row, so `etc-opt` can run the same pass with other sizes.

The tiles were chosen by measurement (bench/gemm.py; BENCHMARKS.md "Generated GEMM"):
on AVX-512 a 6 x 64 f32 accumulator (24 of the 32 zmm registers) with B in contiguous 64-wide
column panels (a weight packed when the blob is built, an activation copied per panel:
gemm_match.gather_per_panel) runs at or above OpenBLAS from 256 to 2048; an 8 x 32 tile (16
accumulators) measured 10-25% slower on the same shapes and is gone. K blocks of 256-512 over
packed panels measured no faster than whole K with the panel streamed from L2: not used. The
rows of A are blocked for the L2 only when A is at least the L2's size (`l2_kib`; blocks of
about a quarter of it, at least 256 rows: gemm_match.row_block, where the measurement is):
2048x256x2048 +5-8%, Whisper-tiny's 1500x384x1536 +0-4%; smaller A or shorter blocks measured
no faster or slower.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class CpuTarget:
    """What to generate code for: an LLVM triple, a CPU name and feature string."""

    triple: str
    cpu: str = "generic"
    features: str = ""  # "+avx2,+fma" (LLVM syntax)
    name: str = ""
    # The per-core L2 in KiB when known (the host's, read from the OS by `host_target`); 0: the
    # ISA row's `l2_kib`, a typical core of that ISA. The GEMM's row and K blocks are sized by it.
    l2_kib: int = 0

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]

    @property
    def pointer_bits(self) -> int:
        return 32 if self.arch.startswith(("thumb", "arm", "riscv32", "i386", "i686")) else 64

    @property
    def index_bits(self) -> int:
        return 32 if self.pointer_bits == 32 else 64

    @property
    def required_features(self) -> list[str]:
        """The '+feature' entries: what a CPU must have to run this code."""
        return [f[1:] for f in self.features.split(",") if f.startswith("+")]


@dataclass(frozen=True)
class Isa:
    """The sizes the cpu pipeline's passes use on one kind of CPU (all f32 element counts).

    `gemm_mr` x `gemm_nr` is the register tile of the GEMM microkernel (nr a multiple of the lanes),
    `gemm_kc` its K block: a tile accumulates up to 1.5 kc in registers, longer K is split into
    blocks of about kc (the kc x nr block of B stays in cache); `gemm_kc_strided` the shortest K
    block of a B read in place, whose panel's rows, a row of B apart, may alias in the cache
    (gemm.in_place_k_block); `l2_kib` the per-core L2 those rows may fill half of (the same
    rule: the longest K block whose rows fit), and that a block of A's rows fills a quarter of
    when A is larger (gemm.row_block); `vector_registers` how many vector registers the
    ISA names (the attention kernel sizes its row group by them); `window_width` is how many
    output columns one step of a depthwise/pooling kernel computes. `lanes == 1` means no SIMD
    unit worth tiling for: contractions and windows then run as plain loops (a decision the
    delegation report shows)."""

    name: str
    lanes: int
    gemm_mr: int = 0
    gemm_nr: int = 0
    gemm_kc: int = 0
    gemm_kc_strided: int = 0
    l2_kib: int = 0
    vector_registers: int = 0
    window_width: int = 0
    # Winograd F(2x2,3x3) for a 3x3 stride-1 convolution (passes/winograd_convs.py) when
    # C*O/(C+O) >= `winograd_min_channels` over at least `winograd_min_tiles` 2x2 output tiles (0:
    # never). The tiles are the batched GEMM's columns: never fewer than half a panel (gemm_nr / 2),
    # below which they fill under half of one zero-padded panel (AVX-512, 25 tiles: 1.28-1.46x the
    # direct kernel's time; 44-57x while such narrow contractions were the small path's loops).
    winograd_min_channels: int = 0
    winograd_min_tiles: int = 0
    # The int8 dot-product instruction the int8 GEMM kernel uses (passes/int8_kernels.py): a row's
    # vector ISA with its VNNI extension (`isa_for` reads the target's features), "none" without.
    int8_dot: str = "none"
    # Prefetches around and inside the f32 GEMM tiles' k loops (passes/prefetch_gemm_tiles.py, where
    # the measurements are): they pay on the AVX-512 cores they were measured on, and make an AVX2
    # core's 12-FMA k step issue-bound.
    gemm_prefetch: bool = True
    # A GEMM tile epilogue of at least this many operations per element is applied one tile row at a
    # time (passes/gemm_epilogue_rows.py, where the measurements are); 0: always in registers.
    gemm_epilogue_rows: int = 0
    # A vector division in a kernel epilogue (sigmoid, tanh) as a reciprocal estimate and corrections
    # (passes/expand_math.py, where the measurements are): AVX-512's 14-bit estimate pays; on AVX2
    # the 256-bit division is one op against five.
    reciprocal_estimates: bool = True
    # A window kernel's transcendental epilogue (SiLU, GELU) applied to each channel's finished plane
    # instead of each register block (kernels/window_kernel.py `plane_epilogue_pays`, where the
    # measurements are): AVX2's 16 registers cannot hold its constants beside the taps' weights.
    window_plane_epilogue: bool = False

    @property
    def int8_rows(self) -> int:
        """The int8 kernel's register-tile rows: the GEMM's, but 4 with AVX2's vpmaddwd pairs, whose
        widened operands hold 6 of the 16 ymm registers (ResNet-18 int8 on Zen 3: 4 rows 33.7 ms,
        6 rows 35.1 (the tile spills), 3 rows 40.5)."""
        return 4 if self.int8_dot == "avx2-madd" else self.gemm_mr or 1

    @property
    def vectorizes(self) -> bool:
        return self.lanes > 1 and self.gemm_nr > 0


# One row per vector ISA; `isa_for` picks the widest the target's features allow.
ISA_TABLE = {
    # kc=2048: a tile accumulates K up to 3072 in registers, its 64-wide B panel (up to 768 KiB)
    # read from L2. Measured against kc=128 (the kc x nr block in L1, the accumulators through
    # memory between blocks), one thread: 1024^3 124 -> 160 GFLOP/s, ViT-B's 197x768x3072
    # 122 -> 159, ConvNeXt's 3136x384x96 90 -> 107, ResNet's 3x3 convs 131 -> 139; none slower.
    # Longer K still splits (K=6144: 131 GFLOP/s whole, 147 in blocks of 2048; K=11008: 80 whole).
    # A B read in place keeps whole K unless its rows alias (gemm.in_place_k_block): rows 4 KiB
    # apart (N = 1024, 2048, 3072) share cache sets, and whole K took a 1024^3 activation matmul
    # from 118 to 76 GFLOP/s, 2048^3 109 -> 57; cut to blocks of 256 there (1.12x blocks of 128).
    # L2: 2 MiB per core on Sapphire/Emerald Rapids, 1 MiB on Zen 4/5; the K-block rule was
    # measured on the 2 MiB one. A host target uses the host's own L2 (`host_l2_kib`).
    # Winograd against the direct kernel (conv + BN + ReLU, one thread, this Zen 5 host): 64@56 0.82x
    # the time, 128@28 0.69x, 256@14 0.71x, 64->128@28 0.79x; at the edges 64@14 0.96x, 48@28 0.96x,
    # 256@12 (36 tiles) 0.94x; 32@56 1.05x.
    "avx512": Isa("avx512", lanes=16, gemm_mr=6, gemm_nr=64, gemm_kc=2048, gemm_kc_strided=128, l2_kib=2048,
                  vector_registers=32, window_width=32, winograd_min_channels=32, winograd_min_tiles=49),
    # kc=2048 against 256, measured as the x86-64-v3 preset on this AVX-512 host: 1024^3 68 -> 81
    # GFLOP/s, 2048->512 1x1 conv 61 -> 68, ViT-B's GEMMs 3-6% faster, none slower.
    # Winograd pays more where the direct kernel's FMAs are narrower (the x86-64-v3 preset on this
    # host): 256@14 0.51x, 64@56 0.62x, 32@56 0.75x, 32@28 0.89x, 64@7 (16 tiles) 0.90x, 128@7
    # 0.75x; 16@56 1.04x, 16@112 1.13x.
    # No f32 tile prefetches: on a Zen 3 (AVX2, the first real AVX2 core measured) they cost 10-30%
    # of the GEMMs' time and of the transformers' (prefetch_gemm_tiles.py).
    "avx2": Isa("avx2", lanes=8, gemm_mr=6, gemm_nr=16, gemm_kc=2048, gemm_kc_strided=256, l2_kib=2048,
                vector_registers=16, window_width=16, winograd_min_channels=16, winograd_min_tiles=16,
                gemm_prefetch=False, gemm_epilogue_rows=12, reciprocal_estimates=False, window_plane_epilogue=True),
    # Cortex-A76/A78 (the aarch64 preset): 256-512 KiB of L2 per core; the smaller one.
    # (Winograd: AVX2's thresholds, unmeasured on a NEON core; the QEMU tests check its results.)
    "neon": Isa("neon", lanes=4, gemm_mr=8, gemm_nr=12, gemm_kc=256, gemm_kc_strided=256, l2_kib=256,
                vector_registers=32, window_width=8, winograd_min_channels=16, winograd_min_tiles=16),
    "scalar": Isa("scalar", lanes=1),
}


def isa_for(target: CpuTarget) -> Isa:
    """The ISA row of the widest vector unit `target` has, with the target's own L2 size if known."""
    row = _isa_row(target)
    return replace(row, l2_kib=target.l2_kib) if target.l2_kib and row.l2_kib else row


def _isa_row(target: CpuTarget) -> Isa:
    features = set(target.required_features)
    if target.arch in ("x86_64", "amd64"):
        # int8: the widest dot product the features have (AVX2's vpmaddwd pairs on any AVX2 core)
        dot = ("avx512-vnni" if {"avx512f", "avx512vnni", "avx512bw"} <= features else
               "avx-vnni" if {"avx2", "avxvnni"} <= features else "avx2-madd" if "avx2" in features else "none")
        if "avx512f" in features:
            return replace(ISA_TABLE["avx512"], int8_dot=dot)
        if {"avx2", "fma"} <= features:
            return replace(ISA_TABLE["avx2"], int8_dot=dot)
        return ISA_TABLE["scalar"]
    if target.arch in ("aarch64", "arm64"):
        return ISA_TABLE["neon"]
    return ISA_TABLE["scalar"]


def host_target() -> CpuTarget:
    import llvmlite.binding as llvm

    init_llvm()
    features = llvm.get_host_cpu_features().flatten()
    return CpuTarget(triple=llvm.get_process_triple(), cpu=llvm.get_host_cpu_name(), features=features, name="host",
                     l2_kib=host_l2_kib())


def host_l2_kib(cpu_dir: str = "/sys/devices/system/cpu/cpu0") -> int:
    """This machine's per-core L2 in KiB, from Linux's cache description (0 if the OS does not say).

    The ISA rows assume a typical core, and cores of one ISA differ: the table's 2 MiB (Intel
    Sapphire/Emerald Rapids) is twice an AMD Zen 5's 1 MiB. On a Zen 5 host the row blocks
    sized for 2 MiB left ResNet-50's 1x1 256->1024 convolutions at 14x14 (a 1 MiB weight read
    once per column panel) streaming from L3: 1 MiB blocks measured 0.80x their time with cold
    caches and ResNet-50 0.97x (BENCHMARKS.md's run on that host)."""
    import glob
    import os

    for index in sorted(glob.glob(os.path.join(cpu_dir, "cache", "index*"))):
        try:
            with open(os.path.join(index, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(index, "size")) as f:
                size = f.read().strip()
        except OSError:
            continue
        if level == "2" and kind in ("Unified", "Data"):
            return _kib(size)
    return 0


def _kib(size: str) -> int:
    """"1024K" / "2M" / "524288" (bytes) -> KiB (0 if unreadable)."""
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    try:
        if size[-1:].upper() in units:
            return int(size[:-1]) * units[size[-1:].upper()]
        return int(size) // 1024
    except ValueError:
        return 0


# Triples are LLVM's normalized four-part form (arch-vendor-os-environment): LLVM reads a
# three-part "thumbv7em-none-eabihf" as vendor "none" and OS "eabihf", with no environment, and
# so compiles for the soft-float ABI (calls pass floats in core registers, no Tag_ABI_VFP_args)
# although the triple says eabihf; `normalize_triple` puts any user triple in that form.
# Cortex-M: the hard-float ABI (`-mfloat-abi=hard` firmware); `float_abi="softfp"` compiles the
# same FPU code with the base AAPCS calls of `-mfloat-abi=softfp` firmware (the `eabi` env).
PRESETS = {
    "aarch64": CpuTarget("aarch64-unknown-linux-gnu", "cortex-a76", "+neon,+fp-armv8", "aarch64"),
    "aarch64-linux-gnu": CpuTarget("aarch64-unknown-linux-gnu", "generic", "+neon", "aarch64-linux-gnu"),
    # Cortex-M4F: FPv4-SP-D16 (single precision); Cortex-M7: FPv5-D16 (double precision too).
    "cortex-m4": CpuTarget("thumbv7em-unknown-none-eabihf", "cortex-m4", "", "cortex-m4"),
    "cortex-m7": CpuTarget("thumbv7em-unknown-none-eabihf", "cortex-m7", "", "cortex-m7"),
    # Cortex-M33: Armv8-M mainline, FPv5-SP-D16 and the DSP extension.
    "cortex-m33": CpuTarget("thumbv8m.main-unknown-none-eabihf", "cortex-m33", "", "cortex-m33"),
    # Cortex-M55: Armv8.1-M with MVE (Helium) integer and float vectors.
    "cortex-m55": CpuTarget("thumbv8.1m.main-unknown-none-eabihf", "cortex-m55", "", "cortex-m55"),
    "x86-64-v3": CpuTarget("x86_64-unknown-linux-gnu", "haswell", "+avx2,+fma,+f16c", "x86-64-v3"),
}

# The float ABIs of 32-bit Arm targets, as the triple's environment says them.
FLOAT_ABIS = {"hard": "eabihf", "softfp": "eabi"}

_OS_NAMES = ("linux", "none", "windows", "darwin", "macos", "freebsd", "android", "unknown")


def normalize_triple(triple: str) -> str:
    """An LLVM triple in its four-part form: "thumbv7em-none-eabihf" -> "thumbv7em-unknown-none-eabihf",
    "aarch64-linux-gnu" -> "aarch64-unknown-linux-gnu" (what clang's Triple::normalize does for these
    forms; LLVM's target machine does not normalize, and a three-part triple loses its environment)."""
    parts = triple.split("-")
    if len(parts) == 3 and parts[1] in _OS_NAMES and parts[1] != "unknown":
        return "-".join([parts[0], "unknown", parts[1], parts[2]])
    return triple

# What `cpu="generic"` compiles for: the oldest CPU of each architecture worth targeting, as an
# explicit feature list so the blob records (in `required_features`) exactly what it needs and
# runs on any CPU of that level. x86-64: the x86-64-v2 psABI level (SSE4.2, POPCNT; no AVX), every
# x86-64 CPU since about 2009; aarch64: the armv8-a baseline (NEON and FP are mandatory). Other
# architectures: the triple's own defaults, nothing extra. `features=` given too wins over this.
GENERIC_BASELINES = {
    "x86_64": ("x86-64-v2", "+64bit,+cmov,+cx8,+fxsr,+mmx,+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,"
                            "+cx16,+sahf,+crc32"),
    "aarch64": ("armv8-a", "+neon,+fp-armv8"),
}
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def generic_baseline(arch: str) -> tuple[str, str]:
    """(level name, LLVM feature string) that `cpu="generic"` means for `arch` (("", "") if none)."""
    return GENERIC_BASELINES.get(_ARCH_ALIASES.get(arch, arch), ("", ""))


def resolve_target(spec: "str | CpuTarget | None" = None, *, cpu: str | None = None,
                   features: str | None = None, float_abi: str | None = None) -> CpuTarget:
    """'host' (default), a preset name, a CpuTarget, or an LLVM triple (with optional cpu/features).

    `cpu="generic"` without `features` means the architecture's portable baseline
    (`GENERIC_BASELINES`), not the spec's features: a host or preset target would otherwise keep
    recording the compiling machine's features, and the blob would refuse older CPUs.
    `float_abi` ("hard" or "softfp", 32-bit Arm only): how calls pass floats (see FLOAT_ABIS)."""
    if isinstance(spec, CpuTarget):
        target = spec
    elif spec in (None, "", "host"):
        target = host_target()
    elif spec in PRESETS:
        target = PRESETS[spec]
    else:
        target = CpuTarget(triple=normalize_triple(spec), cpu="generic", features="", name=spec)
    if cpu == "generic" and features is None:
        features = generic_baseline(target.arch)[1]
    if cpu is not None or features is not None:
        # Another CPU than the host's is not the host's cache either: its L2 is the ISA row's.
        target = replace(target, cpu=cpu or target.cpu, features=target.features if features is None else features,
                         l2_kib=target.l2_kib if cpu in (None, target.cpu) else 0)
    if float_abi is not None:
        target = with_float_abi(target, float_abi)
    return target


def with_float_abi(target: CpuTarget, float_abi: str) -> CpuTarget:
    """`target` with the float ABI `float_abi` (its triple's environment: eabihf or eabi)."""
    from etc.errors import LoweringError

    if float_abi not in FLOAT_ABIS:
        raise LoweringError(f"cpu target: float_abi must be one of {', '.join(FLOAT_ABIS)}, not '{float_abi}'")
    parts = normalize_triple(target.triple).split("-")
    if not target.arch.startswith(("thumb", "arm")) or len(parts) != 4 or parts[3] not in FLOAT_ABIS.values():
        raise LoweringError(f"cpu target: float_abi applies to 32-bit Arm EABI targets, not {target.triple}")
    parts[3] = FLOAT_ABIS[float_abi]
    name = target.name if float_abi == "hard" else f"{target.name}+{float_abi}"
    return CpuTarget("-".join(parts), target.cpu, target.features, name)


_LLVM_READY = False


def init_llvm() -> None:
    global _LLVM_READY
    if not _LLVM_READY:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _LLVM_READY = True
