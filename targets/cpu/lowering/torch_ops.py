"""Edge ops as torch-dialect ops, data-driven, and torch ops read back as schema values.

Every edge op is an ATen overload, and torch-mlir's `torch` dialect has (for all but a handful of
Core ATen ops) the op of the same ATen name with the same schema. So the mapping is data: for each
schema argument (`OpInfo.arguments`, decoded by `etc.dialects.decode_op`) `TorchBuilder.value`
emits its torch value (`!torch.vtensor` for tensors, `torch.constant.*` for scalars,
`torch.prim.ListConstruct` for lists), and the op is `torch.aten.<name>.<overload>`. `ADAPTERS`
covers the Core ATen overloads torch-mlir has no op for, each a rewrite onto an equivalent
overload (argument renames and fixed extra values), again data rather than lowering code; an
op torch-mlir does not know at all (etc's quantized ops, `squeeze.dims`) is a `torch.operator`
of its name, for a pass of ours to lower (`torch_operation`). `decode` reads a torch op's
operands back into {schema argument: value}, what those passes match on.
"""

from __future__ import annotations

import re

from torch_mlir import ir

from etc.errors import LoweringError
from etc.ir.ops import as_operation
from etc.ir.schema_types import schema_type

DYNAMIC = ir.ShapedType.get_dynamic_size()

# Core ATen overloads without a torch-mlir op: (target overload, {target arg: source arg or ("const", value)},
# the source results the target produces; the others must be unused).
ADAPTERS = {
    "aten::_native_batch_norm_legit_no_training": (
        "aten::batch_norm",
        {"input": "input", "weight": "weight", "bias": "bias", "running_mean": "running_mean",
         "running_var": "running_var", "training": ("const", False), "momentum": "momentum", "eps": "eps",
         "cudnn_enabled": ("const", False)},
        (0,)),
    # torch-mlir has the op but no lowering for it; its resize lowering (one linalg.generic of four
    # taps) sits behind __interpolate, which keeps the given scale factors for the coordinate map
    # (ATen's rule when recompute_scale_factor is None), or the sizes' ratio when only sizes are given.
    "aten::upsample_bilinear2d.vec": (
        "aten::__interpolate.size_list_scale_list",
        {"input": "input", "size": "output_size", "scale_factor": "scale_factors", "mode": ("const", "bilinear"),
         "align_corners": "align_corners", "recompute_scale_factor": ("const", None),
         "antialias": ("const", False)},
        (0,)),
}

# Builtin element type -> torch dtype in !torch.vtensor (torch's integers are signed).
TORCH_ELEMENT = {"i8": "si8", "i16": "si16", "i32": "si32", "i64": "si64", "ui8": "ui8", "i1": "i1",
                 "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}

CPU_DTYPES = frozenset(TORCH_ELEMENT)


def torch_op_name(torch_name: str) -> str:
    """`aten::add.Tensor` -> `torch.aten.add.Tensor`."""
    return "torch." + torch_name.replace("::", ".")


def vtensor_type(tensor_type) -> ir.Type:
    """The !torch.vtensor of a builtin ranked tensor type."""
    t = ir.RankedTensorType(tensor_type)
    if str(t.element_type) not in TORCH_ELEMENT:
        raise LoweringError(f"element type {t.element_type} has no cpu lowering")
    return vtensor_of(list(t.shape), str(t.element_type))



class TorchBuilder:
    """Emits torch-dialect values for schema arguments at the current insertion point."""

    def __init__(self):
        self.cache: dict = {}

    def _const(self, op_name: str, result: str, attr: ir.Attribute | None):
        key = (op_name, str(attr))
        if key in self.cache:
            return self.cache[key]
        attributes = {"value": attr} if attr is not None else {}
        value = ir.Operation.create(op_name, results=[ir.Type.parse(result)], attributes=attributes).result
        self.cache[key] = value
        return value

    def none(self):
        return self._const("torch.constant.none", "!torch.none", None)

    def int(self, v: int):
        return self._const("torch.constant.int", "!torch.int", ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v)))

    def float(self, v: float):
        return self._const("torch.constant.float", "!torch.float", ir.FloatAttr.get_f64(float(v)))

    def bool(self, v: bool):
        return self._const("torch.constant.bool", "!torch.bool", ir.BoolAttr.get(bool(v)))

    def str(self, v: str):
        return self._const("torch.constant.str", "!torch.str", ir.StringAttr.get(v))

    def device(self, v: str):
        return self._const("torch.constant.device", "!torch.Device", ir.StringAttr.get(v))

    def list(self, items: list, element_type: str):
        return ir.Operation.create("torch.prim.ListConstruct", results=[ir.Type.parse(f"!torch.list<{element_type}>")],
                                   operands=items).result

    def scalar(self, v):
        # A bool Scalar goes as the int 0/1 (its value in every op taking a Scalar): torch-mlir's
        # lowerings abort on a !torch.bool Scalar (`full(n, True)`, what a causal sdpa mask starts from).
        if isinstance(v, bool):
            return self.int(int(v))
        if isinstance(v, int):
            return self.int(v)
        if isinstance(v, float):
            return self.float(v)
        raise LoweringError(f"cannot pass {v!r} as a Scalar")

    def value(self, arg, v, tensors: dict):
        """The torch value of schema argument `arg` (an ArgInfo) holding `v`."""
        row = arg.schema_type
        if v is None:
            return self.none()
        if row.kind == "tensor":
            if isinstance(v.type, ir.IndexType):  # a symbolic size given as a tensor: its 0-d tensor
                return ir.Operation.create("torch.prim.NumToTensor.Scalar",
                                           results=[ir.Type.parse("!torch.vtensor<[],si64>")],
                                           operands=[tensors[v]]).result
            return tensors[v]
        if row.kind == "tensor_list":
            items = [tensors[x] if x is not None else self.none() for x in v]
            etype = "vtensor" if all(x is not None for x in v) else "optional<vtensor>"
            return self.list(items, etype)
        if row.kind == "optional_tensor_list":
            # index.Tensor / index_put: torch-mlir's schema says !torch.list<optional<vtensor>> whether
            # or not an entry is None.
            return self.list([tensors[x] if x is not None else self.none() for x in v], "optional<vtensor>")
        if isinstance(v, ir.Value):  # a symbolic size: its !torch.int (edge_to_torch mapped it)
            try:
                return tensors[v]
            except KeyError:
                raise LoweringError(f"symbolic value for '{arg.name}' is defined outside the delegate") from None
        emit = TORCH_VALUE_OF_KIND.get(row.kind)
        if emit is None:
            raise LoweringError(f"arguments of type '{arg.type}' ('{arg.name}') have no torch form")
        return emit(self, row, v, tensors)


# The cpu target's column of the schema-type table (etc.ir.schema_types): kind -> its torch value.
# Enums (ScalarType, MemoryFormat, Layout) go as their c10 codes, torch-mlir's !torch.int encoding.
TORCH_VALUE_OF_KIND = {
    "int": lambda b, row, v, tensors: b.int(v),
    "int_list": lambda b, row, v, tensors: b.list(
        [tensors[x] if isinstance(x, ir.Value) else b.int(x) for x in v], "int"),
    "float": lambda b, row, v, tensors: b.float(v),
    "float_list": lambda b, row, v, tensors: b.list([b.float(x) for x in v], "float"),
    "bool": lambda b, row, v, tensors: b.bool(v),
    "bool_list": lambda b, row, v, tensors: b.list([b.bool(x) for x in v], "bool"),
    "str": lambda b, row, v, tensors: b.str(v),
    "scalar": lambda b, row, v, tensors: b.scalar(v),
    "dtype": lambda b, row, v, tensors: b.int(row.code(v)),
    "enum": lambda b, row, v, tensors: b.int(row.code(v)),
    "device": lambda b, row, v, tensors: b.device(str(v)),
}


def adapt(info, values: dict, op=None):
    """(torch name, ArgInfos, values) to emit for an edge op, applying ADAPTERS."""
    from etc.dialects import op_info

    adapter = ADAPTERS.get(info.torch_name)
    if adapter is None:
        return info.torch_name, info.arguments, values
    target, mapping, _ = adapter
    tinfo = op_info(target)
    if tinfo is None:
        raise LoweringError(f"adapter target {target} is not in the op table")
    new = {}
    for a in tinfo.arguments:
        src = mapping[a.name]
        if isinstance(src, tuple) and src[0] == "result_shape":
            new[a.name] = list(ir.RankedTensorType(op.results[src[1]].type).shape)
        else:
            new[a.name] = src[1] if isinstance(src, tuple) else values[src]
    return target, tinfo.arguments, new


# Arithmetic on symbolic sizes (the importer's `index` ops) -> torch's int ops, which torch-mlir
# lowers back to `arith` on the sizes its own `tensor.dim`s give.
SIZE_OPS = {"tensor.dim": "torch.aten.size.int", "arith.constant": "torch.constant.int",
            "arith.addi": "torch.aten.add.int", "arith.subi": "torch.aten.sub.int", "arith.muli": "torch.aten.mul.int",
            "arith.floordivsi": "torch.aten.floordiv.int", "arith.remsi": "torch.aten.remainder.int",
            "arith.maxsi": "torch.prim.max.int", "arith.minsi": "torch.prim.min.int"}


def size_value(op, builder, tensors: dict) -> ir.Value:
    """The !torch.int of a symbolic-size op of the edge function."""
    if op.name == "arith.constant":
        return builder.int(ir.IntegerAttr(op.attributes["value"]).value)
    operands = []
    for v in op.operands:
        if v not in tensors:
            raise LoweringError(f"'{op.name}' reads a size defined outside the delegate", location=str(op.location))
        operands.append(tensors[v])
    return ir.Operation.create(SIZE_OPS[op.name], results=[ir.Type.parse("!torch.int")], operands=operands).result


def result_bounds(value):
    """The upper bounds of a result's dims (torch's, from to_edge), or None."""
    from etc.ir.shapes import upper_bounds

    return upper_bounds(value) if isinstance(value.type, ir.RankedTensorType) else None


def dim_bounds(func_op) -> dict:
    """Argument position -> `etc.dim_bounds` of the edge function's dynamically shaped inputs;
    a dynamic input without them cannot be compiled for an upper bound."""
    from etc.ir.shapes import DIM_BOUNDS_ATTR

    out = {}
    args = func_op.regions[0].blocks[0].arguments
    dicts = list(ir.ArrayAttr(func_op.attributes["arg_attrs"])) if "arg_attrs" in func_op.attributes else []
    for i, a in enumerate(args):
        if not isinstance(a.type, ir.RankedTensorType) or ir.RankedTensorType(a.type).has_static_shape:
            continue
        d = ir.DictAttr(dicts[i]) if i < len(dicts) else None
        if d is None or DIM_BOUNDS_ATTR not in d:
            raise LoweringError(f"input {i} ({a.type}) of the delegate has a dynamic dim without bounds")
        bounds = [int(x) for x in ir.DenseI64ArrayAttr(d[DIM_BOUNDS_ATTR])]
        if any(hi < 0 for hi in bounds[1::2]):
            raise LoweringError(f"input {i} ({a.type}) has a dynamic dim without an upper bound "
                                "(export it with torch.export.Dim(..., max=N))")
        out[i] = bounds
    return out


def kept_results(info, op) -> list[int]:
    """Indices of `op`'s results the emitted torch op produces (an adapter may drop unused ones)."""
    adapter = ADAPTERS.get(info.torch_name)
    if adapter is None:
        return list(range(len(op.results)))
    kept = list(adapter[2])
    for i, r in enumerate(op.results):
        if i not in kept and any(True for _ in r.uses):
            raise LoweringError(f"{info.torch_name}: result {i} is used, and the cpu target computes only "
                                f"results {kept} of it (through {adapter[0]})")
    return kept


class TorchValues(dict):
    """A `tensors` map for `TorchBuilder.value` whose tensor arguments are already torch values."""

    def __missing__(self, key):
        return key


def torch_operation(torch_name: str, context) -> tuple[str, dict]:
    """(op name, attributes) of the torch op of `torch_name`: `torch.aten.add.Tensor`, or a
    `torch.operator` named `aten.squeeze.dims` where the torch dialect has no such op."""
    name = torch_op_name(torch_name)
    if context.is_registered_operation(name):
        return name, {}
    return "torch.operator", {"name": ir.StringAttr.get(name[len("torch."):], context)}


def torch_name_of(op) -> str | None:
    """`aten::add.Tensor` of a torch op (`torch.aten.add.Tensor`, or a `torch.operator` of that name)."""
    name = ir.StringAttr(op.attributes["name"]).value if op.name == "torch.operator" else op.name[len("torch."):]
    dialect, _, rest = name.partition(".")
    return f"{dialect}::{rest}" if rest else None


def vtensor_of(shape, element: str) -> ir.Type:
    """`!torch.vtensor<[2,?],f32>` for a shape (DYNAMIC or -1: `?`) and a builtin element name."""
    return ir.Type.parse(f"!torch.vtensor<[{','.join(str(d) if d >= 0 else '?' for d in shape)}],"
                         f"{TORCH_ELEMENT[element]}>")


def vtensor_shape(value) -> list:
    """The shape of a !torch.vtensor value (DYNAMIC for a size known at run time)."""
    dims = re.match(r"!torch\.vtensor<\[([^\]]*)\]", str(value.type)).group(1)
    return [int(d) if d != "?" else DYNAMIC for d in dims.split(",")] if dims else []


def vtensor_element(value) -> str:
    """The builtin element type name (f32, i64, i1) of a !torch.vtensor value."""
    torch_element = re.match(r"!torch\.vtensor<\[[^\]]*\],(\w+)>", str(value.type)).group(1)
    return {t: b for b, t in TORCH_ELEMENT.items()}[torch_element]


def builtin_tensor_type(value) -> ir.RankedTensorType:
    """The builtin tensor type of a !torch.vtensor value (its integers signless)."""
    element = vtensor_element(value)
    return ir.RankedTensorType.get(vtensor_shape(value), ir.Type.parse(element if element != "ui8" else "i8"))


_CONSTANTS = {"torch.constant.int": int, "torch.constant.float": float, "torch.constant.bool": bool,
              "torch.constant.str": str}


def decode(op, info) -> dict:
    """{schema argument: value} of a torch op built for `info` (an OpInfo): Python values for its
    constant operands (ScalarType as the torch dtype), lists for its list constructions, and the
    torch values themselves for tensors and sizes known only at run time."""
    return {arg.name: _decoded(value, arg.schema_type) for arg, value in zip(info.arguments, op.operands)}


def _decoded(value, row):
    owner = value.owner
    producer = None if isinstance(owner, ir.Block) else as_operation(owner)
    if producer is None:
        return value
    if producer.name == "torch.constant.none":
        return None
    if producer.name in _CONSTANTS and row.kind != "tensor":
        attr = producer.attributes["value"]
        if producer.name == "torch.constant.int":
            number = ir.IntegerAttr(attr).value
            if row.kind == "dtype":
                import torch

                return getattr(torch, row.value_name(number))
            return number
        if producer.name == "torch.constant.float":
            return ir.FloatAttr(attr).value
        if producer.name == "torch.constant.bool":
            return ir.BoolAttr(attr).value
        return ir.StringAttr(attr).value
    if producer.name == "torch.prim.ListConstruct":
        item = schema_type(row.element) if row.element else row
        return [_decoded(v, item) for v in producer.operands]
    return value
