"""The `etc` command line: compile, run, inspect, and clear errors for user mistakes."""

import subprocess
import sys
import textwrap

import pytest

MODEL = textwrap.dedent('''
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 3)

        def forward(self, x):
            return torch.relu(self.fc(x))
''')


def etc_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "etc.tools.etc_main", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    (folder / "tiny.py").write_text(MODEL)
    result = etc_cli("compile", folder / "tiny.py:Tiny", "--example-inputs", "2x6", "-o", folder / "tiny.pte")
    assert result.returncode == 0, result.stderr
    return folder, result


def test_compile_reports_plan_and_progress(compiled):
    folder, result = compiled
    assert (folder / "tiny.pte").stat().st_size > 0
    assert "planned bytes" in result.stdout and "lower bound" in result.stdout
    assert "[etc] lowering to the edge dialect" in result.stderr


def test_run_prints_outputs_and_latency(compiled):
    folder, _ = compiled
    result = etc_cli("run", folder / "tiny.pte", "--runs", "3")
    assert result.returncode == 0, result.stderr
    assert "output 0: shape [2, 3] float32" in result.stdout
    assert "median latency over 3 runs" in result.stdout


def test_inspect_lists_methods_operators_memory(compiled):
    folder, _ = compiled
    result = etc_cli("inspect", folder / "tiny.pte")
    assert result.returncode == 0, result.stderr
    assert "method 'forward'" in result.stdout
    assert "aten::addmm.out" in result.stdout
    assert "planned memory mem_id 1" in result.stdout
    assert "checksums: CRC-32 of the program data and of every segment, verified" in result.stdout


def test_profile_breaks_a_profiled_cpu_delegate_into_regions(compiled):
    """`etc compile --backend cpu --profile` then `etc profile`: the top operators are the
    delegate's regions (its Linear and ReLU by name), not one opaque delegate call."""
    folder, _ = compiled
    result = etc_cli("compile", folder / "tiny.py:Tiny", "--example-inputs", "2x6", "--backend", "cpu", "--profile",
                     "-o", folder / "tiny_cpu.pte", "--etrecord", folder / "tiny_cpu.etrecord")
    assert result.returncode == 0, result.stderr
    result = etc_cli("profile", folder / "tiny_cpu.pte", "--etrecord", folder / "tiny_cpu.etrecord", "--runs", "3")
    assert result.returncode == 0, result.stderr
    top = result.stdout.split("top operators by time:")[1]
    assert "delegate 'cpu': " in top, result.stdout


@pytest.mark.parametrize("args, message", [
    (("compile", "tiny.py:Tiny", "--example-inputs", "2x6", "--profile", "-o", "x.pte"), "use it with --backend cpu"),
    (("inspect", "missing.pte"), "No such file"),
    (("run", "missing.pte"), "cannot read program"),
    (("compile", "nofile.py:Model", "-o", "x.pte"), "no such file: nofile.py"),
    (("compile", "tiny.py:Nope", "--example-inputs", "2x6", "-o", "x.pte"), "has no attribute 'Nope'"),
    (("compile", "tiny.py:Tiny", "--example-inputs", "2xq", "-o", "x.pte"), "bad shape"),
])
def test_user_errors_are_one_line_without_traceback(compiled, args, message):
    folder, _ = compiled
    result = etc_cli(*args, cwd=folder)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("source, message", [
    ("import torch\nclass M(torch.nn.Module)\n    pass\n", "broken.py:2:25: syntax error: expected ':'"),
    ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        raise ValueError('no')\n",
     "broken.py:4: calling M() raised ValueError: no"),
    ("import not_a_module_anywhere\n", "broken.py:1: loading it raised ModuleNotFoundError"),
    # A forward that raises printed about 100 lines of torch.export's traceback (issue 24).
    ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x + undefined_name\n",
     "broken.py:4: exporting it (torch.export.export) raised NameError: name 'undefined_name' is not defined"),
])
def test_errors_in_the_model_file_name_its_line_without_traceback(tmp_path, source, message):
    """A syntax error in the model file printed our whole traceback (issue 11)."""
    (tmp_path / "broken.py").write_text(source)
    result = etc_cli("compile", "broken.py:M", "--example-inputs", "2x6", "-o", "x.pte", cwd=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the progress line, then the error


def test_corrupt_program_is_a_program_error(compiled, tmp_path):
    folder, _ = compiled
    data = (folder / "tiny.pte").read_bytes()
    (tmp_path / "bad.pte").write_bytes(data[: len(data) // 2])
    result = etc_cli("run", tmp_path / "bad.pte")
    assert result.returncode == 1 and "Traceback" not in result.stderr
