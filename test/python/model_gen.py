"""Random valid models for the compiler fuzzer, drawn with hypothesis (so a failure shrinks).

A model is generated as the Python source of a `torch.nn.Module` plus the data `model_check`
needs to export and check it (see there). The generator builds each method's `forward` as a
stream of values, one op (or one block of ops, the way real models combine them: an MLP, an
attention head, conv -> batch norm -> ReLU -> pool) at a time, and knows every value's shape as
sizes over the model's Dims, its dtype and how far it may be from eager:

  Size     a product `const * d0 * d1 ...` of the dynamic Dims (merged by reshapes, doubled by a
           cat); the generator only makes shapes it can prove valid at every run-time size, so
           torch.export never has to specialize a Dim
  err      the output's tolerance in units of the dtype's roundoff at O(1) magnitude, derived from
           the ops: 0 where every op's result is exactly representable (views, permutes, slices,
           gathers, index_put, relu, max pooling, comparisons, integer math), which is checked
           bit for bit; otherwise each op adds its rounding (a contraction over K about 2K, a
           transcendental a few units) and passes on its inputs' error times its gain
  exact    discontinuous ops (comparisons feeding `where`, `torch.cond` predicates) read only
           exact values, so a roundoff difference can never flip a branch

Ops: linear, matmul (with weights and between activations), conv1d/conv2d (grouped, depthwise,
strided, dilated, padded), max/avg/adaptive pooling, layer/batch/group/RMS norm, softmax and
log_softmax, unary and binary elementwise ops with broadcasting against inputs, parameters and
scalars, where, reductions, cumsum, reshape/flatten/unflatten, permute/transpose, slice, pad,
flip, expand, cat, gather, index_select, embedding, index_put (and accumulate), torch.cond,
torch.while_loop, and mutable buffers updated in place. Models are float32, bfloat16 or int8
(PT2E, CpuQuantizer); they have up to four bounded Dims shared between inputs, inputs passed
contiguous, transposed or strided, and one to three methods.
"""

from __future__ import annotations

from hypothesis import strategies as st

from model_gen_ops import (op_linear, op_matmul_weight, op_mlp, op_attention, op_conv, op_conv_block,
                           op_pool, op_norm, op_softmax, op_unary, op_binary, op_where, op_reduce, op_cumsum)
from model_gen_shape_ops import (op_reshape, op_flatten, op_unsqueeze, op_squeeze, op_permute, op_slice,
                                 op_select, op_pad, op_flip, op_cat, op_gather, op_index_select,
                                 op_index_put, op_embedding, op_cond, op_while, op_state)
from model_gen_values import MAX_DIMS, Method, Model, Scope, Size, Value, broadcast, inexact, shape_text

__all__ = ["INT8_OPS", "OPS", "Size", "broadcast", "models", "shape_text"]

# The values and the model being built are model_gen_values.py; the ops model_gen_ops.py (compute)
# and model_gen_shape_ops.py (data movement, control flow, state).

# Ops by how often real models use them (hypothesis shrinks towards the first).
OPS = {
    "unary": op_unary, "binary": op_binary, "linear": op_linear, "reshape": op_reshape,
    "permute": op_permute, "softmax": op_softmax, "norm": op_norm, "mlp": op_mlp, "conv": op_conv,
    "conv_block": op_conv_block, "pool": op_pool, "attention": op_attention, "slice": op_slice,
    "select": op_select, "cat": op_cat, "reduce": op_reduce, "matmul": op_matmul_weight,
    "where": op_where, "flatten": op_flatten, "unsqueeze": op_unsqueeze, "squeeze": op_squeeze,
    "pad": op_pad, "flip": op_flip, "cumsum": op_cumsum, "gather": op_gather,
    "index_select": op_index_select, "index_put": op_index_put, "cond": op_cond, "while": op_while,
    "state": op_state,
}
# The ops PT2E quantization sees (the rest of the graph stays float between dq and q).
INT8_OPS = ["linear", "conv", "conv_block", "binary", "unary", "reshape", "permute", "pool", "cat", "mlp",
            "flatten", "softmax", "norm", "matmul", "slice"]


# ------------------------------------------------------------------ methods and models
def _primary_input(s: Scope, family: str) -> Value:
    """The method's first input, of a shape the family's models take, its free Dims drawn."""
    model = s.model
    draw = s.draw

    # Each Dim sizes at most one dim of the input: torch.export (2.13) cannot prove every size of
    # some ops over a shape with one Dim twice ([b, t, t] merged after a permute, or through a
    # torch.cond: guards like min(3*t, 3*t*t) == 3*t), so such models came out `invalid`.
    used = set()

    def size(static_choices, dynamic_ok=True):
        free = [name for name in model.dims if name not in used]
        if dynamic_ok and free and draw(st.booleans()):
            name = draw(st.sampled_from(free))
            used.add(name)
            return Size(1, (name,))
        return Size(draw(st.sampled_from(static_choices)))

    if family == "tokens":
        s.method_vocab = draw(st.sampled_from([10, 32, 7]))
        shape = (size([1, 2, 3]), size([5, 4, 8]))
        return s.new_input(shape, "int64", high=s.method_vocab)
    if family == "image":
        shape = (size([1, 2]), Size(draw(st.sampled_from([3, 4, 1, 8]))), size([8, 6, 5, 9]), size([8, 6, 7, 4]))
    elif family == "signal":
        shape = (size([1, 2]), Size(draw(st.sampled_from([4, 3, 8]))), size([16, 10, 7]))
    elif family == "matrix":
        shape = (size([4, 3, 7]), Size(draw(st.sampled_from([8, 16, 5, 32]))))
    elif family == "vector":
        shape = (Size(draw(st.sampled_from([8, 5, 16]))),) if not model.dims else (size([8, 5, 16]),)
    else:  # seq
        shape = (size([1, 2, 3]), size([4, 5, 8]), Size(draw(st.sampled_from([8, 16, 12, 32, 6]))))
    return s.new_input(shape)


def _method(model: Model, name: str, max_ops: int) -> Method:
    draw = model.draw
    method = Method(name)
    model.methods.append(method)
    s = Scope(model, method, method.lines)
    s.method_vocab = 0
    family = draw(st.sampled_from(["seq", "image", "matrix", "tokens", "signal", "vector"]))
    if model.dtype == "int8" and family == "tokens":
        family = "seq"
    v = _primary_input(s, family)
    if v.dtype == "int64":
        v = op_embedding(s, v)
    names = INT8_OPS if model.dtype == "int8" else list(OPS)
    if model.dtype == "int8" or len(model.methods) > 1:
        names = [n for n in names if n != "state"]  # each method its own state: kept to one
    n_ops = draw(st.integers(1, max_ops))
    for _ in range(n_ops):
        op = draw(st.sampled_from(names))
        out = OPS[op](s, v)
        if out is None:  # not applicable to v: an op that always is
            if v.dtype == "float":
                out, op = s.emit("h", f"{v.name} * 0.75 + 0.5", v.shape, err=inexact(v.err)), "unary"
            else:
                out, op = s.emit("h", f"{v.name}.clone()", v.shape, v.dtype, v.err), "clone"
        model.ops.append(op)
        v = out
        # A residual connection when an earlier value has the same shape.
        earlier = [e for e in s.values[:-1] if e.shape == v.shape and e.dtype == v.dtype == "float"]
        if earlier and draw(st.integers(0, 4)) == 4:
            e = draw(st.sampled_from(earlier))
            v = s.emit("h", f"{v.name} + {e.name}", v.shape, err=inexact(v.err, e.err))
    outputs = [v]
    extra = [e for e in s.values if e is not v and e.dtype in ("float", "int64", "bool")]
    for _ in range(draw(st.integers(0, 2))):
        if extra:
            outputs.append(draw(st.sampled_from(extra)))
    # Every Dim a method's inputs carry must also be bound where it is first used (done in new_input);
    # an input that no output depends on is still an input of the exported method.
    method.outputs = outputs
    return method


@st.composite
def models(draw, max_ops: int = 6, max_methods: int = 3, dtypes=("float32", "bfloat16", "int8")):
    """A random model: (source, spec for model_check)."""
    dtype = draw(st.sampled_from(list(dtypes)))
    n_dims = draw(st.integers(0, MAX_DIMS))
    dims = {}
    for i in range(n_dims):
        lo = draw(st.sampled_from([1, 2]))
        hi = draw(st.integers(lo + 2, 12))
        dims[f"d{i}"] = (lo, hi)
    model = Model(draw, dtype, dims)
    n_methods = draw(st.integers(1, max_methods)) if draw(st.integers(0, 3)) == 3 else 1
    for m in range(n_methods):
        _method(model, "forward" if m == 0 else f"method_{m}", max_ops if dtype != "bfloat16" else min(max_ops, 4))
    # Run-time sizes: the export example (>= 2: torch specializes 0 and 1), every Dim at its
    # minimum, at its maximum, and somewhere in between.
    used = {d for m in model.methods for i in m.inputs for size in i["shape"] for d in size.names}
    dims = {d: b for d, b in dims.items() if d in used}
    example = {d: draw(st.integers(max(2, lo), hi)) for d, (lo, hi) in dims.items()}
    calls = [example]
    if dims:
        calls += [{d: lo for d, (lo, _) in dims.items()}, {d: hi for d, (_, hi) in dims.items()},
                  {d: draw(st.integers(lo, hi)) for d, (lo, hi) in dims.items()}]
    elif model.stateful:
        calls += [example, example]
    spec = {
        "source": model.source(),
        "dtype": dtype,
        "dims": {d: list(b) for d, b in dims.items()},
        "methods": [{"name": m.name,
                     "inputs": [{**i, "shape": [s.json() for s in i["shape"]]} for i in m.inputs],
                     "outputs": [{"exact": o.exact, "err": o.err} for o in m.outputs]} for m in model.methods],
        "calls": calls,
        "seed": draw(st.integers(0, 2 ** 16)),
        "ops": model.ops,
    }
    return spec
