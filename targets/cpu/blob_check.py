"""The checks a cpu blob's metadata passes before anything uses it: every field the runtime reads
has its type and a value in range (the writer refuses what a loader would, the reader what a
hand-made or damaged blob holds), so a bad blob is a `BlobFormatError`, never a KeyError."""

from __future__ import annotations

import math

import numpy as np

from etc.targets.cpu.blob_format import ALIGN, ARG_KINDS, DERIVATIONS, DTYPE_CODES, MAX_RANK, NARROWER, BlobFormatError

__all__ = ["check_metadata", "check_profile"]


def check_metadata(metadata, constants_size: int) -> None:
    """Every metadata field the runtime reads has its type and a value in range."""
    def fail(where, message):
        raise BlobFormatError(f"cpu blob: metadata {where}: {message}")

    def shape_of(value, where) -> list[int]:
        if not isinstance(value, list) or len(value) > MAX_RANK \
                or not all(type(d) is int and 0 <= d < 1 << 40 for d in value):
            fail(where, f"{value!r} is not a list of at most {MAX_RANK} sizes")
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
            if stored.name not in NARROWER.get(dtype.kind, ()) or stored.itemsize >= dtype.itemsize:
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
