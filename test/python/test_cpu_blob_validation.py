"""A cpu blob is checked before anything in it is used (issues 11 and 25).

Of 500 corrupted copies of a small cpu-delegated program, 189 killed the process (SIGSEGV,
SIGILL, SIGABRT): the object code and its header were linked and called unchecked. Now the
blob's CRC must match first (`blob.deserialize`), then its sections, its table (every count,
index, pool reference and code), its metadata and its image (`image.check`) must fit. The
metadata a loader would refuse is refused when a blob is written, too; the table cases below
are written by hand (`encode_table` without the writer's checks) and re-signed, to reach the
reader's checks. The object code itself is checked when it is linked, at compile time
(`elf.Elf`): a damaged object is a LoweringError, never a blob.
"""

from __future__ import annotations

import platform
import struct
import sys

import numpy as np
import pytest

from etc.errors import BackendError, LoweringError
from etc.targets.cpu import blob as cpu_blob
from etc.targets.cpu import elf as cpu_elf
from etc.targets.cpu.runtime import CompiledFunction

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                                reason="builds x86-64 ELF objects")

N = 8


def _object() -> bytes:
    """`out[i] = in[i] * 1.5 + 0.25` over N floats, calling libm's fabsf (one external, one constant pool)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.runtime import llvm_binding

    llvm_binding()
    text = f"""
    declare float @fabsf(float)
    define void @entry(ptr %args) {{
    entry:
      %pin = load ptr, ptr %args
      %s1 = getelementptr ptr, ptr %args, i64 1
      %pout = load ptr, ptr %s1
      br label %loop
    loop:
      %i = phi i64 [0, %entry], [%next, %loop]
      %a = getelementptr float, ptr %pin, i64 %i
      %x = load float, ptr %a
      %ax = call float @fabsf(float %x)
      %y = fmul float %ax, 1.5
      %z = fadd float %y, 0.25
      %b = getelementptr float, ptr %pout, i64 %i
      store float %z, ptr %b
      %next = add i64 %i, 1
      %done = icmp eq i64 %next, {N}
      br i1 %done, label %exit, label %loop
    exit:
      ret void
    }}
    @table = constant [4 x i32] [i32 1, i32 2, i32 3, i32 4]
    """
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default", opt=0)
    return tm.emit_object(mod)


def _metadata() -> dict:
    import llvmlite.binding as llvm

    return {"triple": llvm.get_process_triple(), "cpu": "generic", "features": "", "required_features": [],
            "entry": "entry", "scratch_bytes": 0, "num_threads": 1, "entry_abi": "flat", "producer": "test",
            "args": [{"kind": "input", "dtype": "float32", "shape": [N], "name": "0"},
                     {"kind": "output", "dtype": "float32", "shape": [N], "name": "0"}]}


@pytest.fixture(scope="module")
def obj() -> bytes:
    return _object()


def test_the_sample_blob_runs(obj):
    x = np.linspace(-2, 2, N, dtype=np.float32)
    np.testing.assert_allclose(CompiledFunction(cpu_blob.serialize(_metadata(), obj))(x), np.abs(x) * 1.5 + 0.25)


def test_any_flipped_byte_is_refused_before_use(obj):
    data = cpu_blob.serialize(_metadata(), obj)
    for position in range(0, len(data), max(1, len(data) // 97)):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x01
        with pytest.raises(BackendError, match="checksum mismatch|magic|version"):
            CompiledFunction(bytes(corrupted))


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(triple=7), r"'triple': missing or not a string"),
    (lambda m: m["args"][0].update(kind="weights"), r"args\[0\]: is not an argument of kind"),
    (lambda m: m["args"][1].update(shape=[-1]), r"args\[1\]\.shape: \[-1\] is not a list of"),
    (lambda m: m["args"][0].update(dtype="object"), r"args\[0\]\.dtype: 'object' is not a tensor element type"),
    (lambda m: m.update(num_threads=0), r"'num_threads': 0 is not a thread count"),
    (lambda m: m["args"].append({"kind": "constant", "name": "w", "dtype": "float32", "shape": [2]}),
     r"constant 'w' is not in the constant table"),
    (lambda m: m["args"][0].update(name="1"), r"args\[0\]\.name: '1': input 0 must be named '0'"),
    (lambda m: m["args"][0].update(dynamic=[0]), r"a dynamic input without the dims argument"),
    (lambda m: m["args"].append({"kind": "dims", "name": "in", "dtype": "int64", "shape": [2]}),
     r"dims 'in'.*\[2\] does not hold the 0 dynamic dims"),
])
def test_metadata_a_loader_would_refuse_is_refused_when_written(obj, change, message):
    meta = _metadata()
    change(meta)
    with pytest.raises(cpu_blob.BlobFormatError, match=message):
        cpu_blob.serialize(meta, obj)


def _image(obj):
    from etc.targets.cpu.link import link

    return link(obj, "entry")


def _raw_blob(meta: dict, obj: bytes, section: bytes = b"", *, table: bytes | None = None, image=None,
              deflated: dict | None = None) -> bytes:
    """A blob with exactly this metadata's table (`encode_table`, none of the writer's checks) and
    constant section, CRC fixed; `deflated`: section bytes to store as they are instead."""
    import json
    import zlib

    image = image or _image(obj)
    payloads = {"table": zlib.compress(table if table is not None else cpu_blob.encode_table(meta, image)),
                "image": zlib.compress(image.data), "info": zlib.compress(json.dumps({"producer": "test"}).encode()),
                "constants": section}
    payloads.update(deflated or {})
    return cpu_blob.assemble(payloads)


def test_the_raw_blob_of_the_tests_is_a_valid_blob(obj):
    x = np.linspace(-2, 2, N, dtype=np.float32)
    np.testing.assert_allclose(CompiledFunction(_raw_blob(_metadata(), obj))(x), np.abs(x) * 1.5 + 0.25)


@pytest.mark.parametrize("which, damage, message", [
    ("image", lambda z: z[:-4] + bytes(4), "not a zlib stream"),  # its Adler-32 wrong
    ("image", lambda z: b"ELF!" + z, "not a zlib stream"),
    ("image", lambda z: z[:len(z) // 2], "not one whole zlib stream"),
    ("table", lambda z: z + b"more", "not one whole zlib stream"),
    ("info", lambda z: __import__("zlib").compress(b"[1, 2"), "info is not JSON"),
    ("image", lambda z: __import__("zlib").compress(bytes(2 << 20)), "inflates past"),
])
def test_the_deflated_sections_are_checked(obj, monkeypatch, which, damage, message):
    """The table, the code and the info are zlib streams: one that is not, has bytes after its end,
    or inflates past the bound (set low here) is a BlobFormatError, the CRC being right."""
    import zlib

    monkeypatch.setitem(cpu_blob.MAX_INFLATED, "image", 1 << 20)
    image = _image(obj)
    good = {"table": zlib.compress(cpu_blob.encode_table(_metadata(), image)), "image": zlib.compress(image.data),
            "info": zlib.compress(b"{}")}
    assert cpu_blob.deserialize(_raw_blob(_metadata(), obj, deflated=good)).image.data == image.data
    with pytest.raises(cpu_blob.BlobFormatError, match=message):
        cpu_blob.deserialize(_raw_blob(_metadata(), obj, deflated={**good, which: damage(good[which])}))


def test_the_code_table_and_info_are_stored_deflated(obj):
    """What the blob stores of the code and its description is their deflated bytes, and reading
    gives them back exactly; the tools' part (info) is JSON, the loaders' part (table) binary."""
    import json
    import zlib

    data = cpu_blob.serialize(_metadata(), obj)
    places = cpu_blob.sections(data)

    def section(name):
        off, n = places[name]
        return zlib.decompress(data[off:off + n])

    image = _image(obj)
    assert section("image") == image.data and places["image"][1] < len(image.data)
    assert section("table")[:4] == cpu_blob.TABLE_MAGIC
    assert json.loads(section("info"))["entry"] == "entry"
    assert cpu_blob.deserialize(data).image == image


def _head(table: bytes) -> dict:
    record, names = cpu_blob.TABLE_RECORDS["head"]
    return dict(zip(names, record.unpack_from(table)))


def _with_head(table: bytes, **changes) -> bytes:
    record, names = cpu_blob.TABLE_RECORDS["head"]
    head = {**_head(table), **changes}
    return record.pack(*(head[n] for n in names)) + table[record.size:]


def _list_at(table: bytes, name: str) -> int:
    head = _head(table)
    at = cpu_blob.TABLE_RECORDS["head"][0].size
    for other in cpu_blob.TABLE_LISTS:
        if other == name:
            return at
        at += head[f"n_{other}"] * cpu_blob.TABLE_RECORDS[other][0].size
    raise KeyError(name)


def _patched_record(table: bytes, which: str, k: int, **changes) -> bytes:
    record, names = cpu_blob.TABLE_RECORDS[which]
    at = _list_at(table, which) + k * record.size
    values = {**dict(zip(names, record.unpack_from(table, at))), **changes}
    out = bytearray(table)
    record.pack_into(out, at, *(values[n] for n in names))
    return bytes(out)


TABLE_CASES = {
    "bad magic": (lambda t: _with_head(t, magic=b"XXXX"), "head magic"),
    "too many args": (lambda t: _with_head(t, n_args=1 << 20), "args records of 16 bytes do not fit"),
    "string pool size": (lambda t: _with_head(t, strings_size=3), "string pool"),
    "triple outside the pool": (lambda t: _with_head(t, triple=1 << 20), "string offset 1048576"),
    "unknown entry ABI": (lambda t: _with_head(t, entry_abi=7), "entry ABI 7"),
    "arg kind": (lambda t: _patched_record(t, "args", 0, kind=9), r"args\[0\]: kind 9"),
    "arg dtype": (lambda t: _patched_record(t, "args", 0, dtype=99), r"args\[0\]: dtype code 99"),
    "arg dims past the pool": (lambda t: _patched_record(t, "args", 0, dims_at=1000), r"args\[0\]: 1 dims from 1000"),
    "arg rank": (lambda t: _patched_record(t, "args", 1, rank=40), r"args\[1\]: 40 dims"),
    "dynamic dim past the rank": (lambda t: _patched_record(t, "args", 0, dynamic=2), r"args\[0\]\.dynamic"),
    "input index": (lambda t: _patched_record(t, "args", 0, index=5), r"args\[0\]\.name: '5'"),
    "entry outside the code": (lambda t: _with_head(t, entry=1 << 20), "entry 1048576 is not in an executable"),
    "segment outside the image": (lambda t: _patched_record(t, "segments", 0, size=1 << 30), "segment 0"),
    "writable code": (lambda t: _patched_record(t, "segments", 0, prot=7), "segment 0 has protection 7"),
    "import slot in the code": (lambda t: _patched_record(t, "imports", 0, offset=0), "import slot at 0"),
    "import slot past the end": (lambda t: _patched_record(t, "imports", 0, offset=1 << 40), "import slot at"),
    "import of another function": (lambda t: _patched_record(t, "imports", 0, name=_head(t)["triple"]),
                                   "imports 'x86_64"),
    "stored bytes past the image": (lambda t: _with_head(t, image_stored=1 << 40), "more than its size"),
    "stored bytes not the image's": (lambda t: _with_head(t, image_stored=_head(t)["image_stored"] - 1),
                                     "the table says"),
    "image size": (lambda t: _with_head(t, image_size=8100), "size 8100 is not a multiple"),
    "machine": (lambda t: _with_head(t, machine=183), "machine aarch64 is not the architecture"),
}


@pytest.mark.parametrize("case", sorted(TABLE_CASES))
def test_the_table_is_checked_before_anything_is_mapped(obj, case):
    corrupt, message = TABLE_CASES[case]
    table = cpu_blob.encode_table(_metadata(), _image(obj))
    with pytest.raises(cpu_blob.BlobFormatError, match=message):
        cpu_blob.deserialize(_raw_blob(_metadata(), obj, table=corrupt(table)))


def test_a_fixup_must_point_into_the_image(obj):
    from etc.targets.cpu.image import Image

    image = _image(obj)
    bad = Image(**{**image.__dict__, "fixups": [image.imports[0][0]]})
    bad.data = bytearray(image.data)
    struct.pack_into("<Q", bad.data, image.imports[0][0], 1 << 40)
    bad.data = bytes(bad.data)
    with pytest.raises(cpu_blob.BlobFormatError, match="points 1099511627776 bytes in"):
        cpu_blob.deserialize(_raw_blob(_metadata(), obj, image=bad))


@pytest.mark.parametrize("entry, message", [
    ({"offset": 64, "nbytes": 16, "dtype": "float32", "shape": [4]}, r"bytes \[64, \+16\) of \[4\] float32"),
    ({"offset": 0, "nbytes": 8, "dtype": "float32", "shape": [4]}, r"bytes \[0, \+8\) of \[4\] float32"),
])
def test_constants_must_fit_their_section(obj, entry, message):
    meta = dict(_metadata(), constants={"w": entry})
    assert cpu_blob.deserialize(_raw_blob(dict(meta, constants={"w": dict(entry, offset=0, nbytes=16,
                                                                        dtype="float32", shape=[4])}),
                                          obj, bytes(16))).constant("w").shape == (4,)
    with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['w'\].*{message}"):
        cpu_blob.deserialize(_raw_blob(meta, obj, bytes(16)))


def test_a_constant_must_be_a_tensor_element_type():
    with pytest.raises(cpu_blob.BlobFormatError, match="not a tensor element type"):
        cpu_blob.check_metadata(dict(_metadata(), constants={"w": {"offset": 0, "nbytes": 16, "dtype": "complex64",
                                                                   "shape": [2]}}), 16)


# ------------------------------------------------------------------- the ELF object
def _sections(obj: bytes):
    return cpu_elf.Elf(obj).sections


def _section_header_at(obj: bytes, index: int) -> int:
    return struct.unpack_from("<Q", obj, 0x28)[0] + 64 * index


def _first(obj: bytes, sh_type: int) -> int:
    return next(i for i, sec in enumerate(_sections(obj)) if sec[1] == sh_type)


def _patched(obj: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(obj)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _relocation_at(obj: bytes, k: int = 0) -> int:
    rela = _sections(obj)[_first(obj, cpu_elf.SHT_RELA)]
    return rela[4] + 24 * k


def _symbol_at(obj: bytes, name: str) -> int:
    elf = cpu_elf.Elf(obj)
    index = [s[0] for s in elf.symbols].index(name)
    return elf.sections[_first(obj, cpu_elf.SHT_SYMTAB)][4] + 24 * index


ELF_CASES = {
    "section header table past the end": (
        lambda o: _patched(o, 0x28, "<Q", len(o)), "section header table"),
    "section bytes past the end": (
        lambda o: _patched(o, _section_header_at(o, 1) + 24, "<Q", len(o)), "runs past the end"),
    "relocation patching past its section": (
        lambda o: _patched(o, _relocation_at(o), "<Q", 1 << 20), r"patches bytes 1048576\.\."),
    "relocation naming a missing symbol": (
        lambda o: _patched(o, _relocation_at(o) + 12, "<I", 4000), "names symbol 4000"),
    "symbol outside its section": (
        lambda o: _patched(o, _symbol_at(o, "entry") + 8, "<Q", 1 << 30), r"symbol \d+ \('entry'\) at 1073741824"),
    "symbol name outside the string table": (
        lambda o: _patched(o, _symbol_at(o, "entry"), "<I", 1 << 30), "is not a string of the string table"),
    "entry that is not a function": (  # STB_GLOBAL | STT_OBJECT
        lambda o: _patched(o, _symbol_at(o, "entry") + 4, "<B", 0x11), "not a function in executable code"),
    "not a relocatable object": (lambda o: _patched(o, 16, "<H", 2), "not a relocatable object"),
    "huge alignment": (lambda o: _patched(o, _section_header_at(o, 1) + 48, "<Q", 1 << 40), "alignment"),
}


@pytest.mark.parametrize("case", sorted(ELF_CASES))
def test_object_code_is_checked_before_it_is_linked(obj, case):
    corrupt, message = ELF_CASES[case]
    bad = corrupt(obj)
    with pytest.raises(LoweringError, match=message):
        cpu_blob.serialize(_metadata(), bad)


def test_a_missing_cpu_feature_error_suggests_what_works(obj):
    """The error suggested cpu='generic', which still records the host's features; only features=''
    gives a baseline blob. The suggestion must be one that produces a blob this CPU runs."""
    import torch

    import etc
    from etc.targets.cpu import CpuPartitioner

    meta = dict(_metadata(), required_features=["etc-missing"])
    with pytest.raises(BackendError, match=r"CpuPartitioner\(cpu='generic', features=''\)") as error:
        CompiledFunction(cpu_blob.serialize(meta, obj))
    assert "+etc-missing" in str(error.value)
    ep = torch.export.export(torch.nn.Linear(8, 4), (torch.randn(2, 8),))
    edge = etc.to_edge(ep).to_backend(CpuPartitioner(cpu="generic", features=""))
    (blob,) = edge.program_ir.delegate_blobs
    assert cpu_blob.deserialize(blob).required_features == []


# ------------------------------------------------------------------- trimmed panels
def test_a_packed_weight_is_stored_without_its_last_panels_zero_columns():
    """A weight packed into [panels, K, 64] with N = 4.5 panels ends in a panel of 32 zero
    columns: the blob stores the 32 it needs and `constant` gives back the packed array, bit for
    bit (-0.0 among the kept columns stays -0.0), 64-byte aligned and read-only."""
    rng = np.random.default_rng(0)
    packed = np.zeros((5, 288, 64), np.float32)
    packed[:4] = rng.standard_normal((4, 288, 64))
    packed[4, :, :32] = rng.standard_normal((288, 32))
    packed[4, 7, 31] = -0.0
    small = np.arange(12, dtype=np.float32).reshape(1, 3, 4)  # nothing worth trimming
    section, table = cpu_blob.pack_constants({"w": packed, "b": small})
    assert table["w"]["tail"] == 32 and table["w"]["nbytes"] == packed.nbytes - 288 * 32 * 4
    assert "tail" not in table["b"]
    parsed = cpu_blob.deserialize(cpu_blob.serialize(_metadata(), _object(), {"w": packed, "b": small}))
    w = parsed.constant("w")
    assert w.tobytes() == packed.tobytes() and w.ctypes.data % 64 == 0 and not w.flags.writeable
    assert parsed.constant("b").tobytes() == small.tobytes()


@pytest.mark.parametrize("tail, message", [(64, "not a column count"), (-1, "not a column count"),
                                           ("8", "not a column count"), (8, r"bytes \[0, \+64\)")])
def test_a_trimmed_constant_must_fit_its_shape(obj, tail, message):
    entry = {"offset": 0, "nbytes": 64, "dtype": "float32", "shape": [2, 4, 64], "tail": tail}
    meta = dict(_metadata(), constants={"w": entry})
    with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['w'\].*{message}"):
        cpu_blob.check_metadata(meta, 64)
    if type(tail) is int and tail >= 0:  # what the table can hold: the reader's checks
        with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['w'\].*{message}"):
            cpu_blob.deserialize(_raw_blob(meta, obj, bytes(64)))


# ------------------------------------------------------------------- narrowed constants
def test_a_constant_a_narrower_type_holds_exactly_is_stored_as_it():
    """f32 holding int8 values (a widened int8 filter) is stored as int8, int32 small values as
    int16, f32 holding float16 values as float16; -0.0, NaN, a fraction or a value out of range
    keeps the wider type. `constant` gives back the array bit for bit, aligned and read-only."""
    rng = np.random.default_rng(1)
    filt = rng.integers(-128, 128, (64, 3, 3)).astype(np.float32)
    cases = {
        "filt": (filt, "int8"),
        "i32": (rng.integers(-30000, 30000, 300).astype(np.int32), "int16"),
        "half": (rng.standard_normal(300).astype(np.float16).astype(np.float32), "float16"),
        "negzero": (np.where(np.arange(filt.size) == 5, np.float32(-0.0), filt.reshape(-1)).astype(np.float32), "float16"),
        "nan": (np.where(np.arange(600) == 599, np.nan, np.arange(600) % 100).astype(np.float32), "float16"),
        "fraction": (filt + np.float32(1 / 3), None),
        "wide": (np.arange(300, dtype=np.float32) * 1000, None),
        "small": (np.arange(16, dtype=np.float32), None),  # saves too little to be worth a copy
    }
    section, table = cpu_blob.pack_constants({k: a for k, (a, _) in cases.items()})
    for name, (array, stored) in cases.items():
        assert table[name].get("stored") == stored, name
    parsed = cpu_blob.deserialize(cpu_blob.serialize(_metadata(), _object(), {k: a for k, (a, _) in cases.items()}))
    for name, (array, _) in cases.items():
        got = parsed.constant(name)
        assert got.dtype == array.dtype and got.shape == array.shape and got.tobytes() == array.tobytes(), name
        assert got.ctypes.data % 64 == 0 and not got.flags.writeable
    assert table["filt"]["nbytes"] == filt.size


def test_a_packed_weight_both_narrowed_and_trimmed_comes_back_whole():
    packed = np.zeros((3, 96, 64), np.float32)
    packed[:2] = np.random.default_rng(2).integers(-128, 128, (2, 96, 64))
    packed[2, :, :8] = 7
    section, table = cpu_blob.pack_constants({"w": packed})
    assert table["w"]["stored"] == "int8" and table["w"]["tail"] == 8
    parsed = cpu_blob.deserialize(cpu_blob.serialize(_metadata(), _object(), {"w": packed}))
    assert parsed.constant("w").tobytes() == packed.tobytes()


@pytest.mark.parametrize("stored, message", [("int32", "not a narrower type"), ("uint8", "not a narrower type"),
                                             ("float16", "not a narrower type"),
                                             ("int16", r"bytes \[0, \+16\)")])
def test_a_narrowed_constant_must_name_a_narrower_type(obj, stored, message):
    entry = {"offset": 0, "nbytes": 16, "dtype": "int32", "shape": [4], "stored": stored}
    meta = dict(_metadata(), constants={"w": entry})
    with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['w'\].*{message}"):
        cpu_blob.check_metadata(meta, 16)
    if stored != "int32":  # the table stores "not narrowed" as the same type
        with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['w'\].*{message}"):
            cpu_blob.deserialize(_raw_blob(meta, obj, bytes(16)))


# ------------------------------------------------------------------- derived constants
def _int4_panels(n: int, k: int, group: int, seed: int = 0):
    """An 8da4w weight as the cpu target packs it: nibble pairs [NB, K/8, 64], scales [NB, G, 16],
    and the column sums the lowering computes from the unpacked weight."""
    from etc.runtime.kernels.quantized import unpack_int4

    rng = np.random.default_rng(seed)
    nb = -(-n // 16)
    packed = rng.integers(-128, 128, (n, k // 2)).astype(np.int8)
    scales = rng.uniform(1e-3, 1e-1, (n, k // group)).astype(np.float32)
    w = unpack_int4(packed.view(np.uint8), k).astype(np.float64)
    colsum = (w.reshape(n, k // group, group).sum(axis=2) * scales.astype(np.float64)).sum(axis=1).astype(np.float32)
    full = np.zeros((nb * 16, k // 2), np.int8)
    full[:n] = packed
    panels = full.reshape(nb, 16, k // 8, 4).transpose(0, 2, 1, 3).reshape(nb, k // 8, 64)
    sfull = np.zeros((nb * 16, k // group), np.float32)
    sfull[:n] = scales
    return np.ascontiguousarray(panels), np.ascontiguousarray(sfull.reshape(nb, 16, -1).transpose(0, 2, 1)), colsum


def test_a_derived_constant_is_stored_as_its_recipe_and_computed_at_load():
    panels, scales, colsum = _int4_panels(37, 96, 32)
    recipe = {"op": "int4_colsum", "weight": "w#packed0", "scales": "s#packed0"}
    constants = {"w#packed0": panels, "s#packed0": scales, "w#colsum": colsum}
    data = cpu_blob.serialize(_metadata(), _object(), constants, {"w#colsum": recipe})
    parsed = cpu_blob.deserialize(data)
    info = parsed.metadata["constants"]["w#colsum"]
    assert info["nbytes"] == 0 and info["derive"] == recipe
    got = parsed.constant("w#colsum")
    assert got.tobytes() == colsum.tobytes() and got.ctypes.data % 64 == 0 and not got.flags.writeable
    assert parsed.constant("w#colsum") is got  # computed once
    bigger = cpu_blob.serialize(_metadata(), _object(), constants)
    assert len(data) < len(bigger)


def test_a_recipe_that_does_not_give_the_value_is_refused_when_the_blob_is_written():
    panels, scales, colsum = _int4_panels(37, 96, 32)
    wrong = colsum.copy()
    wrong[5] = np.nextafter(wrong[5], np.float32(np.inf))
    with pytest.raises(ValueError, match="derived by .* differs from its value"):
        cpu_blob.serialize(_metadata(), _object(), {"w": panels, "s": scales, "c": wrong},
                           {"c": {"op": "int4_colsum", "weight": "w", "scales": "s"}})


@pytest.mark.parametrize("recipe, shape, message", [
    ({"op": "nope", "weight": "w", "scales": "s"}, [37], "is not a float32 recipe"),
    ({"op": "int4_colsum", "weight": "w", "scales": "missing"}, [37], "does not name two stored constants"),
    ({"op": "int4_colsum", "weight": "s", "scales": "w"}, [37], "cannot be"),
    ({"op": "int4_colsum", "weight": "w", "scales": "s"}, [49], "cannot be"),
])
def test_a_derived_constant_must_name_a_recipe_and_sources_that_fit(obj, recipe, shape, message):
    panels, scales, _ = _int4_panels(37, 96, 32)
    section, table = cpu_blob.pack_constants({"w": panels, "s": scales})
    table["c"] = {"offset": 0, "nbytes": 0, "dtype": "float32", "shape": shape, "derive": recipe}
    meta = dict(_metadata(), constants=table)
    with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['c'\].*{message}"):
        cpu_blob.check_metadata(meta, len(section))
    if recipe["op"] in cpu_blob.DERIVE_OPS and recipe["scales"] in table:  # what the table can hold
        with pytest.raises(cpu_blob.BlobFormatError, match=rf"constants\['c'\].*{message}"):
            cpu_blob.deserialize(_raw_blob(meta, obj, section))


def test_a_recipe_is_checked_after_the_constants_it_names(obj):
    """A derived entry listed before a malformed source: the source's own error, not a KeyError."""
    panels, scales, _ = _int4_panels(37, 96, 32)
    section, table = cpu_blob.pack_constants({"w": panels, "s": scales})
    recipe = {"op": "int4_colsum", "weight": "w", "scales": "s"}
    table = {"c": {"offset": 0, "nbytes": 0, "dtype": "float32", "shape": [37], "derive": recipe},
             "w": dict(table["w"], shape="bad"), "s": table["s"]}
    with pytest.raises(cpu_blob.BlobFormatError, match=r"constants\['w'\]\.shape"):
        cpu_blob.check_metadata(dict(_metadata(), constants=table), len(section))
