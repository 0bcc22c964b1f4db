"""`executorch.runtime` parity: a script written for ExecuTorch's Python runtime runs on etc's by
changing its import, and does the same on both (test/data/interop_executorch_runtime_script.py)."""

import os
import runpy
import sys

import pytest
import torch

import etc

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "data", "interop_executorch_runtime_script.py")


class LinearReluAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        return torch.relu(self.lin(x)) + y


@pytest.fixture(scope="module")
def pte_path(tmp_path_factory):
    torch.manual_seed(0)
    ep = torch.export.export(LinearReluAdd().eval(), (torch.ones(2, 8), torch.ones(2, 4)))
    path = tmp_path_factory.mktemp("parity") / "model.pte"
    etc.to_edge(ep).to_executorch().save(path)
    return path


def _run_script(source: str, tmp_path, pte_path, capsys) -> str:
    script = tmp_path / "script.py"
    script.write_text(source)
    argv = sys.argv
    sys.argv = [str(script), str(pte_path), str(tmp_path)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
    return capsys.readouterr().out


def _result(out: str) -> float:
    return float(next(line for line in out.splitlines() if line.startswith("RESULT")).split()[1])


def test_the_executorch_script_runs_on_etc_by_changing_the_import(tmp_path, pte_path, capsys):
    with open(SCRIPT) as f:
        source = f.read()
    assert "from executorch.runtime import Runtime, Verification" in source
    ported = source.replace("from executorch.runtime import", "from etc.runtime import")
    assert ported.count("etc.runtime") == 1 and "executorch" not in ported.replace("executorch.runtime", "")
    out = _run_script(ported, tmp_path, pte_path, capsys)
    assert "Program methods: {'forward'}" in out
    torch.manual_seed(0)
    expected = LinearReluAdd().eval()
    reference = (torch.relu(expected.lin(torch.ones(2, 8))) + 0.5).sum().item()
    assert _result(out) == pytest.approx(reference, rel=1e-5)
    if _has_executorch():  # the same script, unported, gives the same result on ExecuTorch
        assert _result(_run_script(source, tmp_path, pte_path, capsys)) == pytest.approx(_result(out), rel=1e-6)


def _has_executorch() -> bool:
    try:
        import executorch.runtime  # noqa: F401
    except ImportError:
        return False
    return True
