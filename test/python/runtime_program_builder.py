"""Hand-built programs for the runtime's tests (test_runtime_programs.py): `Builder`, a one-method
program under construction (values, operators, instructions), and test kernels registered under the
`etc_rt_test` namespace, so the tests depend on the interpreter alone."""

import numpy as np

from etc.runtime import Runtime
from etc.runtime.kernels.registry import has_kernel, register_kernel
from etc.schema import PteFile, serialize_pte
from etc.schema import program as S

F32, I64 = S.ScalarType.FLOAT, S.ScalarType.LONG


# --------------------------------------------------------------------------- test kernels

def _fit(out, value):
    """Write `value` into the front of out's storage; return it viewed with value's shape."""
    value = np.asarray(value)
    target = out.reshape(-1)[:value.size].reshape(value.shape) if value.shape != out.shape else out
    target[...] = value
    return target


def _add(a, b, out):
    return _fit(out, a + b)


def _scale(a, factor, out):
    return _fit(out, a * factor)


def _select(a, dim, index, out):
    return _fit(out, np.take(a, index, axis=dim))


def _reshape(a, shape, out):
    return _fit(out, a.reshape(shape))


def _copy(src, out):
    return _fit(out, src)


def _minmax(a, out_min, out_max):
    return _fit(out_min, a.min(keepdims=True)), _fit(out_max, a.max(keepdims=True))


def _explode(a, out):
    raise ValueError("kernel exploded")


def _too_big(a, out):
    return np.zeros(out.size + 1, dtype=out.dtype)


KERNELS = {"add.out": _add, "scale.out": _scale, "select.int_out": _select, "reshape.out": _reshape,
           "copy.out": _copy, "minmax.out": _minmax, "explode.out": _explode, "too_big.out": _too_big}
for _name, _fn in KERNELS.items():
    if not has_kernel(f"etc_rt_test::{_name}"):
        register_kernel(f"etc_rt_test::{_name}", _fn)


# --------------------------------------------------------------------------- program building

class Builder:
    """A one-method program under construction: values, operators, instructions."""

    def __init__(self, name="forward"):
        self.name = name
        self.values, self.operators, self.instructions = [], [], []
        self.inputs, self.outputs = [], []
        self.arena = 0
        self.constants, self.mutable, self.blobs, self.delegates = [], [], [], []

    def add_value(self, val):
        self.values.append(S.EValue(val=val))
        return len(self.values) - 1

    def tensor(self, sizes, *, dtype=F32, dynamic=False, planned=True, constant=None, mutable=None,
               dim_order=None):
        nbytes = int(np.prod(sizes, dtype=np.int64)) * (8 if dtype == I64 else 4)
        alloc, data_idx, extra = None, 0, None
        if planned and constant is None:
            alloc = S.AllocationDetails(memory_id=1, memory_offset_low=self.arena, memory_offset_high=0)
            self.arena += -(-nbytes // 16) * 16
        if constant is not None:
            self.constants.append(np.ascontiguousarray(constant).tobytes())
            data_idx = len(self.constants)
        if mutable is not None:
            self.mutable.append(np.ascontiguousarray(mutable).tobytes())
            data_idx = len(self.mutable)
            extra = S.ExtraTensorInfo(mutable_data_segments_idx=0, fully_qualified_name="state",
                                      location=S.TensorDataLocation.SEGMENT)
        order = list(dim_order) if dim_order is not None else list(range(len(sizes)))
        return self.add_value(S.Tensor(
            scalar_type=dtype, storage_offset=0, sizes=list(sizes), dim_order=order, requires_grad=False,
            data_buffer_idx=data_idx, allocation_info=alloc, layout=0,
            shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND if dynamic else S.TensorShapeDynamism.STATIC,
            extra_tensor_info=extra))

    def alias(self, index, sizes, *, dynamic=False):
        """Another tensor value at the same planned bytes as tensor `index`."""
        source = self.values[index].val
        return self.add_value(S.Tensor(
            scalar_type=source.scalar_type, storage_offset=0, sizes=list(sizes),
            dim_order=list(range(len(sizes))), requires_grad=False, data_buffer_idx=0,
            allocation_info=source.allocation_info, layout=0,
            shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND if dynamic else S.TensorShapeDynamism.STATIC,
            extra_tensor_info=None))

    def int(self, value):
        return self.add_value(S.Int(int_val=value))

    def double(self, value):
        return self.add_value(S.Double(double_val=value))

    def bool(self, value):
        return self.add_value(S.Bool(bool_val=value))

    def int_list(self, items):
        return self.add_value(S.IntList(items=list(items)))

    def tensor_list(self, items):
        return self.add_value(S.TensorList(items=list(items)))

    def op(self, name, overload):
        key = S.Operator(name=name, overload=overload)
        if key not in self.operators:
            self.operators.append(key)
        return self.operators.index(key)

    def call(self, qualified, *args):
        name, _, overload = qualified.partition(".")
        self.instructions.append(S.Instruction(instr_args=S.KernelCall(op_index=self.op(name, overload),
                                                                       args=list(args))))
        return len(self.instructions) - 1

    def jump_false(self, cond, destination):
        self.instructions.append(S.Instruction(instr_args=S.JumpFalseCall(cond_value_index=cond,
                                                                          destination_instruction=destination)))

    def move(self, source, destination):
        self.instructions.append(S.Instruction(instr_args=S.MoveCall(move_from=source, move_to=destination)))

    def delegate(self, backend_id, blob, *args):
        self.blobs.append(blob)
        self.delegates.append(S.BackendDelegate(
            id=backend_id, processed=S.BackendDelegateDataReference(location=S.DataLocation.SEGMENT,
                                                                    index=len(self.blobs) - 1),
            compile_specs=[S.CompileSpec(key="mode", value=b"fast")]))
        self.instructions.append(S.Instruction(instr_args=S.DelegateCall(delegate_index=len(self.delegates) - 1,
                                                                         args=list(args))))

    def plan(self):
        return S.ExecutionPlan(
            name=self.name, container_meta_type=S.ContainerMetadata(encoded_inp_str="", encoded_out_str=""),
            values=self.values, inputs=self.inputs, outputs=self.outputs,
            chains=[S.Chain(inputs=self.inputs, outputs=self.outputs, instructions=self.instructions,
                            stacktrace=getattr(self, "stacktrace", None))],
            operators=self.operators, delegates=self.delegates, non_const_buffer_sizes=[0, max(self.arena, 16)])

    def pte(self, *others):
        pte = PteFile(program=S.Program(version=0, execution_plan=[self.plan()] + [o.plan() for o in others],
                                        constant_buffer=[], backend_delegate_data=[], segments=[],
                                        constant_segment=None, mutable_data_segments=[], named_data=[]))
        for builder in (self, *others):
            for data in builder.constants:
                pte.add_constant(data)
            for blob in builder.blobs:
                pte.add_delegate_blob(blob)
        if self.mutable:
            pte.mutable_data = [list(self.mutable)]
        return pte

    def load(self, *others):
        """Through the wire format, as a user's file would come."""
        return Runtime.get().load_program(serialize_pte(self.pte(*others)))


def f32(*values):
    return np.array(values, dtype=np.float32)
