"""Hand-built programs for the schema tests (a helper module beside the tests, like kernel_cases.py).

- `add_constant_program()`: runnable by any ExecuTorch-compatible runtime:
  out = x + c * alpha with one `aten::add.out` kernel call, x and out planned in
  arena 1, c a constant in the constant segment.
- `every_feature_program()`: not meant to run; touches every table, union member,
  instruction kind, delegate placement and segment kind of the format, so a
  round trip covers the whole schema.
"""

from __future__ import annotations

import numpy as np

from etc import schema as S

ADD_CONSTANT = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5


def float_tensor(sizes, *, data_buffer_idx=0, allocation=None, dynamism=S.TensorShapeDynamism.STATIC):
    return S.Tensor(scalar_type=S.ScalarType.FLOAT, sizes=list(sizes), dim_order=list(range(len(sizes))),
                    data_buffer_idx=data_buffer_idx, allocation_info=allocation, shape_dynamism=dynamism)


def add_constant_program(alpha: int = 1) -> S.PteFile:
    pte = S.PteFile(program=S.Program(version=S.SCHEMA_VERSION))
    constant = pte.add_constant(ADD_CONSTANT.tobytes())
    values = [
        S.EValue(float_tensor([2, 3], allocation=S.AllocationDetails.at(1, 0))),    # 0: x (input)
        S.EValue(float_tensor([2, 3], data_buffer_idx=constant)),                   # 1: c
        S.EValue(S.Int(int_val=alpha)),                                             # 2: alpha
        S.EValue(float_tensor([2, 3], allocation=S.AllocationDetails.at(1, 32))),   # 3: out
    ]
    plan = S.ExecutionPlan(
        name="forward",
        container_meta_type=S.ContainerMetadata(encoded_inp_str="", encoded_out_str=""),
        values=values,
        inputs=[0],
        outputs=[3],
        chains=[S.Chain(inputs=[0], outputs=[3], instructions=[
            # add.out(self, other, *, alpha, out) -> out: schema arguments, then the return value.
            S.Instruction(S.KernelCall(op_index=0, args=[0, 1, 2, 3, 3])),
        ])],
        operators=[S.Operator(name="aten::add", overload="out")],
        delegates=[],
        non_const_buffer_sizes=[0, 64],
    )
    pte.program.execution_plan = [plan]
    return pte


def every_feature_program() -> S.PteFile:
    pte = S.PteFile(program=S.Program(version=S.SCHEMA_VERSION))
    weight = pte.add_constant(np.ones((4, 4), np.float32).tobytes())
    small = pte.add_constant(np.array([7], np.int8).tobytes())
    pte.mutable_data = [[np.zeros(3, np.int64).tobytes()], [np.full(2, 9, np.int16).tobytes()]]
    pte.named_data = {"weights.shared": b"\x01\x02\x03", "other": bytes(range(40))}
    pte.program.backend_delegate_data = [S.BackendDelegateInlineData(data=b"inline-blob")]
    segment_ref = pte.add_delegate_blob(b"segment-blob" * 3)
    big_offset = S.AllocationDetails.at(2, (1 << 32) + 16)
    values = [
        S.EValue(S.Null()),                                                          # 0
        S.EValue(S.Int(int_val=-(1 << 62))),                                         # 1
        S.EValue(S.Bool(bool_val=True)),                                             # 2
        S.EValue(S.Double(double_val=-2.5)),                                         # 3
        S.EValue(float_tensor([4, 4], data_buffer_idx=weight)),                      # 4 constant
        S.EValue(S.String(string_val="naïve ✓")),                                    # 5
        S.EValue(S.IntList(items=[1, 1])),                                           # 6
        S.EValue(S.DoubleList(items=[0.5, -1e300])),                                 # 7
        S.EValue(S.BoolList(items=[True, False, True])),                             # 8
        S.EValue(S.TensorList(items=[4, 15])),                                       # 9
        S.EValue(S.OptionalTensorList(items=[4, -1, 0])),                            # 10
        S.EValue(S.Tensor(scalar_type=S.ScalarType.LONG, sizes=[3], dim_order=[0], data_buffer_idx=1,
                          allocation_info=S.AllocationDetails.at(1, 0))),           # 11 mutable, segment 0
        S.EValue(S.Tensor(scalar_type=S.ScalarType.SHORT, sizes=[2], dim_order=[0], data_buffer_idx=1,
                          allocation_info=S.AllocationDetails.at(1, 32),
                          extra_tensor_info=S.ExtraTensorInfo(mutable_data_segments_idx=1,
                                                              fully_qualified_name="state.counter"))),  # 12
        S.EValue(S.Tensor(scalar_type=S.ScalarType.FLOAT, sizes=[8, 2, 3], dim_order=[0, 2, 1],
                          allocation_info=big_offset,
                          shape_dynamism=S.TensorShapeDynamism.DYNAMIC_BOUND)),      # 13 planned, high offset
        S.EValue(S.Tensor(scalar_type=S.ScalarType.BFLOAT16, sizes=[5], dim_order=[0],
                          extra_tensor_info=S.ExtraTensorInfo(location=S.TensorDataLocation.EXTERNAL,
                                                              fully_qualified_name="lm_head.weight",
                                                              device_type=S.DeviceType.CUDA,
                                                              device_index=1))),     # 14 external
        S.EValue(S.Tensor(scalar_type=S.ScalarType.CHAR, sizes=[1], dim_order=[0], data_buffer_idx=small)),  # 15
    ]
    instructions = [
        S.Instruction(S.KernelCall(op_index=0, args=[4, 6, 13, 13])),
        S.Instruction(S.DelegateCall(delegate_index=0, args=[4, 13])),
        S.Instruction(S.DelegateCall(delegate_index=1, args=[13, 13])),
        S.Instruction(S.MoveCall(move_from=13, move_to=11)),
        S.Instruction(S.JumpFalseCall(cond_value_index=2, destination_instruction=6)),
        S.Instruction(S.FreeCall(value_index=13)),
    ]
    frames = [S.FrameList(items=[S.Frame(filename="model.py", lineno=i + 10, name="forward", context="x + y")])
              for i in range(len(instructions))]
    main = S.ExecutionPlan(
        name="forward",
        container_meta_type=S.ContainerMetadata(encoded_inp_str="[1, {}]", encoded_out_str="[1]"),
        values=values,
        inputs=[13],
        outputs=[13, 11],
        chains=[S.Chain(inputs=[13], outputs=[13], instructions=instructions, stacktrace=frames)],
        operators=[S.Operator(name="aten::mul", overload="out")],
        delegates=[
            S.BackendDelegate(id="InlineBackend",
                              processed=S.BackendDelegateDataReference(location=S.DataLocation.INLINE, index=0),
                              compile_specs=[S.CompileSpec(key="level", value=[3]), S.CompileSpec(key="empty", value=b"")]),
            S.BackendDelegate(id="SegmentBackend", processed=segment_ref, compile_specs=[]),
        ],
        non_const_buffer_sizes=[0, 64, (1 << 32) + 1024],
        non_const_buffer_device=[S.NonConstBufferDevice(buffer_idx=2, device_type=S.DeviceType.CUDA,
                                                        device_index=0)],
    )
    second = S.ExecutionPlan(name="reset", values=[S.EValue(S.Int(int_val=0))], inputs=[], outputs=[0],
                             chains=[S.Chain(instructions=[])], operators=[], delegates=[],
                             non_const_buffer_sizes=[0])
    pte.program.execution_plan = [main, second]
    return pte
