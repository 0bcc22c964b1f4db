"""External weights: `.ptd` data files (ExecuTorch's FlatTensor format) both ways.

etc writes a program plus `.ptd` with `ExecutorchBackendConfig(external_constants=...)` and
reads one with `Runtime.get().load_program(pte, data_path=ptd)`; ExecuTorch's own
`external_constants=True` program + `.ptd` runs on etc's runtime, and etc's runs on stock
`executorch.runtime`. A missing, wrong or corrupted data file is a ProgramError.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import etc
from etc.errors import ProgramError
from etc.runtime import Runtime
from etc.schema.flat_tensor import PtdFile, map_ptd, read_ptd, serialize_ptd


class Model(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(8, 5)
        self.register_buffer("shift", torch.randn(5))

    def forward(self, x):
        return torch.relu(self.lin(x)) + self.shift


X = torch.randn(3, 8)


def _export(model):
    return torch.export.export(model.eval(), (X,))


def _etc_program(model, external_constants=True):
    return etc.to_edge(_export(model)).to_executorch(etc.ExecutorchBackendConfig(external_constants=external_constants))


def _eager(model):
    with torch.no_grad():
        return model(X).numpy()


def test_flat_tensor_round_trip_and_shared_segments():
    ptd = PtdFile()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ptd.add_tensor("a", a)
    ptd.add_tensor("same_as_a", a)
    ptd.add_tensor("b", np.array([1, 2], dtype=np.int64))
    data = serialize_ptd(ptd)
    back = read_ptd(data)
    assert list(back.entries) == ["a", "same_as_a", "b"]
    assert bytes(back.entries["a"].data) == a.tobytes() == bytes(back.entries["same_as_a"].data)
    assert back.entries["a"].layout.sizes == [3, 4]
    assert data.count(a.tobytes()) == 1  # equal tensors share one segment
    corrupted = bytearray(data)
    corrupted[data.index(a.tobytes()) + 5] ^= 0x10
    with pytest.raises(ProgramError, match="segment 0: checksum mismatch"):
        read_ptd(bytes(corrupted))
    read_ptd(bytes(corrupted), verify_checksums=False)  # Verification.Minimal
    with pytest.raises(ProgramError, match="truncated"):
        read_ptd(data[:len(data) - 40])
    with pytest.raises(ProgramError, match="not a .ptd"):
        read_ptd(b"\0" * 64)


@pytest.fixture(scope="module")
def external():
    """(model, its ExecutorchProgram with external_constants=True), shared by the tests below."""
    model = Model()
    return model, _etc_program(model)


def test_etc_program_with_external_weights_runs_on_etc(tmp_path, external):
    model, program = external
    assert list(program.tensor_data) == ["_default_external_constant"]
    weight = model.lin.weight.detach().numpy().T.copy().tobytes()  # to_edge folds the transpose into it
    assert weight not in program.buffer and weight in program.tensor_data["_default_external_constant"]
    program.save(tmp_path / "model.pte")
    ptd = tmp_path / "_default_external_constant.ptd"
    assert {"lin.bias", "shift"} <= set(map_ptd(ptd).entries)
    loaded = Runtime.get().load_program(tmp_path / "model.pte", data_path=ptd)
    (out,) = loaded.load_method("forward").execute([X.numpy()])
    np.testing.assert_allclose(out, _eager(model), rtol=1e-5, atol=1e-6)

    # A list of files is accepted (several programs may share one file, each reading its keys).
    again = Runtime.get().load_program(program.buffer, data_path=[str(ptd)])
    np.testing.assert_allclose(again.load_method("forward").execute([X.numpy()])[0], out)


def test_external_constants_callable_splits_files(tmp_path):
    model = Model()
    program = _etc_program(model, external_constants=lambda fqn: "weights" if fqn.startswith("lin.") else None)
    assert list(program.tensor_data) == ["weights"]
    (path,) = program.write_tensor_data_to_file(tmp_path)
    assert set(map_ptd(path).entries) == {"lin.bias"}
    (out,) = Runtime.get().load_program(program.buffer, data_path=path).load_method("forward").execute([X.numpy()])
    np.testing.assert_allclose(out, _eager(model), rtol=1e-5, atol=1e-6)


def test_missing_wrong_or_corrupt_data_file_is_a_clear_error(tmp_path, external):
    program = external[1]
    with pytest.raises(ProgramError, match=r"tensor '\w+(\.\w+)?' lives in external data .* data_path="):
        Runtime.get().load_program(program.buffer).load_method("forward")
    with pytest.raises(ProgramError, match="cannot read data file .*No such file"):
        Runtime.get().load_program(program.buffer, data_path=tmp_path / "absent.ptd")

    class Wider(Model):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 6)
            self.shift = torch.zeros(6)

    other = torch.export.export(Wider().eval(), (X,))
    other_ptd = etc.to_edge(other).to_executorch(etc.ExecutorchBackendConfig(external_constants=True)).tensor_data
    with pytest.raises(ProgramError, match=r"external tensor '\w+(\.\w+)?' is FLOAT\[\d(, 8)?\] in the program but "
                                           r"FLOAT\[6(, 8)?\] in the data file"):
        Runtime.get().load_program(program.buffer, data_path=other_ptd["_default_external_constant"]) \
            .load_method("forward")
    damaged = bytearray(program.tensor_data["_default_external_constant"])
    damaged[-40] ^= 1  # inside the last tensor
    path = tmp_path / "damaged.ptd"
    path.write_bytes(bytes(damaged))
    with pytest.raises(ProgramError, match="damaged.ptd: segment \\d+: checksum mismatch"):
        Runtime.get().load_program(program.buffer, data_path=path)


def test_executorch_external_constants_program_runs_on_etc(tmp_path):
    exir = pytest.importorskip("executorch.exir")
    model = Model(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = exir.to_edge(_export(model)).to_executorch(exir.ExecutorchBackendConfig(external_constants=True))
    (tmp_path / "et.pte").write_bytes(et.buffer)
    et.write_tensor_data_to_file(str(tmp_path))
    ptd = tmp_path / "_default_external_constant.ptd"
    assert ptd.exists() and not map_ptd(ptd).checksums  # ExecuTorch's file, no etc trailer
    loaded = Runtime.get().load_program(tmp_path / "et.pte", data_path=ptd)
    (out,) = loaded.load_method("forward").execute([X.numpy()])
    np.testing.assert_allclose(out, _eager(model), rtol=1e-5, atol=1e-6)


def test_etc_external_constants_program_runs_on_executorch(tmp_path):
    executorch_runtime = pytest.importorskip("executorch.runtime")
    model = Model(seed=5)
    program = _etc_program(model)
    program.save(tmp_path / "model.pte")
    loaded = executorch_runtime.Runtime.get().load_program(
        str(tmp_path / "model.pte"), data_path=str(tmp_path / "_default_external_constant.ptd"))
    (out,) = loaded.load_method("forward").execute([X])
    np.testing.assert_allclose(out.numpy(), _eager(model), rtol=1e-5, atol=1e-6)


def test_llm_weights_in_a_data_file_generate_as_eager(tmp_path):
    from etc.llm import TextGenerator, export_llm
    from etc.llm.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=40, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=32,
                              max_context_len=16)).eval()
    prompt = [3, 7, 1, 9]
    with torch.no_grad():  # the eager greedy loop, on a copy of the cache
        state = {k: v.clone() for k, v in model.named_buffers()}
        logits = model(torch.tensor([prompt]), torch.arange(len(prompt)))
        want = []
        for position in range(len(prompt), len(prompt) + 5):
            want.append(int(logits[0, -1].argmax()))
            logits = model(torch.tensor([[want[-1]]]), torch.tensor([position]))
        for k, v in model.named_buffers():
            v.copy_(state[k])
    program = export_llm(model, max_seq_len=4, external_weights="llama_weights")
    program.save(tmp_path / "llama.pte")
    ptd = tmp_path / "llama_weights.ptd"
    embedding = model.tok_embeddings.weight.detach().numpy().tobytes()
    assert embedding in ptd.read_bytes() and embedding not in (tmp_path / "llama.pte").read_bytes()
    with pytest.raises(ProgramError, match="data_path"):
        TextGenerator(str(tmp_path / "llama.pte"))
    generator = TextGenerator(str(tmp_path / "llama.pte"), data_path=ptd)
    assert generator.generate(prompt, max_new_tokens=5, stop_tokens=[]).tokens == want


def test_flat_tensor_fbs_and_dataclasses_agree():
    """schema/flat_tensor.fbs (the text) and flat_tensor.py (what the writer and reader follow)."""
    import os

    from test_schema_fbs import kind_matches, parse_fbs

    from etc.schema import flat_tensor
    from etc.schema.kinds import wire_fields

    text = open(os.path.join(os.path.dirname(flat_tensor.__file__), "flat_tensor.fbs")).read()
    text = text.replace("executorch_flatbuffer.", "")  # ScalarType, from program.fbs
    _, _, tables, identifier = parse_fbs(text)
    assert identifier.encode() == flat_tensor.FILE_IDENTIFIER
    assert set(tables) == set(flat_tensor.TABLES)
    for name, cls in flat_tensor.TABLES.items():
        fields = wire_fields(cls)
        assert [f for f, _, _ in tables[name]] == [f for f, _ in fields], name
        for (field, ftype, attrs), (_, kind) in zip(tables[name], fields):
            assert kind_matches(kind, ftype, attrs), f"{name}.{field}"
