"""Structured-mutation fuzzing of `.pte` programs, each mutant loaded and run in a child process.

The promise under test (issue 11): a corrupted etc program either raises ProgramError (naming
what is damaged) or loads and computes exactly what it computed before, bit for bit; and no
program, however built, crashes or hangs the process or escapes the EtcError hierarchy.

Samples (`build_samples`, compiled by etc from small torch modules): a portable MLP, the same
MLP delegated to the cpu target, a two-method program, a dynamic-shape program, a program with
mutable state, a `torch.cond` program (jumps), plus a stock ExecuTorch file. Mutations (`Mutator`), located with a reader that
records where every field of the flatbuffer lives (`FieldMap`):

  raw        the file's own checksums left as they are: truncation, bit flips and random bytes in
             a region picked uniformly (headers, flatbuffer, each segment, padding, trailer),
             hostile 32-bit words. Must be ProgramError or bit-identical outputs.
  resigned   the same plus flatbuffer offsets and vector lengths pointed out of range, indices
             out of range, segment-table edits (offsets, sizes, segment indices), then the
             checksum trailer recomputed, so the structural checks meet the damage. May load and
             compute something else (it is another program); must never crash, hang, or raise
             anything but an EtcError.
  minimal    raw damage loaded with `Verification.Minimal` (checksums off): damaged values reach
             the kernels (which must raise EtcErrors, not crash) and a cpu delegate's blob must
             still be refused by its own CRC before any code runs. EtcError or outputs.
  table      (cpu samples) the delegate blob's table damaged where a loader looks (its head:
             counts, image size and entry; its records: arguments, constants, segments, fixups,
             imports), the blob's CRC and the trailer recomputed: the reader must refuse it or the
             load must succeed; it is loaded, never run (a re-signed blob may describe any code).
  et-raw     (cpu samples) raw damage inside the delegate's blob only, the program loaded by stock
             ExecuTorch with etc's cpu backend (`runtime/executorch_backend/`, in its own worker):
             the backend's CRC check must refuse it (an ExecuTorch error), never crash or run it.
  et-table   the `table` damage, loaded (never run) by stock ExecuTorch with etc's cpu backend:
             the backend's checks must refuse it or the load succeed, never crash.
             (Both through interop_program_fuzzer.py: the fuzzer itself never imports ExecuTorch.)

Children: one worker process runs many cases; a case that kills it (signal) or runs past the
timeout is recorded as a crash or a hang and the worker is restarted. `python program_fuzzer.py
--cases N` runs N cases from the command line (`make fuzz`).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import interop_program_fuzzer
from child_worker import ChildWorker, serve

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("raw", "resigned", "minimal", "table", "et-raw", "et-table")
EXECUTORCH_MODES = interop_program_fuzzer.MODES  # ExecuTorch's runtime with etc's backend (in that module)


# ------------------------------------------------------------------ samples
@dataclass
class Sample:
    data: bytes
    # (method, inputs) in call order; a method called twice sees its own state.
    runs: list
    checksummed: bool = True  # False: a stock ExecuTorch file, which has no checksums
    has_blob: bool = False


def build_samples() -> dict[str, Sample]:
    """Small programs compiled by etc (torch is needed here, in the parent only)."""
    import numpy as np
    import torch

    import etc
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(16, 24)
            self.b = torch.nn.Linear(24, 8)

        def forward(self, x):
            return self.b(torch.relu(self.a(x))) * 0.5

    class Encode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 6))

        def forward(self, x):
            return torch.tanh(x @ self.w), x.sum(dim=1)

    class RunningSum(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.arange(6.0))
            self.scale = torch.nn.Parameter(torch.randn(6))

        def forward(self, x):
            self.total.add_(x)
            return self.total * self.scale

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    mlp = Mlp().eval()
    export = torch.export.export(mlp, (torch.from_numpy(x),))
    samples = {
        "portable": Sample(etc.to_edge(export).to_executorch().buffer, [("forward", [x])]),
        "cpu": Sample(etc.to_edge(export).to_backend(CpuPartitioner()).to_executorch().buffer, [("forward", [x])],
                      has_blob=True),
    }
    y = rng.standard_normal((3, 8)).astype(np.float32)
    methods = {"forward": export, "encode": torch.export.export(Encode().eval(), (torch.from_numpy(y),))}
    samples["multi_method"] = Sample(etc.to_edge(methods).to_executorch().buffer,
                                     [("forward", [x]), ("encode", [y])])
    batch = torch.export.Dim("batch", min=1, max=12)
    dynamic = torch.export.export(mlp, (torch.from_numpy(x),), dynamic_shapes=({0: batch},))
    samples["dynamic"] = Sample(etc.to_edge(dynamic).to_executorch().buffer,
                                [("forward", [x[:3]]), ("forward", [np.tile(x, (3, 1))[:11]])])
    s = rng.standard_normal(6).astype(np.float32)
    state = torch.export.export(RunningSum(), (torch.from_numpy(s),))
    samples["stateful"] = Sample(etc.to_edge(state).to_executorch().buffer, [("forward", [s]), ("forward", [s])])

    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))

    branch = etc.to_edge(torch.export.export(Branch(), (torch.from_numpy(s),))).to_executorch().buffer
    samples["control_flow"] = Sample(branch, [("forward", [s]), ("forward", [-np.abs(s)])])
    with open(os.path.join(HERE, "..", "data", "executorch_linear_relu.pte"), "rb") as f:
        fixture = f.read()
    samples["executorch"] = Sample(fixture, [("forward", [rng.standard_normal((2, 4)).astype(np.float32)])],
                                   checksummed=False)
    return samples


# ------------------------------------------------------------------ where things are
class FieldMap:
    """Byte positions of the file's regions and of every flatbuffer field, from the checked reader."""

    def __init__(self, data: bytes):
        from etc.schema import program as P
        from etc.schema import reader as R

        self.data = data
        program_size, base, size = R.read_headers(data)
        self.scalars: list[tuple[str, int, str]] = []   # (path, position, struct format)
        self.offsets: list[tuple[str, int]] = []        # uoffset positions
        self.lengths: list[tuple[str, int, int]] = []   # (path, vector length position, element size)
        self.ints: list[tuple[str, int, str]] = []      # index-like items inside int vectors
        fields = self

        class Recorder(R.FlatbufferReader):
            def scalar(self, kind, at, path):
                fields.scalars.append((path, at, kind.fmt))
                return super().scalar(kind, at, path)

            def reference(self, pos, path):
                fields.offsets.append((path, pos))
                return super().reference(pos, path)

            def vector_header(self, pos, element_size, path):
                fields.lengths.append((path, pos, element_size))
                return super().vector_header(pos, element_size, path)

            def child(self, kind, pos, path):
                value = super().child(kind, pos, path)
                element = getattr(kind, "element", None)
                if isinstance(value, list) and element is not None and getattr(element, "fmt", "") in ("i", "q", "Q", "I"):
                    for i in range(len(value)):
                        fields.ints.append((f"{path}[{i}]", pos + 4 + i * element.size, element.fmt))
                return value

        reader = Recorder(data, program_size)
        root = struct.unpack_from("<I", data, 0)[0]
        self.program = reader.table(P.Program, root, "Program")
        self.regions = [("headers", 0, min(64, program_size)), ("flatbuffer", 64, program_size)]
        end = program_size
        if base:
            self.regions.append(("padding", program_size, base))
            for i, segment in enumerate(self.program.segments or []):
                self.regions.append((f"segment {i}", base + segment.offset, base + segment.offset + segment.size))
            end = base + size
        if len(data) > end:
            self.regions.append(("trailer", end, len(data)))
        self.regions = [r for r in self.regions if r[2] > r[1]]
        self.data_end = end

    def index_like(self) -> list[tuple[str, int, str]]:
        words = ("index", "idx", "inputs", "outputs", "args", "items", "memory_id", "move_", "destination",
                 "offset", "size", "segment")
        return [f for f in self.scalars + self.ints if any(w in f[0].split(".")[-1] for w in words)
                and f[2] in ("i", "I", "q", "Q")]

    def segment_table(self) -> list[tuple[str, int, str]]:
        return [f for f in self.scalars + self.ints
                if f[0].startswith(("Program.segments", "Program.constant_segment", "Program.mutable_data_segments",
                                    "Program.named_data")) or "processed.index" in f[0]]


def resign(data: bytes) -> bytes:
    """`data` with a checksum trailer recomputed for what it now says (unchanged if it cannot be decoded)."""
    from etc.errors import ProgramError
    from etc.schema import checksums
    from etc.schema import program as P
    from etc.schema import reader as R

    try:
        program_size, base, size = R.read_headers(data)
        reader = R.FlatbufferReader(data, program_size)
        program = reader.table(P.Program, struct.unpack_from("<I", data, 0)[0], "Program")
        payloads = R.segment_payloads(data, program, base)
    except (ProgramError, struct.error):
        return data
    end = base + size if base else program_size
    if data[8:12] != b"eh00" or end > len(data):
        return data
    return data[:end] + checksums.build_trailer(checksums.crc32(data[:program_size]),
                                                [checksums.crc32(p) for p in payloads])


# ------------------------------------------------------------------ mutations
_HOSTILE32 = (0, 1, 3, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0xFFFF, 0xFFFFFFFC)


class Mutator:
    def __init__(self, name: str, sample: Sample, seed):
        self.name = name
        self.sample = sample
        self.data = sample.data
        self.fields = FieldMap(self.data)
        self.rng = random.Random(f"{seed}/{name}")

    def region(self) -> tuple[str, int, int]:
        return self.rng.choice(self.fields.regions)

    def raw(self) -> tuple[str, bytes]:
        rng, data = self.rng, bytearray(self.data)
        kind = rng.choice(("truncate", "flip", "flip", "random_bytes", "word"))
        if kind == "truncate":
            cut = rng.choice([rng.randrange(len(data)), *[r[1] + rng.randrange(0, 3) for r in self.fields.regions]])
            return f"truncate at {cut}", bytes(data[:cut])
        name, lo, hi = self.region()
        if kind == "flip":
            flips = rng.choice((1, 1, 2, 3, 8))
            for _ in range(flips):
                data[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
            return f"{flips} bit flip(s) in {name}", bytes(data)
        if kind == "random_bytes":
            at = rng.randrange(lo, hi)
            n = min(rng.randint(1, 16), len(data) - at)
            data[at:at + n] = bytes(rng.randrange(256) for _ in range(n))
            return f"{n} random bytes at {at} ({name})", bytes(data)
        at = rng.randrange(lo, max(lo + 1, hi - 3))
        if at + 4 > len(data):
            return f"flip at {at} ({name})", bytes(data[:at]) + bytes([data[at] ^ 0x55]) + bytes(data[at + 1:])
        value = rng.choice(_HOSTILE32 + (len(data), rng.getrandbits(32)))
        struct.pack_into("<I", data, at, value)
        return f"word {value:#x} at {at} ({name})", bytes(data)

    def structured(self) -> tuple[str, bytes]:
        rng, data, fields = self.rng, bytearray(self.data), self.fields
        kind = rng.choice(("offset", "length", "index", "index", "segment_table", "raw"))
        if kind == "raw":
            return self.raw()
        if kind == "offset":
            path, at = rng.choice(fields.offsets)
            value = rng.choice((len(data), len(data) * 4, 0xFFFFFFFF, 0x80000000, 0, 4, rng.getrandbits(12)))
            struct.pack_into("<I", data, at, value)
            return f"offset of {path} -> {value:#x}", bytes(data)
        if kind == "length":
            path, at, _ = rng.choice(fields.lengths)
            value = rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, struct.unpack_from("<I", data, at)[0] + rng.randint(1, 9)))
            struct.pack_into("<I", data, at, value)
            return f"length of {path} -> {value:#x}", bytes(data)
        choices = fields.segment_table() if kind == "segment_table" else fields.index_like()
        if not choices:
            return self.raw()
        path, at, fmt = rng.choice(choices)
        old = struct.unpack_from("<" + fmt, data, at)[0]
        bits = struct.calcsize(fmt) * 8
        signed = fmt in "iq"
        candidates = [old + 1, old - 1, old + rng.randint(2, 300), -1, 1 << (bits - 2), rng.getrandbits(bits - 1), 0]
        value = rng.choice(candidates)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        value = min(max(value, lo), hi)
        struct.pack_into("<" + fmt, data, at, value)
        return f"{kind}: {path} {old} -> {value}", bytes(data)

    def _blob_table_damage(self, blob: bytes) -> tuple[str, bytes]:
        """`blob` with one field of its table set to a hostile value, re-deflated and re-signed."""
        import zlib

        from etc.targets.cpu import blob as cpu_blob

        rng = self.rng
        places = cpu_blob.sections(blob)
        stored = {name: blob[off:off + n] for name, (off, n) in places.items()}
        table = bytearray(zlib.decompress(stored["table"]))
        head_record, head_names = cpu_blob.TABLE_RECORDS["head"]
        head = dict(zip(head_names, head_record.unpack_from(table)))
        sites = []  # (what, position, struct format)

        def fields(record: struct.Struct, names, base: int, what: str):
            at = 0
            for name, fmt in zip(names, _formats(record.format)):
                sites.append((f"{what}.{name}", base + at, "<" + fmt))
                at += struct.calcsize("<" + fmt)

        fields(head_record, head_names, 0, "head")
        at = head_record.size
        for name in cpu_blob.TABLE_LISTS:
            record, names = cpu_blob.TABLE_RECORDS[name]
            for k in range(head[f"n_{name}"]):
                if name not in ("dims", "ops") or rng.random() < 0.2:
                    fields(record, names, at + k * record.size, f"{name}[{k}]")
            at += head[f"n_{name}"] * record.size
        what, at, fmt = rng.choice([s for s in sites if not s[0].endswith((".magic", ".reserved"))])
        old = struct.unpack_from(fmt, table, at)[0]
        bits = struct.calcsize(fmt) * 8
        signed = fmt[-1] in "bhiq"
        value = rng.choice((old + 1, old - 1, old + rng.randint(2, 64), old ^ (1 << rng.randrange(bits)), 0,
                            (1 << bits) - 1, 1 << (bits - 1), rng.getrandbits(bits), len(table), 4096))
        value %= 1 << bits
        if signed and value >= 1 << (bits - 1):
            value -= 1 << bits
        struct.pack_into(fmt, table, at, value)
        stored["table"] = zlib.compress(bytes(table))
        return f"blob table {what} {old} -> {value}", cpu_blob.assemble(stored)

    def table(self) -> tuple[str, bytes] | None:
        """Damage the table of one cpu delegate blob where a loader looks; re-sign the blob and the file."""
        from etc.schema import deserialize_pte, serialize_pte

        pte = deserialize_pte(self.data)
        if not pte.delegate_segments:
            return None
        k = self.rng.randrange(len(pte.delegate_segments))
        what, pte.delegate_segments[k] = self._blob_table_damage(pte.delegate_segments[k])
        return f"blob {k}: {what}", serialize_pte(pte)

    def blob_raw(self) -> tuple[str, bytes] | None:
        """Raw damage inside one cpu delegate blob only (the rest of the file intact, as ExecuTorch reads it)."""
        from etc.schema import deserialize_pte

        rng, data = self.rng, bytearray(self.data)
        blobs = deserialize_pte(self.data).delegate_segments
        if not blobs:
            return None
        k = rng.randrange(len(blobs))
        lo = self.data.find(blobs[k])
        hi = lo + len(blobs[k])
        kind = rng.choice(("flip", "flip", "random_bytes", "word"))
        if kind == "flip":
            flips = rng.choice((1, 1, 2, 3, 8))
            for _ in range(flips):
                data[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
            return f"{flips} bit flip(s) in blob {k}", bytes(data)
        at = rng.randrange(lo, hi - 4)
        if kind == "random_bytes":
            n = min(rng.randint(1, 16), hi - at)
            data[at:at + n] = bytes(rng.randrange(256) for _ in range(n))
            return f"{n} random bytes at {at - lo} of blob {k}", bytes(data)
        value = rng.choice(_HOSTILE32 + (len(blobs[k]), rng.getrandbits(32)))
        struct.pack_into("<I", data, at, value)
        return f"word {value:#x} at {at - lo} of blob {k}", bytes(data)

    def case(self, mode: str) -> tuple[str, bytes] | None:
        if mode == "raw" or mode == "minimal":
            return self.raw()
        if mode == "resigned":
            what, data = self.structured()
            return what + " (re-signed)", resign(data)
        if mode in ("table", "et-table"):
            return self.table()
        if mode == "et-raw":
            return self.blob_raw()
        raise ValueError(mode)


def _formats(fmt: str) -> list[str]:
    """'<4sHHI' -> ['4s', 'H', 'H', 'I']: each field's own struct format."""
    out, count = [], ""
    for c in fmt.lstrip("<>=!@"):
        if c.isdigit():
            count += c
        else:
            out.append(count + c if c == "s" else c)
            out.extend([c] * (int(count) - 1) if count and c != "s" else [])
            count = ""
    return out


# ------------------------------------------------------------------ the child
def _digest(outputs) -> str:
    import numpy as np

    h = hashlib.sha256()
    for out in outputs:
        a = np.ascontiguousarray(out)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def run_case(sample: Sample, data: bytes, mode: str) -> tuple[str, str]:
    """("ok", digest) | ("error", "<Class>: message") | ("bug", traceback), in the child."""
    import traceback

    from etc.errors import EtcError
    from etc.runtime import Runtime, Verification

    if mode == "selftest-crash":  # the harness's own test: does it see a dead child?
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "selftest-hang":
        time.sleep(3600)
    if mode in EXECUTORCH_MODES:
        return interop_program_fuzzer.run(sample, data, mode, _digest)
    verification = Verification.Minimal if mode == "minimal" else Verification.InternalConsistency
    try:
        program = Runtime.get().load_program(data, verification=verification)
        digests = []
        for method_name, inputs in sample.runs:
            method = program.load_method(method_name)
            if mode == "table":
                continue  # loaded, never run: a re-signed blob may describe any code
            digests.append(_digest(method.execute([x.copy() for x in inputs])))
        return "ok", "/".join(digests)
    except EtcError as error:
        return "error", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    except Exception:  # noqa: BLE001  (anything else is a bug the harness reports)
        return "bug", traceback.format_exc(limit=6)


def worker(executorch: bool = False) -> None:
    if executorch:
        interop_program_fuzzer.start_worker()
    samples = None

    def handle(message, reply):
        nonlocal samples
        if message[0] == "samples":
            samples = message[1]
            reply(("ready",))
        else:
            _, case_id, name, mode, data = message
            reply((case_id, *run_case(samples[name], data, mode)))

    serve(handle)


# ------------------------------------------------------------------ the parent
@dataclass
class Outcome:
    name: str
    mode: str
    what: str
    status: str  # ok, error, bug, crash, hang
    detail: str


@dataclass
class Report:
    outcomes: list = field(default_factory=list)
    reference: dict = field(default_factory=dict)
    seconds: float = 0.0

    def failures(self, samples: dict[str, Sample]) -> list[Outcome]:
        """Crashes, hangs, non-EtcErrors, and silent wrong outputs where the promise is exact."""
        bad = []
        for o in self.outcomes:
            if o.status in ("crash", "hang", "bug"):
                bad.append(o)
            elif o.mode == "et-raw" and o.status == "ok" and o.detail != self.reference.get((o.name, "et")):
                bad.append(Outcome(o.name, o.mode, o.what, "ran a damaged blob", o.detail))
            elif o.mode == "raw" and samples[o.name].checksummed:
                if o.status == "ok" and o.detail != self.reference[o.name]:
                    bad.append(Outcome(o.name, o.mode, o.what, "silently wrong", o.detail))
                elif o.status == "error" and not o.detail.startswith("ProgramError"):
                    bad.append(Outcome(o.name, o.mode, o.what, "not a ProgramError", o.detail))
        return bad

    def summary(self) -> str:
        def same(o):
            return o.detail == self.reference.get((o.name, "et") if o.mode in EXECUTORCH_MODES else o.name)

        counts = Counter((o.name, o.mode, o.status if o.status != "ok" or o.mode in ("table", "et-table") else
                          ("ok same" if same(o) else "ok other"))
                         for o in self.outcomes)
        lines = [f"{len(self.outcomes)} cases in {self.seconds:.1f} s"]
        for key in sorted(counts):
            lines.append(f"  {key[0]:>13} {key[1]:>9} {key[2]:>10}: {counts[key]}")
        return "\n".join(lines)


class _Worker(ChildWorker):
    def __init__(self, samples: dict[str, Sample], executorch: bool = False):
        super().__init__(__file__, cwd=HERE, extra_args=["--executorch"] if executorch else [])
        self.send(("samples", {name: Sample(b"", s.runs, s.checksummed, s.has_blob) for name, s in samples.items()}))


def fuzz(samples: dict[str, Sample], cases: dict[tuple[str, str], int], *, seed=0, timeout: float = 60.0) -> Report:
    """Run `cases[(sample, mode)]` mutants of each sample in a child worker; returns the report."""
    report = Report()
    start = time.monotonic()
    work = []
    for (name, mode), count in sorted(cases.items()):
        mutator = Mutator(name, samples[name], f"{seed}/{mode}")
        for _ in range(count):
            case = mutator.case(mode)
            if case is not None:
                work.append((name, mode, *case))
    startup = max(timeout, 120.0)  # a worker's start and the reference runs, on a busy machine
    kinds = sorted({mode in EXECUTORCH_MODES for _, mode, _, _ in work} | {False})
    if True in kinds:
        interop_program_fuzzer.build_backend()
    workers = {}
    for executorch in kinds:
        workers[executorch] = _Worker(samples, executorch)
        assert workers[executorch].receive(startup) == ("ready",)
        # The unmutated samples first: their outputs are the reference (ExecuTorch's: of the blob samples).
        for name, sample in samples.items():
            if executorch and not sample.has_blob:
                continue
            workers[executorch].send(("case", -1, name, "et-raw" if executorch else "raw", sample.data))
            _, status, detail = workers[executorch].receive(startup)
            assert status == "ok", f"sample {name} does not run{' on ExecuTorch' if executorch else ''}: {detail}"
            report.reference[(name, "et") if executorch else name] = detail
    for case_id, (name, mode, what, data) in enumerate(work):
        executorch = mode in EXECUTORCH_MODES
        worker = workers[executorch]
        worker.send(("case", case_id, name, mode, data))
        reply = worker.receive(timeout)
        if isinstance(reply, str):
            detail = worker.kill() if reply == "crash" else f"no answer in {timeout:.0f} s ({worker.kill()})"
            report.outcomes.append(Outcome(name, mode, what, reply, detail))
            workers[executorch] = _Worker(samples, executorch)
            assert workers[executorch].receive(startup) == ("ready",)
            continue
        report.outcomes.append(Outcome(name, mode, what, reply[1], reply[2]))
    for worker in workers.values():
        worker.close()
    report.seconds = time.monotonic() - start
    return report


def default_cases(samples: dict[str, Sample], total: int) -> dict[tuple[str, str], int]:
    """`total` cases spread over the samples and the modes that apply to each."""
    plan = []
    for name, sample in samples.items():
        modes = ["raw", "resigned", "minimal"] + (["table", *EXECUTORCH_MODES] if sample.has_blob else [])
        plan += [(name, mode) for mode in modes]
    return {key: max(1, total // len(plan)) for key in plan}


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--executorch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=20000, help="total mutated programs (default 20000)")
    parser.add_argument("--seed", default="0")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.executorch)
        return 0
    samples = build_samples()
    report = fuzz(samples, default_cases(samples, args.cases), seed=args.seed)
    print(report.summary())
    failures = report.failures(samples)
    for failure in failures[:50]:
        print(f"FAIL {failure.name} {failure.mode} [{failure.status}] {failure.what}: {failure.detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
