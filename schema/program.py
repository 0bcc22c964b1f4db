"""The `.pte` program as Python dataclasses, wire-compatible with ExecuTorch.

One dataclass per table of ExecuTorch's `program.fbs` (namespace
`executorch_flatbuffer`), with the same names, fields and field order: the
order of the fields below is the flatbuffer vtable order, so it must never be
changed, only appended to (as ExecuTorch does). Each field's wire kind lives in
its metadata (`etc.schema.kinds`), which drives both the serializer and the
validating reader; `schema/program.fbs` is the same schema as text.

Unions are plain attributes holding one of their member dataclasses:
`EValue.val` is a `Null | Int | ... | OptionalTensorList`, `Instruction.instr_args`
a `KernelCall | ... | FreeCall`.

`PteFile` is what producers and consumers handle: a `Program` plus the segment
payloads (constant tensor bytes, delegate blobs, mutable initial state, named
data), so that nobody outside the serializer computes a file offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from etc.schema.kinds import (BOOL, BYTE, DOUBLE, INT, LONG, UBYTE, UINT, ULONG, Blob, Scalar, SchemaTable, Str,
                              Table, Union, Vector, fb)

# The version ExecuTorch writes in Program.version (exir/version.py).
SCHEMA_VERSION = 0
# The flatbuffer file identifier of program.fbs.
FILE_IDENTIFIER = b"ET12"
# The default force_align of Buffer.storage and BackendDelegateInlineData.data.
DEFAULT_INLINE_ALIGNMENT = 16


# ----------------------------------------------------------------------- enums
class ScalarType(IntEnum):
    """Element types (scalar_type.fbs); 8-10 (complex) and 18-21 are not implemented upstream."""

    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


class TensorShapeDynamism(IntEnum):
    """STATIC: sizes are the shape; DYNAMIC_BOUND: sizes are an upper bound; DYNAMIC_UNBOUND: ignore sizes."""

    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class TensorDataLocation(IntEnum):
    """Where a tensor's data lives: in a segment of this file, or in external (.ptd) data keyed by FQN."""

    SEGMENT = 0
    EXTERNAL = 1


class DataLocation(IntEnum):
    """Where delegate data lives: INLINE in Program.backend_delegate_data, or in Program.segments."""

    INLINE = 0
    SEGMENT = 1


class DeviceType(IntEnum):
    CPU = 0
    CUDA = 1


SCALAR_TYPE = Scalar("b", ScalarType)
SHAPE_DYNAMISM = Scalar("b", TensorShapeDynamism)
TENSOR_DATA_LOCATION = Scalar("b", TensorDataLocation)
DATA_LOCATION = Scalar("b", DataLocation)
DEVICE_TYPE = Scalar("b", DeviceType)


# ---------------------------------------------------------------------- tables
@dataclass
class ContainerMetadata(SchemaTable):
    """Pytree specs to (un)flatten the method's inputs and outputs."""

    encoded_inp_str: str | None = fb(Str())
    encoded_out_str: str | None = fb(Str())


@dataclass
class Null(SchemaTable):
    pass


@dataclass
class AllocationDetails(SchemaTable):
    """Where a planned tensor lives: arena `memory_id` (1-based), byte offset high<<32 | low."""

    memory_id: int = fb(UINT)
    memory_offset_low: int = fb(UINT)
    memory_offset_high: int = fb(UINT)

    @property
    def memory_offset(self) -> int:
        return (self.memory_offset_high << 32) | self.memory_offset_low

    @classmethod
    def at(cls, memory_id: int, offset: int) -> "AllocationDetails":
        """Allocation in arena `memory_id` at byte `offset`, split into the two 32-bit halves."""
        return cls(memory_id=memory_id, memory_offset_low=offset & 0xFFFFFFFF, memory_offset_high=offset >> 32)


@dataclass
class ExtraTensorInfo(SchemaTable):
    mutable_data_segments_idx: int = fb(ULONG)
    fully_qualified_name: str | None = fb(Str())
    location: TensorDataLocation = fb(TENSOR_DATA_LOCATION)
    device_type: DeviceType = fb(DEVICE_TYPE)
    device_index: int = fb(BYTE)


@dataclass
class Tensor(SchemaTable):
    """A tensor value. data_buffer_idx > 0 without allocation_info: constant; 0 with: planned;
    0 without: pointer supplied at execution; > 0 with: mutable with initial state. A planned
    tensor that names its buffer (`extra_tensor_info.fully_qualified_name`) is mutable state too,
    its initial state the zeros planned memory starts as (see `is_state`)."""

    scalar_type: ScalarType = fb(SCALAR_TYPE)
    storage_offset: int = fb(INT)
    sizes: list[int] | None = fb(Vector(INT))
    dim_order: list[int] | None = fb(Vector(UBYTE))
    requires_grad: bool = fb(BOOL)
    data_buffer_idx: int = fb(UINT)
    allocation_info: AllocationDetails | None = fb(Table("AllocationDetails"))
    layout: int = fb(BYTE)
    shape_dynamism: TensorShapeDynamism = fb(SHAPE_DYNAMISM)
    extra_tensor_info: ExtraTensorInfo | None = fb(Table("ExtraTensorInfo"))

    @property
    def is_state(self) -> bool:
        """Mutable state: planned storage that keeps its value from one execute to the next, with
        an initial state stored in a mutable data segment or, named but not stored, all zeros."""
        if self.allocation_info is None:
            return False
        info = self.extra_tensor_info
        return self.data_buffer_idx > 0 or (info is not None and bool(info.fully_qualified_name)
                                            and info.location != TensorDataLocation.EXTERNAL)


@dataclass
class Int(SchemaTable):
    int_val: int = fb(LONG)


@dataclass
class Bool(SchemaTable):
    bool_val: bool = fb(BOOL)


@dataclass
class Double(SchemaTable):
    double_val: float = fb(DOUBLE, 0.0)


@dataclass
class String(SchemaTable):
    string_val: str | None = fb(Str())


@dataclass
class IntList(SchemaTable):
    """A list of ints: in ExecuTorch these items are EValue indices of Int values."""

    items: list[int] | None = fb(Vector(LONG))


@dataclass
class DoubleList(SchemaTable):
    items: list[float] | None = fb(Vector(DOUBLE))


@dataclass
class BoolList(SchemaTable):
    items: list[bool] | None = fb(Vector(BOOL))


@dataclass
class TensorList(SchemaTable):
    """EValue indices of the member tensors (lists alias their members)."""

    items: list[int] | None = fb(Vector(INT))


@dataclass
class OptionalTensorList(SchemaTable):
    """EValue indices of the members; -1 is None."""

    items: list[int] | None = fb(Vector(INT))


KERNEL_TYPES = ("Null", "Int", "Bool", "Double", "Tensor", "String", "IntList", "DoubleList", "BoolList",
                "TensorList", "OptionalTensorList")


@dataclass
class EValue(SchemaTable):
    val: object | None = fb(Union(KERNEL_TYPES))


@dataclass
class Operator(SchemaTable):
    """A kernel by name and overload, e.g. ("aten::add", "out")."""

    name: str | None = fb(Str())
    overload: str | None = fb(Str())


@dataclass
class KernelCall(SchemaTable):
    """`args`: EValue indices of every schema argument (out= included), then the returned values."""

    op_index: int = fb(INT)
    args: list[int] | None = fb(Vector(INT))


@dataclass
class DelegateCall(SchemaTable):
    """`args`: EValue indices of the delegate's inputs, then its outputs."""

    delegate_index: int = fb(INT)
    args: list[int] | None = fb(Vector(INT))


@dataclass
class MoveCall(SchemaTable):
    move_from: int = fb(INT)
    move_to: int = fb(INT)


@dataclass
class JumpFalseCall(SchemaTable):
    cond_value_index: int = fb(INT)
    destination_instruction: int = fb(INT)


@dataclass
class FreeCall(SchemaTable):
    value_index: int = fb(INT)


INSTRUCTION_ARGUMENTS = ("KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall")


@dataclass
class Instruction(SchemaTable):
    instr_args: object | None = fb(Union(INSTRUCTION_ARGUMENTS))


@dataclass
class Frame(SchemaTable):
    filename: str | None = fb(Str())
    lineno: int = fb(INT)
    name: str | None = fb(Str())
    context: str | None = fb(Str())


@dataclass
class FrameList(SchemaTable):
    items: list[Frame] | None = fb(Vector(Table("Frame")))


@dataclass
class BackendDelegateDataReference(SchemaTable):
    """INLINE: index into Program.backend_delegate_data. SEGMENT: on the wire an index into
    Program.segments; inside a `PteFile`, an index into `PteFile.delegate_segments`."""

    location: DataLocation = fb(DATA_LOCATION)
    index: int = fb(UINT)


@dataclass
class CompileSpec(SchemaTable):
    key: str | None = fb(Str())
    value: bytes | None = fb(Blob())


@dataclass
class BackendDelegate(SchemaTable):
    """A lowered subgraph: backend `id` (e.g. "XnnpackBackend"), its blob, its compile specs."""

    id: str | None = fb(Str())
    processed: BackendDelegateDataReference | None = fb(Table("BackendDelegateDataReference"))
    compile_specs: list[CompileSpec] | None = fb(Vector(Table("CompileSpec")))


@dataclass
class Chain(SchemaTable):
    inputs: list[int] | None = fb(Vector(INT))
    outputs: list[int] | None = fb(Vector(INT))
    instructions: list[Instruction] | None = fb(Vector(Table("Instruction")))
    stacktrace: list[FrameList] | None = fb(Vector(Table("FrameList")))


@dataclass
class NonConstBufferDevice(SchemaTable):
    buffer_idx: int = fb(INT)
    device_type: DeviceType = fb(DEVICE_TYPE)
    device_index: int = fb(BYTE)


@dataclass
class ExecutionPlan(SchemaTable):
    """One method. `inputs` lists non-constant inputs only; `non_const_buffer_sizes[0]` is reserved
    and entry i >= 1 is the byte size of planned arena memory_id i."""

    name: str | None = fb(Str())
    container_meta_type: ContainerMetadata | None = fb(Table("ContainerMetadata"))
    values: list[EValue] | None = fb(Vector(Table("EValue")))
    inputs: list[int] | None = fb(Vector(INT))
    outputs: list[int] | None = fb(Vector(INT))
    chains: list[Chain] | None = fb(Vector(Table("Chain")))
    operators: list[Operator] | None = fb(Vector(Table("Operator")))
    delegates: list[BackendDelegate] | None = fb(Vector(Table("BackendDelegate")))
    non_const_buffer_sizes: list[int] | None = fb(Vector(LONG))
    non_const_buffer_device: list[NonConstBufferDevice] | None = fb(Vector(Table("NonConstBufferDevice")))


@dataclass
class Buffer(SchemaTable):
    """Deprecated inline constant storage (constants now live in the constant segment)."""

    storage: bytes | None = fb(Blob(DEFAULT_INLINE_ALIGNMENT))


@dataclass
class BackendDelegateInlineData(SchemaTable):
    data: bytes | None = fb(Blob(DEFAULT_INLINE_ALIGNMENT))


@dataclass
class DataSegment(SchemaTable):
    """A byte range after the flatbuffer; `offset` is relative to the header's segment_base_offset."""

    offset: int = fb(ULONG)
    size: int = fb(ULONG)


@dataclass
class SubsegmentOffsets(SchemaTable):
    """Byte offsets of sub-buffers inside segment `segment_index`; offsets[0] is reserved."""

    segment_index: int = fb(UINT)
    offsets: list[int] | None = fb(Vector(ULONG))


@dataclass
class NamedData(SchemaTable):
    key: str | None = fb(Str())
    segment_index: int = fb(UINT)


@dataclass
class Program(SchemaTable):
    """The root table (file identifier "ET12")."""

    version: int = fb(UINT, SCHEMA_VERSION)
    execution_plan: list[ExecutionPlan] | None = fb(Vector(Table("ExecutionPlan")))
    constant_buffer: list[Buffer] | None = fb(Vector(Table("Buffer")))
    backend_delegate_data: list[BackendDelegateInlineData] | None = fb(Vector(Table("BackendDelegateInlineData")))
    segments: list[DataSegment] | None = fb(Vector(Table("DataSegment")))
    constant_segment: SubsegmentOffsets | None = fb(Table("SubsegmentOffsets"))
    mutable_data_segments: list[SubsegmentOffsets] | None = fb(Vector(Table("SubsegmentOffsets")))
    named_data: list[NamedData] | None = fb(Vector(Table("NamedData")))


# Every table class by schema name: how Table/Union kinds resolve.
TABLES: dict[str, type] = {cls.__name__: cls for cls in (
    ContainerMetadata, Null, AllocationDetails, ExtraTensorInfo, Tensor, Int, Bool, Double, String, IntList,
    DoubleList, BoolList, TensorList, OptionalTensorList, EValue, Operator, KernelCall, DelegateCall, MoveCall,
    JumpFalseCall, FreeCall, Instruction, Frame, FrameList, BackendDelegateDataReference, CompileSpec,
    BackendDelegate, Chain, NonConstBufferDevice, ExecutionPlan, Buffer, BackendDelegateInlineData, DataSegment,
    SubsegmentOffsets, NamedData, Program)}


# ------------------------------------------------------------------- the file
@dataclass
class PteFile:
    """A program and the payloads of its segments, free of file offsets.

    - `constant_data[i - 1]` is the bytes of the constant tensor with `data_buffer_idx == i`
      (the reserved index 0 has no entry).
    - `delegate_segments[k]` is the blob of a delegate whose `processed` is
      `BackendDelegateDataReference(location=SEGMENT, index=k)`. INLINE references index
      `program.backend_delegate_data` as on the wire.
    - `mutable_data[s][i - 1]` is the initial state of a mutable tensor with `data_buffer_idx == i`
      in mutable data segment s (`ExtraTensorInfo.mutable_data_segments_idx`, default 0).
    - `named_data[key]` is the bytes of a NamedData entry.

    - `checksums`: whether the file carries etc's per-segment checksums (`etc.schema.checksums`):
      True for programs etc writes; the reader sets it from the file, so an ExecuTorch
      file (which has none) is written back byte for byte.

    Inside a PteFile, `program.segments`, `program.constant_segment`,
    `program.mutable_data_segments` and `program.named_data` stay empty: the
    serializer fills them on the wire and the reader folds them back into the
    lists above, so `deserialize_pte(serialize_pte(f)) == f`.
    """

    program: Program
    constant_data: list[bytes] = field(default_factory=list)
    delegate_segments: list[bytes] = field(default_factory=list)
    mutable_data: list[list[bytes]] = field(default_factory=list)
    named_data: dict[str, bytes] = field(default_factory=dict)
    checksums: bool = True

    def add_constant(self, data: bytes) -> int:
        """Appends constant tensor bytes; returns the `data_buffer_idx` that refers to them."""
        self.constant_data.append(bytes(data))
        return len(self.constant_data)

    def constant(self, data_buffer_idx: int) -> bytes:
        """The bytes of constant `data_buffer_idx` (>= 1)."""
        return self.constant_data[data_buffer_idx - 1]

    def add_delegate_blob(self, blob: bytes) -> BackendDelegateDataReference:
        """Appends a delegate blob (stored in its own segment); returns the reference to put in `processed`."""
        self.delegate_segments.append(bytes(blob))
        return BackendDelegateDataReference(location=DataLocation.SEGMENT, index=len(self.delegate_segments) - 1)

    def delegate_blob(self, ref: BackendDelegateDataReference) -> bytes:
        """The processed blob a delegate refers to, inline or in a segment."""
        if ref.location == DataLocation.INLINE:
            return self.program.backend_delegate_data[ref.index].data or b""
        return self.delegate_segments[ref.index]

    def mutable_initial_state(self, tensor: Tensor) -> bytes:
        """The initial bytes of a mutable tensor (data_buffer_idx > 0 and allocation_info set)."""
        segment = tensor.extra_tensor_info.mutable_data_segments_idx if tensor.extra_tensor_info else 0
        return self.mutable_data[segment][tensor.data_buffer_idx - 1]
