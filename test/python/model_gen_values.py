"""The model generator's values and the model being built: `Size` (a product of Dims), `Value` (a
value's shape, dtype and error bound), `Model`, `Method` and `Scope` (where ops emit source).
See model_gen.py."""

from __future__ import annotations

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


def inexact(*errs: float, add: float = 1.0) -> float:
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


def static_last(v: Value) -> int | None:
    return v.shape[-1].const if v.rank and v.shape[-1].static else None
