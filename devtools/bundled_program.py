"""BundledProgram: a program plus test inputs and expected outputs, in ExecuTorch's `.bpte` format.

    from etc.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
    suites = [MethodTestSuite("forward", [MethodTestCase(inputs=[x], expected_outputs=[model(x)])])]
    BundledProgram(program, suites).save("model.bpte")           # program: ExecutorchProgram, .pte bytes/path
    report = BundledProgram.load("model.bpte").verify()           # runs every case on etc's runtime
    assert report.ok, report                                      # `etc run --verify model.bpte` does the same

The file is ExecuTorch's `bundled_program_schema.fbs` (identifier "BP08"): the
tables below have its names, fields and field order, and go through the same
kind-driven flatbuffer writer and bounds-checked reader as `.pte` files. The
program inside is a complete `.pte`, so a `.bpte` written here is verified by
ExecuTorch's `verify_result_with_bundled_expected_output` and one written by
ExecuTorch verifies here (test_devtools_bundled_program.py does both).
Verification compares with ExecuTorch's rule and defaults:
|actual - expected| <= atol + rtol * |expected|, rtol=1e-5, atol=1e-8.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from etc.errors import EtcError, ProgramError
from etc.schema import program as P
from etc.schema.kinds import DOUBLE, INT, UBYTE, UINT, Blob, Scalar, SchemaTable, Str, Table, Union, \
    Vector, fb

__all__ = ["BundledProgram", "MethodTestCase", "MethodTestSuite", "VerificationReport", "FILE_IDENTIFIER"]

FILE_IDENTIFIER = b"BP08"
# ExecuTorch's BUNDLED_PROGRAM_SCHEMA_VERSION.
SCHEMA_VERSION = 2


# --------------------------------------------------------------------------- the schema (wire tables)
class _Wire:
    """Namespace of the wire tables; their class names are the schema's (unions are tagged by name).
    Int, Bool and Double are the program schema's tables; the bundled Double differs in one datum,
    the default of an absent `double_val` (the flatbuffer scalar default 0, not 0.0)."""

    Int = P.Int
    Bool = P.Bool

    @dataclass
    class Double(P.Double):
        double_val: float = fb(DOUBLE)

    @dataclass
    class Tensor(SchemaTable):
        scalar_type: P.ScalarType = fb(Scalar("b", P.ScalarType))
        sizes: list | None = fb(Vector(INT))
        data: bytes | None = fb(Blob(align=16))
        dim_order: list | None = fb(Vector(UBYTE))

    @dataclass
    class Value(SchemaTable):
        val: object = fb(Union(("Tensor", "Int", "Bool", "Double")))

    @dataclass
    class BundledMethodTestCase(SchemaTable):
        inputs: list | None = fb(Vector(Table("Value")))
        expected_outputs: list | None = fb(Vector(Table("Value")))

    @dataclass
    class BundledMethodTestSuite(SchemaTable):
        method_name: str | None = fb(Str())
        test_cases: list | None = fb(Vector(Table("BundledMethodTestCase")))

    @dataclass
    class BundledProgram(SchemaTable):
        version: int = fb(UINT)
        method_test_suites: list | None = fb(Vector(Table("BundledMethodTestSuite")))
        program: bytes | None = fb(Blob(align=32))


TABLES = {name: cls for name, cls in vars(_Wire).items() if isinstance(cls, type)}


# --------------------------------------------------------------------------- the user's side
@dataclass
class MethodTestCase:
    """Inputs of one call and (optionally) the outputs it must give: tensors (torch or numpy), ints,
    bools or floats, in the method's flattened input and output order."""

    inputs: list
    expected_outputs: list | None = None

    def __post_init__(self):
        self.inputs = [_as_value(v, "input") for v in _flat(self.inputs)]
        self.expected_outputs = [_as_value(v, "expected output") for v in _flat(self.expected_outputs or [])]


@dataclass
class MethodTestSuite:
    method_name: str
    test_cases: list = field(default_factory=list)


def _flat(values) -> list:
    if isinstance(values, (list, tuple)):
        return [item for value in values for item in _flat(value)]
    return [values]


def _as_value(value, what: str):
    """A test value as etc keeps it: a numpy array (bfloat16 as its uint16 bits) or a Python scalar."""
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        import torch

        tensor = value.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(np.uint16)
        return tensor.numpy()
    if isinstance(value, np.generic):
        return value.item()
    raise EtcError(f"a bundled {what} must be a tensor, int, bool or float, got {type(value).__name__}")


def _wire_value(value, scalar_type=None):
    if isinstance(value, bool):
        return _Wire.Value(val=_Wire.Bool(bool_val=value))
    if isinstance(value, int):
        return _Wire.Value(val=_Wire.Int(int_val=value))
    if isinstance(value, float):
        return _Wire.Value(val=_Wire.Double(double_val=value))
    from etc.schema import from_numpy_dtype

    array = np.ascontiguousarray(value)
    kind = scalar_type if scalar_type is not None else from_numpy_dtype(array.dtype)
    return _Wire.Value(val=_Wire.Tensor(scalar_type=P.ScalarType(kind), sizes=[int(s) for s in array.shape],
                                        data=array.tobytes(), dim_order=list(range(array.ndim))))


def _user_value(value: "_Wire.Value", path: str):
    val = value.val
    if isinstance(val, _Wire.Tensor):
        from etc.schema import to_numpy_dtype

        dtype = np.dtype(to_numpy_dtype(val.scalar_type))
        sizes = [int(s) for s in val.sizes or []]
        data = val.data or b""
        count = int(np.prod(sizes, dtype=np.int64))
        if len(data) != count * dtype.itemsize:
            raise ProgramError(f"{path}: tensor of sizes {sizes} ({dtype}) needs {count * dtype.itemsize} bytes "
                               f"of data, the bundle has {len(data)}")
        order = list(val.dim_order or range(len(sizes)))
        if sorted(order) != list(range(len(sizes))):
            raise ProgramError(f"{path}: dim_order {order} is not a permutation of the {len(sizes)} dims")
        physical = np.frombuffer(data, dtype=dtype).reshape([sizes[d] for d in order]) if count else \
            np.zeros(sizes, dtype)
        return np.ascontiguousarray(physical.transpose(np.argsort(order))) if count else physical
    if isinstance(val, _Wire.Int):
        return int(val.int_val)
    if isinstance(val, _Wire.Bool):
        return bool(val.bool_val)
    if isinstance(val, _Wire.Double):
        return float(val.double_val)
    raise ProgramError(f"{path}: a test value with no type")


@dataclass
class CaseResult:
    method: str
    case: int
    ok: bool
    message: str  # what did not match, or the largest error


@dataclass
class VerificationReport:
    results: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def __str__(self) -> str:
        lines = [f"{'ok  ' if r.ok else 'FAIL'} {r.method} case {r.case}: {r.message}" for r in self.results]
        passed = sum(r.ok for r in self.results)
        lines.append(f"{passed} of {len(self.results)} test case(s) passed")
        return "\n".join(lines)


class BundledProgram:
    """A `.pte` program with its test suites."""

    def __init__(self, program, method_test_suites: list):
        self.program = _program_bytes(program)
        self.method_test_suites = list(method_test_suites)
        self._check()

    def _check(self) -> None:
        from etc.schema import deserialize_pte

        pte = deserialize_pte(self.program)
        plans = {plan.name: plan for plan in pte.program.execution_plan}
        for suite in self.method_test_suites:
            plan = plans.get(suite.method_name)
            if plan is None:
                raise EtcError(f"test suite for method '{suite.method_name}', which the program does not have "
                               f"(methods: {', '.join(plans)})")
            for i, case in enumerate(suite.test_cases):
                where = f"method '{suite.method_name}' test case {i}"
                if len(case.inputs) != len(plan.inputs):
                    raise EtcError(f"{where}: {len(case.inputs)} input(s), the method takes {len(plan.inputs)}")
                if case.expected_outputs and len(case.expected_outputs) != len(plan.outputs):
                    raise EtcError(f"{where}: {len(case.expected_outputs)} expected output(s), the method gives "
                                   f"{len(plan.outputs)}")

    # ------------------------------------------------------------------ files
    def serialize(self) -> bytes:
        from etc.schema.serializer import FlatbufferWriter

        suites = [_Wire.BundledMethodTestSuite(
            method_name=suite.method_name,
            test_cases=[_Wire.BundledMethodTestCase(inputs=[_wire_value(v) for v in case.inputs],
                                                    expected_outputs=[_wire_value(v) for v in case.expected_outputs])
                        for case in suite.test_cases]) for suite in self.method_test_suites]
        root = _Wire.BundledProgram(version=SCHEMA_VERSION, method_test_suites=suites, program=self.program)
        writer = FlatbufferWriter({}, tables=TABLES)
        writer.builder.Finish(writer.table(root, "BundledProgram"), file_identifier=FILE_IDENTIFIER)
        return bytes(writer.builder.Output())

    def save(self, path) -> None:
        with open(path, "wb") as f:
            f.write(self.serialize())

    @classmethod
    def load(cls, source) -> "BundledProgram":
        """A bundled program from a `.bpte` path or its bytes; ProgramError says what is wrong and where."""
        from etc.schema.reader import FlatbufferReader

        data = _read(source)
        if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
            raise ProgramError(f"bytes 4..8 are {bytes(data[4:8])!r}, not the bundled program identifier "
                               f"{FILE_IDENTIFIER!r}")
        reader = FlatbufferReader(data, len(data), tables=TABLES)
        root = struct.unpack_from("<I", data, 0)[0]
        if not 8 <= root < len(data):
            raise ProgramError(f"root offset {root} is outside the file (8..{len(data)})")
        wire = reader.table(_Wire.BundledProgram, root, "BundledProgram")
        if not wire.program:
            raise ProgramError("BundledProgram.program: the bundle holds no program")
        suites = []
        for s, suite in enumerate(wire.method_test_suites or []):
            cases = []
            for c, case in enumerate(suite.test_cases or []):
                path = f"BundledProgram.method_test_suites[{s}].test_cases[{c}]"
                cases.append(MethodTestCase(
                    inputs=[_user_value(v, f"{path}.inputs[{i}]") for i, v in enumerate(case.inputs or [])],
                    expected_outputs=[_user_value(v, f"{path}.expected_outputs[{i}]")
                                      for i, v in enumerate(case.expected_outputs or [])]))
            suites.append(MethodTestSuite(method_name=suite.method_name or "", test_cases=cases))
        return cls(wire.program, suites)

    # ------------------------------------------------------------------ running
    def verify(self, *, rtol: float = 1e-5, atol: float = 1e-8, runtime=None) -> VerificationReport:
        """Run every test case on etc's runtime and compare with its expected outputs."""
        from etc.runtime import Runtime

        program = (runtime or Runtime.get()).load_program(self.program)
        report = VerificationReport()
        for suite in self.method_test_suites:
            method = program.load_method(suite.method_name)
            for i, case in enumerate(suite.test_cases):
                outputs = method.execute(case.inputs)
                report.results.append(_compare(suite.method_name, i, outputs, case.expected_outputs, rtol, atol))
        return report


def _number(value) -> str:
    """A value as a user reads it: 0.5, not np.float64(0.5); a float to its last significant digit."""
    value = value.item() if isinstance(value, np.generic) else value
    return repr(value) if not isinstance(value, float) else f"{value:.9g}"


def _compare(method: str, case: int, outputs: list, expected: list, rtol: float, atol: float) -> CaseResult:
    if not expected:
        return CaseResult(method, case, True, "ran (no expected outputs to compare)")
    if len(outputs) != len(expected):
        return CaseResult(method, case, False, f"{len(outputs)} output(s), {len(expected)} expected")
    worst = 0.0
    for k, (out, want) in enumerate(zip(outputs, expected)):
        if isinstance(want, np.ndarray):
            out = np.asarray(out)
            if out.shape != want.shape:
                return CaseResult(method, case, False, f"output {k}: shape {list(out.shape)}, expected "
                                                       f"{list(want.shape)}")
            if want.dtype.kind in "fc":
                a, b = out.astype(np.float64), want.astype(np.float64)
                bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
                if bad.any():
                    first = tuple(int(i) for i in np.argwhere(bad)[0])
                    return CaseResult(method, case, False, f"output {k}: {int(bad.sum())} of {bad.size} element(s) "
                                      f"differ beyond rtol={rtol} atol={atol}; at {list(first)} got "
                                      f"{_number(a[first])}, expected {_number(b[first])}")
                if a.size:
                    worst = max(worst, float(np.nanmax(np.abs(a - b))))
            elif not np.array_equal(out, want):
                return CaseResult(method, case, False, f"output {k}: values differ (dtype {want.dtype})")
        elif out != want:
            return CaseResult(method, case, False, f"output {k}: {_number(out)}, expected {_number(want)}")
    return CaseResult(method, case, True, f"max abs error {worst:.3g}")


def _read(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                return f.read()
        except OSError as error:
            raise ProgramError(f"cannot read '{os.fspath(source)}': {error.strerror}") from None
    raise EtcError(f"expected a .bpte path or bytes, got {type(source).__name__}")


def _program_bytes(program) -> bytes:
    """The `.pte` bytes of an ExecutorchProgram, bytes, or a path."""
    buffer = getattr(program, "buffer", None)
    if isinstance(buffer, (bytes, bytearray)):
        return bytes(buffer)
    return _read(program)
