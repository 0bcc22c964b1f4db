"""Runtime side of the `cpu` target: load a blob's pre-linked image in-process and call it.

`CompiledFunction(blob_bytes)` is usable on its own (numpy in, numpy out);
`CpuRuntimeBackend` adapts it to the runtime's backend interface
(`init(blob, compile_specs) -> handle`, `execute(handle, args)` with the
inputs then the outputs, as numpy views into planned memory, written in place).

Safety: nothing from a blob is used before its CRC matches (`blob.deserialize`,
which also checks its table, metadata and image: segments, entry, fixups and import
slots inside the image, `image.check`). Before mapping, the blob's triple must match
this process's architecture and OS, and every feature the code was compiled for
(`required_features`) must be present on this CPU (llvmlite's host feature list);
otherwise `BackendError` names what is missing, instead of the process dying of an
illegal instruction.

Loading (`map_image`): the image was linked when the blob was written (`link.py`), so
loading is what IREE's embedded-ELF loader does: map its size read-write, copy its bytes,
add the base address to each fixup, write each import's libc/libm address into its GOT
slot, then make the code read+execute and the constants read-only (W^X: no page is ever
writable and executable). One mapping holds the code, its constants and its GOT, so the
small code model's 32-bit displacements always reach, however fragmented the process's
address space. Where the system refuses executable anonymous memory (an SELinux policy
without `execmem`, PaX MPROTECT, iOS), `mprotect` fails and the load is a BackendError
saying so: the code is never run from writable memory. The ExecuTorch backend
(`runtime/executorch_backend/`) is the same loader in C++. The mapping is unmapped when its
CompiledFunction is garbage collected.

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
import threading
import weakref

import numpy as np

from etc.errors import BackendError
from etc.targets.cpu import blob as cpu_blob
from etc.targets.cpu import image as image_format

# The source of the log records this backend writes (etc.runtime.log).
LOG_SOURCE = "etc.targets.cpu"

BACKEND_ID = "cpu"


def llvm_binding():
    # Self-contained: the runtime needs no compiler module (nor MLIR) to link and run a blob.
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def host_features() -> set[str]:
    llvm = llvm_binding()
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
    llvm = llvm_binding()
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


# ------------------------------------------------------------- the image loader
_PROT_READ, _PROT_WRITE, _PROT_EXEC = 1, 2, 4


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def import_address(name: str) -> int:
    """The address of C library function `name` in this process (one of `image.IMPORTS`)."""
    if name not in image_format.IMPORTS:  # image.check refused it already; never resolve anything else
        raise BackendError(f"cpu delegate: its code imports '{name}', which is not a libc/libm function it may call")
    try:
        address = ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value
    except AttributeError:
        address = None
    if not address:
        raise BackendError(f"cpu delegate: its code calls {name}, which this process does not define")
    return address


def map_image(image: image_format.Image) -> tuple[int, int]:
    """Map a checked image (`image.check`), apply its fixups and imports, protect its segments; returns
    (base address, mapped bytes). See the module docstring; anything refused is a BackendError."""
    import os
    import struct

    page = os.sysconf("SC_PAGE_SIZE")
    if image.align % page:
        raise BackendError(f"cpu delegate: its image is laid out for {image.align}-byte pages; this system's pages "
                           f"are {page} bytes")
    libc = _libc()
    size = image.size
    base = libc.mmap(None, size, _PROT_READ | _PROT_WRITE, 0x02 | 0x20, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    if base in (None, ctypes.c_void_p(-1).value):
        raise BackendError(f"cpu delegate: cannot map {size} bytes for its code (errno {ctypes.get_errno()})")
    try:
        mapped = (ctypes.c_char * size).from_address(base)
        mapped[:len(image.data)] = image.data
        for offset in image.fixups:
            struct.pack_into("<Q", mapped, offset, base + struct.unpack_from("<Q", mapped, offset)[0])
        for offset, name in image.imports:
            struct.pack_into("<Q", mapped, offset, import_address(name))
        for seg in image.segments:
            prot = _PROT_READ | (_PROT_WRITE if seg.prot & image_format.W else 0) \
                | (_PROT_EXEC if seg.prot & image_format.X else 0)
            if libc.mprotect(base + seg.offset, seg.size, prot) != 0:
                errno = ctypes.get_errno()
                refused = " (this system refuses executable memory that was writable: W^X policy)" \
                    if prot & _PROT_EXEC and errno in (1, 13) else ""
                raise BackendError(f"cpu delegate: cannot make its code segment executable (errno {errno}){refused}"
                                   if prot & _PROT_EXEC else
                                   f"cpu delegate: mprotect of its image failed (errno {errno})")
    except BaseException:
        libc.munmap(base, size)
        raise
    return base, size


def _unmap(base: int, size: int) -> None:
    _libc().munmap(base, size)


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

    def __init__(self, data: bytes | cpu_blob.CpuBlob, compile_specs: dict | None = None):
        try:
            self.blob = data if isinstance(data, cpu_blob.CpuBlob) else cpu_blob.deserialize(data)
        except cpu_blob.BlobFormatError as e:
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
        base, size = map_image(self.blob.image)
        weakref.finalize(self, _unmap, base, size)  # the code lives as long as this function
        self._address = base + self.blob.image.entry
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
        from etc.runtime import log

        chosen = min(best, key=best.get)
        self._threads_now = chosen
        measured = f"measured at load: {best[1] * 1e6:.0f} us on one, {best[self.num_threads] * 1e6:.0f} us on " \
                   f"{self.num_threads}"
        if chosen != self.num_threads:
            # A visible decision: the program asked for more threads than this delegate will use.
            note = f"threads: 1 of {self.num_threads} ({measured})"
            self.notes.append(note)
            log.info(f"cpu delegate: {note}", source=LOG_SOURCE)
        else:
            log.debug(f"cpu delegate: threads: {chosen} ({measured})", source=LOG_SOURCE)

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
            llvm_binding()
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

    def destroy(self, handle) -> None:  # the code is unmapped once the handle is garbage collected
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
