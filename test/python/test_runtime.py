"""The thin runtime on hand-built programs: memory, values, instructions, errors.

Kernels here are registered under a test namespace so that these tests depend
on the interpreter alone, not on the portable kernel library."""

import numpy as np
import pytest

from etc.errors import BackendError, ExecutionError, InputError, KernelNotFoundError, ProgramError
from etc.runtime import Backend, Runtime, register_backend
from etc.runtime.kernels.common import write_out
from etc.runtime.kernels.registry import has_kernel, register_kernel
from etc.schema import PteFile, deserialize_pte, serialize_pte
from etc.schema import program as S


def _add_out(a, b, out):
    return write_out(out, a + b)


def _scale_out(a, factor, out):
    return write_out(out, a * factor)


def _fail_out(a, out):
    raise ValueError("kernel exploded")


for _name, _fn in {"etc_test::add.out": _add_out, "etc_test::scale.out": _scale_out,
                   "etc_test::fail.out": _fail_out}.items():
    if not has_kernel(_name):
        register_kernel(_name, _fn)


def tensor(sizes, *, mem=None, constant=0, dynamic=False, dtype=S.ScalarType.FLOAT):
    alloc = None
    if mem is not None:
        alloc = S.AllocationDetails(memory_id=mem[0], memory_offset_low=mem[1], memory_offset_high=0)
    return S.EValue(val=S.Tensor(
        scalar_type=dtype, storage_offset=0, sizes=list(sizes), dim_order=list(range(len(sizes))),
        requires_grad=False, data_buffer_idx=constant, allocation_info=alloc, layout=0,
        shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND if dynamic else S.TensorShapeDynamism.STATIC,
        extra_tensor_info=None))


def kernel_call(op, *args):
    return S.Instruction(instr_args=S.KernelCall(op_index=op, args=list(args)))


def plan(name, values, inputs, outputs, instructions, operators, sizes, delegates=()):
    return S.ExecutionPlan(
        name=name, container_meta_type=S.ContainerMetadata(encoded_inp_str="", encoded_out_str=""),
        values=values, inputs=inputs, outputs=outputs,
        chains=[S.Chain(inputs=inputs, outputs=outputs, instructions=instructions, stacktrace=None)],
        operators=[S.Operator(name=n, overload=o) for n, o in operators], delegates=list(delegates),
        non_const_buffer_sizes=sizes)


def program(*plans, constants=(), delegate_blobs=()):
    pte = PteFile(program=S.Program(version=0, execution_plan=list(plans), constant_buffer=[],
                                    backend_delegate_data=[], segments=[], constant_segment=None,
                                    mutable_data_segments=[], named_data=[]))
    for c in constants:
        pte.add_constant(np.asarray(c, dtype=np.float32).tobytes())
    for blob in delegate_blobs:
        pte.add_delegate_blob(blob)
    return Runtime.get().load_program(serialize_pte(pte))


def chain_program():
    """y = (x + w) * 2 + x, with the intermediate sharing planned memory with y's inputs' slots."""
    values = [
        tensor([4], mem=(1, 0)),         # 0: x (planned input)
        tensor([4], constant=1),          # 1: w (constant)
        tensor([4], mem=(1, 16)),        # 2: t = x + w
        S.EValue(val=S.Double(double_val=2.0)),  # 3
        tensor([4], mem=(1, 32)),        # 4: u = t * 2
        tensor([4], mem=(1, 16)),        # 5: y = u + x (reuses t's bytes: t is dead)
    ]
    instructions = [kernel_call(0, 0, 1, 2, 2), kernel_call(1, 2, 3, 4, 4), kernel_call(0, 4, 0, 5, 5)]
    return program(plan("forward", values, [0], [5], instructions,
                        [("etc_test::add", "out"), ("etc_test::scale", "out")], [0, 48]),
                   constants=[[1, 2, 3, 4]])


def test_chain_with_constants_and_reused_memory():
    method = chain_program().load_method("forward")
    x = np.array([1, 1, 1, 1], dtype=np.float32)
    (y,) = method.execute([x])
    np.testing.assert_array_equal(y, (x + [1, 2, 3, 4]) * 2 + x)
    # Outputs are copies: running again does not change what the caller holds.
    method.execute([x * 0])
    np.testing.assert_array_equal(y, (x + [1, 2, 3, 4]) * 2 + x)
    assert method.metadata.planned_buffer_sizes == [48]
    assert method.metadata.inputs[0].sizes() == (4,)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    (y,) = chain_program().load_method("forward").execute([torch.ones(4)])
    assert isinstance(y, torch.Tensor)
    assert y.tolist() == [5.0, 7.0, 9.0, 11.0]


def test_input_checks_name_the_problem():
    method = chain_program().load_method("forward")
    with pytest.raises(InputError, match="takes 1 input"):
        method.execute([])
    with pytest.raises(InputError, match="expected dtype float32, got int64"):
        method.execute([np.zeros(4, dtype=np.int64)])
    with pytest.raises(InputError, match=r"expected shape \[4\], got \[5\]"):
        method.execute([np.zeros(5, dtype=np.float32)])
    with pytest.raises(InputError, match="expected rank 1"):
        method.execute([np.zeros((2, 2), dtype=np.float32)])


def dynamic_program():
    values = [tensor([8, 2], mem=(1, 0), dynamic=True), tensor([8, 2], mem=(1, 64), dynamic=True)]
    return program(plan("forward", values, [0], [1], [kernel_call(0, 0, 0, 1, 1)], [("etc_test::add", "out")],
                        [0, 128]))


def test_dynamic_dims_within_bounds_resize_outputs():
    method = dynamic_program().load_method("forward")
    for batch in (1, 3, 8):
        x = np.arange(batch * 2, dtype=np.float32).reshape(batch, 2)
        (y,) = method.execute([x])
        assert y.shape == (batch, 2)
        np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(InputError, match="dimension 0 is 9, above its upper bound 8"):
        method.execute([np.zeros((9, 2), dtype=np.float32)])
    with pytest.raises(InputError, match="expected shape"):
        chain_program().load_method("forward").execute([np.zeros(3, dtype=np.float32)])


def test_non_contiguous_inputs_are_accepted():
    method = dynamic_program().load_method("forward")
    x = np.arange(16, dtype=np.float32).reshape(2, 8).T[:, :2]  # strided view
    (y,) = method.execute([x])
    np.testing.assert_array_equal(y, 2 * x)


def test_two_methods_and_unknown_method():
    add = plan("add", [tensor([2], mem=(1, 0)), tensor([2], mem=(1, 16))], [0], [1], [kernel_call(0, 0, 0, 1, 1)],
               [("etc_test::add", "out")], [0, 32])
    scale = plan("scale", [tensor([2], mem=(1, 0)), S.EValue(val=S.Double(double_val=3.0)), tensor([2], mem=(1, 16))],
                 [0], [2], [kernel_call(0, 0, 1, 2, 2)], [("etc_test::scale", "out")], [0, 32])
    loaded = program(add, scale)
    assert loaded.method_names == {"add", "scale"}
    x = np.array([1, 2], dtype=np.float32)
    np.testing.assert_array_equal(loaded.load_method("add").execute([x])[0], [2, 4])
    np.testing.assert_array_equal(loaded.load_method("scale").execute([x])[0], [3, 6])
    with pytest.raises(ProgramError, match="no method 'forward'"):
        loaded.load_method("forward")


def test_jump_false_control_flow():
    """if flag: y = x + x else: y = x * 3, with `flag` a Bool input."""
    values = [tensor([2], mem=(1, 0)), S.EValue(val=S.Bool(bool_val=False)), tensor([2], mem=(1, 16)),
              S.EValue(val=S.Double(double_val=3.0)), S.EValue(val=S.Bool(bool_val=False)),
              tensor([2], mem=(1, 32))]
    instructions = [
        S.Instruction(instr_args=S.JumpFalseCall(cond_value_index=1, destination_instruction=3)),
        kernel_call(0, 0, 0, 2, 2),
        S.Instruction(instr_args=S.JumpFalseCall(cond_value_index=4, destination_instruction=4)),  # always jumps
        kernel_call(1, 0, 3, 2, 2),
        S.Instruction(instr_args=S.FreeCall(value_index=5)),
    ]
    loaded = program(plan("forward", values, [0, 1], [2], instructions,
                          [("etc_test::add", "out"), ("etc_test::scale", "out")], [0, 48]))
    method = loaded.load_method("forward")
    x = np.array([1, 2], dtype=np.float32)
    np.testing.assert_array_equal(method.execute([x, True])[0], [2, 4])
    np.testing.assert_array_equal(method.execute([x, False])[0], [3, 6])


def test_missing_kernel_fails_at_load_with_close_names():
    loaded = program(plan("forward", [tensor([2], mem=(1, 0)), tensor([2], mem=(1, 16))], [0], [1],
                          [kernel_call(0, 0, 0, 1, 1)], [("etc_test::addd", "out")], [0, 32]))
    with pytest.raises(KernelNotFoundError, match="etc_test::addd.out") as info:
        loaded.load_method("forward")
    assert "etc_test::add.out" in str(info.value)


def test_kernel_failure_names_method_instruction_and_operator():
    loaded = program(plan("forward", [tensor([2], mem=(1, 0)), tensor([2], mem=(1, 16))], [0], [1],
                          [kernel_call(0, 0, 1, 1)], [("etc_test::fail", "out")], [0, 32]))
    with pytest.raises(ExecutionError, match="kernel exploded") as info:
        loaded.load_method("forward").execute([np.zeros(2, dtype=np.float32)])
    error = info.value
    assert (error.method, error.instruction, error.operator) == ("forward", 0, "etc_test::fail.out")


class _Doubler(Backend):
    backend_id = "etc_test_doubler"

    def __init__(self):
        self.inits = 0

    def init(self, blob, compile_specs):
        self.inits += 1
        return {"factor": float(blob.decode()), "specs": compile_specs}

    def execute(self, handle, args):
        x, out = args
        out[...] = x * handle["factor"]
        return [out]


class _Unavailable(_Doubler):
    backend_id = "etc_test_unavailable"

    def is_available(self):
        return False


def delegate_program(backend_id):
    delegate = S.BackendDelegate(id=backend_id, processed=S.BackendDelegateDataReference(
        location=S.DataLocation.SEGMENT, index=0), compile_specs=[S.CompileSpec(key="k", value=b"v")])
    values = [tensor([3], mem=(1, 0)), tensor([3], mem=(1, 16))]
    instructions = [S.Instruction(instr_args=S.DelegateCall(delegate_index=0, args=[0, 1]))]
    return program(plan("forward", values, [0], [1], instructions, [], [0, 32], delegates=[delegate]),
                   delegate_blobs=[b"2.5"])


def test_delegate_call_runs_on_a_registered_backend():
    backend = _Doubler()
    register_backend(backend)
    method = delegate_program("etc_test_doubler").load_method("forward")
    assert backend.inits == 1
    (y,) = method.execute([np.array([1, 2, 3], dtype=np.float32)])
    np.testing.assert_array_equal(y, [2.5, 5, 7.5])
    method.execute([np.zeros(3, dtype=np.float32)])
    assert backend.inits == 1  # once per load, not per call
    assert method.metadata.backends == ["etc_test_doubler"]


def test_unregistered_or_unavailable_backend_fails_at_load():
    with pytest.raises(BackendError, match="'etc_test_nowhere', which is not registered"):
        delegate_program("etc_test_nowhere").load_method("forward")
    register_backend(_Unavailable())
    with pytest.raises(BackendError, match="not available"):
        delegate_program("etc_test_unavailable").load_method("forward")


def test_corrupt_files_raise_program_error(tmp_path):
    with pytest.raises(ProgramError):
        Runtime.get().load_program(b"not a program")
    with pytest.raises(ProgramError, match="cannot read program"):
        Runtime.get().load_program(tmp_path / "missing.pte")
