"""Runtime side of the `cpu` target: link a blob's object code in-process and call it.

`CompiledFunction(blob_bytes)` is usable on its own (numpy in, numpy out);
`CpuRuntimeBackend` adapts it to the runtime's backend interface
(`init(blob, compile_specs) -> handle`, `execute(handle, args)` with the
inputs then the outputs, as numpy views into planned memory, written in place).

Safety: before linking, the blob's triple must match this process's
architecture and OS, and every feature the code was compiled for
(`required_features`) must be present on this CPU (llvmlite's host feature
list); otherwise `BackendError` names what is missing, instead of the process
dying of an illegal instruction.

Per call: the argument pointer array is filled in place (ctypes) and the entry
is called; ctypes releases the GIL during the call. No allocation in steady
state: constants point into the blob, the scratch buffer is allocated once per
handle (per thread when called from several threads), outputs are the
caller's arrays. An input that is not C-contiguous or not of the compiled dtype
is copied (once per call; `notes` records it).

Threads: a blob compiled with `num_threads > 1` has the threaded entry of
`parallel.py` (the object still needs only libc/libm: no OpenMP runtime). The
handle keeps `num_threads - 1` worker threads; each call runs thread 0 on the
caller and the others on the workers, all on the same buffers, synchronized by
the code's own barrier (ctypes drops the GIL during the call). The runtime's
compile spec `num_threads` may lower or raise the count (1: one thread runs
everything). Flat-entry blobs run single-threaded; independent calls from
several Python threads still run concurrently, each with its own scratch.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from etc.errors import BackendError
from etc.targets.cpu import blob as blob_format

BACKEND_ID = "cpu"

_LLVM_LOCK = threading.Lock()
_ENGINES: list = []  # keep every engine (and so its code) alive for the process lifetime


def _llvm():
    import llvmlite.binding as llvm

    from etc.targets.cpu.codegen import _init_llvm

    _init_llvm()
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
    missing = sorted(set(metadata.get("required_features", [])) - host_features())
    if missing:
        raise BackendError(
            f"cpu delegate needs CPU feature(s) {', '.join('+' + m for m in missing)} that this CPU "
            f"({llvm.get_host_cpu_name()}) lacks; recompile for this CPU or with a baseline "
            "(compile spec cpu=generic / features=...)")


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
        llvm = _llvm()
        with _LLVM_LOCK:
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
        """Per-thread pointer array and scratch buffer (allocated once per thread)."""
        local = self._local
        if not hasattr(local, "ptrs"):
            local.ptrs = (ctypes.c_void_p * len(self.args))()
            local.scratch = None
            for i, a in enumerate(self.args):
                if a["kind"] == "constant":
                    local.ptrs[i] = self._constants[a["name"]].ctypes.data
                elif a["kind"] == "scratch":
                    local.scratch = np.empty(a["shape"], dtype=np.uint8)
                    local.ptrs[i] = local.scratch.ctypes.data
        return local.ptrs

    def _prepare(self, array, spec, what: str, writable: bool):
        shape = tuple(spec["shape"])
        dtype = np.dtype(spec["dtype"])
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if tuple(array.shape) != shape:
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

    def run(self, inputs, outputs) -> None:
        """Compute into `outputs` (arrays of the compiled shapes/dtypes, written in place)."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise BackendError(f"cpu delegate takes {len(self.inputs)} input(s) and {len(self.outputs)} "
                               f"output(s), got {len(inputs)} and {len(outputs)}")
        ptrs = self._slots()
        local = self._local
        # Steady state: the runtime passes the same planned-arena views every call, so the
        # pointer array from last time is still right (an ndarray's data pointer never moves).
        last = getattr(local, "last", None)
        if last is not None and not self.threaded \
                and all(a is b for a, b in zip(inputs, last[0])) and all(a is b for a, b in zip(outputs, last[1])):
            self._fn(ctypes.addressof(ptrs))
            return
        local.last = None
        keep = []
        ii = oi = 0
        for i, a in enumerate(self.args):
            if a["kind"] == "input":
                arr = self._prepare(inputs[ii], a, f"input {ii}", writable=False)
                if any(np.may_share_memory(arr, out) for out in outputs):
                    # The code assumes distinct buffers (noalias): never let an output overwrite an input it reads.
                    note = f"input {ii}: copied because it overlaps an output buffer"
                    if note not in self.notes:
                        self.notes.append(note)
                    arr = arr.copy()
                keep.append(arr)
                ptrs[i] = arr.ctypes.data
                ii += 1
            elif a["kind"] == "output":
                arr = self._prepare(outputs[oi], a, f"output {oi}", writable=True)
                ptrs[i] = arr.ctypes.data
                oi += 1
        if not self.threaded:
            if all(a is b for a, b in zip(keep, inputs)):  # nothing was copied: safe to reuse
                local.last = (tuple(inputs), tuple(outputs))
            self._fn(ctypes.addressof(ptrs))
            return
        n = self._threads_now
        with self._call_lock:  # one parallel call at a time per handle: they share the barrier
            barrier = self._barrier.ctypes.data
            address = ctypes.addressof(ptrs)
            futures = [self._pool.submit(self._fn, address, t, n, barrier) for t in range(1, n)] if n > 1 else []
            self._fn(address, 0, n, barrier)
            for f in futures:
                f.result()

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __call__(self, *inputs):
        outputs = [np.empty(a["shape"], dtype=a["dtype"]) for a in self.outputs]
        self.run(list(inputs), outputs)
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
        n_in = len(handle.inputs)
        args = list(args)
        handle.run(args[:n_in], args[n_in:n_in + len(handle.outputs)])
        return args[n_in:]

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
