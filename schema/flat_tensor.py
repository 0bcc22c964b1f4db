"""The `.ptd` data file: ExecuTorch's FlatTensor format, written and read by etc.

A `.ptd` holds named tensors outside any program (`schema/flat_tensor.fbs` is the
wire schema): a program's constant tensor whose `ExtraTensorInfo.location` is
EXTERNAL names its data by `fully_qualified_name`, the key of an entry here. One
file can serve several programs (each looks up the keys it uses), so weights are
shipped, updated and shared apart from the programs.

- `PtdFile`: {key: `DataEntry(data, layout)`}; `serialize_ptd(ptd) -> bytes`.
- `read_ptd(data)`: every offset, length and index checked (ProgramError naming
  what is wrong); etc's CRC trailer (`etc.schema.checksums`, the same design as a
  `.pte`'s: CRC-32 of the header+flatbuffer, then of each segment) is verified when
  present. Stock ExecuTorch finds everything through the header, so it never reads
  the trailer; a file from ExecuTorch has none.
- `map_ptd(path)`: the file memory-mapped (read-only), entries as views into the
  mapping: weights are never copied.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field

from etc.errors import ProgramError, SerializationError
from etc.schema import checksums
from etc.schema import program as P
from etc.schema.kinds import INT, UBYTE, UINT, ULONG, SchemaTable, Str, Table, Vector, fb

FILE_IDENTIFIER = b"FT01"
HEADER_MAGIC = b"FH01"
# magic, header length, flatbuffer offset, flatbuffer size, segment base offset, segment data size
_HEADER = struct.Struct("<4sIQQQQ")
HEADER_SIZE = _HEADER.size  # 40
_FLATBUFFER_ALIGNMENT = 16
FLAT_TENSOR_VERSION = 0


class _Wire:
    """The wire tables, named as in flat_tensor.fbs; field order is the vtable order."""

    @dataclass
    class TensorLayout(SchemaTable):
        scalar_type: P.ScalarType = fb(P.SCALAR_TYPE)
        sizes: list | None = fb(Vector(INT))
        dim_order: list | None = fb(Vector(UBYTE))

    @dataclass
    class DataSegment(SchemaTable):
        offset: int = fb(ULONG)
        size: int = fb(ULONG)

    @dataclass
    class NamedData(SchemaTable):
        key: str | None = fb(Str())
        segment_index: int = fb(UINT)
        tensor_layout: object = fb(Table("TensorLayout"))

    @dataclass
    class FlatTensor(SchemaTable):
        version: int = fb(UINT)
        segments: list | None = fb(Vector(Table("DataSegment")))
        named_data: list | None = fb(Vector(Table("NamedData")))


TABLES = {name: cls for name, cls in vars(_Wire).items() if isinstance(cls, type)}
TensorLayout = _Wire.TensorLayout


@dataclass
class DataEntry:
    """One named blob: its bytes (bytes or a memoryview into a mapped file) and, for a tensor,
    its layout (dtype, sizes, dim order)."""

    data: object
    layout: TensorLayout | None = None


@dataclass
class PtdFile:
    """A `.ptd`'s named data, free of file offsets: {key: DataEntry}."""

    entries: dict[str, DataEntry] = field(default_factory=dict)
    checksums: bool = True  # write etc's CRC trailer

    def add_tensor(self, key: str, array) -> None:
        """Add a numpy array under `key` (C-contiguous bytes, its dtype and sizes as the layout)."""
        import numpy as np

        from etc.schema.scalar_type import from_numpy_dtype

        array = np.ascontiguousarray(array)
        self.entries[key] = DataEntry(array.tobytes(), TensorLayout(
            scalar_type=from_numpy_dtype(array.dtype), sizes=[int(s) for s in array.shape],
            dim_order=list(range(array.ndim))))

    def __len__(self) -> int:
        return len(self.entries)


def _align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def serialize_ptd(ptd: PtdFile, *, segment_alignment: int = 128, tensor_alignment: int = 16) -> bytes:
    """The `.ptd` bytes: identical payloads share one segment (as ExecuTorch shares a buffer)."""
    from etc.schema.serializer import check_alignment, FlatbufferWriter

    check_alignment("segment_alignment", segment_alignment)
    check_alignment("tensor_alignment", tensor_alignment)
    alignment = math.lcm(segment_alignment, tensor_alignment)
    segments, payloads, named, by_content = [], [], [], {}
    end = 0
    for key, entry in ptd.entries.items():
        if not isinstance(key, str) or not key:
            raise SerializationError(f"PtdFile: key {key!r} is not a non-empty str")
        payload = bytes(entry.data)
        index = by_content.get(payload)
        if index is None:
            offset = _align_up(end, alignment)
            index = by_content[payload] = len(segments)
            segments.append(_Wire.DataSegment(offset=offset, size=len(payload)))
            payloads.append(payload)
            end = offset + len(payload)
        named.append(_Wire.NamedData(key=key, segment_index=index, tensor_layout=entry.layout))
    root = _Wire.FlatTensor(version=FLAT_TENSOR_VERSION, segments=segments, named_data=named)
    writer = FlatbufferWriter({}, tables=TABLES)
    writer.builder.Finish(writer.table(root, "FlatTensor"), file_identifier=FILE_IDENTIFIER)
    flatbuffer = bytes(writer.builder.Output())

    # As ExecuTorch: the extended header goes in at byte 8, padded to 16, the root offset moved past it.
    header_size = _align_up(HEADER_SIZE, max(_FLATBUFFER_ALIGNMENT, writer.builder.minalign))
    segment_base = _align_up(header_size + len(flatbuffer), segment_alignment)
    header = _HEADER.pack(HEADER_MAGIC, HEADER_SIZE, header_size, len(flatbuffer), segment_base, end)
    root_offset = struct.unpack_from("<I", flatbuffer, 0)[0] + header_size
    out = bytearray(struct.pack("<I", root_offset) + flatbuffer[4:8])
    out += header + bytes(header_size - len(header)) + flatbuffer[8:]
    program_size = len(out)
    out += bytes(segment_base - len(out))
    for segment, payload in zip(segments, payloads):
        out += bytes(segment_base + segment.offset - len(out))
        out += payload
    if ptd.checksums:
        out += checksums.build_trailer(checksums.crc32(out[:program_size]),
                                       [checksums.crc32(p) for p in payloads])
    return bytes(out)


def read_ptd(data, *, verify_checksums: bool = True, source: str = "<bytes>") -> PtdFile:
    """A PtdFile from `.ptd` bytes (or a memoryview of a mapped file: entries are then views
    into it, never copies). ProgramError says what is wrong, naming `source`."""
    from etc.schema.reader import FlatbufferReader

    view = memoryview(data).cast("B")
    size = len(view)

    def fail(message: str):
        raise ProgramError(f"{source}: {message}")

    if size < 8 + HEADER_SIZE or bytes(view[4:8]) != FILE_IDENTIFIER:
        fail(f"not a .ptd data file (bytes 4..8 are {bytes(view[4:8])!r}, not {FILE_IDENTIFIER!r})")
    magic, length, fb_offset, fb_size, segment_base, segment_size = _HEADER.unpack_from(view, 8)
    if magic != HEADER_MAGIC or length < HEADER_SIZE:
        fail(f"the extended header at byte 8 is damaged (magic {magic!r}, length {length})")
    fb_end = fb_offset + fb_size
    if fb_end > size or segment_base < fb_end or segment_base + segment_size > size:
        fail(f"the header's flatbuffer [{fb_offset}, {fb_end}) or segment data [{segment_base}, "
             f"{segment_base + segment_size}) lies outside the {size}-byte file (truncated?)")
    data_end = segment_base + segment_size
    # The trailer, if any, must begin exactly where the data ends.
    trailer = checksums.find_trailer(view) if size > data_end else None
    if size > data_end and trailer is None:
        fail(f"{size - data_end} unexpected bytes after the data (truncated or damaged checksum trailer?)")
    if trailer is not None and trailer[0] != data_end:
        fail(f"the checksum trailer begins at byte {trailer[0]}, not where the data ends ({data_end})")
    buf = bytes(view[:fb_end])
    reader = FlatbufferReader(buf, fb_end, tables=TABLES)
    root = struct.unpack_from("<I", buf, 0)[0]
    if not 8 <= root < fb_end:
        fail(f"root offset {root} lies outside the flatbuffer (8..{fb_end})")
    try:
        wire = reader.table(_Wire.FlatTensor, root, "FlatTensor")
    except ProgramError as exc:
        fail(exc.message)
    if wire.version != FLAT_TENSOR_VERSION:
        fail(f"FlatTensor.version {wire.version} is not supported (this reader knows version "
             f"{FLAT_TENSOR_VERSION})")
    segments = wire.segments or []
    for i, segment in enumerate(segments):
        if segment.offset + segment.size > segment_size:
            fail(f"FlatTensor.segments[{i}] [{segment.offset}, {segment.offset + segment.size}) lies outside "
                 f"the {segment_size} bytes of segment data")
    if trailer is not None and verify_checksums:
        crcs = trailer[1]
        if len(crcs) != 1 + len(segments):
            fail(f"the checksum trailer has {len(crcs)} checksums for {len(segments)} segments")
        checksums.check(f"{source}: header and flatbuffer", view[:fb_end], crcs[0])
        for i, segment in enumerate(segments):
            start = segment_base + segment.offset
            checksums.check(f"{source}: segment {i}", view[start:start + segment.size], crcs[i + 1])
    entries = {}
    for i, entry in enumerate(wire.named_data or []):
        if not entry.key:
            fail(f"FlatTensor.named_data[{i}].key is missing")
        if entry.segment_index >= len(segments):
            fail(f"FlatTensor.named_data[{i}] ('{entry.key}'): segment {entry.segment_index} does not exist "
                 f"(the file has {len(segments)})")
        if entry.key in entries:
            fail(f"FlatTensor.named_data: key '{entry.key}' appears twice")
        segment = segments[entry.segment_index]
        start = segment_base + segment.offset
        entries[entry.key] = DataEntry(view[start:start + segment.size], entry.tensor_layout)
    return PtdFile(entries, checksums=trailer is not None)


def map_ptd(path, *, verify_checksums: bool = True) -> PtdFile:
    """`path` memory-mapped read-only and read (`read_ptd`); the entries are views of the mapping,
    which lives as long as any of them. A missing file is a ProgramError."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise ProgramError(f"{path}: the .ptd data file is empty")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as error:
        raise ProgramError(f"cannot read data file '{path}': {error.strerror}") from None
    return read_ptd(mapped, verify_checksums=verify_checksums, source=path)
