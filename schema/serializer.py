"""PteFile -> `.pte` bytes, laid out as ExecuTorch lays them out.

The flatbuffer is written with the `flatbuffers` Python Builder, driven by the
wire kinds on the dataclass fields (`etc.schema.kinds`): no generated code and
no flatc, so the schema has one source of truth (program.py) and nothing to
regenerate. Then, as ExecuTorch's `_program.py` does:

1. the segment payloads (constant tensors in one constant segment whose
   `offsets[0]` is reserved, mutable initial state, delegate blobs, named data)
   are laid out, each segment aligned to lcm(segment_alignment, its alignment);
2. the extended header "eh00" is spliced in at offset 8 (padded to the largest
   force_align in the flatbuffer) and the root offset bumped past it;
3. the segments follow the program data, padded to `segment_alignment`;
4. unless `pte.checksums` is False, etc's checksum trailer follows (`etc.schema.checksums`:
   a CRC-32 of the program data and of each segment, where stock ExecuTorch never reads).
"""

from __future__ import annotations

import copy
import math
import struct

import flatbuffers

from etc.errors import SerializationError
from etc.schema import checksums
from etc.schema import program as P
from etc.schema.kinds import Blob, Scalar, Str, Table, Union, Vector, wire_fields

EXTENDED_HEADER_MAGIC = b"eh00"
# magic + header length + program_size + segment_base_offset + segment_data_size
EXTENDED_HEADER_SIZE = 4 + 4 + 8 + 8 + 8

_SLOT_WRITERS = {
    "B": "PrependUint8Slot", "b": "PrependInt8Slot", "?": "PrependBoolSlot", "i": "PrependInt32Slot",
    "I": "PrependUint32Slot", "q": "PrependInt64Slot", "Q": "PrependUint64Slot", "d": "PrependFloat64Slot",
}


def _align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _check_alignment(name: str, value: int) -> int:
    if not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise SerializationError(f"{name} must be a power of two, got {value!r}")
    return value


class FlatbufferWriter:
    """Writes schema dataclasses into one flatbuffers Builder, reporting errors with the field path.

    `tables` names the schema's tables (program.fbs by default; the bundled program's schema,
    `etc.devtools.bundled_program`, passes its own)."""

    def __init__(self, blob_alignments: dict[type, int], tables: dict[str, type] | None = None):
        self.builder = flatbuffers.Builder(1024)
        self.blob_alignments = blob_alignments
        self.tables = P.TABLES if tables is None else tables

    def table(self, obj, path: str) -> int:
        cls = type(obj)
        if cls not in self.tables.values():
            raise SerializationError(f"{path}: {cls.__name__} is not a schema table")
        fields = wire_fields(cls)
        # Children first: a flatbuffers table can only refer to objects written before it.
        children = {}
        for name, kind in fields:
            value = getattr(obj, name)
            if value is not None and not isinstance(kind, Scalar):
                children[name] = self.child(kind, value, f"{path}.{name}", cls)
        b = self.builder
        slots = sum(2 if isinstance(kind, Union) else 1 for _, kind in fields)
        b.StartObject(slots)
        slot = 0
        for name, kind in fields:
            value = getattr(obj, name)
            if isinstance(kind, Scalar):
                self.scalar_slot(slot, kind, value, f"{path}.{name}")
            elif isinstance(kind, Union):
                if value is not None:
                    b.PrependUint8Slot(slot, kind.members.index(type(value).__name__) + 1, 0)
                    b.PrependUOffsetTRelativeSlot(slot + 1, children[name], 0)
                slot += 1
            elif value is not None:
                b.PrependUOffsetTRelativeSlot(slot, children[name], 0)
            slot += 1
        return b.EndObject()

    def scalar_slot(self, slot: int, kind: Scalar, value, path: str):
        if kind.enum is not None and not isinstance(value, kind.enum):
            try:
                value = kind.enum(value)
            except (ValueError, TypeError):
                raise SerializationError(f"{path}: {value!r} is not a {kind.enum.__name__}") from None
        self.check_scalar(kind, value, path)
        getattr(self.builder, _SLOT_WRITERS[kind.fmt])(slot, value, 0)

    @staticmethod
    def check_scalar(kind: Scalar, value, path: str):
        try:
            struct.pack("<" + kind.fmt, value)
        except (struct.error, TypeError):
            raise SerializationError(f"{path}: {value!r} does not fit the field's type ('{kind.fmt}')") from None

    def child(self, kind, value, path: str, owner: type) -> int:
        b = self.builder
        if isinstance(kind, Str):
            if not isinstance(value, str):
                raise SerializationError(f"{path}: expected a str, got {type(value).__name__}")
            return b.CreateString(value)
        if isinstance(kind, Blob):
            return self.raw_vector(bytes(value), 1, self.blob_alignments.get(owner, kind.align))
        if isinstance(kind, Table):
            if type(value) is not self.tables[kind.name]:
                raise SerializationError(f"{path}: expected {kind.name}, got {type(value).__name__}")
            return self.table(value, path)
        if isinstance(kind, Union):
            if type(value).__name__ not in kind.members or type(value) is not self.tables[type(value).__name__]:
                raise SerializationError(f"{path}: {type(value).__name__} is not one of {', '.join(kind.members)}")
            return self.table(value, f"{path}({type(value).__name__})")
        if isinstance(kind, Vector):
            if not isinstance(value, (list, tuple)):
                raise SerializationError(f"{path}: expected a list, got {type(value).__name__}")
            element = kind.element
            if isinstance(element, Scalar):
                try:
                    data = struct.pack(f"<{len(value)}{element.fmt}", *value)
                except (struct.error, TypeError):
                    for i, item in enumerate(value):
                        self.check_scalar(element, item, f"{path}[{i}]")
                    raise
                return self.raw_vector(data, element.size, element.size)
            if isinstance(element, Table):
                offsets = [self.child(element, item, f"{path}[{i}]", owner) for i, item in enumerate(value)]
                b.StartVector(4, len(offsets), 4)
                for offset in reversed(offsets):
                    b.PrependUOffsetTRelative(offset)
                return b.EndVector()
        raise SerializationError(f"{path}: unsupported wire kind {kind}")

    def raw_vector(self, data: bytes, element_size: int, alignment: int) -> int:
        """A vector of pre-packed little-endian elements whose first element is `alignment`-aligned."""
        b = self.builder
        b.StartVector(element_size, len(data) // element_size, max(alignment, element_size))
        b.head -= len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector()


class _SegmentLayout:
    """Segment payloads in file order, each at an offset (from segment_base_offset) aligned as asked."""

    def __init__(self, segment_alignment: int):
        self.segment_alignment = segment_alignment
        self.payloads: list[bytes] = []
        self.segments: list[P.DataSegment] = []
        self.end = 0

    def add(self, payload: bytes, alignment: int = 1) -> int:
        offset = _align_up(self.end, math.lcm(self.segment_alignment, alignment))
        self.payloads.append(payload)
        self.segments.append(P.DataSegment(offset=offset, size=len(payload)))
        self.end = offset + len(payload)
        return len(self.segments) - 1

    def add_subsegments(self, buffers: list[bytes], alignment: int) -> P.SubsegmentOffsets:
        """One segment holding `buffers` back to back, each aligned; offsets[0] is the reserved entry."""
        offsets = [0]
        data = bytearray()
        for buffer in buffers:
            data.extend(bytes(_align_up(len(data), alignment) - len(data)))
            offsets.append(len(data))
            data.extend(buffer)
        return P.SubsegmentOffsets(segment_index=self.add(bytes(data), alignment), offsets=offsets)

    def write(self, out: bytearray, base: int):
        for segment, payload in zip(self.segments, self.payloads):
            out.extend(bytes(base + segment.offset - len(out)))
            out.extend(payload)


def _wire_program(pte: P.PteFile, layout: _SegmentLayout, constant_tensor_alignment: int,
                  delegate_alignment: int) -> P.Program:
    """A copy of pte.program with the segment tables filled and delegate references made wire indices."""
    program = pte.program
    if not isinstance(program, P.Program):
        raise SerializationError(f"PteFile.program must be a Program, got {type(program).__name__}")
    for name in ("segments", "mutable_data_segments", "named_data"):
        if getattr(program, name):
            raise SerializationError(f"Program.{name} is computed by the serializer: give the payloads to PteFile "
                                     f"instead")
    if program.constant_segment is not None:
        raise SerializationError("Program.constant_segment is computed by the serializer: put constant bytes in "
                                 "PteFile.constant_data")
    wire = copy.copy(program)
    if pte.constant_data and program.constant_buffer:
        raise SerializationError("constants both in Program.constant_buffer (legacy) and PteFile.constant_data")
    if not program.constant_buffer:
        # Like ExecuTorch, always a constant segment (possibly empty, offsets == [0]): the stock runtime
        # takes a program without one for a legacy inline-constant_buffer program, and may refuse it.
        wire.constant_segment = layout.add_subsegments(list(pte.constant_data), constant_tensor_alignment)
    if pte.mutable_data:
        wire.mutable_data_segments = [layout.add_subsegments(list(buffers), constant_tensor_alignment)
                                      for buffers in pte.mutable_data]
    delegate_segment_index = [layout.add(bytes(blob), delegate_alignment) for blob in pte.delegate_segments]
    if pte.named_data:
        wire.named_data = [P.NamedData(key=key, segment_index=layout.add(bytes(data), constant_tensor_alignment))
                           for key, data in pte.named_data.items()]
    if any(plan.delegates for plan in program.execution_plan or []):
        wire.execution_plan = []
        for p, plan in enumerate(program.execution_plan):
            plan = copy.copy(plan)
            plan.delegates = [_wire_delegate(d, delegate_segment_index, f"Program.execution_plan[{p}].delegates[{i}]")
                              for i, d in enumerate(plan.delegates or [])] if plan.delegates is not None else None
            wire.execution_plan.append(plan)
    wire.segments = layout.segments
    return wire


def _wire_delegate(delegate: P.BackendDelegate, segment_index: list[int], path: str) -> P.BackendDelegate:
    ref = delegate.processed
    if ref is None or ref.location != P.DataLocation.SEGMENT:
        return delegate
    if not 0 <= ref.index < len(segment_index):
        raise SerializationError(f"{path}.processed: delegate segment {ref.index} does not exist "
                                 f"(PteFile.delegate_segments has {len(segment_index)})")
    delegate = copy.copy(delegate)
    delegate.processed = P.BackendDelegateDataReference(location=P.DataLocation.SEGMENT,
                                                        index=segment_index[ref.index])
    return delegate


def serialize_pte(pte: P.PteFile, *, segment_alignment: int = 128, constant_tensor_alignment: int = 16,
                  delegate_alignment: int | None = None) -> bytes:
    """The `.pte` bytes of `pte`.

    `segment_alignment` aligns every segment (ExecuTorch's default is 128; use the
    page size to mmap segments). `constant_tensor_alignment` aligns each constant
    inside the constant segment (and inline Buffer storage). `delegate_alignment`
    (default: none beyond the segment alignment, 16 for inline data) aligns
    delegate blobs. Raises SerializationError naming the offending field.
    """
    _check_alignment("segment_alignment", segment_alignment)
    _check_alignment("constant_tensor_alignment", constant_tensor_alignment)
    if delegate_alignment is not None:
        _check_alignment("delegate_alignment", delegate_alignment)
    layout = _SegmentLayout(segment_alignment)
    wire = _wire_program(pte, layout, constant_tensor_alignment, delegate_alignment or 1)
    writer = FlatbufferWriter({
        P.Buffer: constant_tensor_alignment,
        P.BackendDelegateInlineData: delegate_alignment or P.DEFAULT_INLINE_ALIGNMENT,
    })
    root = writer.table(wire, "Program")
    writer.builder.Finish(root, file_identifier=P.FILE_IDENTIFIER)
    flatbuffer = writer.builder.Output()

    # The header is padded so that everything after it keeps the alignment the builder gave it.
    header_size = _align_up(EXTENDED_HEADER_SIZE, max(writer.builder.minalign, 8))
    program_size = len(flatbuffer) + header_size
    has_segments = bool(layout.segments)
    segment_base = _align_up(program_size, segment_alignment) if has_segments else 0
    root_offset = struct.unpack_from("<I", flatbuffer, 0)[0] + header_size
    header = struct.pack("<4sIQQQ", EXTENDED_HEADER_MAGIC, EXTENDED_HEADER_SIZE, program_size, segment_base,
                         layout.end if has_segments else 0)
    out = bytearray(struct.pack("<I", root_offset))
    out += flatbuffer[4:8]
    out += header + bytes(header_size - len(header))
    out += flatbuffer[8:]
    if has_segments:
        layout.write(out, segment_base)
    if pte.checksums:
        out += checksums.build_trailer(checksums.crc32(out[:program_size]),
                                       [checksums.crc32(payload) for payload in layout.payloads])
    return bytes(out)
