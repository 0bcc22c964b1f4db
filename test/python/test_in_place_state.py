"""etc-in-place-state end to end: a buffer updated with index_copy_ (a KV cache) is written in its
own storage (no whole-buffer copy back, no planned copy of it), and every call still computes what
eager does, on etc's runtime and on stock ExecuTorch; where the old value is still needed, the
update keeps its copy."""

import numpy as np
import pytest
import torch

import etc
from etc.runtime import Runtime
from etc.runtime.kernels.indexing import index_put_out
from etc.schema import program as S


class Cache(torch.nn.Module):
    """A tiny decoder-like state: rows written at `pos`, then the whole cache read."""

    def __init__(self, keep_old: bool = False):
        super().__init__()
        self.keep_old = keep_old
        self.register_buffer("cache", torch.zeros(16, 4))

    def forward(self, x, pos):
        old = self.cache.clone() if self.keep_old else None
        self.cache.index_copy_(0, pos, x * 2.0)
        out = self.cache.sum(0, keepdim=True) + x.sum(0, keepdim=True)
        return out - old.sum(0, keepdim=True) if self.keep_old else out


def _program(module):
    length = torch.export.Dim("length", min=1, max=8)
    ep = torch.export.export(module, (torch.randn(2, 4), torch.arange(2)),
                             dynamic_shapes=({0: length}, {0: length}))
    return etc.to_edge(ep).to_executorch()


def _calls():
    torch.manual_seed(0)
    steps, position = [], 0
    for length in (5, 1, 1, 3, 1):
        steps.append((torch.randn(length, 4), torch.arange(position, position + length)))
        position += length
    return steps


def _kernel_calls(program):
    plan = program.pte.program.execution_plan[0]
    names = [f"{op.name}.{op.overload}" for op in plan.operators]
    return plan, [(names[i.instr_args.op_index], i.instr_args.args) for i in plan.chains[0].instructions
                  if isinstance(i.instr_args, S.KernelCall)]


@pytest.mark.parametrize("keep_old", [False, True])
def test_buffer_update_matches_eager_call_after_call(keep_old):
    module = Cache(keep_old)
    program = _program(Cache(keep_old))
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for x, pos in _calls():
        with torch.no_grad():
            want = module(x, pos)
        np.testing.assert_allclose(method.execute([x.numpy(), pos.numpy()])[0], want.numpy(), rtol=1e-6)


def test_update_writes_the_buffer_itself():
    program = _program(Cache())
    plan, calls = _kernel_calls(program)
    assert [name for name, _ in calls if name == "aten::copy.out"] == []  # no copy back into the buffer
    (args,) = [args for name, args in calls if name == "aten::index_put.out"]
    self_index, out_index = args[0], args[-2]
    assert self_index == out_index
    state = plan.values[self_index].val
    assert state.is_state  # the mutable buffer itself (its zero initial state is not stored)
    assert state.data_buffer_idx == 0 and state.extra_tensor_info.fully_qualified_name == "cache"
    # ... and no planned tensor of the buffer's size is left for a copy of it.
    planned = [v.val for v in plan.values if isinstance(v.val, S.Tensor) and v.val.allocation_info is not None
               and not v.val.is_state and list(v.val.sizes) == [16, 4]]
    assert planned == []


class _Warm(Cache):
    """Cache with a non-zero initial state (a model exported after it ran once)."""

    def __init__(self):
        super().__init__()
        self.cache.copy_(torch.arange(64, dtype=torch.float32).reshape(16, 4) / 7)


@pytest.mark.parametrize("make", [Cache, _Warm], ids=["zeros", "warm"])
def test_initial_state_is_stored_unless_it_is_zeros(make):
    """A zero initial state costs the program nothing (planned memory starts zeroed); any other is
    stored in the mutable data segment, byte for byte. Both compute what eager does on a freshly
    loaded method, call after call, and a second load starts from the initial state again."""
    program = _program(make())
    plan, _ = _kernel_calls(program)
    (state,) = [v.val for v in plan.values if isinstance(v.val, S.Tensor) and v.val.is_state]
    initial = make().cache.numpy().tobytes()
    if make is Cache:
        assert state.data_buffer_idx == 0 and program.pte.mutable_data == []
    else:
        assert program.pte.mutable_initial_state(state) == initial
    for _ in range(2):
        method, module = Runtime.get().load_program(program.buffer).load_method("forward"), make()
        for x, pos in _calls():
            with torch.no_grad():
                want = module(x, pos)
            np.testing.assert_allclose(method.execute([x.numpy(), pos.numpy()])[0], want.numpy(), rtol=1e-6)


def test_old_value_still_read_keeps_the_copy():
    _, calls = _kernel_calls(_program(Cache(keep_old=True)))
    (args,) = [args for name, args in calls if name == "aten::index_put.out"]
    assert args[0] != args[-2]
    assert any(name == "aten::copy.out" for name, _ in calls)


def test_index_put_kernel_with_out_as_self():
    cache = np.arange(12, dtype=np.float32).reshape(4, 3)
    expected = cache.copy()
    expected[[1, 3]] = [[-1, -2, -3], [-4, -5, -6]]
    values = np.array([[-1, -2, -3], [-4, -5, -6]], dtype=np.float32)
    result = index_put_out(cache, [np.array([1, 3])], values, False, out=cache)
    np.testing.assert_array_equal(cache, expected)
    assert np.shares_memory(result, cache)
    accumulated = index_put_out(cache, [np.array([0, 0])], np.ones((2, 3), np.float32), True, out=cache)
    np.testing.assert_array_equal(accumulated[0], expected[0] + 2)


def test_in_place_program_runs_on_executorch(tmp_path):
    executorch_runtime = pytest.importorskip("executorch.runtime")
    module = Cache()
    path = tmp_path / "cache.pte"
    _program(Cache()).save(path)
    method = executorch_runtime.Runtime.get().load_program(path).load_method("forward")
    for x, pos in _calls():
        with torch.no_grad():
            want = module(x, pos)
        torch.testing.assert_close(method.execute([x, pos])[0], want)


class _IndexPutDetails:
    """A test-only backend taking each index_put (along dim 0) as one delegate call."""

    @staticmethod
    def make(backend_id: str, in_place: bool):
        from etc.compiler.delegation import BackendDetails, PreprocessResult

        class Details(BackendDetails):
            in_place_state = in_place
            seen_pairs: list = []

            def preprocess(self, func_op, compile_specs, constants):
                from torch_mlir import ir

                pairs = ([int(x) for x in ir.DenseI64ArrayAttr(func_op.attributes["etc.in_place_outputs"])]
                         if "etc.in_place_outputs" in func_op.attributes else [])
                Details.seen_pairs.append(pairs)
                return PreprocessResult(b"index_put")

        Details.backend_id = backend_id
        return Details()


def _index_put_runtime(backend_id: str):
    from etc.runtime import Backend

    class IndexPut(Backend):
        aliased: list = []

        def init(self, blob, compile_specs):
            return blob

        def execute(self, handle, args):
            self_, index, values, out = args  # inputs in first-use order, then the output
            IndexPut.aliased.append(np.shares_memory(self_, out))
            if not np.shares_memory(self_, out):
                np.copyto(out, self_)
            out[index] = values

    IndexPut.backend_id = backend_id
    return IndexPut()


@pytest.mark.parametrize("in_place", [True, False])
def test_a_delegate_that_takes_the_update_gets_the_buffer_when_its_backend_says_it_can(in_place):
    """With `BackendDetails.in_place_state` the delegate's output is the buffer (the same memory as its
    input, no copy back); without it, the output is planned and the store copies it back. Both
    compute what eager does, call after call."""
    from etc.compiler.delegation import CapabilityPartitioner, DelegationSpec, register_backend_details
    from etc.runtime import register_backend, unregister_backend

    backend_id = f"etc_test_index_put_{int(in_place)}"
    details = register_backend_details(_IndexPutDetails.make(backend_id, in_place))
    runtime = _index_put_runtime(backend_id)
    register_backend(runtime)
    try:
        length = torch.export.Dim("length", min=1, max=8)
        ep = torch.export.export(Cache(), (torch.randn(2, 4), torch.arange(2)),
                                 dynamic_shapes=({0: length}, {0: length}))
        partitioner = CapabilityPartitioner(DelegationSpec(backend_id), lambda op: op.name == "edge.index_put")
        program = etc.to_edge(ep).to_backend(partitioner).to_executorch()
        assert details.seen_pairs == ([[0, 0]] if in_place else [[]])  # result 0 over argument 0 (the cache)
        plan, calls = _kernel_calls(program)
        assert any(name == "aten::copy.out" for name, _ in calls) != in_place
        (call,) = [i.instr_args for i in plan.chains[0].instructions if isinstance(i.instr_args, S.DelegateCall)]
        assert (call.args[0] == call.args[-1]) == in_place
        method = Runtime.get().load_program(program.buffer).load_method("forward")
        module = Cache()
        for x, pos in _calls():
            with torch.no_grad():
                want = module(x, pos)
            np.testing.assert_allclose(method.execute([x.numpy(), pos.numpy()])[0], want.numpy(), rtol=1e-6)
        assert runtime.aliased and set(runtime.aliased) == {in_place}
    finally:
        unregister_backend(backend_id)


def test_debug_buffer_keeps_a_buffer_a_delegate_updated_in_place():
    """A recorded run's debug buffer holds what each instruction wrote: for a delegate updating the
    cache in place, the cache (passed as its input and its output), as for any other output."""
    from etc.compiler.delegation import CapabilityPartitioner, DelegationSpec, register_backend_details
    from etc.runtime import register_backend, unregister_backend

    backend_id = "etc_test_index_put_debug"
    register_backend_details(_IndexPutDetails.make(backend_id, True))
    register_backend(_index_put_runtime(backend_id))
    try:
        ep = torch.export.export(Cache(), (torch.randn(2, 4), torch.arange(2)))
        partitioner = CapabilityPartitioner(DelegationSpec(backend_id), lambda op: op.name == "edge.index_put")
        program = etc.to_edge(ep).to_backend(partitioner).to_executorch()
        plan = program.pte.program.execution_plan[0]
        (position, call), = [(n, i.instr_args) for n, i in enumerate(plan.chains[0].instructions)
                             if isinstance(i.instr_args, S.DelegateCall)]
        loaded = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=1 << 20)
        x, pos = torch.randn(2, 4), torch.tensor([3, 5])
        loaded.load_method("forward").execute([x.numpy(), pos.numpy()])
        written = dict(loaded.run_record.intermediates[("forward", 0, 0, position)])
        expected = torch.zeros(16, 4).index_copy_(0, pos, x * 2.0)
        np.testing.assert_allclose(written[call.args[0]], expected.numpy(), rtol=1e-6)
    finally:
        unregister_backend(backend_id)


class _HeadCache(torch.nn.Module):
    """A KV-cache-like update along a middle dim (cache[:, :, pos] = k), the layout etc.llm uses."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 16, 4))

    def forward(self, x, pos):
        self.cache[:, :, pos] = x.unsqueeze(0) * 2.0
        return torch.relu(self.cache).sum(2) + x.sum()


@pytest.mark.parametrize("make,dim", [(Cache, 0), (_HeadCache, 1)], ids=["rows", "middle"])
def test_cpu_delegate_updates_the_buffer_in_place(make, dim):
    """The cpu target takes a KV cache's update in the cache's own memory: the program passes the
    buffer as the delegate's input and output and copies nothing back; the blob records the pair,
    and every call computes what eager does."""
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.blob import deserialize

    def shaped(x):  # [length, 4] -> the module's input
        return x if make is Cache else torch.stack([x, -x])

    length = torch.export.Dim("length", min=1, max=8)
    ep = torch.export.export(make(), (shaped(torch.randn(2, 4)), torch.arange(2)),
                             dynamic_shapes=({dim: length}, {0: length}))
    program = etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch()
    plan, calls = _kernel_calls(program)
    assert [name for name, _ in calls if name.startswith("aten::copy")] == []
    (call,) = [i.instr_args for i in plan.chains[0].instructions if isinstance(i.instr_args, S.DelegateCall)]
    args = list(call.args)
    (state,) = [i for i in set(args) if args.count(i) > 1]
    assert plan.values[state].val.is_state
    assert len(deserialize(program.pte.delegate_segments[0]).metadata["in_place"]) == 1
    method, module = Runtime.get().load_program(program.buffer).load_method("forward"), make()
    for x, pos in _calls():
        with torch.no_grad():
            want = module(shaped(x), pos)
        np.testing.assert_allclose(method.execute([shaped(x).numpy(), pos.numpy()])[0], want.numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_cpu_delegate_given_two_buffers_for_its_in_place_pair_copies_the_state(monkeypatch):
    """The program passes the cache as the delegate's input and output, and the code then skips
    the copy of the cache into its updated self (etc-cpu-copies-to-linalg). A caller of the blob
    may pass two buffers instead: the copy runs, the output is what the in-place call computed
    and the input is left as it was. Every call of the program is replayed so (a non-zero cache)."""
    from etc.targets.cpu import CpuPartitioner
    from etc.targets.cpu.runtime import CompiledFunction

    length = torch.export.Dim("length", min=1, max=8)
    ep = torch.export.export(_HeadCache(), (torch.randn(2, 2, 4), torch.arange(2)),
                             dynamic_shapes=({1: length}, {0: length}))
    program = etc.to_edge(ep).to_backend(CpuPartitioner()).to_executorch()
    recorded, run = [], CompiledFunction.run

    def recording_run(self, inputs, outputs):
        before = [np.array(a, copy=True) for a in inputs]
        same = [any(o is i for i in inputs) for o in outputs]
        results = run(self, inputs, outputs)
        recorded.append((before, [np.array(r, copy=True) for r in results], same))
        return results

    monkeypatch.setattr(CompiledFunction, "run", recording_run)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for x, pos in _calls():
        method.execute([torch.stack([x, -x]).numpy(), pos.numpy()])
    monkeypatch.setattr(CompiledFunction, "run", run)
    assert recorded and all(any(same) for _, _, same in recorded)  # the program passed one buffer
    fresh = CompiledFunction(program.pte.delegate_segments[0])
    for inputs, outputs, _ in recorded[1:]:  # from the second call on the cache holds rows
        assert np.any(inputs[[i for i, a in enumerate(inputs) if a.ndim == 4][0]] != 0)
        given = [a.copy() for a in inputs]
        got = fresh(*given)
        got = got if isinstance(got, tuple) else (got,)
        for g, want in zip(got, outputs):
            np.testing.assert_array_equal(g, want)
        for g, a in zip(given, inputs):
            np.testing.assert_array_equal(g, a)
