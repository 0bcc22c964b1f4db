"""etc-canonicalize-aten: remove ATen ops that do nothing.

Each pattern replaces an op's result by its input, and only when the two
types are equal (a pattern never changes a type), except that a view of a
view reads the first view's input instead:
- identity views: `view`/`reshape`/`_unsafe_view` to the same static shape
  (or, for one dynamic dim, `-1` there and the input's static sizes elsewhere),
  `expand` to the same static shape (or all sizes -1), `permute` by the
  identity, `transpose.int` of a dim with itself, `squeeze*` that removes
  nothing (static shapes), `slice.Tensor` of the full range with step 1,
  `alias`, `detach`, `to.dtype`(`_layout`) to the same dtype without `copy`,
  `contiguous`, `dropout` with `train=False`;
- chained views: `view(view(x, a), b)` is `view(x, b)` (or `x` when the types agree);
- cancelling pairs: `unsqueeze(squeeze.dim(x, d), d)` and
  `squeeze.dim(unsqueeze(x, d), d)` are `x`;
- redundant copies: `clone`, `lift_fresh_copy`, `_to_copy` to the same dtype
  (and no layout, device or memory-format change), `to.dtype(copy=True)`:
  the IR has value semantics, so a copy is only needed where the program would
  otherwise return storage it does not own or return one buffer twice (the
  copy is returned and its input is a function argument, a global, or is
  returned too). Such copies are kept.
The same rules apply to the `edge` ops of the same names. MLIR's greedy
driver applies the patterns (without folding other dialects' ops); it also
erases the ops left unused (aten ops are pure).
"""

from __future__ import annotations

from etc.ir.ops import defining_op
from etc.passes.pass_api import Pass, register_pass

_KEEPS_LAYOUT = (None, "preserve_format", "contiguous_format")


def _attr(op, name):
    """A schema attribute as a Python value: None for unit/absent, str, int, bool, list, or an ir.Type."""
    from torch_mlir import ir

    if name not in op.attributes:
        return None
    attr = op.attributes[name]
    if isinstance(attr, ir.UnitAttr):
        return None
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(attr)
    if isinstance(attr, ir.TypeAttr):
        return attr.value
    return attr


def _static(type_) -> bool:
    from torch_mlir import ir

    return isinstance(type_, ir.RankedTensorType) and type_.has_static_shape


def _same_type(op, value) -> bool:
    return op.results[0].type == value.type


def _forward(op, rewriter, value):
    """Replace `op` by `value` when the types agree; the pattern result (falsy = matched)."""
    if not _same_type(op, value):
        return True
    rewriter.replace_op(op, [value])
    return None


def _is_returned(value) -> bool:
    for use in value.uses:
        owner = use.owner
        name = owner.operation.name if hasattr(owner, "operation") else owner.name
        if name == "func.return":
            return True
    return False


def _copy_removable(op) -> bool:
    """Whether forwarding the input of copy `op` keeps every returned value in storage of its own."""
    from torch_mlir import ir

    source, result = op.operands[0], op.results[0]
    if not _is_returned(result):
        return True
    if isinstance(source.owner, ir.Block):
        return False  # the output would alias an input
    if getattr(defining_op(source), "name", None) in ("ml_program.global_load", "ml_program.global_load_const"):
        return False  # ... or a parameter/buffer
    return not _is_returned(source)  # ... or another output


def _norm(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


# ---------------------------------------------------------------- patterns
def _identity(op, rewriter):
    return _forward(op, rewriter, op.operands[0])


def _same_shape(op, rewriter):
    """view/reshape to the shape the input has: statically, or with its one dynamic dim
    inferred (`-1`) and every other size equal to the input's static size."""
    source = op.operands[0]
    if len(op.operands) != 1:
        return True  # symbolic sizes: their values are not known here
    inner = source.owner
    if getattr(defining_op(source), "name", None) in _VIEW_NAMES and len(inner.operands) == 1:
        return _skip_inner_view(op, rewriter, inner.operands[0])
    if not _static(source.type):
        sizes = _attr(op, "size" if "size" in op.attributes else "shape") or []
        shape = source.type.shape
        if len(sizes) != len(shape) or sizes.count(-1) != 1:
            return True
        inferred = sizes.index(-1)
        dynamic = ir_dynamic_size()
        if any(sizes[i] != shape[i] or shape[i] == dynamic for i in range(len(shape)) if i != inferred):
            return True
    return _forward(op, rewriter, source)


_VIEW_NAMES = frozenset(f"{d}.{n}" for d in ("aten", "edge") for n in ("view", "reshape", "p_unsafe_view"))


def _skip_inner_view(op, rewriter, x):
    """view(view(x, a), b) is view(x, b) (the inner view goes when unused), or x itself."""
    from torch_mlir import ir

    if _same_type(op, x):
        return _forward(op, rewriter, x)
    with rewriter.ip:
        new = ir.Operation.create(op.name, results=[op.results[0].type], operands=[x],
                                  attributes={name: op.attributes[name] for name in op.attributes},
                                  loc=op.location)
    rewriter.replace_op(op, new)
    return None


def ir_dynamic_size() -> int:
    from torch_mlir import ir

    return ir.ShapedType.get_dynamic_size()


def _expand(op, rewriter):
    source = op.operands[0]
    sizes = _attr(op, "size") or []
    if len(op.operands) == 1 and (_static(source.type) or all(s == -1 for s in sizes)):
        return _forward(op, rewriter, source)
    return True


def _permute(op, rewriter):
    source = op.operands[0]
    dims = _attr(op, "dims") or []
    rank = source.type.rank
    if [_norm(d, rank) for d in dims] != list(range(rank)):
        return True
    return _forward(op, rewriter, source)


def _transpose(op, rewriter):
    source = op.operands[0]
    rank = source.type.rank
    if _norm(_attr(op, "dim0"), rank) != _norm(_attr(op, "dim1"), rank):
        return True
    return _forward(op, rewriter, source)


def _slice(op, rewriter):
    source = op.operands[0]
    if len(op.operands) != 1 or not _static(source.type):
        return True
    dim = _norm(_attr(op, "dim"), source.type.rank)
    size = source.type.shape[dim]
    start, end, step = _attr(op, "start"), _attr(op, "end"), _attr(op, "step")
    if step not in (None, 1):
        return True
    if start is not None and not (start == 0 or start <= -size):
        return True
    if end is not None and end < size:
        return True
    return _forward(op, rewriter, source)


def _contiguous(op, rewriter):
    if _attr(op, "memory_format") not in _KEEPS_LAYOUT:
        return True
    return _forward(op, rewriter, op.operands[0])


def _dropout(op, rewriter):
    if _attr(op, "train"):
        return True
    return _forward(op, rewriter, op.operands[0])


def _clone(op, rewriter):
    if _attr(op, "memory_format") not in _KEEPS_LAYOUT or not _copy_removable(op):
        return True
    return _forward(op, rewriter, op.operands[0])


def _same_dtype(op) -> bool:
    dtype = _attr(op, "dtype")
    return dtype is None or dtype == op.operands[0].type.element_type


def _to_copy(op, rewriter):
    if not _same_dtype(op) or _attr(op, "memory_format") not in _KEEPS_LAYOUT:
        return True
    if _attr(op, "layout") not in (None, "strided") or _attr(op, "device") not in (None, "cpu"):
        return True
    if _attr(op, "pin_memory") or not _copy_removable(op):
        return True
    return _forward(op, rewriter, op.operands[0])


def _to_dtype(op, rewriter):
    if not _same_dtype(op) or _attr(op, "memory_format") not in _KEEPS_LAYOUT:
        return True
    if _attr(op, "layout") not in (None, "strided") or _attr(op, "device") not in (None, "cpu"):
        return True
    if _attr(op, "copy") and not _copy_removable(op):
        return True
    return _forward(op, rewriter, op.operands[0])


def _squeeze(op, rewriter):
    source = op.operands[0]
    if not _static(source.type):
        return True
    producer = getattr(defining_op(source), "name", None)
    if producer is not None and producer.split(".", 1)[1] == "unsqueeze" and op.name.endswith("squeeze_dim"):
        inner = source.owner
        x = inner.operands[0]
        inner_dim = _norm(_attr(inner, "dim"), x.type.rank + 1)
        if inner_dim == _norm(_attr(op, "dim"), source.type.rank) and _same_type(op, x):
            return _forward(op, rewriter, x)
    return _forward(op, rewriter, source)


def _unsqueeze(op, rewriter):
    source = op.operands[0]
    producer = getattr(defining_op(source), "name", None)
    if producer is None or producer.split(".", 1)[1] != "squeeze_dim":
        return True
    inner = source.owner
    x = inner.operands[0]
    if not _static(x.type):
        return True
    inner_dim = _norm(_attr(inner, "dim"), x.type.rank)
    if inner_dim != _norm(_attr(op, "dim"), source.type.rank + 1) or x.type.shape[inner_dim] != 1:
        return True
    return _forward(op, rewriter, x)


_PATTERNS = {
    "alias": _identity, "detach": _identity,
    "view": _same_shape, "reshape": _same_shape, "p_unsafe_view": _same_shape,
    "expand": _expand, "permute": _permute, "transpose_int": _transpose, "slice_tensor": _slice,
    "squeeze": _squeeze, "squeeze_dim": _squeeze, "squeeze_dims": _squeeze, "unsqueeze": _unsqueeze,
    "contiguous": _contiguous, "dropout": _dropout,
    "clone": _clone, "lift_fresh_copy": _clone, "p_to_copy": _to_copy,
    "to_dtype": _to_dtype, "to_dtype_layout": _to_dtype,
}


def _guarded(fn, on_match):
    """Leave ops alone whose operand or result is not a ranked tensor (unverified IR);
    call `on_match()` when the pattern applied."""
    def pattern(op, rewriter):
        from torch_mlir import ir

        operation = op.operation
        if not operation.operands or len(operation.results) != 1:
            return True
        if not isinstance(operation.operands[0].type, ir.RankedTensorType):
            return True
        failed = fn(operation, rewriter)
        if not failed:
            on_match()
        return failed

    return pattern


@register_pass
class CanonicalizeAten(Pass):
    """Remove no-op aten/edge ops (identity views, redundant copies and casts, cancelling
    squeeze/unsqueeze pairs) by forwarding their input; see etc/passes/canonicalize_aten.py."""

    name = "etc-canonicalize-aten"
    summary = "Remove aten no-ops: identity views, redundant clones and casts, detach/alias"

    def patterns(self):
        from torch_mlir import ir, rewrite

        context = ir.Context.current
        patterns = rewrite.RewritePatternSet(context)
        for dialect in ("aten", "edge"):
            for name, fn in _PATTERNS.items():
                op_name = f"{dialect}.{name}"
                if context.is_registered_operation(op_name):
                    patterns.add(op_name, _guarded(fn, lambda: self.count("removed")))
        return patterns

    def greedy_config(self):
        from torch_mlir import rewrite

        config = rewrite.GreedyRewriteConfig()
        config.enable_folding = False  # only our patterns: upstream folding is `canonicalize`'s job
        config.enable_constant_cse = False
        return config

    def run(self, op) -> None:
        with op.context:
            super().run(op)
