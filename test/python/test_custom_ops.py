"""Users' own operators (torch.library.custom_op) end to end: imported through their schema
(`aten.custom_op` / `edge.custom_op`), checked against their fake implementation, emitted as a
call of their out variant, run on a kernel the user registers (`etc.runtime.register_kernel`),
left by the cpu target to that kernel with a report line, listed by selective build."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import etc
from etc.errors import KernelNotFoundError, LoweringError, UnsupportedConstructError
from etc.runtime import Runtime, register_kernel


@torch.library.custom_op("etc_ext::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, bias: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    return torch.tanh(x + bias) * scale


@scaled_tanh.register_fake
def _(x, bias, scale=2.0):
    return torch.empty_like(x)


# ExecuTorch programs call out variants (ExecuTorch's kernel-library-custom-aten-kernel docs): the user
# registers `.out` with torch.library (its schema) and gives its kernel to each runtime.
torch.library.define("etc_ext::scaled_tanh.out",
                     "(Tensor x, Tensor bias, float scale=2.0, *, Tensor(a!) out) -> Tensor(a!)")


def scaled_tanh_out(x, bias, scale, out):
    np.multiply(np.tanh(x + bias), scale, out=out)
    return out


register_kernel("etc_ext::scaled_tanh.out", scaled_tanh_out)


@torch.library.custom_op("etc_ext::plus_one", mutates_args=())
def no_out(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@no_out.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("etc_ext::unkerneled", mutates_args=())
def unkerneled(x: torch.Tensor) -> torch.Tensor:
    return x - 1


@unkerneled.register_fake
def _(x):
    return torch.empty_like(x)


torch.library.define("etc_ext::unkerneled.out", "(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(8, 16)
        self.bias = torch.nn.Parameter(torch.randn(16))
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.second(scaled_tanh(self.first(x), self.bias, 0.5))


class NoOut(torch.nn.Module):
    def forward(self, x):
        return no_out(x) * 2


class Unkerneled(torch.nn.Module):
    def forward(self, x):
        return unkerneled(x) * 2


X = torch.randn(3, 8)


def _eager(model, x=X):
    with torch.no_grad():
        return model(x).numpy()


def _edge(model, x=X):
    return etc.to_edge(torch.export.export(model.eval(), (x,)))


def _run(buffer, x=X):
    return Runtime.get().load_program(buffer).load_method("forward").execute([x.numpy()])[0]


@pytest.fixture(scope="module")
def portable():
    """(model, its portable ExecutorchProgram), shared: exporting and lowering is most of a test's time."""
    model = Model()
    return model, _edge(model).to_executorch()


def test_custom_op_imports_through_its_schema():
    edge = _edge(Model())
    text = str(edge.module)
    assert '"edge.custom_op"' in text and 'op = "etc_ext::scaled_tanh"' in text
    assert "scale = 5.000000e-01 : f64" in text
    from etc.dialects import custom_ops, decode_op, op_info

    (op,) = [o for o in edge.module.body.operations[-1].regions[0].blocks[0].operations if custom_ops.is_custom(o)]
    assert op_info(op).torch_name == "etc_ext::scaled_tanh"
    assert set(decode_op(op)) == {"x", "bias", "scale"} and decode_op(op)["scale"] == 0.5
    assert custom_ops.out_variant("etc_ext::scaled_tanh") == "etc_ext::scaled_tanh.out"
    assert "scaled_tanh(h" in str(op.location) or "test_custom_ops.py" in str(op.location)


def test_portable_program_matches_eager(portable):
    model, program = portable
    operators = {f"{o.name}.{o.overload}" for o in program.pte.program.execution_plan[0].operators}
    assert "etc_ext::scaled_tanh.out" in operators
    np.testing.assert_allclose(_run(program.buffer), _eager(model), rtol=1e-5, atol=1e-6)


def test_cpu_target_leaves_the_custom_op_to_its_kernel_with_a_report_line():
    from etc.targets.cpu import CpuPartitioner

    model = Model()
    edge = _edge(model).to_backend(CpuPartitioner())
    info = edge.delegation_info()
    assert "custom operator etc_ext::scaled_tanh: the cpu target does not compile users' operators" in info
    program = edge.to_executorch()
    plan = program.pte.program.execution_plan[0]
    assert len(plan.delegates) == 2  # the linear before, the linear after
    assert "etc_ext::scaled_tanh.out" in {f"{o.name}.{o.overload}" for o in plan.operators}
    np.testing.assert_allclose(_run(program.buffer), _eager(model), rtol=1e-5, atol=1e-5)


def test_selective_build_lists_the_custom_op(portable):
    from etc.runtime.selective_build import SelectiveBuild

    selection = SelectiveBuild.from_programs(portable[1])
    assert "etc_ext::scaled_tanh.out" in selection.operators
    assert "etc_ext::scaled_tanh.out" in selection.to_selected_operators()["operators"]


def test_missing_out_variant_is_a_located_error_naming_the_schema():
    with pytest.raises(LoweringError, match=r"etc_ext::plus_one has no out variant.*etc_ext::plus_one\.out.*"
                                            r"Tensor x, \*, Tensor\(a0!\) out") as caught:
        _edge(NoOut()).to_executorch()
    file, line, _ = caught.value.location.rsplit(":", 2)
    source, first = inspect.getsourcelines(NoOut.forward)
    assert file == __file__ and int(line) == first + 1


def test_missing_runtime_kernel_names_register_kernel():
    program = _edge(Unkerneled()).to_executorch()  # compiles: the kernel may be linked where it runs
    with pytest.raises(KernelNotFoundError, match="etc_ext::unkerneled.out") as caught:
        _run(program.buffer)
    assert any("etc.runtime.register_kernel('etc_ext::unkerneled.out', fn)" in n for n in caught.value.notes)


def test_register_kernel_again_accepts_the_same_kernel_and_replace_swaps_another():
    from etc.errors import EtcError
    from etc.runtime.kernels.registry import get_kernel

    source = "def rerun_out(x, out):\n    out[...] = x + 1\n    return out\n"
    first, again = {}, {}
    exec(source, first)  # a notebook cell, run twice: two function objects of one definition
    exec(source, again)
    name = "etc_test_rereg::rerun.out"
    register_kernel(name, first["rerun_out"])
    register_kernel(name, first["rerun_out"])  # the same object
    register_kernel(name, again["rerun_out"])  # the same definition
    x = np.arange(3.0)
    np.testing.assert_array_equal(get_kernel(name)(x, np.empty(3)), x + 1)

    def other_out(x, out):
        out[...] = x * 2
        return out

    with pytest.raises(EtcError, match="already has a kernel") as caught:
        register_kernel(name, other_out)
    assert any("replace=True" in note for note in caught.value.notes)
    np.testing.assert_array_equal(get_kernel(name)(x, np.empty(3)), x + 1)  # the refused one did not land
    register_kernel(name, other_out, replace=True)
    np.testing.assert_array_equal(get_kernel(name)(x, np.empty(3)), x * 2)


def test_verifier_checks_result_types_against_the_fake_implementation():
    from torch_mlir import ir

    from etc.dialects import make_context

    context = make_context()
    text = ('func.func @f(%x: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<5xf32> {\n'
            '  %y = "edge.custom_op"(%x, %b) {op = "etc_ext::scaled_tanh", arguments = {scale = 2.0 : f64}, '
            'operandSegmentSizes = array<i32: 1, 1' + ", 0" * 62 + '>, resultSegmentSizes = array<i32: 1' +
            ", 0" * 63 + '>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>\n'
            '  return %y : tensor<5xf32>\n}')
    with pytest.raises(ir.MLIRError, match=r"result 0 is tensor<5xf32> but its fake implementation gives \[4\]"):
        ir.Module.parse(text, context)
    with pytest.raises(ir.MLIRError, match="etc_ext::nothing is not registered with torch"):
        ir.Module.parse(text.replace("etc_ext::scaled_tanh", "etc_ext::nothing"), context)
    ir.Module.parse(text.replace("5xf32", "4xf32"), context).operation.verify()


def test_mutating_custom_op_is_refused_at_the_users_line():
    @torch.library.custom_op("etc_ext::bump", mutates_args=("x",))
    def bump(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return y.clone()

    @bump.register_fake
    def _(x, y):
        return torch.empty_like(y)

    class Bumps(torch.nn.Module):
        def forward(self, x, y):
            return bump(x.clone(), y)

    ep = torch.export.export(Bumps(), (torch.randn(3), torch.randn(3)))
    with pytest.raises(UnsupportedConstructError, match=r"custom operator etc_ext::bump writes its arguments") \
            as caught:
        etc.to_edge(ep)
    assert caught.value.location and caught.value.location.startswith(__file__)


def test_program_runs_on_stock_executorch_with_the_kernel_linked(tmp_path, portable):
    """The same program on ExecuTorch's runtime, with a C++ kernel library built here against the
    executorch wheel's headers (custom_kernel/) and loaded into executorch.runtime's registry."""
    import ctypes
    import os
    import shutil
    import subprocess

    executorch_runtime = pytest.importorskip("executorch.runtime")
    from etc.runtime.executorch_backend import executorch_root

    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    source = os.path.join(os.path.dirname(__file__), "custom_kernel")
    build = tmp_path / "build"
    for command in (["cmake", "-S", source, "-B", str(build), f"-DEXECUTORCH_ROOT={executorch_root()}"],
                    ["cmake", "--build", str(build)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    runtime = executorch_runtime.Runtime.get()  # loads libexecutorch.so first: the kernel registers there
    ctypes.CDLL(str(build / "libetc_ext_kernels.so"), mode=ctypes.RTLD_GLOBAL)
    model, program = portable
    (out,) = runtime.load_program(program.buffer).load_method("forward").execute([X])
    np.testing.assert_allclose(out.numpy(), _eager(model), rtol=1e-5, atol=1e-5)
