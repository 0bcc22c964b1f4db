"""ExecuTorch's ETDump (`.etdp`) as a run record: profile an etc program on ExecuTorch's runtime (on the
device, say) and read the result with etc's Inspector and compile record.

    record = read_executorch_etdump("etdump.etdp", program="model.pte")
    Inspector(record, etrecord="model.etrecord").print_data_tabular()

An etc `.pte` runs unchanged on ExecuTorch, and ExecuTorch's ETDump names every
event by (chain, instruction), so the instructions are the same ones the compile
record maps to source lines. Only `etdump_schema_flatcc.fbs`'s profiling tables
are declared here (kind-annotated, read by the same bounds-checked reader as
`.pte` files); executorch itself is never imported. The mapping:

- each `RunData` holding a `Method::execute` event is one run of `method` (ETDump
  does not name the method: the caller says which it profiled);
- `OPERATOR_CALL` / `DELEGATE_CALL` events become instruction events, labelled as
  etc's runtime labels them (from the program: the kernel name, `delegate '<id>'`);
- events a delegate logged itself (a delegate debug id) become that call's regions; etc's cpu backend
  for ExecuTorch (`runtime/executorch_backend/`) names each region and lists the partition ops it
  computed in the event's metadata (`REGION_OPS_TAG` then little-endian u32 op indices);
- times are ExecuTorch's ticks times `ticks_to_ns` (1 on hosts whose PAL counts in ns).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from etc.runtime.run_record import EXECUTE_EVENT, DelegateEvents, RunRecord
from etc.errors import EtcError, ProgramError
from etc.schema.kinds import INT, UBYTE, UINT, ULONG, SchemaTable, Str, Table, Vector, fb

__all__ = ["read_executorch_etdump", "FILE_IDENTIFIER"]

FILE_IDENTIFIER = b"ED00"
# A delegate event's metadata that lists the partition ops of the region it timed (etc's cpu backend).
REGION_OPS_TAG = b"etc.ops\0"


class _Wire:
    """The profiling part of etdump_schema_flatcc.fbs (fields in vtable order; later fields not read)."""

    @dataclass
    class ProfileEvent(SchemaTable):
        name: str | None = fb(Str())
        chain_index: int = fb(INT)
        instruction_id: int = fb(INT, default=-1)
        delegate_debug_id_int: int = fb(INT, default=-1)
        delegate_debug_id_str: str | None = fb(Str())
        delegate_debug_metadata: list | None = fb(Vector(UBYTE))
        start_time: int = fb(ULONG)
        end_time: int = fb(ULONG)

    @dataclass
    class AllocationEvent(SchemaTable):
        allocator_id: int = fb(INT)
        allocation_size: int = fb(ULONG)

    @dataclass
    class Event(SchemaTable):
        profile_event: object = fb(Table("ProfileEvent"))
        allocation_event: object = fb(Table("AllocationEvent"))

    @dataclass
    class Allocator(SchemaTable):
        name: str | None = fb(Str())

    @dataclass
    class RunData(SchemaTable):
        name: str | None = fb(Str())
        bundled_input_index: int = fb(INT, default=-1)
        allocators: list | None = fb(Vector(Table("Allocator")))
        events: list | None = fb(Vector(Table("Event")))

    @dataclass
    class ETDump(SchemaTable):
        version: int = fb(UINT)
        run_data: list | None = fb(Vector(Table("RunData")))


TABLES = {name: cls for name, cls in vars(_Wire).items() if isinstance(cls, type)}


def _labels(program, method: str) -> dict:
    """(chain, instruction) -> the label etc's runtime gives it, from the program."""
    if program is None:
        return {}
    from etc.devtools.inspector import read_pte
    from etc.runtime.method import operator_name
    from etc.schema import program as S

    pte = read_pte(program)
    plan = next((p for p in pte.program.execution_plan if p.name == method), None)
    if plan is None:
        raise EtcError(f"the program has no method '{method}'")
    labels = {}
    names = {"JumpFalseCall": "jump_false", "MoveCall": "move", "FreeCall": "free"}
    for c, chain in enumerate(plan.chains or []):
        for i, instruction in enumerate(chain.instructions or []):
            call = instruction.instr_args
            if isinstance(call, S.KernelCall):
                labels[(c, i)] = operator_name(plan.operators[call.op_index])
            elif isinstance(call, S.DelegateCall):
                labels[(c, i)] = f"delegate '{plan.delegates[call.delegate_index].id}'"
            else:
                labels[(c, i)] = names.get(type(call).__name__, type(call).__name__)
    return labels


def _region_ops(event) -> tuple:
    """The partition ops a delegate's event computed: listed in its metadata (etc's cpu backend), or its
    integer debug id."""
    meta = bytes(event.delegate_debug_metadata or b"")
    if meta.startswith(REGION_OPS_TAG) and (len(meta) - len(REGION_OPS_TAG)) % 4 == 0:
        return struct.unpack(f"<{(len(meta) - len(REGION_OPS_TAG)) // 4}I", meta[len(REGION_OPS_TAG):])
    return (event.delegate_debug_id_int,) if event.delegate_debug_id_int >= 0 else ()


def read_executorch_etdump(source, *, program=None, method: str = "forward", ticks_to_ns: float = 1.0) -> RunRecord:
    """A RunRecord from ExecuTorch's `.etdp` bytes or path; `program` (the `.pte` it ran) labels the
    instructions as etc does (without it they keep ExecuTorch's event names)."""
    from etc.schema.reader import FlatbufferReader

    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as error:
            raise EtcError(f"cannot read ETDump '{os.fspath(source)}': {error.strerror}") from None
    else:
        data = bytes(source)
    # flatcc writes it size-prefixed: a 4-byte length, then the flatbuffer.
    if len(data) < 12 or data[8:12] != FILE_IDENTIFIER:
        raise ProgramError(f"not an ExecuTorch ETDump (no size-prefixed '{FILE_IDENTIFIER.decode()}' identifier)")
    size = struct.unpack_from("<I", data, 0)[0]
    body = data[4:4 + size]
    if len(body) != size:
        raise ProgramError(f"ETDump truncated: {len(body)} of {size} bytes")
    reader = FlatbufferReader(body, len(body), tables=TABLES)
    root = struct.unpack_from("<I", body, 0)[0]
    if not 8 <= root < len(body):
        raise ProgramError(f"ETDump root offset {root} is outside the data (8..{len(body)})")
    dump = reader.table(_Wire.ETDump, root, "ETDump")
    labels = _labels(program, method)
    record = RunRecord()
    for run_data in dump.run_data or []:
        profile = [e.profile_event for e in run_data.events or [] if e.profile_event is not None]
        if not any(p.name == EXECUTE_EVENT for p in profile):
            continue  # the load (Method::init, Program::load_method): no execute in it
        run = record.begin_run(method)
        calls, regions = [], []
        for p in profile:
            start, end = int(p.start_time * ticks_to_ns), int(p.end_time * ticks_to_ns)
            if p.name == EXECUTE_EVENT:
                record.add(EXECUTE_EVENT, method, run, -1, -1, start, end)
            elif p.name in ("OPERATOR_CALL", "DELEGATE_CALL") and p.instruction_id >= 0:
                key = (p.chain_index, p.instruction_id)
                record.add(labels.get(key, p.name), method, run, *key, start, end)
                calls.append((key, start, end))
            elif p.delegate_debug_id_int >= 0 or p.delegate_debug_id_str:
                regions.append((p, start, end))
        # A delegate's own events end, and so are written, before its call's: match them by time.
        for p, start, end in sorted(regions, key=lambda r: r[1]):
            parent = next((key for key, s, e in calls if s <= start and end <= e), None)
            if parent is not None:
                events = DelegateEvents()
                events.add(p.name or p.delegate_debug_id_str or f"region {p.delegate_debug_id_int}", end - start,
                           ops=_region_ops(p))
                record.add_delegate_events(method, run, *parent, start, events)
    if not record.runs(method):
        raise EtcError("the ETDump records no execute (was the method run with enable_etdump=True?)")
    return record
