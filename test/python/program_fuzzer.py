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
  elf        (cpu samples) the delegate's object code damaged where the linker looks (section
             headers, symbols, relocations), the blob's CRC and the trailer recomputed: the
             validator must refuse it or the link must succeed; it is loaded, never run (a
             re-signed blob may carry any code).

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

from child_worker import ChildWorker, serve

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("raw", "resigned", "minimal", "elf")


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
        program_size, base, size = R._read_headers(data)
        self.scalars: list[tuple[str, int, str]] = []   # (path, position, struct format)
        self.offsets: list[tuple[str, int]] = []        # uoffset positions
        self.lengths: list[tuple[str, int, int]] = []   # (path, vector length position, element size)
        self.ints: list[tuple[str, int, str]] = []      # index-like items inside int vectors
        fields = self

        class Recorder(R._FlatbufferReader):
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
        program_size, base, size = R._read_headers(data)
        reader = R._FlatbufferReader(data, program_size)
        program = reader.table(P.Program, struct.unpack_from("<I", data, 0)[0], "Program")
        payloads = R._segment_payloads(data, program, base)
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

    def elf(self) -> tuple[str, bytes] | None:
        """Damage the object code of the first cpu delegate blob where the linker looks; re-sign all."""
        from etc.schema import deserialize_pte, serialize_pte
        from etc.targets.cpu import blob as cpu_blob
        from etc.targets.cpu import elf as cpu_elf

        rng = self.rng
        pte = deserialize_pte(self.data)
        if not pte.delegate_segments:
            return None
        k = rng.randrange(len(pte.delegate_segments))
        parsed = cpu_blob.deserialize(pte.delegate_segments[k])
        obj = bytearray(parsed.object_bytes)
        elf = cpu_elf.Elf(bytes(obj))
        shoff = struct.unpack_from("<Q", obj, 0x28)[0]
        sites = [("ELF header word", rng.randrange(16, 64 - 4), "<I")]
        for i, sec in enumerate(elf.sections):
            for name, off, fmt in (("offset", 24, "<Q"), ("size", 32, "<Q"), ("link", 40, "<I"), ("info", 44, "<I"),
                                   ("align", 48, "<Q"), ("entsize", 56, "<Q"), ("type", 4, "<I"), ("flags", 8, "<Q")):
                sites.append((f"section {i} {name}", shoff + 64 * i + off, fmt))
            if sec[1] == cpu_elf.SHT_SYMTAB:
                for s in range(sec[5] // 24):
                    for name, off, fmt in (("name", 0, "<I"), ("info", 4, "<B"), ("shndx", 6, "<H"),
                                           ("value", 8, "<Q"), ("size", 16, "<Q")):
                        sites.append((f"symbol {s} {name}", sec[4] + 24 * s + off, fmt))
            if sec[1] == cpu_elf.SHT_RELA:
                for r in range(sec[5] // 24):
                    for name, off, fmt in (("offset", 0, "<Q"), ("type", 8, "<I"), ("symbol", 12, "<I")):
                        sites.append((f"relocation {i}.{r} {name}", sec[4] + 24 * r + off, fmt))
        what, at, fmt = rng.choice(sites)
        old = struct.unpack_from(fmt, obj, at)[0]
        bits = struct.calcsize(fmt) * 8
        value = rng.choice((old + 1, old + rng.randint(2, 64), old ^ (1 << rng.randrange(bits)), 0,
                            (1 << bits) - 1, rng.getrandbits(bits), len(obj), 1 << (bits - 1)))
        struct.pack_into(fmt, obj, at, value % (1 << bits))
        meta = dict(parsed.metadata)
        constants = {name: parsed.constant(name) for name in meta.pop("constants")}
        pte.delegate_segments[k] = cpu_blob.serialize(meta, bytes(obj), constants)
        return f"object code of blob {k}: {what} {old:#x} -> {value % (1 << bits):#x}", serialize_pte(pte)

    def case(self, mode: str) -> tuple[str, bytes] | None:
        if mode == "raw" or mode == "minimal":
            return self.raw()
        if mode == "resigned":
            what, data = self.structured()
            return what + " (re-signed)", resign(data)
        if mode == "elf":
            return self.elf()
        raise ValueError(mode)


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
    verification = Verification.Minimal if mode == "minimal" else Verification.InternalConsistency
    try:
        program = Runtime.get().load_program(data, verification=verification)
        digests = []
        for method_name, inputs in sample.runs:
            method = program.load_method(method_name)
            if mode == "elf":
                continue  # linked, never run: a re-signed blob may hold any code
            digests.append(_digest(method.execute([x.copy() for x in inputs])))
        return "ok", "/".join(digests)
    except EtcError as error:
        return "error", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    except Exception:  # noqa: BLE001  (anything else is a bug the harness reports)
        return "bug", traceback.format_exc(limit=6)


def worker() -> None:
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
            elif o.mode == "raw" and samples[o.name].checksummed:
                if o.status == "ok" and o.detail != self.reference[o.name]:
                    bad.append(Outcome(o.name, o.mode, o.what, "silently wrong", o.detail))
                elif o.status == "error" and not o.detail.startswith("ProgramError"):
                    bad.append(Outcome(o.name, o.mode, o.what, "not a ProgramError", o.detail))
        return bad

    def summary(self) -> str:
        counts = Counter((o.name, o.mode, o.status if o.status != "ok" or o.mode == "elf" else
                          ("ok same" if o.detail == self.reference.get(o.name) else "ok other"))
                         for o in self.outcomes)
        lines = [f"{len(self.outcomes)} cases in {self.seconds:.1f} s"]
        for key in sorted(counts):
            lines.append(f"  {key[0]:>13} {key[1]:>9} {key[2]:>10}: {counts[key]}")
        return "\n".join(lines)


class _Worker(ChildWorker):
    def __init__(self, samples: dict[str, Sample]):
        super().__init__(__file__, cwd=HERE)
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
    worker = _Worker(samples)
    assert worker.receive(startup) == ("ready",)
    # The unmutated samples first: their outputs are the reference.
    for name, sample in samples.items():
        worker.send(("case", -1, name, "raw", sample.data))
        _, status, detail = worker.receive(startup)
        assert status == "ok", f"sample {name} does not run: {detail}"
        report.reference[name] = detail
    for case_id, (name, mode, what, data) in enumerate(work):
        worker.send(("case", case_id, name, mode, data))
        reply = worker.receive(timeout)
        if isinstance(reply, str):
            detail = worker.kill() if reply == "crash" else f"no answer in {timeout:.0f} s ({worker.kill()})"
            report.outcomes.append(Outcome(name, mode, what, reply, detail))
            worker = _Worker(samples)
            assert worker.receive(startup) == ("ready",)
            continue
        report.outcomes.append(Outcome(name, mode, what, reply[1], reply[2]))
    worker.close()
    report.seconds = time.monotonic() - start
    return report


def default_cases(samples: dict[str, Sample], total: int) -> dict[tuple[str, str], int]:
    """`total` cases spread over the samples and the modes that apply to each."""
    plan = []
    for name, sample in samples.items():
        modes = ["raw", "resigned", "minimal"] + (["elf"] if sample.has_blob else [])
        plan += [(name, mode) for mode in modes]
    return {key: max(1, total // len(plan)) for key in plan}


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=20000, help="total mutated programs (default 20000)")
    parser.add_argument("--seed", default="0")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
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
