"""Per-segment checksums of a `.pte` file, in a trailer stock ExecuTorch never reads.

Why: the reader bounds-checks every byte it follows, but a flipped bit inside a
constant tensor, a delegate blob or the initial state of a mutable buffer is
still a valid file: it loads and computes a wrong answer without a word (stock
ExecuTorch has the same blind spot). A CRC-32 per region turns that into a
`ProgramError` naming the region.

Where: after the last byte ExecuTorch's layout defines (the end of the segment
data, `segment_base_offset + segment_data_size`, or `program_size` for a file
without segments). Stock ExecuTorch locates everything through the header and
the flatbuffer, so it never looks there. Layout (little endian), read from the
end of the file so that no header field decides whether it is there:

    4n u32 crc[n]    crc[0]: bytes [0, program_size) (headers + flatbuffer);
                     crc[i]: the payload of Program.segments[i - 1]
    4  u32 n         (1 + the number of Program.segments)
    4  u32 algorithm (1: CRC-32 as zlib computes it)
    4  u32 CRC-32 of the trailer bytes above
    8  magic b"etcSUMS1" (the file's last bytes)

A file from etc ends with one; a file from ExecuTorch ends where its data ends.
The trailer must begin exactly where the header says the data ends, and any
other bytes after the data are refused: a damaged header or trailer never passes
for "no checksums".
"""

from __future__ import annotations

import struct
import zlib

from etc.errors import ProgramError
from etc.schema import program as P

MAGIC = b"etcSUMS1"
ALGORITHM_CRC32 = 1
_FOOTER = struct.Struct("<III8s")  # count, algorithm, self-CRC, magic


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def build_trailer(program_crc: int, segment_crcs: list[int]) -> bytes:
    crcs = [program_crc, *segment_crcs]
    body = struct.pack(f"<{len(crcs)}I", *crcs) + struct.pack("<II", len(crcs), ALGORITHM_CRC32)
    return body + struct.pack("<I", crc32(body)) + MAGIC


def find_trailer(data: bytes) -> tuple[int, list[int]] | None:
    """(where the trailer begins, its CRCs) if the file ends with one; ProgramError if it is damaged."""
    if len(data) < _FOOTER.size or data[-8:] != MAGIC:
        return None
    count, algorithm, stored = struct.unpack_from("<III", data, len(data) - _FOOTER.size)
    start = len(data) - _FOOTER.size - 4 * count
    if count < 1 or start < 8:
        raise ProgramError(f"checksum trailer: claims {count} checksums, more than the {len(data)}-byte file holds")
    if crc32(data[start:len(data) - 12]) != stored:
        raise ProgramError(f"checksum trailer at byte {start}: its own checksum does not match (the trailer is "
                           "corrupted)")
    if algorithm != ALGORITHM_CRC32:
        raise ProgramError(f"checksum trailer at byte {start}: unknown checksum algorithm {algorithm}")
    return start, list(struct.unpack_from(f"<{count}I", data, start))


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
