"""C harnesses for the native-library tests: call each library's entries on given inputs, compare
with the expected outputs, exit 0 only when every case matched.

`harness_source(cases, mode)` writes one C program for any number of libraries and cases:
- mode "static": buffers are static arrays (AArch64 Linux under qemu-aarch64, and bare metal, where
  it prints through etc_firmware.h and also measures each call's stack by painting);
- mode "guard" (the host, also built with AddressSanitizer): each case runs three times, with every
  input, output and the arena (a) from the heap (ASan's redzones; the library's memcpy/memset calls
  go through ASan's checked interceptors), (b) ending exactly at a PROT_NONE page and (c) starting
  right after one: an access past either end of any buffer faults.
A case with `expect_status` checks that the entry refuses (that error code) and writes no output.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass

import numpy as np

from etc.targets.cpu.library import C_DTYPES

_C_TYPES = {name: ctype for name, (_, ctype, _) in C_DTYPES.items()}


@dataclass
class Case:
    """Calls of one entry on one arena, in order (state carries over): `steps` is a list of (inputs,
    expected outputs) as numpy arrays at their actual shapes. `expect_status`: each call must refuse
    with that code (its outputs are not compared; `input_dims` overrides the sizes passed)."""

    library: object  # NativeLibrary
    method: str
    steps: list
    atol: float = 1e-5
    rtol: float = 1e-5
    expect_status: int = 0
    input_dims: list | None = None
    label: str = ""
    # Per step, per output: an absolute tolerance instead of atol/rtol (the compiler fuzzer's, derived
    # from the ops that computed each output; 0: bit for bit).
    tolerances: list | None = None


def _literal(array: np.ndarray) -> str:
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.size == 0:
        return "0"
    if flat.dtype == np.float32:
        return ", ".join(float(v).hex() + "f" if math.isfinite(v) else ("(0.0f/0.0f)" if v != v else
                         ("(1.0f/0.0f)" if v > 0 else "(-1.0f/0.0f)")) for v in flat.tolist())
    if flat.dtype == np.float64:
        return ", ".join(float(v).hex() for v in flat.tolist())
    if flat.dtype == np.bool_:
        return ", ".join("1" if v else "0" for v in flat.tolist())
    return ", ".join(f"{int(v)}" + ("LL" if flat.dtype == np.int64 else "") for v in flat.tolist())


_PRELUDE = r"""
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef ETC_BARE_METAL
#include "etc_firmware.h"
#define SAY(text) fw_puts(text)
#define SAY_INT(value) fw_put_int((long)(value))
#define SAY_FLOAT(value) fw_put_float((float)(value), 6)
#define END_LINE() fw_newline()
#else
#include <stdio.h>
#define SAY(text) fputs(text, stdout)
#define SAY_INT(value) printf("%ld", (long)(value))
#define SAY_FLOAT(value) printf("%.9g", (double)(value))
#define END_LINE() (putchar('\n'), fflush(stdout))
#endif
#ifdef ETC_GUARD
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
/* `bytes` (a multiple of `align`): mode 0 from the heap, 1 ending at a PROT_NONE page, 2 starting right
   after one. Never freed: a harness. */
static void *place(size_t bytes, size_t align, int mode) {
    if (mode == 0)
        return aligned_alloc(align, bytes ? (bytes + align - 1) / align * align : align);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + page - 1) / page * page + page;
    unsigned char *base = mmap(NULL, span + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        abort();
    mprotect(base, page, PROT_NONE);
    mprotect(base + page + span, page, PROT_NONE);
    if (mode == 2)
        return base + page;
    return base + page + span - bytes;
}
#endif

static int failures;

static void fail(const char *label, const char *what, long index) {
    SAY("FAIL ");
    SAY(label);
    SAY(": ");
    SAY(what);
    SAY(" ");
    SAY_INT(index);
    END_LINE();
    failures++;
}
"""


def harness_source(cases: list, mode: str = "static") -> str:
    assert mode in ("static", "guard")
    headers = sorted({os.path.basename(case.library.header) for case in cases})
    lines = [_PRELUDE] + [f'#include "{h}"' for h in headers]
    libraries = {case.library.name: case.library for case in cases}
    if mode == "static":
        for name in libraries:
            up = name.upper()
            lines.append(f"static _Alignas(64) uint8_t arena_{name}[{up}_ARENA_BYTES > 0 ? {up}_ARENA_BYTES : 64];")
    calls = []
    for n, case in enumerate(cases):
        lines += _case_source(n, case, mode)
        calls.append(f"    case_{n}();")
    lines += ["int main(void) {"]
    if mode == "static":
        lines += [f"    if ({name}_init(arena_{name}) != 0) fail(\"{name}_init\", \"status\", 0);"
                  for name in libraries]
    lines += calls
    lines += ['    SAY(failures ? "FAILED " : "PASSED ");', "    SAY_INT(failures);", "    END_LINE();",
              "    return failures ? 1 : 0;", "}", ""]
    return "\n".join(lines)


def _case_source(n: int, case: Case, mode: str) -> list:
    library = case.library
    info = library.sizes["methods"][case.method]
    symbol = info["symbol"]
    label = case.label or f"{library.name}.{case.method}#{n}"
    up = library.name.upper()
    out = []
    # Inputs and expected outputs as constant arrays.
    for t, (inputs, expected) in enumerate(case.steps):
        for i, array in enumerate(inputs):
            dtype = info["inputs"][i]["dtype"]
            out.append(f"static const {_C_TYPES[dtype]} c{n}_{t}_in{i}[{max(array.size, 1)}] = "
                       f"{{{_literal(np.asarray(array).astype(dtype))}}};")
        for p, array in enumerate([] if case.expect_status else expected):
            dtype = info["outputs"][p]["dtype"]
            out.append(f"static const {_C_TYPES[dtype]} c{n}_{t}_want{p}[{max(array.size, 1)}] = "
                       f"{{{_literal(np.asarray(array).astype(dtype))}}};")
    dynamic = bool(info["input_dims"] or info["output_dims"])
    out_bytes = [math.prod(o["shape"]) * np.dtype(o["dtype"]).itemsize for o in info["outputs"]]
    itemsize = [np.dtype(o["dtype"]).itemsize for o in info["outputs"]]
    max_in = [max(np.asarray(step[0][i]).size for step in case.steps) * np.dtype(x["dtype"]).itemsize
              for i, x in enumerate(info["inputs"])]
    out.append(f"static void case_{n}(void) {{")
    out.append(f'    const char *label = "{label}";')
    body = ["for (int mode = 0; mode < 3; mode++) {" if mode == "guard" else "{ const int mode = 0; (void)mode;"]
    if mode == "guard":
        body.append(f"    void *arena = place({up}_ARENA_BYTES, {up}_ARENA_ALIGN, mode);")
        body.append(f"    if ({library.name}_init(arena) != 0) fail(label, \"init\", mode);")
    else:
        body.append(f"    void *arena = arena_{library.name};")
    for t, (inputs, expected) in enumerate(case.steps):
        body.append("    {")
        step = []
        in_bytes = [np.asarray(a).size * np.dtype(info["inputs"][i]["dtype"]).itemsize for i, a in enumerate(inputs)]
        if mode == "guard":
            for i, nbytes in enumerate(in_bytes):
                size = np.dtype(info["inputs"][i]["dtype"]).itemsize
                step += [f"void *in{i} = place({nbytes}, {size}, mode);", f"memcpy(in{i}, c{n}_{t}_in{i}, {nbytes});"]
            for p, nbytes in enumerate(out_bytes):
                step.append(f"void *out{p} = place({nbytes}, {itemsize[p]}, mode);")
        else:
            for i in range(len(inputs)):
                step.append(f"const void *in{i} = c{n}_{t}_in{i};")
            for p, nbytes in enumerate(out_bytes):
                ctype = _C_TYPES[info["outputs"][p]["dtype"]]
                step += [f"static {ctype} out{p}_storage[{max(nbytes // itemsize[p], 1)}];",
                         f"void *out{p} = out{p}_storage;"]
        for p, nbytes in enumerate(out_bytes):  # a sentinel: an entry that refuses writes nothing
            step.append(f"memset(out{p}, 0x5A, {nbytes});")
        names = ", ".join(f"in{i}" for i in range(len(inputs))) or "0"
        step.append(f"const void *inputs[{max(len(inputs), 1)}] = {{{names}}};")
        names = ", ".join(f"out{p}" for p in range(len(out_bytes))) or "0"
        step.append(f"void *outputs[{max(len(out_bytes), 1)}] = {{{names}}};")
        if dynamic:
            in_dims = case.input_dims if case.input_dims is not None else \
                [np.asarray(inputs[i]).shape[d] for i, d in info["input_dims"]]
            step.append(f"const int32_t input_dims[{max(len(in_dims), 1)}] = "
                        f"{{{', '.join(str(int(d)) for d in in_dims) or '0'}}};")
            step.append(f"int32_t output_dims[{max(len(info['output_dims']), 1)}] = {{0}};")
            args = "inputs, input_dims, outputs, output_dims, arena"
        else:
            args = "inputs, outputs, arena"
        step += ["#ifdef ETC_BARE_METAL", "fw_stack_paint();", "uintptr_t sp = fw_sp();", "#endif",
                 f"int status = {symbol}({args});", "#ifdef ETC_BARE_METAL",
                 f'SAY("stack {symbol} "); SAY_INT(fw_stack_used(sp)); END_LINE();', "#endif",
                 f"if (status != {case.expect_status}) fail(label, \"status\", status);"]
        if case.expect_status:
            for p, nbytes in enumerate(out_bytes):
                step += [f"for (int k = 0; k < {nbytes}; k++)",
                         f"    if (((const uint8_t *)out{p})[k] != 0x5A) "
                         f"{{ fail(label, \"refused but wrote\", {p}); break; }}"]
        else:
            want_dims = [np.asarray(expected[p]).shape[d] for p, d in info["output_dims"]]
            for q, want in enumerate(want_dims):
                step.append(f"if (output_dims[{q}] != {want}) fail(label, \"output dim\", output_dims[{q}]);")
            for p, array in enumerate(expected):
                ctype = _C_TYPES[info["outputs"][p]["dtype"]]
                step += [f"for (int k = 0; k < {np.asarray(array).size}; k++) {{",
                         f"    double got = (double)(({ctype} *)out{p})[k], want = (double)c{n}_{t}_want{p}[k];",
                         "    if ((got != got && want != want) || got == want) continue;  /* NaN, inf */",
                         f"    if (!(fabs(got - want) <= {_bound(case, t, p)})) {{",
                         f'        fail(label, "step {t} output {p} element", k);',
                         '        SAY("  got "); SAY_FLOAT(got); SAY(" want "); SAY_FLOAT(want); END_LINE();',
                         "        break;", "    }", "}"]
        body += [line if line.startswith("#") else "        " + line for line in step]
        body.append("    }")
    body.append("}")
    out += [line if line.startswith("#") else "    " + line for line in body]
    out.append("}")
    return out


def _bound(case: Case, step: int, output: int) -> str:
    """The C expression bounding |got - want| for one output of one step."""
    if case.tolerances is not None:
        return repr(float(case.tolerances[step][output]))
    return f"{case.atol!r} + {case.rtol!r} * fabs(want)"


def run(command: list, *, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


# ----------------------------------------------------------------------- the models
def siren_mlp():
    """An MLP whose activations are libm calls on every target (sinf, cosf, logf, atanf): SIREN-style
    sine layers, as in implicit neural representations."""
    import torch
    from torch import nn

    class SirenMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.hidden, self.last = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 8)

        def forward(self, x):
            h = torch.sin(3.0 * self.first(x))
            h = torch.cos(self.hidden(h)) + torch.log1p(h * h) + torch.atan(h)
            return self.last(h)

    torch.manual_seed(0)
    return SirenMLP().eval(), (torch.randn(4, 16),)


def long_attention():
    """Causal self-attention over 256 tokens, two heads of 16: long enough that the cpu target takes
    its flash kernel (scores in tiles, never materialized; key tiles above the diagonal skipped, the
    diagonal's masked), where it has one."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class LongAttention(nn.Module):
        def __init__(self, width=32, heads=2):
            super().__init__()
            self.qkv, self.out, self.heads = nn.Linear(width, 3 * width), nn.Linear(width, width), heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, t, d))

    torch.manual_seed(0)
    return LongAttention().eval(), (torch.randn(1, 256, 32),)


def winograd_block():
    """A ResNet-style 3x3 convolution with ReLU that the cpu target computes as Winograd F(2x2,3x3)
    (64 channels over an odd 15x13 map: 56 tiles, the last cropped)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()).eval(), (torch.randn(1, 64, 15, 13),)


def running_cache():
    """A KV-cache-like stateful model: each call writes a projected row into a buffer (index_copy_, in
    place in the delegate) and counts calls in another (written by copy)."""
    import torch
    from torch import nn

    class RunningCache(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(6, 8))
            self.register_buffer("calls", torch.ones(1))
            self.proj = nn.Linear(8, 8)

        def forward(self, x, position):
            self.cache.index_copy_(0, position, self.proj(x))
            self.calls.add_(1)
            return self.cache.sum(0) * self.calls, self.cache[1:3]

    torch.manual_seed(0)
    return RunningCache().eval(), (torch.randn(1, 8), torch.tensor([2]))
