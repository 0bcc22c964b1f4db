"""Runtime side of the `cpu` target: link a blob's object code in-process and call it.

`CompiledFunction(blob_bytes)` is usable on its own (numpy in, numpy out);
`CpuRuntimeBackend` adapts it to the runtime's backend interface
(`init(blob, compile_specs) -> handle`, `execute(handle, args)` with the
inputs then the outputs, as numpy views into planned memory, written in place).

Safety: nothing from a blob is used before its CRC matches (`blob.deserialize`,
which also checks its sections and metadata); its object code's sections,
symbols and relocations are range-checked (`elf.Elf`) and its entry must be a
function in executable code. Before linking, the blob's triple must match this
process's architecture and OS, and every feature the code was compiled for
(`required_features`) must be present on this CPU (llvmlite's host feature
list); otherwise `BackendError` names what is missing, instead of the process
dying of an illegal instruction.

Linking: on x86-64 Linux the runtime loads the ELF object itself
(`load_elf_x86_64`): all its sections, its GOT and call stubs in one mapping,
so the small code model's 32-bit displacements between code and constants
always reach, however fragmented the process's address space is (MCJIT maps
them separately and, when they land 2 GiB apart, LLVM aborts the process).
Other hosts link with llvmlite's MCJIT, after `check_linkable` has turned what
it would abort on (a symbol this process lacks, non-PIC or oversized code) into
a BackendError.

Per call: the argument pointer array is filled in place (ctypes) and the entry
is called; ctypes releases the GIL during the call. No allocation in steady
state: constants point into the blob, the scratch buffer is allocated once per
handle (per thread when called from several threads), outputs are the
caller's arrays. A slot is checked and re-pointed only when the caller passes
a different array object than last time (the runtime's planned-arena views are
the same objects every call; a caller's input it binds in place and the fresh
output arrays it passes are new ones). An input that is not C-contiguous or not
of the compiled dtype, or that overlaps an output, is copied (once per call;
`notes` records it).

Threads: a blob compiled with `num_threads > 1` has the threaded entry of
`parallel.py` (the object still needs only libc/libm: no OpenMP runtime). The
handle keeps `num_threads - 1` worker threads; each call runs thread 0 on the
caller and the others on the workers, all on the same buffers, synchronized by
the code's own barrier (ctypes drops the GIL during the call). The runtime's
compile spec `num_threads` may lower or raise the count (1: one thread runs
everything). Flat-entry blobs run single-threaded; independent calls from
several Python threads still run concurrently, each with its own scratch.

Profiling: a blob built with `CpuPartitioner(profile=True)` reads a cycle counter between its
dispatch regions (`passes/profile_regions.py`) into a slice of the scratch buffer, for every call.
The counter's rate is calibrated once at load against `time.perf_counter_ns` (two calls at least
20 ms apart); `CpuRuntimeBackend.execute_profiled`, which the runtime calls while it records
(`enable_etdump=True`), reports each region's time and partition ops (`CompiledFunction.regions_ns`).
A blob built without profiling has no counters and no slice: `execute_profiled` reports nothing.
"""

from __future__ import annotations

import ctypes
import math
import sys
import threading

import numpy as np

from etc.errors import BackendError
from etc.targets.cpu import blob as blob_format
from etc.targets.cpu import elf as elf_format

BACKEND_ID = "cpu"

_LLVM_LOCK = threading.Lock()
_ENGINES: list = []  # keep every engine (and so its code) alive for the process lifetime


def _llvm():
    # Self-contained: the runtime needs no compiler module (nor MLIR) to link and run a blob.
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def host_features() -> set[str]:
    llvm = _llvm()
    return {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}


def _arch_os(triple: str) -> tuple[str, str]:
    parts = triple.split("-")
    arch = parts[0]
    os_name = parts[2] if len(parts) > 2 else ""
    if len(parts) == 3 and parts[1] in ("linux", "none", "windows", "darwin"):  # arch-os-env form
        os_name = parts[1]
    return arch, os_name


def check_host_compatible(metadata: dict) -> None:
    """Raise BackendError unless this process can run code built for `metadata`'s triple and features."""
    llvm = _llvm()
    host = llvm.get_process_triple()
    want_arch, want_os = _arch_os(metadata["triple"])
    host_arch, host_os = _arch_os(host)
    aliases = {"amd64": "x86_64", "arm64": "aarch64"}
    if aliases.get(want_arch, want_arch) != aliases.get(host_arch, host_arch) or (want_os or host_os) and \
            want_os.split(".")[0] not in host_os and host_os.split(".")[0] not in want_os:
        raise BackendError(f"cpu delegate was compiled for {metadata['triple']}; this process runs on {host} "
                           "(recompile with target='host' or a matching triple)")
    have = host_features()
    missing = sorted(set(metadata.get("required_features", [])) - have)
    if missing:
        # What to suggest: cpu='generic' (the architecture's baseline) when this CPU has it; below
        # the baseline, only the bare architecture (features='') runs here.
        from etc.targets.cpu.isa import generic_baseline

        level, baseline = generic_baseline(aliases.get(host_arch, host_arch))
        below = sorted({f[1:] for f in baseline.split(",") if f.startswith("+")} - have)
        portable = (f"for this architecture's bare baseline with CpuPartitioner(cpu='generic', features='') "
                    f"(this CPU lacks {'+' + ', +'.join(below)} of the {level} level cpu='generic' targets)"
                    if below else
                    f"portably with CpuPartitioner(cpu='generic') (the {level or 'architecture'} baseline; "
                    "CpuPartitioner(cpu='generic', features='') for the bare architecture)")
        raise BackendError(
            f"cpu delegate needs CPU feature(s) {', '.join('+' + m for m in missing)} that this CPU "
            f"({llvm.get_host_cpu_name()}) lacks; recompile on this machine (CpuPartitioner(), the host's "
            f"features), or {portable}")


# What MCJIT's ELF linker aborts the process on (report_fatal_error or an assertion) rather than
# reporting: checked before linking, so a blob it cannot link is a BackendError instead.
_SMALL_MODEL_LIMIT = 1 << 31  # 32-bit displacements between the sections of one object
_ABSOLUTE_32 = {"x86_64": {10: "R_X86_64_32", 11: "R_X86_64_32S"}}  # need the object below 4 GiB
_SHF_WRITE, _SHF_EXECINSTR, _SHT_NOBITS = elf_format.SHF_WRITE, elf_format.SHF_EXECINSTR, elf_format.SHT_NOBITS
_Elf = elf_format.Elf


def _process_defines(name: str, llvm=None) -> int:
    """The address MCJIT would resolve `name` to (0: none): the process's global symbols (dlsym on
    the process), or a symbol added to LLVM explicitly."""
    if llvm is not None and llvm.address_of_symbol(name):
        return llvm.address_of_symbol(name)
    try:
        return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0
    except (AttributeError, OSError):
        return 0


def elf_object_info(data: bytes) -> dict | None:
    """A 64-bit little-endian ELF relocatable's undefined symbols, relocation types and loaded
    bytes (its SHF_ALLOC sections, aligned); None for anything else (nothing is checked then)."""
    if not _Elf.is_elf64le(data):
        return None
    elf = _Elf(data)
    loaded = 0
    for i in elf.allocated():
        align = max(elf.sections[i][8], 1)
        loaded = (loaded + align - 1) // align * align + elf.sections[i][5]
    return {"machine": elf.machine, "undefined": elf.undefined(), "relocations": {r[2] for r in elf.relocations},
            "loaded_bytes": loaded}


def check_linkable(object_bytes: bytes, llvm=None) -> None:
    """Raise BackendError for an object MCJIT would abort the process on: a symbol this process
    does not define (LLVM: "Program used external function ... which could not be resolved"),
    sections too big for 32-bit displacements, absolute 32-bit relocations (non-PIC code)."""
    info = elf_object_info(object_bytes)
    if info is None:
        return
    missing = sorted(name for name in info["undefined"] if not _process_defines(name, llvm))
    if missing:
        raise BackendError(f"cpu delegate: its object code calls {', '.join(missing)}, which this process "
                           "does not define (the cpu target's code may use libc/libm only)")
    if info["loaded_bytes"] >= _SMALL_MODEL_LIMIT:
        raise BackendError(f"cpu delegate: its object code is {info['loaded_bytes']} bytes; the small code "
                           f"model it is compiled for reaches {_SMALL_MODEL_LIMIT} bytes at most")
    absolute = sorted(_ABSOLUTE_32.get(info["machine"], {}).get(t) for t in info["relocations"]
                      if t in _ABSOLUTE_32.get(info["machine"], {}))
    if absolute:
        raise BackendError(f"cpu delegate: its object code has {', '.join(absolute)} relocations (not "
                           "position-independent); recompile it with reloc=pic")


# ------------------------------------------------------------- the x86-64 ELF loader
_IMAGES: list = []  # (address, size) of every loaded image: code stays mapped for the process lifetime
_PAGE = 4096


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def load_elf_x86_64(object_bytes: bytes, entry: str) -> int:
    """Load a relocatable x86-64 ELF object into one mapping and return `entry`'s address.

    Why not MCJIT: its memory manager maps code, read-only data and the GOT of one object
    separately, wherever mmap finds room, while the small code model reaches constants and
    GOT entries with 32-bit displacements. In a big, fragmented process (after compiling a
    ViT-B, say) those land more than 2 GiB apart and LLVM stops on `Assertion
    isInt<32>(RealOffset)` (SIGABRT); without assertions it would link wrong code. (llvmlite's
    own memory manager reserves one block, but asserts when the x86-64 linker adds its GOT.)
    Here every section, the GOT and the call stubs are one mapping: every displacement is
    within it. Anything unexpected is a BackendError.

    Layout: [code sections | call stubs] [read-only sections | GOT] [writable sections], each
    part page-aligned; code ends read+execute, read-only data read-only.
    """
    import struct

    elf = _Elf(object_bytes)  # every offset, index and size below is checked there
    elf.entry_symbol(entry)
    secs = elf.sections
    parts = {"code": [], "ro": [], "rw": []}
    for i in elf.allocated():
        flags = secs[i][2]
        parts["code" if flags & _SHF_EXECINSTR else "rw" if flags & _SHF_WRITE else "ro"].append(i)
    externals = sorted(elf.undefined())
    where = {}  # section index -> offset in the image
    offset = 0
    bounds = {}
    for part in ("code", "ro", "rw"):
        start = offset
        for i in parts[part]:
            align = max(secs[i][8], 1)
            offset = (offset + align - 1) // align * align
            where[i] = offset
            offset += secs[i][5]
        if part == "code":
            offset = (offset + 15) // 16 * 16
            stubs = offset
            offset += 16 * len(externals)
        if part == "ro":
            offset = (offset + 7) // 8 * 8
            got = offset
            offset += 8 * len(externals)
        offset = (offset + _PAGE - 1) // _PAGE * _PAGE
        bounds[part] = (start, offset)
    size = max(offset, _PAGE)
    if size >= _SMALL_MODEL_LIMIT:
        raise BackendError(f"cpu delegate: its object code needs {size} bytes; the small code model it is "
                           f"compiled for reaches {_SMALL_MODEL_LIMIT} bytes at most")
    addresses = {}
    for name in externals:
        addresses[name] = _process_defines(name)
        if not addresses[name]:
            raise BackendError(f"cpu delegate: its object code calls {name}, which this process does not define "
                               "(the cpu target's code may use libc/libm only)")
    libc = _libc()
    PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
    base = libc.mmap(None, size, PROT_READ | PROT_WRITE, 0x02 | 0x20, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    if base in (None, ctypes.c_void_p(-1).value):
        raise BackendError(f"cpu delegate: cannot map {size} bytes for its code (errno {ctypes.get_errno()})")
    image = (ctypes.c_char * size).from_address(base)
    try:
        for i, off in where.items():
            if secs[i][1] != _SHT_NOBITS:
                image[off:off + secs[i][5]] = object_bytes[secs[i][4]:secs[i][4] + secs[i][5]]
        got_of, stub_of = {}, {}
        for k, name in enumerate(externals):
            got_of[name] = base + got + 8 * k
            stub_of[name] = base + stubs + 16 * k
            struct.pack_into("<Q", image, got + 8 * k, addresses[name])
            # jmp *disp32(%rip) to the GOT slot
            struct.pack_into("<BBi", image, stubs + 16 * k, 0xFF, 0x25, got_of[name] - (stub_of[name] + 6))

        def symbol_address(index):
            name, shndx, value = elf.symbols[index]
            if shndx == 0:
                return addresses[name], name
            if shndx == 0xFFF1:  # SHN_ABS
                return value, name
            if shndx not in where:
                raise BackendError(f"cpu delegate: its object code refers to '{name}' in a section it does not load")
            return base + where[shndx] + value, name

        for target, r_offset, rtype, sym, addend in elf.relocations:
            if target not in where or rtype == 0:
                continue  # relocations of debug information (not loaded)
            if addend is None:
                raise BackendError("cpu delegate: REL relocations (without addends) are not supported on x86-64")
            at = where[target] + r_offset
            place = base + at
            s, name = symbol_address(sym) if sym else (0, "")
            if rtype == 1:  # R_X86_64_64: S + A
                struct.pack_into("<Q", image, at, (s + addend) & (2 ** 64 - 1))
                continue
            if rtype == 24:  # R_X86_64_PC64: S + A - P
                struct.pack_into("<q", image, at, s + addend - place)
                continue
            if rtype == 4 and name in stub_of:  # R_X86_64_PLT32 to an external function: its stub
                value = stub_of[name] + addend - place
            elif rtype in (2, 4):  # R_X86_64_PC32, PLT32 to a local function: S + A - P
                value = s + addend - place
            elif rtype in (9, 41, 42):  # GOTPCREL, GOTPCRELX, REX_GOTPCRELX: G + GOT + A - P
                if name not in got_of:
                    raise BackendError(f"cpu delegate: GOT relocation to local symbol '{name}' is not supported")
                value = got_of[name] + addend - place
            elif rtype in (10, 11):
                raise BackendError("cpu delegate: its object code has absolute 32-bit relocations (not "
                                   "position-independent); recompile it with reloc=pic")
            else:
                raise BackendError(f"cpu delegate: x86-64 relocation type {rtype} is not supported by the loader")
            if not -(1 << 31) <= value < (1 << 31):
                raise BackendError(f"cpu delegate: relocation to '{name}' out of 32-bit range ({value})")
            struct.pack_into("<i", image, at, value)
        address, _ = symbol_address(elf.entry_symbol(entry))
        for part, prot in (("code", PROT_READ | PROT_EXEC), ("ro", PROT_READ)):
            lo, hi = bounds[part]
            if hi > lo and libc.mprotect(base + lo, hi - lo, prot) != 0:
                raise BackendError(f"cpu delegate: mprotect of its {part} failed (errno {ctypes.get_errno()})")
    except BaseException:
        libc.munmap(base, size)
        raise
    _IMAGES.append((base, size))
    return address


def _address(array: np.ndarray) -> int:
    """The data pointer of a C-contiguous array: through ctypes' buffer protocol (a third of the cost
    of `array.ctypes.data`, which a read-only or empty array still takes)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


def aligned_empty(nbytes: int, alignment: int = 64) -> np.ndarray:
    """`nbytes` uninitialized bytes starting at a multiple of `alignment`. The scratch buffer: the code
    places its buffers at 64-byte offsets inside it for aligned vector access, which only holds when the
    base is aligned too (numpy's allocations are 16-byte aligned; ResNet-8 ran 25% slower on the other
    three of four bases)."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


class CompiledFunction:
    """A linked cpu blob: call with input arrays, get output arrays (or pass `outputs`)."""

    def __init__(self, data: bytes | blob_format.CpuBlob, compile_specs: dict | None = None):
        try:
            self.blob = data if isinstance(data, blob_format.CpuBlob) else blob_format.deserialize(data)
        except blob_format.BlobFormatError as e:
            raise BackendError(f"cpu delegate blob rejected: {e}") from None
        meta = self.blob.metadata
        check_host_compatible(meta)
        self.specs = dict(compile_specs or {})
        self.notes: list[str] = []
        self.args = meta["args"]
        self.inputs = [a for a in self.args if a["kind"] == "input"]
        self.outputs = [a for a in self.args if a["kind"] == "output"]
        # Dynamically shaped inputs/outputs: their run-time dims travel in the `dims` arguments.
        self._dims_in = [(i, d) for i, a in enumerate(self.inputs) for d in a.get("dynamic", ())]
        self._dims_out = [(i, d) for i, a in enumerate(self.outputs) for d in a.get("dynamic", ())]
        self._dynamic_outputs = sorted({i for i, _ in self._dims_out})
        # Per-call work decided here: each input/output slot's (argument index, spec, name, writable),
        # and each spec's shape and dtype as `run` compares them.
        self._n_in, self._n_out = len(self.inputs), len(self.outputs)
        positions = {id(a): i for i, a in enumerate(self.args)}
        self._compiled = {id(a): (tuple(a["shape"]), np.dtype(a["dtype"])) for a in self.inputs + self.outputs}
        # Slot pairs (output slot, input slot) the code computes in one buffer (blob `in_place`):
        # the KV cache the program passes as both; they may overlap, no other pair may.
        input_slot = {a["name"]: k for k, a in enumerate(self.inputs)}
        output_slot = {a["name"]: self._n_in + k for k, a in enumerate(self.outputs)}
        self._one_buffer = {(output_slot[str(o)], input_slot[str(i)]) for o, i in meta.get("in_place", [])}
        self._io = [(positions[id(a)], a, f"input {k}", False, *self._compiled[id(a)])
                    for k, a in enumerate(self.inputs)] + \
                   [(positions[id(a)], a, f"output {k}", True, *self._compiled[id(a)])
                    for k, a in enumerate(self.outputs)]
        self.threaded = meta.get("entry_abi", "flat") == "threaded"
        self.num_threads = max(1, int(self.specs.get("num_threads", meta.get("num_threads", 1)) or 1))
        if not self.threaded:
            self.num_threads = 1
        self._address = self._link(meta["entry"])
        if self.threaded:
            self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_ssize_t,
                                        ctypes.c_void_p)(self._address)
            self._barrier = np.zeros(2, dtype=np.int32)
            self._call_lock = threading.Lock()
            self._pool = None
            if self.num_threads > 1:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.num_threads - 1, thread_name_prefix="etc-cpu")
        else:
            self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._address)
        # Constant pointers: views into the blob (kept alive by self.blob).
        self._constants = {a["name"]: np.require(self.blob.constant(a["name"]), requirements="C")
                           for a in self.args if a["kind"] == "constant"}
        self._local = threading.local()
        self._threads_now = self.num_threads  # how many threads a call uses (calibrated below)
        if self.num_threads > 1 and self.specs.get("calibrate_threads", "1") != "0":
            self._calibrate_threads()
        self.profile = meta.get("profile")
        if self.profile is not None:
            self._regions = [(r["name"], tuple(r.get("ops", ()))) for r in self.profile["regions"]]
            self._counter_bytes = (self.profile["offset"], self.profile["offset"] + 8 * (len(self._regions) + 1))
            self.ns_per_tick = self._calibrate_counter()

    def _counters(self) -> np.ndarray:
        """The counter reads of this thread's last call (profiled blobs): start, then after each region."""
        local = self._local
        view = getattr(local, "counters", None)
        if view is None:
            self._slots()
            lo, hi = self._counter_bytes
            view = local.counters = local.scratch[lo:hi].view(np.int64)
        return view

    def _calibrate_counter(self, span_ns: int = 20_000_000) -> float:
        """ns per counter tick: the counter's last read in two calls at least `span_ns` apart, against
        `time.perf_counter_ns` right after each returns (the gap between the two is the same both times)."""
        import time

        inputs = [np.zeros(a["shape"], dtype=a["dtype"]) for a in self.inputs]
        outputs = [np.empty(a["shape"], dtype=a["dtype"]) for a in self.outputs]
        self.run(inputs, outputs)
        first_ns, first = time.perf_counter_ns(), int(self._counters()[-1])
        time.sleep(span_ns / 1e9)
        self.run(inputs, outputs)
        last_ns, last = time.perf_counter_ns(), int(self._counters()[-1])
        if last <= first or last_ns - first_ns < span_ns:
            raise BackendError(f"cpu delegate: its profiling counter did not advance ({first} -> {last} over "
                               f"{last_ns - first_ns} ns); this CPU has no usable cycle counter")
        return (last_ns - first_ns) / (last - first)

    def regions_ns(self, reads: list | None = None) -> list:
        """[(region name, ns, partition op indices)] from a profiled blob's counter reads (`counter_reads()`;
        default: this thread's last call's)."""
        reads = self.counter_reads() if reads is None else reads
        scale = self.ns_per_tick
        return [(name, round((reads[i + 1] - reads[i]) * scale), ops) for i, (name, ops) in enumerate(self._regions)]

    def counter_reads(self) -> list:
        """A copy of this thread's last call's counter reads (profiled blobs)."""
        return self._counters().tolist()

    def _calibrate_threads(self, repeats: int = 3) -> None:
        """Waking the other threads costs tens of microseconds per call: a small delegate runs
        faster on one. Time both ways once, at load, on scratch buffers (the code reads any
        values), and keep the faster: `num_threads` is the most this delegate may use."""
        import time

        inputs = [np.zeros(a["shape"], dtype=a["dtype"]) for a in self.inputs]
        outputs = [np.empty(a["shape"], dtype=a["dtype"]) for a in self.outputs]
        best = {}
        for threads in (1, self.num_threads, 1, self.num_threads):
            self._threads_now = threads
            for _ in range(repeats):
                start = time.perf_counter()
                self.run(inputs, outputs)
                elapsed = time.perf_counter() - start
                best[threads] = min(best.get(threads, elapsed), elapsed)
        chosen = min(best, key=best.get)
        self._threads_now = chosen
        if chosen != self.num_threads:
            self.notes.append(f"threads: 1 of {self.num_threads} (measured at load: {best[1] * 1e6:.0f} us "
                              f"on one, {best[self.num_threads] * 1e6:.0f} us on {self.num_threads})")

    def _link(self, entry: str) -> int:
        obj = self.blob.object_bytes
        info = elf_object_info(obj)
        if info is not None and info["machine"] == "x86_64" and sys.platform.startswith("linux"):
            return load_elf_x86_64(obj, entry)  # see there: MCJIT aborts on far-apart sections
        if _Elf.is_elf64le(obj):
            _Elf(obj).entry_symbol(entry)
        llvm = _llvm()
        with _LLVM_LOCK:
            check_linkable(obj, llvm)
            try:
                target = llvm.Target.from_default_triple()
                tm = target.create_target_machine(codemodel="default", reloc="pic")
                empty = llvm.parse_assembly("")
                engine = llvm.create_mcjit_compiler(empty, tm)
                engine.add_object_file(llvm.ObjectFileRef.from_data(self.blob.object_bytes))
                engine.finalize_object()
                address = engine.get_function_address(entry)
            except Exception as e:  # noqa: BLE001
                raise BackendError(f"cpu delegate: linking its object code failed: {e}") from None
            if not address:
                raise BackendError(f"cpu delegate: entry symbol '{entry}' not found in its object code")
            _ENGINES.append(engine)
        return address

    def _slots(self):
        """Per-thread pointer array, scratch buffer and dims buffers (allocated once per thread), and
        what each input/output slot was last bound to (`bound`: the array object; `ranges`: its bytes)."""
        local = self._local
        if not hasattr(local, "ptrs"):
            local.ptrs = (ctypes.c_void_p * len(self.args))()
            local.scratch = None
            for i, a in enumerate(self.args):
                if a["kind"] == "constant":
                    local.ptrs[i] = self._constants[a["name"]].ctypes.data
                elif a["kind"] == "scratch":
                    local.scratch = aligned_empty(a["shape"][0])
                    local.ptrs[i] = local.scratch.ctypes.data
                elif a["kind"] == "dims":
                    dims = np.zeros(a["shape"], dtype=np.int64)
                    setattr(local, f"dims_{a['name']}", dims)
                    local.ptrs[i] = dims.ctypes.data
            count = len(self._io)
            local.bound = [None] * count  # the array object each slot's pointer comes from (None: re-bind)
            local.held = [None] * count  # what the pointer points into (a copy of an input, or the array)
            local.ranges = [(0, 0)] * count
        return local.ptrs

    def _prepare(self, array, spec, what: str, writable: bool):
        shape, dtype = self._compiled[id(spec)]
        if type(array) is not np.ndarray:
            array = np.asarray(array)
        dynamic = spec.get("dynamic")
        if dynamic:
            # An input's dynamic dims may be anything up to the compiled bound (its Dim's max). An
            # output is the caller's buffer at the program's bound for it, which the sizes the code
            # computes never exceed (the code writes that many elements): only its static dims count.
            if array.ndim != len(shape) or any(n != m if d not in dynamic else (n > m and not writable)
                                               for d, (n, m) in enumerate(zip(array.shape, shape))):
                raise BackendError(f"cpu delegate: {what} has shape {tuple(array.shape)}, compiled for "
                                   f"{self._bounded(spec)}")
        elif array.shape != shape:
            raise BackendError(f"cpu delegate: {what} has shape {tuple(array.shape)}, compiled for {shape}")
        if array.dtype != dtype or not array.flags.c_contiguous:
            if writable:
                raise BackendError(f"cpu delegate: {what} must be a C-contiguous {dtype} array "
                                   f"(got {array.dtype}, contiguous={array.flags.c_contiguous})")
            note = f"{what}: copied to a contiguous {dtype} array (got {array.dtype}, " \
                   f"contiguous={array.flags.c_contiguous})"
            if note not in self.notes:
                self.notes.append(note)
            array = np.ascontiguousarray(array, dtype=dtype)
        if writable and not array.flags.writeable:
            raise BackendError(f"cpu delegate: {what} is read-only")
        return array

    @staticmethod
    def _bounded(spec) -> str:
        dynamic = spec.get("dynamic", ())
        return "(" + ", ".join(f"<={n}" if d in dynamic else str(n) for d, n in enumerate(spec["shape"])) + ")"

    def _shaped_outputs(self, outputs) -> list:
        """The outputs at the sizes the code wrote into `dims:out` (views of the buffers given)."""
        if not self._dims_out:
            return outputs
        shapes = {i: list(self._io[self._n_in + i][4]) for i in self._dynamic_outputs}
        for (i, d), size in zip(self._dims_out, self._local.dims_out.tolist()):
            shapes[i][d] = size
        shaped = list(outputs)
        for i, shape in shapes.items():
            shaped[i] = shaped[i].reshape(-1)[:math.prod(shape)].reshape(shape)
        return shaped

    def _bind(self, local, k: int, array) -> None:
        """Point input/output slot k (inputs first) at `array`, checked against the compiled argument.

        An input that is not a C-contiguous array of the compiled dtype, or that overlaps an output
        (checked by `run`), is copied; that slot is re-bound on the next call (the caller's array may
        change in between), every other slot keeps its pointer while the caller passes the same array
        object (an ndarray's data pointer never moves)."""
        slot, spec, what, writable, shape, dtype = self._io[k]
        prepared = None
        if type(array) is np.ndarray and array.shape == shape and array.dtype == dtype:
            flags = array.flags
            if flags.c_contiguous and (flags.writeable or not writable):
                prepared = array  # the common case, checked in a few attribute reads
        if prepared is None:
            prepared = self._prepare(array, spec, what, writable)
        local.bound[k] = array if prepared is array else None
        local.held[k] = prepared
        address = _address(prepared)
        local.ranges[k] = (address, address + prepared.nbytes)
        local.ptrs[slot] = address

    def run(self, inputs, outputs) -> list:
        """Compute into `outputs` (arrays of the compiled shapes/dtypes, written in place; a
        dynamically shaped output at its upper bound). Returns the outputs, each dynamically
        shaped one as a view at the shape the call computed.

        Per call: each argument is checked and its pointer set only when it is not the array object
        the slot was bound to last time (the runtime passes the same planned-arena views every call;
        a caller's input bound in place or a fresh output array is a new object each call)."""
        n_in = self._n_in
        if len(inputs) != n_in or len(outputs) != self._n_out:
            raise BackendError(f"cpu delegate takes {n_in} input(s) and {self._n_out} "
                               f"output(s), got {len(inputs)} and {len(outputs)}")
        local = self._local
        ptrs = local.ptrs if hasattr(local, "ptrs") else self._slots()
        bound = local.bound
        changed = False
        k = 0
        for array in inputs:
            if array is not bound[k]:
                self._bind(local, k, array)
                changed = True
            k += 1
        for array in outputs:
            if array is not bound[k]:
                self._bind(local, k, array)
                changed = True
            k += 1
        if changed and n_in and self._n_out:
            # The code assumes distinct buffers (noalias): never let an output overwrite an input it reads.
            ranges = local.ranges
            one_buffer = self._one_buffer
            for k in range(n_in):
                lo, hi = ranges[k]
                overlaps = False
                for o in range(n_in, len(ranges)):
                    o_lo, o_hi = ranges[o]
                    if lo < o_hi and o_lo < hi and (o, k) not in one_buffer:
                        overlaps = True
                if overlaps:
                    note = f"input {k}: copied because it overlaps an output buffer"
                    if note not in self.notes:
                        self.notes.append(note)
                    copy = local.held[k].copy()
                    local.bound[k], local.held[k] = None, copy
                    address = _address(copy)
                    ranges[k] = (address, address + copy.nbytes)
                    ptrs[self._io[k][0]] = address
        if self._dims_in:
            held, dims = local.held, local.dims_in
            for k, (i, d) in enumerate(self._dims_in):
                dims[k] = held[i].shape[d]
        if not self.threaded:
            self._fn(ctypes.addressof(ptrs))
            return self._shaped_outputs(outputs)
        n = self._threads_now
        with self._call_lock:  # one parallel call at a time per handle: they share the barrier
            barrier = self._barrier.ctypes.data
            address = ctypes.addressof(ptrs)
            futures = [self._pool.submit(self._fn, address, t, n, barrier) for t in range(1, n)] if n > 1 else []
            self._fn(address, 0, n, barrier)
            for f in futures:
                f.result()
        return self._shaped_outputs(outputs)

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __call__(self, *inputs):
        outputs = self.run(list(inputs), [np.empty(a["shape"], dtype=a["dtype"]) for a in self.outputs])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


class CpuRuntimeBackend:
    """The runtime backend `cpu` (see etc.runtime.backends)."""

    backend_id = BACKEND_ID

    def is_available(self) -> bool:
        try:
            _llvm()
            return True
        except Exception:  # noqa: BLE001
            return False

    def init(self, blob: bytes, compile_specs=None) -> CompiledFunction:
        return CompiledFunction(blob, _specs_dict(compile_specs))

    def execute(self, handle: CompiledFunction, args) -> list:
        n_in, end = handle._n_in, handle._n_in + handle._n_out
        if type(args) is not list:
            args = list(args)
        outputs = handle.run(args[:n_in], args[n_in:end])
        return outputs + args[end:] if len(args) > end else outputs

    def execute_profiled(self, handle: CompiledFunction, args, events) -> list:
        """`execute`, then (a blob built with profile=True) each dispatch region's time and ops into `events`."""
        outputs = self.execute(handle, args)
        if handle.profile is not None:  # copy the reads now; ticks -> ns and the events once the call is timed
            reads = handle.counter_reads()
            events.add_later(lambda: handle.regions_ns(reads))
        return outputs

    def destroy(self, handle) -> None:  # the code stays linked (MCJIT cannot unload one object)
        handle.close()


def _specs_dict(compile_specs) -> dict:
    if compile_specs is None:
        return {}
    if isinstance(compile_specs, dict):
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in compile_specs.items()}
    out = {}
    for spec in compile_specs:
        key = getattr(spec, "key", None)
        value = getattr(spec, "value", None)
        if key is None and isinstance(spec, (tuple, list)):
            key, value = spec
        out[key] = value.decode() if isinstance(value, (bytes, bytearray)) else value
    return out


def register() -> bool:
    """Register with the runtime's backend registry, when it exists; returns whether it did."""
    try:
        from etc.runtime.backends import register_backend
    except ImportError:
        return False
    register_backend(CpuRuntimeBackend())
    return True
