"""Loading a cpu blob in-process never aborts the process, and its code reaches its constants (issue 9).

A ViT-B/16 compiled for the cpu target died of SIGABRT while its program loaded: LLVM
(assertions on in llvmlite's build) stopped at `Assertion isInt<32>(RealOffset) failed`
in RuntimeDyldELF::resolveX86_64Relocation. The small code model reaches the constant
pool (.rodata.cst*) with 32-bit PC-relative displacements, and MCJIT's default memory
manager maps code and read-only data separately, wherever mmap finds room: in a big,
fragmented process the two land more than 2 GiB apart. Since issue 25 the blob carries an
image linked at compile time (`link.py`) and the runtime maps it whole (`runtime.map_image`):
`_CHILD` builds the bad layout on purpose (every free gap above a 4 GiB reservation filled,
but a few one-page holes), so the tests do not depend on a model's size. Each load runs in a
child process: a regression aborts the child, not pytest.

The objects are built from LLVM IR with llvmlite directly, not by the compiler: these are
tests of the linker and the loader.
"""

from __future__ import annotations

import os
import platform
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from etc.errors import BackendError, LoweringError
from etc.targets.cpu import blob as cpu_blob
from etc.targets.cpu import elf as cpu_elf
from etc.targets.cpu import runtime as cpu_runtime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                                reason="ELF/x86-64 address-space layout test")

K = 1024  # elements: > one page of code, a constant pool of two floats


def _object(body_calls: str = "", declare: str = "") -> bytes:
    """`out[i] = in[i] * 1.5 + 0.25` unrolled K times (volatile: one constant-pool load each)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm

    init_llvm()
    lines = [declare, "define void @entry(ptr %args) {", "  %pin = load ptr, ptr %args",
             "  %s1 = getelementptr ptr, ptr %args, i64 1", "  %pout = load ptr, ptr %s1", body_calls]
    for i in range(K):
        lines += [f"  %a{i} = getelementptr float, ptr %pin, i64 {i}", f"  %x{i} = load volatile float, ptr %a{i}",
                  f"  %y{i} = fmul float %x{i}, 1.5", f"  %z{i} = fadd float %y{i}, 0.25",
                  f"  %b{i} = getelementptr float, ptr %pout, i64 {i}", f"  store volatile float %z{i}, ptr %b{i}"]
    lines += ["  ret void", "}"]
    mod = llvm.parse_assembly("\n".join(lines))
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default", opt=0)
    return tm.emit_object(mod)


def _blob(obj: bytes) -> bytes:
    import llvmlite.binding as llvm

    meta = {"triple": llvm.get_process_triple(), "cpu": "generic", "features": "", "required_features": [],
            "entry": "entry", "scratch_bytes": 0, "num_threads": 1, "entry_abi": "flat", "producer": "test",
            "args": [{"kind": "input", "dtype": "float32", "shape": [K], "name": "0"},
                     {"kind": "output", "dtype": "float32", "shape": [K], "name": "0"}]}
    return cpu_blob.serialize(meta, obj)


_CHILD = textwrap.dedent('''
    import ctypes, os, sys
    import numpy as np
    from etc.errors import BackendError
    from etc.targets.cpu import runtime as cpu_runtime

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    PAGE = os.sysconf("SC_PAGE_SIZE")
    MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000


    def reserve(size, at=None, fixed=False):  # address space only (PROT_NONE, no memory)
        flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (MAP_FIXED_NOREPLACE if fixed else 0)
        addr = libc.mmap(at, size, 0, flags, -1, 0)
        return None if addr in (None, ctypes.c_void_p(-1).value) else addr


    def maps():
        out = []
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                lo, hi = (int(v, 16) for v in fields[0].split("-"))
                out.append((lo, hi, fields[5] if len(fields) > 5 else ""))
        return sorted(out)


    def fragment(holes=64):
        """Fill every free gap between a 4 GiB reservation and the stack, but `holes` one-page holes
        above the reservation: mmap places top-down in the highest gap that fits, so the next
        one-page mapping lands above the reservation and anything bigger more than 4 GiB below."""
        area = reserve(2 * holes * PAGE)
        big = reserve(4 << 30)
        if area is None or big is None or area < big:
            return False
        m = maps()
        stack = min((lo for lo, hi, name in m if name == "[stack]"), default=None)
        if stack is None:
            return False
        for (_, hi0, _), (lo1, _, name1) in zip(m, m[1:]):
            if big < hi0 < lo1 < stack and name1 != "[stack]":
                reserve(lo1 - hi0, hi0, fixed=True)
        for k in range(holes):
            libc.munmap(area + 2 * k * PAGE, PAGE)
        return True


    data = open(sys.argv[1], "rb").read()
    x = np.arange(%(K)d, dtype=np.float32) / 7
    if not fragment():
        print("SKIP: could not lay out the address space")
        sys.exit(0)
    try:
        fn = cpu_runtime.CompiledFunction(data)
    except BackendError as e:
        print("BackendError:", e)
        sys.exit(0)
    np.testing.assert_allclose(fn(x), x * 1.5 + 0.25, rtol=1e-6)
    print("OK")
''') % {"K": K}


def _run_child(tmp_path, blob: bytes) -> str:
    (tmp_path / "blob.bin").write_bytes(blob)
    (tmp_path / "child.py").write_text(_CHILD)
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "blob.bin")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert proc.returncode == 0, f"the child died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    out = proc.stdout.strip().splitlines()[-1]
    if out.startswith("SKIP"):
        pytest.skip(out)
    return out


def test_code_and_constants_mapped_far_apart_still_link(tmp_path):
    """Before the fix: SIGABRT, `Assertion isInt<32>(RealOffset) failed` (the ViT-B/16 load)."""
    obj = _object()
    assert 2 in {r[2] for r in cpu_elf.Elf(obj).relocations}  # R_X86_64_PC32 into the constant pool: what overflowed
    assert _run_child(tmp_path, _blob(obj)) == "OK"


def test_an_undefined_symbol_is_refused_when_the_blob_is_written():
    """LLVM's MCJIT: "Program used external function 'etc_no_such_function' which could not be
    resolved!", then abort(); the linker refuses it at compile time, naming it."""
    obj = _object("  call void @etc_no_such_function()", "declare void @etc_no_such_function()")
    with pytest.raises(LoweringError, match="etc_no_such_function"):
        _blob(obj)


def test_libc_and_libm_calls_link():
    obj = _object("  %m = call float @erff(float 1.0)\n  call void @llvm.memset.p0.i64(ptr %pout, i8 0, i64 64, i1 false)",
                  "declare float @erff(float)\ndeclare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
    data = _blob(obj)
    names = {name for _, name in cpu_blob.deserialize(data).image.imports}
    assert {"erff", "memset"} <= names
    x = np.arange(K, dtype=np.float32)
    np.testing.assert_allclose(cpu_runtime.CompiledFunction(data)(x), x * 1.5 + 0.25, rtol=1e-6)


def test_a_truncated_object_is_a_lowering_error():
    with pytest.raises(LoweringError, match="not a valid ELF object: section header table"):
        _blob(_object()[:200])


_POINTERS = """
    @table = internal constant [4 x float] [float 1.0, float 2.0, float 4.0, float 8.0]
    @scale = global float 3.0
    @rows = internal constant [2 x ptr] [ptr @table, ptr getelementptr (float, ptr @table, i64 2)]
    declare float @erff(float)
    define void @entry(ptr %args) {
      %pin = load ptr, ptr %args
      %s1 = getelementptr ptr, ptr %args, i64 1
      %pout = load ptr, ptr %s1
      %i = load float, ptr %pin
      %r1 = getelementptr ptr, ptr @rows, i64 1
      %row = load ptr, ptr %r1
      %v = load float, ptr %row
      %s = load float, ptr @scale
      %e = call float @erff(float %i)
      %a = fmul float %v, %s
      %b = fadd float %a, %e
      store float %b, ptr %pout
      ret void
    }
"""


def _pointer_object(triple: str) -> bytes:
    """Data pointing into the image (@rows: absolute addresses -> fixups), a preemptible global read
    through the GOT (@scale: a GOT slot holding an image address, a fixup), an external call (a
    stub and an import)."""
    import llvmlite.binding as llvm

    from etc.targets.cpu.isa import init_llvm

    init_llvm()
    mod = llvm.parse_assembly(_POINTERS)
    mod.triple = triple
    tm = llvm.Target.from_triple(triple).create_target_machine(reloc="pic", codemodel="default", opt=0)
    return tm.emit_object(mod)


@pytest.mark.parametrize("triple", ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"])
def test_data_pointers_and_got_slots_become_fixups(triple):
    from etc.targets.cpu import link

    image = link.link(_pointer_object(triple), "entry")
    assert [name for _, name in image.imports] == ["erff"]
    assert len(image.fixups) >= 3  # @rows' two words and @scale's GOT slot
    code = [(s.offset, s.offset + s.size) for s in image.segments if s.prot & 4]
    for offset in image.fixups:  # each an image offset, outside the code
        value = struct.unpack_from("<Q", image.data, offset)[0]
        assert value < image.size and not any(lo <= offset < hi for lo, hi in code)


def test_fixups_and_got_slots_compute_the_right_values():
    import llvmlite.binding as llvm

    meta = {"triple": llvm.get_process_triple(), "entry": "entry", "entry_abi": "flat", "num_threads": 1,
            "args": [{"kind": "input", "dtype": "float32", "shape": [1], "name": "0"},
                     {"kind": "output", "dtype": "float32", "shape": [1], "name": "0"}]}
    fn = cpu_runtime.CompiledFunction(cpu_blob.serialize(meta, _pointer_object(llvm.get_process_triple())))
    import math

    np.testing.assert_allclose(fn(np.array([0.5], np.float32)), [4.0 * 3.0 + math.erf(0.5)], rtol=1e-6)


def test_the_image_is_mapped_write_xor_execute_and_unmapped_with_its_function():
    """No page of a loaded image is writable and executable; it is unmapped once its function is gone."""
    import gc

    fn = cpu_runtime.CompiledFunction(_blob(_object()))
    image = cpu_blob.deserialize(_blob(_object())).image
    lo = fn._address - image.entry
    hi = lo + image.size

    def mappings():
        """The mappings that overlap the image's own span: the kernel may place another mapping
        right after it (a ctypes closure page is rwx on some systems), which is not ours to judge."""
        out = {}
        with open("/proc/self/maps") as f:
            for line in f:
                span, perms = line.split()[:2]
                a, b = (int(v, 16) for v in span.split("-"))
                if a < hi and b > lo:
                    out[a] = perms
        return out

    perms = mappings()
    assert perms and any("x" in p for p in perms.values())
    assert not any("w" in p and "x" in p for p in perms.values()), perms
    del fn
    gc.collect()
    assert lo not in mappings()
