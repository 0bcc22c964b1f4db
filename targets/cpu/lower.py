"""Edge -> torch -> linalg-on-tensors: the first stage of the `cpu` target.

An outlined delegate function holds `edge.*` ops on builtin tensors and
`ml_program.global_load_const` reads of constants. We do not write one
lowering per op: every edge op is an ATen overload, and torch-mlir's `torch`
dialect has (for all but a handful of Core ATen ops) the op of the same ATen
name with the same schema. So the mapping is data: for each schema argument
(`OpInfo.arguments`, decoded by `etc.dialects.decode_op`) we emit its torch
value (`!torch.vtensor` for tensors, `torch.constant.*` for scalars,
`torch.prim.ListConstruct` for lists), create `torch.aten.<name>.<overload>`,
and let torch-mlir's maintained pipelines (`torchdynamo-export-to-torch-backend-
pipeline`, then `torch-backend-to-linalg-on-tensors-backend-pipeline`) do the
decompositions and conversions to linalg/tensor/arith/math.

`ADAPTERS` covers the Core ATen overloads torch-mlir has no op for, each as a
rewrite onto an equivalent overload (argument renames and fixed extra values),
again data rather than lowering code. `EXPANSIONS` covers the few whose torch-mlir
lowering does not reach our codegen (tm_tensor scan/scatter, which it does not bufferize) or
does not exist (as_strided): each a function emitting several torch ops that do lower, chosen
at compile time from the static shapes (cumsum, as_strided, index_put).

Constants become extra function arguments (kind "constant", in first-use
order); the caller passes their bytes as buffers. Symbolic sizes (the edge function's
`tensor.dim`/`arith` ops on `index`) become torch's int ops, and the inputs' `etc.dim_bounds`
travel with the function (`LoweredFunction.dim_bounds`) to etc-cpu-dynamic-shapes.

Support (`is_supported`): a structural check (edge op with schema info, ranked
tensors of supported dtypes, each dynamic dim with an upper bound, a torch-mlir op to map
onto), then a
trial lowering of the op alone down to the LLVM dialect, cached per op signature;
the partitioner first tries the whole method in one trial.

Driver (lit tests): `python -m etc.targets.cpu.lower FILE [--stage torch|linalg|memref|llvm-ir]
[--target host|<preset>|<triple>]` lowers every private `delegate_*` function (or every
function when there is none) of an edge-dialect module and prints the result.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field

import numpy as np
from torch_mlir import ir

from etc.errors import LoweringError

# c10::ScalarType / MemoryFormat / Layout codes: how torch-mlir encodes those arguments (as !torch.int).
_SCALAR_TYPE_CODES = {
    "uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6, "float64": 7,
    "complex32": 8, "complex64": 9, "complex128": 10, "bool": 11, "bfloat16": 15,
}
_MEMORY_FORMAT_CODES = {"contiguous_format": 0, "preserve_format": 1, "channels_last": 2, "channels_last_3d": 3}
_LAYOUT_CODES = {"strided": 0, "sparse_coo": 1}

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

# Core ATen ops whose torch-mlir lowering does not reach our codegen (tm_tensor ops it cannot
# bufferize) or that torch-mlir lacks: torch name -> function(_Emitter, decoded values, edge op)
# returning the torch values of the op's results, built from ops torch-mlir lowers to linalg.
# Shapes are static, so these expansions decide their op sequence at compile time. Filled in by
# @_expansion below.
EXPANSIONS: dict = {}

# Builtin element type -> torch dtype in !torch.vtensor (torch's integers are signed).
_TORCH_ELEMENT = {"i8": "si8", "i16": "si16", "i32": "si32", "i64": "si64", "ui8": "ui8", "i1": "i1",
                  "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}

CPU_DTYPES = frozenset(_TORCH_ELEMENT)


def torch_op_name(torch_name: str) -> str:
    """`aten::add.Tensor` -> `torch.aten.add.Tensor`."""
    return "torch." + torch_name.replace("::", ".")


def vtensor_type(tensor_type) -> ir.Type:
    t = ir.RankedTensorType(tensor_type)
    element = _TORCH_ELEMENT.get(str(t.element_type))
    if element is None:
        raise LoweringError(f"element type {t.element_type} has no cpu lowering")
    dims = ",".join("?" if t.is_dynamic_dim(i) else str(t.shape[i]) for i in range(t.rank))
    return ir.Type.parse(f"!torch.vtensor<[{dims}],{element}>")


_SHARED_CONTEXT = None


def shared_context() -> ir.Context:
    """One torch-aware context for the target's own work (trial lowerings, re-imported delegate
    functions): making a context loads etc's 1577-op dialects, about a second each time."""
    global _SHARED_CONTEXT
    if _SHARED_CONTEXT is None:
        _SHARED_CONTEXT = make_context()
    return _SHARED_CONTEXT


def make_context() -> ir.Context:
    """A context with etc's dialects and torch-mlir's torch dialect (which also registers its passes)."""
    from torch_mlir.dialects import torch as torch_d

    import etc.dialects

    context = etc.dialects.make_context()
    torch_d.register_dialect(context)
    return context


@dataclass
class LoweredFunction:
    """A delegate function in torch or linalg form, with what its arguments are."""

    module: ir.Module  # holding one public func.func `name`
    name: str
    # One entry per function argument: ("input", index) or ("constant", fqn).
    arguments: list = field(default_factory=list)
    constants: dict = field(default_factory=dict)  # fqn -> numpy array (those the function reads)
    # Constants a lowering added (`_Emitter.new_constant`) that the runtime can compute from others
    # when the blob is loaded: fqn -> its recipe (`blob.DERIVATIONS`), in the lowering's names.
    derived: dict = field(default_factory=dict)
    # Argument position -> its `etc.dim_bounds` (lo0, hi0, lo1, hi1, ...), for inputs with dynamic dims.
    dim_bounds: dict = field(default_factory=dict)
    # Per result: its dims at their upper bounds (torch's, from to_edge), or None when unknown.
    result_bounds: list = field(default_factory=list)


# ----------------------------------------------------------------- support
def _schema_info(op):
    info = getattr(type(op.operation.opview), "OP_INFO", None)
    return info


def target_overload(torch_name: str) -> str:
    adapter = ADAPTERS.get(torch_name)
    return adapter[0] if adapter else torch_name


def is_supported(op) -> tuple[bool, str]:
    """Can the cpu target take `op`? (bool, reason); a structural check, then a trial lowering (cached)."""
    ok, reason = structural_check(op)
    if not ok:
        return ok, reason
    if op.name in ("ml_program.global_load_const", "tensor.extract"):
        return True, ""
    if op.name == "scf.if":  # a branch of torch.cond: native when every op of both branches is
        for inner in _branch_ops(op):
            ok, reason = is_supported(inner)
            if not ok:
                return False, f"a branch holds {inner.name}: {reason}"
        return True, ""
    info = _schema_info(op)
    if info is not None and info.torch_name in lower_quantized.LOWERED:  # ours, and they need the weights' data
        return lower_quantized.check(op)
    return _trial_lowering(op)


def _branch_ops(op) -> list:
    return [inner.operation for region in op.regions for inner in region.blocks[0].operations
            if inner.operation.name != "scf.yield"]


def structural_check(op) -> tuple[bool, str]:
    """The cheap part of `is_supported`: op kind, types, static shapes, a torch-mlir op to map onto."""
    name = op.name
    if name in ("ml_program.global_load_const",):
        return True, ""
    if name in _SIZE_OPS and all(isinstance(r.type, ir.IndexType) for r in op.results):
        return True, ""  # arithmetic on symbolic sizes
    if name == "tensor.extract":  # the condition of a branch: a 0-d bool tensor's value
        t = op.operands[0].type
        ok = isinstance(t, ir.RankedTensorType) and ir.RankedTensorType(t).rank == 0 and \
            str(ir.RankedTensorType(t).element_type) == "i1"
        return (True, "") if ok else (False, "tensor.extract of other than a 0-d bool tensor")
    if name == "scf.if":
        if not all(isinstance(r.type, ir.RankedTensorType) and ir.RankedTensorType(r.type).has_static_shape
                   for r in op.results):
            return False, "a branch with dynamically shaped (or non-tensor) results"
        for inner in _branch_ops(op):
            ok, reason = structural_check(inner)
            if not ok:
                return False, f"a branch holds {inner.name}: {reason}"
        return True, ""
    if not name.startswith("edge."):
        return False, f"'{name}' is not an edge op"
    info = _schema_info(op)
    if info is None:
        return False, f"'{name}' has no schema information"
    results = set(op.results)
    for v in list(op.operands) + list(op.results):
        if isinstance(v.type, ir.IndexType) and v not in results:
            continue  # a symbolic size (SymInt argument)
        if not isinstance(v.type, ir.RankedTensorType):
            return False, f"operand/result of type {v.type}: the cpu target takes ranked tensors only"
        t = ir.RankedTensorType(v.type)
        if not t.has_static_shape and v in results and "etc.upper_bounds" not in op.attributes:
            return False, "a result with a dynamic shape and no upper bound (export with Dim(..., max=N))"
        if str(t.element_type) not in CPU_DTYPES:
            return False, f"element type {t.element_type} is not supported by the cpu target"
    # Codegen cannot compile a function with an empty result (the trial passes, the compile fails);
    # an empty tensor costs nothing on the portable kernels. Unused empty results (a no_training
    # batch norm's saved statistics) are fine.
    live = list(op.operands) + [r for r in op.results if any(True for _ in r.uses)]
    if any(0 in ir.RankedTensorType(v.type).shape for v in live if isinstance(v.type, ir.RankedTensorType)):
        return False, "zero-size tensors are left to the portable kernels"
    if info.torch_name in EXPANSIONS:
        return True, ""
    if not op.context.is_registered_operation(torch_op_name(target_overload(info.torch_name))):
        # The program context may not have the torch dialect loaded; ask a torch-aware context.
        if not _torch_registered(target_overload(info.torch_name)):
            return False, f"{info.torch_name} has no op in torch-mlir's torch dialect"
    return True, ""


def trial_function(func_op, constants: dict) -> tuple[bool, str]:
    """Lower a whole function (e.g. a method, for whole-model delegation) to the LLVM dialect:
    one trial instead of one per op signature."""
    try:
        context, fn = import_for_lowering(func_op)
        with context, ir.Location.unknown():
            lowered = lower_to_linalg(fn, constants)
            _trial_pipeline(lowered)
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, str(e).splitlines()[0] if str(e) else type(e).__name__


def _trial_pipeline(lowered) -> None:
    """Run the cpu pipeline to the LLVM dialect for a baseline x86-64 (no vector unit in the ISA
    table: the trial checks that every op lowers, cheaply, without building GEMM or window kernels)."""
    from etc.targets.cpu.isa import CpuTarget
    from etc.targets.cpu.pipeline import run_cpu_pipeline

    run_cpu_pipeline(lowered.module, lowered.arguments, CpuTarget("x86_64-unknown-linux-gnu"),
                     dim_bounds=lowered.dim_bounds, result_bounds=lowered.result_bounds)


_REGISTERED_CACHE: dict = {}


def _torch_registered(torch_name: str) -> bool:
    if torch_name not in _REGISTERED_CACHE:
        with shared_context() as ctx:
            _REGISTERED_CACHE[torch_name] = ctx.is_registered_operation(torch_op_name(torch_name))
    return _REGISTERED_CACHE[torch_name]


_TRIAL_CACHE: dict = {}


def _named_attributes(op) -> list:
    out = []
    for i in range(len(op.attributes)):
        named = op.attributes[i]
        out.append((named.name, named.attr))
    return out


def _used_results(op) -> list[int]:
    used = [i for i, r in enumerate(op.results) if any(True for _ in r.uses)]
    return used or [0]


def _trial_key(op) -> str:
    attrs = sorted((name, str(attr)) for name, attr in _named_attributes(op))
    return (f"{op.name}|{[str(v.type) for v in op.operands]}|{[str(v.type) for v in op.results]}|{attrs}|"
            f"{_used_results(op)}")


def _bounds_text(value) -> str:
    """` {etc.dim_bounds = ...}` for a trial argument with dynamic dims (0 up to its upper bound)."""
    from etc.compiler.ir import upper_bounds

    if not isinstance(value.type, ir.RankedTensorType) or ir.RankedTensorType(value.type).has_static_shape:
        return ""
    bounds = upper_bounds(value)
    if bounds is None:
        return ""
    return " {etc.dim_bounds = array<i64: " + ", ".join(f"0, {b}" for b in bounds) + ">}"


def _trial_lowering(op) -> tuple[bool, str]:
    """Lower `op` alone (operands become arguments, its used results the results) to linalg;
    the answer is cached per op signature."""
    key = _trial_key(op)
    if key in _TRIAL_CACHE:
        return _TRIAL_CACHE[key]
    used = _used_results(op)
    sizes = [i for i, v in enumerate(op.operands) if isinstance(v.type, ir.IndexType)]
    tensors = [i for i in range(len(op.operands)) if i not in sizes]
    args = ", ".join(f"%a{i}: {op.operands[i].type}{_bounds_text(op.operands[i])}" for i in tensors)
    prologue = ""
    if sizes:  # symbolic sizes: dims of one more argument, bounded by the op's largest bound
        from etc.compiler.ir import upper_bounds

        bound = max([b for r in op.results if isinstance(r.type, ir.RankedTensorType)
                     for b in (upper_bounds(r) or [])] or [1])
        args += (", " if args else "") + f"%sizes: tensor<{'x'.join('?' * len(sizes))}xi8> " \
            f"{{etc.dim_bounds = array<i64: {', '.join(f'0, {bound}' for _ in sizes)}>}}"
        prologue = "".join(f"  %c{k} = arith.constant {k} : index\n  %a{i} = tensor.dim %sizes, %c{k} : "
                           f"tensor<{'x'.join('?' * len(sizes))}xi8>\n" for k, i in enumerate(sizes))
    names = ", ".join(f"%a{i}" for i in range(len(op.operands)))
    all_types = ", ".join(str(r.type) for r in op.results)
    rtypes = ", ".join(str(op.results[i].type) for i in used)
    rnames = ", ".join(f"%r#{i}" for i in used)
    attrs = ", ".join(f"{name} = {attr}" for name, attr in _named_attributes(op))
    text = (f"func.func private @trial({args}) -> ({rtypes}) {{\n{prologue}"
            f"  %r:{len(op.results)} = \"{op.name}\"({names}) {{{attrs}}} : "
            f"({', '.join(str(v.type) for v in op.operands)}) -> ({all_types})\n"
            f"  return {rnames} : {rtypes}\n}}")
    try:
        with shared_context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            fn = module.body.operations[0]
            lowered = lower_to_linalg(fn, {})
            _trial_pipeline(lowered)
        result = (True, "")
    except Exception as e:  # noqa: BLE001 - any failure means "not supported", with the reason
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        detail = next((line for line in lines if "error:" in line), lines[0] if lines else type(e).__name__)
        detail = re.sub(r'^.*?error: (".*?":\d+:\d+: )?', "", detail.strip())
        found = re.search(r'see current operation:\s*(?:%[\w:#]+\s*=\s*)?"?([a-z_]+\.[a-z_.]+)', str(e))
        culprit = found.group(1) if found else None
        if culprit and culprit not in detail:
            detail += f" ({culprit})"
        result = (False, "no lowering to LLVM through torch-mlir/linalg: " + detail)
    _TRIAL_CACHE[key] = result
    return result


# ------------------------------------------------------------ edge -> torch
class _TorchBuilder:
    """Emits torch-dialect values for schema arguments at the current insertion point."""

    def __init__(self):
        self.cache: dict = {}
        # (name, array, recipe) -> a new constant argument of the function being built (edge_to_torch)
        self.new_constant = None

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
        if isinstance(v, bool):
            return self.bool(v)
        if isinstance(v, int):
            return self.int(v)
        if isinstance(v, float):
            return self.float(v)
        raise LoweringError(f"cannot pass {v!r} as a Scalar")

    def value(self, arg, v, tensors: dict):
        """The torch value of schema argument `arg` (an ArgInfo) holding `v`."""
        base = arg.base
        if v is None:
            return self.none()
        if base == "Tensor":
            if isinstance(v.type, ir.IndexType):  # a symbolic size given as a tensor: its 0-d tensor
                return ir.Operation.create("torch.prim.NumToTensor.Scalar",
                                           results=[ir.Type.parse("!torch.vtensor<[],si64>")],
                                           operands=[tensors[v]]).result
            return tensors[v]
        if base == "Tensor[]":
            items = [tensors[x] if x is not None else self.none() for x in v]
            etype = "vtensor" if all(x is not None for x in v) else "optional<vtensor>"
            return self.list(items, etype)
        if base == "Tensor?[]":
            # index.Tensor / index_put: torch-mlir's schema says !torch.list<optional<vtensor>> whether
            # or not an entry is None.
            return self.list([tensors[x] if x is not None else self.none() for x in v], "optional<vtensor>")
        if isinstance(v, ir.Value):  # a symbolic size: its !torch.int (edge_to_torch mapped it)
            try:
                return tensors[v]
            except KeyError:
                raise LoweringError(f"symbolic value for '{arg.name}' is defined outside the delegate") from None
        if base in ("int", "SymInt"):
            return self.int(v)
        if base in ("int[]", "SymInt[]"):
            return self.list([tensors[x] if isinstance(x, ir.Value) else self.int(x) for x in v], "int")
        if base == "float":
            return self.float(v)
        if base == "float[]":
            return self.list([self.float(x) for x in v], "float")
        if base == "bool":
            return self.bool(v)
        if base == "bool[]":
            return self.list([self.bool(x) for x in v], "bool")
        if base == "str":
            return self.str(v)
        if base == "Scalar":
            return self.scalar(v)
        if base == "ScalarType":
            return self.int(_SCALAR_TYPE_CODES[str(v).replace("torch.", "")])
        if base == "MemoryFormat":
            return self.int(_MEMORY_FORMAT_CODES[str(v).replace("torch.", "")])
        if base == "Layout":
            return self.int(_LAYOUT_CODES[str(v).replace("torch.", "")])
        if base == "Device":
            return self.device(str(v))
        raise LoweringError(f"arguments of type '{arg.type}' ('{arg.name}') have no torch form")


def _adapt(info, values: dict, op=None):
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


def edge_to_torch(func_op, constants: dict) -> LoweredFunction:
    """Build a torch-dialect copy of the outlined edge function `func_op` in a fresh module (same context).

    Arguments: the function's own inputs, then one per constant it loads.
    """
    from torch_mlir.dialects import func as func_d

    name = ir.StringAttr(func_op.attributes["sym_name"]).value
    block = func_op.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    # Constants nothing reads (a batch norm's num_batches_tracked) do not become arguments.
    loads = [op for op in ops if op.name == "ml_program.global_load_const" and any(True for _ in op.result.uses)]
    const_names = []
    for op in loads:
        sym = ir.FlatSymbolRefAttr(op.attributes["global"]).value
        if sym not in const_names:
            const_names.append(sym)
    input_types = [vtensor_type(a.type) for a in block.arguments]
    const_types = {}
    for op in loads:
        const_types[ir.FlatSymbolRefAttr(op.attributes["global"]).value] = vtensor_type(op.result.type)
    ret = ops[-1]
    if ret.name != "func.return":
        raise LoweringError(f"delegate function {name} does not end in func.return")
    result_types = [vtensor_type(v.type) for v in ret.operands]

    module = ir.Module.create()
    lowered = LoweredFunction(module=module, name=name)
    lowered.arguments = [("input", i) for i in range(len(block.arguments))] + [("constant", c) for c in const_names]
    lowered.dim_bounds = _dim_bounds(func_op)
    lowered.result_bounds = [_result_bounds(v) for v in ret.operands]
    for c in const_names:
        if c not in constants:
            raise LoweringError(f"constant '{c}' used by {name} has no data")
        lowered.constants[c] = constants[c]
    with ir.InsertionPoint(module.body):
        ftype = ir.FunctionType.get(input_types + [const_types[c] for c in const_names], result_types)
        fn = func_d.FuncOp(name, ftype)
        entry = fn.add_entry_block()
    tensors: dict = {}
    for old, new in zip(block.arguments, entry.arguments):
        tensors[old] = new
    const_args = {c: entry.arguments[len(block.arguments) + i] for i, c in enumerate(const_names)}
    builder = _TorchBuilder()

    def new_constant(cname: str, array: np.ndarray, recipe: dict) -> ir.Value:
        """One more constant argument, computed by a lowering (the data is known now); the same
        constant asked for again (a weight two ops read) is the same argument."""
        if cname in lowered.constants:
            same = lowered.derived.get(cname) == recipe and np.array_equal(lowered.constants[cname], array)
            if not same:
                raise LoweringError(f"lowering {name}: constant '{cname}' is defined twice, differently")
            return const_args[cname]
        element = {np.dtype(np.float32): "f32", np.dtype(np.int32): "si32", np.dtype(np.int8): "si8"}[array.dtype]
        vtype = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, array.shape))}],{element}>")
        arg = entry.add_argument(vtype, ir.Location.unknown())
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in entry.arguments], result_types))
        lowered.arguments.append(("constant", cname))
        lowered.constants[cname] = array
        lowered.derived[cname] = recipe
        const_args[cname] = arg
        return arg

    builder.new_constant = new_constant
    with ir.InsertionPoint(entry):
        for op in ops:
            if op.name == "func.return":
                with op.location:
                    func_d.ReturnOp([tensors[v] for v in op.operands])
            else:
                _lower_op(op, tensors, builder, const_args, constants)
    return lowered


def _lower_op(op, tensors: dict, builder, const_args: dict, constants: dict | None = None) -> None:
    """The torch form of one edge-function op at the current insertion point (its results into
    `tensors`); a branch (scf.if of torch.cond) recursively, as torch.prim.If."""
    from etc.dialects import decode_op

    with op.location:
        if op.name == "ml_program.global_load_const":
            sym = ir.FlatSymbolRefAttr(op.attributes["global"]).value
            if sym in const_args:
                tensors[op.result] = const_args[sym]
        elif op.name in _SIZE_OPS:
            tensors[op.result] = _size_value(op, builder, tensors)
        elif op.name == "tensor.extract":  # a 0-d bool tensor read as a branch condition
            tensors[op.result] = ir.Operation.create("torch.aten.Bool.Tensor", results=[ir.Type.parse("!torch.bool")],
                                                     operands=[tensors[op.operands[0]]]).result
        elif op.name == "scf.if":
            branch = ir.Operation.create("torch.prim.If", results=[vtensor_type(r.type) for r in op.results],
                                         operands=[tensors[op.operands[0]]], regions=2)
            for source, target in zip(op.regions, branch.regions):
                block = target.blocks.append()
                outer = builder.cache
                builder.cache = dict(outer)  # constants made inside stay inside
                with ir.InsertionPoint(block):
                    for inner in source.blocks[0].operations:
                        inner = inner.operation
                        if inner.name == "scf.yield":
                            with inner.location:
                                ir.Operation.create("torch.prim.If.yield", operands=[tensors[v] for v in inner.operands])
                        else:
                            _lower_op(inner, tensors, builder, const_args, constants)
                builder.cache = outer
            for old, new in zip(op.results, branch.results):
                tensors[old] = new
        elif op.name.startswith("edge.") and _schema_info(op).torch_name in EXPANSIONS:
            expand = EXPANSIONS[_schema_info(op).torch_name]
            results = expand(_Emitter(builder, constants), _torch_values(decode_op(op), tensors), op)
            for old, repl in zip(op.results, results):
                tensors[old] = repl
        elif op.name.startswith("edge."):
            info = _schema_info(op)
            target, arguments, values = _adapt(info, decode_op(op), op)
            operands = [builder.value(a, values.get(a.name), tensors) for a in arguments]
            kept = _kept_results(info, op)
            rtypes = [vtensor_type(op.results[i].type) for i in kept]
            if any(r["kind"] == "variadic_result" for r in info.returns):
                # A `Tensor[]` return is one !torch.list value in torch-mlir; unpack it.
                listed = ir.Operation.create(torch_op_name(target), operands=operands,
                                             results=[ir.Type.parse("!torch.list<vtensor>")])
                new = ir.Operation.create("torch.prim.ListUnpack", results=rtypes, operands=[listed.result])
            else:
                new = ir.Operation.create(torch_op_name(target), results=rtypes, operands=operands)
            for i, repl in zip(kept, new.results):
                tensors[op.results[i]] = repl
        else:
            raise LoweringError(f"'{op.name}' inside a cpu delegate has no lowering", location=str(op.location))


# Arithmetic on symbolic sizes (the importer's `index` ops) -> torch's int ops, which torch-mlir
# lowers back to `arith` on the sizes its own `tensor.dim`s give.
_SIZE_OPS = {"tensor.dim": "torch.aten.size.int", "arith.constant": "torch.constant.int",
             "arith.addi": "torch.aten.add.int", "arith.subi": "torch.aten.sub.int", "arith.muli": "torch.aten.mul.int",
             "arith.floordivsi": "torch.aten.floordiv.int", "arith.remsi": "torch.aten.remainder.int",
             "arith.maxsi": "torch.prim.max.int", "arith.minsi": "torch.prim.min.int"}


def _size_value(op, builder, tensors: dict) -> ir.Value:
    """The !torch.int of a symbolic-size op of the edge function."""
    if op.name == "arith.constant":
        return builder.int(ir.IntegerAttr(op.attributes["value"]).value)
    operands = []
    for v in op.operands:
        if v not in tensors:
            raise LoweringError(f"'{op.name}' reads a size defined outside the delegate", location=str(op.location))
        operands.append(tensors[v])
    return ir.Operation.create(_SIZE_OPS[op.name], results=[ir.Type.parse("!torch.int")], operands=operands).result


def _result_bounds(value):
    from etc.compiler.ir import upper_bounds

    return upper_bounds(value) if isinstance(value.type, ir.RankedTensorType) else None


def _dim_bounds(func_op) -> dict:
    """Argument position -> `etc.dim_bounds` of the edge function's dynamically shaped inputs;
    a dynamic input without them cannot be compiled for an upper bound."""
    from etc.compiler.ir import DIM_BOUNDS_ATTR

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


def _kept_results(info, op) -> list[int]:
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


# ------------------------------------------------------------ expansions
_ELEMENT_DTYPE = {"i1": "bool", "i8": "int8", "ui8": "uint8", "i16": "int16", "i32": "int32", "i64": "int64",
                  "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


class _Same(dict):
    """A `tensors` map for `_TorchBuilder.value` whose tensor arguments are already torch values."""

    def __missing__(self, key):
        return key


class _Emitter:
    """Builds torch ops for EXPANSIONS: `e("aten::slice.Tensor", {schema arg: value}, shape, element)`
    (every schema argument given; tensors as torch values, element as in the builtin type: f32, i64, i1)."""

    def __init__(self, builder: _TorchBuilder, constants: dict | None = None):
        self.builder = builder
        self.constants = constants or {}  # fqn -> array: what an expansion may compute from at compile time

    def new_constant(self, name: str, array: np.ndarray, recipe: dict) -> ir.Value:
        """A constant argument holding `array`, which the runtime derives at load from the constants
        `recipe` names (`blob.DERIVATIONS`), so the program does not store it."""
        if self.builder.new_constant is None:
            raise LoweringError(f"expansion: constant '{name}' can only be added while lowering a delegate function")
        return self.builder.new_constant(name, np.ascontiguousarray(array), recipe)

    def __call__(self, torch_name: str, args: dict, shape, element: str) -> ir.Value:
        from etc.dialects import op_info

        info = op_info(torch_name)
        missing = [a.name for a in info.arguments if a.name not in args]
        if missing:
            raise LoweringError(f"expansion: {torch_name} needs {missing}")
        operands = [self.builder.value(a, args[a.name], _Same()) for a in info.arguments]
        return ir.Operation.create(torch_op_name(torch_name), results=[self.type(shape, element)],
                                   operands=operands).result

    @staticmethod
    def type(shape, element: str) -> ir.Type:
        return ir.Type.parse(f"!torch.vtensor<[{','.join(str(d) if d >= 0 else '?' for d in shape)}],"
                             f"{_TORCH_ELEMENT[element]}>")

    def literal(self, array) -> ir.Value:
        """A constant int64 tensor (index tensors computed at compile time)."""
        import numpy as np

        array = np.ascontiguousarray(array, dtype=np.int64)
        attr = ir.DenseElementsAttr.get(array, type=ir.IntegerType.get_signed(64))
        return ir.Operation.create("torch.vtensor.literal", results=[self.type(array.shape, "i64")],
                                   attributes={"value": attr}).result

    @staticmethod
    def shape(x) -> list:
        """The static shape of a !torch.vtensor value."""
        dims = re.match(r"!torch\.vtensor<\[([^\]]*)\]", str(x.type)).group(1)
        return [int(d) if d != "?" else _DYNAMIC for d in dims.split(",")] if dims else []

    @staticmethod
    def element(x) -> str:
        """The builtin element type name (f32, i64, i1) of a !torch.vtensor value."""
        torch_element = re.match(r"!torch\.vtensor<\[[^\]]*\],(\w+)>", str(x.type)).group(1)
        return {t: b for b, t in _TORCH_ELEMENT.items()}[torch_element]

    def permute(self, x, dims):
        if list(dims) == list(range(len(dims))):
            return x
        shape = self.shape(x)
        return self("aten::permute", {"self": x, "dims": list(dims)}, [shape[d] for d in dims], self.element(x))

    def view(self, x, shape, element):
        if self.shape(x) == list(shape):
            return x
        # A dynamic dim (at most one) is torch's -1: the rest of the elements.
        return reshape(x, [d if d >= 0 else -1 for d in shape], shape)

    def size(self, x, dim: int) -> ir.Value:
        """The !torch.int size of dim `dim` of `x` (a dynamic one is known at run time only)."""
        return ir.Operation.create("torch.aten.size.int", results=[ir.Type.parse("!torch.int")],
                                   operands=[x, self.builder.int(dim)]).result

    def scalar(self, x) -> ir.Value:
        """The !torch.int held by a 0-d int64 tensor (read at run time)."""
        return ir.Operation.create("torch.aten.Int.Tensor", results=[ir.Type.parse("!torch.int")],
                                   operands=[x]).result

    def add_int(self, a, b) -> ir.Value:
        return ir.Operation.create("torch.aten.add.int", results=[ir.Type.parse("!torch.int")],
                                   operands=[a, b]).result

    def loop(self, trip_count, init, body) -> ir.Value:
        """A for loop (torch.prim.Loop, an scf.for after lowering) of `trip_count` (!torch.int)
        iterations carrying one tensor: `body(k, carried)` emits an iteration and returns the next."""
        true = self.builder.bool(True)
        loop = ir.Operation.create("torch.prim.Loop", results=[init.type], operands=[trip_count, true, init],
                                   regions=1)
        block = loop.regions[0].blocks.append(ir.Type.parse("!torch.int"), init.type)
        with ir.InsertionPoint(block):
            saved, self.builder.cache = self.builder.cache, {}  # constants made inside stay inside
            try:
                carried = body(block.arguments[0], block.arguments[1])
                ir.Operation.create("torch.prim.Loop.condition", operands=[self.builder.bool(True), carried])
            finally:
                self.builder.cache = saved
        return loop.result

    def slice(self, x, shape, element, dim, start, end, step=1):
        out = list(shape)
        out[dim] = len(range(start, end, step))
        if out == list(shape):
            return x, out
        return self("aten::slice.Tensor", {"self": x, "dim": dim, "start": start, "end": end, "step": step},
                    out, element), out


def _torch_values(values: dict, tensors: dict) -> dict:
    """Decoded edge arguments with their tensors replaced by the torch values built for them."""
    def convert(v):
        if isinstance(v, ir.Value):
            if v not in tensors:
                raise LoweringError("symbolic sizes are not supported by the cpu target")
            return tensors[v]
        if isinstance(v, list):
            return [convert(x) for x in v]
        return v

    return {k: convert(v) for k, v in values.items()}


_DYNAMIC = ir.ShapedType.get_dynamic_size()


def _tensor_type(value) -> tuple[list, str]:
    t = ir.RankedTensorType(value.type)
    return list(t.shape), str(t.element_type)


def _expansion(torch_name: str):
    def register(fn):
        EXPANSIONS[torch_name] = fn
        return fn
    return register


# ------------------------------------------------------------ reshapes
def _reassociation(source: list, target: list) -> list:
    """Groups (source dims, target dims) of a row-major reshape from `source` to `target` (ints;
    _DYNAMIC for a size known at run time), finest first: dims are matched from both ends while
    the static sizes on each side multiply to the same number; what is left in the middle (where a
    dynamic size makes the match unprovable) is one group. Every group's sizes then multiply to
    the same number at run time, whatever the dynamic sizes are: the element count is equal, and
    so is every matched group's."""
    def scan(src, tgt):
        groups, i, j = [], 0, 0
        while i < len(src) and j < len(tgt):
            a, b = [i], [j]
            pa, pb = src[i], tgt[j]
            if pa == _DYNAMIC or pb == _DYNAMIC:
                break
            while pa != pb:
                if pa < pb and a[-1] + 1 < len(src) and src[a[-1] + 1] != _DYNAMIC:
                    a.append(a[-1] + 1)
                    pa *= src[a[-1]]
                elif pb < pa and b[-1] + 1 < len(tgt) and tgt[b[-1] + 1] != _DYNAMIC:
                    b.append(b[-1] + 1)
                    pb *= tgt[b[-1]]
                else:
                    return groups
            groups.append((a, b))
            i, j = a[-1] + 1, b[-1] + 1
        return groups

    head = scan(source, target)
    i = head[-1][0][-1] + 1 if head else 0
    j = head[-1][1][-1] + 1 if head else 0
    n, m = len(source) - i, len(target) - j
    tail = [([n - 1 - d for d in reversed(a)], [m - 1 - d for d in reversed(b)])
            for a, b in scan(source[i:][::-1], target[j:][::-1])]
    tail = [([i + d for d in a], [j + d for d in b]) for a, b in reversed(tail)]
    k = tail[0][0][0] if tail else len(source)
    l = tail[0][1][0] if tail else len(target)
    middle = [(list(range(i, k)), list(range(j, l)))] if (k > i or l > j) else []
    groups = head + middle + tail
    # A group with no dims on one side holds only static 1s on the other: join it to a neighbour.
    joined = []
    for a, b in groups:
        if (not a or not b) and joined:
            joined[-1] = (joined[-1][0] + a, joined[-1][1] + b)
        elif joined and (not joined[-1][0] or not joined[-1][1]):
            joined[-1] = (joined[-1][0] + a, joined[-1][1] + b)
        else:
            joined.append((a, b))
    return joined


def reshape(x, sizes: list, shape: list) -> ir.Value:
    """The torch value `x` (!torch.vtensor) reshaped to `sizes` (ints, !torch.int values for sizes
    known at run time, at most one -1 for "the rest"), of static shape `shape` (_DYNAMIC where
    unknown), as tensor.collapse_shape / tensor.expand_shape on builtin tensors.

    Why not torch-mlir's aten.view lowering: with two or more dynamic dims it guesses which input
    dims a dynamic output dim merges, and guesses wrong ([b, t, 64] -> [b*t, 64] became a cast of
    [b, t, 64] to [b, 1, 64]: NaN and writes out of bounds, torch-mlir issues 3852 and 4743). The
    groups here are provably right at every size (`_reassociation`), and an ambiguous middle is
    collapsed to one dim and expanded again, which is right whatever the sizes are. The
    dynamic sizes of the result are the view's own size values."""
    from torch_mlir.dialects import arith
    from torch_mlir.dialects import tensor as tensor_d

    from etc.targets.cpu.lower_quantized import _load_torch_c

    _load_torch_c(x.context)
    source_shape = _Emitter.shape(x)
    element = _Emitter.element(x)
    builtin_element = ir.Type.parse(element if element != "ui8" else "i8")
    in_type = ir.RankedTensorType.get(source_shape, builtin_element)
    value = ir.Operation.create("torch_c.to_builtin_tensor", results=[in_type], operands=[x]).result
    index = ir.IndexType.get()

    def run_time(size) -> ir.Value:
        as_i64 = ir.Operation.create("torch_c.to_i64", results=[ir.IntegerType.get_signless(64)],
                                     operands=[size]).result
        return arith.IndexCastOp(index, as_i64).result

    def source_size(d: int) -> ir.Value:
        if source_shape[d] != _DYNAMIC:
            return arith.ConstantOp(index, source_shape[d]).result
        return tensor_d.DimOp(value, arith.ConstantOp(index, d).result).result

    target = [s if isinstance(s, int) and s >= 0 else (shape[d] if shape[d] != _DYNAMIC else _DYNAMIC)
              for d, s in enumerate(sizes)]
    groups = _reassociation(source_shape, target)
    # Run-time sizes of the target's dynamic dims: the view's size values; a -1 is what its group's
    # source elements leave over the group's other sizes.
    runtime: dict = {}
    for a, b in groups:
        for d in b:
            if target[d] != _DYNAMIC:
                continue
            if isinstance(sizes[d], ir.Value):
                runtime[d] = run_time(sizes[d])
                continue
            total = None
            for s in a:
                total = source_size(s) if total is None else arith.MulIOp(total, source_size(s)).result
            total = total if total is not None else arith.ConstantOp(index, 1).result
            for o in b:
                if o != d:
                    other = (arith.ConstantOp(index, target[o]).result if target[o] != _DYNAMIC else
                             run_time(sizes[o]) if isinstance(sizes[o], ir.Value) else None)
                    if other is None:
                        raise LoweringError(f"reshape to {sizes}: two sizes to infer in one group")
                    total = arith.DivUIOp(total, other).result
            runtime[d] = total

    def group_size(dims, shape_of):
        sizes_ = [shape_of[d] for d in dims]
        return _DYNAMIC if _DYNAMIC in sizes_ else int(np.prod(sizes_, dtype=np.int64))

    def attr(groups_):
        return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)
                                                   for d in g]) for g in groups_])

    out_type = ir.RankedTensorType.get(target, builtin_element)
    if not target:  # to a scalar: every source dim is a 1
        ones = ir.RankedTensorType.get([1] * len(source_shape), builtin_element)
        value = tensor_d.CastOp(ones, value).result if source_shape != [1] * len(source_shape) else value
        value = tensor_d.CollapseShapeOp(out_type, value, attr([])).result
    elif not source_shape:  # from a scalar
        value = tensor_d.ExpandShapeOp(ir.RankedTensorType.get([1] * len(target), builtin_element), value,
                                       attr([]), [], [1] * len(target)).result
        if target != [1] * len(target):
            value = tensor_d.CastOp(out_type, value).result
    elif source_shape != target or any(len(a) != 1 or len(b) != 1 for a, b in groups):
        if any(len(a) > 1 for a, _ in groups):
            collapsed = [group_size(a, source_shape) for a, _ in groups]
            value = tensor_d.CollapseShapeOp(ir.RankedTensorType.get(collapsed, builtin_element), value,
                                             attr([a for a, _ in groups])).result
        if any(len(b) > 1 for _, b in groups):
            value = tensor_d.ExpandShapeOp(out_type, value, attr([b for _, b in groups]),
                                           [runtime[d] for d in range(len(target)) if target[d] == _DYNAMIC],
                                           target).result
        elif ir.RankedTensorType(value.type) != out_type:  # one group per dim, sizes the types disagree on
            value = tensor_d.CastOp(out_type, value).result
    result = ir.RankedTensorType.get(shape, builtin_element)
    if value.type != result:
        value = tensor_d.CastOp(result, value).result
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[_Emitter.type(shape, element)],
                               operands=[value]).result


@_expansion("aten::view")
def _expand_view(e: _Emitter, v: dict, op) -> list:
    shape, _ = _tensor_type(op.results[0])
    return [reshape(v["self"], list(v["size"]), shape)]


@_expansion("aten::squeeze.dims")
@_expansion("aten::squeeze.dim")
@_expansion("aten::unsqueeze")
def _expand_squeeze(e: _Emitter, v: dict, op) -> list:
    """squeeze/unsqueeze as the reshape they are (the kept dims' sizes from the input)."""
    shape, _ = _tensor_type(op.results[0])
    source = _Emitter.shape(v["self"])
    sizes = [n if n != _DYNAMIC else e.size(v["self"], d) for d, n in enumerate(source)]
    if _schema_info(op).torch_name == "aten::unsqueeze":
        sizes.insert(v["dim"] % (len(source) + 1), 1)
    else:
        dims = v["dim"] if isinstance(v["dim"], list) else [v["dim"]]
        dims = {d % max(len(source), 1) for d in dims}
        sizes = [s for d, s in enumerate(sizes) if not (d in dims and source[d] == 1)]
    return [reshape(v["self"], sizes, shape)]


@_expansion("aten::index.Tensor")
def _expand_index(e: _Emitter, v: dict, op) -> list:
    """index.Tensor as is, its int32 index tensors widened to int64 first (torch-mlir's lowering
    compares them with i64 bounds and fails to verify otherwise)."""
    shape, element = _tensor_type(op.results[0])
    indices = []
    for index in v["indices"]:
        if index is not None and e.element(index) != "i64" and e.element(index) != "i1":
            index = e("aten::to.dtype", {"self": index, "dtype": "int64", "non_blocking": False, "copy": False,
                                         "memory_format": None}, e.shape(index), "i64")
        indices.append(index)
    return [e("aten::index.Tensor", {"self": v["self"], "indices": indices}, shape, element)]


@_expansion("aten::cumsum")
def _expand_cumsum(e: _Emitter, v: dict, op) -> list:
    """torch-mlir lowers cumsum to tm_tensor.scan, which our bufferization does not take: a
    Hillis-Steele scan instead, ceil(log2 n) steps of x + (x shifted by 2^k along dim, zero-filled),
    each a slice, a pad and an add that fuse into one loop nest (exact for integers; for floats each
    output sums its prefix as a tree). Over a dynamic dim, n is its upper bound and the shift is
    the pad first, then the first `size` elements (run-time size): right for every size, a shift
    past the end giving zeros. (Its steps once counted the dynamic sentinel: no step, x returned
    as its own cumsum.)"""
    from etc.compiler.ir import upper_bounds

    shape, element = _tensor_type(op.results[0])
    _, in_element = _tensor_type(op.operands[0])
    x = v["self"]
    if in_element != element:  # cumsum of bool/int32 gives int64 (or `dtype`)
        x = e("aten::to.dtype", {"self": x, "dtype": _ELEMENT_DTYPE[element], "non_blocking": False, "copy": False,
                                 "memory_format": None}, shape, element)
    rank = len(shape)
    if rank == 0:
        return [x]
    dim = v["dim"] % rank
    n = shape[dim]
    dynamic = n == _DYNAMIC
    if dynamic:
        bounds = upper_bounds(op.results[0])
        if bounds is None or bounds[dim] < 0:
            raise LoweringError("cumsum over a dynamic dim without an upper bound")
        n, size = bounds[dim], e.size(x, dim)
    zero = 0.0 if element.startswith(("f", "bf")) else 0
    step = 1
    while step < n:
        pad = [0] * (2 * rank)
        pad[2 * (rank - 1 - dim)] = step  # constant_pad_nd's pairs run from the last dim
        if dynamic:
            padded = e("aten::constant_pad_nd", {"self": x, "pad": pad, "value": zero}, shape, element)
            shifted = e("aten::slice.Tensor", {"self": padded, "dim": dim, "start": 0, "end": size, "step": 1},
                        shape, element)
        else:
            head, _ = e.slice(x, shape, element, dim, 0, n - step)
            shifted = e("aten::constant_pad_nd", {"self": head, "pad": pad, "value": zero}, shape, element)
        x = e("aten::add.Tensor", {"self": x, "other": shifted, "alpha": 1}, shape, element)
        step *= 2
    return [x]


@_expansion("aten::gelu")
def _expand_gelu(e: _Emitter, v: dict, op) -> list:
    """gelu(approximate="tanh") as its formula, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
    torch-mlir's lowering uses 0.797724 for sqrt(2/pi) = 0.7978846 and was 5e-5 off ATen. The
    exact GELU goes as it is (its erf is expanded by etc-cpu-expand-math)."""
    shape, element = _tensor_type(op.results[0])
    x = v["self"]
    if v["approximate"] != "tanh":
        return [e("aten::gelu", {"self": x, "approximate": v["approximate"]}, shape, element)]

    def times(a, b):
        return e("aten::mul.Tensor", {"self": a, "other": b}, shape, element)

    def scaled(a, c):
        return e("aten::mul.Scalar", {"self": a, "other": c}, shape, element)

    cube = times(times(x, x), x)
    inner = e("aten::add.Tensor", {"self": x, "other": cube, "alpha": 0.044715}, shape, element)
    t = e("aten::tanh", {"self": scaled(inner, math.sqrt(2.0 / math.pi))}, shape, element)
    one_plus = e("aten::add.Scalar", {"self": t, "other": 1.0, "alpha": 1}, shape, element)
    return [times(scaled(x, 0.5), one_plus)]


def _strided_box(size, stride, offset, numel):
    """as_strided(size, stride, offset) of a flat buffer as slices of a reshape, when its dims do not
    overlap: the non-trivial dims sorted by stride (outermost first) must each fit inside the next
    larger stride, which it divides. Returns (pad, view shape, slice ends, sorted dims) or None."""
    dims = [d for d in range(len(size)) if size[d] > 1 and stride[d] > 0]
    dims.sort(key=lambda d: -stride[d])
    if not dims:
        return None
    for outer, inner in zip(dims, dims[1:]):
        if stride[outer] % stride[inner] or size[inner] * stride[inner] > stride[outer]:
            return None
    extent = size[dims[0]] * stride[dims[0]]
    shape = [size[dims[0]]] + [stride[a] // stride[b] for a, b in zip(dims, dims[1:])] + [stride[dims[-1]]]
    ends = [size[d] for d in dims] + [1]
    return max(0, offset + extent - numel), shape, ends, dims


@_expansion("aten::as_strided")
def _expand_as_strided(e: _Emitter, v: dict, op) -> list:
    """as_strided reads the input's contiguous storage (the portable kernel's semantics). Static
    sizes and strides make it a view chain (flatten, slice at the offset, reshape into a box,
    slices, permute, broadcast) when its dims do not overlap, and a gather with a constant index
    tensor otherwise (sliding windows)."""
    import numpy as np

    in_shape, element = _tensor_type(op.operands[0])
    out_shape, _ = _tensor_type(op.results[0])
    if _DYNAMIC in in_shape or _DYNAMIC in out_shape:  # the view chain below is computed from static sizes
        raise LoweringError("as_strided of or to a dynamically shaped tensor (the cpu target takes static ones)")
    size, stride = list(v["size"]), list(v["stride"])
    offset = v.get("storage_offset") or 0
    numel = int(np.prod(in_shape)) if in_shape else 1
    flat = e.view(v["self"], [numel], element)
    box = _strided_box(size, stride, offset, numel) if numel else None
    if box is None or int(np.prod(out_shape)) == 0:
        index = np.full(size, offset, dtype=np.int64)
        for d, (n, st) in enumerate(zip(size, stride)):
            index = index + (np.arange(n) * st).reshape([n if i == d else 1 for i in range(len(size))])
        gathered = e("aten::index_select", {"self": flat, "dim": 0, "index": e.literal(index.reshape(-1))},
                     [index.size], element)
        return [e.view(gathered, out_shape, element)]
    pad, shape, ends, dims = box
    length = numel
    if pad:  # the box runs past the storage's end, where nothing is read
        flat = e("aten::constant_pad_nd", {"self": flat, "pad": [0, pad], "value": 0}, [numel + pad], element)
        length += pad
    extent = int(np.prod(shape))
    x, _ = e.slice(flat, [length], element, 0, offset, offset + extent)
    x = e.view(x, shape, element)
    for d, end in enumerate(ends):
        x, shape = e.slice(x, shape, element, d, 0, end)
    shape = [size[d] for d in dims]
    x = e.view(x, shape, element)
    order = sorted(range(len(dims)), key=lambda i: dims[i])  # back to the output's dim order
    if order != list(range(len(dims))):
        shape = [shape[i] for i in order]
        x = e("aten::permute", {"self": x, "dims": order}, shape, element)
    kept = [size[d] if d in dims else 1 for d in range(len(size))]
    if kept != shape:
        x = e.view(x, kept, element)
    if kept != list(out_shape):  # stride-0 dims broadcast
        x = e("aten::expand", {"self": x, "size": list(out_shape), "implicit": False}, out_shape, element)
    return [x]


@_expansion("aten::index_put")
def _expand_index_put(e: _Emitter, v: dict, op) -> list:
    """torch-mlir lowers index_put to tm_tensor.scatter, which our bufferization does not take: a
    loop over the K index tuples instead, each writing its row of values into x (accumulate: adding
    it), in order, so a position named twice takes its last write (ATen's CPU kernel does the same)
    or the sum of all. x is viewed as [pre, P, post] with its P indexed positions in the middle
    (adjacent indexed dims need no copy for that; others are permuted to the front), the values
    as [pre, K, post], the index tuples linearized to K positions. A KV-cache update
    (cache[:, :, pos] = k) writes its new rows only: after bufferization it is a copy of the cache
    into the result (none when the delegate computes the cache in place: etc-cpu-copies-to-linalg)
    and K slice writes, where a select over the whole cache read and wrote every element."""
    import numpy as np

    shape, element = _tensor_type(op.results[0])
    rank = len(shape)
    indices = list(v["indices"]) + [None] * (rank - len(v["indices"]))
    dims = [d for d, i in enumerate(indices) if i is not None]
    if not dims:
        return [v["self"]]
    if any(e.element(indices[d]) == "i1" for d in dims):
        raise LoweringError("index_put with a boolean mask index has a data-dependent shape")
    if _DYNAMIC in shape:  # the [pre, P, post] view below multiplies static sizes
        raise LoweringError("index_put into a dynamically shaped tensor (the cpu target's scatter is built for "
                            "static sizes; a dynamic number of indices into a static tensor is taken)")
    rest = [d for d in range(rank) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    index_shapes = [e.shape(indices[d]) for d in dims]
    if any(_DYNAMIC in ishape for ishape in index_shapes):  # a dynamic count of indices (a prompt's positions)
        if len(dims) != 1 or len(index_shapes[0]) != 1:
            raise LoweringError("index_put with a dynamic number of indices takes one 1-D index tensor")
        bshape, n_idx = list(index_shapes[0]), _DYNAMIC
    else:
        bshape = list(np.broadcast_shapes(*[tuple(ishape) for ishape in index_shapes]))
        n_idx = int(np.prod(bshape))
    n_pos = int(np.prod([shape[d] for d in dims]))
    if adjacent:  # x[indices] keeps the index dims where the indexed dims were
        pre, post = int(np.prod(shape[:dims[0]])), int(np.prod(shape[dims[-1] + 1:]))
        sub = shape[:dims[0]] + bshape + shape[dims[-1] + 1:]
        x = e.view(v["self"], [pre, n_pos, post], element)
    else:  # x[indices] puts them first
        pre, post = 1, int(np.prod([shape[d] for d in rest]))
        sub = bshape + [shape[d] for d in rest]
        x = e.view(e.permute(v["self"], dims + rest), [1, n_pos, post], element)
    values = v["values"]
    if e.shape(values) != sub:
        values = e("aten::expand", {"self": values, "size": sub, "implicit": False}, sub, element)
    values = e.view(values, [pre, n_idx, post], element)
    # Linear position of each index tuple: sum_j (index_j mod size_j) * stride_j, broadcast to [K].
    linear = None
    stride = n_pos
    for d in dims:
        stride //= shape[d]
        index = indices[d]
        ishape = e.shape(index)
        if e.element(index) != "i64":
            index = e("aten::to.dtype", {"self": index, "dtype": "int64", "non_blocking": False, "copy": False,
                                         "memory_format": None}, ishape, "i64")
        index = e("aten::remainder.Scalar", {"self": index, "other": shape[d]}, ishape, "i64")  # -1 -> size-1
        if stride != 1:
            index = e("aten::mul.Scalar", {"self": index, "other": stride}, ishape, "i64")
        if linear is None:
            linear = index
        else:
            out = list(np.broadcast_shapes(tuple(e.shape(linear)), tuple(ishape)))
            linear = e("aten::add.Tensor", {"self": linear, "other": index, "alpha": 1}, out, "i64")
    if e.shape(linear) != bshape:
        linear = e("aten::expand", {"self": linear, "size": bshape, "implicit": False}, bshape, "i64")
    linear = e.view(linear, [n_idx], "i64")
    out_shape = [pre, n_pos, post]
    out = e.loop(e.size(linear, 0) if n_idx == _DYNAMIC else e.builder.int(n_idx), x,
                 lambda k, acc: _scatter_row(e, acc, values, linear, k, bool(v["accumulate"])))
    if adjacent:
        return [e.view(out, shape, element)]
    out = e.view(out, [shape[d] for d in dims + rest], element)
    return [e.permute(out, sorted(range(rank), key=lambda i: (dims + rest)[i]))]


def _scatter_row(e: _Emitter, acc, values, linear, k, accumulate: bool):
    """acc[:, linear[k], :] = values[:, k, :] (accumulate: +=), on [pre, P, post] and [pre, K, post]."""
    pre, _, post = e.shape(acc)
    element = e.element(acc)
    one = e.builder.int(1)
    position = e("aten::select.int", {"self": linear, "dim": 0, "index": k}, [], "i64")
    p = e.scalar(position)
    p_end = e.add_int(p, one)
    row = e("aten::slice.Tensor", {"self": values, "dim": 1, "start": k, "end": e.add_int(k, one), "step": 1},
            [pre, 1, post], element)
    if accumulate:
        old = e("aten::slice.Tensor", {"self": acc, "dim": 1, "start": p, "end": p_end, "step": 1},
                [pre, 1, post], element)
        row = e("aten::add.Tensor", {"self": old, "other": row, "alpha": 1}, [pre, 1, post], element)
    return e("aten::slice_scatter", {"self": acc, "src": row, "dim": 1, "start": p, "end": p_end, "step": 1},
             e.shape(acc), element)


TORCH_TO_LINALG = ("builtin.module(torchdynamo-export-to-torch-backend-pipeline, "
                   "torch-backend-to-linalg-on-tensors-backend-pipeline)")


def run_pipeline(module: ir.Module, pipeline: str, what: str) -> None:
    from torch_mlir.passmanager import PassManager

    pm = PassManager.parse(pipeline, context=module.context)
    try:
        pm.run(module.operation)
    except Exception as e:  # MLIRError carries the diagnostics
        raise LoweringError(f"{what} failed: {e}") from None


def lower_to_linalg(func_op, constants: dict) -> LoweredFunction:
    """Edge function -> module with one func on builtin tensors in linalg/tensor/arith/math."""
    lowered = edge_to_torch(func_op, constants)
    run_pipeline(lowered.module, TORCH_TO_LINALG, "lowering torch to linalg-on-tensors")
    return lowered


def import_for_lowering(func_op) -> tuple[ir.Context, ir.Operation]:
    """Re-parse an outlined function (and the globals it reads) into a fresh torch-aware context."""
    parent = func_op.parent
    texts = []
    used = set()

    def collect(op):
        if op.name == "ml_program.global_load_const":
            used.add(ir.FlatSymbolRefAttr(op.attributes["global"]).value)
        return ir.WalkResult.ADVANCE

    func_op.operation.walk(collect)
    if parent is not None:
        for op in parent.regions[0].blocks[0].operations:
            if op.operation.name == "ml_program.global" and ir.StringAttr(op.attributes["sym_name"]).value in used:
                texts.append(op.operation.get_asm(print_generic_op_form=True))
    texts.append(func_op.operation.get_asm(print_generic_op_form=True))
    context = shared_context()
    with context:
        module = ir.Module.parse("module {\n" + "\n".join(texts) + "\n}")
    fn = [op for op in module.body.operations if op.operation.name == "func.func"][-1]
    # Keep the module alive with the op.
    fn._etc_module = module  # type: ignore[attr-defined]
    return context, fn


# ------------------------------------------------------------------ driver
STAGES = ("torch", "linalg", "llvm-ir")


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m etc.targets.cpu.lower", description=__doc__.split("\n")[0])
    parser.add_argument("file")
    parser.add_argument("--stage", choices=STAGES, default="linalg",
                        help="torch: edge mapped onto torch ops; linalg: after torch-mlir's pipelines (the cpu "
                             "pipeline's input: run its passes with etc-opt); llvm-ir: optimized LLVM IR")
    parser.add_argument("--target", default="host", help="host, a preset (aarch64, cortex-m7) or an LLVM triple")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    try:
        with make_context() as ctx, ir.Location.unknown():
            ctx.allow_unregistered_dialects = False
            module = ir.Module.parse(text)
            funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
            chosen = [f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value.startswith("delegate_")] or funcs
            for fn in chosen:
                print(_run_stage(fn, _zero_constants(module), args.stage, args.target))
    except Exception as e:  # noqa: BLE001 - a driver prints the diagnostic
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _run_stage(fn, constants: dict, stage: str, target: str) -> str:
    from etc.targets.cpu.isa import resolve_target
    from etc.targets.cpu.pipeline import compile_linalg, cpu_pipeline

    if stage == "torch":
        lowered = edge_to_torch(fn, constants)
        return f"// arguments: {lowered.arguments}\n{lowered.module}"
    lowered = lower_to_linalg(fn, constants)
    header = f"// arguments: {lowered.arguments}\n"
    if stage == "linalg":  # the pipeline's input contract: etc-opt can run the cpu pipeline on it
        from etc.targets.cpu.passes._util import entry_function
        from etc.targets.cpu.pipeline import label_arguments

        label_arguments(entry_function(lowered.module.operation), lowered.arguments, lowered.dim_bounds,
                        lowered.result_bounds)
        return header + str(lowered.module)
    resolved = resolve_target(target)
    result = compile_linalg(lowered.module, lowered.arguments, resolved, keep_ir=True)
    layout = ", ".join(f"{a.kind}:{a.dtype}{list(a.shape)}" for a in result.args)
    return (f"// target: {resolved.triple} ({resolved.cpu})\n// pipeline: {cpu_pipeline(resolved)}\n"
            f"// entry {result.entry}(args): {layout}\n" + result.llvm_ir)


def _zero_constants(module) -> dict:
    """Placeholder data for the driver: lowering only needs the constants' presence."""
    import numpy as np

    out = {}
    for op in module.body.operations:
        if op.operation.name == "ml_program.global":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            out[name] = np.zeros(0)
    return out



from etc.targets.cpu import lower_quantized  # noqa: E402 - registers the int8 ops' EXPANSIONS


if __name__ == "__main__":
    sys.exit(main())

