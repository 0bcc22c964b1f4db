"""The .pte schema: round trips, file layout (header, segments, alignment), and the errors
the serializer and the validating reader give, each naming the field at fault."""

from __future__ import annotations

import copy
import math
import os
import struct

import flatbuffers
import numpy as np
import pytest

from pte_samples import ADD_CONSTANT, add_constant_program, every_feature_program
from etc import schema as S
from etc.errors import ProgramError, SerializationError

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "data", "executorch_linear_relu.pte")


def header(data: bytes) -> dict:
    root, ident, magic, size, program_size, base, seg_size = struct.unpack_from("<I4s4sIQQQ", data, 0)
    return dict(root=root, ident=ident, magic=magic, size=size, program_size=program_size, base=base,
                seg_size=seg_size)


def wire_program(data: bytes) -> S.Program:
    """The program as on the wire (segment tables intact), read by the checked reader."""
    from etc.schema.reader import FlatbufferReader, read_headers

    program_size, _, _ = read_headers(data)
    return FlatbufferReader(data, program_size).table(S.Program, header(data)["root"], "Program")


def without_checksums(pte: S.PteFile) -> S.PteFile:
    """`pte` written without etc's checksum trailer (as ExecuTorch writes): the structural checks alone."""
    pte.checksums = False
    return pte


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("make", [add_constant_program, every_feature_program])
def test_round_trip_is_exact(make):
    pte = make()
    data = S.serialize_pte(pte)
    assert S.deserialize_pte(data) == pte
    assert S.serialize_pte(S.deserialize_pte(data)) == data


def test_executorch_file_reserializes_byte_for_byte():
    original = open(FIXTURE, "rb").read()
    pte = S.deserialize_pte(original)
    plan = pte.program.execution_plan[0]
    assert plan.name == "forward"
    assert [(o.name, o.overload) for o in plan.operators][:2] == [("aten::permute_copy", "out"), ("aten::addmm", "out")]
    assert S.serialize_pte(pte) == original


def test_every_union_member_and_instruction_kind_is_covered():
    plan = every_feature_program().program.execution_plan[0]
    assert {type(v.val).__name__ for v in plan.values} == set(S.program.KERNEL_TYPES)
    kinds = {type(i.instr_args).__name__ for i in plan.chains[0].instructions}
    assert kinds == set(S.program.INSTRUCTION_ARGUMENTS)


def test_absent_and_empty_vectors_stay_distinct():
    pte = add_constant_program()
    pte.program.execution_plan[0].delegates = None
    pte.program.execution_plan[0].chains[0].stacktrace = []
    back = S.deserialize_pte(S.serialize_pte(pte)).program.execution_plan[0]
    assert back.delegates is None and back.chains[0].stacktrace == []


# ---------------------------------------------------------------------- layout
def test_extended_header_and_segment_layout():
    pte = every_feature_program()
    data = S.serialize_pte(pte, segment_alignment=4096, constant_tensor_alignment=64)
    h = header(data)
    assert (h["ident"], h["magic"], h["size"]) == (b"ET12", b"eh00", 32)
    assert h["base"] % 4096 == 0 and h["base"] >= h["program_size"]
    wire = wire_program(data)
    last = wire.segments[-1]
    # etc's checksum trailer (a CRC per segment) follows the segment data, where ExecuTorch never reads.
    trailer = 16 + 4 * (1 + len(wire.segments)) + 4
    assert h["seg_size"] == last.offset + last.size and len(data) == h["base"] + h["seg_size"] + trailer
    assert data[-8:] == b"etcSUMS1"
    assert all(segment.offset % 4096 == 0 for segment in wire.segments)
    # Constant tensors sit at their aligned offsets, offsets[0] reserved.
    constant_segment = wire.constant_segment
    assert constant_segment.offsets[0] == 0
    start = h["base"] + wire.segments[constant_segment.segment_index].offset
    for index, expected in enumerate(pte.constant_data, start=1):
        offset = constant_segment.offsets[index]
        assert offset % 64 == 0
        assert data[start + offset:start + offset + len(expected)] == expected
    # Delegate references on the wire index Program.segments.
    ref = wire.execution_plan[0].delegates[1].processed
    segment = wire.segments[ref.index]
    assert data[h["base"] + segment.offset:][:segment.size] == pte.delegate_segments[0]


@pytest.mark.parametrize("delegate_alignment", [None, 64])
def test_inline_delegate_data_is_force_aligned(delegate_alignment):
    data = S.serialize_pte(every_feature_program(), delegate_alignment=delegate_alignment)
    assert data.index(b"inline-blob") % (delegate_alignment or 16) == 0
    assert header(data)["program_size"] % (delegate_alignment or 16) == 0


def test_program_without_constants_has_an_empty_constant_segment():
    # As ExecuTorch writes it: the stock runtime reads a missing constant segment as the legacy path.
    pte = add_constant_program()
    pte.constant_data = []
    pte.program.execution_plan[0].values[1] = S.EValue(S.Int(int_val=0))
    data = S.serialize_pte(pte)
    wire = wire_program(data)
    assert wire.constant_segment.offsets == [0] and wire.segments == [S.DataSegment(offset=0, size=0)]
    assert header(data)["base"] >= header(data)["program_size"] and header(data)["seg_size"] == 0
    assert S.deserialize_pte(data) == pte


def test_legacy_inline_constant_buffer_is_read():
    pte = add_constant_program()
    pte.program.constant_buffer = [S.Buffer(storage=b""), S.Buffer(storage=ADD_CONSTANT.tobytes())]
    pte.constant_data = []
    data = S.serialize_pte(pte, constant_tensor_alignment=32)
    # No segments at all: only the program data's checksum follows it.
    assert header(data)["base"] == 0 and header(data)["program_size"] == len(data) - (16 + 4 + 4)
    assert data.index(ADD_CONSTANT.tobytes()) % 32 == 0
    back = S.deserialize_pte(data)
    assert back.program.constant_buffer[1].storage == ADD_CONSTANT.tobytes() and back == pte
    pte.constant_data = [b"x"]
    with pytest.raises(SerializationError, match="both in Program.constant_buffer"):
        S.serialize_pte(pte)


def test_pte_file_helpers():
    pte = every_feature_program()
    plan = pte.program.execution_plan[0]
    assert pte.delegate_blob(plan.delegates[0].processed) == b"inline-blob"
    assert pte.delegate_blob(plan.delegates[1].processed) == b"segment-blob" * 3
    assert pte.constant(2) == np.array([7], np.int8).tobytes()
    assert pte.mutable_initial_state(plan.values[12].val) == np.full(2, 9, np.int16).tobytes()
    assert plan.values[13].val.allocation_info.memory_offset == (1 << 32) + 16


# ---------------------------------------------------------------- dtype helpers
def test_scalar_type_helpers():
    import torch

    for scalar_type in S.ScalarType:
        assert S.element_size(scalar_type) == S.to_numpy_dtype(scalar_type).itemsize
    for dtype in (np.float32, np.int64, np.bool_, np.uint8, np.int8, np.float16, np.uint16):
        assert S.to_numpy_dtype(S.from_numpy_dtype(dtype)) == np.dtype(dtype)
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float16, torch.uint8):
        assert S.to_torch_dtype(S.from_torch_dtype(dtype)) is dtype
        assert S.element_size(S.from_torch_dtype(dtype)) == dtype.itemsize
    assert S.to_numpy_dtype(S.ScalarType.BFLOAT16) == np.uint16
    with pytest.raises(SerializationError, match="complex64"):
        S.from_numpy_dtype(np.complex64)


# ------------------------------------------------------------ serializer errors
def _broken(mutate) -> S.PteFile:
    pte = add_constant_program()
    mutate(pte, pte.program.execution_plan[0])
    return pte


@pytest.mark.parametrize("mutate, message", [
    (lambda f, p: setattr(p.values[2].val, "int_val", 1 << 70),
     r"execution_plan\[0\]\.values\[2\]\.val\(Int\)\.int_val: .* does not fit"),
    (lambda f, p: setattr(p.values[0].val, "sizes", [2, "3"]), r"values\[0\]\.val\(Tensor\)\.sizes\[1\]"),
    (lambda f, p: setattr(p.values[0], "val", S.Operator(name="x")), r"Operator is not one of Null, Int"),
    (lambda f, p: setattr(p.values[0].val, "scalar_type", 9), r"scalar_type: 9 is not a ScalarType"),
    (lambda f, p: setattr(p, "operators", [S.Int()]), r"operators\[0\]: expected Operator, got Int"),
    (lambda f, p: setattr(p, "name", b"forward"), r"execution_plan\[0\]\.name: expected a str, got bytes"),
    (lambda f, p: setattr(f.program, "segments", [S.DataSegment()]), r"Program.segments is computed"),
    (lambda f, p: setattr(f.program, "constant_segment", S.SubsegmentOffsets()), r"constant_segment is computed"),
    (lambda f, p: setattr(p, "delegates", [S.BackendDelegate(
        id="x", processed=S.BackendDelegateDataReference(location=S.DataLocation.SEGMENT, index=2))]),
     r"delegates\[0\]\.processed: delegate segment 2 does not exist"),
])
def test_serializer_names_the_bad_field(mutate, message):
    with pytest.raises(SerializationError, match=message):
        S.serialize_pte(_broken(mutate))


@pytest.mark.parametrize("option", ["segment_alignment", "constant_tensor_alignment", "delegate_alignment"])
def test_alignments_must_be_powers_of_two(option):
    with pytest.raises(SerializationError, match=f"{option} must be a power of two"):
        S.serialize_pte(add_constant_program(), **{option: 48})


# ------------------------------------------------------------ structural errors
def test_reader_rejects_bad_headers():
    data = bytearray(S.serialize_pte(without_checksums(add_constant_program())))
    with pytest.raises(ProgramError, match="too short"):
        S.deserialize_pte(data[:5])
    with pytest.raises(ProgramError, match="not a program file identifier"):
        S.deserialize_pte(b"\0\0\0\0XX12" + data[8:])
    with pytest.raises(ProgramError, match="truncated inside the extended header"):
        S.deserialize_pte(data[:20])
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 16, len(data) + 1)
    with pytest.raises(ProgramError, match=rf"program size {len(data) + 1} is outside .*file truncated"):
        S.deserialize_pte(bad)
    bad = bytearray(data)
    struct.pack_into("<I", bad, 0, len(data) * 2)
    with pytest.raises(ProgramError, match="root offset"):
        S.deserialize_pte(bad)
    with pytest.raises(ProgramError, match=r"segment data ends at byte .*file truncated"):
        S.deserialize_pte(data[:-1])


def test_reader_caps_vector_lengths_by_the_bytes_left():
    pte = add_constant_program()
    pte.program.execution_plan[0].values[0].val.sizes = [0x5EB7A1, 3]
    data = bytearray(S.serialize_pte(without_checksums(pte)))
    at = data.index(struct.pack("<ii", 0x5EB7A1, 3)) - 4
    struct.pack_into("<I", data, at, 0x7FFFFFFF)
    with pytest.raises(ProgramError, match=r"values\[0\]\.val\(Tensor\)\.sizes: vector at byte .* claims 2147483647"):
        S.deserialize_pte(data)


def _raw_program(tag: int, scalar_type: int) -> bytes:
    """Program{plan "forward" with one EValue of union tag `tag` holding a Tensor of `scalar_type`},
    written with the plain flatbuffers Builder, so values our serializer refuses can be encoded."""
    b = flatbuffers.Builder(256)
    sizes = b.CreateNumpyVector(np.array([1], np.int32))
    b.StartObject(10)
    b.PrependInt8Slot(0, scalar_type, 0)
    b.PrependUOffsetTRelativeSlot(2, sizes, 0)
    tensor = b.EndObject()
    b.StartObject(2)
    b.PrependUint8Slot(0, tag, 0)
    b.PrependUOffsetTRelativeSlot(1, tensor, 0)
    evalue = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(evalue)
    values = b.EndVector()
    name = b.CreateString("forward")
    b.StartObject(10)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(2, values, 0)
    plan = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(plan)
    plans = b.EndVector()
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(1, plans, 0)
    b.Finish(b.EndObject(), file_identifier=b"ET12")
    return bytes(b.Output())


def test_raw_builder_program_is_read():
    pte = S.deserialize_pte(_raw_program(5, int(S.ScalarType.FLOAT)))
    assert pte.program.execution_plan[0].values[0].val == S.Tensor(scalar_type=S.ScalarType.FLOAT, sizes=[1])


def test_reader_rejects_unknown_union_tags_and_enum_values():
    with pytest.raises(ProgramError, match=r"values\[0\]\.val: union type tag 12 .* not one of 0..11"):
        S.deserialize_pte(_raw_program(12, int(S.ScalarType.FLOAT)))
    with pytest.raises(ProgramError, match=r"val\(Tensor\)\.scalar_type: 9 is not a valid ScalarType"):
        S.deserialize_pte(_raw_program(5, 9))


# -------------------------------------------------------------- semantic errors
@pytest.mark.parametrize("mutate, message", [
    (lambda f, p: setattr(p.chains[0].instructions[0].instr_args, "args", [0, 1, 2, 3, 99]),
     r"chains\[0\]\.instructions\[0\]\.instr_args\(KernelCall\)\.args\[4\]: value index 99 is out of range"),
    (lambda f, p: setattr(p.chains[0].instructions[0].instr_args, "op_index", 1), r"op_index: operator 1 does not"),
    (lambda f, p: setattr(p.chains[0].instructions[0], "instr_args", S.DelegateCall(delegate_index=0)),
     r"delegate_index: delegate 0 does not exist"),
    (lambda f, p: setattr(p.chains[0].instructions[0], "instr_args", S.JumpFalseCall(2, 5)),
     r"cond_value_index: value 2 is a Int, expected Bool or Tensor"),
    (lambda f, p: setattr(p.chains[0].instructions[0], "instr_args", S.FreeCall(value_index=-1)),
     r"FreeCall\)\.value_index: value index -1"),
    (lambda f, p: setattr(p.chains[0].instructions[0], "instr_args", None), r"instruction has no arguments"),
    (lambda f, p: setattr(p, "inputs", [4]), r"inputs\[0\]: value index 4 is out of range"),
    (lambda f, p: setattr(p, "inputs", [1]), r"inputs\[0\]: value 1 is a constant tensor"),  # found by the fuzzer
    (lambda f, p: setattr(p.values[2], "val", None), r"values\[2\]\.val: value has no type"),
    (lambda f, p: setattr(p.values[0].val.allocation_info, "memory_id", 0), r"memory id 0 names no planned arena"),
    (lambda f, p: setattr(p.values[3].val.allocation_info, "memory_offset_low", 48),
     r"bytes 48..72 overflow arena 1 of 64 bytes"),
    (lambda f, p: setattr(p.values[0].val, "dim_order", [0, 0]), r"dim_order: \[0, 0\] is not a permutation"),
    (lambda f, p: setattr(p.values[0].val, "sizes", [2, -3]), r"sizes\[1\]: negative size -3"),
    (lambda f, p: setattr(p.values[1].val, "data_buffer_idx", 2), r"constant 2 does not exist"),
    (lambda f, p: setattr(f, "constant_data", [b"\0" * 8]), r"buffer 1 has 8 bytes, the tensor needs 24"),
    (lambda f, p: setattr(p.values[2], "val", S.TensorList(items=[2])), r"value 2 is a TensorList, expected Tensor"),
    (lambda f, p: setattr(p.values[2], "val", S.IntList(items=[0])), r"value 0 is a Tensor, expected Int"),
    (lambda f, p: setattr(p, "name", None), r"execution plan has no name"),
    (lambda f, p: setattr(p, "non_const_buffer_sizes", [0, -64]), r"negative arena size"),
])
def test_reader_validates_meaning(mutate, message):
    data = S.serialize_pte(_broken(mutate))
    with pytest.raises(ProgramError, match=message):
        S.deserialize_pte(data)
    S.deserialize_pte(data, validate=False)  # the bytes themselves are sound


def test_validation_of_in_memory_programs():
    S.validate_pte(every_feature_program())
    pte = every_feature_program()
    pte.program.execution_plan[0].delegates[0].processed.index = 3
    with pytest.raises(ProgramError, match=r"delegates\[0\]\.processed\.index: inline delegate data 3"):
        S.validate_pte(pte)
    with pytest.raises(ProgramError, match="no methods"):
        S.validate_pte(S.PteFile(program=S.Program(execution_plan=[])))


def test_nbytes_of_tensors():
    assert S.tensor_nbytes(S.Tensor(scalar_type=S.ScalarType.HALF, sizes=[3, 5])) == 30
    assert S.tensor_nbytes(S.Tensor(sizes=[4], shape_dynamism=S.TensorShapeDynamism.DYNAMIC_UNBOUND)) is None
    assert S.tensor_nbytes(S.Tensor(scalar_type=S.ScalarType.LONG, sizes=[])) == 8


# ------------------------------------------------------------------- checksums
def _flip(data: bytes, position: int) -> bytes:
    corrupted = bytearray(data)
    corrupted[position] ^= 0x10
    return bytes(corrupted)


def test_a_flipped_weight_is_refused_naming_the_constant_segment():
    """Without checksums a flipped bit inside a constant loads fine and computes wrong (the issue-11 defect)."""
    data = S.serialize_pte(add_constant_program())
    corrupted = _flip(data, data.index(ADD_CONSTANT.tobytes()) + 5)
    with pytest.raises(ProgramError, match=r"Program\.segments\[0\] \(constant data\): checksum mismatch"):
        S.deserialize_pte(corrupted)
    unchecked = S.deserialize_pte(corrupted, verify_checksums=False)
    assert unchecked.constant(1) != ADD_CONSTANT.tobytes()


@pytest.mark.parametrize("payload, role", [
    (b"segment-blob", r"blob of delegate 1 \('SegmentBackend'\) of method 'forward'"),
    (np.full(2, 9, np.int16).tobytes(), "mutable data segment 1"),
    (bytes(range(40)), "named data 'other'"),
])
def test_every_segment_is_checked_and_named(payload, role):
    data = S.serialize_pte(every_feature_program())
    with pytest.raises(ProgramError, match=rf"Program\.segments\[\d+\] \({role}\): checksum mismatch"):
        S.deserialize_pte(_flip(data, data.index(payload) + 1))


def test_the_program_data_is_checked_before_it_is_decoded():
    data = S.serialize_pte(add_constant_program(alpha=3))
    # alpha lives in the flatbuffer (an Int EValue): structurally fine either way.
    at = data.index(struct.pack("<q", 3))
    corrupted = _flip(data, at)
    with pytest.raises(ProgramError, match=r"program data \(bytes 0\.\.\d+: headers and flatbuffer\): checksum"):
        S.deserialize_pte(corrupted)
    value = S.deserialize_pte(corrupted, verify_checksums=False).program.execution_plan[0].values[2].val
    assert value.int_val != 3


def test_a_damaged_or_foreign_trailer_is_refused():
    data = S.serialize_pte(add_constant_program())
    with pytest.raises(ProgramError, match="its own checksum does not match"):
        S.deserialize_pte(_flip(data, len(data) - 10))  # the trailer's own CRC
    with pytest.raises(ProgramError, match="unexpected bytes after the program's data"):
        S.deserialize_pte(_flip(data, len(data) - 3))  # its magic: no longer a trailer
    with pytest.raises(ProgramError, match="unexpected bytes after the program's data"):
        S.deserialize_pte(data[:-1])
    # Bytes appended to an ExecuTorch file would be silently ignored by a reader that trusts them away.
    original = open(FIXTURE, "rb").read()
    with pytest.raises(ProgramError, match="unexpected bytes after the program's data"):
        S.deserialize_pte(original + b"\0" * 8)


def test_a_header_that_hides_the_trailer_is_refused():
    """Found by the fuzzer: one flipped bit moved the segment base so that the segment data seemed to end
    where the file ends; the trailer looked absent, nothing was checked, the state was read shifted."""
    data = S.serialize_pte(add_constant_program())
    h = header(data)
    trailer = len(data) - h["base"] - h["seg_size"]
    for field_offset, value in ((24, h["base"] + trailer), (32, h["seg_size"] + trailer)):
        bad = bytearray(data)
        struct.pack_into("<Q", bad, field_offset, value)
        with pytest.raises(ProgramError, match=r"checksum trailer begins at byte \d+ but the extended header says"):
            S.deserialize_pte(bytes(bad))
    bad = bytearray(data)
    bad[8:12] = b"xx00"  # no header any more
    with pytest.raises(ProgramError, match="ends in an etc checksum trailer but has no extended header"):
        S.deserialize_pte(bytes(bad))


def test_executorch_files_have_no_trailer_and_round_trip():
    original = open(FIXTURE, "rb").read()
    pte = S.deserialize_pte(original)
    assert pte.checksums is False and S.serialize_pte(pte) == original
    pte.checksums = True
    checked = S.serialize_pte(pte)
    assert checked.startswith(original) and S.deserialize_pte(checked).checksums is True


def test_a_program_cut_exactly_before_its_trailer_is_the_same_program():
    data = S.serialize_pte(add_constant_program())
    h = header(data)
    bare = S.deserialize_pte(data[:h["base"] + h["seg_size"]])
    assert bare.checksums is False
    bare.checksums = True
    assert bare == add_constant_program()


def test_empty_segments_without_an_extended_header_load():
    """ExecuTorch writes a program without constants as segments=[DataSegment(0, 0)] and no extended
    header (a weightless model, torch.cond programs, external_constants=True)."""
    pte = add_constant_program()
    pte.constant_data = []
    pte.program.execution_plan[0].values[1] = S.EValue(S.Int(int_val=0))
    pte.checksums = False
    data = S.serialize_pte(pte)
    h = header(data)
    assert len(data) == h["base"] + h["seg_size"] and h["seg_size"] == 0
    # Cut the header and the segment padding out, as ExecuTorch's writer leaves them.
    root = h["root"] - h["size"]
    headerless = struct.pack("<I", root) + data[4:8] + data[8 + h["size"]:h["program_size"]]
    back = S.deserialize_pte(headerless)
    assert back.constant_data == [] and back.program.execution_plan == pte.program.execution_plan
    # A segment with bytes still needs the header that locates them.
    pte.constant_data = [b"\1" * 8]
    data = S.serialize_pte(pte)
    h = header(data)
    headerless = struct.pack("<I", h["root"] - h["size"]) + data[4:8] + data[8 + h["size"]:h["program_size"]]
    with pytest.raises(ProgramError, match=r"Program\.segments\[0\]: 8 bytes, but the program has no extended"):
        S.deserialize_pte(headerless)


def test_constants_both_inline_and_in_a_segment_are_refused():
    """Found by the fuzzer: a corrupted file held both; it loaded, and then could not be written back."""
    pte = add_constant_program()
    pte.program.constant_buffer = [S.Buffer(storage=b""), S.Buffer(storage=ADD_CONSTANT.tobytes())]
    with pytest.raises(ProgramError, match="constants both inline .legacy. and in the constant segment"):
        S.validate_pte(pte)
