"""The runtime on hand-built programs: what ExecuTorch's emitter produces besides plain kernel chains.

Loops made of prim ops and JumpFalseCall (ExecuTorch's map lowering), dynamic
shapes that shrink and grow again, IntLists fed by run-time sizes, several
returns, dim orders, mutable state, delegates with dynamic outputs, and the
errors users see. Kernels are registered under a test namespace so these tests
depend on the interpreter alone.
"""

import tracemalloc

import numpy as np
import pytest

from etc.errors import BackendError, ExecutionError, InputError, KernelNotFoundError, ProgramError
from etc.runtime import Backend, Runtime, register_backend, unregister_backend
from etc.schema import serialize_pte
from etc.schema import program as S

from runtime_program_builder import F32, Builder, f32  # noqa: E402  (test/python is on sys.path)


# --------------------------------------------------------------------------- loops

def map_loop(rows_bound=4, dynamic=True):
    """ExecuTorch's lowering of `torch.map(lambda row: row * 10, x)`: a loop of prim ops and a jump."""
    b = Builder()
    x = b.tensor([rows_bound, 2], dynamic=dynamic)
    y = b.tensor([rows_bound, 2], dynamic=True)  # the stacked output grows one row per iteration
    i, n, zero, one = b.int(0), b.int(0), b.int(0), b.int(1)
    row, body = b.tensor([2]), b.tensor([2])
    ten, done = b.double(10.0), b.bool(False)
    b.inputs, b.outputs = [x], [y]
    b.call("aten::sym_size.int", x, zero, n)
    start = b.call("etc_rt_test::select.int_out", x, zero, i, row, row)
    b.call("etc_rt_test::scale.out", row, ten, body, body)
    b.call("executorch_prim::et_copy_index.tensor", y, body, i)
    b.call("executorch_prim::add.Scalar", i, one, i)
    b.call("executorch_prim::eq.Scalar", i, n, done)
    b.jump_false(done, start)
    b.call("executorch_prim::sub.Scalar", i, n, i)  # reset the counter for the next execute
    return b.load().load_method("forward")


def test_map_loop_of_prim_ops_and_jump_false_runs_and_resets():
    method = map_loop()
    for rows in (4, 2, 3, 1, 4):  # shrinking and growing again: outs are handed over at capacity
        x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        (y,) = method.execute([x])
        assert y.shape == (rows, 2)
        np.testing.assert_array_equal(y, x * 10)


def test_loop_index_out_of_planned_rows_is_an_execution_error():
    b = Builder()
    y, row, i = b.tensor([2, 2], dynamic=True), b.tensor([2]), b.int(5)
    b.inputs, b.outputs = [row], [y]
    b.call("executorch_prim::et_copy_index.tensor", y, row, i)
    with pytest.raises(ExecutionError, match="index 5 is outside the 2 rows") as info:
        b.load().load_method("forward").execute([f32(1, 2)])
    assert info.value.operator == "executorch_prim::et_copy_index.tensor"
    assert info.value.instruction == 0


# --------------------------------------------------------------------------- sizes at run time

def flatten_program():
    """y = x.reshape(x.size(0) * 3) with x dynamic in its first dim: sym_size -> mul.Scalar -> IntList."""
    b = Builder()
    x, y = b.tensor([4, 3], dynamic=True), b.tensor([12], dynamic=True)
    zero, three, rows, numel = b.int(0), b.int(3), b.int(0), b.int(0)
    shape = b.int_list([numel])
    b.inputs, b.outputs = [x], [y, numel]
    b.call("aten::sym_size.int", x, zero, rows)
    b.call("executorch_prim::mul.Scalar", rows, three, numel)
    b.call("etc_rt_test::reshape.out", x, shape, y, y)
    return b


def test_intlist_items_are_int_values_read_at_call_time():
    method = flatten_program().load().load_method("forward")
    for rows in (2, 4, 1):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        y, numel = method.execute([x])
        assert numel == rows * 3  # an Int output is a Python int
        np.testing.assert_array_equal(y, x.reshape(-1))


def test_overload_less_prim_op_names_resolve():
    b = Builder()
    x, n = b.tensor([2, 3]), b.int(0)
    b.inputs, b.outputs = [x], [n]
    b.call("aten::sym_numel", x, n)  # ExecuTorch writes default overloads with an empty overload name
    assert b.load().load_method("forward").execute([np.zeros((2, 3), np.float32)]) == [6]


@pytest.mark.parametrize("op, a, b, expected", [
    ("add", 7, 2, 9), ("sub", 7, 2, 5), ("mul", 7, 2, 14), ("floordiv", -7, 2, -4), ("truediv", 7, 2, 3.5),
    ("mod", -7, 3, 2), ("eq", 2, 2, True), ("gt", 1, 2, False), ("lt", 1, 2, True), ("ge", 2, 2, True),
    ("le", 3, 2, False), ("sym_max", 3, 9, 9), ("sym_min", 3, 9, 3)])
def test_scalar_prim_ops(op, a, b, expected):
    from etc.runtime.kernels.registry import get_kernel

    import etc.runtime.prim_ops  # noqa: F401

    result = get_kernel(f"executorch_prim::{op}.Scalar")(a, b)
    assert result == expected and type(result) is type(expected)


def test_integer_division_by_zero_is_an_execution_error_at_its_instruction():
    b = Builder()
    n, zero, out = b.int(4), b.int(0), b.int(0)
    b.inputs, b.outputs = [n, zero], [out]
    b.call("executorch_prim::floordiv.Scalar", n, zero, out)
    with pytest.raises(ExecutionError, match="division by zero") as info:
        b.load().load_method("forward").execute([4, 0])
    assert (info.value.instruction, info.value.operator) == (0, "executorch_prim::floordiv.Scalar")


# --------------------------------------------------------------------------- values and memory

def test_several_returns_go_through_a_tensor_list():
    b = Builder()
    x, lo, hi = b.tensor([4]), b.tensor([1]), b.tensor([1])
    outs = b.tensor_list([lo, hi])
    b.inputs, b.outputs = [x], [lo, hi]
    b.call("etc_rt_test::minmax.out", x, lo, hi, outs)
    lo_value, hi_value = b.load().load_method("forward").execute([f32(3, -1, 8, 2)])
    assert lo_value.tolist() == [-1] and hi_value.tolist() == [8]


def test_dim_order_constants_and_outputs_are_seen_logically():
    """A channels-last-like layout: the bytes are stored transposed, kernels see the logical shape."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = Builder()
    x = b.tensor([2, 3])
    c = b.tensor([2, 3], constant=w.T.copy(), dim_order=[1, 0])  # stored dim 1 outermost
    y = b.tensor([2, 3], dim_order=[1, 0])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, c, y, y)
    method = b.load().load_method("forward")
    (out,) = method.execute([np.ones((2, 3), np.float32)])
    np.testing.assert_array_equal(out, w + 1)
    assert out.flags.c_contiguous  # what the user gets is a plain array


def test_planned_values_share_bytes_and_inference_allocates_no_arena():
    """t and y share planned bytes (t is dead when y is written); steady state allocates only outputs."""
    n = 1 << 16
    b = Builder()
    x, t, u = b.tensor([n]), b.tensor([n]), b.tensor([n])
    y = b.alias(t, [n])
    two = b.double(2.0)
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, x, t, t)
    b.call("etc_rt_test::scale.out", t, two, u, u)
    b.call("etc_rt_test::add.out", u, x, y, y)
    method = b.load().load_method("forward")
    assert method.metadata.planned_buffer_sizes == [3 * 4 * n]
    x_value = np.ones(n, np.float32)
    method.execute([x_value])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            (out,) = method.execute([x_value])
            del out
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4 * n  # not even one more tensor's worth stays allocated
    (out,) = method.execute([x_value])
    np.testing.assert_array_equal(out, np.full(n, 5.0, np.float32))


def test_mutable_buffer_state_persists_across_executes():
    """A counter-like buffer: state += x, returned each time; initial state from the mutable segment."""
    b = Builder()
    state = b.tensor([2], mutable=f32(100, 200))
    x, new = b.tensor([2]), b.tensor([2])
    b.inputs, b.outputs = [x], [new]
    b.call("etc_rt_test::add.out", state, x, new, new)
    b.call("etc_rt_test::copy.out", new, state, state)
    program = b.load()
    method = program.load_method("forward")
    results = [method.execute([f32(1, 2)])[0].tolist() for _ in range(3)]
    assert results == [[101, 202], [102, 204], [103, 206]]
    assert program.load_method("forward") is method  # the program keeps the loaded method (and its state)


def test_unplanned_view_aliases_its_source_et_view():
    b = Builder()
    x = b.tensor([2, 3])
    v = b.tensor([3, 2], planned=False, dynamic=True)
    y = b.tensor([3, 2])
    shape = b.int_list([b.int(3), b.int(2)])
    b.inputs, b.outputs = [x], [y]
    b.call("executorch_prim::et_view.default", x, shape, v)
    b.call("etc_rt_test::add.out", v, v, y, y)
    method = b.load().load_method("forward")
    x_value = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(method.execute([x_value])[0], 2 * x_value.reshape(3, 2))


def test_move_call_and_unplanned_input():
    b = Builder()
    x = b.tensor([3], planned=False)  # the caller's data, copied into storage allocated at load
    t, y = b.tensor([3]), b.tensor([3])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, x, t, t)
    b.move(t, y)
    (out,) = b.load().load_method("forward").execute([f32(1, 2, 3)])
    assert out.tolist() == [2, 4, 6]


def test_jump_false_on_a_tensor_condition_and_scalar_inputs():
    """if flag: y = x + x else: y = x * factor (flag a Bool tensor input, factor a Double input)."""
    b = Builder()
    x, flag, factor, y = b.tensor([2]), b.tensor([1], dtype=S.ScalarType.BOOL), b.double(1.0), b.tensor([2])
    always = b.bool(False)
    b.inputs, b.outputs = [x, flag, factor], [y]
    b.jump_false(flag, 3)
    b.call("etc_rt_test::add.out", x, x, y, y)
    b.jump_false(always, 4)
    b.call("etc_rt_test::scale.out", x, factor, y, y)
    method = b.load().load_method("forward")
    assert method.execute([f32(1, 2), np.array([True]), 3.0])[0].tolist() == [2, 4]
    assert method.execute([f32(1, 2), np.array([False]), 3.0])[0].tolist() == [3, 6]
    with pytest.raises(InputError, match="input 2: expected double, got str"):
        method.execute([f32(1, 2), np.array([False]), "3"])


# --------------------------------------------------------------------------- delegates

class Trim(Backend):
    """Writes x + offset into the front of its output and returns it re-viewed: a dynamic output."""

    backend_id = "etc_rt_test_trim"

    def init(self, blob, compile_specs):
        assert [(s.key, bytes(s.value)) for s in compile_specs] == [("mode", b"fast")]
        return float(blob.decode())

    def execute(self, handle, args):
        x, out = args
        assert out.shape == (8,), "outputs are handed over at their planned capacity"
        result = out[:x.size]
        result[:] = x + handle
        return [result]


def test_delegate_with_a_dynamic_output():
    register_backend(Trim())
    try:
        b = Builder()
        x, y = b.tensor([8], dynamic=True), b.tensor([8], dynamic=True)
        b.inputs, b.outputs = [x], [y]
        b.delegate("etc_rt_test_trim", b"0.5", x, y)
        method = b.load().load_method("forward")
        assert method.metadata.backends == ["etc_rt_test_trim"]
        for n in (8, 3, 8):
            (out,) = method.execute([np.ones(n, np.float32)])
            assert out.tolist() == [1.5] * n
    finally:
        unregister_backend("etc_rt_test_trim")


def test_missing_backend_names_it_and_the_registered_ones():
    b = Builder()
    x, y = b.tensor([2]), b.tensor([2])
    b.inputs, b.outputs = [x], [y]
    b.delegate("NoSuchBackend", b"", x, y)
    program = b.load()
    with pytest.raises(BackendError, match=r"'NoSuchBackend', which is not registered \(registered backends: ") as info:
        program.load_method("forward")
    assert info.value.method == "forward"
    assert program.metadata("forward").backends == ["NoSuchBackend"]  # inspecting needs no backend


# --------------------------------------------------------------------------- errors

def test_missing_kernels_fail_at_load_naming_the_first_use_and_the_others():
    b = Builder()
    x, t, y = b.tensor([2]), b.tensor([2]), b.tensor([2])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, x, t, t)
    b.call("etc_rt_test::nope.out", t, y, y)
    b.call("etc_rt_test::nada.out", t, y, y)
    program = b.load()
    with pytest.raises(KernelNotFoundError, match="'etc_rt_test::nope.out'") as info:
        program.load_method("forward")
    error = info.value
    assert (error.method, error.instruction, error.operator) == ("forward", 1, "etc_rt_test::nope.out")
    assert "etc_rt_test::nada.out" in str(error)
    meta = program.metadata("forward")  # metadata needs no kernels
    assert meta.operators == ["etc_rt_test::add.out", "etc_rt_test::nope.out", "etc_rt_test::nada.out"]


def test_kernel_failure_carries_method_instruction_operator_value_and_argument_shapes():
    b = Builder()
    x, t, y = b.tensor([2, 3]), b.tensor([2, 3]), b.tensor([2, 3])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, x, t, t)
    b.call("etc_rt_test::explode.out", t, y, y)
    with pytest.raises(ExecutionError) as info:
        b.load().load_method("forward").execute([np.zeros((2, 3), np.float32)])
    error = info.value
    assert (error.method, error.instruction, error.operator, error.value) == ("forward", 1,
                                                                              "etc_rt_test::explode.out", y)
    assert "ValueError: kernel exploded" in str(error)
    assert "float32[2, 3]" in str(error)
    assert isinstance(error.__cause__, ValueError)


def test_kernel_failure_points_at_the_user_line_of_the_stacktrace():
    b = Builder()
    x, y = b.tensor([2]), b.tensor([2])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::explode.out", x, y, y)
    b.stacktrace = [S.FrameList(items=[
        S.Frame(filename="/home/me/model.py", lineno=12, name="forward", context="y = self.explode(x)"),
        S.Frame(filename="/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", lineno=1,
                name="_call_impl", context="return forward_call(*args)")])]
    with pytest.raises(ExecutionError) as info:
        b.load().load_method("forward").execute([f32(1, 2)])
    text = str(info.value)
    assert info.value.location == "/home/me/model.py:12"
    assert text.startswith("/home/me/model.py:12: error: etc_rt_test::explode.out failed")
    assert "note: in forward: y = self.explode(x)" in text


def test_result_larger_than_its_planned_tensor_is_an_execution_error():
    b = Builder()
    x, y = b.tensor([4]), b.tensor([4])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::too_big.out", x, y, y)
    with pytest.raises(ExecutionError, match=r"shape \[5\] does not fit tensor 1") as info:
        b.load().load_method("forward").execute([np.zeros(4, np.float32)])
    assert (info.value.instruction, info.value.value) == (0, 1)


def test_input_errors_name_the_input_and_expected_vs_got():
    method = map_loop(rows_bound=4)
    with pytest.raises(InputError, match="takes 1 input"):
        method.execute([])
    with pytest.raises(InputError, match="input 0: expected dtype float32, got float64") as info:
        method.execute([np.zeros((2, 2))])
    assert info.value.value == 0
    with pytest.raises(InputError, match=r"input 0: expected rank 2 \(shape \[4, 2\] at most\), got shape \[8\]"):
        method.execute([np.zeros(8, np.float32)])
    with pytest.raises(InputError, match=r"input 0: dimension 0 is 5, above its upper bound 4"):
        method.execute([np.zeros((5, 2), np.float32)])
    with pytest.raises(InputError, match=r"dimension 1 is 3, above its upper bound 2"):
        method.execute([np.zeros((1, 3), np.float32)])
    static = map_loop(rows_bound=4, dynamic=False)
    with pytest.raises(InputError, match=r"input 0: expected shape \[4, 2\], got \[3, 2\]"):
        static.execute([np.zeros((3, 2), np.float32)])
    with pytest.raises(InputError, match="expected a tensor, got dict"):
        static.execute([{}])


# --------------------------------------------------------------------------- program level

def test_program_metadata_sources_and_torch_io(tmp_path):
    torch = pytest.importorskip("torch")
    builder = flatten_program()
    other = Builder("double")
    x, y = other.tensor([2]), other.tensor([2])
    other.inputs, other.outputs = [x], [y]
    other.call("etc_rt_test::add.out", x, x, y, y)
    data = serialize_pte(builder.pte(other))
    path = tmp_path / "p.pte"
    path.write_bytes(data)
    for source in (data, path, str(path), builder.pte(other)):
        assert Runtime.get().load_program(source).method_names == {"forward", "double"}
    with open(path, "rb") as f:
        program = Runtime.get().load_program(f)
    meta = program.metadata("forward")
    assert meta.num_inputs() == 1 and meta.num_outputs() == 2
    tensor_meta = meta.input_tensor_meta(0)
    assert (tensor_meta.sizes(), tensor_meta.dynamic, tensor_meta.numpy_dtype) == ((4, 3), True, np.dtype(np.float32))
    assert tensor_meta.dtype() == S.ScalarType.FLOAT == 6 and tensor_meta.nbytes() == 4 * 3 * 4
    assert tensor_meta.is_memory_planned() and meta.name() == "forward"
    assert tensor_meta.torch_dtype == torch.float32
    assert meta.outputs[1] == "Int"
    assert meta.num_memory_planned_buffers() == 1 and meta.memory_planned_buffer_size(0) == 96
    y_value, numel = program.load_method("forward").execute([torch.ones(2, 3)])
    assert isinstance(y_value, torch.Tensor) and y_value.shape == (6,) and numel == 6
    (doubled,) = program.load_method("double").execute(np.ones(2, np.float32))  # a lone array is one input
    assert isinstance(doubled, np.ndarray) and doubled.tolist() == [2, 2]
    with pytest.raises(ProgramError, match="no method 'backward'"):
        program.metadata("backward")
    with pytest.raises(ProgramError, match="takes a path, bytes"):
        Runtime.get().load_program(42)


def test_runtime_registries():
    runtime = Runtime.get()
    assert "executorch_prim::et_copy_index.tensor" in runtime.operator_registry.operator_names
    assert "aten::sym_size.int" in runtime.operator_registry.operator_names
    register_backend(Trim())
    try:
        assert "etc_rt_test_trim" in runtime.backend_registry.registered_backend_names
        assert runtime.backend_registry.is_available("etc_rt_test_trim")
    finally:
        unregister_backend("etc_rt_test_trim")
    assert not runtime.backend_registry.is_available("etc_rt_test_trim")


def test_metadata_prints_a_summary_and_close_destroys_delegate_handles():
    destroyed = []

    class Destroying(Trim):
        backend_id = "etc_rt_test_destroying"

        def destroy(self, handle):
            destroyed.append(handle)

    register_backend(Destroying())
    try:
        b = Builder()
        x, y = b.tensor([8], dynamic=True), b.tensor([8], dynamic=True)
        b.inputs, b.outputs = [x], [y]
        b.delegate("etc_rt_test_destroying", b"2", x, y)
        program = b.load()
        text = str(program.metadata("forward"))
        assert "input 0: float32[8] (upper bounds)" in text
        assert "mem_id 1: 64 bytes" in text and "backends: etc_rt_test_destroying" in text
        method = program.load_method("forward")
        method.close()
        assert destroyed == [2.0]
    finally:
        unregister_backend("etc_rt_test_destroying")


def test_inline_delegate_data_reaches_the_backend():
    register_backend(Trim())
    try:
        b = Builder()
        x, y = b.tensor([8], dynamic=True), b.tensor([8], dynamic=True)
        b.inputs, b.outputs = [x], [y]
        b.delegate("etc_rt_test_trim", b"unused", x, y)
        pte = b.pte()
        pte.delegate_segments = []
        pte.program.backend_delegate_data = [S.BackendDelegateInlineData(data=b"1.25")]
        pte.program.execution_plan[0].delegates[0].processed = S.BackendDelegateDataReference(
            location=S.DataLocation.INLINE, index=0)
        method = Runtime.get().load_program(serialize_pte(pte)).load_method("forward")
        assert method.execute([np.zeros(2, np.float32)])[0].tolist() == [1.25, 1.25]
    finally:
        unregister_backend("etc_rt_test_trim")


def test_backend_failures_at_init_and_execute_are_named():
    class Fragile(Trim):
        backend_id = "etc_rt_test_fragile"

        def init(self, blob, compile_specs):
            if blob == b"bad":
                raise RuntimeError("cannot parse blob")
            return float(blob.decode())

        def execute(self, handle, args):
            raise RuntimeError("device lost")

    register_backend(Fragile())
    try:
        for blob, error_type, pattern in ((b"bad", BackendError, "backend 'etc_rt_test_fragile' failed to "
                                           "initialise delegate 0: RuntimeError: cannot parse blob"),
                                          (b"1", ExecutionError, "delegate 'etc_rt_test_fragile' failed: "
                                           "RuntimeError: device lost")):
            b = Builder()
            x, y = b.tensor([2]), b.tensor([2])
            b.inputs, b.outputs = [x], [y]
            b.delegate("etc_rt_test_fragile", blob, x, y)
            with pytest.raises(error_type, match=pattern) as info:
                b.load().load_method("forward").execute([f32(1, 2)])
            assert info.value.method == "forward"
            if error_type is ExecutionError:
                assert (info.value.instruction, info.value.operator) == (0, "delegate 'etc_rt_test_fragile'")
    finally:
        unregister_backend("etc_rt_test_fragile")


def test_external_and_legacy_constants():
    b = Builder()
    x, y = b.tensor([2]), b.tensor([2])
    w = b.add_value(S.Tensor(scalar_type=F32, storage_offset=0, sizes=[2], dim_order=[0], requires_grad=False,
                        data_buffer_idx=0, allocation_info=None, layout=0,
                        shape_dynamism=S.TensorShapeDynamism.STATIC,
                        extra_tensor_info=S.ExtraTensorInfo(mutable_data_segments_idx=0, fully_qualified_name="lin.w",
                                                            location=S.TensorDataLocation.EXTERNAL)))
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, w, y, y)
    pte = b.pte()
    with pytest.raises(ProgramError, match="tensor 'lin.w' lives in external data"):
        Runtime.get().load_program(pte).load_method("forward")
    pte.named_data = {"lin.w": f32(10, 20).tobytes()}
    assert Runtime.get().load_program(pte).load_method("forward").execute([f32(1, 2)])[0].tolist() == [11, 22]

    # Files from before constant segments keep constants in Program.constant_buffer (index 0 reserved).
    b = Builder()
    x, c, y = b.tensor([2]), b.tensor([2], constant=f32(0, 0)), b.tensor([2])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, c, y, y)
    pte = b.pte()
    pte.constant_data = []
    pte.program.constant_buffer = [S.Buffer(storage=b""), S.Buffer(storage=f32(5, 6).tobytes())]
    assert Runtime.get().load_program(pte).load_method("forward").execute([f32(1, 2)])[0].tolist() == [6, 8]


def test_unbound_unplanned_input_grows_its_storage():
    b = Builder()
    x = b.tensor([2], planned=False)
    b.values[x].val.shape_dynamism = S.TensorShapeDynamism.DYNAMIC_UNBOUND
    n, zero = b.int(0), b.int(0)
    b.inputs, b.outputs = [x], [n]
    b.call("aten::sym_size.int", x, zero, n)
    method = b.load().load_method("forward")
    assert [method.execute([np.zeros(k, np.float32)])[0] for k in (2, 5, 3, 9)] == [2, 5, 3, 9]


def test_an_invalid_in_memory_program_is_refused_like_a_file():
    b = Builder()
    x, y = b.tensor([2]), b.tensor([2])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, x, y, 7)  # value 7 does not exist
    with pytest.raises(ProgramError, match="7"):
        Runtime.get().load_program(b.pte())


def test_profile_times_every_instruction_including_loop_iterations():
    method = map_loop()
    rows = method.profile([np.ones((3, 2), np.float32)], runs=2)
    by_instruction = {pc: (operator, calls) for pc, operator, seconds, calls in rows}
    assert by_instruction[0] == ("aten::sym_size.int", 2)
    assert by_instruction[3] == ("executorch_prim::et_copy_index.tensor", 6)  # 3 iterations x 2 runs
    assert by_instruction[6] == ("jump_false", 6)
    assert all(seconds >= 0 for _, _, seconds, _ in rows)


def test_bfloat16_inputs_travel_as_bits_and_device_placements_are_refused():
    torch = pytest.importorskip("torch")
    b = Builder()
    x, y = b.tensor([2], dtype=S.ScalarType.BFLOAT16), b.tensor([2], dtype=S.ScalarType.BFLOAT16)
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::copy.out", x, y, y)
    method = b.load().load_method("forward")
    value = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    (out,) = method.execute([value])
    assert out.dtype == torch.bfloat16 and out.tolist() == [1.5, -2.0]
    with pytest.raises(InputError, match=r"expected dtype uint16 \(holding bfloat16 bits\), got float32"):
        method.execute([np.zeros(2, np.float32)])

    pte = b.pte()
    pte.program.execution_plan[0].non_const_buffer_device = [
        S.NonConstBufferDevice(buffer_idx=1, device_type=S.DeviceType.CUDA, device_index=0)]
    with pytest.raises(ProgramError, match="planned buffer 1 on CUDA:0; the etc runtime runs on the host"):
        Runtime.get().load_program(pte).load_method("forward")


def test_memory_usage_by_kind():
    b = Builder()
    x = b.tensor([4], planned=False)
    c, y = b.tensor([4], constant=f32(1, 2, 3, 4)), b.tensor([4])
    b.inputs, b.outputs = [x], [y]
    b.call("etc_rt_test::add.out", x, c, y, y)
    program = b.load()
    method = program.load_method("forward")
    assert method.memory_usage() == {"planned": [16], "unplanned": 16, "constants": 16}
    assert not program.metadata("forward").uses_backend("cpu")


def test_runtime_chooses_the_kernels_thread_count():
    runtime = Runtime.get()
    before = runtime.num_threads
    if before is None:
        pytest.skip("numpy's BLAS has no thread-count knob here")
    try:
        assert runtime.set_num_threads(1)
        assert runtime.num_threads == 1
    finally:
        runtime.set_num_threads(before)
    with pytest.raises(ValueError, match="at least 1"):
        runtime.set_num_threads(0)
