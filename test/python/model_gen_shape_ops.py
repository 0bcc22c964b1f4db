"""The model generator's data-movement and control-flow ops: reshape, flatten, unsqueeze/squeeze,
permute, slice, select, pad, flip, cat, gather, index_select, index_put, embedding, torch.cond,
torch.while_loop and mutable state. Each op takes (scope, v) -> Value | None. See model_gen.py."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from model_gen_ops import op_binary, op_norm, op_unary
from model_gen_values import Scope, Size, Value, broadcast, inexact, shape_text, static_last


def op_reshape(s: Scope, v: Value):
    """Merge adjacent dims or split one; sizes written out from the Dims (at most one -1)."""
    if v.rank == 0 or s.nested:
        return None
    shape = list(v.shape)
    merge = s.draw(st.booleans()) and v.rank >= 2
    if merge:
        i = s.draw(st.integers(0, v.rank - 2))
        if _shared_dim(shape, (i, i + 1)):
            return None
        shape[i:i + 2] = [shape[i] * shape[i + 1]]
    else:
        i = s.draw(st.integers(0, v.rank - 1))
        if _shared_dim(shape, (i,)):
            return None
        size = shape[i]
        splits = [(Size(f), Size(size.const // f, size.names)) for f in (2, 3, 4) if size.const % f == 0]
        splits += [(Size(1, (n,)), Size(size.const, tuple(m for j, m in enumerate(size.names) if j != k)))
                   for k, n in enumerate(size.names) if len(size.names) > 1 or size.const > 1]
        splits += [(Size(1), size)]
        a, b = s.draw(st.sampled_from(splits))
        if s.draw(st.booleans()):
            a, b = b, a
        shape[i:i + 1] = [a, b]
    sizes = [s.size_expr(x) for x in shape]
    dynamic = [j for j, x in enumerate(shape) if not x.static]
    if dynamic and s.draw(st.booleans()):
        sizes[s.draw(st.sampled_from(dynamic))] = "-1"
    # `reshape`, never `.contiguous().view()`: torch.export drops a `.contiguous()` it traced on
    # a contiguous tensor, and the exported program's `view` then fails in eager on the
    # transposed and strided inputs the check also feeds, when the tensor is an input or
    # elementwise of one (seeds 1616001 and 1617000: invalid at eager, not etc's). The graph
    # has aten.view either way where the strides allow it.
    return s.emit("h", f"{v.name}.reshape({', '.join(sizes)})", shape, v.dtype, v.err)


def _shared_dim(shape, reshaped) -> bool:
    """Whether a Dim sizing one of the `reshaped` dims also sizes another dim. torch.export cannot
    prove such a reshape of a permuted tensor valid at every size: [b, t, 3, t] -> [b*t, 3, t]
    fails with a guard min(3*t, 3*t*t) == 3*t (torch 2.13), so the model would be `invalid`."""
    inside = {n for i in reshaped for n in shape[i].names}
    return any(n in inside for j, x in enumerate(shape) if j not in reshaped for n in x.names)


def op_flatten(s: Scope, v: Value):
    if v.rank < 3 or s.nested:
        return None
    start = s.draw(st.integers(1, v.rank - 2))
    shape = list(v.shape)
    merged = shape[start]
    for x in shape[start + 1:]:
        merged = merged * x
    return s.emit("h", f"{v.name}.flatten({start})", shape[:start] + [merged], v.dtype, v.err)


def op_unsqueeze(s: Scope, v: Value):
    if v.rank >= 5:
        return None
    dim = s.draw(st.integers(0, v.rank))
    shape = list(v.shape)
    shape.insert(dim, Size(1))
    h = s.emit("h", f"{v.name}.unsqueeze({dim})", shape, v.dtype, v.err)
    if s.draw(st.booleans()):  # and broadcast it out
        n = s.draw(st.sampled_from([2, 3]))
        sizes = ["-1"] * len(shape)
        sizes[dim] = str(n)
        shape[dim] = Size(n)
        h = s.emit("h", f"{h.name}.expand({', '.join(sizes)})", shape, v.dtype, v.err)
    return h


def op_squeeze(s: Scope, v: Value):
    ones = [d for d, x in enumerate(v.shape) if x == Size(1)]
    if not ones:
        return None
    dim = s.draw(st.sampled_from(ones))
    return s.emit("h", f"{v.name}.squeeze({dim})", v.shape[:dim] + v.shape[dim + 1:], v.dtype, v.err)


def op_permute(s: Scope, v: Value):
    if v.rank < 2:
        return None
    perm = s.draw(st.permutations(range(v.rank)))
    if list(perm) == sorted(perm):
        perm = list(reversed(perm))
    contiguous = ".contiguous()" if s.draw(st.booleans()) else ""
    how = s.draw(st.sampled_from(["permute", "transpose"]))
    if how == "transpose":
        a, b = sorted(s.draw(st.lists(st.integers(0, v.rank - 1), min_size=2, max_size=2, unique=True)))
        perm = list(range(v.rank))
        perm[a], perm[b] = perm[b], perm[a]
        expr = f"{v.name}.transpose({a}, {b}){contiguous}"
    else:
        expr = f"{v.name}.permute({', '.join(map(str, perm))}){contiguous}"
    return s.emit("h", expr, tuple(v.shape[p] for p in perm), v.dtype, v.err)


def op_slice(s: Scope, v: Value):
    dims = [d for d, x in enumerate(v.shape) if x.static and x.const >= 2]
    if not dims:
        return None
    d = s.draw(st.sampled_from(dims))
    n = v.shape[d].const
    start = s.draw(st.integers(-n, n - 1))
    lo = start % n
    stop = s.draw(st.integers(lo + 1, n))
    step = s.draw(st.sampled_from([1, 2, 3]))
    count = len(range(lo, stop, step))
    index = ", ".join([":"] * d + [f"{start}:{stop}:{step}"])
    shape = list(v.shape)
    shape[d] = Size(count)
    return s.emit("h", f"{v.name}[{index}]", shape, v.dtype, v.err)


def op_select(s: Scope, v: Value):
    dims = [d for d, x in enumerate(v.shape) if x.static and x.const >= 2]
    if not dims or v.rank < 2:
        return None
    d = s.draw(st.sampled_from(dims))
    i = s.draw(st.integers(-v.shape[d].const, v.shape[d].const - 1))
    return s.emit("h", f"{v.name}.select({d}, {i})", v.shape[:d] + v.shape[d + 1:], v.dtype, v.err)


def op_pad(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank or not v.shape[-1].static:
        return None
    left, right = s.draw(st.integers(0, 3)), s.draw(st.integers(0, 3))
    mode = s.draw(st.sampled_from(["constant", "constant_value"]))
    value = ", value=-1.5" if mode == "constant_value" else ""
    shape = v.shape[:-1] + (Size(v.shape[-1].const + left + right),)
    return s.emit("h", f"F.pad({v.name}, ({left}, {right}){value})", shape, v.dtype, v.err)


def op_flip(s: Scope, v: Value):
    if not v.rank:
        return None
    dim = s.draw(st.integers(-v.rank, -1))
    return s.emit("h", f"{v.name}.flip({dim})", v.shape, v.dtype, v.err)


def op_cat(s: Scope, v: Value):
    """cat of v with a value computed from it or another of the same shape, along any dim (a
    dynamic one doubles its size)."""
    if not v.rank:
        return None
    dim = s.draw(st.integers(0, v.rank - 1))
    others = [o for o in s.values if o is not v and o.dtype == v.dtype and o.rank == v.rank
              and all(a == b for j, (a, b) in enumerate(zip(o.shape, v.shape)) if j != dim)
              and (o.shape[dim] == v.shape[dim] or (o.shape[dim].static and v.shape[dim].static))]
    if others and s.draw(st.booleans()):
        o = s.draw(st.sampled_from(others))
    elif v.dtype == "float":
        o = s.emit("h", f"{v.name} * 0.5", v.shape, err=inexact(v.err) if not v.exact else 0.0)
    else:
        o = v
    shape = list(v.shape)
    if o.shape[dim] == v.shape[dim]:
        shape[dim] = Size(2) * v.shape[dim]
    else:
        shape[dim] = Size(v.shape[dim].const + o.shape[dim].const)
    first, second = (v, o) if s.draw(st.booleans()) else (o, v)
    err = max(v.err, o.err) if (v.err and o.err) else v.err + o.err
    return s.emit("h", f"torch.cat([{first.name}, {second.name}], dim={dim})", shape, v.dtype, err)


def _static_dims(v: Value, minimum=2):
    return [d for d, x in enumerate(v.shape) if x.static and x.const >= minimum]


def op_gather(s: Scope, v: Value):
    """torch.gather along a static dim with constant indices (size 1 where v's size is dynamic),
    or indices computed from an exact value."""
    dims = _static_dims(v)
    if not dims:
        return None
    d = s.draw(st.sampled_from(dims))
    n = v.shape[d].const
    m = s.draw(st.integers(1, n + 2))
    shape = [Size(1) if not x.static else x for x in v.shape]
    shape[d] = Size(m)
    idx = s.model.buffer("idx", f"torch.randint(0, {n}, {shape_text(shape)})")
    return s.emit("h", f"torch.gather({v.name}, {d}, {idx})", shape, v.dtype, v.err)


def op_index_select(s: Scope, v: Value):
    dims = _static_dims(v)
    if not dims:
        return None
    d = s.draw(st.sampled_from(dims))
    n = v.shape[d].const
    idx = s.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))
    how = s.draw(st.sampled_from(["index_select", "getitem"]))
    shape = list(v.shape)
    shape[d] = Size(len(idx))
    if how == "getitem":
        index = ", ".join([":"] * d + [f"torch.tensor({idx})"])
        return s.emit("h", f"{v.name}[{index}]", shape, v.dtype, v.err)
    return s.emit("h", f"{v.name}.index_select({d}, torch.tensor({idx}))", shape, v.dtype, v.err)


def op_index_put(s: Scope, v: Value):
    """y = v.clone(); y[..., idx] = w (distinct indices) or index_put(accumulate=True) on dim 0."""
    if v.dtype != "float":
        return None
    dims = _static_dims(v)
    if not dims:
        return None
    d = s.draw(st.sampled_from(dims))
    n = v.shape[d].const
    accumulate = s.draw(st.booleans()) and d == 0
    idx = s.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, 4), unique=not accumulate))
    w_shape = list(v.shape)
    w_shape[d] = Size(len(idx))
    w_shape = w_shape[d:] if s.draw(st.booleans()) else w_shape  # broadcast over the leading dims
    w = s.model.attr("p", f"nn.Parameter(torch.randn({shape_text([x if x.static else Size(1) for x in w_shape])}))")
    w_err = 0.0
    if accumulate:
        return s.emit("h", f"{v.name}.index_put((torch.tensor({idx}),), {w}, accumulate=True)", v.shape,
                      err=inexact(v.err, add=2 * len(idx)))
    y = s.emit("y", f"{v.name}.clone()", v.shape, err=v.err)
    index = ", ".join([":"] * d + [f"torch.tensor({idx})"])
    s.lines.append(f"{y.name}[{index}] = {w}")
    y.err = max(v.err, w_err)
    return y


def op_embedding(s: Scope, v: Value):
    """An embedding lookup by an int64 value (a token input), or of a new token input."""
    if v.dtype != "int64":
        return None
    emb = s.model.attr("emb", f"nn.Embedding({s.method_vocab}, {s.draw(st.sampled_from([8, 16, 12]))})")
    width = int(s.model.init[-1].split(", ")[-1].rstrip(")"))
    return s.emit("h", f"{emb}({v.name})", v.shape + (Size(width),), err=0.0)


def op_cond(s: Scope, v: Value):
    """torch.cond on an exact value's element (or a size), each branch a short chain on v."""
    if v.dtype != "float" or s.nested or not v.rank:
        return None
    exact = [e for e in s.exact_values() if e.rank]
    if exact and s.draw(st.booleans()):
        e = s.draw(st.sampled_from(exact))
        pred = f"{e.name}.amax() > 0.5"
    elif any(not x.static for x in v.shape):
        size = next(x for x in v.shape if not x.static)
        lo, hi = size.bounds(s.model.dims)
        pred = f"{v.name}.shape[{v.shape.index(size)}] > {(lo + hi) // 2}"
    else:
        return None
    errs = []
    fns = []
    for branch in ("true", "false"):
        lines = []
        inner = Scope(s.model, s.method, lines, nested=True)
        arg = Value("a", v.shape, v.dtype, v.err)
        inner.values.append(arg)
        out = arg
        for _ in range(s.draw(st.integers(1, 3))):
            out = _shape_preserving(inner, out)
        fn = s.model.fresh(f"{branch}_fn")
        s.lines.append(f"def {fn}(a):")
        s.lines += [f"    {line}" for line in lines]
        # Both branches' outputs in the canonical layout: torch.cond refuses branches whose
        # outputs' strides differ (a LayerNorm's output is contiguous, a cos of a transposed
        # input is not: seed 1619000, model 10, invalid at eager), as while_loop's carry below.
        s.lines.append(f"    return {out.name}.clone(memory_format=torch.contiguous_format)")
        errs.append(out.err)
        fns.append(fn)
    return s.emit("h", f"torch.cond({pred}, {fns[0]}, {fns[1]}, ({v.name},))", v.shape, err=max(errs))


def op_while(s: Scope, v: Value):
    """torch.while_loop: a counter and v, the body a short chain on v; the trip count a constant
    or an input-dependent limit."""
    if v.dtype != "float" or s.nested or not v.rank:
        return None
    trips = s.draw(st.integers(0, 3))
    lines = []
    inner = Scope(s.model, s.method, lines, nested=True)
    arg = Value("a", v.shape, v.dtype, v.err)
    inner.values.append(arg)
    out = arg
    for _ in range(s.draw(st.integers(1, 2))):
        out = _shape_preserving(inner, out, bounded=True)
    cond_fn, body_fn = s.model.fresh("cond_fn"), s.model.fresh("body_fn")
    s.lines += [f"def {cond_fn}(i, a):", f"    return i < {trips}",
                f"def {body_fn}(i, a):"] + [f"    {line}" for line in lines]
    s.lines.append(f"    return i + 1, {out.name}" if out is not arg else f"    return i + 1, {out.name}.clone()")
    err = v.err
    per_trip = max(out.err - v.err, 0.0)
    for _ in range(trips):
        err = err * 2 + per_trip
    # The carry in the canonical layout: while_loop wants the body's output laid out as its input,
    # stride for stride, and `.contiguous()` keeps any stride of a size-1 dim (a transposed [1, 8, 1]
    # input has strides (1, 1, 8), the body's output (8, 1, 1): torch refused the model).
    h = s.emit("loop", f"torch.while_loop({cond_fn}, {body_fn}, (torch.zeros((), dtype=torch.int64), "
                       f"{v.name}.clone(memory_format=torch.contiguous_format)))",
               (), dtype="tuple", err=err)
    return s.emit("h", f"{h.name}[1]", v.shape, err=err)


def op_state(s: Scope, v: Value):
    """A mutable buffer updated in place from v (a running mean of its rows, or rows written
    at fixed positions) and read back: its value carries across calls."""
    if v.dtype != "float" or s.nested or not v.rank:
        return None
    k = static_last(v)
    if k is None:
        return None
    s.model.stateful = True
    kind = s.draw(st.sampled_from(["running", "rows", "copy"]))
    reduced = f"{v.name}.reshape(-1, {k}).mean(0)"
    if kind == "rows":
        n = s.draw(st.integers(2, 5))
        buf = s.model.buffer("state", f"torch.zeros({n}, {k})")
        pos = s.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        s.lines.append(f"{buf}[torch.tensor({pos})] = {reduced} * 0.5 + {buf}[torch.tensor({pos})]")
        out_shape = (Size(n), Size(k))
    elif kind == "copy":
        buf = s.model.buffer("state", f"torch.zeros({k})")
        s.lines.append(f"{buf}.copy_(torch.tanh({reduced}) + {buf} * 0.5)")
        out_shape = (Size(k),)
    else:
        buf = s.model.buffer("state", f"torch.zeros({k})")
        s.lines.append(f"{buf}.mul_(0.5).add_({reduced})")
        out_shape = (Size(k),)
    n_rows = 1
    for x in v.shape[:-1]:
        n_rows *= x.bounds(s.model.dims)[1]
    # The state mixes every call's rows: its error accumulates over the calls (at most 4).
    err = (v.err + 2 * n_rows + 8) * 4
    state = s.emit("state", f"{buf} * 1.0", out_shape, err=err)
    if broadcast(v.shape, out_shape) == v.shape:
        return s.emit("h", f"{v.name} + {state.name}", v.shape, err=inexact(v.err, state.err))
    return state


def _shape_preserving(s: Scope, v: Value, *, bounded=False) -> Value:
    """One op that keeps v's shape (branch and loop bodies): a unary op, a square linear, a norm,
    a binary op with a parameter or scalar."""
    kinds = ["unary", "binary", "linear", "norm"]
    kind = s.draw(st.sampled_from(kinds))
    if kind == "linear" and static_last(v) is not None:
        k = static_last(v)
        layer = s.model.attr("linear", f"nn.Linear({k}, {k})")
        out = s.emit("h", f"{layer}({v.name})", v.shape, err=v.err * math.sqrt(k) + 2 * k)
    elif kind == "norm" and static_last(v) is not None and static_last(v) >= 2:
        out = op_norm(s, v) if v.rank else None
        out = out if out is not None and out.shape == v.shape else op_unary(s, v)
    elif kind == "binary":
        out = op_binary(s, v)
        out = out if out is not None and out.shape == v.shape else op_unary(s, v)
    else:
        out = op_unary(s, v)
    out = out if out is not None else s.emit("h", f"{v.name} * 0.5", v.shape, err=inexact(v.err))
    if bounded:  # a loop body applied again and again must not grow its values
        out = s.emit("h", f"torch.tanh({out.name})", out.shape, err=inexact(out.err))
    return out
