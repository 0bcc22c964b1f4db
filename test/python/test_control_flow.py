"""torch.cond, torch.while_loop, map and scan end to end: imported as scf.if / scf.while, planned,
emitted as JumpFalseCall/MoveCall/copy chains, run on etc's runtime and on the stock
ExecuTorch runtime against eager; next to the cpu delegate they stay portable.
"""

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime


class Cond(torch.nn.Module):
    """Both branches read a parameter and an outer value; the predicate is data-dependent."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        a = self.lin(x)
        y = torch.cond(x.sum() > 0, lambda v, a: (v @ self.weight).relu() + a, lambda v, a: v - a.tanh(), (x, a))
        return (y * 2 + a).sigmoid()


class FlagCond(torch.nn.Module):
    """The predicate is an input, so nothing computed before the cond feeds its operand list."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, flag):
        a = self.lin(x)
        y = torch.cond(flag, lambda a: a.relu() * 3, lambda a: a - 1, (a,))
        return (y * 2 + a).tanh()


class DoublingLoop(torch.nn.Module):
    """while_loop whose trip count depends on the input: double y until its sum reaches the limit."""

    def forward(self, x, limit):
        def cond_fn(i, y):
            return y.abs().sum() < limit

        def body_fn(i, y):
            return i + 1, y * 2 + 0.5

        return torch.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class LoopWithCond(torch.nn.Module):
    """A cond nested in a loop body, a weight read every iteration, the loop counter in a tensor."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x, steps):
        def cond_fn(i, y):
            return i < steps

        def body_fn(i, y):
            z = self.lin(y)
            z = torch.cond(z.mean() > 0, lambda z: z.tanh(), lambda z: z * 0.5, (z,))
            return i + 1, z

        return torch.while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class Map(torch.nn.Module):
    """map over rows, with an extra argument every row reads."""

    def forward(self, xs, y):
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x, y: (x * 3 + y).tanh(), xs, y)


class Scan(torch.nn.Module):
    """scan with a carry and a stacked output, reversed: the flip is in the exported graph."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(2, 3))

    def forward(self, xs):
        from torch._higher_order_ops.scan import scan

        def combine(carry, x):
            new = carry * 0.5 + x @ self.weight
            return new, new.sum(-1, keepdim=True)

        return scan(combine, torch.zeros(3), xs, reverse=True)


class DynamicCond(torch.nn.Module):
    """A cond over a dynamic batch: the branches' values are planned at the Dim's bound."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: (v * 2).cumsum(0), lambda v: v.flip(0) - 1, (x,))


class SizeCond(torch.nn.Module):
    """A cond on a size: the predicate is executorch_prim::gt.Scalar's Bool, not a tensor."""

    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda v: v * 2, lambda v: v.cumsum(0) - 1, (x,))


class NestedCond(torch.nn.Module):
    """A cond in each branch of a cond: inner results are yielded by the outer branches."""

    def forward(self, x, y):
        def outer_true(x, y):
            return torch.cond(y.sum() > 0, lambda a, b: (a * b).sin(), lambda a, b: a.cos() + b, (x, y))

        def outer_false(x, y):
            return torch.cond(y.mean() < -0.5, lambda a, b: a - b, lambda a, b: (a + 1) * 3, (x, y))

        return torch.cond(x.sum() > 0, outer_true, outer_false, (x, y)) * x + y


CASES = {
    "cond": (Cond, (torch.randn(3, 4),), [(torch.randn(3, 4),), (-torch.ones(3, 4),), (torch.ones(3, 4),)]),
    "flag_cond": (FlagCond, (torch.randn(3, 4), torch.tensor(True)),
                  [(torch.randn(3, 4), torch.tensor(True)), (torch.randn(3, 4), torch.tensor(False))]),
    "doubling_loop": (DoublingLoop, (torch.ones(3), torch.tensor(20.0)),
                      [(torch.ones(3), torch.tensor(20.0)), (torch.ones(3) * 5, torch.tensor(1.0)),
                       (torch.full((3,), 0.01), torch.tensor(1000.0))]),
    "loop_with_cond": (LoopWithCond, (torch.randn(2, 3), torch.tensor(3)),
                       [(torch.randn(2, 3), torch.tensor(0)), (torch.randn(2, 3), torch.tensor(4)),
                        (torch.randn(2, 3), torch.tensor(7))]),
    "map": (Map, (torch.randn(4, 3), torch.randn(3)), [(torch.randn(4, 3), torch.randn(3))]),
    "scan": (Scan, (torch.randn(5, 2),), [(torch.randn(5, 2),), (torch.randn(5, 2),)]),
    "dynamic_cond": (DynamicCond, (torch.randn(3, 4),),
                     [(sign * torch.randn(n, 4).abs(),) for n in (1, 3, 8) for sign in (1, -1)],
                     ({0: torch.export.Dim("batch", min=1, max=8)},)),
    "size_cond": (SizeCond, (torch.randn(3, 4),), [(torch.randn(n, 4),) for n in (1, 4, 5, 8)],
                  ({0: torch.export.Dim("batch", min=1, max=8)},)),
    "nested_cond": (NestedCond, (torch.randn(4), torch.randn(4)),
                    [(sx * torch.rand(4), sy * torch.rand(4) + shift) for sx in (1, -1) for sy in (1, -1)
                     for shift in (0.0, -1.0)]),
    "dynamic_loop": (DoublingLoop, (torch.ones(3), torch.tensor(20.0)),
                     [(torch.ones(n), torch.tensor(50.0)) for n in (1, 3, 8)],
                     ({0: torch.export.Dim("batch", min=1, max=8)}, None)),
}
_PROGRAMS = {}


def _program(name, partitioner=None):
    """(eager model, EdgeProgram, ExecutorchProgram, calls); portable programs are built once per module."""
    if partitioner is None and name in _PROGRAMS:
        return _PROGRAMS[name]
    torch.manual_seed(0)
    cls, example, calls, *dynamic_shapes = CASES[name]
    model = cls().eval()
    edge = etc.to_edge(torch.export.export(model, example, dynamic_shapes=dynamic_shapes[0] if dynamic_shapes else None))
    if partitioner is not None:
        edge = edge.to_backend(partitioner)
    built = model, edge, edge.to_executorch(), calls
    if partitioner is None:
        _PROGRAMS[name] = built
    return built


def _check(model, method, calls):
    for inputs in calls:
        with torch.no_grad():
            want = model(*inputs)
        want = list(want) if isinstance(want, tuple) else [want]
        got = method.execute(list(inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_control_flow_matches_eager_on_etc_runtime(name):
    model, _, program, calls = _program(name)
    _check(model, Runtime.get().load_program(program.buffer).load_method("forward"), calls)


def test_emitted_as_jumps_and_moves():
    """cond: JumpFalseCall on the predicate, MoveCall of each branch's value, an unconditional jump
    over the else branch; while: a backward jump; no delegate, no extra chain."""
    from etc.schema import program as S

    for name, moves, backward in (("cond", 2, False), ("doubling_loop", 0, True)):
        plan = _program(name)[2].pte.program.execution_plan[0]
        assert len(plan.chains) == 1 and not plan.delegates
        kinds = [type(i.instr_args) for i in plan.chains[0].instructions]
        jumps = [(n, i.instr_args) for n, i in enumerate(plan.chains[0].instructions)
                 if isinstance(i.instr_args, S.JumpFalseCall)]
        assert kinds.count(S.MoveCall) == moves
        assert len(jumps) == 2
        assert any(j.destination_instruction <= n for n, j in jumps) == backward


def test_trip_count_depends_on_the_input():
    model, _, program, _ = _program("doubling_loop")
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    counts = [int(method.execute([torch.ones(3), torch.tensor(limit)])[0]) for limit in (1.0, 10.0, 100.0, 1e4)]
    assert counts == [int(model(torch.ones(3), torch.tensor(limit))[0]) for limit in (1.0, 10.0, 100.0, 1e4)]
    assert len(set(counts)) == 4


@pytest.mark.parametrize("name", ["cond", "flag_cond"])
def test_cond_with_supported_branches_is_one_cpu_delegate(name):
    """Ops before and after a cond and the cond itself (its branches native code) are one cpu
    delegate, even when the partitioner sees no operand edge between the ops the branches read
    and the ops after the cond (flag_cond)."""
    from etc.targets.cpu import CpuPartitioner

    model, edge, program, calls = _program(name, CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and report.delegated.get("scf.if") == 1 and not report.portable, str(report)
    _check(model, Runtime.get().load_program(program.buffer).load_method("forward"), calls)


def test_loops_stay_outside_cpu_delegates():
    """scf.while (torch.while_loop) runs on the portable runtime as jumps, with a report line."""
    from etc.targets.cpu import CpuPartitioner

    name = "doubling_loop"
    model, edge, program, calls = _program(name, CpuPartitioner())
    report = edge.delegation_info()
    assert "portable   scf.while x1: control flow runs on the portable runtime" in report, report
    _check(model, Runtime.get().load_program(program.buffer).load_method("forward"), calls)


@pytest.mark.parametrize("name", list(CASES))
def test_control_flow_program_runs_on_executorch(name):
    executorch_runtime = pytest.importorskip("executorch.runtime")
    model, _, program, calls = _program(name)
    _check(model, executorch_runtime.Runtime.get().load_program(program.buffer).load_method("forward"), calls)


def test_carried_python_int_is_a_located_error():
    class IntCounter(torch.nn.Module):
        def forward(self, x):
            return torch.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), (0, x))

    from etc.errors import UnsupportedConstructError

    try:
        ep = torch.export.export(IntCounter(), (torch.ones(2),))
    except Exception:  # noqa: BLE001 - this torch cannot export an int carry at all
        pytest.skip("torch.export refuses Python int carries")
    with pytest.raises(UnsupportedConstructError, match="carried value must be a tensor") as caught:
        etc.to_edge(ep)
    assert caught.value.location is not None and "test_control_flow.py" in caught.value.location


class BranchyLinear(torch.nn.Module):
    """torch.cond whose branches each hold a Linear (a GEMM kernel inside a branch) and activations."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 48), torch.nn.Linear(32, 48)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: (torch.relu(self.up(x)) * 2,),
                          lambda x: (torch.tanh(self.down(x)) - 1,), (x,))[0]


def test_cond_is_native_code_in_the_cpu_target():
    """Both branches supported: the branch is compiled into the delegate (scf.if in native
    code), the method is one delegate, and each branch runs when its condition holds."""
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    module = BranchyLinear().eval()
    edge = etc.to_edge(torch.export.export(module, (torch.randn(64, 32),))).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert report.partitions == 1 and not report.portable and report.delegated.get("scf.if") == 1, str(report)
    lines = [line for lines in report.backend_lines.values() for line in lines]
    assert any("contraction -> gemm x2" in line for line in lines), "\n".join(lines)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    x = torch.rand(64, 32)
    for sample in (x, -x):  # the true branch, then the false one
        with torch.no_grad():
            want = module(sample)
        np.testing.assert_allclose(method.execute([sample.numpy()])[0], want.numpy(), rtol=1e-5, atol=1e-5)


class CondThenFlip(torch.nn.Module):
    """A cond whose result the delegate reads after it (a flip): each branch writes its own buffer."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        y = torch.cond(x.amax() > 0.5, lambda a: self.norm(a + 2.0), lambda a: a * 3, (x + 1,))
        return y.flip(-2)


def test_cond_result_read_by_a_two_thread_delegate():
    """Found by the compiler fuzzer: with num_threads=2 the branches run on thread 0, and the
    buffer the cond yields was used by every thread after it: the compile failed ("'scf.if' runs
    on one thread but its result is used after it"). Every thread now selects the buffer again
    after the barrier."""
    from etc.compiler.delegation import CompileSpec
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    module = CondThenFlip().eval()
    partitioner = CpuPartitioner(num_threads=2, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    edge = etc.to_edge(torch.export.export(module, (torch.randn(3, 5, 8),))).to_backend(partitioner)
    assert edge.delegation_reports[-1].delegated.get("scf.if") == 1, edge.delegation_info()
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for sign in (1, -1):  # the true branch, then the false one
        x = sign * torch.rand(3, 5, 8)
        with torch.no_grad():
            torch.testing.assert_close(method.execute([x])[0], module(x), rtol=1e-5, atol=1e-5)


class CondThenIndexPut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        h = torch.cond(x.amax() > 0.5, lambda a: a.abs(), lambda a: (a * 2).abs(), (x,))
        y = h.clone()
        y[torch.tensor([4, 5, 6])] = self.p
        return y


@pytest.mark.parametrize("threads", [1, 2])
def test_a_branch_result_keeps_its_scratch_bytes_until_its_last_use(threads):
    """Found by the compiler fuzzer: the buffer a branch fills and yields was planned as dead after
    the scf.if (etc-cpu-plan-scratch followed views and region arguments, not scf.yield), so the
    index_put's index buffer shared its bytes: y came back with indices for values and p[2] at 0.
    With num_threads=2 the false branch (a*2 then abs, through an intermediate buffer) still
    computed wrong in the threaded entry: a delegate with a cond is compiled for one thread, and
    the report says so at the cond's line."""
    from etc.compiler.delegation import CompileSpec
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    module = CondThenIndexPut().eval()
    partitioner = CpuPartitioner(num_threads=threads, compile_specs=[CompileSpec("calibrate_threads", b"0")])
    edge = etc.to_edge(torch.export.export(module, (torch.randn(8),))).to_backend(partitioner)
    assert edge.delegation_reports[-1].delegated.get("scf.if") == 1, edge.delegation_info()
    one_thread = "NOT TUNED  threads -> one-thread: a cond in the delegate runs on one thread, not 2"
    assert (one_thread in edge.delegation_info()) == (threads == 2), edge.delegation_info()
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for x in (torch.randn(8) + 1, torch.randn(8) * 0.01, torch.randn(8) + 1):  # true, false, true
        with torch.no_grad():
            torch.testing.assert_close(method.execute([x])[0], module(x), rtol=1e-6, atol=1e-6)


def test_a_branch_with_an_unsupported_op_keeps_the_cond_on_portable():
    from etc.targets.cpu import CpuPartitioner

    class Sorted(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: (torch.sort(x, dim=-1)[0],), lambda x: (x * 2,), (x,))[0]

    module = Sorted()
    edge = etc.to_edge(torch.export.export(module, (torch.randn(3, 5),))).to_backend(CpuPartitioner())
    report = edge.delegation_reports[-1]
    assert "scf.if" in report.portable, str(report)
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    x = torch.randn(3, 5).abs()
    for sample in (x, -x):
        np.testing.assert_allclose(method.execute([sample.numpy()])[0], module(sample).numpy(), rtol=1e-6)


class NormInBranchThenRowMax(torch.nn.Module):
    """h feeds a LayerNorm inside the cond's branches and, after the cond, h + the cond's result
    reduced by a row max: the row-kernel pass grouped h's elementwise op with that max."""

    def __init__(self):
        super().__init__()
        self.norm, self.other = torch.nn.LayerNorm(12), torch.nn.LayerNorm(12)

    def forward(self, x):
        h = x * 2.0 + 1.0
        y = torch.cond(x.amax() > 0.5, lambda a: self.norm(a).clone(), lambda a: self.other(a).clone(), (h,))
        return (y + h).amax(-1, keepdim=True)


def test_a_row_group_is_cut_before_a_branch_that_reads_one_of_its_values():
    """Found by the model fuzzer (seed 1701): etc-cpu-row-kernels placed a row kernel (h's
    elementwise op fused with the row max after the cond) at its last op, after the scf.if whose
    branch reads h: the cond's LayerNorm used a value not yet computed ('operand does not
    dominate this use'). A use inside a region now counts where its scf.if stands, and the group
    is cut there, as for a use in the same block."""
    from etc.targets.cpu import CpuPartitioner

    torch.manual_seed(0)
    module = NormInBranchThenRowMax().eval()
    edge = etc.to_edge(torch.export.export(module, (torch.randn(3, 8, 12),))).to_backend(CpuPartitioner())
    assert edge.delegation_reports[-1].delegated.get("scf.if") == 1, edge.delegation_info()
    method = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")
    for x in (torch.randn(3, 8, 12) + 1, torch.randn(3, 8, 12) * 0.01):  # the true branch, then the false
        with torch.no_grad():
            torch.testing.assert_close(method.execute([x.numpy()])[0], module(x).numpy(), rtol=1e-5, atol=1e-5)
