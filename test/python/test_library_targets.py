"""`to_library` end to end (issue 23): every model below compiled for each target, its library
linked with the platform's own compiler and linker into one C harness (all the models' libraries
in one program: their symbols must not clash), run, and each output compared with torch eager:

- x86-64, natively and under AddressSanitizer, every buffer at the edge of a guard page
  (library_harness "guard" mode);
- AArch64 Linux (aarch64-linux-gnu-gcc -static) under qemu-aarch64;
- bare metal under qemu-system-arm: Cortex-M33 (mps2-an505), Cortex-M7 (mps2-an500), Cortex-M55
  with MVE (mps3-an547), hard-float firmware with etc's start-up code, linker scripts and
  semihosting harness; the exit status is the verdict, and each entry's stack, measured by
  painting, must stay within the library's reported bound.

The models: a CNN, an MLP calling libm (sinf, cosf, logf, atanf), an int8 CNN (PT2E with
CpuQuantizer), a dynamic batch (sizes 1..32, and sizes outside it refused), a program of two
methods, and a stateful model (a cache updated in place, a counter by copy); on x86-64 and AArch64
also causal attention over 256 tokens through the flash kernel (the boards' RAM would
not hold what the other attention lowerings materialize). A missing toolchain
is a failure that says to run `make toolchains`, never a skip.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess

import pytest
import torch

import etc
from etc.targets.cpu import CpuPartitioner
from etc.targets.cpu import firmware

from library_harness import (Case, harness_source, long_attention, run, running_cache, siren_mlp,  # noqa: E402
                             winograd_block)
from etc.models.zoo import ZOO  # noqa: E402

MODELS = ("small_cnn", "siren_mlp", "small_cnn_int8", "dynamic_batch", "two_methods", "running_cache")
# the targets with vector units: the flash attention kernel, Winograd convolutions
LINUX_MODELS = MODELS + ("long_attention", "winograd_block")
_BUILDERS = {"siren_mlp": siren_mlp, "running_cache": running_cache, "long_attention": long_attention,
             "winograd_block": winograd_block}


@functools.lru_cache(maxsize=None)
def _model(name: str):
    """(exported programs by method, eager callables by method, example inputs) of a test model."""
    if name == "small_cnn_int8":
        from etc.models.quantized import quantized_zoo

        zoo, converted, ep = quantized_zoo("small_cnn")
        return {"forward": ep}, {"forward": converted}, zoo.example_inputs
    if name in _BUILDERS:
        module, inputs = _BUILDERS[name]()
        return {"forward": torch.export.export(module, inputs)}, {"forward": module}, inputs
    zoo = ZOO[name]()
    eager = {"forward": zoo.module, **{m: module for m, (module, _) in zoo.methods.items()}}
    return zoo.export(), eager, zoo.example_inputs


def _library(name: str, target: str, directory):
    programs, _, _ = _model(name)
    edge = etc.to_edge(programs).to_backend(CpuPartitioner(target=target))
    if name == "long_attention":
        assert "attention -> flash" in edge.delegation_info(), edge.delegation_info()
    if name == "winograd_block":
        assert "convolution -> winograd" in edge.delegation_info(), edge.delegation_info()
    return edge.to_library(directory / name, name, verbose=False)


def _numpy(outputs) -> list:
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return [o.detach().numpy().copy() for o in outputs]  # a returned view of a buffer changes with it


def _cases(name: str, library) -> list:
    """Inputs (seeded) and eager's outputs for one model's library."""
    _, eager, example = _model(name)
    generator = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    with torch.no_grad():
        if name == "dynamic_batch":
            steps = [([x.numpy()], _numpy(eager["forward"](x))) for x in (randn(1, 16), randn(5, 16), randn(32, 16))]
            bad = [Case(library, "forward", [([randn(b, 16).numpy()], [])], expect_status=3, input_dims=[b],
                        label=f"dynamic_batch batch={b}") for b in (0, 33)]
            return [Case(library, "forward", steps, atol=1e-4, rtol=1e-4)] + bad
        if name == "running_cache":
            module = copy.deepcopy(eager["forward"])  # eager's state evolves with the library's
            steps = []
            for position in (2, 0, 5, 2):
                x, pos = randn(1, 8), torch.tensor([position])
                steps.append(([x.numpy(), pos.numpy()], _numpy(module(x, pos))))
            return [Case(library, "forward", steps, atol=1e-4, rtol=1e-4)]
        cases = []
        for method, module in eager.items():
            shapes = [x.shape for x in example]
            steps = []
            for _ in range(2):
                inputs = [randn(*s) for s in shapes]
                steps.append(([x.numpy() for x in inputs], _numpy(module(*inputs))))
            # int8: etc's integer kernels against PT2E's reference ops (a rounding step apart at most)
            tolerance = dict(atol=0.08, rtol=0.02) if name.endswith("int8") else dict(atol=1e-4, rtol=1e-4)
            cases.append(Case(library, method, steps, **tolerance))
        return cases


def _build_all(target: str, directory, models=MODELS) -> tuple[list, list]:
    libraries = [_library(name, target, directory) for name in models]
    cases = [case for name, library in zip(models, libraries) for case in _cases(name, library)]
    return libraries, cases



def _check(done: subprocess.CompletedProcess, what: str) -> str:
    assert done.returncode == 0 and "PASSED 0" in done.stdout, \
        f"{what} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def test_host_libraries_match_eager_natively_and_under_address_sanitizer(tmp_path):
    cc = firmware.require_tool("gcc")
    libraries, cases = _build_all("host", tmp_path, LINUX_MODELS)
    source = tmp_path / "harness.c"
    source.write_text(harness_source(cases, mode="guard"))
    includes = [f"-I{lib.directory}" for lib in libraries]
    archives = [lib.archive for lib in libraries]
    for flags in ([], ["-fsanitize=address", "-fno-omit-frame-pointer"]):
        binary = tmp_path / ("harness_asan" if flags else "harness")
        built = run([cc, "-O1", "-g", "-std=c11", "-D_DEFAULT_SOURCE", "-DETC_GUARD", "-Wall", "-Werror", *flags,
                     *includes, str(source), *archives, "-lm", "-o", str(binary)])
        assert built.returncode == 0, built.stderr
        # (the harness never frees its buffers: leak detection off, every other ASan check on)
        _check(run([str(binary)], env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}),
               "the host harness" + (" under ASan" if flags else ""))


def test_aarch64_libraries_match_eager_under_qemu(tmp_path):
    cc = firmware.require_tool("aarch64-linux-gnu-gcc")
    qemu = firmware.require_tool("qemu-aarch64")
    libraries, cases = _build_all("aarch64-linux-gnu", tmp_path, LINUX_MODELS)
    source = tmp_path / "harness.c"
    source.write_text(harness_source(cases, mode="static"))
    binary = tmp_path / "harness"
    built = run([cc, "-O1", "-std=c11", "-static", "-Wall", "-Werror", *[f"-I{lib.directory}" for lib in libraries],
                 str(source), *[lib.archive for lib in libraries], "-lm", "-o", str(binary)])
    assert built.returncode == 0, built.stderr
    _check(run([qemu, str(binary)]), "the AArch64 harness")


@pytest.mark.parametrize("board", ["mps2-an505", "mps2-an500", "mps3-an547"])
def test_cortex_m_libraries_match_eager_bare_metal(tmp_path, board):
    firmware.require_tool("arm-none-eabi-gcc")
    firmware.require_tool("qemu-system-arm")
    preset = firmware.BOARDS[board].preset
    libraries, cases = _build_all(preset, tmp_path)
    source = tmp_path / "harness.c"
    source.write_text(harness_source(cases, mode="static"))
    built = firmware.build_firmware(str(tmp_path / "harness.elf"), [str(source)], libraries, board,
                                    extra_flags=["-DETC_BARE_METAL", "-Werror", "-std=c11"])
    # Heapless: nothing pulled in malloc (the link would need _sbrk, which nothing defines).
    assert not {"malloc", "_sbrk", "_malloc_r"} & set(built.sizes["symbols"])
    out = _check(firmware.run_firmware(built.elf, board), f"the {board} firmware")
    bounds = {lib.sizes["methods"][m]["symbol"]: lib.sizes["methods"][m]["stack_bytes"]
              for lib in libraries for m in lib.sizes["methods"]}
    measured = {}
    for symbol, used in re.findall(r"stack (\w+) (\d+)", out):
        measured[symbol] = max(measured.get(symbol, 0), int(used))
    assert set(measured) == set(bounds)
    for lib in libraries:  # the entry's frames; memcpy/memset/libm callees add their own, reported by name
        extra = 256 if lib.sizes["stack_external"] else 0
        for m in lib.sizes["methods"]:
            symbol = lib.sizes["methods"][m]["symbol"]
            assert measured[symbol] <= bounds[symbol] + extra, (symbol, measured[symbol], bounds[symbol])
