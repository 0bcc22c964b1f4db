"""The `cpu` delegate blob's format: the header, the table's records and codes, the error, and
`CpuBlob` (what `blob.deserialize` gives) with the constants it computes at load. The layout and
why it is so: `blob.py`'s docstring; writing and reading it: `blob.py`; the table: `blob_table.py`;
the metadata checks: `blob_check.py`."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from etc.targets.cpu import image as image_format

MAGIC = b"ETCCPU\x00\x01"
VERSION = 4
HEADER_STRUCT = struct.Struct("<8sII8Q")
HEADER_SIZE = HEADER_STRUCT.size
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
TABLE_LISTS = ("features", "args", "constants", "in_place", "regions", "segments", "fixups", "imports", "dims", "ops")
MAX_RANK = 16

# Narrower element types a constant may be stored as, when every value survives the round trip
# bit for bit: integers in int8/int16 range, floats that are such integers or float16 values.
NARROWER = {"i": ("int8", "int16"), "f": ("int8", "int16", "float16")}
MIN_NARROW_BYTES = 256


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
                out = aligned_empty(math.prod(info["shape"]) * dtype.itemsize).view(dtype).reshape(info["shape"])
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
        out = aligned_empty(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
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


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialized uint8 array of `nbytes` starting at a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes]


def aligned_copy(section) -> np.ndarray:
    """The constant section as a read-only array starting at a 64-byte boundary, as each constant
    inside it is laid out: the code reads weights with vector loads, and a section at a random
    16-byte offset split them across cache lines (a 256-wide encoder ran 12% slower)."""
    out = aligned_empty(len(section))
    out[:] = np.frombuffer(section, dtype=np.uint8)
    out.flags.writeable = False
    return out
