"""etc-cpu-entry-abi: the entry's argument list, as the blob and the runtime will call it, written on the module.

After bufferization and scratch planning the entry function takes one buffer per input,
constant, output (the out-params bufferization added, unlabelled until now) and scratch
buffer. This pass labels the outputs (`etc.cpu.arg = "output:<i>"`), marks every argument
`llvm.noalias` (the runtime never passes overlapping buffers: outputs and scratch never
overlap inputs, so LLVM vectorizes without alias checks; except the output and input of an
in-place pair, `etc.cpu.in_place`, which may be one buffer, and scratch buffers that share bytes
with another, etc-cpu-plan-scratch's lifetime reuse), and writes the ABI the blob
header records as the module attribute

    etc.cpu.abi = [{kind = "input", name = "0", dtype = "float32", shape = array<i64: 1, 3>}, ...]

(`pack` too, for constants packed at blob-build time; `dynamic`, the dims given at run time, for
buffers of dynamically shaped tensors, whose `shape` is then their upper bound; kinds `dims` for
the run-time sizes, see etc-cpu-dynamic-shapes), and the scratch buffer's size as
`etc.cpu.scratch_bytes` (0 without scratch). It survives the lowering to the LLVM
dialect, which is where the cpu target reads it back.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.errors import PassError
from etc.ir.ops import as_operation
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import ARG_ATTR, arg_attrs, arg_label, entry_function, in_place_pairs, set_arg_attrs

ABI_ATTR = "etc.cpu.abi"

_NUMPY_OF_ELEMENT = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "uint16", "i64": "int64",
                     "i32": "int32", "i16": "int16", "i8": "int8", "ui8": "uint8", "i1": "bool"}


def numpy_dtype_of(element_type) -> str:
    text = str(element_type)
    if text not in _NUMPY_OF_ELEMENT:
        raise PassError(f"element type {text} has no buffer form on the cpu target")
    return _NUMPY_OF_ELEMENT[text]


@function_pass("etc-cpu-entry-abi", "Label the entry's output buffers, mark all noalias, record the ABI on the module")
def entry_abi(module, options=None) -> int:
    from etc.targets.cpu.size_ranges import DIM_RANGES_ATTR
    from etc.targets.cpu.passes.dynamic_shapes import DYNAMIC_ATTR, SHAPE_ATTR
    from etc.targets.cpu.passes.plan_scratch import SCRATCH_ATTR
    from etc.targets.cpu.passes.prepack_constants import PACK_ATTR

    fn = entry_function(module)
    attrs = arg_attrs(fn)
    block = fn.regions[0].blocks[0]
    pairs = in_place_pairs(as_operation(module))
    shared = {("output", str(k)) for k, _ in pairs} | {("input", str(j)) for _, j in pairs}
    outputs = 0
    entries = []
    sharing = _sharing_scratch(block, attrs)
    with fn.context:
        for i, (arg, a) in enumerate(zip(block.arguments, attrs)):
            label = arg_label(a)
            if label is None:
                label = ("output", str(outputs))
                a[ARG_ATTR] = ir.StringAttr.get(f"output:{outputs}")
                outputs += 1
            if not isinstance(arg.type, ir.MemRefType):
                raise PassError(f"etc-cpu-entry-abi: argument {i} is {arg.type}, not a buffer (run after bufferization)")
            t = ir.MemRefType(arg.type)
            kind, name = label
            shape = list(t.shape) if kind != "scratch" else [int(name)]
            if SHAPE_ATTR in a:  # a flat buffer of a dynamically shaped tensor (etc-cpu-dynamic-shapes)
                shape = list(ir.DenseI64ArrayAttr(a.pop(SHAPE_ATTR)))
            entry = {"kind": ir.StringAttr.get(kind), "name": ir.StringAttr.get(name if kind != "scratch" else "scratch"),
                     "dtype": ir.StringAttr.get(numpy_dtype_of(t.element_type) if kind != "scratch" else "uint8"),
                     "shape": ir.DenseI64ArrayAttr.get(shape)}
            if PACK_ATTR in a:
                entry["pack"] = a[PACK_ATTR]
            if DYNAMIC_ATTR in a:
                entry["dynamic"] = a.pop(DYNAMIC_ATTR)
            for attr in (DIM_RANGES_ATTR, "etc.dim_bounds"):
                a.pop(attr, None)
            entries.append(ir.DictAttr.get(entry))
            a.pop("bufferization.writable", None)
            a.pop(PACK_ATTR, None)
            if label not in shared and i not in sharing:
                a["llvm.noalias"] = ir.UnitAttr.get()
        set_arg_attrs(fn, attrs)
        module.attributes[ABI_ATTR] = ir.ArrayAttr.get(entries)
        scratch = fn.attributes[SCRATCH_ATTR] if SCRATCH_ATTR in fn.attributes else \
            ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)
        module.attributes[SCRATCH_ATTR] = scratch
    return len(entries)


def _sharing_scratch(block, attrs) -> set:
    """Positions of the scratch arguments whose bytes overlap another's (etc-cpu-plan-scratch gives
    buffers with disjoint lifetimes the same bytes): those are not `noalias` in the entry."""
    from etc.targets.cpu.passes.plan_scratch import element_bytes

    ranges = []
    for i, (arg, a) in enumerate(zip(block.arguments, attrs)):
        label = arg_label(a)
        if label is None or label[0] != "scratch" or not isinstance(arg.type, ir.MemRefType):
            continue
        t = ir.MemRefType(arg.type)
        nbytes = element_bytes(t.element_type)
        for size in t.shape:
            nbytes *= size
        ranges.append((int(label[1]), int(label[1]) + max(nbytes, 1), i))
    ranges.sort()
    sharing = set()
    for k, (lo, hi, i) in enumerate(ranges):
        for other_lo, other_hi, j in ranges[k + 1:]:
            if other_lo >= hi:
                break
            sharing |= {i, j}
    return sharing


def read_abi(module) -> list[dict]:
    """The `etc.cpu.abi` entries as plain dicts (kind, name, dtype, shape, pack?)."""
    op = as_operation(module)
    out = []
    for entry in ir.ArrayAttr(op.attributes[ABI_ATTR]):
        d = ir.DictAttr(entry)
        item = {k: ir.StringAttr(d[k]).value for k in ("kind", "name", "dtype")}
        item["shape"] = tuple(ir.DenseI64ArrayAttr(d["shape"]))
        if "pack" in d:
            item["pack"] = ir.StringAttr(d["pack"]).value
        if "dynamic" in d:
            item["dynamic"] = tuple(ir.DenseI64ArrayAttr(d["dynamic"]))
        out.append(item)
    return out
