"""The cpu blob's table: the fixed-size records a loader reads (`blob_format.TABLE_RECORDS`), written
from a blob's metadata and read back into it. Both loaders (etc's Python runtime and its C++
ExecuTorch backend) read this, never JSON; see `blob.py`'s docstring for the layout."""

from __future__ import annotations

import numpy as np


from etc.targets.cpu import cpu_features
from etc.targets.cpu import image as image_format
from etc.targets.cpu.blob_format import (ARG_KINDS, DERIVE_OPS, DIMS_NAMES, DTYPE_CODES, DTYPE_NAMES, ENTRY_ABIS,
                                         MAX_RANK, NONE32, TABLE_LISTS, TABLE_MAGIC, TABLE_RECORDS)

__all__ = ["TABLE_KEYS", "decode_table", "encode_table"]


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
    records = {name: [] for name in TABLE_LISTS}
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
            metadata.get("num_threads", 1), triple, *(len(records[name]) for name in TABLE_LISTS), len(pools.strings), 0,
            image.size, image.align, image.entry, profile["offset"] if profile else -1, len(image.data))
    out = bytearray(TABLE_RECORDS["head"][0].pack(*head))
    for name in TABLE_LISTS:
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
    for name in TABLE_LISTS:
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
        if rank > MAX_RANK or at + rank > len(dims):
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
