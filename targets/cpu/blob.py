"""The `cpu` delegate blob: object code plus what the runtime needs to call it safely.

Layout (little endian), version 1:

    0   8  magic  b"ETCCPU\\x00\\x01"
    8   4  u32 format version (1)
    12  4  u32 reserved (0)
    16  8  u64 metadata offset   24 8 u64 metadata size    (UTF-8 JSON)
    32  8  u64 object offset     40 8 u64 object size      (relocatable object, ELF on Linux/bare metal)
    48  8  u64 constants offset  56 8 u64 constants size   (tensor bytes, each 64-byte aligned)
    sections follow, each starting at a 64-byte boundary.

Metadata: `triple`, `cpu`, `features` (the full LLVM feature string used),
`required_features` (the `+` ones: what the running CPU must have), `entry`
(symbol of `void entry(void **args)`), `args` (entry order; each `kind`
input/constant/output/scratch, `dtype` (numpy name), `rank`, `shape`, `name`),
`constants` (fqn -> offset/nbytes/dtype/shape inside the constants section),
`scratch_bytes`, `num_threads`, `producer`.

Constants live in the blob, not in the program's constant segment: the
delegate's interface (`backend.delegate` operands) carries only the
partition's runtime inputs, and `to_backend` moves constants used only inside
the partition into it, so the blob is self-contained (one mmap-able unit per
delegate, and a constant folded at compile time, e.g. batch norm into conv
weights, exists only here). The runtime passes pointers into the blob's
constant section (aligned, never copied) as the entry's constant arguments.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"ETCCPU\x00\x01"
VERSION = 1
_HEADER = struct.Struct("<8sII6Q")
ALIGN = 64


class BlobFormatError(ValueError):
    """A blob that is not a cpu-target blob, of an unknown version, or truncated."""


@dataclass
class CpuBlob:
    metadata: dict
    object_bytes: bytes
    constants_bytes: bytes = b""
    # Parsed-from buffer (kept so that constant views stay valid).
    raw: bytes | None = field(default=None, repr=False)

    @property
    def triple(self) -> str:
        return self.metadata["triple"]

    @property
    def entry(self) -> str:
        return self.metadata["entry"]

    @property
    def args(self) -> list:
        return self.metadata["args"]

    @property
    def required_features(self) -> list:
        return list(self.metadata.get("required_features", []))

    def constant(self, name: str) -> np.ndarray:
        """A read-only view of constant `name` in the blob (no copy)."""
        info = self.metadata["constants"][name]
        dtype = np.dtype(info["dtype"])
        count = int(np.prod(info["shape"], dtype=np.int64))
        buf = np.frombuffer(self.constants_bytes, dtype=np.uint8, count=info["nbytes"], offset=info["offset"])
        return buf.view(dtype)[:count].reshape(info["shape"])


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack_constants(constants: dict) -> tuple[bytes, dict]:
    """{name: array} -> (section bytes, {name: {offset, nbytes, dtype, shape}})."""
    out = bytearray()
    table = {}
    for name, array in constants.items():
        a = np.require(np.asarray(array), requirements="C")
        offset = _pad(len(out))
        out.extend(b"\x00" * (offset - len(out)))
        out.extend(a.tobytes())
        table[name] = {"offset": offset, "nbytes": a.nbytes, "dtype": a.dtype.name, "shape": list(a.shape)}
    return bytes(out), table


def serialize(metadata: dict, object_bytes: bytes, constants: dict | None = None) -> bytes:
    section, table = pack_constants(constants or {})
    meta = dict(metadata)
    meta["constants"] = table
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    meta_off = _pad(_HEADER.size)
    obj_off = _pad(meta_off + len(meta_bytes))
    const_off = _pad(obj_off + len(object_bytes))
    header = _HEADER.pack(MAGIC, VERSION, 0, meta_off, len(meta_bytes), obj_off, len(object_bytes), const_off,
                          len(section))
    out = bytearray(header)
    for offset, payload in ((meta_off, meta_bytes), (obj_off, object_bytes), (const_off, section)):
        out.extend(b"\x00" * (offset - len(out)))
        out.extend(payload)
    return bytes(out)


def deserialize(data: bytes) -> CpuBlob:
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise BlobFormatError(f"cpu blob: {len(data)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, version, _, meta_off, meta_len, obj_off, obj_len, const_off, const_len = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BlobFormatError(f"not a cpu blob (magic {magic!r})")
    if version != VERSION:
        raise BlobFormatError(f"cpu blob format version {version} is not supported (this runtime reads {VERSION})")
    for what, off, n in (("metadata", meta_off, meta_len), ("object", obj_off, obj_len),
                         ("constants", const_off, const_len)):
        if off + n > len(data):
            raise BlobFormatError(f"cpu blob: {what} section [{off}, {off + n}) runs past the end ({len(data)} bytes)")
    try:
        metadata = json.loads(data[meta_off:meta_off + meta_len].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BlobFormatError(f"cpu blob: metadata is not JSON: {e}") from None
    for key in ("triple", "entry", "args"):
        if key not in metadata:
            raise BlobFormatError(f"cpu blob: metadata has no '{key}'")
    return CpuBlob(metadata=metadata, object_bytes=data[obj_off:obj_off + obj_len],
                   constants_bytes=data[const_off:const_off + const_len], raw=data)
