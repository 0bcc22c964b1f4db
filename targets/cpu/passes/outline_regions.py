"""etc-cpu-outline-regions: each top-level loop nest of the entry becomes a function of its own.

The pipeline inlines every kernel into the entry, so a whole model reached LLVM as one
function (ConvNeXt-T: 45,000 lines of optimized IR). LLVM's loop passes recompute
function-wide analyses (scalar evolution, dominators) after each loop they change, so their
time grew faster than the code: loop vectorization and induction-variable simplification were
43% of ConvNeXt's LLVM time, and LLVM was three quarters of its compile. Here each top-level
loop nest (a dispatch region: a GEMM tile loop, a window kernel, a row kernel, a loop nest)
moves into a private function `<entry>_region<i>`, called where it was; codegen gives these
internal linkage and keeps them out of line (LLVM `noinline`), so LLVM optimizes many small
functions, and a region identical to one before it (the same layer in the next block: ConvNeXt-T
has 77 regions, 28 distinct) calls that one, so LLVM compiles it once.

A nest is outlined with the values it reads from the entry as arguments (memrefs of static
shape, indices, scalars); the constants it reads are cloned into it, and so is a stack buffer only
it uses (a GEMM kernel's panel buffer, etc-cpu-plan-scratch: on the region's frame, released when
it returns, not on the entry's for the whole model). The bare-pointer calling
convention passes static memrefs only, so a memref with a dynamic size, stride or offset (a
dynamic model's buffers: views at the run-time sizes, etc-cpu-dynamic-shapes) is rebuilt inside
the function: the chain of views from its static buffer is cloned in, and the buffer and the
sizes become the arguments. The layers of a decoder then share one function per layer kind, as
a static model's do. Its memref arguments are `llvm.noalias` like the entry's when no two of
them can overlap (distinct entry arguments, or views of the scratch buffer at disjoint byte
ranges, a dynamic view's range taken at its sizes' upper bounds), so LLVM vectorizes its loops
without run-time overlap checks. A nest whose results the entry uses, or that reads a dynamic
memref with no static buffer under it, stays inline.
"""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation, replace_operands
from etc.passes.pass_api import function_pass
from etc.targets.cpu.entry_args import entry_function, in_place_arguments

_NESTS = ("scf.for", "scf.parallel", "scf.if", "scf.while")


def _inside(op, root) -> bool:
    """Is `op` nested in `root` (or `root` itself)?"""
    current = op
    while current is not None:
        if current == root:
            return True
        parent = current.parent
        if parent is None or parent.name == "func.func":
            return False
        current = parent
    return False


def _captured(root) -> list:
    """The values `root`'s nested ops use that are defined outside it, in first-use order."""
    seen, captured = set(), []

    def visit(op):
        for value in op.operands:
            owner = value.owner
            if isinstance(owner, ir.Block):
                outside = not _inside(owner.owner, root)
            else:
                outside = not _inside(as_operation(owner), root)
            if outside and value not in seen:
                seen.add(value)
                captured.append(value)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return captured


_VIEWS = ("memref.view", "memref.subview", "memref.reinterpret_cast", "memref.expand_shape",
          "memref.collapse_shape", "memref.cast")


def _dynamic(value) -> bool:
    return isinstance(value.type, ir.MemRefType) and "?" in str(value.type)  # a dynamic size, stride or offset


def _with_views(captured, position: dict) -> tuple[list, list] | None:
    """(the values the function takes, the view ops it rebuilds, in entry order): each dynamic
    memref's chain of views down to a static buffer is cloned in, the buffer and the views'
    other operands (sizes, offsets) taken instead. None when a chain does not end at a static
    buffer. `position`: the entry block's ops -> their index."""
    views, values, queue = set(), [], list(captured)
    while queue:
        value = queue.pop(0)
        if not _dynamic(value):
            if value not in values:
                values.append(value)
            continue
        op = None if isinstance(value.owner, ir.Block) else value.owner.operation
        if op is None or op.name not in _VIEWS or op not in position:
            return None
        if op not in views:
            views.add(op)
            queue.extend(op.operands)
    return values, sorted(views, key=position.__getitem__)


def _outlinable(op, captured) -> bool:
    if any(len(list(result.uses)) for result in op.results):
        return False
    for value in captured:
        if _constant(value):  # cloned in, whatever its type (a vector mask, a dense table, poison)
            continue
        if not isinstance(value.type, (ir.MemRefType, ir.IndexType, ir.IntegerType, ir.F32Type, ir.F64Type,
                                       ir.F16Type)):
            return False
    return True


def _constant(value) -> bool:
    return not isinstance(value.owner, ir.Block) and value.owner.name in ("arith.constant", "ub.poison")


def _stack_buffer(value, nest) -> bool:
    """A `memref.alloca` of the entry that only `nest` uses."""
    if isinstance(value.owner, ir.Block) or value.owner.name != "memref.alloca":
        return False
    return all(_inside(as_operation(u.owner), nest) for u in value.uses)


def _extent(value) -> tuple:
    """(base, byte range or None for all of it): the entry argument `value` is a view of, and
    which bytes of it when that is static (a `memref.view` into the scratch buffer at a constant
    shift)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return value, None
    op = as_operation(owner)
    if op.name not in _VIEWS:
        return value, None
    base, span = _extent(op.operands[0])
    if op.name == "memref.view" and span is None:
        shift = op.operands[1].owner
        t = ir.MemRefType(value.type)
        if not isinstance(shift, ir.Block) and shift.name == "arith.constant" and t.has_static_shape:
            start = ir.IntegerAttr(shift.attributes["value"]).value
            size = t.element_type.width // 8 if hasattr(t.element_type, "width") else None
            if size:
                count = 1
                for d in t.shape:
                    count *= d
                span = (start, start + count * size)
    return base, span


def _disjoint(memrefs, one_buffer: dict) -> bool:
    """Can no two of `memrefs` overlap? Entry arguments are distinct buffers (the entry's
    `llvm.noalias`), but for an in-place pair (`one_buffer`: output argument -> its input
    argument); views of one are disjoint when their static byte ranges are."""
    extents = [(one_buffer.get(base, base), span) for base, span in (_extent(v) for v in memrefs)]
    for i, (base, span) in enumerate(extents):
        for other, other_span in extents[i + 1:]:
            if base == other and (span is None or other_span is None or
                                  not (span[1] <= other_span[0] or other_span[1] <= span[0])):
                return False
    return True


@function_pass("etc-cpu-outline-regions",
               "Each top-level loop nest of the entry -> a private function of its own (LLVM's time stays linear)")
def outline_regions(module, options=None) -> int:
    from torch_mlir.dialects import func as func_d

    fn = entry_function(module)
    block = fn.regions[0].blocks[0]
    base = ir.StringAttr(fn.attributes["sym_name"]).value
    outlined, calls = 0, 0
    distinct: dict = {}  # printed function (its name left out) -> the name of the first such region
    one_buffer = in_place_arguments(as_operation(module))
    with module.context:
        position = {o.operation: i for i, o in enumerate(block.operations)}
        for op in [o.operation for o in block.operations]:
            if op.name not in _NESTS:
                continue
            captured = _captured(op)
            if not _outlinable(op, captured):
                continue
            rebuilt = _with_views(captured, position)
            if rebuilt is None:
                continue
            captured, views = rebuilt
            constants = [v for v in captured if _constant(v) or _stack_buffer(v, op)]
            arguments = [v for v in captured if v not in constants]
            name = f"{base}_region{outlined}"
            with ir.InsertionPoint(fn), op.location:
                region_fn = func_d.FuncOp(name, ir.FunctionType.get([v.type for v in arguments], []))
                region_fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
                memrefs = [v for v in arguments if isinstance(v.type, ir.MemRefType)]
                if _disjoint(memrefs, one_buffer):  # as the entry's: LLVM needs no run-time overlap checks
                    region_fn.arg_attrs = ir.ArrayAttr.get([
                        ir.DictAttr.get({"llvm.noalias": ir.UnitAttr.get()} if isinstance(v.type, ir.MemRefType)
                                        else {}) for v in arguments])
                entry = region_fn.add_entry_block()
            with ir.InsertionPoint(entry), op.location:
                remap = {}
                for value in constants:
                    remap[value] = value.owner.clone().results[0]
                for value, arg in zip(arguments, entry.arguments):
                    remap[value] = arg
                for view in views:  # a dynamic memref, rebuilt from its buffer and sizes
                    clone = view.clone()
                    for i, value in enumerate(clone.operands):
                        clone.operands[i] = remap[value]
                    for old, new in zip(view.results, clone.results):
                        remap[old] = new
                terminator = func_d.ReturnOp([])
            with ir.InsertionPoint(op), op.location:
                call = func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), arguments)
            op.move_before(terminator)

            replace_operands(op, remap)
            for value in constants:
                if _stack_buffer(value, op):  # moved in: no use left in the entry
                    value.owner.erase()
            # A region identical to one outlined before (the same layer shapes in another block of
            # the model) calls that one: LLVM compiles each distinct region once.
            key = region_fn.operation.get_asm(use_local_scope=True).replace(f"@{name}(", "@region(", 1)
            if key in distinct:
                call.operation.attributes["callee"] = ir.FlatSymbolRefAttr.get(distinct[key])
                region_fn.operation.erase()
            else:
                distinct[key] = name
                outlined += 1
            calls += 1
    return calls
