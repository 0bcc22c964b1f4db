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
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

from etc.targets.cpu import cpu_features
from etc.targets.cpu import image as image_format

MAGIC = b"ETCCPU\x00\x01"
VERSION = 4
_HEADER = struct.Struct("<8sII8Q")
HEADER_SIZE = _HEADER.size
ALIGN = 64
SECTIONS = ("table", "image", "info", "constants")  # in header order
# The most bytes a deflated section may inflate to (ViT-B/16's code is about 1 MiB).
MAX_INFLATED = {"table": 64 << 20, "image": image_format.MAX_IMAGE, "info": 64 << 20}


class BlobFormatError(ValueError):
    """A blob that is not a cpu-target blob, of an unknown version, truncated or inconsistent."""


# ExecuTorch's ScalarType numbers of the element types a cpu blob's arguments and constants have.
DTYPE_CODES = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6,
               "float64": 7, "bool": 11, "uint16": 27, "uint32": 28, "uint64": 29}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
ARG_KINDS = ("input", "constant", "output", "dims", "scratch")
DIMS_NAMES = ("in", "out")
DERIVE_OPS = (None, "int4_colsum")
ENTRY_ABIS = ("flat", "threaded")
NONE32 = 0xFFFFFFFF

# The table's records: name -> (struct, field names). `head` once, then each list in this order,
# its length the head's `n_<name>` count; the pools last.
TABLE_RECORDS = {
    "head": (struct.Struct("<4sHHIIIIIIIIIIIIIIQQQqQ"),
             ("magic", "machine", "entry_abi", "num_threads", "triple", "n_features", "n_args", "n_constants",
              "n_in_place", "n_regions", "n_segments", "n_fixups", "n_imports", "n_dims", "n_ops", "strings_size",
              "reserved", "image_size", "image_align", "entry", "profile_offset", "image_stored")),
    "features": (struct.Struct("<IBBBBIII"), ("name", "kind", "register", "bit", "reserved", "leaf", "subleaf",
                                              "os_state")),
    "args": (struct.Struct("<BBBBIII"), ("kind", "dtype", "rank", "reserved", "index", "dynamic", "dims_at")),
    "constants": (struct.Struct("<IBBBBIIIIQQ"), ("name", "dtype", "stored", "rank", "derive", "dims_at", "tail",
                                                  "source_a", "source_b", "offset", "nbytes")),
    "in_place": (struct.Struct("<II"), ("output", "input")),
    "regions": (struct.Struct("<III"), ("name", "ops_at", "n_ops")),
    "segments": (struct.Struct("<QQII"), ("offset", "size", "prot", "reserved")),
    "fixups": (struct.Struct("<Q"), ("offset",)),
    "imports": (struct.Struct("<QII"), ("offset", "name", "reserved")),
    "dims": (struct.Struct("<Q"), ("size",)),
    "ops": (struct.Struct("<I"), ("op",)),
}
TABLE_MAGIC = b"ETCT"
_LISTS = ("features", "args", "constants", "in_place", "regions", "segments", "fixups", "imports", "dims", "ops")
_MAX_RANK = 16


@dataclass
class CpuBlob:
    metadata: dict
    image: image_format.Image
    constants_bytes: "bytes | np.ndarray" = b""  # deserialize: a read-only, 64-byte aligned uint8 array
    # Parsed-from buffer (kept so that constant views stay valid).
    raw: bytes | None = field(default=None, repr=False)
    derived: dict = field(default_factory=dict, repr=False)  # constants computed at load (`derive`)
    probes: list = field(default_factory=list)  # cpu_features.Probe per required feature

    @property
    def triple(self) -> str:
        return self.metadata["triple"]

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



# Metadata keys the table holds (the rest of a blob's metadata is the info JSON).
TABLE_KEYS = ("triple", "required_features", "entry_abi", "num_threads", "args", "constants", "in_place")


class _Pools:
    """The table's dims, ops and strings pools while a table is written."""

    def __init__(self):
        self.dims: list[int] = []
        self.ops: list[int] = []
        self.strings = bytearray()
        self._at: dict[str, int] = {}

    def string(self, text: str) -> int:
        if text not in self._at:
            self._at[text] = len(self.strings)
            self.strings.extend(text.encode() + b"\0")
        return self._at[text]

    def shape(self, shape) -> int:
        at = len(self.dims)
        self.dims.extend(int(d) for d in shape)
        return at


def encode_table(metadata: dict, image: image_format.Image) -> bytes:
    """The binary table of a blob's (checked) `metadata` and its `image` (see the module docstring)."""
    pools = _Pools()
    records = {name: [] for name in _LISTS}
    for name in metadata.get("required_features", []):
        probe = cpu_features.probe(image.machine, name)
        records["features"].append((pools.string(name), probe.kind, probe.register, probe.bit, 0, probe.leaf,
                                    probe.subleaf, probe.os_state))
    constants = metadata.get("constants", {})
    number = {name: k for k, name in enumerate(constants)}
    for a in metadata["args"]:
        kind = a["kind"]
        index = {"input": lambda: int(a["name"]), "output": lambda: int(a["name"]),
                 "constant": lambda: number[a["name"]], "dims": lambda: DIMS_NAMES.index(a["name"]),
                 "scratch": lambda: 0}[kind]()
        dtype = DTYPE_CODES["uint8" if kind == "scratch" else np.dtype(a["dtype"]).name]
        mask = sum(1 << d for d in a.get("dynamic", ()))
        records["args"].append((ARG_KINDS.index(kind), dtype, len(a["shape"]), 0, index, mask, pools.shape(a["shape"])))
    for name, info in constants.items():
        recipe = info.get("derive")
        records["constants"].append((
            pools.string(name), DTYPE_CODES[np.dtype(info["dtype"]).name],
            DTYPE_CODES[np.dtype(info.get("stored", info["dtype"])).name], len(info["shape"]),
            DERIVE_OPS.index(recipe["op"]) if recipe else 0, pools.shape(info["shape"]), info.get("tail", NONE32),
            number[recipe["weight"]] if recipe else NONE32, number[recipe["scales"]] if recipe else NONE32,
            info["offset"], info["nbytes"]))
    records["in_place"] = [tuple(pair) for pair in metadata.get("in_place", [])]
    profile = metadata.get("profile")
    for region in profile["regions"] if profile else []:
        ops = region.get("ops", [])
        records["regions"].append((pools.string(region["name"]), len(pools.ops), len(ops)))
        pools.ops.extend(ops)
    records["segments"] = [(s.offset, s.size, s.prot, 0) for s in image.segments]
    records["fixups"] = [(offset,) for offset in image.fixups]
    records["imports"] = [(offset, pools.string(name), 0) for offset, name in image.imports]
    records["dims"] = [(d,) for d in pools.dims]
    records["ops"] = [(op,) for op in pools.ops]
    triple = pools.string(metadata["triple"])
    head = (TABLE_MAGIC, image.machine, ENTRY_ABIS.index(metadata.get("entry_abi", "flat")),
            metadata.get("num_threads", 1), triple, *(len(records[name]) for name in _LISTS), len(pools.strings), 0,
            image.size, image.align, image.entry, profile["offset"] if profile else -1, len(image.data))
    out = bytearray(TABLE_RECORDS["head"][0].pack(*head))
    for name in _LISTS:
        record = TABLE_RECORDS[name][0]
        for values in records[name]:
            out.extend(record.pack(*values))
    out.extend(pools.strings)
    return bytes(out)


def decode_table(data: bytes, fail) -> tuple[dict, image_format.Image, list]:
    """(metadata of the table, its image without data, the features' probes) from table bytes; every
    count, index, pool reference and code checked (`fail(message)` raises)."""
    head_record, head_names = TABLE_RECORDS["head"]
    if len(data) < head_record.size:
        fail(f"{len(data)} bytes is shorter than its {head_record.size}-byte head")
    head = dict(zip(head_names, head_record.unpack_from(data)))
    if head["magic"] != TABLE_MAGIC:
        fail(f"head magic {head['magic']!r} is not {TABLE_MAGIC!r}")
    at = head_record.size
    lists = {}
    for name in _LISTS:
        record, names = TABLE_RECORDS[name]
        count = head[f"n_{name}"]
        if count * record.size > len(data) - at:
            fail(f"{count} {name} records of {record.size} bytes do not fit its {len(data)} bytes")
        lists[name] = [dict(zip(names, record.unpack_from(data, at + k * record.size))) for k in range(count)]
        at += count * record.size
    if head["strings_size"] != len(data) - at:
        fail(f"its string pool is {len(data) - at} bytes, the head says {head['strings_size']}")
    strings = data[at:]
    dims = [r["size"] for r in lists["dims"]]
    ops = [r["op"] for r in lists["ops"]]

    def string(offset: int, what: str) -> str:
        end = strings.find(b"\0", offset) if offset < len(strings) else -1
        if end < 0:
            fail(f"{what}: string offset {offset} is not a string of its {len(strings)}-byte pool")
        try:
            return strings[offset:end].decode()
        except UnicodeDecodeError:
            fail(f"{what}: string at {offset} is not UTF-8")

    def shape(at: int, rank: int, what: str) -> list:
        if rank > _MAX_RANK or at + rank > len(dims):
            fail(f"{what}: {rank} dims from {at} do not fit the {len(dims)}-entry dims pool")
        return dims[at:at + rank]

    def dtype(code: int, what: str) -> str:
        if code not in DTYPE_NAMES:
            fail(f"{what}: dtype code {code} is not one of {sorted(DTYPE_NAMES)}")
        return DTYPE_NAMES[code]

    if head["entry_abi"] >= len(ENTRY_ABIS):
        fail(f"entry ABI {head['entry_abi']} is not 0 (flat) or 1 (threaded)")
    metadata = {"triple": string(head["triple"], "triple"), "entry_abi": ENTRY_ABIS[head["entry_abi"]],
                "num_threads": head["num_threads"]}
    features, probes = [], []
    for k, f in enumerate(lists["features"]):
        features.append(string(f["name"], f"features[{k}]"))
        probes.append(cpu_features.Probe(f["kind"], f["leaf"], f["subleaf"], f["register"], f["bit"], f["os_state"]))
    metadata["required_features"] = features
    constants, names = {}, []
    for k, c in enumerate(lists["constants"]):
        where = f"constants[{k}]"
        name = string(c["name"], where)
        info = {"offset": c["offset"], "nbytes": c["nbytes"], "dtype": dtype(c["dtype"], where),
                "shape": shape(c["dims_at"], c["rank"], where)}
        if c["stored"] != c["dtype"]:
            info["stored"] = dtype(c["stored"], where)
        if c["tail"] != NONE32:
            info["tail"] = c["tail"]
        if c["derive"]:
            n = len(lists["constants"])
            if c["derive"] >= len(DERIVE_OPS) or c["source_a"] >= n or c["source_b"] >= n:
                fail(f"{where}: derivation {c['derive']} of constants {c['source_a']} and {c['source_b']} is not "
                     f"one of {DERIVE_OPS[1:]} of two of its {n} constants")
            info["derive"] = {"op": DERIVE_OPS[c["derive"]], "weight": c["source_a"], "scales": c["source_b"]}
        if name in constants:
            fail(f"{where}: constant '{name}' twice")
        constants[name] = info
        names.append(name)
    for info in constants.values():
        if "derive" in info:
            info["derive"]["weight"], info["derive"]["scales"] = names[info["derive"]["weight"]], \
                names[info["derive"]["scales"]]
    metadata["constants"] = constants
    args = []
    for k, a in enumerate(lists["args"]):
        where = f"args[{k}]"
        if a["kind"] >= len(ARG_KINDS):
            fail(f"{where}: kind {a['kind']} is not one of {ARG_KINDS}")
        kind = ARG_KINDS[a["kind"]]
        arg = {"kind": kind, "dtype": dtype(a["dtype"], where), "rank": a["rank"],
               "shape": shape(a["dims_at"], a["rank"], where)}
        if kind == "constant":
            if a["index"] >= len(names):
                fail(f"{where}: constant {a['index']} is not one of its {len(names)} constants")
            arg["name"] = names[a["index"]]
        elif kind == "dims":
            if a["index"] >= len(DIMS_NAMES):
                fail(f"{where}: dims {a['index']} is not 0 (in) or 1 (out)")
            arg["name"] = DIMS_NAMES[a["index"]]
        else:
            arg["name"] = "scratch" if kind == "scratch" else str(a["index"])
        if a["dynamic"]:
            arg["dynamic"] = [d for d in range(32) if a["dynamic"] >> d & 1]
        args.append(arg)
    metadata["args"] = args
    if lists["in_place"]:
        metadata["in_place"] = [[p["output"], p["input"]] for p in lists["in_place"]]
    if head["profile_offset"] >= 0 or lists["regions"]:
        regions = []
        for k, r in enumerate(lists["regions"]):
            if r["ops_at"] + r["n_ops"] > len(ops):
                fail(f"regions[{k}]: {r['n_ops']} ops from {r['ops_at']} do not fit the {len(ops)}-entry ops pool")
            regions.append({"name": string(r["name"], f"regions[{k}]"), "ops": ops[r["ops_at"]:r["ops_at"] + r["n_ops"]]})
        metadata["profile"] = {"offset": head["profile_offset"], "regions": regions}
    image = image_format.Image(
        machine=head["machine"], data=b"", size=head["image_size"], align=head["image_align"], entry=head["entry"],
        segments=[image_format.Segment(s["offset"], s["size"], s["prot"]) for s in lists["segments"]],
        fixups=[f["offset"] for f in lists["fixups"]],
        imports=[(i["offset"], string(i["name"], f"imports[{k}]")) for k, i in enumerate(lists["imports"])])
    if head["image_stored"] > head["image_size"]:
        fail(f"the image stores {head['image_stored']} bytes, more than its size {head['image_size']}")
    return metadata, image, probes, head["image_stored"]


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
    _check_machine(meta["triple"], image)
    if derived:
        loaded = CpuBlob(meta, image, _aligned_copy(section))
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
    _HEADER.pack_into(out, 0, MAGIC, VERSION, 0, *places)
    struct.pack_into("<I", out, _CRC_AT, _crc(out))
    return bytes(out)


_CRC_AT = 12


def _crc(data) -> int:
    """CRC-32 of `data` with its CRC field taken as zero."""
    crc = zlib.crc32(data[:_CRC_AT])
    crc = zlib.crc32(b"\x00\x00\x00\x00", crc)
    return zlib.crc32(memoryview(data)[_CRC_AT + 4:], crc) & 0xFFFFFFFF


def _fail(where: str, message: str):
    raise BlobFormatError(f"cpu blob: {where}: {message}")


_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _check_machine(triple: str, image: image_format.Image) -> None:
    """The image's machine is the triple's architecture (a loader checks the triple against the host)."""
    arch = triple.split("-")[0]
    if image.machine in image_format.MACHINES and _ARCH_ALIASES.get(arch, arch) != image_format.MACHINES[image.machine]:
        _fail("image", f"machine {image_format.MACHINES.get(image.machine, image.machine)} is not the "
                       f"architecture of its triple {triple}")


def sections(data: bytes) -> dict:
    """{section name: (offset, size)} from a blob's header, unchecked (tools and tests)."""
    values = _HEADER.unpack_from(data)[3:]
    return {name: (values[2 * k], values[2 * k + 1]) for k, name in enumerate(SECTIONS)}


def deserialize(data: bytes) -> CpuBlob:
    """The blob in `data`, checked (see the module docstring); BlobFormatError says what is wrong."""
    data = bytes(data)
    if len(data) < HEADER_SIZE:
        raise BlobFormatError(f"cpu blob: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, stored = _HEADER.unpack_from(data)[:3]
    if magic != MAGIC:
        raise BlobFormatError(f"not a cpu blob (magic {magic!r})")
    if version != VERSION:
        raise BlobFormatError(f"cpu blob format version {version} is not supported (this runtime reads {VERSION}; "
                              "recompile the model)")
    computed = _crc(data)
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
    _check_machine(metadata["triple"], image)
    off = places["constants"][0]
    return CpuBlob(metadata=metadata, image=image,
                   constants_bytes=_aligned_copy(memoryview(data)[off:off + const_len]), raw=data, probes=probes)


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



def check_metadata(metadata, constants_size: int) -> None:
    """Every metadata field the runtime reads has its type and a value in range."""
    def fail(where, message):
        raise BlobFormatError(f"cpu blob: metadata {where}: {message}")

    def shape_of(value, where) -> list[int]:
        if not isinstance(value, list) or len(value) > _MAX_RANK \
                or not all(type(d) is int and 0 <= d < 1 << 40 for d in value):
            fail(where, f"{value!r} is not a list of at most {_MAX_RANK} sizes")
        return value

    def dtype_of(value, where):
        try:
            dtype = np.dtype(value)
        except (TypeError, ValueError):
            fail(where, f"{value!r} is not a dtype")
        if dtype.kind not in "biuf" or dtype.name not in DTYPE_CODES:
            fail(where, f"{value!r} is not a tensor element type")
        return dtype

    if not isinstance(metadata, dict):
        fail("", "is not an object")
    if not isinstance(metadata.get("triple"), str) or not metadata["triple"]:
        fail("'triple'", "missing or not a string")
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
    position = {"input": 0, "output": 0}  # the next input/output index: each is named by its position
    dynamic_dims = {"in": 0, "out": 0}  # how many dynamic dims the inputs/outputs have
    seen = set()  # the scratch and dims arguments, each at most once
    for i, arg in enumerate(args):
        where = f"args[{i}]"
        if not isinstance(arg, dict) or arg.get("kind") not in ARG_KINDS:
            fail(where, f"is not an argument of kind {', '.join(ARG_KINDS)}")
        shape = shape_of(arg.get("shape"), f"{where}.shape")
        if arg["kind"] in ("scratch", "dims"):
            key = (arg["kind"], arg.get("name"))
            if key in seen:
                fail(where, f"a second {arg['kind']} argument {arg.get('name')!r}")
            seen.add(key)
        if arg["kind"] == "scratch":
            if len(shape) != 1:
                fail(where, f"the scratch buffer is a byte vector, not {shape}")
            continue
        dtype = dtype_of(arg.get("dtype"), f"{where}.dtype")
        dynamic = arg.get("dynamic", [])
        if not isinstance(dynamic, list) or not all(type(d) is int and 0 <= d < len(shape) for d in dynamic) \
                or dynamic != sorted(set(dynamic)) or (dynamic and arg["kind"] not in ("input", "output")):
            fail(f"{where}.dynamic", f"{dynamic!r} is not an ascending list of dims of an input or output")
        if arg["kind"] in position:
            if arg.get("name") != str(position[arg["kind"]]):
                fail(f"{where}.name", f"{arg.get('name')!r}: {arg['kind']} {position[arg['kind']]} must be named "
                                      f"'{position[arg['kind']]}' (its position)")
            position[arg["kind"]] += 1
            dynamic_dims["in" if arg["kind"] == "input" else "out"] += len(dynamic)
        if arg["kind"] == "dims" and (arg.get("name") not in ("in", "out") or dtype != np.int64 or len(shape) != 1):
            fail(where, "a dims argument is an int64 vector named 'in' or 'out'")
        if arg["kind"] == "constant":
            info = constants.get(arg.get("name"))
            if info is None:
                fail(f"{where}.name", f"constant {arg.get('name')!r} is not in the constant table")
            if list(shape) != info["shape"] or dtype != np.dtype(info["dtype"]):
                fail(where, f"{shape} {dtype} disagrees with its constant's {info['shape']} {info['dtype']}")
    for arg in args:
        if arg["kind"] == "dims" and arg["shape"] != [dynamic_dims[arg["name"]]]:
            fail(f"'args' dims '{arg['name']}'", f"{arg['shape']} does not hold the {dynamic_dims[arg['name']]} "
                                                 f"dynamic dims of the {arg['name']}puts")
        if arg["kind"] in ("input", "output") and arg.get("dynamic") \
                and ("dims", "in" if arg["kind"] == "input" else "out") not in seen:
            fail("'args'", f"a dynamic {arg['kind']} without the dims argument that gives its sizes")
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
