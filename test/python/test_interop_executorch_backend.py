"""etc's cpu backend for stock ExecuTorch (`runtime/executorch_backend/`, issue 25), beyond the zoo runs of
test_interop_runtime.py and test_interop_quantized.py: an 8da4w LLM (its KV cache updated in place),
dynamic sizes, ExecuTorch's threadpool, profile regions in ETDump, the errors a blob that cannot run
here gives (never a crash: the fuzzer's ExecuTorch modes in test_program_fuzz.py damage blobs at
random), what happens where executable memory is refused (W^X), and the runner's command line.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import executorch_runner

executorch_runtime = pytest.importorskip("executorch.runtime")

import etc  # noqa: E402
from etc.runtime import Runtime, executorch_backend  # noqa: E402
from etc.targets.cpu import CpuPartitioner  # noqa: E402
from etc.targets.cpu import blob as cpu_blob  # noqa: E402
from etc.targets.cpu.runtime import llvm_binding  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def etc_backend():
    return executorch_backend.load()


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv(x))))
        return torch.softmax(self.fc(y.mean(dim=(2, 3))), dim=-1)


def _conv_program(**partitioner):
    torch.manual_seed(0)
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    program = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner(**partitioner)).to_executorch()
    with torch.no_grad():
        return model, x, program, model(x)


def _on_executorch(buffer: bytes, inputs, method="forward"):
    return executorch_runtime.Runtime.get().load_program(buffer).load_method(method).execute(list(inputs))


def test_load_registers_the_backend_executorch_runs_programs_with():
    assert executorch_backend.load() == executorch_backend.load()  # one build, one library, loaded once
    assert "cpu" in executorch_runtime.Runtime.get().backend_registry.registered_backend_names
    assert executorch_runtime.Runtime.get().backend_registry.is_available("cpu")


def test_the_backend_imports_the_functions_etcs_loader_does():
    """The C++ table of importable functions and `image.IMPORTS` name the same functions."""
    from etc.targets.cpu.image import IMPORTS

    with open(os.path.join(executorch_backend.SOURCE_DIR, "imports.cpp")) as f:
        text = f.read()
    names = set(re.findall(r'\{"(\w+)", reinterpret_cast', text)) | set(re.findall(r"FN\(\w+, (\w+)\)", text))
    assert names - {"name"} == set(IMPORTS)  # (the FN macro's parameter)


# ------------------------------------------------------------------------------- an 8da4w LLM
def _llama_8da4w():
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128,
                              max_context_len=32)).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
              filter_fn=lambda module, fqn: isinstance(module, nn.Linear))
    return model


@pytest.fixture(scope="module")
def llama():
    import copy

    pytest.importorskip("torchao")
    import etc.llm

    model = _llama_8da4w()
    reference = copy.deepcopy(model)
    return reference, lambda **target: etc.llm.export_llm(copy.deepcopy(model), max_seq_len=8,
                                                         partitioner=CpuPartitioner(**target))


def _sqnr(signal, noisy) -> float:
    signal, noisy = np.asarray(signal, np.float64), np.asarray(noisy, np.float64).reshape(np.shape(signal))
    noise = ((signal - noisy) ** 2).sum()
    return float("inf") if noise == 0 else float(10 * np.log10((signal ** 2).sum() / noise))


def test_an_8da4w_llm_prefills_and_decodes_on_executorch(llama):
    """A prompt, then tokens one at a time: the KV cache is a delegate input and output in one buffer
    (the blob's in-place pair), written where it lies; every step matches eager and etc's runtime."""
    reference, export = llama
    program = export()
    blobs = [cpu_blob.deserialize(b) for b in program.pte.delegate_segments]
    assert any(b.metadata.get("in_place") for b in blobs)
    assert any("derive" in c for b in blobs for c in b.metadata["constants"].values())  # 8da4w column sums
    method = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward")
    ours = Runtime.get().load_program(program.buffer).load_method("forward")
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    steps = [(tokens[:, :6], torch.arange(6))] + [(tokens[:, i:i + 1], torch.tensor([i])) for i in range(6, 12)]
    for t, p in steps:
        with torch.no_grad():
            want = reference(t, p)
        (got,) = method.execute([t, p])
        (etc_got,) = ours.execute([t.numpy(), p.numpy()])
        assert _sqnr(want, got) >= 35, int(p[0])
        np.testing.assert_array_equal(got.numpy(), np.asarray(etc_got))  # the same code, its constants derived alike


@executorch_runner.needs_aarch64
def test_an_8da4w_llm_prefills_on_executorch_on_aarch64(llama, tmp_path):
    reference, export = llama
    program = export(target="aarch64-linux-gnu")
    tokens, positions = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(2)), torch.arange(7)
    with torch.no_grad():
        want = reference(tokens, positions).numpy()
    executorch_runner.run("aarch64-linux-gnu", program.buffer,
                          [("forward", [tokens.numpy(), positions.numpy()], [want])], tmp_path, tolerance=0.05)


# ------------------------------------------------------------------------------- constants stored small
class NarrowWeights(nn.Module):
    """Weights the blob stores narrower (float16 values, int8 and int16 integers) and one packed into
    column panels with its last one partly zero padding (280 columns: 24 past 4 panels of 64 on
    AVX-512, 8 past 17 of 16 on AVX2; the tail is not stored)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fp16 = nn.Linear(256, 280)
        self.small = nn.Linear(280, 64, bias=False)
        self.wide = nn.Linear(64, 32, bias=False)
        with torch.no_grad():
            self.fp16.weight.copy_(self.fp16.weight.half().float())
            self.small.weight.copy_(torch.randint(-128, 128, self.small.weight.shape).float() / 1)
            self.wide.weight.copy_(torch.randint(-30000, 30000, self.wide.weight.shape).float())

    def forward(self, x):
        return self.wide(torch.tanh(self.small(torch.relu(self.fp16(x))) * 1e-3)) * 1e-4


def test_constants_stored_narrower_or_trimmed_are_rebuilt_bit_for_bit():
    model, x = NarrowWeights().eval(), torch.randn(3, 256)
    program = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner()).to_executorch()
    (blob,) = [cpu_blob.deserialize(b) for b in program.pte.delegate_segments]
    stored = {info.get("stored") for info in blob.metadata["constants"].values()}
    assert {"float16", "int8", "int16"} <= stored, blob.metadata["constants"]
    assert any("tail" in info for info in blob.metadata["constants"].values())
    (got,) = _on_executorch(program.buffer, [x])
    (ours,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy()])
    np.testing.assert_array_equal(got.numpy(), ours)  # the same constants, the same code
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_derived_8da4w_column_sums_are_the_same_bits_in_both_loaders():
    """24 groups per row: summed in the one order both loaders use (numpy's sum of 8 or more terms
    would be pairwise), so ExecuTorch's run and etc's compute the same bits."""
    pytest.importorskip("torchao")
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(768, 96)).eval(), torch.randn(5, 768)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    program = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner()).to_executorch()
    (blob,) = [cpu_blob.deserialize(b) for b in program.pte.delegate_segments]
    assert any("derive" in info for info in blob.metadata["constants"].values())
    (got,) = _on_executorch(program.buffer, [x])
    (ours,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy()])
    np.testing.assert_array_equal(got.numpy(), ours)


def test_a_winograd_convolution_runs_on_executorch_with_the_same_bits():
    """A 3x3 convolution the cpu target computes as Winograd F(2x2,3x3) (its transformed filter a
    constant of the blob, V and M in the scratch arena) on two threads: ExecuTorch's run gives
    etc's bits, and eager's result."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(1, 64, 15, 14)
    edge = etc.to_edge(torch.export.export(model, (x,))).to_backend(CpuPartitioner(num_threads=2))
    assert "convolution -> winograd" in edge.delegation_info(), edge.delegation_info()
    program = edge.to_executorch()
    (got,) = _on_executorch(program.buffer, [x])
    (ours,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy()])
    np.testing.assert_array_equal(got.numpy(), ours)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=5e-5)


# ------------------------------------------------------------------------------- dynamic sizes, threads
def test_dynamic_sizes_resize_the_outputs_and_sizes_past_the_bounds_are_refused():
    from etc.models.zoo import ZOO

    zoo_model = ZOO["dynamic_batch"]()
    program = etc.to_edge(zoo_model.export()).to_backend(CpuPartitioner()).to_executorch()
    method = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward")
    (x,) = zoo_model.example_inputs
    for batch in (1, 7, 32, 3):
        inputs = torch.randn(batch, *x.shape[1:])
        (got,) = method.execute([inputs])
        with torch.no_grad():
            want = zoo_model.module(inputs)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception):  # ExecuTorch's error (a RuntimeError), not a crash
        method.execute([torch.randn(33, *x.shape[1:])])


def test_a_threaded_blob_runs_on_executorchs_threadpool():
    from executorch.extension.pybindings import portable_lib

    from etc.compiler.delegation import CompileSpec

    portable_lib._unsafe_reset_threadpool(2)
    assert portable_lib._threadpool_get_thread_count() == 2
    model, x, program, want = _conv_program(num_threads=2, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    (blob,) = [cpu_blob.deserialize(b) for b in program.pte.delegate_segments]
    assert blob.metadata["entry_abi"] == "threaded"
    method = executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward")
    for _ in range(3):  # the barrier is reused call after call
        (got,) = method.execute([x])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- profiling (ETDump)
def test_profile_regions_reach_executorchs_etdump(tmp_path):
    """CpuPartitioner(profile=True): each region is an event of ExecuTorch's event tracer, named, timed
    and listing its partition ops; etc's ETDump reader and Inspector show them under the delegate call,
    from executorch.runtime and from the C++ runner alike."""
    from etc.devtools import Inspector
    from etc.devtools.etdump import read_executorch_etdump

    model, x, program, want = _conv_program(profile=True)
    (blob,) = [cpu_blob.deserialize(b) for b in program.pte.delegate_segments]
    names = [r["name"] for r in blob.metadata["profile"]["regions"]]
    loaded = executorch_runtime.Runtime.get().load_program(program.buffer, enable_etdump=True)
    method = loaded.load_method("forward")
    for _ in range(2):
        (got,) = method.execute([x])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    loaded.write_etdump_result_to_file(str(tmp_path / "run.etdp"), str(tmp_path / "debug.bin"))
    runner_dump = tmp_path / "runner.etdp"
    executorch_runner.run("host", program.buffer, [("forward", [x.numpy()], [want.numpy()])], tmp_path,
                          extra=["--runs", "2", "--etdump", str(runner_dump)])
    for dump in (tmp_path / "run.etdp", runner_dump):
        record = read_executorch_etdump(str(dump), program=program.buffer)
        events = record.delegate_events
        assert [e.name for e in events if e.run == 0] == names
        assert all(e.ops for e in events) and all(e.end_ns >= e.start_ns for e in events)
        inspector = Inspector(record, etrecord=None, program=program.buffer)
        assert {r.name for r in inspector.rows} >= set(names)


# ------------------------------------------------------------------------------- refusals, never crashes
def _with_blob(program_bytes: bytes, change) -> bytes:
    """The program with its cpu blob replaced by `change(blob) -> blob`."""
    from etc.schema import deserialize_pte, serialize_pte

    pte = deserialize_pte(program_bytes)
    pte.delegate_segments = [change(b) for b in pte.delegate_segments]
    return serialize_pte(pte)


def _remade(data: bytes, **metadata) -> bytes:
    parsed = cpu_blob.deserialize(data)
    meta = {**parsed.metadata, **metadata}
    constants = {name: parsed.constant(name) for name in meta.pop("constants")}
    return cpu_blob.serialize(meta, parsed.image, constants)


def _refused(buffer: bytes, capfd) -> str:
    with pytest.raises(RuntimeError, match=r"Failed to load method forward"):
        _on_executorch(buffer, [torch.randn(2, 3, 16, 16)])
    return capfd.readouterr().err


def test_a_blob_this_machine_cannot_run_is_an_executorch_error(capfd):
    _, _, program, _ = _conv_program()
    capfd.readouterr()
    arm = etc.to_edge(torch.export.export(ConvNet().eval(), (torch.randn(2, 3, 16, 16),))).to_backend(
        CpuPartitioner(target="aarch64-linux-gnu")).to_executorch()
    assert "cpu delegate was compiled for aarch64" in _refused(arm.buffer, capfd)
    # A feature only the other vendor's CPUs have: sse4a is AMD's alone, amx-tile Intel's.
    host = llvm_binding().get_host_cpu_features()
    lacking = next(f for f in ("sse4a", "amx-tile") if not host.get(f, False))
    other_vendor = _with_blob(program.buffer, lambda b: _remade(b, required_features=[lacking]))
    assert f"needs CPU feature(s) +{lacking}" in _refused(other_vendor, capfd)
    unknown = _with_blob(program.buffer, lambda b: _remade(b, required_features=["etc-nonexistent"]))
    assert "+etc-nonexistent (no probe this backend can check)" in _refused(unknown, capfd)

    def old_version(b):
        out = bytearray(b)
        out[8] = 3
        out[12:16] = bytes(4)
        out[12:16] = cpu_blob.crc(out).to_bytes(4, "little")
        return bytes(out)

    assert "format version 3 is not supported" in _refused(_with_blob(program.buffer, old_version), capfd)
    flipped = _with_blob(program.buffer, lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:])
    assert "checksum mismatch" in _refused(flipped, capfd)


_WX_CHILD = textwrap.dedent('''
    import ctypes, struct, sys
    import torch
    from executorch.runtime import Runtime as ExecuTorchRuntime
    from etc.errors import BackendError
    from etc.runtime import Runtime, executorch_backend

    executorch_backend.load()
    data = open(sys.argv[1], "rb").read()
    assert ExecuTorchRuntime.get().load_program(data).load_method("forward") is not None  # runs before

    # seccomp: from here on, mprotect(..., PROT_EXEC) fails with EACCES (as under an SELinux policy
    # without execmem, or PaX MPROTECT)
    def insn(code, k, jt=0, jf=0):
        return struct.pack("<HBBI", code, jt, jf, k)
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
    program = b"".join([insn(LD, 4), insn(JEQ, 0xC000003E, 0, 5),  # 0-1: x86-64, else allow (7)
                        insn(LD, 0), insn(JEQ, 10, 0, 3),  # 2-3: mprotect, else allow
                        insn(LD, 32), insn(JSET, 4, 0, 1),  # 4-5: args[2] & PROT_EXEC, else allow
                        insn(RET, 0x00050000 | 13), insn(RET, 0x7FFF0000)])  # 6: EACCES, 7: allow
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("<HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, FILTER

    try:
        ExecuTorchRuntime.get().load_program(data).load_method("forward")
        print("ExecuTorch: loaded")
    except RuntimeError as error:
        print("ExecuTorch: refused", error)
    try:
        Runtime.get().load_program(data).load_method("forward")
        print("etc: loaded")
    except BackendError as error:
        print("etc: refused", error)
''')


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="the seccomp filter is written for x86-64 Linux")
def test_where_executable_memory_is_refused_the_load_is_an_error(tmp_path):
    """W^X: both loaders map the image writable, then make its code read+execute. A system that
    refuses that (seccomp here, as an SELinux policy without execmem or PaX would) gets an error
    from each saying so, and the process lives on."""
    _, _, program, _ = _conv_program()
    (tmp_path / "p.pte").write_bytes(program.buffer)
    (tmp_path / "child.py").write_text(_WX_CHILD)
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "p.pte")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ExecuTorch: refused" in proc.stdout and "etc: refused" in proc.stdout, proc.stdout
    assert "refuses to make memory that was writable executable (W^X policy" in proc.stderr
    assert "(this system refuses executable memory that was writable: W^X policy)" in proc.stdout


# ------------------------------------------------------------------------------- the runner
def test_the_runner_runs_any_etc_program_and_says_what_is_wrong(tmp_path):
    """A portable program (no delegate) and a delegated one; a wrong expectation is exit status 1 naming the
    element; a missing file or a wrong input count exit status 2 with a message, not a crash."""
    model, x, program, want = _conv_program()
    portable = etc.to_edge(torch.export.export(model, (x,))).to_executorch()
    for buffer in (portable.buffer, program.buffer):
        executorch_runner.run("host", buffer, [("forward", [x.numpy()], [want.numpy()])], tmp_path)
    runner = executorch_backend.runner_command("host")
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "wrong.npy", want.numpy() + 1)
    (tmp_path / "p.pte").write_bytes(program.buffer)
    proc = subprocess.run(runner + [str(tmp_path / "p.pte"), "--input", str(tmp_path / "x.npy"), "--expect",
                                    str(tmp_path / "wrong.npy"), "--output-dir", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "MISMATCH: element" in proc.stdout, proc.stdout
    (ours,) = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy()])
    np.testing.assert_array_equal(np.load(tmp_path / "output_0.npy"), ours)  # the same code on the same input
    proc = subprocess.run(runner + [str(tmp_path / "missing.pte")], capture_output=True, text=True)
    assert proc.returncode == 2 and "etc_runner:" in proc.stderr
    proc = subprocess.run(runner + [str(tmp_path / "p.pte"), "--input", str(tmp_path / "x.npy"), "--input",
                                    str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert proc.returncode == 2 and "takes 1 inputs, got 2" in proc.stderr
