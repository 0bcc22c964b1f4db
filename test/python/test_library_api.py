"""`to_library`'s contract (issue 23), on small programs: what it refuses and how it says so, what the
header declares, how the entries refuse bad calls, the float ABI of the Cortex-M objects, heapless
objects, the archive, the size report and the command line. test_library_targets.py runs the
models end to end on every target."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import etc
from etc.errors import LoweringError
from etc.targets.cpu import CpuPartitioner, firmware
from etc.targets.cpu.archive import ElfObject
from etc.targets.cpu.library import stack_bound

from library_harness import run, siren_mlp  # noqa: E402
from etc.models.zoo import ZOO  # noqa: E402


class Sorting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return torch.sort(y, dim=-1)[0] + y  # sort: no cpu lowering, it stays on portable kernels


def _edge(module, inputs, target="host", **options):
    return etc.to_edge(torch.export.export(module.eval(), inputs)).to_backend(CpuPartitioner(target=target, **options))


def test_a_method_left_partly_on_portable_kernels_is_refused_with_the_ops_and_their_lines(tmp_path):
    edge = _edge(Sorting(), (torch.randn(2, 8),))
    with pytest.raises(LoweringError) as error:
        edge.to_library(tmp_path, "sorting")
    text = str(error.value)
    assert "method 'forward'" in text and "edge.sort runs outside the delegate" in text
    assert f"{__file__}:" in text  # the user's source line of the op
    assert "not bufferized" in text  # and why the cpu target left it
    assert not os.listdir(tmp_path)  # nothing written half-done


def test_a_program_without_delegate_is_refused(tmp_path):
    edge = etc.to_edge(torch.export.export(nn.Linear(4, 4).eval(), (torch.randn(1, 4),)))
    with pytest.raises(LoweringError, match="no delegate call .*to_backend"):
        edge.to_library(tmp_path, "plain")


def test_the_library_name_must_be_a_c_identifier(tmp_path):
    edge = _edge(nn.Linear(4, 4), (torch.randn(1, 4),))
    for name in ("9lives", "my-model", ""):
        with pytest.raises(LoweringError, match="not a C identifier"):
            edge.to_library(tmp_path, name)


def test_threaded_code_is_refused(tmp_path):
    edge = _edge(nn.Linear(4, 4), (torch.randn(1, 4),), num_threads=2)
    with pytest.raises(LoweringError, match="num_threads=1"):
        edge.to_library(tmp_path, "threads")


def test_header_compiles_as_c_and_cpp_and_declares_the_sizes(tmp_path):
    zoo = ZOO["dynamic_batch"]()
    library = etc.to_edge(zoo.export()).to_backend(CpuPartitioner()).to_library(tmp_path / "lib", "dyn", verbose=False)
    header = open(library.header).read()
    for macro in ("DYN_ARENA_BYTES", "DYN_ARENA_ALIGN 64", "DYN_FORWARD_NUM_INPUTS 1", "DYN_FORWARD_NUM_OUTPUTS 1",
                  "DYN_FORWARD_INPUT0_DTYPE 6", "DYN_FORWARD_INPUT0_SHAPE {32, 16}", "DYN_FORWARD_INPUT0_DIM0_MIN 1",
                  "DYN_FORWARD_INPUT0_DIM0_MAX 32", "DYN_FORWARD_OUTPUT0_BYTES 512", "DYN_ERROR_DIMS 3",
                  "DYN_FORWARD_NUM_INPUT_DIMS 1"):
        assert f"#define {macro}" in header, macro
    assert "int dyn_forward(const void *const *inputs, const int32_t *input_dims, void *const *outputs, " \
           "int32_t *output_dims, void *arena);" in header
    user = tmp_path / "user.c"
    user.write_text('#include "dyn.h"\n#ifdef __cplusplus\n#define _Static_assert static_assert\n#endif\n'
                    "_Static_assert(DYN_FORWARD_INPUT0_BYTES == 32 * 16 * sizeof(DYN_FORWARD_INPUT0_CTYPE), \"\");\n"
                    "static const int shape[DYN_FORWARD_INPUT0_RANK] = DYN_FORWARD_INPUT0_SHAPE;\n"
                    "int call(const float *x, float *y, int32_t *rows, void *arena) {\n"
                    "    (void)shape; return dyn_forward_run(x, 5, y, rows, arena);\n}\n")
    for compiler, flags in (("gcc", ["-x", "c", "-std=c11"]), ("g++", ["-x", "c++", "-std=c++17"])):
        done = run([firmware.require_tool(compiler), *flags, "-Wall", "-Wextra", "-Werror", "-pedantic", "-c",
                    f"-I{library.directory}", str(user), "-o", str(tmp_path / "user.o")])
        assert done.returncode == 0, done.stderr


def test_entries_refuse_bad_pointers_with_error_codes_and_write_nothing(tmp_path):
    two_layers = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))  # the hidden layer: arena
    library = _edge(two_layers, (torch.randn(2, 4),)).to_library(tmp_path / "lib", "lin", verbose=False)
    assert library.sizes["arena_bytes"] > 0
    main = tmp_path / "main.c"
    main.write_text(r'''
#include <stdio.h>
#include <string.h>
#include "lin.h"
static _Alignas(64) unsigned char arena[LIN_ARENA_BYTES + 64];
static float x[LIN_FORWARD_INPUT0_NUMEL], y[LIN_FORWARD_OUTPUT0_NUMEL + 1];
static int check(int got, int want, const char *what) {
    int untouched = 1;  /* y was all 0x5A before the call */
    for (unsigned k = 0; k < sizeof y; k++) untouched &= ((unsigned char *)y)[k] == 0x5A;
    memset(y, 0x5A, sizeof y);
    if (got != want || (want && !untouched)) { printf("FAIL %s: %d\n", what, got); return 1; }
    return 0;
}
int main(void) {
    int failures = 0;
    const void *inputs[1] = {x};
    void *outputs[1] = {y};
    memset(y, 0x5A, sizeof y);
    failures += check(lin_forward(NULL, outputs, arena), LIN_ERROR_NULL, "null inputs");
    failures += check(lin_forward_run(x, NULL, arena), LIN_ERROR_NULL, "null output");
    failures += check(lin_forward_run(x, y, arena + 8), LIN_ERROR_ALIGNMENT, "arena");
    failures += check(lin_forward_run(x, (float *)((char *)y + 2), arena), LIN_ERROR_ALIGNMENT, "output");
    failures += check(lin_forward_run(x, (float *)x, arena), LIN_ERROR_OVERLAP, "output on input");
    failures += check(lin_forward_run(x, (float *)(arena + LIN_ARENA_BYTES - 4), arena), LIN_ERROR_OVERLAP,
                      "output in arena");
    failures += check(lin_forward(inputs, outputs, arena), LIN_OK, "good call");
    printf(failures ? "FAILED\n" : "PASSED\n");
    return failures;
}
''')
    binary = tmp_path / "main"
    built = run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{library.directory}", str(main), library.archive,
                 "-lm", "-o", str(binary)])
    assert built.returncode == 0, built.stderr
    done = run([str(binary)])
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout


def test_objects_are_heapless_without_constructors_or_writable_data_and_weights_in_their_section(tmp_path):
    module, inputs = siren_mlp()
    library = _edge(module, inputs, target="cortex-m33").to_library(tmp_path, "siren", verbose=False)
    code, weights = (ElfObject(open(path, "rb").read()) for path in library.objects)
    names = {s.name for s in code.sections if s.kind} | {s.name for s in weights.sections if s.kind}
    # (.ARM.exidx holds only EXIDX_CANTUNWIND entries: the functions are nounwind, no personality routine)
    assert not [n for n in names if n.startswith((".init_array", ".ctors", ".data", ".bss"))], names
    assert [s.name for s in weights.sections if s.kind and s.size] == [".rodata.etc_weights.siren"]
    # memcpy/memset through the Arm EABI helpers, and the libm functions the model calls: nothing else.
    assert set(library.sizes["undefined"]) <= {"__aeabi_memcpy4", "__aeabi_memclr4", "__aeabi_memset4",
                                               "__aeabi_memcpy", "__aeabi_memclr", "__aeabi_memset",
                                               "__aeabi_memmove", "sinf", "cosf", "logf", "atanf"}
    assert {"sinf", "cosf", "logf", "atanf"} <= set(library.sizes["undefined"])
    assert set(code.defined) == {"siren_forward", "siren_init"}
    ar = run(["ar", "t", library.archive])
    assert ar.stdout.split() == ["siren.o", "siren_w.o"]
    nm = run(["nm", "-s", library.archive]).stdout
    assert "siren_forward in siren.o" in nm and "siren_weight0 in siren_w.o" in nm


@pytest.mark.parametrize("float_abi, vfp_args", [("hard", True), ("softfp", False)])
def test_cortex_m_objects_carry_the_float_abi_they_were_built_for(tmp_path, float_abi, vfp_args):
    """LLVM used to compile `thumbv7em-none-eabihf` with base-AAPCS calls and no Tag_ABI_VFP_args: GNU ld
    refused the objects next to -mfloat-abi=hard code. Each ABI now links into its firmware and runs."""
    readelf = firmware.require_tool("arm-none-eabi-readelf")
    module, inputs = siren_mlp()
    library = _edge(module, inputs, target="cortex-m7", float_abi=float_abi).to_library(tmp_path / "lib", "siren",
                                                                                         verbose=False)
    attributes = run([readelf, "-A", library.objects[0]]).stdout
    assert ("Tag_ABI_VFP_args: VFP registers" in attributes) == vfp_args
    main = tmp_path / "main.c"
    with torch.no_grad():
        x = inputs[0]
        want = module(x).numpy().reshape(-1)
    main.write_text("#include <math.h>\n#include \"etc_firmware.h\"\n#include \"siren.h\"\n"
                    f"static const float x[] = {{{', '.join(float(v).hex() + 'f' for v in x.numpy().reshape(-1))}}};\n"
                    f"static const float want[] = {{{', '.join(float(v).hex() + 'f' for v in want)}}};\n"
                    "static float y[SIREN_FORWARD_OUTPUT0_NUMEL];\n"
                    "static _Alignas(64) unsigned char arena[SIREN_ARENA_BYTES];\n"
                    "int main(void) {\n    if (siren_forward_run(x, y, arena)) return 2;\n"
                    "    for (int k = 0; k < SIREN_FORWARD_OUTPUT0_NUMEL; k++)\n"
                    "        if (fabsf(y[k] - want[k]) > 1e-4f + 1e-4f * fabsf(want[k])) return 1;\n"
                    "    fw_puts(\"PASSED\\n\");\n    return 0;\n}\n")
    built = firmware.build_firmware(str(tmp_path / "fw.elf"), [str(main)], [library], "mps2-an500",
                                    extra_flags=["-Werror"])
    done = firmware.run_firmware(built.elf, "mps2-an500")
    assert done.returncode == 0 and "PASSED" in done.stdout, done.stdout


def test_weights_shared_by_two_methods_are_stored_once(tmp_path):
    zoo = ZOO["two_methods"]()
    library = etc.to_edge(zoo.export()).to_backend(CpuPartitioner()).to_library(tmp_path, "ae", verbose=False)
    # forward reads the encoder's and decoder's weights and biases, encode the encoder's: 4 distinct tensors
    assert library.sizes["weight_tensors"] == 4
    report = json.load(open(library.size_json))
    assert report["weights_bytes"] >= 4 * (16 * 8 + 8 + 16) and set(report["methods"]) == {"forward", "encode"}


def test_stack_bound_follows_the_call_graph_of_the_frame_directives():
    assembly = """
entry:
	.fnstart
	.save	{r4, r5, r7, lr}
	push	{r4, r5, r7, lr}
	.vsave	{d8-d9}
	vpush	{d8, d9}
	.pad	#24
	sub	sp, #24
	bl	leaf
	bl	sinf
	b	other
.Lfunc_end0:
	.fnend
leaf:
	.save	{r7, lr}
	push	{r7, lr}
	.pad	#100
	sub	sp, #100
	bx	lr
other:
	bx	lr
"""
    found = stack_bound(assembly, ["entry"])
    assert found["frames"] == {"entry": 16 + 16 + 24, "leaf": 8 + 100, "other": 0}
    assert found["entries"]["entry"] == 56 + 108 and found["external"] == ["sinf"]


def test_command_line_writes_a_library(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
                     "        super().__init__()\n        self.fc = torch.nn.Linear(16, 4)\n\n"
                     "    def forward(self, x):\n        return torch.relu(self.fc(x))\n")
    etc_cli = [sys.executable, "-m", "etc.tools.etc_main"]
    done = subprocess.run([*etc_cli, "compile", f"{model}:Net", "--example-inputs", "1x16", "--emit-library",
                           str(tmp_path / "net"), "--target", "cortex-m33"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "library net for thumbv8m.main-unknown-none-eabihf" in done.stdout
    assert {"net.h", "libnet.a", "net.o", "net_weights.o", "net_size.json"} <= set(os.listdir(tmp_path / "net"))
    done = subprocess.run([*etc_cli, "compile", f"{model}:Net", "--example-inputs", "1x16"], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "nothing to write" in done.stderr and "Traceback" not in done.stderr


def test_two_libraries_of_one_model_link_into_one_program_with_their_own_weights(tmp_path):
    """Symbols are per library: the same model twice, different weights, one program."""
    torch.manual_seed(0)
    first, second = nn.Linear(4, 2).eval(), nn.Linear(4, 2).eval()
    x = torch.randn(1, 4)
    libraries = [_edge(m, (x,)).to_library(tmp_path / name, name, verbose=False)
                 for m, name in ((first, "one"), (second, "two"))]
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\n#include "one.h"\n#include "two.h"\n'
                    "static _Alignas(64) unsigned char a[ONE_ARENA_BYTES + 64], b[TWO_ARENA_BYTES + 64];\n"
                    f"static const float x[4] = {{{', '.join(float(v).hex() + 'f' for v in x.reshape(-1).tolist())}}};"
                    "\n"
                    "int main(void) {\n    float y[2], z[2];\n"
                    "    if (one_forward_run(x, y, a) || two_forward_run(x, z, b)) return 1;\n"
                    '    printf("%.9g %.9g %.9g %.9g\\n", y[0], y[1], z[0], z[1]);\n    return 0;\n}\n')
    binary = tmp_path / "main"
    built = run(["gcc", "-std=c11", "-Wall", "-Werror", *[f"-I{lib.directory}" for lib in libraries], str(main),
                 *[lib.archive for lib in libraries], "-o", str(binary)])
    assert built.returncode == 0, built.stderr
    got = np.array([float(v) for v in run([str(binary)]).stdout.split()])
    with torch.no_grad():
        want = np.concatenate([first(x).numpy().reshape(-1), second(x).numpy().reshape(-1)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
