"""The model generator's compute ops: linear, matmul, MLP, attention, convolution, pooling, norms,
softmax, elementwise, where, reductions, cumsum. Each op takes (scope, v) -> Value | None (None:
not applicable to v; another op is drawn). See model_gen.py."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from model_gen_values import Scope, Size, Value, broadcast, inexact, static_last


def op_linear(s: Scope, v: Value):
    k = static_last(v)
    if v.dtype != "float" or k is None:
        return None
    n = s.draw(st.sampled_from([8, 16, 5, 32, 1, 24, 64]))
    bias = s.draw(st.booleans())
    layer = s.model.attr("linear", f"nn.Linear({k}, {n}, bias={bias})")
    return s.emit("h", f"{layer}({v.name})", v.shape[:-1] + (Size(n),), err=v.err * math.sqrt(k) + 2 * k)


def op_matmul_weight(s: Scope, v: Value):
    k = static_last(v)
    if v.dtype != "float" or k is None:
        return None
    n = s.draw(st.sampled_from([8, 3, 16, 17]))
    w = s.model.attr("w", f"nn.Parameter(torch.randn({k}, {n}) / {math.sqrt(k):.4f})")
    return s.emit("h", f"{v.name} @ {w}", v.shape[:-1] + (Size(n),), err=v.err * math.sqrt(k) + 2 * k)


def op_mlp(s: Scope, v: Value):
    """Linear -> activation -> Linear, with a residual when the widths agree."""
    k = static_last(v)
    if v.dtype != "float" or k is None:
        return None
    hidden = s.draw(st.sampled_from([16, 32, 12]))
    act = s.draw(st.sampled_from(["F.relu", "F.gelu", "F.silu", "torch.tanh"]))
    up = s.model.attr("up", f"nn.Linear({k}, {hidden})")
    down = s.model.attr("down", f"nn.Linear({hidden}, {k})")
    residual = s.draw(st.booleans())
    expr = f"{down}({act}({up}({v.name})))" + (f" + {v.name}" if residual else "")
    err = (v.err * math.sqrt(k) + 2 * k + 4) * math.sqrt(hidden) + 2 * hidden + (v.err if residual else 0)
    return s.emit("h", expr, v.shape, err=err)


def op_attention(s: Scope, v: Value):
    """Multi-head self-attention over [..., T, C]: heads split by a reshape, scores between
    activations (a contraction over the head width, then over T, which may be dynamic), an
    optional causal mask made at run-time size, softmax, heads merged back; or the same as one
    `F.scaled_dot_product_attention`. A static T is sometimes stretched to a long sequence first
    (`_long_sequence`), so the fused flash-attention kernel gets random models too."""
    c = static_last(v)
    if v.dtype != "float" or c is None or v.rank < 2 or s.nested:
        return None
    heads = s.draw(st.sampled_from([h for h in (1, 2, 4) if c % h == 0 and c // h >= 2] or [1]))
    d = c // heads
    t = v.shape[-2]
    lead = v.shape[:-2]
    if t.static and s.draw(st.booleans()):
        v = _long_sequence(s, v, c)
        t = v.shape[-2]
    qkv = s.model.attr("qkv", f"nn.Linear({c}, {3 * c})")
    proj = s.model.attr("proj", f"nn.Linear({c}, {c})")
    causal = s.draw(st.booleans())
    split = s.shape_args(lead + (t, Size(heads), Size(d)))
    q = s.emit("q", f"{qkv}({v.name})", lead + (t, Size(3 * c)), err=v.err * math.sqrt(c) + 2 * c)
    nq = len(lead)
    perm = ", ".join(str(i) for i in list(range(nq)) + [nq + 1, nq, nq + 2])
    parts = []
    for i, name in enumerate("qkv"):
        parts.append(s.emit(name, f"{q.name}[..., {i * c}:{(i + 1) * c}].reshape({split}).permute({perm})",
                            lead + (Size(heads), t, Size(d)), err=q.err))
    t_max = t.bounds(s.model.dims)[1]
    # Error bounds of the three steps, whichever form computes them: scores, softmax, probs @ v.
    scores_err = 2 * q.err * d + 2 * d
    probs_err = 2 * scores_err + 8
    out_err = probs_err * 4 + q.err + 2 * t_max
    merge = f".permute({perm}).reshape({s.shape_args(lead + (t, Size(c)))})"
    if s.draw(st.booleans()):  # the form transformers' models export: one fused torch op
        att = s.emit("att", f"F.scaled_dot_product_attention({parts[0].name}, {parts[1].name}, {parts[2].name}, "
                            f"is_causal={causal})" + merge, lead + (t, Size(c)), err=out_err)
        return s.emit("h", f"{proj}({att.name})", att.shape, err=att.err * math.sqrt(c) + 2 * c)
    scores_shape = lead + (Size(heads), t, t)
    scores = s.emit("scores", f"({parts[0].name} @ {parts[1].name}.transpose(-2, -1)) * {d ** -0.5!r}",
                    scores_shape, err=scores_err)
    if causal:
        mask = s.emit("mask", f"torch.ones({s.size_expr(t)}, {s.size_expr(t)}, dtype=torch.bool).triu(1)", (t, t),
                      dtype="bool")
        scores = s.emit("scores", f"{scores.name}.masked_fill({mask.name}, float('-inf'))", scores_shape,
                        err=scores.err)
    probs = s.emit("probs", f"torch.softmax({scores.name}, dim=-1)", scores_shape, err=probs_err)
    out = s.emit("att", f"({probs.name} @ {parts[2].name})" + merge, lead + (t, Size(c)), err=out_err)
    return s.emit("h", f"{proj}({out.name})", out.shape, err=out.err * math.sqrt(c) + 2 * c)


def _long_sequence(s: Scope, v: Value, c: int) -> Value:
    """[..., T, C] stretched to a sequence of 256 keys or more (each token repeated, then a learned
    position added so no two rows are equal): what etc-cpu-attention-kernels fuses into its flash
    kernel. Lengths off the key tile (128) and the query-row block check the partial tiles."""
    length = s.draw(st.sampled_from([256, 300, 389]))
    repeat = -(-length // v.shape[-2].const)
    pos = s.model.attr("pos", f"nn.Parameter(torch.randn({length}, {c}) * 0.5)")
    return s.emit("long", f"{v.name}.repeat_interleave({repeat}, dim=-2)[..., :{length}, :] + {pos}",
                  v.shape[:-2] + (Size(length), Size(c)), err=inexact(v.err))


def _conv_geometry(s: Scope, spatial):
    """(kernel, stride, padding, dilation, output spatial sizes) valid at every size: a dynamic
    or small size only with a 'same' convolution (stride 1, padding d (k - 1) / 2)."""
    k = s.draw(st.sampled_from([3, 1, 5, 2]))
    dilation = s.draw(st.sampled_from([1, 1, 2]))
    stride = s.draw(st.sampled_from([1, 2]))
    padding = s.draw(st.sampled_from(["same", 0, 1]))
    reach = dilation * (k - 1)
    static = all(x.static for x in spatial)
    if not static or padding == "same" or min(x.const for x in spatial) < reach + 1 + stride:
        if k % 2 == 0:
            k = 3
        reach = dilation * (k - 1)
        return k, 1, reach // 2, dilation, spatial
    out = tuple(Size((x.const + 2 * padding - reach - 1) // stride + 1) for x in spatial)
    return k, stride, padding, dilation, out


def op_conv(s: Scope, v: Value):
    if v.dtype != "float" or v.rank not in (3, 4) or not v.shape[1].static:
        return None
    c = v.shape[1].const
    spatial = v.shape[2:]
    k, stride, padding, dilation, out_spatial = _conv_geometry(s, spatial)
    groups = s.draw(st.sampled_from([1, 1, c] + ([2] if c % 2 == 0 else [])))
    f = s.draw(st.sampled_from([8, 4, 16, 6]))
    f = f * groups // math.gcd(f, groups) if groups > 1 else f
    bias = s.draw(st.booleans())
    kind = "Conv2d" if v.rank == 4 else "Conv1d"
    conv = s.model.attr("conv", f"nn.{kind}({c}, {f}, {k}, stride={stride}, padding={padding}, "
                                f"dilation={dilation}, groups={groups}, bias={bias})")
    taps = (c // groups) * k ** (v.rank - 2)
    return s.emit("h", f"{conv}({v.name})", (v.shape[0], Size(f)) + tuple(out_spatial),
                  err=v.err * math.sqrt(taps) + 2 * taps)


def op_conv_block(s: Scope, v: Value):
    """conv -> BatchNorm (eval, random running statistics: etc-fuse-batch-norm folds it) -> ReLU."""
    if v.dtype != "float" or v.rank != 4 or not v.shape[1].static:
        return None
    h = op_conv(s, v)
    f = h.shape[1].const
    bn = s.model.attr("bn", f"nn.BatchNorm2d({f})")
    s.model.init.append(f"{bn}.running_mean.uniform_(-0.5, 0.5)")
    s.model.init.append(f"{bn}.running_var.uniform_(0.5, 2.0)")
    s.model.init.append(f"{bn}.weight.data.uniform_(0.5, 1.5)")
    return s.emit("h", f"F.relu({bn}({h.name}))", h.shape, err=h.err * 2 + 4)


def op_pool(s: Scope, v: Value):
    if v.dtype != "float" or v.rank != 4:
        return None
    kind = s.draw(st.sampled_from(["max", "avg", "adaptive", "max_same"]))
    n, c, h, w = v.shape
    if kind == "adaptive":
        return s.emit("h", f"F.adaptive_avg_pool2d({v.name}, 1)", (n, c, Size(1), Size(1)),
                      err=inexact(v.err, add=2 * max(x.bounds(s.model.dims)[1] for x in (h, w)) ** 2))
    if kind == "max_same":
        return s.emit("h", f"F.max_pool2d({v.name}, 3, stride=1, padding=1)", v.shape, err=v.err)
    if not (h.static and w.static and h.const >= 2 and w.const >= 2):
        return None
    out = (n, c, Size(h.const // 2), Size(w.const // 2))
    if kind == "max":
        return s.emit("h", f"F.max_pool2d({v.name}, 2)", out, err=v.err)
    return s.emit("h", f"F.avg_pool2d({v.name}, 2)", out, err=inexact(v.err, add=4))


def op_norm(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank:
        return None
    kind = s.draw(st.sampled_from(["layer", "rms", "group", "batch"]))
    k = static_last(v)
    if kind == "group" and v.rank >= 3 and v.shape[1].static and v.shape[1].const % 2 == 0:
        c = v.shape[1].const
        gn = s.model.attr("gn", f"nn.GroupNorm({s.draw(st.sampled_from([2, 1]))}, {c})")
        return s.emit("h", f"{gn}({v.name})", v.shape, err=v.err * 8 + 32)
    if kind == "batch" and v.rank == 4 and v.shape[1].static:
        c = v.shape[1].const
        bn = s.model.attr("bn", f"nn.BatchNorm2d({c})")
        s.model.init.append(f"{bn}.running_var.uniform_(0.5, 2.0)")
        s.model.init.append(f"{bn}.running_mean.uniform_(-0.5, 0.5)")
        return s.emit("h", f"{bn}({v.name})", v.shape, err=v.err * 2 + 4)
    if k is None or k < 2:
        return None
    if kind == "rms":
        w = s.model.attr("g", f"nn.Parameter(torch.rand({k}) + 0.5)")
        return s.emit("h", f"{v.name} * torch.rsqrt({v.name}.pow(2).mean(-1, keepdim=True) + 1e-5) * {w}",
                      v.shape, err=v.err * 8 + 2 * k + 8)
    ln = s.model.attr("ln", f"nn.LayerNorm({k})")
    return s.emit("h", f"{ln}({v.name})", v.shape, err=v.err * 8 + 4 * k + 16)


def op_softmax(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank:
        return None
    dim = s.draw(st.integers(-v.rank, -1))
    fn = s.draw(st.sampled_from(["torch.softmax", "torch.log_softmax"]))
    n = v.shape[dim].bounds(s.model.dims)[1]
    return s.emit("h", f"{fn}({v.name}, dim={dim})", v.shape, err=2 * v.err + 8 + n)


# Unary elementwise ops: (expression with {} for the operand, stays exact, gain on the input error).
UNARY = {
    "relu": ("F.relu({})", True, 1),
    "neg": ("-{}", True, 1),
    "abs": ("{}.abs()", True, 1),
    "clamp": ("{}.clamp(-0.5, 0.75)", True, 1),
    "hardtanh": ("F.hardtanh({})", True, 1),
    "gelu": ("F.gelu({})", False, 2),
    "gelu_tanh": ("F.gelu({}, approximate='tanh')", False, 2),
    "sigmoid": ("torch.sigmoid({})", False, 1),
    "tanh": ("torch.tanh({})", False, 1),
    "silu": ("F.silu({})", False, 2),
    "leaky_relu": ("F.leaky_relu({}, 0.125)", False, 1),
    "elu": ("F.elu({})", False, 1),
    "hardswish": ("F.hardswish({})", False, 2),
    "exp_neg": ("torch.exp(-{}.abs())", False, 1),
    "log1p": ("torch.log1p({}.abs())", False, 1),
    "sqrt": ("torch.sqrt({}.abs() + 0.25)", False, 2),
    "rsqrt": ("torch.rsqrt({0} * {0} + 1.0)", False, 2),
    "reciprocal": ("1.0 / ({}.abs() + 1.0)", False, 2),
    "square": ("{0} * {0}", False, 8),
    "sin": ("torch.sin({})", False, 1),
    "cos": ("torch.cos({})", False, 1),
    "erf": ("torch.erf({})", False, 2),
    "affine": ("{} * 0.75 + 0.5", False, 1),
    "round": ("torch.round({} * 4.0)", False, 1),
}


# Units of roundoff an inexact unary op adds (4 unless named): GELU's 1 + erf(x / sqrt 2) cancels
# for x << 0, where torch's own float32 result is off the true value by up to 4.8e-7 absolute
# (x = -3.99: -1.2915e-4 against -1.29638e-4 in double, 8 units) and etc's float32 erf, a few
# ulps from torch's, cancels the same way: a fuzzer run found the two 5e-7 apart (4 units allowed).
UNARY_ADDED_UNITS = {"gelu": 16}


def op_unary(s: Scope, v: Value):
    if v.dtype != "float":
        return None
    name = s.draw(st.sampled_from(list(UNARY)))
    expr, exact, gain = UNARY[name]
    if name == "round" and not v.exact:
        return None  # a rounding step amplifies any difference to a whole unit
    err = v.err * gain if exact else inexact(v.err * gain, add=UNARY_ADDED_UNITS.get(name, 4))
    if name == "round":
        err = 0.0 if v.exact else err
    return s.emit("h", expr.format(v.name), v.shape, err=err)


BINARY = {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "maximum": "torch.maximum({}, {})",
          "minimum": "torch.minimum({}, {})", "div": "{} / ({}.abs() + 1.0)"}


def op_binary(s: Scope, v: Value):
    if v.dtype != "float":
        return None
    name = s.draw(st.sampled_from(list(BINARY)))
    other, other_shape, other_err, number = s.operand_like(v.shape)
    if other == v.name:
        other_err = v.err
    swap = s.draw(st.booleans()) and name != "div"
    a, b = (other, v.name) if swap else (v.name, other)
    shape = broadcast(v.shape, other_shape)
    if name in ("maximum", "minimum") and number:  # clamp (maximum wants tensors)
        bound = "min" if name == "maximum" else "max"
        return s.emit("h", f"{v.name}.clamp({bound}={other})", v.shape, err=v.err)
    if name == "div" and number:
        return s.emit("h", f"{v.name} / {abs(float(other)) + 1.0!r}", v.shape, err=inexact(v.err * 4, add=2))
    exact_op = name in ("maximum", "minimum")
    err = max(v.err, other_err) if exact_op else inexact(v.err * 4, other_err * 4, add=2)
    return s.emit("h", BINARY[name].format(a, b), shape, err=err)


def op_where(s: Scope, v: Value):
    """where(cond, v, other): the condition from an exact value, so it is the same on both sides."""
    if v.dtype != "float":
        return None
    candidates = [e for e in s.exact_values() if broadcast(v.shape, e.shape) == v.shape]
    if not candidates:
        return None
    e = s.draw(st.sampled_from(candidates))
    cmp = s.draw(st.sampled_from(["> 0", "< 0.5", ">= -0.25"]))
    other = s.draw(st.sampled_from(["0.0", "-1.0", f"{v.name} * 0.5"]))
    return s.emit("h", f"torch.where({e.name} {cmp}, {v.name}, {other})", v.shape,
                  err=v.err + (1 if "*" in other else 0))


def op_reduce(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank:
        return None
    kind = s.draw(st.sampled_from(["sum", "mean", "amax", "amin"]))
    dim = s.draw(st.integers(-v.rank, -1))
    keep = s.draw(st.booleans())
    shape = list(v.shape)
    n = shape[dim].bounds(s.model.dims)[1]
    if keep:
        shape[dim] = Size(1)
    else:
        del shape[dim]
    if kind in ("amax", "amin"):
        return s.emit("h", f"{v.name}.{kind}({dim}, keepdim={keep})", shape, err=v.err)
    scale = f" * {1 / math.sqrt(n):.6g}" if kind == "sum" else ""
    gain = math.sqrt(n) if kind == "sum" else 1
    return s.emit("h", f"{v.name}.{kind}({dim}, keepdim={keep}){scale}", shape, err=v.err * gain + 2 * n)


def op_cumsum(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank:
        return None
    dim = s.draw(st.integers(-v.rank, -1))
    n = v.shape[dim].bounds(s.model.dims)[1]
    return s.emit("h", f"{v.name}.cumsum({dim}) * {1 / math.sqrt(n):.6g}", v.shape, err=v.err * n + 2 * n)
