"""What the cpu target may delegate: `is_supported(op, target)`, for the partitioner.

A structural check first (an edge op with schema information, ranked tensors of supported dtypes,
each dynamic dim with an upper bound, a torch-mlir op to map onto, or one of our expansions or
quantized lowerings), then a trial: the op alone, its operands the arguments and its used results
the results, through the cpu pipeline (`pipeline.cpu_pipeline`) for the same target down to the
LLVM dialect, without building kernels (`tuned=False`: a kernel never makes an op unsupported,
and one that fails must fail the compile), cached per op signature and target. The quantized ops are ours and need the
weights' data, which a lone op has not: `quantized.check` instead. The partitioner first tries
the whole method in one trial (`trial_function`).
"""

from __future__ import annotations

import re

from torch_mlir import ir

from etc.targets.cpu.lowering import quantized
from etc.targets.cpu.lowering.context import import_for_lowering, program_of, shared_context
from etc.targets.cpu.lowering.expansions import EXPANSIONS
from etc.targets.cpu.lowering.torch_ops import ADAPTERS, CPU_DTYPES, SIZE_OPS, torch_op_name


def _schema_info(op):
    info = getattr(type(op.operation.opview), "OP_INFO", None)
    return info


def target_overload(torch_name: str) -> str:
    adapter = ADAPTERS.get(torch_name)
    return adapter[0] if adapter else torch_name


def is_supported(op, target) -> tuple[bool, str]:
    """Can the cpu target take `op` when compiling for `target` (a CpuTarget)? (bool, reason); a
    structural check, then a trial lowering (cached)."""
    ok, reason = structural_check(op)
    if not ok:
        return ok, reason
    if op.name in ("ml_program.global_load_const", "tensor.extract"):
        return True, ""
    if op.name == "scf.if":  # a branch of torch.cond: native when every op of both branches is
        for inner in _branch_ops(op):
            ok, reason = is_supported(inner, target)
            if not ok:
                return False, f"a branch holds {inner.name}: {reason}"
        return True, ""
    info = _schema_info(op)
    if info is not None and info.torch_name in quantized.LOWERED:  # ours, and they need the weights' data
        return quantized.check(op)
    return _trial_lowering(op, target)


def _branch_ops(op) -> list:
    return [inner.operation for region in op.regions for inner in region.blocks[0].operations
            if inner.operation.name != "scf.yield"]


def structural_check(op) -> tuple[bool, str]:
    """The cheap part of `is_supported`: op kind, types, static shapes, a torch-mlir op to map onto."""
    name = op.name
    if name in ("ml_program.global_load_const",):
        return True, ""
    if name in SIZE_OPS and all(isinstance(r.type, ir.IndexType) for r in op.results):
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
    if info.torch_name in EXPANSIONS or info.torch_name in quantized.LOWERED:
        return True, ""
    if not op.context.is_registered_operation(torch_op_name(target_overload(info.torch_name))):
        # The program context may not have the torch dialect loaded; ask a torch-aware context.
        if not _torch_registered(target_overload(info.torch_name)):
            return False, f"{info.torch_name} has no op in torch-mlir's torch dialect"
    return True, ""


def trial_function(func_op, constants: dict, target) -> tuple[bool, str]:
    """Lower a whole function (e.g. a method, for whole-model delegation) to the LLVM dialect for
    `target`: one trial instead of one per op signature."""
    from etc.targets.cpu.pipeline import run_cpu_pipeline

    try:
        context, module = import_for_lowering(func_op)
        with context, ir.Location.unknown():
            program = program_of(module, constants)  # the weights' data, for the int8 lowering
            run_cpu_pipeline(program.module, target, tuned=False)
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, str(e).splitlines()[0] if str(e) else type(e).__name__


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
    from etc.ir.shapes import upper_bounds

    if not isinstance(value.type, ir.RankedTensorType) or ir.RankedTensorType(value.type).has_static_shape:
        return ""
    bounds = upper_bounds(value)
    if bounds is None:
        return ""
    return " {etc.dim_bounds = array<i64: " + ", ".join(f"0, {b}" for b in bounds) + ">}"


def _trial_lowering(op, target) -> tuple[bool, str]:
    """Lower `op` alone (operands become arguments, its used results the results) through the cpu
    pipeline for `target`; the answer is cached per op signature and target."""
    from etc.targets.cpu.pipeline import run_cpu_pipeline

    key = (_trial_key(op), target)
    if key in _TRIAL_CACHE:
        return _TRIAL_CACHE[key]
    used = _used_results(op)
    sizes = [i for i, v in enumerate(op.operands) if isinstance(v.type, ir.IndexType)]
    tensors = [i for i in range(len(op.operands)) if i not in sizes]
    args = ", ".join(f"%a{i}: {op.operands[i].type}{_bounds_text(op.operands[i])}" for i in tensors)
    prologue = ""
    if sizes:  # symbolic sizes: dims of one more argument, bounded by the op's largest bound
        from etc.ir.shapes import upper_bounds

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
    text = (f"func.func @trial({args}) -> ({rtypes}) {{\n{prologue}"
            f"  %r:{len(op.results)} = \"{op.name}\"({names}) {{{attrs}}} : "
            f"({', '.join(str(v.type) for v in op.operands)}) -> ({all_types})\n"
            f"  return {rnames} : {rtypes}\n}}")
    try:
        with shared_context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            run_cpu_pipeline(module, target, tuned=False)
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
