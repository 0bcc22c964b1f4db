"""Linking a cpu blob in-process (targets/cpu/runtime.py) never aborts the process (issue 9).

A ViT-B/16 compiled for the cpu target died of SIGABRT while its program loaded: LLVM
(assertions on in llvmlite's build) stopped at `Assertion isInt<32>(RealOffset) failed`
in RuntimeDyldELF::resolveX86_64Relocation. The small code model reaches the constant
pool (.rodata.cst*) with 32-bit PC-relative displacements, and MCJIT's default memory
manager maps code and read-only data separately, wherever mmap finds room: in a big,
fragmented process the two land more than 2 GiB apart. The runtime now loads x86-64 ELF
objects itself, in one mapping (`runtime.load_elf_x86_64`). `_CHILD` builds that
layout on purpose (every free gap above a 4 GiB reservation filled, but a few one-page holes:
the one-page constant pool goes above, the code below), so the tests do not depend on a
model's size. Each link runs in a child process: a regression aborts the child, not pytest.

The objects are built from LLVM IR with llvmlite directly, not by the compiler: these are
tests of the runtime's linker.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from etc.errors import BackendError
from etc.targets.cpu import blob as cpu_blob
from etc.targets.cpu import runtime as cpu_runtime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                                reason="ELF/x86-64 address-space layout test")

K = 1024  # elements: > one page of code, a constant pool of two floats


def _object(body_calls: str = "", declare: str = "") -> bytes:
    """`out[i] = in[i] * 1.5 + 0.25` unrolled K times (volatile: one constant-pool load each)."""
    import llvmlite.binding as llvm

    cpu_runtime._llvm()
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
    info = cpu_runtime.elf_object_info(obj)
    assert 2 in info["relocations"]  # R_X86_64_PC32 into the constant pool: what overflowed
    assert _run_child(tmp_path, _blob(obj)) == "OK"


def test_undefined_symbol_is_a_backend_error_not_an_abort(tmp_path):
    """LLVM: "Program used external function 'etc_no_such_function' which could not be resolved!",
    then abort(); now a BackendError before linking."""
    obj = _object("  call void @etc_no_such_function()", "declare void @etc_no_such_function()")
    assert "etc_no_such_function" in cpu_runtime.elf_object_info(obj)["undefined"]
    out = _run_child(tmp_path, _blob(obj))
    assert out.startswith("BackendError:") and "etc_no_such_function" in out
    with pytest.raises(BackendError, match="etc_no_such_function"):
        cpu_runtime.check_linkable(obj)


def test_libc_and_libm_calls_link():
    obj = _object("  %m = call float @erff(float 1.0)\n  call void @llvm.memset.p0.i64(ptr %pout, i8 0, i64 64, i1 false)",
                  "declare float @erff(float)\ndeclare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
    cpu_runtime.check_linkable(obj)
    x = np.arange(K, dtype=np.float32)
    np.testing.assert_allclose(cpu_runtime.CompiledFunction(_blob(obj))(x), x * 1.5 + 0.25, rtol=1e-6)


def test_elf_object_info_rejects_truncated_objects():
    obj = _object()
    assert cpu_runtime.elf_object_info(b"not an object") is None
    with pytest.raises(BackendError, match="not a valid ELF object: section header table"):
        cpu_runtime.check_linkable(obj[:200])


def test_compacted_objects_keep_only_the_symbols_a_loader_needs_and_compute_the_same():
    """`elf.compact` (every cpu object goes through it) drops the file symbol, local functions and
    the constant pools' `.LCPI` labels, pointing their relocations at the section instead: the
    linked code computes the same, externals (stubs) and the entry still resolve."""
    import llvmlite.binding as llvm

    from etc.targets.cpu import elf as cpu_elf

    cpu_runtime._llvm()
    text = """
    declare float @erff(float)
    define internal float @twice(float %v) noinline {
      %r = fmul float %v, 2.0
      ret float %r
    }
    define void @entry(ptr %args) {
      %pin = load ptr, ptr %args
      %s1 = getelementptr ptr, ptr %args, i64 1
      %pout = load ptr, ptr %s1
      %x = load <4 x float>, ptr %pin
      %y = fmul <4 x float> %x, <float 1.5, float 2.5, float 3.5, float 4.5>
      %z = fadd <4 x float> %y, <float 0.25, float 0.5, float 0.75, float 1.0>
      %e = extractelement <4 x float> %z, i32 0
      %t = call float @twice(float %e)
      %m = call float @erff(float %t)
      %w = insertelement <4 x float> %z, float %m, i32 0
      store <4 x float> %w, ptr %pout
      ret void
    }
    """
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_default_triple().create_target_machine(reloc="pic", codemodel="default", opt=0)
    obj = tm.emit_object(mod)
    small = cpu_elf.compact(obj)
    before, after = cpu_elf.Elf(obj), cpu_elf.Elf(small)
    assert any(name.startswith(".LCPI") for name, _, _ in before.symbols)
    assert "twice" in {name for name, _, _ in before.symbols}
    assert {name for name, _, _ in after.symbols} == {"", "entry", "erff"}
    assert len(small) < len(obj) and cpu_elf.compact(small) == small
    assert len(after.relocations) == len(before.relocations)

    def run(o):
        meta = {"triple": llvm.get_process_triple(), "cpu": "generic", "required_features": [], "entry": "entry",
                "scratch_bytes": 0, "num_threads": 1, "entry_abi": "flat", "producer": "test",
                "args": [{"kind": "input", "dtype": "float32", "shape": [4], "name": "0"},
                         {"kind": "output", "dtype": "float32", "shape": [4], "name": "0"}]}
        return cpu_runtime.CompiledFunction(cpu_blob.serialize(meta, o))(np.array([1, 2, 3, 4], np.float32))

    got, want = run(small), run(obj)
    np.testing.assert_array_equal(got, want)
    assert want[1] == 2 * 2.5 + 0.5 and abs(want[0] - 0.99999) < 1e-4  # erf(2 * 1.75)
