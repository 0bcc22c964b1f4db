"""The `cpu` delegate blob: pre-linked code plus what a loader needs to call it safely.

Layout (little endian), version 4:

    0   8  magic  b"ETCCPU\\x00\\x01"
    8   4  u32 format version (4)
    12  4  u32 CRC-32 of the whole blob, these 4 bytes taken as zero
    16  8  u64 table offset      24 8 u64 table size      (the loader's description, binary, deflated)
    32  8  u64 image offset      40 8 u64 image size      (the pre-linked code, `image.Image.data`, deflated)
    48  8  u64 info offset       56 8 u64 info size       (UTF-8 JSON for tools, deflated; loaders never read it)
    64  8  u64 constants offset  72 8 u64 constants size  (tensor bytes, each 64-byte aligned)
    the sections follow the header in this order; the constants start at a 64-byte boundary.

Two loaders read it: etc's Python runtime (`runtime.py`) and etc's ExecuTorch backend
(`runtime/executorch_backend/`, C++), so what they need is a table of fixed-size records, not JSON:
a C++ loader reads it with a bounds-checked cursor and no parser. The table (`TABLE_RECORDS`):

    head      machine (ELF e_machine), entry ABI (0 flat, 1 threaded), num_threads, triple, the
              record counts, the image's size, segment alignment, entry offset and stored bytes, the
              profile counters' offset in the scratch buffer (-1: not profiled)
    features  each required CPU feature: its LLVM name and its probe (`cpu_features.Probe`)
    args      the entry's arguments in order: kind (input, constant, output, dims, scratch), dtype
              (ExecuTorch's ScalarType numbering), rank, index (input/output position, constant
              number, dims 0 = in / 1 = out), dynamic-dim mask, first dim in the dims pool
    constants name, dtype, the type it is stored as, rank, derivation (0 none, 1 int4_colsum with its
              two source constants), first dim, columns kept of a trimmed last panel, offset, bytes
    in_place  (output, input) pairs computed in one buffer
    regions   profiled builds: each region's name and its partition op indices (ops pool)
    segments  image segments: offset, size, protection (`image.R|W|X`)
    fixups    image offsets of the RELATIVE words; imports: (slot offset, symbol name)
    pools     dims (u64), ops (u32), strings (NUL-terminated, referenced by offset)

What only tools read (the decisions `etc inspect` prints, the producer, the CPU name, the entry
symbol, a profile region's FX nodes and source lines) is the info JSON. `deserialize` puts both
back into one `metadata` dict of the shape `serialize` takes.

Why the table, the code and the info are deflated (zlib) and the constants are not: the code and
its description shrink 2.5-3.5x (the code of a small int8 CNN was most of its program, over twice
ExecuTorch's .pte, which ships its kernels in the runtime instead), and none is used in place (the
loader inflates the code into its own mapping); weights barely compress and are read where they
lie. Inflating is bounded (`MAX_INFLATED`), so a crafted blob cannot make a loader allocate
without limit.

Checked before use (`deserialize`): the CRC first, so nothing from a damaged blob (not its table,
not a byte of its code) is trusted before it matches, even when the program's own checksums were
turned off (`Verification.Minimal`); then every section against the blob's size, every table
record against its counts and pools, every metadata field the runtime reads against its type and
range (a constant's bytes inside the constant section, shapes that fit their dtype's bytes), and
the image's promises (`image.check`: segments, entry, fixups and imports inside it), so a
hand-made or mis-built blob is a `BlobFormatError`, never a KeyError or a write out of bounds. The
C++ loader makes the same checks in the same order.

Constants live in the blob, not in the program's constant segment: the delegate's interface
(`backend.delegate` operands) carries only the partition's runtime inputs, and `to_backend` moves
constants used only inside the partition into it, so the blob is self-contained (one mmap-able
unit per delegate, and a constant folded at compile time, e.g. batch norm into conv weights,
exists only here). A loader passes pointers into the blob's constant section (aligned) as the
entry's constant arguments; a constant stored trimmed (`tail`), narrower (`stored`) or as a
recipe (`derive`) is rebuilt once, when the blob is loaded.

The modules: this one writes (`serialize`, `pack_constants`, `assemble`) and reads (`deserialize`,
`sections`) a blob; `blob_format.py` holds the format's constants, `BlobFormatError` and `CpuBlob`;
`blob_table.py` the table's encoder and decoder; `blob_check.py` the metadata checks. Every public
name of the four is importable from here.
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np

from etc.targets.cpu import image as image_format
from etc.targets.cpu.blob_check import check_metadata, check_profile
from etc.targets.cpu.blob_format import (ALIGN, DERIVATIONS, DERIVE_OPS, HEADER_SIZE, HEADER_STRUCT, MAGIC,
                                         MAX_INFLATED, MIN_NARROW_BYTES, NARROWER, SECTIONS, TABLE_LISTS, TABLE_MAGIC,
                                         TABLE_RECORDS, VERSION, BlobFormatError, CpuBlob, aligned_copy)
from etc.targets.cpu.blob_table import TABLE_KEYS, decode_table, encode_table

__all__ = ["DERIVATIONS", "DERIVE_OPS", "MAX_INFLATED", "TABLE_LISTS", "TABLE_MAGIC", "TABLE_RECORDS",
           "BlobFormatError", "CpuBlob", "assemble", "check_metadata", "check_profile", "crc", "decode_table",
           "deserialize", "encode_table", "pack_constants", "sections", "serialize"]

# --------------------------------------------------------------------------- writing

def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# A panel layout's trimmed zeros must save at least this much to be worth a copy at load.
MIN_TRIM_BYTES = 4096


def _kept_tail(a: np.ndarray) -> "int | None":
    """For `a` = [panels, rows, cols] whose last panel ends in all-zero columns (the padding of a
    packed weight's N to whole panels: Llama's 288 columns in panels of 64), how many columns of
    the last panel to store; None when that saves less than MIN_TRIM_BYTES. Zero means bit-zero
    (-0.0 is kept), so the rebuilt array is the packed one byte for byte."""
    if a.ndim != 3 or a.size == 0 or a.dtype.itemsize not in (1, 2, 4, 8):
        return None
    bits = a[-1].view(np.dtype(f"u{a.dtype.itemsize}"))
    nonzero = np.flatnonzero(bits.any(axis=0))
    keep = int(nonzero[-1]) + 1 if nonzero.size else 0
    return keep if (a.shape[2] - keep) * a.shape[1] * a.dtype.itemsize >= MIN_TRIM_BYTES else None


# Narrower element types a constant may be stored as, when every value survives the round trip
# bit for bit: integers in int8/int16 range, floats that are such integers or float16 values.


def _narrow_dtype(a: np.ndarray) -> "np.dtype | None":
    """The narrowest type of NARROWER that holds every element of `a` exactly (bit for bit, so
    -0.0 and NaN payloads rule a float out of the integers), when that saves MIN_NARROW_BYTES."""
    for name in NARROWER.get(a.dtype.kind, ()):
        narrow = np.dtype(name)
        if narrow.itemsize >= a.dtype.itemsize or a.size * (a.dtype.itemsize - narrow.itemsize) < MIN_NARROW_BYTES:
            continue
        flat = a.reshape(-1)
        with np.errstate(invalid="ignore", over="ignore"):
            if all(np.array_equal(part.astype(narrow).astype(a.dtype).view(np.uint8), part.view(np.uint8))
                   for part in (flat[:1024], flat)):  # most arrays fail on their first elements
                return narrow
    return None


def pack_constants(constants: dict, derived: dict | None = None) -> tuple[bytes, dict]:
    """{name: array} -> (section bytes, {name: {offset, nbytes, dtype, shape[, tail][, stored][, derive]}}).

    A constant `derived` names ({name: recipe}, `DERIVATIONS`) is not stored: its entry holds the
    recipe, and the runtime computes it from the constants the recipe names.

    A packed weight whose last column panel is mostly zero padding is stored without it: its
    full panels, then the last panel's first `tail` columns. Llama-15M's fp32 weights padded
    288 -> 320 columns carried 1.4 MB of zeros. A constant whose values a narrower type holds
    exactly is stored as that type (`stored`): an int8 filter the f32 depthwise kernel reads
    widened (etc-cpu-prepack-constants folds the cast) ships as int8. `CpuBlob.constant`
    rebuilds both at load."""
    out = bytearray()
    table = {}
    derived = derived or {}
    for name, array in constants.items():
        a = np.require(np.asarray(array), requirements="C")
        if name in derived:
            table[name] = {"offset": 0, "nbytes": 0, "dtype": a.dtype.name, "shape": list(a.shape),
                           "derive": dict(derived[name])}
            continue
        offset = _pad(len(out))
        out.extend(b"\x00" * (offset - len(out)))
        info = {"offset": offset, "dtype": a.dtype.name, "shape": list(a.shape)}
        narrow = _narrow_dtype(a)
        if narrow is not None:
            info["stored"] = narrow.name
            a = a.astype(narrow)
        tail = _kept_tail(a)
        if tail is None:
            data = a.tobytes()
        else:
            data = a[:-1].tobytes() + np.ascontiguousarray(a[-1, :, :tail]).tobytes()
            info["tail"] = tail
        out.extend(data)
        table[name] = {**info, "nbytes": len(data)}
    return bytes(out), table


def _info_of(metadata: dict) -> dict:
    """The part of `metadata` the table does not hold (what tools read)."""
    info = {k: v for k, v in metadata.items() if k not in TABLE_KEYS and k != "profile"}
    if "profile" in metadata:
        info["profile"] = {"regions": [{k: v for k, v in r.items() if k not in ("name", "ops")}
                                       for r in metadata["profile"]["regions"]]}
    return info


def serialize(metadata: dict, code: "bytes | image_format.Image", constants: dict | None = None,
              derived: dict | None = None) -> bytes:
    """The blob of `code` (a relocatable object, linked here with `link.link` at `metadata['entry']`,
    or an image already linked) described by `metadata`, with `constants` ({name: array}; those
    `derived` names, {name: recipe}, as recipes: each is computed back here and must give the
    array bit for bit, or the recipe is wrong and this is a ValueError). Metadata a loader would
    refuse is refused here (BlobFormatError)."""
    if isinstance(code, image_format.Image):
        image = code
    elif bytes(code[:4]) == b"\x7fELF" and len(code) >= 20 \
            and struct.unpack_from("<H", code, 18)[0] not in image_format.MACHINES:
        image = image_format.unlinked(struct.unpack_from("<H", code, 18)[0])
    else:
        from etc.targets.cpu.link import link

        image = link(bytes(code), metadata["entry"])
    constants = constants or {}
    section, table = pack_constants(constants, derived)
    meta = dict(metadata)
    meta["constants"] = table
    check_metadata(meta, len(section))
    image_format.check(image, lambda m: _fail("image", m))
    check_machine(meta["triple"], image)
    if derived:
        loaded = CpuBlob(meta, image, aligned_copy(section))
        for name in derived:
            want = np.ascontiguousarray(constants[name])
            if loaded.constant(name).tobytes() != want.tobytes():
                raise ValueError(f"cpu blob: constant '{name}' derived by {derived[name]} differs from its value")
    return assemble({"table": zlib.compress(encode_table(meta, image), 9), "image": zlib.compress(image.data, 9),
                     "info": zlib.compress(json.dumps(_info_of(meta), sort_keys=True, separators=(",", ":")).encode(),
                                           9),
                     "constants": section})


def assemble(stored: dict) -> bytes:
    """The blob of these stored sections ({name: bytes as stored, deflated where the format says}),
    header and CRC written: `serialize`'s last step, with none of its checks (tests make blobs a
    writer refuses with it, to reach the reader's checks)."""
    out = bytearray(HEADER_SIZE)
    places = []
    for name in SECTIONS:
        if name == "constants":
            out.extend(bytes(_pad(len(out)) - len(out)))
        places += [len(out), len(stored[name])]
        out.extend(stored[name])
    HEADER_STRUCT.pack_into(out, 0, MAGIC, VERSION, 0, *places)
    struct.pack_into("<I", out, CRC_AT, crc(out))
    return bytes(out)


CRC_AT = 12


def crc(data) -> int:
    """CRC-32 of `data` with its CRC field taken as zero."""
    crc = zlib.crc32(data[:CRC_AT])
    crc = zlib.crc32(b"\x00\x00\x00\x00", crc)
    return zlib.crc32(memoryview(data)[CRC_AT + 4:], crc) & 0xFFFFFFFF


def _fail(where: str, message: str):
    raise BlobFormatError(f"cpu blob: {where}: {message}")


_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def check_machine(triple: str, image: image_format.Image) -> None:
    """The image's machine is the triple's architecture (a loader checks the triple against the host)."""
    arch = triple.split("-")[0]
    if image.machine in image_format.MACHINES and _ARCH_ALIASES.get(arch, arch) != image_format.MACHINES[image.machine]:
        _fail("image", f"machine {image_format.MACHINES.get(image.machine, image.machine)} is not the "
                       f"architecture of its triple {triple}")


def sections(data: bytes) -> dict:
    """{section name: (offset, size)} from a blob's header, unchecked (tools and tests)."""
    values = HEADER_STRUCT.unpack_from(data)[3:]
    return {name: (values[2 * k], values[2 * k + 1]) for k, name in enumerate(SECTIONS)}


def deserialize(data: bytes) -> CpuBlob:
    """The blob in `data`, checked (see the module docstring); BlobFormatError says what is wrong."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise BlobFormatError(f"cpu blob: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, stored = HEADER_STRUCT.unpack_from(data)[:3]
    if magic != MAGIC:
        raise BlobFormatError(f"not a cpu blob (magic {magic!r})")
    if version != VERSION:
        raise BlobFormatError(f"cpu blob format version {version} is not supported (this runtime reads {VERSION}; "
                              "recompile the model)")
    computed = crc(data)
    if computed != stored:
        raise BlobFormatError(f"cpu blob: checksum mismatch (stored {stored:08x}, computed {computed:08x}): the blob "
                              "is corrupted")
    places = sections(data)
    end = HEADER_SIZE
    for name in SECTIONS:
        off, n = places[name]
        if off < end or (name == "constants" and off % ALIGN) or off + n > len(data):
            raise BlobFormatError(f"cpu blob: {name} section [{off}, {off + n}) is misplaced (overlaps another, "
                                  f"unaligned, out of order, or past the end of the {len(data)}-byte blob)")
        end = off + n

    def section(name: str) -> bytes:
        off, n = places[name]
        return data[off:off + n]

    metadata, image, probes, stored_bytes = decode_table(_inflate(section("table"), "table"),
                                                         lambda m: _fail("table", m))
    try:
        info = json.loads(_inflate(section("info"), "info").decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BlobFormatError(f"cpu blob: info is not JSON: {e}") from None
    if not isinstance(info, dict):
        _fail("info", "is not an object")
    extra_regions = info.pop("profile", {}).get("regions", []) if isinstance(info.get("profile"), dict) else []
    metadata = {**info, **metadata}
    if "profile" in metadata and isinstance(extra_regions, list) \
            and len(extra_regions) == len(metadata["profile"]["regions"]):
        for region, extra in zip(metadata["profile"]["regions"], extra_regions):
            if isinstance(extra, dict):
                region.update({k: v for k, v in extra.items() if k not in ("name", "ops")})
    const_len = places["constants"][1]
    check_metadata(metadata, const_len)
    image.data = _inflate(section("image"), "image")
    if len(image.data) != stored_bytes:
        _fail("image", f"inflates to {len(image.data)} bytes, the table says {stored_bytes}")
    image_format.check(image, lambda m: _fail("image", m))
    check_machine(metadata["triple"], image)
    off = places["constants"][0]
    return CpuBlob(metadata=metadata, image=image,
                   constants_bytes=aligned_copy(memoryview(data)[off:off + const_len]), raw=data, probes=probes)


def _inflate(section: bytes, what: str) -> bytes:
    """A deflated section's bytes, at most MAX_INFLATED[what] of them."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(section, MAX_INFLATED[what])
    except zlib.error as e:
        raise BlobFormatError(f"cpu blob: the {what} section is not a zlib stream: {e}") from None
    if inflater.unconsumed_tail:
        raise BlobFormatError(f"cpu blob: the {what} section inflates past {MAX_INFLATED[what]} bytes")
    if not inflater.eof or inflater.unused_data:
        raise BlobFormatError(f"cpu blob: the {what} section is not one whole zlib stream")
    return out
