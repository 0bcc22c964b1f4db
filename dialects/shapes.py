"""Shape verification of aten and edge ops: an op's result shapes must be the ones torch's own
shape functions (its meta kernels) give for its operands and attributes.

Without it the verifiers accepted `add` of 4xf32 and 3xf32 giving 4xf32, or `mm` of 4x5 and 6x7:
a pass that breaks shapes went on, and the failure surfaced far away (a kernel on the device, a
wrong planned size). torch's meta kernels are the definition of every op's shape semantics, kept
with the operator set, so no shape rule is written here by hand.

An op is checked when its tensor shapes are static and its torch overload has a meta kernel;
otherwise (dynamic sizes, quantization ops without one, etc's own ops) the check says nothing.
Of several results only the first is compared: torch itself disagrees on the others (the
statistics of `_native_batch_norm_legit_no_training` are [C] from its meta kernel and [0] in
an exported graph).
The answer depends only on the op's name, operand types and attributes, and is cached on those:
the pipeline verifies after every pass, and an op a pass did not touch costs a dict lookup.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.dialects.opinfo import decode_op

_ELEMENTS = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool", "i8": "int8",
             "ui8": "uint8", "i16": "int16", "i32": "int32", "i64": "int64"}
_UNCHECKED = object()
_CACHE: dict = {}


def _overload(torch_name: str):
    import torch

    namespace, _, rest = torch_name.partition("::")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def _static(value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and ir.RankedTensorType(value.type).has_static_shape


def _meta(value):
    import torch

    t = ir.RankedTensorType(value.type)
    dtype = _ELEMENTS.get(str(t.element_type))
    if dtype is None:
        raise _Unchecked()
    return torch.empty(list(t.shape), dtype=getattr(torch, dtype), device="meta")


class _Unchecked(Exception):
    pass


def _expected(op, info) -> object:
    """[shape of each tensor result] per torch, an error message, or _UNCHECKED."""
    import torch


    overload = _overload(info.torch_name)
    if overload is None:
        return _UNCHECKED
    try:
        decoded = decode_op(op)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):  # a malformed op: IRDL's own verifier names it
        return _UNCHECKED
    try:
        arguments = {}
        for name, value in decoded.items():
            if isinstance(value, ir.Value):
                value = _meta(value)
            elif isinstance(value, list) and any(isinstance(v, ir.Value) for v in value):
                value = [_meta(v) if isinstance(v, ir.Value) else v for v in value]
            arguments[name] = value
        result = overload(**arguments)
    except (_Unchecked, NotImplementedError, TypeError, AttributeError):
        return _UNCHECKED  # no meta kernel, or arguments torch's Python binding does not take by name
    except (RuntimeError, ValueError, IndexError) as error:
        return str(error).strip().splitlines()[0]
    results = result if isinstance(result, (tuple, list)) else [result]
    return [list(r.shape) for r in results if isinstance(r, torch.Tensor)]


def verify_shapes(op) -> bool:
    """Emit an error at `op` and return False when its result shapes are not torch's."""
    operation = op.operation
    values = list(operation.operands) + list(operation.results)
    if not all(_static(v) for v in values):  # a dynamic size, an index operand: nothing to compare
        return True
    info = op.OP_INFO
    key = (operation.name, tuple(str(v.type) for v in operation.operands),
           tuple((name, str(operation.attributes[name])) for name in operation.attributes))
    expected = _CACHE.get(key)
    if expected is None:
        expected = _CACHE[key] = _expected(op, info)
    if expected is _UNCHECKED:
        return True
    if isinstance(expected, str):
        shapes = ", ".join("x".join(map(str, ir.RankedTensorType(v.type).shape)) or "scalar"
                           for v in operation.operands)
        op.location.emit_error(f"'{operation.name}' ({info.torch_name}): its operand shapes ({shapes}) are "
                               f"invalid: {expected}")
        return False
    got = [list(ir.RankedTensorType(r.type).shape) for r in operation.results][:1]
    if got != expected[:len(got)] or len(expected) < len(got):
        fmt = lambda shapes: ", ".join("x".join(map(str, s)) or "scalar" for s in shapes)  # noqa: E731
        op.location.emit_error(f"'{operation.name}' ({info.torch_name}): result shape {fmt(got)}, but its operands "
                               f"and attributes give {fmt(expected)}")
        return False
    return True
