"""Per-segment checksums of a `.pte` file, in a trailer stock ExecuTorch never reads.

Why: the reader bounds-checks every byte it follows, but a flipped bit inside a
constant tensor, a delegate blob or the initial state of a mutable buffer is
still a valid file: it loads and computes a wrong answer without a word (stock
ExecuTorch has the same blind spot). A CRC-32 per region turns that into a
`ProgramError` naming the region.

Where: after the last byte ExecuTorch's layout defines (the end of the segment
data, `segment_base_offset + segment_data_size`, or `program_size` for a file
without segments). Stock ExecuTorch locates everything through the header and
the flatbuffer, so it never looks there. Layout (little endian):

    0   8  magic b"etcSUMS1"
    8   4  u32 count          (1 + the number of Program.segments)
    12  4  u32 algorithm      (1: CRC-32 as zlib computes it)
    16  4n u32 crc[count]     crc[0]: bytes [0, program_size) (headers + flatbuffer);
                              crc[i]: the payload of Program.segments[i - 1]
    ..  4  u32 CRC-32 of all trailer bytes above

The trailer runs exactly to the end of the file. A file from etc carries one;
a file from ExecuTorch ends where its data ends. Any other bytes after the data
are refused: a corrupted trailer must never pass for "no checksums".
"""

from __future__ import annotations

import struct
import zlib

from etc.errors import ProgramError
from etc.schema import program as P

MAGIC = b"etcSUMS1"
ALGORITHM_CRC32 = 1
_HEAD = struct.Struct("<8sII")


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def build_trailer(program_crc: int, segment_crcs: list[int]) -> bytes:
    crcs = [program_crc, *segment_crcs]
    body = _HEAD.pack(MAGIC, len(crcs), ALGORITHM_CRC32) + struct.pack(f"<{len(crcs)}I", *crcs)
    return body + struct.pack("<I", crc32(body))


def parse_trailer(trailer: bytes, data_end: int) -> list[int]:
    """The CRCs of a trailer found at byte `data_end`; ProgramError unless it is intact."""
    where = f"checksum trailer at byte {data_end}"
    if len(trailer) < _HEAD.size + 8 or trailer[:8] != MAGIC:
        raise ProgramError(f"{len(trailer)} unexpected bytes after the program's data (byte {data_end} on): "
                           "not an etc checksum trailer (file corrupted or appended to?)")
    _, count, algorithm = _HEAD.unpack_from(trailer)
    if len(trailer) != _HEAD.size + 4 * count + 4:
        raise ProgramError(f"{where}: claims {count} checksums but is {len(trailer)} bytes long (file truncated "
                           "or corrupted)")
    (stored,) = struct.unpack_from("<I", trailer, len(trailer) - 4)
    if crc32(trailer[:-4]) != stored:
        raise ProgramError(f"{where}: its own checksum does not match (the trailer is corrupted)")
    if algorithm != ALGORITHM_CRC32:
        raise ProgramError(f"{where}: unknown checksum algorithm {algorithm}")
    return list(struct.unpack_from(f"<{count}I", trailer, _HEAD.size))


def check(what: str, data, stored: int) -> None:
    computed = crc32(data)
    if computed != stored:
        raise ProgramError(f"{what}: checksum mismatch (stored {stored:08x}, computed {computed:08x}): "
                           "the data is corrupted")


def segment_roles(program) -> dict[int, str]:
    """Program.segments index -> what it holds, for messages ("constant data", "delegate blob ...")."""
    roles: dict[int, list[str]] = {}

    def add(index, role):
        roles.setdefault(index, []).append(role)

    if program.constant_segment is not None:
        add(program.constant_segment.segment_index, "constant data")
    for i, sub in enumerate(program.mutable_data_segments or []):
        add(sub.segment_index, f"mutable data segment {i}")
    for p, plan in enumerate(program.execution_plan or []):
        for d, delegate in enumerate(plan.delegates or []):
            ref = delegate.processed
            if ref is not None and ref.location == P.DataLocation.SEGMENT:
                add(ref.index, f"blob of delegate {d} ('{delegate.id}') of method '{plan.name}'")
    for entry in program.named_data or []:
        add(entry.segment_index, f"named data '{entry.key}'")
    return {index: ", ".join(names) for index, names in roles.items()}
