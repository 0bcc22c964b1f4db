"""The `cpu` delegate blob: object code plus what the runtime needs to call it safely.

Layout (little endian), version 3:

    0   8  magic  b"ETCCPU\\x00\\x01"
    8   4  u32 format version (3)
    12  4  u32 CRC-32 of the whole blob, these 4 bytes taken as zero
    16  8  u64 metadata offset   24 8 u64 metadata size    (UTF-8 JSON, deflated)
    32  8  u64 object offset     40 8 u64 object size      (relocatable object, ELF on Linux/bare metal, deflated)
    48  8  u64 constants offset  56 8 u64 constants size   (tensor bytes, each 64-byte aligned)
    the metadata follows the header, the object the metadata; the constants start at a 64-byte boundary.

Why the metadata and the code are deflated (zlib) and the constants are not: the code and its
JSON description shrink 2.5-3.5x (the code of a small int8 CNN was most of its program, over
twice ExecuTorch's .pte, which ships its kernels in the runtime instead), and neither is used in
place (the loader copies the code into its own mapping, the JSON is parsed); weights barely
compress and are read where they lie. Inflating is bounded (`MAX_INFLATED`), so a crafted blob
cannot make the loader allocate without limit.

Metadata: `triple`, `cpu`, `required_features` (the `+` ones: what the running CPU must have), `entry`
(symbol of `void entry(void **args)`), `args` (entry order; each `kind`
input/constant/output/scratch, `dtype` (numpy name), `rank`, `shape`, `name`),
`constants` (fqn -> offset/nbytes/dtype/shape inside the constants section; `tail`: a packed
[panels, rows, cols] weight stored without its last panel's zero columns from `tail` on;
`stored`: the narrower type it is stored as; `derive`: no bytes, the recipe the runtime computes
it by from other constants, `DERIVATIONS`),
`scratch_bytes`, `num_threads`, `producer`, `in_place` (the [output, input] pairs the code
computes in one buffer, which the runtime then lets overlap: `CpuBackend.in_place_state`); in a
profiled build (`CpuPartitioner(profile=True)`) `profile`: `offset` (bytes into the scratch buffer of `regions + 1` int64 counter reads) and
`regions` (each `name`, `ops`: the partition's op indices, `nodes`, `sources`).

Checked before use (`deserialize`): the CRC first, so nothing from a damaged
blob (not its metadata, not a byte of its code) is trusted before it matches,
even when the program's own checksums were turned off
(`Verification.Minimal`); then every section against the blob's size and every
metadata field the runtime reads against its type and range (a constant's
bytes inside the constant section, shapes that fit their dtype's bytes), so a
hand-made or mis-built blob is a `BlobFormatError`, never a KeyError or a read
out of bounds. The object code is validated by the loader (`elf.Elf`).

Constants live in the blob, not in the program's constant segment: the
delegate's interface (`backend.delegate` operands) carries only the
partition's runtime inputs, and `to_backend` moves constants used only inside
the partition into it, so the blob is self-contained (one mmap-able unit per
delegate, and a constant folded at compile time, e.g. batch norm into conv
weights, exists only here). The runtime passes pointers into the blob's
constant section (aligned) as the entry's constant arguments; a constant stored trimmed
(`tail`) is rebuilt once, when the blob is loaded.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"ETCCPU\x00\x01"
VERSION = 3
_HEADER = struct.Struct("<8sII6Q")
ALIGN = 64
# The most bytes the metadata and the object code may inflate to (ViT-B/16's code is about 1 MiB).
MAX_INFLATED = {"metadata": 64 << 20, "object": 512 << 20}


class BlobFormatError(ValueError):
    """A blob that is not a cpu-target blob, of an unknown version, or truncated."""


@dataclass
class CpuBlob:
    metadata: dict
    object_bytes: bytes
    constants_bytes: "bytes | np.ndarray" = b""  # deserialize: a read-only, 64-byte aligned uint8 array
    # Parsed-from buffer (kept so that constant views stay valid).
    raw: bytes | None = field(default=None, repr=False)
    derived: dict = field(default_factory=dict, repr=False)  # constants computed at load (`derive`)

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
        """Constant `name`: a read-only view into the blob (no copy), or, stored narrower
        (`stored`) or with its last panel trimmed (`tail`), the whole array rebuilt at a 64-byte
        boundary, widened and zeros restored."""
        info = self.metadata["constants"][name]
        dtype = np.dtype(info["dtype"])
        if "derive" in info:
            if name not in self.derived:
                compute, _ = DERIVATIONS[info["derive"]["op"]]
                out = _aligned_empty(math.prod(info["shape"]) * dtype.itemsize).view(dtype).reshape(info["shape"])
                out[...] = compute(self, info["derive"], info["shape"])
                out.flags.writeable = False
                self.derived[name] = out
            return self.derived[name]
        stored_dtype = np.dtype(info.get("stored", info["dtype"]))
        buf = np.frombuffer(self.constants_bytes, dtype=np.uint8, count=info["nbytes"], offset=info["offset"])
        stored = buf.view(stored_dtype)
        shape = info["shape"]
        if "tail" not in info and stored_dtype == dtype:
            return stored.reshape(shape)
        out = _aligned_empty(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
        if "tail" in info:
            panels, rows, cols = shape
            head = (panels - 1) * rows * cols
            out[:-1] = stored[:head].reshape(panels - 1, rows, cols)
            out[-1] = 0
            out[-1, :, :info["tail"]] = stored[head:].reshape(rows, info["tail"])
        else:
            out[...] = stored.reshape(shape)
        out.flags.writeable = False
        return out


def _int4_colsum(blob: "CpuBlob", recipe: dict, shape: list) -> np.ndarray:
    """C[n] = sum_k w[n, k] ws[n, k / group] of an 8da4w weight, from its panels: the weight's nibble
    pairs [NB, K/8, 16 x 4] (the program's [N, K/2] bytes regrouped) and the scales [NB, G, 16],
    ungrouped and given to `int4_column_sums`, as the lowering computes it: the same bits."""
    from etc.runtime.kernels.quantized import int4_column_sums

    panels, scales = blob.constant(recipe["weight"]), blob.constant(recipe["scales"])
    nb, kb8, width = scales.shape[0], panels.shape[1], scales.shape[2]
    (n,) = shape
    packed = np.ascontiguousarray(panels.reshape(nb, kb8, width, 4).transpose(0, 2, 1, 3)).reshape(nb * width, -1)[:n]
    s = np.ascontiguousarray(scales.transpose(0, 2, 1)).reshape(nb * width, -1)[:n]
    return int4_column_sums(packed, s)


def _check_int4_colsum(recipe: dict, shape: list, table: dict, fail) -> None:
    w, s = table.get(recipe.get("weight")), table.get(recipe.get("scales"))
    if not (isinstance(w, dict) and isinstance(s, dict) and "derive" not in w and "derive" not in s):
        fail("derive", f"{recipe!r} does not name two stored constants")
    if len(w["shape"]) != 3 or w["dtype"] != "int8" or len(s["shape"]) != 3 or s["dtype"] != "float32" \
            or s["shape"][0] != w["shape"][0] or w["shape"][2] != 4 * s["shape"][2] or len(shape) != 1 \
            or not 0 < shape[0] <= s["shape"][0] * s["shape"][2] or s["shape"][1] < 1 \
            or (w["shape"][1] * 8) % s["shape"][1]:
        fail("derive", f"int4_colsum of {w['shape']} {w['dtype']} and {s['shape']} {s['dtype']} cannot be {shape}")


# Constants the runtime computes at load from others the blob stores: op -> (compute, check).
# Why: what a lowering precomputes from weights (8da4w's column sums: 200 KB of Llama-15M's
# program) costs file bytes; XNNPACK computes such sums when it packs its weights at init.
DERIVATIONS = {"int4_colsum": (_int4_colsum, _check_int4_colsum)}


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
_NARROWER = {"i": ("int8", "int16"), "f": ("int8", "int16", "float16")}
MIN_NARROW_BYTES = 256


def _narrow_dtype(a: np.ndarray) -> "np.dtype | None":
    """The narrowest type of _NARROWER that holds every element of `a` exactly (bit for bit, so
    -0.0 and NaN payloads rule a float out of the integers), when that saves MIN_NARROW_BYTES."""
    for name in _NARROWER.get(a.dtype.kind, ()):
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


def serialize(metadata: dict, object_bytes: bytes, constants: dict | None = None, derived: dict | None = None) -> bytes:
    """The blob of `object_bytes` described by `metadata`, with `constants` ({name: array}; those
    `derived` names, {name: recipe}, as recipes: each is computed back here and must give the
    array bit for bit, or the recipe is wrong and this is a ValueError)."""
    constants = constants or {}
    section, table = pack_constants(constants, derived)
    meta = dict(metadata)
    meta["constants"] = table
    if derived:
        check_metadata(meta, len(section))
        loaded = CpuBlob(meta, b"", _aligned_copy(section))
        for name in derived:
            want = np.ascontiguousarray(constants[name])
            if loaded.constant(name).tobytes() != want.tobytes():
                raise ValueError(f"cpu blob: constant '{name}' derived by {derived[name]} differs from its value")
    meta_bytes = zlib.compress(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode(), 9)
    object_bytes = zlib.compress(bytes(object_bytes), 9)
    meta_off = _HEADER.size
    obj_off = meta_off + len(meta_bytes)
    const_off = _pad(obj_off + len(object_bytes))
    header = _HEADER.pack(MAGIC, VERSION, 0, meta_off, len(meta_bytes), obj_off, len(object_bytes), const_off,
                          len(section))
    out = bytearray(header)
    for offset, payload in ((meta_off, meta_bytes), (obj_off, object_bytes), (const_off, section)):
        out.extend(b"\x00" * (offset - len(out)))
        out.extend(payload)
    struct.pack_into("<I", out, _CRC_AT, _crc(out))
    return bytes(out)


_CRC_AT = 12


def _crc(data) -> int:
    """CRC-32 of `data` with its CRC field taken as zero."""
    crc = zlib.crc32(data[:_CRC_AT])
    crc = zlib.crc32(b"\x00\x00\x00\x00", crc)
    return zlib.crc32(memoryview(data)[_CRC_AT + 4:], crc) & 0xFFFFFFFF


def deserialize(data: bytes) -> CpuBlob:
    """The blob in `data`, checked (see the module docstring); BlobFormatError says what is wrong."""
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise BlobFormatError(f"cpu blob: {len(data)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, version, stored, meta_off, meta_len, obj_off, obj_len, const_off, const_len = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BlobFormatError(f"not a cpu blob (magic {magic!r})")
    if version != VERSION:
        raise BlobFormatError(f"cpu blob format version {version} is not supported (this runtime reads {VERSION}; "
                              "recompile the model)")
    computed = _crc(data)
    if computed != stored:
        raise BlobFormatError(f"cpu blob: checksum mismatch (stored {stored:08x}, computed {computed:08x}): the blob "
                              "is corrupted")
    sections = sorted([("metadata", meta_off, meta_len), ("object", obj_off, obj_len),
                       ("constants", const_off, const_len)], key=lambda section: section[1])
    end = _HEADER.size
    for what, off, n in sections:
        if off < end or (what == "constants" and off % ALIGN) or off + n > len(data):
            raise BlobFormatError(f"cpu blob: {what} section [{off}, {off + n}) is misplaced (overlaps another, "
                                  f"unaligned, or past the end of the {len(data)}-byte blob)")
        end = off + n
    try:
        metadata = json.loads(_inflate(data[meta_off:meta_off + meta_len], "metadata").decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BlobFormatError(f"cpu blob: metadata is not JSON: {e}") from None
    check_metadata(metadata, const_len)
    return CpuBlob(metadata=metadata, object_bytes=_inflate(data[obj_off:obj_off + obj_len], "object"),
                   constants_bytes=_aligned_copy(memoryview(data)[const_off:const_off + const_len]), raw=data)


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


def _aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialized uint8 array of `nbytes` starting at a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes]


def _aligned_copy(section) -> np.ndarray:
    """The constant section as a read-only array starting at a 64-byte boundary, as each constant
    inside it is laid out: the code reads weights with vector loads, and a section at a random
    16-byte offset split them across cache lines (a 256-wide encoder ran 12% slower)."""
    out = _aligned_empty(len(section))
    out[:] = np.frombuffer(section, dtype=np.uint8)
    out.flags.writeable = False
    return out


_ARG_KINDS = ("input", "constant", "output", "dims", "scratch")


def check_metadata(metadata, constants_size: int) -> None:
    """Every metadata field the runtime reads has its type and a value in range."""
    def fail(where, message):
        raise BlobFormatError(f"cpu blob: metadata {where}: {message}")

    def shape_of(value, where) -> list[int]:
        if not isinstance(value, list) or not all(type(d) is int and 0 <= d < 1 << 40 for d in value):
            fail(where, f"{value!r} is not a list of sizes")
        return value

    def dtype_of(value, where):
        try:
            dtype = np.dtype(value)
        except (TypeError, ValueError):
            fail(where, f"{value!r} is not a dtype")
        if dtype.kind not in "biuf":
            fail(where, f"{value!r} is not a tensor element type")
        return dtype

    if not isinstance(metadata, dict):
        fail("", "is not an object")
    for key in ("triple", "entry"):
        if not isinstance(metadata.get(key), str) or not metadata[key]:
            fail(f"'{key}'", "missing or not a string")
    features = metadata.get("required_features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        fail("'required_features'", "is not a list of strings")
    threads = metadata.get("num_threads", 1)
    if type(threads) is not int or not 1 <= threads <= 1024:
        fail("'num_threads'", f"{threads!r} is not a thread count")
    if metadata.get("entry_abi", "flat") not in ("flat", "threaded"):
        fail("'entry_abi'", f"{metadata.get('entry_abi')!r} is not 'flat' or 'threaded'")
    constants = metadata.get("constants", {})
    if not isinstance(constants, dict):
        fail("'constants'", "is not an object")
    derived = []
    for name, info in constants.items():
        where = f"constants['{name}']"
        if not isinstance(info, dict):
            fail(where, "is not an object")
        dtype = dtype_of(info.get("dtype"), f"{where}.dtype")
        shape = shape_of(info.get("shape"), f"{where}.shape")
        offset, nbytes = info.get("offset"), info.get("nbytes")
        if "derive" in info:  # computed at load from other constants
            recipe = info["derive"]
            if not isinstance(recipe, dict) or recipe.get("op") not in DERIVATIONS or nbytes != 0 \
                    or dtype != np.float32:
                fail(f"{where}.derive", f"{recipe!r} is not a float32 recipe of {sorted(DERIVATIONS)} "
                                        "stored as no bytes")
            derived.append((where, recipe, shape))
            continue
        if "stored" in info:  # stored as a narrower type
            stored = dtype_of(info["stored"], f"{where}.stored")
            if stored.name not in _NARROWER.get(dtype.kind, ()) or stored.itemsize >= dtype.itemsize:
                fail(f"{where}.stored", f"{stored} is not a narrower type {dtype} is stored as")
            dtype = stored
        count = math.prod(shape)
        if "tail" in info:  # stored without the last panel's columns from `tail` on
            tail = info["tail"]
            if len(shape) != 3 or type(tail) is not int or not 0 <= tail < shape[2] or shape[0] < 1:
                fail(f"{where}.tail", f"{tail!r} is not a column count of the last panel of {shape}")
            count -= shape[1] * (shape[2] - tail)
        if type(offset) is not int or type(nbytes) is not int or offset < 0 or offset % ALIGN \
                or offset + nbytes > constants_size or nbytes != count * dtype.itemsize:
            fail(where, f"bytes [{offset}, +{nbytes}) of {shape} {dtype} do not fit the {constants_size}-byte "
                        "constant section")
    for where, recipe, shape in derived:  # after every stored constant's own entry is checked
        DERIVATIONS[recipe["op"]][1](recipe, shape, constants, lambda what, m: fail(f"{where}.{what}", m))
    args = metadata.get("args")
    if not isinstance(args, list):
        fail("'args'", "missing or not a list")
    for i, arg in enumerate(args):
        where = f"args[{i}]"
        if not isinstance(arg, dict) or arg.get("kind") not in _ARG_KINDS:
            fail(where, f"is not an argument of kind {', '.join(_ARG_KINDS)}")
        shape = shape_of(arg.get("shape"), f"{where}.shape")
        if arg["kind"] == "scratch":
            continue
        dtype = dtype_of(arg.get("dtype"), f"{where}.dtype")
        dynamic = arg.get("dynamic", [])
        if not isinstance(dynamic, list) or not all(type(d) is int and 0 <= d < len(shape) for d in dynamic) \
                or (dynamic and arg["kind"] not in ("input", "output")):
            fail(f"{where}.dynamic", f"{dynamic!r} is not a list of dims of an input or output")
        if arg["kind"] == "dims" and (arg.get("name") not in ("in", "out") or dtype != np.int64 or len(shape) != 1):
            fail(where, "a dims argument is an int64 vector named 'in' or 'out'")
        if arg["kind"] == "constant":
            info = constants.get(arg.get("name"))
            if info is None:
                fail(f"{where}.name", f"constant {arg.get('name')!r} is not in the constant table")
            if list(shape) != info["shape"] or dtype != np.dtype(info["dtype"]):
                fail(where, f"{shape} {dtype} disagrees with its constant's {info['shape']} {info['dtype']}")
    in_place = metadata.get("in_place", [])
    names = {(a["kind"], a.get("name")) for a in args}
    if not isinstance(in_place, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p)
            and ("output", str(p[0])) in names and ("input", str(p[1])) in names for p in in_place):
        fail("'in_place'", f"{in_place!r} is not a list of [output, input] pairs of this blob's arguments")
    if "profile" in metadata:
        check_profile(metadata["profile"], args, fail)


def check_profile(profile, args: list, fail) -> None:
    """A profiled blob's `profile`: its regions (name, partition op indices, sources) and the counter
    slots (one per region, plus the start) inside the scratch buffer the runtime allocates."""
    if not isinstance(profile, dict) or not isinstance(profile.get("regions"), list) or not profile["regions"]:
        fail("'profile'", "is not an object with a non-empty list of regions")
    for i, region in enumerate(profile["regions"]):
        where = f"profile.regions[{i}]"
        if not isinstance(region, dict) or not isinstance(region.get("name"), str):
            fail(where, "is not an object with a name")
        ops = region.get("ops", [])
        if not isinstance(ops, list) or not all(type(o) is int and 0 <= o < 1 << 31 for o in ops):
            fail(f"{where}.ops", f"{ops!r} is not a list of op indices")
        sources = region.get("sources", [])
        if not isinstance(sources, list) or not all(isinstance(x, str) for x in sources):
            fail(f"{where}.sources", "is not a list of strings")
    offset = profile.get("offset")
    scratch = [a["shape"][0] for a in args if a["kind"] == "scratch" and len(a["shape"]) == 1]
    slots = 8 * (len(profile["regions"]) + 1)
    if type(offset) is not int or offset < 0 or offset % 8 or not scratch or offset + slots > scratch[0]:
        fail("'profile.offset'", f"{offset!r}: its {slots} counter bytes are not inside the scratch buffer")
