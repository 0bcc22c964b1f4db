"""Ranges of run-time sizes: what a dynamically shaped buffer is planned for (`index_range`)."""

from __future__ import annotations

from torch_mlir import ir

from etc.ir.ops import as_operation, defining_op
from etc.targets.cpu.entry_args import arg_attrs

DIM_RANGES_ATTR = "etc.cpu.dim_ranges"  # on the `dims:in` argument: lo0, hi0, lo1, hi1, ... per element


def index_range(value, _depth: int = 0) -> tuple[int, int] | None:
    """[lo, hi] of an integer/index SSA value computed from the run-time sizes (`memref.load`s of
    the `dims:in` argument, whose `etc.cpu.dim_ranges` bound them), constants, loop variables and
    arithmetic/affine ops on those; None when some source is unknown. What a dynamically sized
    buffer is planned for (its size at `hi`).

    Interval arithmetic loses what sizes have in common: a view's `numel / T` with numel = T*768
    is [768/1, 98304/1] per interval, and the buffers of a GPT-2 were planned at 32 GB. So the
    size is also built as an expression of the run-time dims (sympy, as torch bounds its own
    sizes), where T*768 / T is 768; when that simplifies to a polynomial with nonnegative
    coefficients (increasing in every dim), its value at the dims' bounds is exact and taken."""
    interval = _interval(value, _depth)
    if _depth or interval is None:
        return interval
    exact = _polynomial_range(value)
    if exact is None:
        return interval
    return max(interval[0], exact[0]), min(interval[1], exact[1])


def _polynomial_range(value) -> tuple[int, int] | None:
    import sympy

    ranges: dict = {}
    try:
        expr = _symbolic(value, ranges, 0)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if expr is None:
        return None
    expr = sympy.expand(sympy.simplify(expr))
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols:
        return (int(expr), int(expr)) if expr.is_Integer else None
    if any(ranges[x][0] < 0 for x in symbols) or not expr.is_polynomial(*symbols):
        return None
    if any(c < 0 for c in sympy.Poly(expr, *symbols).coeffs()):
        return None
    low = expr.subs({x: ranges[x][0] for x in symbols})
    high = expr.subs({x: ranges[x][1] for x in symbols})
    return (int(low), int(high)) if low.is_Integer and high.is_Integer else None


def _symbolic(value, ranges: dict, depth: int):
    """`value` as a sympy expression of the run-time dims (symbols, their [lo, hi] into `ranges`)."""
    import sympy

    if depth > 64:
        return None
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    op = as_operation(owner)
    name = op.name
    if name == "arith.constant":
        attr = op.attributes["value"]
        return sympy.Integer(ir.IntegerAttr(attr).value) if isinstance(attr, ir.IntegerAttr) else None
    if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui"):
        return _symbolic(op.operands[0], ranges, depth + 1)
    if name == "memref.load":
        bound = _interval(value, depth)  # a dims:in element: its own symbol
        index = _interval(op.operands[1], depth) if len(op.operands) == 2 else None
        if bound is None or index is None:
            return None
        x = sympy.Symbol(f"dims_in_{index[0]}", integer=True, nonnegative=True)
        ranges[x] = bound
        return x
    if name in ("memref.dim", "tensor.dim"):
        dim = _interval(op.operands[1], depth)
        return _dim_symbolic(op.operands[0], dim[0], ranges, depth) if dim and dim[0] == dim[1] else None
    if name in ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.floordivsi"):
        a, b = (_symbolic(v, ranges, depth + 1) for v in op.operands[:2])
        if a is None or b is None:
            return None
        if name == "arith.addi":
            return a + b
        if name == "arith.subi":
            return a - b
        if name == "arith.muli":
            return a * b
        return sympy.floor(a / b)
    if name == "arith.select":
        decided = _decided(op.operands[0], depth)
        return None if decided is None else _symbolic(op.operands[1 if decided else 2], ranges, depth + 1)
    if name == "affine.apply":
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        operands = [_symbolic(v, ranges, depth + 1) for v in op.operands]
        if None in operands or len(amap.results) != 1:
            return None
        return _affine_symbolic(amap.results[0], operands[:amap.n_dims], operands[amap.n_dims:])
    return None


def _dim_symbolic(value, d: int, ranges: dict, depth: int):
    import sympy

    shaped = ir.ShapedType(value.type)
    if not shaped.is_dynamic_dim(d):
        return sympy.Integer(shaped.shape[d])
    producer = defining_op(value)
    if producer is None:
        bound = _dim_range(value, d, depth)  # an entry argument with its etc.dim_bounds
        if bound is None:
            return None
        x = sympy.Symbol(f"arg{value.arg_number}_{d}", integer=True, nonnegative=True)
        ranges[x] = bound
        return x
    dynamic = [i for i in range(shaped.rank) if shaped.is_dynamic_dim(i)]
    name = producer.name
    if name in ("memref.alloc", "tensor.empty"):
        return _symbolic(producer.operands[dynamic.index(d)], ranges, depth + 1)
    if name in ("memref.reinterpret_cast", "memref.subview", "tensor.extract_slice"):
        segments = list(ir.DenseI32ArrayAttr(producer.attributes["operandSegmentSizes"]))
        sizes = list(producer.operands)[segments[0] + segments[1]:][:segments[2]]
        return _symbolic(sizes[dynamic.index(d)], ranges, depth + 1)
    if name in ("memref.expand_shape", "tensor.expand_shape"):
        return _symbolic(list(producer.operands)[1:][dynamic.index(d)], ranges, depth + 1)
    if name in ("memref.cast", "tensor.cast") or (name.startswith("linalg.") and len(producer.results) == 1):
        return _dim_symbolic(producer.operands[0 if "cast" in name else -1], d, ranges, depth + 1)
    if name in ("memref.collapse_shape", "tensor.collapse_shape"):
        total = sympy.Integer(1)
        for source_dim in ir.ArrayAttr(ir.ArrayAttr(producer.attributes["reassociation"])[d]):
            part = _dim_symbolic(producer.operands[0], ir.IntegerAttr(source_dim).value, ranges, depth + 1)
            if part is None:
                return None
            total = total * part
        return total
    return None


def _affine_symbolic(expr, dims: list, symbols: list):
    import sympy

    expr = expr.maybe_downcast() if hasattr(expr, "maybe_downcast") else expr
    if isinstance(expr, ir.AffineConstantExpr):
        return sympy.Integer(expr.value)
    if isinstance(expr, ir.AffineDimExpr):
        return dims[expr.position]
    if isinstance(expr, ir.AffineSymbolExpr):
        return symbols[expr.position]
    for kind in (ir.AffineAddExpr, ir.AffineMulExpr, ir.AffineFloorDivExpr, ir.AffineCeilDivExpr, ir.AffineModExpr):
        if isinstance(expr, kind):
            a, b = _affine_symbolic(expr.lhs, dims, symbols), _affine_symbolic(expr.rhs, dims, symbols)
            if a is None or b is None:
                return None
            if kind is ir.AffineAddExpr:
                return a + b
            if kind is ir.AffineMulExpr:
                return a * b
            if kind is ir.AffineFloorDivExpr:
                return sympy.floor(a / b)
            if kind is ir.AffineCeilDivExpr:
                return sympy.ceiling(a / b)
            return sympy.Mod(a, b)
    return None


def _interval(value, _depth: int = 0) -> tuple[int, int] | None:
    """`index_range` by interval arithmetic alone."""
    if _depth > 64:
        return None
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        parent = as_operation(parent)
        if parent is not None and parent.name == "scf.for" and value.arg_number == 0:
            lb, ub = (index_range(parent.operands[i], _depth + 1) for i in (0, 1))
            return (lb[0], max(lb[0], ub[1] - 1)) if lb and ub else None
        return None
    op = as_operation(owner)
    name = op.name
    if name == "arith.constant":
        attr = op.attributes["value"]
        return (ir.IntegerAttr(attr).value,) * 2 if isinstance(attr, ir.IntegerAttr) else None
    if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci"):
        return index_range(op.operands[0], _depth + 1)
    if name == "memref.load":
        source = op.operands[0]
        if not isinstance(source.owner, ir.Block):
            return None
        fn = source.owner.owner
        fn = as_operation(fn)
        attrs = arg_attrs(fn)[source.arg_number]
        index = index_range(op.operands[1], _depth + 1) if len(op.operands) == 2 else None
        if DIM_RANGES_ATTR not in attrs or index is None or index[0] != index[1]:
            return None
        ranges = [int(x) for x in ir.DenseI64ArrayAttr(attrs[DIM_RANGES_ATTR])]
        return ranges[2 * index[0]], ranges[2 * index[0] + 1]
    if name in ("memref.dim", "tensor.dim"):
        dim = index_range(op.operands[1], _depth + 1)
        return _dim_range(op.operands[0], dim[0], _depth) if dim is not None and dim[0] == dim[1] else None
    if name in ("affine.apply", "affine.min", "affine.max"):
        ranges = [index_range(v, _depth + 1) for v in op.operands]
        if None in ranges:
            return None
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        dims, symbols = ranges[:amap.n_dims], ranges[amap.n_dims:]
        results = [_affine_range(e, dims, symbols) for e in amap.results]
        if None in results:
            return None
        if name == "affine.min":
            return min(r[0] for r in results), min(r[1] for r in results)
        if name == "affine.max":
            return max(r[0] for r in results), max(r[1] for r in results)
        return results[0]
    binary = _BINARY_RANGES.get(name)
    if binary is not None:
        a, b = (index_range(v, _depth + 1) for v in op.operands[:2])
        return binary(a, b) if a is not None and b is not None else None
    if name == "arith.select":
        decided = _decided(op.operands[0], _depth)
        if decided is not None:  # torch-mlir's view(-1) inference: `size < 0 ? inferred : size`
            return index_range(op.operands[1 if decided else 2], _depth + 1)
        a, b = (index_range(v, _depth + 1) for v in op.operands[1:3])
        return (min(a[0], b[0]), max(a[1], b[1])) if a and b else None
    return None


def dim_range(value, d: int) -> tuple[int, int] | None:
    """[lo, hi] of dim `d` of a shaped value (see `index_range`)."""
    return _dim_range(value, d, 0)


def _dim_range(value, d: int, depth: int):
    """[lo, hi] of dim `d` of a shaped value: static, or what its producer's sizes say."""
    shaped = ir.ShapedType(value.type)
    if not shaped.is_dynamic_dim(d):
        return shaped.shape[d], shaped.shape[d]
    producer = defining_op(value)
    if producer is None:  # an entry argument with its bounds (before etc-cpu-dynamic-shapes)
        fn = value.owner.owner
        fn = as_operation(fn)
        if fn is None or fn.name != "func.func":
            return None
        attrs = arg_attrs(fn)[value.arg_number]
        if "etc.dim_bounds" not in attrs:
            return None
        bounds = [int(x) for x in ir.DenseI64ArrayAttr(attrs["etc.dim_bounds"])]
        return bounds[2 * d], bounds[2 * d + 1]
    if depth > 64:
        return None
    dynamic = [i for i in range(shaped.rank) if shaped.is_dynamic_dim(i)]
    name = producer.name
    if name in ("memref.alloc", "tensor.empty"):
        return index_range(producer.operands[dynamic.index(d)], depth + 1)
    if name in ("memref.reinterpret_cast", "memref.subview", "tensor.extract_slice"):
        segments = list(ir.DenseI32ArrayAttr(producer.attributes["operandSegmentSizes"]))
        sizes = list(producer.operands)[segments[0] + segments[1]:][:segments[2]]
        return index_range(sizes[dynamic.index(d)], depth + 1)
    if name in ("memref.expand_shape", "tensor.expand_shape"):
        return index_range(list(producer.operands)[1:][dynamic.index(d)], depth + 1)
    if name in ("memref.cast", "tensor.cast"):
        return _dim_range(producer.operands[0], d, depth + 1)
    if name.startswith("linalg.") and len(producer.results) == 1:  # destination style: the init's dims
        return _dim_range(producer.operands[-1], d, depth + 1)
    if name in ("memref.collapse_shape", "tensor.collapse_shape"):
        total = (1, 1)
        for source_dim in ir.ArrayAttr(ir.ArrayAttr(producer.attributes["reassociation"])[d]):
            r = _dim_range(producer.operands[0], ir.IntegerAttr(source_dim).value, depth + 1)
            if r is None:
                return None
            total = _mul_range(total, r)
        return total
    return None


_PREDICATES = {0: lambda a, b: (a[0] == a[1] == b[0] == b[1]) or (None if a[1] >= b[0] and b[1] >= a[0] else False),
               1: lambda a, b: not (a[0] == a[1] == b[0] == b[1]) and (True if a[1] < b[0] or b[1] < a[0] else None),
               2: lambda a, b: True if a[1] < b[0] else (False if a[0] >= b[1] else None),
               3: lambda a, b: True if a[1] <= b[0] else (False if a[0] > b[1] else None),
               4: lambda a, b: True if a[0] > b[1] else (False if a[1] <= b[0] else None),
               5: lambda a, b: True if a[0] >= b[1] else (False if a[1] < b[0] else None)}


def _decided(condition, depth: int):
    """True/False when the ranges of an `arith.cmpi`'s operands decide it (signed predicates), else None."""
    producer = defining_op(condition)
    if producer is None or producer.name != "arith.cmpi":
        return None
    predicate = ir.IntegerAttr(producer.attributes["predicate"]).value
    if predicate not in _PREDICATES:
        return None
    a, b = (index_range(v, depth + 1) for v in producer.operands)
    if a is None or b is None:
        return None
    result = _PREDICATES[predicate](a, b)
    return None if result is None else bool(result)


def _div_range(a, b, ceil=False):
    if b[0] <= 0:
        return None
    div = (lambda x, y: -(-x // y)) if ceil else (lambda x, y: x // y)
    candidates = [div(x, y) for x in a for y in b]
    return min(candidates), max(candidates)


def _rem_range(a, b):
    if b[0] <= 0 or a[0] < 0:
        return None
    return 0, min(a[1], b[1] - 1)


def _mul_range(a, b):
    candidates = [x * y for x in a for y in b]
    return min(candidates), max(candidates)


_BINARY_RANGES = {
    "arith.addi": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "arith.subi": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "arith.muli": _mul_range,
    "arith.divsi": _div_range, "arith.divui": _div_range, "arith.floordivsi": _div_range,
    "arith.ceildivsi": lambda a, b: _div_range(a, b, ceil=True), "arith.ceildivui": lambda a, b: _div_range(a, b, ceil=True),
    "arith.remsi": _rem_range, "arith.remui": _rem_range,
    "arith.maxsi": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "arith.minsi": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}


def _affine_range(expr, dims: list, symbols: list):
    expr = expr.maybe_downcast() if hasattr(expr, "maybe_downcast") else expr
    if isinstance(expr, ir.AffineConstantExpr):
        return expr.value, expr.value
    if isinstance(expr, ir.AffineDimExpr):
        return dims[expr.position]
    if isinstance(expr, ir.AffineSymbolExpr):
        return symbols[expr.position]
    for kind, combine in ((ir.AffineAddExpr, _BINARY_RANGES["arith.addi"]), (ir.AffineMulExpr, _mul_range),
                          (ir.AffineFloorDivExpr, _div_range),
                          (ir.AffineCeilDivExpr, lambda a, b: _div_range(a, b, ceil=True)),
                          (ir.AffineModExpr, _rem_range)):
        if isinstance(expr, kind):
            a, b = _affine_range(expr.lhs, dims, symbols), _affine_range(expr.rhs, dims, symbols)
            return combine(a, b) if a is not None and b is not None else None
    return None
