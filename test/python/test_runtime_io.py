"""How `Method.execute` passes inputs and outputs (issue 9): without copies where that is safe.

Inputs the program only reads are bound in place (a delegate reads the caller's array); outputs a
delegate writes go into a new array each call, returned as they are. Every case where that would be
wrong keeps the copy: a non-contiguous input, an input the program writes, an input whose planned
bytes another value reads, an output written by a kernel, twice, under control flow, or whose bytes
another value uses later. And no output of one call changes when the next call runs."""

import numpy as np
import pytest
import torch

import etc
from etc.errors import InputError
from etc.runtime import Runtime, register_backend
from etc.schema import program as S
from etc.targets.cpu import CpuPartitioner
from test_runtime import kernel_call, plan, program, tensor


# ----------------------------------------------------------------- hand-built programs, a recording backend

class _Recorder:
    """y = x * 2 + 1, written into the out array given; records what it was given."""

    backend_id = "etc_test_io_recorder"

    def __init__(self, own_buffer=False):
        self.calls = []
        self.own = np.zeros(3, dtype=np.float32) if own_buffer else None

    def is_available(self):
        return True

    def init(self, blob, compile_specs):
        return None

    def execute(self, handle, args):
        x, out = args
        self.calls.append((x, out))
        if self.own is not None:  # a backend returning an array it reuses for every call
            self.own[...] = x * 2 + 1
            return [self.own]
        out[...] = x * 2 + 1
        return [out]


class _OwnBuffer(_Recorder):
    backend_id = "etc_test_io_own_buffer"

    def __init__(self):
        super().__init__(own_buffer=True)


def _delegate(backend_id):
    return S.BackendDelegate(id=backend_id, processed=S.BackendDelegateDataReference(
        location=S.DataLocation.SEGMENT, index=0), compile_specs=[])


def _recorded(backend):
    register_backend(backend)
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16))]
    instructions = [S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[0, 1]))]
    return program(plan("forward", values, [0], [1], instructions, [], [0, 32],
                        delegates=[_delegate(backend.backend_id)]), delegate_blobs=[b""]).load_method("forward")


def test_a_delegate_reads_the_callers_input_and_writes_a_new_output_each_call():
    backend = _Recorder()
    method = _recorded(backend)
    assert method.io_decisions == {"input 0": "bound in place",
                                   "output 0": "written by its delegate into a new array"}
    x1 = np.array([1, 2, 3], dtype=np.float32)
    (y1,) = method.execute([x1])
    given_x, given_out = backend.calls[-1]
    assert np.shares_memory(given_x, x1)  # read in place: no copy into the arena
    assert np.shares_memory(given_out, y1)  # the array the delegate wrote is the one returned
    x2 = np.array([10, 20, 30], dtype=np.float32)
    (y2,) = method.execute([x2])
    np.testing.assert_array_equal(y1, [3, 5, 7])  # call 1's output survives call 2
    np.testing.assert_array_equal(y2, [21, 41, 61])
    assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(x1, [1, 2, 3])  # and nothing wrote the caller's inputs


def test_non_contiguous_input_is_copied_into_the_arena():
    backend = _Recorder()
    method = _recorded(backend)
    base = np.arange(6, dtype=np.float32)
    (y,) = method.execute([base[::2]])
    np.testing.assert_array_equal(y, [1, 5, 9])
    given_x, _ = backend.calls[-1]
    assert given_x.flags.c_contiguous and not np.shares_memory(given_x, base)
    (y,) = method.execute([base[:3]])  # and the next contiguous one is bound again
    np.testing.assert_array_equal(y, [1, 3, 5])
    assert np.shares_memory(backend.calls[-1][0], base)


def test_wrong_dtype_or_shape_is_an_input_error_not_a_bind():
    method = _recorded(_Recorder())
    with pytest.raises(InputError, match="expected dtype float32, got float64"):
        method.execute([np.zeros(3)])
    with pytest.raises(InputError, match=r"expected shape \[3\], got \[4\]"):
        method.execute([np.zeros(4, dtype=np.float32)])


def test_a_backend_returning_its_own_buffer_still_gives_each_call_its_own_output():
    backend = _OwnBuffer()
    method = _recorded(backend)
    (y1,) = method.execute([np.array([1, 2, 3], dtype=np.float32)])
    (y2,) = method.execute([np.array([0, 0, 0], dtype=np.float32)])
    np.testing.assert_array_equal(y1, [3, 5, 7])
    np.testing.assert_array_equal(y2, [1, 1, 1])
    assert not np.shares_memory(y1, backend.own)


def test_an_input_the_program_writes_is_copied_and_the_callers_array_is_untouched():
    # x += w in place (out = x), then y = x + w: reading the caller's array would change it.
    values = [tensor([4], mem=(1, 0)), tensor([4], constant=1), tensor([4], mem=(1, 16))]
    instructions = [kernel_call(0, 0, 1, 0, 0), kernel_call(0, 0, 1, 2, 2)]
    method = program(plan("forward", values, [0], [2], instructions, [("etc_test::add", "out")], [0, 32]),
                     constants=[[1, 1, 1, 1]]).load_method("forward")
    assert method.io_decisions["input 0"] == "copied: the program writes it"
    assert method.io_decisions["output 0"] == "copied: it is written by a kernel"
    x = np.zeros(4, dtype=np.float32)
    (y1,) = method.execute([x])
    (y2,) = method.execute([x])
    np.testing.assert_array_equal(x, 0)
    np.testing.assert_array_equal(y1, 2)
    np.testing.assert_array_equal(y2, 2)


def test_an_input_whose_planned_bytes_another_value_reads_is_copied():
    # Value 1 is planned on x's bytes and read without being written: it sees the input there.
    values = [tensor([4], mem=(1, 0)), tensor([4], mem=(1, 0)), tensor([4], mem=(1, 16))]
    instructions = [kernel_call(0, 1, 1, 2, 2)]
    method = program(plan("forward", values, [0], [2], instructions, [("etc_test::add", "out")],
                          [0, 32])).load_method("forward")
    assert method.io_decisions["input 0"] == "copied: value 1 reads its planned bytes"
    (y,) = method.execute([np.array([1, 2, 3, 4], dtype=np.float32)])
    np.testing.assert_array_equal(y, [2, 4, 6, 8])


def test_outputs_that_need_the_arena_are_copied_out():
    register_backend(_Recorder())
    call = S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[0, 1]))
    delegates = [_delegate(_Recorder.backend_id)]
    # Returned twice.
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16))]
    twice = program(plan("forward", values, [0], [1, 1], [call], [], [0, 32], delegates=delegates),
                    delegate_blobs=[b""]).load_method("forward")
    assert twice.io_decisions["output 0"] == "copied: it is returned more than once"
    a, b = twice.execute([np.ones(3, dtype=np.float32)])
    assert not np.shares_memory(a, b)
    # Its bytes read later through another value (planned on the same offset).
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16)), tensor([3], mem=(1, 16)),
              tensor([3], mem=(1, 32))]
    aliased = program(plan("forward", values, [0], [1, 3], [call, kernel_call(0, 2, 2, 3, 3)],
                           [("etc_test::add", "out")], [0, 48], delegates=delegates),
                      delegate_blobs=[b""]).load_method("forward")
    assert aliased.io_decisions["output 0"] == "copied: value 2 uses its planned bytes after the delegate"
    y, z = aliased.execute([np.array([1, 2, 3], dtype=np.float32)])
    np.testing.assert_array_equal(y, [3, 5, 7])
    np.testing.assert_array_equal(z, [6, 10, 14])


def test_control_flow_keeps_output_copies():
    # y = delegate(x); jump over nothing: a method with a jump copies its outputs.
    register_backend(_Recorder())
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16)), S.EValue(val=S.Bool(bool_val=True))]
    instructions = [S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[0, 1])),
                    S.Instruction(instr_args=S.JumpFalseCall(cond_value_index=2, destination_instruction=2))]
    method = program(plan("forward", values, [0], [1], instructions, [], [0, 32],
                          delegates=[_delegate(_Recorder.backend_id)]), delegate_blobs=[b""]).load_method("forward")
    assert method.io_decisions["output 0"] == "copied: the method has control flow"
    (y1,) = method.execute([np.ones(3, dtype=np.float32)])
    (y2,) = method.execute([np.zeros(3, dtype=np.float32)])
    np.testing.assert_array_equal(y1, 3)
    np.testing.assert_array_equal(y2, 1)


# ----------------------------------------------------------------- the cpu delegate

def _cpu_method(module, inputs, **export):
    edge = etc.to_edge(torch.export.export(module, inputs, **export)).to_backend(CpuPartitioner())
    return Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")


class _Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def test_cpu_delegate_outputs_survive_the_next_call_numpy_and_torch():
    x1, x2 = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    method = _cpu_method(_Softmax(), (x1,))
    assert method.io_decisions == {"input 0": "bound in place",
                                   "output 0": "written by its delegate into a new array"}
    (a,) = method.execute([x1.numpy()])
    (b,) = method.execute([x2.numpy()])
    np.testing.assert_allclose(a, torch.softmax(x1, -1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, torch.softmax(x2, -1).numpy(), rtol=1e-5, atol=1e-6)
    (ta,) = method.execute([x1])
    (tb,) = method.execute([x2])
    assert isinstance(ta, torch.Tensor)
    torch.testing.assert_close(ta, torch.softmax(x1, -1))
    torch.testing.assert_close(tb, torch.softmax(x2, -1))


def test_cpu_delegate_reads_non_contiguous_misaligned_and_read_only_inputs():
    x = torch.randn(2, 4, 8)
    method = _cpu_method(_Softmax(), (x,))
    expected = torch.softmax(x, -1).numpy()
    wide = np.zeros((2, 4, 16), dtype=np.float32)
    wide[..., ::2] = x.numpy()
    (y,) = method.execute([wide[..., ::2]])  # non-contiguous: copied
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    raw = np.zeros(x.numel() * 4 + 4, dtype=np.uint8)
    shifted = raw[4:].view(np.float32).reshape(2, 4, 8)  # 4 bytes past a 16-byte boundary
    shifted[...] = x.numpy()
    (y,) = method.execute([shifted])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    frozen = np.frombuffer(x.numpy().tobytes(), dtype=np.float32).reshape(2, 4, 8)  # read-only
    (y,) = method.execute([frozen])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="expected dtype float32"):
        method.execute([x.double()])


class _ReturnsItsInput(torch.nn.Module):
    def forward(self, x):
        return x, torch.softmax(x, dim=-1), x.reshape(-1)


def test_an_input_returned_as_an_output_is_a_copy():
    x = torch.randn(4, 8)
    method = _cpu_method(_ReturnsItsInput(), (x,))
    given = x.numpy().copy()
    same, soft, flat = method.execute([given])
    assert not np.shares_memory(same, given) and not np.shares_memory(flat, given)
    given[...] = 0  # the caller changing its input later changes no output
    np.testing.assert_array_equal(same, x.numpy())
    np.testing.assert_array_equal(flat, x.numpy().reshape(-1))
    np.testing.assert_allclose(soft, torch.softmax(x, -1).numpy(), rtol=1e-5, atol=1e-6)


class _Cache(torch.nn.Module):
    """A KV-cache-like buffer updated in place each call, and an output computed from it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8))

    def forward(self, x, pos):
        self.cache.index_put_((pos,), x)
        return self.cache * 2 + 1


def test_cpu_delegate_with_in_place_state_matches_eager_call_after_call():
    eager = _Cache()
    x, pos = torch.randn(1, 8), torch.tensor([0])
    method = _cpu_method(_Cache(), (x, pos))
    outs, expected = [], []
    for step in range(4):
        x, pos = torch.randn(1, 8), torch.tensor([step])
        outs.append(method.execute([x.numpy(), pos.numpy()])[0])
        with torch.no_grad():
            expected.append(eager(x, pos).numpy().copy())
    for got, want in zip(outs, expected):  # every call's output kept its own values
        np.testing.assert_allclose(got, want, rtol=1e-6)


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_cpu_delegate_dynamic_shape_outputs_survive_the_next_call():
    module = _Linear().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    method = _cpu_method(module, (torch.randn(4, 8),), dynamic_shapes=({0: batch},))
    x1, x2 = torch.randn(3, 8), torch.randn(7, 8)
    (y1,) = method.execute([x1.numpy()])
    (y2,) = method.execute([x2.numpy()])
    assert y1.shape == (3, 5) and y2.shape == (7, 5)
    with torch.no_grad():
        np.testing.assert_allclose(y1, module(x1).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y2, module(x2).numpy(), rtol=1e-5, atol=1e-5)


def test_an_input_a_delegate_updates_in_place_is_copied():
    # The delegate gets input 0 as both its input and its output (in-place state, as
    # compiler/delegation.py marks it): the caller's array must not be the one it writes.
    register_backend(_Recorder())
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16))]
    instructions = [S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[0, 0])),
                    kernel_call(0, 0, 0, 1, 1)]
    method = program(plan("forward", values, [0], [1], instructions, [("etc_test::add", "out")], [0, 32],
                          delegates=[_delegate(_Recorder.backend_id)]), delegate_blobs=[b""]).load_method("forward")
    assert method.io_decisions["input 0"] == "copied: the program writes it"
    x = np.array([1, 2, 3], dtype=np.float32)
    (y,) = method.execute([x])
    np.testing.assert_array_equal(x, [1, 2, 3])
    np.testing.assert_array_equal(y, [6, 10, 14])


def test_an_input_moved_into_a_value_a_delegate_updates_is_copied():
    # Value 1 takes input 0 by a move (ExecuTorch copies the EValue: the two alias), then the
    # delegate updates value 1 in place: that must not reach the caller's array.
    register_backend(_Recorder())
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16)), tensor([3], mem=(1, 32))]
    instructions = [S.Instruction(instr_args=S.MoveCall(move_from=0, move_to=1)),
                    S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[1, 1])),
                    kernel_call(0, 1, 1, 2, 2)]
    method = program(plan("forward", values, [0], [2], instructions, [("etc_test::add", "out")], [0, 48],
                          delegates=[_delegate(_Recorder.backend_id)]), delegate_blobs=[b""]).load_method("forward")
    assert method.io_decisions["input 0"] == "copied: a move makes another value of it"
    x = np.array([1, 2, 3], dtype=np.float32)
    (y,) = method.execute([x])
    np.testing.assert_array_equal(x, [1, 2, 3])
    np.testing.assert_array_equal(y, [6, 10, 14])
