"""`.pte` bytes -> PteFile, validating every byte it trusts.

The flatbuffers runtime reads without checks (a bad offset reads garbage or
raises IndexError deep inside), so this reader decodes the flatbuffer itself:
every vtable, table, vector and string access is bounds-checked against the
program data, every union tag and enum value is checked against the schema,
and vector lengths are capped by the bytes that remain, so a corrupted count
cannot make it allocate or loop for long. Flatbuffer references only point
forward and the schema has no recursive tables, so decoding always ends; a
budget on decoded items (proportional to the file size) bounds the work on
files whose objects are shared many times over.

Structural problems raise ProgramError naming the field path and the byte
offset; the segments are then folded back into PteFile payloads and the
program is checked semantically (`etc.schema.validate`).

A file etc wrote ends in a checksum trailer (`etc.schema.checksums`): the
program data is checked before a byte of it is decoded, each segment once the
segment table is read, so a corruption that the structure cannot reveal (a
weight, a delegate blob) is a ProgramError naming the segment, not a wrong answer.
"""

from __future__ import annotations

import re
import struct

from etc.errors import ProgramError
from etc.schema import checksums
from etc.schema import program as P
from etc.schema.kinds import Blob, Scalar, Str, Table, Union, Vector, wire_fields

_FILE_IDENTIFIER = re.compile(rb"ET[0-9a-zA-Z]{2}")
_EXTENDED_HEADER_MAGIC = re.compile(rb"eh[0-9]{2}")
# The smallest extended header: magic, length, program_size, segment_base_offset (older files lack data size).
_MIN_EXTENDED_HEADER_SIZE = 24


class FlatbufferReader:
    """Checked decoding of the flatbuffer held in buf[:limit] (`tables`: as for the writer)."""

    def __init__(self, buf: bytes, limit: int, tables: dict[str, type] | None = None):
        self.buf = buf
        self.limit = limit
        self.tables = P.TABLES if tables is None else tables
        self.budget = 16 * limit + 4096

    def fail(self, path: str, message: str):
        raise ProgramError(f"{path}: {message}")

    def need(self, pos: int, size: int, path: str, what: str):
        if pos < 0 or pos + size > self.limit:
            self.fail(path, f"{what} at byte {pos} (+{size}) lies outside the program data ({self.limit} bytes)")

    def spend(self, count: int, path: str):
        self.budget -= count
        if self.budget < 0:
            self.fail(path, "decoding needs more objects than the file can hold: shared or overlapping data")

    def u32(self, pos: int, path: str, what: str) -> int:
        self.need(pos, 4, path, what)
        return struct.unpack_from("<I", self.buf, pos)[0]

    def reference(self, pos: int, path: str) -> int:
        """Follows the uoffset stored at `pos`."""
        target = pos + self.u32(pos, path, "offset")
        if target >= self.limit:
            self.fail(path, f"offset at byte {pos} points to {target}, past the program data ({self.limit} bytes)")
        return target

    # ------------------------------------------------------------------ tables
    def table(self, cls: type, pos: int, path: str):
        self.spend(1, path)
        self.need(pos, 4, path, "table")
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        self.need(vtable, 4, path, "vtable")
        vtable_size, table_size = struct.unpack_from("<HH", self.buf, vtable)
        if vtable_size < 4 or vtable_size % 2:
            self.fail(path, f"vtable at byte {vtable} has invalid size {vtable_size}")
        self.need(vtable, vtable_size, path, "vtable")
        if table_size < 4:
            self.fail(path, f"table at byte {pos} has invalid size {table_size}")
        self.need(pos, table_size, path, "table")
        slot_count = (vtable_size - 4) // 2

        def field_pos(slot: int, size: int, name: str) -> int | None:
            if slot >= slot_count:
                return None
            offset = struct.unpack_from("<H", self.buf, vtable + 4 + 2 * slot)[0]
            if offset == 0:
                return None
            if offset < 4 or offset + size > table_size:
                self.fail(f"{path}.{name}", f"field offset {offset} (+{size}) outside its table of {table_size} bytes")
            return pos + offset

        values = {}
        slot = 0
        for name, kind in wire_fields(cls):
            field_path = f"{path}.{name}"
            if isinstance(kind, Scalar):
                at = field_pos(slot, kind.size, name)
                if at is not None:
                    values[name] = self.scalar(kind, at, field_path)
            elif isinstance(kind, Union):
                tag_at = field_pos(slot, 1, name + "_type")
                value_at = field_pos(slot + 1, 4, name)
                values[name] = self.union(kind, tag_at, value_at, field_path)
                slot += 1
            else:
                at = field_pos(slot, 4, name)
                if at is not None:
                    values[name] = self.child(kind, self.reference(at, field_path), field_path)
            slot += 1
        return cls(**values)

    def scalar(self, kind: Scalar, at: int, path: str):
        value = struct.unpack_from("<" + kind.fmt, self.buf, at)[0]
        if kind.fmt == "?":
            return self.buf[at] != 0
        if kind.enum is not None:
            try:
                return kind.enum(value)
            except ValueError:
                self.fail(path, f"{value} is not a valid {kind.enum.__name__} (byte {at})")
        return value

    def union(self, kind: Union, tag_at: int | None, value_at: int | None, path: str):
        tag = self.buf[tag_at] if tag_at is not None else 0
        if tag > len(kind.members):
            self.fail(path, f"union type tag {tag} at byte {tag_at} is not one of 0..{len(kind.members)}")
        if tag == 0:
            if value_at is not None:
                self.fail(path, "union has a value but type NONE")
            return None
        member = kind.members[tag - 1]
        if value_at is None:
            self.fail(path, f"union of type {member} has no value")
        return self.table(self.tables[member], self.reference(value_at, path), f"{path}({member})")

    # ------------------------------------------------------- strings, vectors
    def vector_header(self, pos: int, element_size: int, path: str) -> int:
        count = self.u32(pos, path, "vector length")
        available = self.limit - (pos + 4)
        if count * element_size > available:
            self.fail(path, f"vector at byte {pos} claims {count} elements of {element_size} bytes, "
                            f"only {available} bytes remain")
        self.spend(count, path)
        return count

    def child(self, kind, pos: int, path: str):
        if isinstance(kind, Str):
            length = self.vector_header(pos, 1, path)
            end = pos + 4 + length
            if end >= self.limit or self.buf[end] != 0:
                self.fail(path, f"string at byte {pos} is not zero-terminated inside the program data")
            try:
                return bytes(self.buf[pos + 4:end]).decode("utf-8")
            except UnicodeDecodeError as e:
                self.fail(path, f"string at byte {pos} is not valid UTF-8 ({e.reason})")
        if isinstance(kind, Blob):
            length = self.vector_header(pos, 1, path)
            return bytes(self.buf[pos + 4:pos + 4 + length])
        if isinstance(kind, Table):
            return self.table(self.tables[kind.name], pos, path)
        element = kind.element
        if isinstance(element, Scalar):
            count = self.vector_header(pos, element.size, path)
            items = list(struct.unpack_from(f"<{count}{element.fmt}", self.buf, pos + 4))
            if element.fmt == "?":
                items = [byte != 0 for byte in self.buf[pos + 4:pos + 4 + count]]
            elif element.enum is not None:
                items = [self.scalar(element, pos + 4 + i * element.size, f"{path}[{i}]") for i in range(count)]
            return items
        count = self.vector_header(pos, 4, path)
        return [self.child(element, self.reference(pos + 4 + 4 * i, f"{path}[{i}]"), f"{path}[{i}]")
                for i in range(count)]


# ---------------------------------------------------------------- the file
def read_headers(data: bytes) -> tuple[int, int, int]:
    """(program_size, segment_base_offset, segment_data_size) after checking the headers."""
    if len(data) < 8:
        raise ProgramError(f"file is {len(data)} bytes: too short for a program header (8 bytes)")
    if data[4:8] == b"BP08":
        raise ProgramError("this is a bundled program (.bpte, a program with test cases), not a program: load it "
                           "with etc.devtools.bundled_program.BundledProgram.load() or run `etc run --verify`")
    if not _FILE_IDENTIFIER.fullmatch(data[4:8]):
        raise ProgramError(f"bytes 4..8 are {bytes(data[4:8])!r}, not a program file identifier 'ET??'")
    if not _EXTENDED_HEADER_MAGIC.fullmatch(data[8:12]):
        return len(data), 0, 0
    if len(data) < 8 + _MIN_EXTENDED_HEADER_SIZE:
        raise ProgramError(f"file is {len(data)} bytes: truncated inside the extended header")
    header_size = struct.unpack_from("<I", data, 12)[0]
    if header_size < _MIN_EXTENDED_HEADER_SIZE or 8 + header_size > len(data):
        raise ProgramError(f"extended header size {header_size} is invalid for a {len(data)}-byte file")
    program_size, segment_base = struct.unpack_from("<QQ", data, 16)
    segment_data_size = struct.unpack_from("<Q", data, 32)[0] if header_size >= 32 else 0
    if not 8 + header_size <= program_size <= len(data):
        raise ProgramError(f"extended header: program size {program_size} is outside 8+{header_size}.."
                           f"{len(data)} (file truncated?)")
    if segment_base and not program_size <= segment_base <= len(data):
        raise ProgramError(f"extended header: segment base offset {segment_base} is outside "
                           f"{program_size}..{len(data)} (file truncated?)")
    if segment_base + segment_data_size > len(data):
        raise ProgramError(f"extended header: segment data ends at byte {segment_base + segment_data_size}, "
                           f"past the end of the {len(data)}-byte file (file truncated?)")
    return program_size, segment_base, segment_data_size


def segment_payloads(data: bytes, program: P.Program, base: int) -> list[bytes]:
    segments = program.segments or []
    if segments and base == 0:
        # ExecuTorch writes a program whose segments are all empty (no constants: a weightless model,
        # `external_constants=True`) as `segments=[DataSegment(0, 0)]` without the extended header.
        for i, segment in enumerate(segments):
            if segment.size:
                raise ProgramError(f"Program.segments[{i}]: {segment.size} bytes, but the program has no extended "
                                   "header locating its segment data")
        return [b"" for _ in segments]
    payloads = []
    for i, segment in enumerate(segments):
        start = base + segment.offset
        if start + segment.size > len(data):
            raise ProgramError(f"Program.segments[{i}]: bytes {start}..{start + segment.size} lie past the end of "
                               f"the {len(data)}-byte file (file truncated?)")
        payloads.append(bytes(data[start:start + segment.size]))
    return payloads


def _subsegments(sub: P.SubsegmentOffsets, payloads: list[bytes], path: str) -> list[bytes]:
    """The sub-buffers 1.. of a SubsegmentOffsets, each running to the next offset (padding trimmed later)."""
    offsets = sub.offsets or []
    if not offsets:
        return []
    if sub.segment_index >= len(payloads):
        raise ProgramError(f"{path}.segment_index: segment {sub.segment_index} does not exist "
                           f"(the program has {len(payloads)})")
    payload = payloads[sub.segment_index]
    for i, offset in enumerate(offsets):
        if offset > len(payload):
            raise ProgramError(f"{path}.offsets[{i}]: offset {offset} is past the end of its "
                               f"{len(payload)}-byte segment")
    buffers = []
    for i in range(1, len(offsets)):
        end = max(offsets[i], offsets[i + 1]) if i + 1 < len(offsets) else len(payload)
        buffers.append(payload[offsets[i]:end])
    return buffers


def _trim_padding(program: P.Program, constants: list[bytes], mutable: list[list[bytes]]):
    """Cuts the alignment padding off sub-buffers whose size their tensors tell, so that
    deserialize(serialize(f)) == f. Buffers no sized tensor refers to keep their padding."""
    from etc.schema.validate import tensor_nbytes

    sizes: dict[tuple[int | None, int], int] = {}  # (mutable segment or None, buffer index) -> bytes needed
    for plan in program.execution_plan or []:
        for value in plan.values or []:
            tensor = value.val
            if not isinstance(tensor, P.Tensor) or tensor.data_buffer_idx == 0:
                continue
            info = tensor.extra_tensor_info
            if info is not None and info.location == P.TensorDataLocation.EXTERNAL:
                continue
            nbytes = tensor_nbytes(tensor)
            if nbytes is None:
                continue
            segment = None if tensor.allocation_info is None else (
                info.mutable_data_segments_idx if info is not None else 0)
            key = (segment, tensor.data_buffer_idx - 1)
            sizes[key] = max(sizes.get(key, 0), nbytes)
    for (segment, i), nbytes in sizes.items():
        buffers = constants if segment is None else (mutable[segment] if segment < len(mutable) else [])
        if i < len(buffers) and len(buffers[i]) > nbytes:
            buffers[i] = buffers[i][:nbytes]


def _fold_segments(program: P.Program, payloads: list[bytes]) -> P.PteFile:
    """Moves segment contents out of the wire program into PteFile payloads (wire indices -> PteFile indices)."""
    constants = (_subsegments(program.constant_segment, payloads, "Program.constant_segment")
                 if program.constant_segment is not None else [])
    mutable = [_subsegments(sub, payloads, f"Program.mutable_data_segments[{i}]")
               for i, sub in enumerate(program.mutable_data_segments or [])]
    named = {}
    for i, entry in enumerate(program.named_data or []):
        if entry.segment_index >= len(payloads):
            raise ProgramError(f"Program.named_data[{i}].segment_index: segment {entry.segment_index} does not "
                               f"exist (the program has {len(payloads)})")
        if entry.key is None:
            raise ProgramError(f"Program.named_data[{i}].key is missing")
        named[entry.key] = payloads[entry.segment_index]
    delegate_segments: list[bytes] = []
    delegate_index: dict[int, int] = {}
    for p, plan in enumerate(program.execution_plan or []):
        for d, delegate in enumerate(plan.delegates or []):
            ref = delegate.processed
            if ref is None or ref.location != P.DataLocation.SEGMENT:
                continue
            if ref.index >= len(payloads):
                raise ProgramError(f"Program.execution_plan[{p}].delegates[{d}].processed.index: segment "
                                   f"{ref.index} does not exist (the program has {len(payloads)})")
            if ref.index not in delegate_index:
                delegate_index[ref.index] = len(delegate_segments)
                delegate_segments.append(payloads[ref.index])
            delegate.processed = P.BackendDelegateDataReference(location=P.DataLocation.SEGMENT,
                                                                index=delegate_index[ref.index])
    _trim_padding(program, constants, mutable)
    program.segments = None
    program.constant_segment = None
    program.mutable_data_segments = None
    program.named_data = None
    return P.PteFile(program=program, constant_data=constants, delegate_segments=delegate_segments,
                     mutable_data=mutable, named_data=named)


def _checksums(data: bytes, program_size: int, segment_base: int, segment_data_size: int,
               verify: bool) -> tuple[bool, list[int] | None]:
    """(whether the file carries etc's checksum trailer, its CRCs if they are to be verified)."""
    if not verify:
        return data[-8:] == checksums.MAGIC, None
    found = checksums.find_trailer(data)
    has_header = _EXTENDED_HEADER_MAGIC.fullmatch(data[8:12]) and struct.unpack_from("<I", data, 12)[0] >= 32
    if not has_header:  # no header, or one without segment_data_size: nothing delimits the data
        if found is not None:
            raise ProgramError("the file ends in an etc checksum trailer but has no extended header (header "
                               "corrupted?)")
        return False, None
    data_end = segment_base + segment_data_size if segment_base else program_size
    start = found[0] if found is not None else len(data)
    if start != data_end:
        if found is None:
            raise ProgramError(f"{len(data) - data_end} unexpected bytes after the program's data (byte {data_end} "
                               "on): not an etc checksum trailer (file corrupted or appended to?)")
        raise ProgramError(f"the checksum trailer begins at byte {start} but the extended header says the data "
                           f"ends at byte {data_end} (header corrupted?)")
    return found is not None, (found[1] if found is not None else None)


def deserialize_pte(data: bytes | bytearray | memoryview, *, validate: bool = True,
                    verify_checksums: bool = True) -> P.PteFile:
    """Parses `.pte` bytes into a PteFile; raises ProgramError saying what is wrong and where.

    With `validate` (the default) the program is also checked semantically
    (value/operator/delegate indices, tensor shapes and placement) by
    `etc.schema.validate.validate_pte`. With `verify_checksums` (the default), a
    file carrying etc's checksum trailer (`etc.schema.checksums`) has its program
    data checked before it is decoded and each segment after: a corrupted file
    raises ProgramError naming the region instead of loading wrong weights.
    """
    data = bytes(data)
    program_size, segment_base, segment_data_size = read_headers(data)
    has_checksums, crcs = _checksums(data, program_size, segment_base, segment_data_size, verify_checksums)
    if crcs is not None:
        checksums.check(f"program data (bytes 0..{program_size}: headers and flatbuffer)", data[:program_size],
                        crcs[0])
    reader = FlatbufferReader(data, program_size)
    root = reader.u32(0, "Program", "root offset")
    if not 8 <= root < program_size:
        raise ProgramError(f"root offset {root} is outside the program data (8..{program_size})")
    program = reader.table(P.Program, root, "Program")
    payloads = segment_payloads(data, program, segment_base)
    if crcs is not None:
        if len(crcs) != 1 + len(payloads):
            raise ProgramError(f"checksum trailer: {len(crcs) - 1} segment checksums for {len(payloads)} segments")
        roles = checksums.segment_roles(program)
        for i, payload in enumerate(payloads):
            checksums.check(f"Program.segments[{i}] ({roles.get(i, 'unreferenced')})", payload, crcs[i + 1])
    pte = _fold_segments(program, payloads)
    pte.checksums = has_checksums
    if validate:
        from etc.schema.validate import validate_pte

        validate_pte(pte)
    return pte
