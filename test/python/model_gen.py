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

import math
from dataclasses import dataclass, field

from hypothesis import strategies as st

MAX_DIMS = 4


# ------------------------------------------------------------------ sizes
@dataclass(frozen=True)
class Size:
    """`const * prod(names)`: a static size when `names` is empty."""

    const: int
    names: tuple = ()

    @staticmethod
    def of(n: int) -> "Size":
        return Size(n)

    @property
    def static(self) -> bool:
        return not self.names

    def __mul__(self, other: "Size") -> "Size":
        return Size(self.const * other.const, tuple(sorted(self.names + other.names)))

    def text(self) -> str:
        parts = list(self.names)
        if self.const != 1 or not parts:
            parts.insert(0, str(self.const))
        return "*".join(parts)

    def bounds(self, dims: dict) -> tuple[int, int]:
        lo = hi = self.const
        for name in self.names:
            lo, hi = lo * dims[name][0], hi * dims[name][1]
        return lo, hi

    def json(self):
        return [self.const, list(self.names)]


def shape_text(shape) -> str:
    return "(" + ", ".join(s.text() for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """The broadcast shape of `a` and `b` where it is valid at every size (equal sizes or a static 1)."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else Size(1)
        y = b[-i] if i <= len(b) else Size(1)
        if x == y or y == Size(1):
            out.append(x)
        elif x == Size(1):
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


# ------------------------------------------------------------------ values
@dataclass
class Value:
    name: str
    shape: tuple
    dtype: str = "float"   # float (the model's float dtype), int64, bool
    err: float = 0.0       # 0: exact

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def exact(self) -> bool:
        return self.err == 0.0


def _inexact(*errs: float, add: float = 1.0) -> float:
    return sum(errs) + add


# ------------------------------------------------------------------ the model being built
@dataclass
class Method:
    name: str
    inputs: list = field(default_factory=list)   # [{"name", "shape": [Size], "dtype", "layout", "high"}]
    lines: list = field(default_factory=list)
    prologue: list = field(default_factory=list)
    outputs: list = field(default_factory=list)   # [Value]
    bound: dict = field(default_factory=dict)     # dim name -> python expression of its size


class Model:
    """What the draws have built so far: parameters (`__init__` lines), Dims, methods."""

    def __init__(self, draw, dtype: str, dims: dict):
        self.draw = draw
        self.dtype = dtype
        self.dims = dims          # name -> (min, max)
        self.unused_dims = list(dims)
        self.init: list[str] = []
        self.counter = 0
        self.methods: list[Method] = []
        self.ops: list[str] = []  # every op drawn, for the statistics
        self.stateful = False

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def attr(self, prefix: str, init: str) -> str:
        name = self.fresh(prefix)
        self.init.append(f"self.{name} = {init}")
        return f"self.{name}"

    def buffer(self, prefix: str, init: str) -> str:
        name = self.fresh(prefix)
        self.init.append(f"self.register_buffer({name!r}, {init})")
        return f"self.{name}"

    def source(self) -> str:
        lines = ["import torch", "import torch.nn.functional as F", "from torch import nn", "", "",
                 "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
        lines += [f"        {line}" for line in self.init] or ["        pass"]
        for method in self.methods:
            args = ", ".join(["self"] + [i["name"] for i in method.inputs])
            lines += ["", f"    def {method.name}({args}):"]
            lines += [f"        {line}" for line in method.prologue + method.lines]
            lines.append(f"        return {', '.join(v.name for v in method.outputs)}"
                         + ("," if len(method.outputs) == 1 else ""))
        return "\n".join(lines) + "\n"


class Scope:
    """One straight-line body being written: a method's forward or a branch / loop body."""

    def __init__(self, model: Model, method: Method, lines: list, *, nested: bool = False):
        self.model = model
        self.method = method
        self.lines = lines
        self.nested = nested   # inside cond/while: no new inputs, no Dim expressions, no buffers
        self.values: list[Value] = []

    @property
    def draw(self):
        return self.model.draw

    def emit(self, prefix: str, expr: str, shape, dtype="float", err=0.0) -> Value:
        name = self.model.fresh(prefix)
        self.lines.append(f"{name} = {expr}")
        value = Value(name, tuple(shape), dtype, float(err))
        self.values.append(value)
        return value

    def size_expr(self, size: Size) -> str:
        """Python text of a size inside forward (Dims bound from the inputs in the prologue)."""
        for name in size.names:
            if name not in self.method.bound:
                raise AssertionError(f"dim {name} used before an input carries it")
        return size.text()

    def shape_args(self, shape) -> str:
        return ", ".join(self.size_expr(s) for s in shape)

    # -------------------------------------------------------------- inputs and operands
    def new_input(self, shape, dtype="float", high=0) -> Value:
        method = self.method
        name = f"x{len(method.inputs)}"
        layout = "contiguous"
        if dtype == "float" and len(shape) >= 1:
            layout = self.draw(st.sampled_from(["contiguous", "contiguous", "transposed", "strided"]))
        method.inputs.append({"name": name, "shape": list(shape), "dtype": dtype, "layout": layout, "high": high})
        for d, size in enumerate(shape):
            for dim in size.names:
                if dim not in method.bound:
                    assert size.const == 1 and len(size.names) == 1
                    method.bound[dim] = f"{name}.shape[{d}]"
                    method.prologue.append(f"{dim} = {name}.shape[{d}]")
        value = Value(name, tuple(shape), dtype, 0.0)
        self.values.append(value)
        return value

    def operand_like(self, shape, *, allow_input=True) -> tuple[str, tuple, float, bool]:
        """Another float operand broadcastable to `shape`: (python expression, its shape, its err,
        whether it is a Python number)."""
        kind = self.draw(st.sampled_from(["scalar", "param", "input", "value"]))
        if kind == "input" and (self.nested or not allow_input or len(self.method.inputs) >= 4):
            kind = "param"
        if kind == "value":
            candidates = [v for v in self.values if v.dtype == "float" and broadcast(shape, v.shape) == tuple(shape)]
            if candidates:
                v = self.draw(st.sampled_from(candidates))
                return v.name, v.shape, v.err, False
            kind = "param"
        if kind == "scalar":
            c = self.draw(st.sampled_from([0.5, 2.0, -1.0, 1.5, 3.0, -0.25]))
            return repr(c), (), 0.0, True
        # A broadcastable shape: a suffix of `shape` with some sizes 1 (every dynamic size may be).
        keep = self.draw(st.integers(0, len(shape)))
        sub = []
        for size in shape[len(shape) - keep:]:
            one = self.draw(st.booleans()) if size.static else (kind == "param" or self.draw(st.booleans()))
            sub.append(Size(1) if one else size)
        if kind == "param" or any(not s.static and (len(s.names) > 1 or s.const != 1) for s in sub):
            if any(not s.static for s in sub):
                sub = [s if s.static else Size(1) for s in sub]
            return self.model.attr("p", f"nn.Parameter(torch.randn({shape_text(sub)}))"), tuple(sub), 0.0, False
        value = self.new_input(sub)
        return value.name, value.shape, 0.0, False

    def exact_values(self, dtype="float"):
        return [v for v in self.values if v.exact and v.dtype == dtype]


# ------------------------------------------------------------------ ops
# Each op takes (scope, v) -> Value | None (None: not applicable to v; another op is drawn).

def _static_last(v: Value) -> int | None:
    return v.shape[-1].const if v.rank and v.shape[-1].static else None


def op_linear(s: Scope, v: Value):
    k = _static_last(v)
    if v.dtype != "float" or k is None:
        return None
    n = s.draw(st.sampled_from([8, 16, 5, 32, 1, 24, 64]))
    bias = s.draw(st.booleans())
    layer = s.model.attr("linear", f"nn.Linear({k}, {n}, bias={bias})")
    return s.emit("h", f"{layer}({v.name})", v.shape[:-1] + (Size(n),), err=v.err * math.sqrt(k) + 2 * k)


def op_matmul_weight(s: Scope, v: Value):
    k = _static_last(v)
    if v.dtype != "float" or k is None:
        return None
    n = s.draw(st.sampled_from([8, 3, 16, 17]))
    w = s.model.attr("w", f"nn.Parameter(torch.randn({k}, {n}) / {math.sqrt(k):.4f})")
    return s.emit("h", f"{v.name} @ {w}", v.shape[:-1] + (Size(n),), err=v.err * math.sqrt(k) + 2 * k)


def op_mlp(s: Scope, v: Value):
    """Linear -> activation -> Linear, with a residual when the widths agree."""
    k = _static_last(v)
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
    optional causal mask made at run-time size, softmax, heads merged back."""
    c = _static_last(v)
    if v.dtype != "float" or c is None or v.rank < 2 or s.nested:
        return None
    heads = s.draw(st.sampled_from([h for h in (1, 2, 4) if c % h == 0 and c // h >= 2] or [1]))
    d = c // heads
    t = v.shape[-2]
    lead = v.shape[:-2]
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
    scores_shape = lead + (Size(heads), t, t)
    scores = s.emit("scores", f"({parts[0].name} @ {parts[1].name}.transpose(-2, -1)) * {d ** -0.5!r}",
                    scores_shape, err=2 * q.err * d + 2 * d)
    if causal:
        mask = s.emit("mask", f"torch.ones({s.size_expr(t)}, {s.size_expr(t)}, dtype=torch.bool).triu(1)", (t, t),
                      dtype="bool")
        scores = s.emit("scores", f"{scores.name}.masked_fill({mask.name}, float('-inf'))", scores_shape,
                        err=scores.err)
    probs = s.emit("probs", f"torch.softmax({scores.name}, dim=-1)", scores_shape, err=2 * scores.err + 8)
    t_max = t.bounds(s.model.dims)[1]
    out = s.emit("att", f"({probs.name} @ {parts[2].name}).permute({perm}).reshape({s.shape_args(lead + (t, Size(c)))})",
                 lead + (t, Size(c)), err=probs.err * 4 + q.err + 2 * t_max)
    return s.emit("h", f"{proj}({out.name})", out.shape, err=out.err * math.sqrt(c) + 2 * c)


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
                      err=_inexact(v.err, add=2 * max(x.bounds(s.model.dims)[1] for x in (h, w)) ** 2))
    if kind == "max_same":
        return s.emit("h", f"F.max_pool2d({v.name}, 3, stride=1, padding=1)", v.shape, err=v.err)
    if not (h.static and w.static and h.const >= 2 and w.const >= 2):
        return None
    out = (n, c, Size(h.const // 2), Size(w.const // 2))
    if kind == "max":
        return s.emit("h", f"F.max_pool2d({v.name}, 2)", out, err=v.err)
    return s.emit("h", f"F.avg_pool2d({v.name}, 2)", out, err=_inexact(v.err, add=4))


def op_norm(s: Scope, v: Value):
    if v.dtype != "float" or not v.rank:
        return None
    kind = s.draw(st.sampled_from(["layer", "rms", "group", "batch"]))
    k = _static_last(v)
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


def op_unary(s: Scope, v: Value):
    if v.dtype != "float":
        return None
    name = s.draw(st.sampled_from(list(UNARY)))
    expr, exact, gain = UNARY[name]
    if name == "round" and not v.exact:
        return None  # a rounding step amplifies any difference to a whole unit
    err = v.err * gain if exact else _inexact(v.err * gain, add=4)
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
        return s.emit("h", f"{v.name} / {abs(float(other)) + 1.0!r}", v.shape, err=_inexact(v.err * 4, add=2))
    exact_op = name in ("maximum", "minimum")
    err = max(v.err, other_err) if exact_op else _inexact(v.err * 4, other_err * 4, add=2)
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


def op_reshape(s: Scope, v: Value):
    """Merge adjacent dims or split one; sizes written out from the Dims (at most one -1)."""
    if v.rank == 0 or s.nested:
        return None
    shape = list(v.shape)
    merge = s.draw(st.booleans()) and v.rank >= 2
    if merge:
        i = s.draw(st.integers(0, v.rank - 2))
        shape[i:i + 2] = [shape[i] * shape[i + 1]]
    else:
        i = s.draw(st.integers(0, v.rank - 1))
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
    fn = s.draw(st.sampled_from(["reshape", "view"])) if v.dtype == "float" else "reshape"
    if fn == "view":
        v = s.emit("c", f"{v.name}.contiguous()", v.shape, v.dtype, v.err)
    return s.emit("h", f"{v.name}.{fn}({', '.join(sizes)})", shape, v.dtype, v.err)


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
        o = s.emit("h", f"{v.name} * 0.5", v.shape, err=_inexact(v.err) if not v.exact else 0.0)
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
                      err=_inexact(v.err, add=2 * len(idx)))
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
        s.lines.append(f"    return {out.name}" if out is not arg else f"    return {out.name}.clone()")
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
    k = _static_last(v)
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
        return s.emit("h", f"{v.name} + {state.name}", v.shape, err=_inexact(v.err, state.err))
    return state


def _shape_preserving(s: Scope, v: Value, *, bounded=False) -> Value:
    """One op that keeps v's shape (branch and loop bodies): a unary op, a square linear, a norm,
    a binary op with a parameter or scalar."""
    kinds = ["unary", "binary", "linear", "norm"]
    kind = s.draw(st.sampled_from(kinds))
    if kind == "linear" and _static_last(v) is not None:
        k = _static_last(v)
        layer = s.model.attr("linear", f"nn.Linear({k}, {k})")
        out = s.emit("h", f"{layer}({v.name})", v.shape, err=v.err * math.sqrt(k) + 2 * k)
    elif kind == "norm" and _static_last(v) is not None and _static_last(v) >= 2:
        out = op_norm(s, v) if v.rank else None
        out = out if out is not None and out.shape == v.shape else op_unary(s, v)
    elif kind == "binary":
        out = op_binary(s, v)
        out = out if out is not None and out.shape == v.shape else op_unary(s, v)
    else:
        out = op_unary(s, v)
    out = out if out is not None else s.emit("h", f"{v.name} * 0.5", v.shape, err=_inexact(v.err))
    if bounded:  # a loop body applied again and again must not grow its values
        out = s.emit("h", f"torch.tanh({out.name})", out.shape, err=_inexact(out.err))
    return out


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

    def size(static_choices, dynamic_ok=True):
        if dynamic_ok and model.dims and draw(st.booleans()):
            name = draw(st.sampled_from(list(model.dims)))
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
                out, op = s.emit("h", f"{v.name} * 0.75 + 0.5", v.shape, err=_inexact(v.err)), "unary"
            else:
                out, op = s.emit("h", f"{v.name}.clone()", v.shape, v.dtype, v.err), "clone"
        model.ops.append(op)
        v = out
        # A residual connection when an earlier value has the same shape.
        earlier = [e for e in s.values[:-1] if e.shape == v.shape and e.dtype == v.dtype == "float"]
        if earlier and draw(st.integers(0, 4)) == 4:
            e = draw(st.sampled_from(earlier))
            v = s.emit("h", f"{v.name} + {e.name}", v.shape, err=_inexact(v.err, e.err))
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
