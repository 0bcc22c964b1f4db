"""Users' own operators (`torch.library.custom_op("mylib::twice", ...)`) in the aten and edge dialects.

An ATen op has a generated op class per overload (`aten_ops.json`); a user's operator is
only known once the user's library is imported, after etc's dialects are loaded into a
context, so it cannot have a class of its own. It is one generic op, `aten.custom_op`
(`edge.custom_op` after to_edge), read through the operator's torch schema:

    %y = "edge.custom_op"(%x) {op = "mylib::twice", arguments = {scale = 2.0 : f64}}
         : (tensor<4xf32>) -> tensor<4xf32>

- `op`: the operator's torch name (`namespace::name` or `namespace::name.overload`);
- its Tensor and Tensor? arguments are the operands, in schema order, each in a numbered
  optional slot (`input_<i>`: IRDL gives one type to a variadic group), an absent
  `Tensor?` leaves its slot empty, so a slot's index is the tensor argument's index;
- every other argument is an entry of the `arguments` dictionary, encoded as the aten
  ops encode attributes (`opinfo.encode_value`: int -> i64, float -> f64, ...);
- its Tensor returns are the results (`output_<i>`).

`custom_op_info(torch_name)` builds the `OpInfo` of such an operator from its schema, so
`decode_op`, the emitter and the verifier treat it like an ATen op. The verifier runs
the operator's fake (meta) implementation on the operand types and checks the result
types against it. The runtime calls its out variant (`mylib::twice.out`), which the
user registers with torch.library (schema) and gives a kernel for each runtime:
`etc.runtime.register_kernel("mylib::twice.out", fn)` for etc's, the
`EXECUTORCH_LIBRARY` macro in C++ for ExecuTorch's.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from torch_mlir import ir

from etc.dialects import irdl_base
from etc.dialects.aten import Aten
from etc.dialects.edge import Edge
from etc.dialects.opinfo import ArgInfo, OpInfo, decode_value, encode_value
from etc.errors import LoweringError, UnsupportedConstructError

SLOTS = 64
INPUT_SLOTS = [f"input_{i}" for i in range(SLOTS)]
OUTPUT_SLOTS = [f"output_{i}" for i in range(SLOTS)]
FIELDS = ([(name, irdl_base.OPTIONAL_OPERAND) for name in INPUT_SLOTS]
          + [("op", irdl_base.ATTRIBUTE), ("arguments", irdl_base.ATTRIBUTE)]
          + [(name, irdl_base.OPTIONAL_RESULT) for name in OUTPUT_SLOTS])
OP_NAME = "custom_op"
# Namespaces whose operators have generated op classes (or are not operators at all).
BUILTIN_NAMESPACES = frozenset({"aten", "prim", "prims", "higher_order", "executorch_prim"})


def is_custom(op) -> bool:
    """Whether `op` (an operation or its name) is an `aten.custom_op` / `edge.custom_op`."""
    name = op if isinstance(op, str) else op.operation.name
    return name in ("aten." + OP_NAME, "edge." + OP_NAME)


def _overload(torch_name: str):
    """The torch OpOverload of `namespace::name[.overload]`; LoweringError when torch has none
    (the user's library is not imported in this process)."""
    import torch

    name, _, overload = torch_name.partition(".")
    namespace, _, op = name.partition("::")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")
    except (AttributeError, RuntimeError):
        raise LoweringError(f"custom operator {torch_name} is not registered with torch in this process: import the "
                            "module that defines it (torch.library.custom_op / torch.library.define) first") from None


@lru_cache(maxsize=None)
def custom_op_info(torch_name: str) -> OpInfo:
    """The OpInfo of a user's operator, from its torch schema. UnsupportedConstructError for what the
    generic op cannot carry (mutated or tensor-list arguments, non-tensor returns)."""
    from etc.dialects.gen_aten_ops import argument_entry, parse_schema

    schema = _overload(torch_name)._schema
    parsed = parse_schema(schema)
    if parsed is None:
        raise UnsupportedConstructError(f"custom operator {torch_name}: cannot read its schema '{schema}'")
    arguments = []
    for argument in parsed.arguments.flat_all:
        if argument.annotation is not None and argument.annotation.is_write:
            raise UnsupportedConstructError(
                f"custom operator {torch_name} writes its argument '{argument.name}' (mutates_args); etc imports "
                "functional custom operators: return a new tensor instead")
        entry = argument_entry(argument, irdl_base.field_name)
        if entry is None or entry["kind"] not in ("operand", "optional_operand", "attribute"):
            raise UnsupportedConstructError(
                f"custom operator {torch_name}: argument '{argument.name}' of type {argument.type} is not supported "
                "(etc carries Tensor, Tensor? and non-tensor arguments of custom operators)")
        entry.pop("dynamic", None)
        arguments.append(ArgInfo(**entry))
    returns = []
    for index, ret in enumerate(parsed.returns):
        if str(ret.type) != "Tensor":
            raise UnsupportedConstructError(f"custom operator {torch_name}: return {index} is a {ret.type}; etc "
                                            "supports custom operators returning tensors")
        returns.append({"field": OUTPUT_SLOTS[index], "type": "Tensor", "kind": "result"})
    if not returns:
        raise UnsupportedConstructError(f"custom operator {torch_name} returns nothing: a functional operator "
                                        "returns its results")
    return OpInfo(name=OP_NAME, torch_name=torch_name, core=False, arguments=tuple(arguments),
                  returns=tuple(returns))


def op_info_of(op) -> OpInfo:
    """The OpInfo of a custom_op operation, from its `op` attribute."""
    return custom_op_info(ir.StringAttr(op.operation.attributes["op"]).value)


def out_variant(torch_name: str) -> str:
    """The out-variant kernel name of a custom operator (`mylib::twice.out`), as ExecuTorch requires
    one: an overload of the same operator whose non-out arguments are the functional one's and which
    has one `out` per result. LoweringError naming the schema to register when there is none."""
    import torch

    info = custom_op_info(torch_name)
    name = torch_name.split(".", 1)[0]
    namespace, _, base = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace), base)
    functional = _overload(torch_name)._schema
    wanted = [(a.name, str(a.type)) for a in functional.arguments]
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        outs = [a for a in schema.arguments if a.is_out]
        ins = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
        if outs and len(outs) == len(functional.returns) and ins == wanted:
            return f"{name}.{overload}"
    args = ", ".join(f"{a.type} {a.name}" for a in info.arguments)
    outs = ", ".join(f"Tensor(a{i}!) out{i if len(info.returns) > 1 else ''}" for i in range(len(info.returns)))
    raise LoweringError(
        f"custom operator {torch_name} has no out variant: ExecuTorch programs call out variants, so register one "
        f"with torch.library, e.g. torch.library.define(\"{name}.out\", \"({args}, *, {outs}) -> "
        f"{'Tensor(a0!)' if len(info.returns) == 1 else '()'}\") and give it an implementation")


# ----------------------------------------------------------------- build / decode
def build(torch_name: str, arguments: Mapping[str, Any], result_types: list[ir.Type], *, loc=None,
          dialect: str = "aten") -> ir.Operation:
    """Create `<dialect>.custom_op` for `torch_name` from schema values (as `aten.build_op`)."""
    info = custom_op_info(torch_name)
    values: dict[str, Any] = {"op": ir.StringAttr.get(torch_name)}
    attributes = {}
    tensor_index = 0
    for arg in info.arguments:
        value = arguments.get(arg.name)
        if arg.kind in ("operand", "optional_operand"):
            if arg.kind == "operand" and value is None:
                raise UnsupportedConstructError(f"{torch_name}: tensor argument '{arg.name}' is missing")
            if tensor_index >= SLOTS:
                raise UnsupportedConstructError(f"{torch_name}: more than {SLOTS} tensor arguments")
            values[INPUT_SLOTS[tensor_index]] = value
            tensor_index += 1
        else:
            dynamic: list = []
            attributes[arg.name] = encode_value(arg, value, dynamic)
            if dynamic:
                raise UnsupportedConstructError(f"{torch_name}: argument '{arg.name}' is a symbolic size; custom "
                                                "operators take static non-tensor arguments")
    values["arguments"] = ir.DictAttr.get(attributes)
    if len(result_types) != len(info.returns):
        raise UnsupportedConstructError(f"{torch_name}: {len(result_types)} result types for "
                                        f"{len(info.returns)} results")
    values.update(zip(OUTPUT_SLOTS, result_types))
    cls = AtenCustomOp if dialect == "aten" else EdgeCustomOp
    return irdl_base.create(cls, FIELDS, values, loc=loc)


def decode(op) -> dict[str, Any]:
    """Schema argument name -> value (ir.Value for tensors, Python values otherwise)."""
    operation = op.operation
    view = operation.opview
    info = op_info_of(operation)
    stored = ir.DictAttr(operation.attributes["arguments"])
    values: dict[str, Any] = {}
    tensor_index = 0
    for arg in info.arguments:
        if arg.kind in ("operand", "optional_operand"):
            values[arg.name] = getattr(view, INPUT_SLOTS[tensor_index])
            tensor_index += 1
        elif arg.name in stored:
            values[arg.name] = decode_value(arg, stored[arg.name], [])
    return values


# -------------------------------------------------------------------- verifier
def _torch_dtype(element: ir.Type):
    import torch

    from etc.ir.dtypes import torch_dtype_name_of_element_type

    return getattr(torch, torch_dtype_name_of_element_type(element))


def _verify(op) -> bool:
    operation = op.operation
    attributes = operation.attributes
    if "op" not in attributes or not isinstance(attributes["op"], ir.StringAttr):
        op.location.emit_error(f"'{operation.name}' needs a string 'op' attribute (the operator's torch name)")
        return False
    if "arguments" not in attributes or not isinstance(attributes["arguments"], ir.DictAttr):
        op.location.emit_error(f"'{operation.name}' needs a dictionary 'arguments' attribute")
        return False
    torch_name = ir.StringAttr(attributes["op"]).value
    try:
        info = custom_op_info(torch_name)
    except (LoweringError, UnsupportedConstructError) as error:
        op.location.emit_error(error.message)
        return False
    for value in list(operation.operands) + list(operation.results):
        if not isinstance(value.type, ir.RankedTensorType):
            op.location.emit_error(f"'{operation.name}' ({torch_name}) takes and produces ranked tensors, "
                                   f"got {value.type}")
            return False
    if len(operation.results) != len(info.returns):
        op.location.emit_error(f"'{operation.name}' ({torch_name}) has {len(operation.results)} results; its "
                               f"schema returns {len(info.returns)}")
        return False
    tensor_args = [a for a in info.arguments if a.kind in ("operand", "optional_operand")]
    view = operation.opview
    for index, arg in enumerate(tensor_args):
        if arg.kind == "operand" and getattr(view, INPUT_SLOTS[index]) is None:
            op.location.emit_error(f"'{operation.name}' ({torch_name}) is missing tensor argument '{arg.name}'")
            return False
    if any(getattr(view, slot) is not None for slot in INPUT_SLOTS[len(tensor_args):]):
        op.location.emit_error(f"'{operation.name}' ({torch_name}) has more tensor operands than its schema's "
                               f"{len(tensor_args)} tensor arguments")
        return False
    problem = _check_with_fake_impl(operation, torch_name)
    if problem:
        op.location.emit_error(f"'{operation.name}' ({torch_name}): {problem}")
        return False
    return True


def _check_with_fake_impl(operation, torch_name: str) -> str | None:
    """Run the operator's fake implementation on fake tensors of the operand types; a mismatch with the
    result types is the problem returned (None when they agree, or when a size is dynamic)."""
    types = [ir.RankedTensorType(v.type) for v in list(operation.operands) + list(operation.results)]
    if not all(t.has_static_shape for t in types):
        return None
    key = (torch_name, str(operation.attributes["arguments"]),
           tuple(str(v.type) for v in operation.operands), tuple(str(r.type) for r in operation.results))
    if key not in _FAKE_CHECKS:
        _FAKE_CHECKS[key] = _run_fake(operation, torch_name)
    return _FAKE_CHECKS[key]


_FAKE_CHECKS: dict = {}


def _run_fake(operation, torch_name: str) -> str | None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    values = decode(operation)
    try:
        with FakeTensorMode():
            arguments = {}
            for name, value in values.items():
                if isinstance(value, ir.Value):
                    t = ir.RankedTensorType(value.type)
                    arguments[name] = torch.empty(list(t.shape), dtype=_torch_dtype(t.element_type))
                else:
                    arguments[name] = value
            outputs = _overload(torch_name)(**arguments)
    except Exception as error:  # noqa: BLE001 - the user's fake implementation failed: say so
        return f"its fake implementation (register_fake) failed on these operands: {type(error).__name__}: {error}"
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    for index, (output, result) in enumerate(zip(outputs, operation.results)):
        t = ir.RankedTensorType(result.type)
        if list(output.shape) != list(t.shape) or output.dtype != _torch_dtype(t.element_type):
            return (f"result {index} is {result.type} but its fake implementation gives "
                    f"{list(output.shape)} {output.dtype}")
    return None


AtenCustomOp = irdl_base.define_op(Aten, OP_NAME, "CustomOp", FIELDS, verifier=_verify)
EdgeCustomOp = irdl_base.define_op(Edge, OP_NAME, "EdgeCustomOp", FIELDS, verifier=_verify)
