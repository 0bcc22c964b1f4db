"""BundledProgram (`.bpte`, ExecuTorch's format): written by etc and verified by ExecuTorch, written by
ExecuTorch and verified by etc (and re-written byte for byte), `etc run --verify`, and clear errors."""

import numpy as np
import pytest
import torch

import etc
from etc.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
from etc.errors import EtcError, ProgramError
from etc.runtime import Runtime
from etc.tools.etc_main import main as etc_main


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        return torch.relu(self.lin(x)) + y


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 3


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    module = LinearRelu().eval()
    cases = [(torch.randn(2, 8), torch.randn(2, 4)) for _ in range(2)]
    return module, cases


def _etc_bundle(module, cases, expected=None):
    program = etc.to_edge(torch.export.export(module, cases[0])).to_executorch()
    with torch.no_grad():
        tests = [MethodTestCase(inputs=list(c), expected_outputs=[(expected or module)(*c)]) for c in cases]
    return BundledProgram(program, [MethodTestSuite("forward", tests)])


def test_an_etc_bundle_round_trips_and_verifies_on_etc(model, tmp_path):
    module, cases = model
    bundle = _etc_bundle(module, cases)
    path = tmp_path / "m.bpte"
    bundle.save(path)
    assert path.read_bytes()[4:8] == b"BP08"
    loaded = BundledProgram.load(path)
    assert loaded.program == bundle.program
    suite = loaded.method_test_suites[0]
    assert suite.method_name == "forward" and len(suite.test_cases) == 2
    np.testing.assert_array_equal(suite.test_cases[1].inputs[0], cases[1][0].numpy())
    report = loaded.verify()
    assert report.ok and "2 of 2 test case(s) passed" in str(report)
    wrong = _etc_bundle(module, cases, expected=lambda x, y: module(x, y) + 1e-3)
    report = BundledProgram.load(wrong.serialize()).verify()
    assert not report.ok and "differ beyond rtol=1e-05 atol=1e-08" in str(report)


def test_an_etc_bundle_verifies_on_executorch(model):
    portable_lib = pytest.importorskip("executorch.extension.pybindings.portable_lib")
    module, cases = model
    data = _etc_bundle(module, cases).serialize()
    loaded = portable_lib._load_bundled_program_from_buffer(data)
    for i, case in enumerate(cases):
        (out,) = loaded.verify_result_with_bundled_expected_output("forward", i)
        torch.testing.assert_close(out, module(*case), rtol=1e-5, atol=1e-6)
    wrong = _etc_bundle(module, cases, expected=lambda x, y: module(x, y) + 1.0).serialize()
    with pytest.raises(Exception):  # ExecuTorch checks the expected outputs etc wrote, and they are wrong
        portable_lib._load_bundled_program_from_buffer(wrong).verify_result_with_bundled_expected_output("forward", 0)


def test_an_executorch_bundle_verifies_on_etc_and_rewrites_byte_for_byte(model, tmp_path, capsys):
    pytest.importorskip("pandas")  # executorch.devtools imports it
    core = pytest.importorskip("executorch.devtools.bundled_program.core")
    config = pytest.importorskip("executorch.devtools.bundled_program.config")
    serialize = pytest.importorskip("executorch.devtools.bundled_program.serialize")
    exir = pytest.importorskip("executorch.exir")
    module, cases = model
    program = exir.to_edge(torch.export.export(module, cases[0])).to_executorch()
    with torch.no_grad():
        tests = [config.MethodTestCase(inputs=c, expected_outputs=(module(*c),)) for c in cases]
    data = serialize.serialize_from_bundled_program_to_flatbuffer(
        core.BundledProgram(program, [config.MethodTestSuite(method_name="forward", test_cases=tests)]))
    bundle = BundledProgram.load(data)
    assert bundle.verify().ok
    assert bundle.serialize() == data
    (tmp_path / "et.bpte").write_bytes(data)
    assert etc_main(["run", "--verify", str(tmp_path / "et.bpte")]) == 0
    assert "2 of 2 test case(s) passed" in capsys.readouterr().out


def test_etc_run_verify_fails_on_a_mismatch_and_runs_a_bundle_on_its_inputs(tmp_path, capsys):
    x = torch.arange(4.0)
    program = etc.to_edge(torch.export.export(Scale(), (x,))).to_executorch()
    BundledProgram(program, [MethodTestSuite("forward", [MethodTestCase([x], [x * 3]),
                                                         MethodTestCase([x + 1], [x * 3])])]).save(tmp_path / "s.bpte")

    assert etc_main(["run", "--verify", str(tmp_path / "s.bpte")]) == 1
    out = capsys.readouterr().out
    assert "ok   forward case 0" in out and "FAIL forward case 1" in out and "1 of 2 test case(s) passed" in out
    # Numbers as a user reads them (it printed "got np.float64(3.0), expected np.float64(0.0)").
    assert "at [0] got 3, expected 0" in out and "np.float" not in out
    assert etc_main(["run", str(tmp_path / "s.bpte"), "--runs", "0"]) == 0
    assert "[0. 3. 6. 9.]" in capsys.readouterr().out
    assert etc_main(["profile", str(tmp_path / "s.bpte"), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "inputs of the bundle's first 'forward' test case" in out and "forward: 2 execute(s)" in out
    program.save(tmp_path / "s.pte")
    assert etc_main(["run", "--verify", str(tmp_path / "s.pte")]) == 1
    assert "needs a bundled program (.bpte)" in capsys.readouterr().err


def test_bad_bundles_are_clear_errors(model):
    module, cases = model
    program = etc.to_edge(torch.export.export(module, cases[0])).to_executorch()
    with pytest.raises(EtcError, match="method 'backward', which the program does not have"):
        BundledProgram(program, [MethodTestSuite("backward", [])])
    with pytest.raises(EtcError, match="test case 0: 1 input\\(s\\), the method takes 2"):
        BundledProgram(program, [MethodTestSuite("forward", [MethodTestCase([cases[0][0]])])])
    with pytest.raises(EtcError, match="must be a tensor, int, bool or float, got str"):
        MethodTestCase(["nope"])
    data = _etc_bundle(module, cases).serialize()
    with pytest.raises(ProgramError, match="not the bundled program identifier"):
        BundledProgram.load(program.buffer)
    with pytest.raises(ProgramError, match="BundledProgram"):
        BundledProgram.load(data[: len(data) // 3])
    with pytest.raises(ProgramError, match="this is a bundled program .*etc run --verify"):
        Runtime.get().load_program(data)
