"""The one toolkit the cpu target builds kernel IR with.

Kernels (the GEMM, window, row, int8 and int4 kernels, the quantized lowerings) are written as
MLIR text, one line at a time, parsed once and spliced where the op they replace was:

    t = KernelText()
    zero = t.const(0, "i32")                    # a fresh SSA name: %c1 = arith.constant 0 : i32
    t.emit(f"%e = tensor.empty() : {tensor_type([4, 16], 'i32')}")
    with t.nested():                            # a nested block: two more spaces
        ...
    text = t.function("kernel", ["%x: tensor<4x16xf32>"], ["tensor<4x16xi32>"], ["%r"])
    (result,) = splice(text, [x], before=op)    # its body in front of `op`, `x` for %x

Text is the form because each kernel is a few hundred ops of regular structure (a loop nest
unrolled over a register tile) that read best as the MLIR they become; the Python builders of
the MLIR bindings are used where an op is rewritten in place (`passes/`). What is shared:

- `tensor_type`, `vector_type`: type strings (a negative size is a dynamic `?`);
- `f32_literal`, `dense_literal`: constants with their exact bits;
- `KernelText`: fresh SSA names, `index(k)` constants declared once ahead of the body, nested
  indentation, sections sharing one name space (`section()`), the function around a body;
- `splice`: the one way a kernel's body replaces IR (located at the op it replaces);
- `parse_function`: a kernel kept as a function of the module (the GEMM kernels);
- `apply_transform_script`: the transform-dialect interpreter on a script built as text;
- `run_upstream`: an upstream pass pipeline from inside a pass, its failure the pass's error.
"""

from __future__ import annotations

import math
import struct
from contextlib import contextmanager
from itertools import count

import numpy as np
from torch_mlir import ir

from etc.ir.ops import as_operation

# A unit attribute on a math.exp a kernel emits: its argument is <= 0 (or NaN), as softmax's
# x - max is, and results under the smallest normal f32 may be 0 (a softmax term that small cannot
# change a sum holding the max's 1), so etc-cpu-expand-math expands it without the overflow test
# and without subnormal arithmetic (half the operations).
NONPOSITIVE = "etc.nonpositive"

# A unit attribute on an arith.divf a kernel emits in an epilogue whose dependency chain bounds
# its time (a window kernel's rows, one sigmoid after each row's taps): etc-cpu-expand-math
# keeps a sigmoid's division a division there (one long-latency op on the chain) rather than
# a reciprocal estimate and its refinement (five, each waiting on the last).
LATENCY_BOUND = "etc.latency_bound"

ANY_OP = "!transform.any_op"  # the handle type of the transform scripts


# ------------------------------------------------------------------ types and literals
def tensor_type(shape, element: str = "f32") -> str:
    """`tensor<4x?x8xf32>`: a ranked tensor type (a negative size is dynamic)."""
    return "tensor<" + "".join(f"{d if d >= 0 else '?'}x" for d in shape) + element + ">"


def vector_type(lanes: int, element: str = "f32") -> str:
    """`vector<16xf32>`."""
    return f"vector<{lanes}x{element}>"


def next_pow2(n: int) -> int:
    """The vector width of a row's last, partial block of `n` lanes (its store masked)."""
    return 1 << (n - 1).bit_length()


def element_of(type_) -> str:
    """The element type of a shaped type as text (`f32` for tensor<f32>), a scalar type's own text."""
    if isinstance(type_, ir.ShapedType):
        return str(ir.ShapedType(type_).element_type)
    return str(type_)


def f32_literal(value: float) -> str:
    """A float32 value as the hexadecimal bit pattern MLIR reads exactly (infinities included)."""
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", np.float32(value)))[0]


def scalar_literal(value) -> str:
    """A bool (`true`), or a float as MLIR reads it exactly into an f32 (`repr`; an infinity as its
    f32 bit pattern)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if math.isinf(value):
        return "0x7F800000" if value > 0 else "0xFF800000"
    return repr(float(value))


def dense_literal(array: np.ndarray, element: str) -> str:
    """`dense<"0x...">  : tensor<...>`: an array's bytes as a constant attribute."""
    array = np.ascontiguousarray(array)
    return f'dense<"0x{array.tobytes().hex().upper()}"> : {tensor_type(list(array.shape), element)}'


def identity_map(rank: int) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({dims})>"


def iterators(n: int, kind: str = "parallel") -> str:
    """`"parallel", "parallel"`: the iterator_types list of a generic with `n` such loops."""
    return ", ".join([f'"{kind}"'] * n)


# ------------------------------------------------------------------ the text writer
class _Loop:
    """The handle `KernelText.loop` gives its body: the result's name, and what the body yields."""

    def __init__(self, result: str):
        self.result, self.yielded = result, None

    def yields(self, value: str) -> None:
        self.yielded = value


class KernelText:
    """MLIR text of a function body, built line by line.

    `fresh(stem)` gives a new SSA name; `index(k)` the name of an index constant, declared once
    ahead of the body (`declarations()`); `nested()` indents a block; `section()` is another
    list of lines with the same names (a kernel assembled from parts written in another order)."""

    def __init__(self, indent: int = 2, *, _names=None, _indices=None):
        self.lines: list[str] = []
        self.indent = indent
        self._names = _names if _names is not None else count(1)
        self.indices: dict[int, str] = _indices if _indices is not None else {}

    def section(self, indent: int | None = None) -> "KernelText":
        """More lines sharing this writer's SSA names and index constants."""
        return KernelText(self.indent if indent is None else indent, _names=self._names, _indices=self.indices)

    def fresh(self, stem: str = "v") -> str:
        return f"%{stem}{next(self._names)}"

    def emit(self, line: str) -> None:
        self.lines.append(" " * self.indent + line)

    @contextmanager
    def nested(self, by: int = 2):
        """Lines emitted inside are indented by `by` more (a loop body, a region)."""
        self.indent += by
        try:
            yield self
        finally:
            self.indent -= by

    @contextmanager
    def loop(self, iv: str, lower, upper, step, carried: str, init: str, type_: str, stem: str = "l",
             attributes: str = ""):
        """An `scf.for iv = lower to upper step step` carrying one value (`carried`, starting at
        `init`, of `type_`); bounds are SSA names or ints (index constants). The body is what is
        emitted inside the `with`; it ends with `loop.yields(value)`. `loop.result` names the
        loop's result; `attributes` (text) go on the op."""
        bound = (lambda b: self.index(b) if isinstance(b, int) else b)
        handle = _Loop(self.fresh(stem))
        self.emit(f"{handle.result} = scf.for {iv} = {bound(lower)} to {bound(upper)} step {bound(step)} "
                  f"iter_args({carried} = {init}) -> ({type_}) {{")
        with self.nested():
            yield handle
            if handle.yielded is None:
                raise ValueError(f"the loop {handle.result} yields nothing")
            self.emit(f"scf.yield {handle.yielded} : {type_}")
        self.emit("}" + (f" {{{attributes}}}" if attributes else ""))

    def const(self, value, type_: str) -> str:
        """A fresh `arith.constant value : type_` (value as MLIR writes it)."""
        name = self.fresh("c")
        self.emit(f"{name} = arith.constant {value} : {type_}")
        return name

    def index(self, value: int) -> str:
        """The index constant `value`, declared ahead of the body."""
        return self.indices.setdefault(value, f"%idx{value}".replace("-", "m"))

    def add(self, base: str, k: int) -> str:
        """base + k (index), base itself for 0."""
        return base if k == 0 else self.addv(base, self.index(k))

    def addv(self, a: str, b: str) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.addi {a}, {b} : index")
        return name

    def mul(self, base: str, k: int) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.muli {base}, {self.index(k)} : index")
        return name

    def pad(self, value: str, shape: list, low: list, high: list, fill: str, element: str = "f32",
            stem: str = "pad") -> tuple[str, list]:
        """`value` padded (`tensor.pad`) by `low` and `high` with `fill`; (name, shape). `value`
        itself when nothing is padded."""
        if not any(low) and not any(high):
            return value, shape
        out_shape = [s + lo + hi for s, lo, hi in zip(shape, low, high)]
        name = self.fresh(stem)
        self.emit(f"{name} = tensor.pad {value} low[{', '.join(map(str, low))}] high[{', '.join(map(str, high))}] {{")
        self.emit(f"^bb0({', '.join(f'%i{k}: index' for k in range(len(shape)))}):")
        self.emit(f"  tensor.yield {fill} : {element}")
        self.emit(f"}} : {tensor_type(shape, element)} to {tensor_type(out_shape, element)}")
        return name, out_shape

    def reshape(self, kind: str, value: str, groups: list, src: list, dst: list, element: str = "f32",
                output_shape: "list | None" = None, stem: str = "r") -> str:
        """`tensor.expand_shape` (kind "expand"; `output_shape` the sizes as text, default `dst`) or
        `tensor.collapse_shape` of `value` from `src` to `dst` by the reassociation `groups`."""
        name = self.fresh(stem)
        g = "[" + ", ".join("[" + ", ".join(map(str, group)) + "]" for group in groups) + "]"
        types = f"{tensor_type(src, element)} into {tensor_type(dst, element)}"
        if kind == "expand":
            sizes = ", ".join(output_shape or map(str, dst))
            self.emit(f"{name} = tensor.expand_shape {value} {g} output_shape [{sizes}] : {types}")
        else:
            self.emit(f"{name} = tensor.collapse_shape {value} {g} : {types}")
        return name

    def transpose(self, value: str, src: list, perm: list, element: str = "f32") -> tuple[str, list]:
        """`linalg.transpose` of `value` into a new tensor; (name, shape)."""
        dst = [src[p] for p in perm]
        empty, name = self.fresh("e"), self.fresh("tr")
        self.emit(f"{empty} = tensor.empty() : {tensor_type(dst, element)}")
        self.emit(f"{name} = linalg.transpose ins({value} : {tensor_type(src, element)}) outs({empty} : "
                  f"{tensor_type(dst, element)}) permutation = [{', '.join(map(str, perm))}]")
        return name, dst

    def read(self, source: str, indices: str, padding: str, source_type: str, vector: str, in_bounds: bool,
             stem: str = "ld") -> str:
        """A fresh `vector.transfer_read` of `source` at `indices` (text): `padding` fills the lanes
        past its end unless the read is known `in_bounds`."""
        name = self.fresh(stem)
        self.emit(f"{name} = vector.transfer_read {source}[{indices}], {padding} "
                  f"{{in_bounds = [{str(in_bounds).lower()}]}} : {source_type}, {vector}")
        return name

    def write(self, value: str, dest: str, indices: str, vector: str, dest_type: str, in_bounds: bool,
              stem: str = "o") -> str:
        """A fresh `vector.transfer_write` of `value` into `dest` at `indices`: the new tensor;
        lanes past its end are dropped unless the write is known `in_bounds`."""
        name = self.fresh(stem)
        self.emit(f"{name} = vector.transfer_write {value}, {dest}[{indices}] "
                  f"{{in_bounds = [{str(in_bounds).lower()}]}} : {vector}, {dest_type}")
        return name

    def leading(self, vector: str, width: int, n: int, element: str = "i8") -> str:
        """The first `n` lanes of `vector` (`width` lanes), `vector` itself when that is all of them."""
        if n == width:
            return vector
        name = self.fresh()
        self.emit(f"{name} = vector.extract_strided_slice {vector} {{offsets = [0], sizes = [{n}], strides = [1]}} "
                  f": {vector_type(width, element)} to {vector_type(n, element)}")
        return name

    def broadcast(self, scalar: str, width: int, element: str = "f32") -> str:
        """A fresh vector of `width` lanes, each `scalar`."""
        name = self.fresh("b")
        self.emit(f"{name} = vector.broadcast {scalar} : {element} to {vector_type(width, element)}")
        return name

    def combine_lanes(self, vector: str, width: int, combine, element: str = "f32") -> str:
        """The `width` lanes of `vector` combined into one scalar by halving: the low and high
        halves combined lane by lane (`combine(a, b, vector type) -> name`), down to one lane.
        log2(width) dependent steps, where `vector.reduction` of a float max or sum (no reassoc)
        lowers to a chain of `width` scalar ops: 16 maxss with their NaN fix-ups, ~130 cycles."""
        while width > 1:
            half = width // 2
            lo, hi = self.fresh("lo"), self.fresh("hi")
            for name, offset in ((lo, 0), (hi, half)):
                self.emit(f"{name} = vector.extract_strided_slice {vector} {{offsets = [{offset}], sizes = [{half}], "
                          f"strides = [1]}} : {vector_type(width, element)} to {vector_type(half, element)}")
            vector, width = combine(lo, hi, vector_type(half, element)), half
        scalar = self.fresh("red")
        self.emit(f"{scalar} = vector.extract {vector}[0] : {element} from {vector_type(1, element)}")
        return scalar

    def vector_body(self, block, names: dict, width: int, latency_bound: bool = False) -> str:
        """The ops of a `linalg.generic` body (its yield excepted) as ops on `width`-lane vectors:
        a constant broadcast, any other op with its attributes on vector operands. `names` maps the
        block's arguments (and values from above) to their vectors and gets every result; returns
        the yielded value's vector (how the window and grouped kernels fuse an epilogue).
        `latency_bound`: its divisions are marked `LATENCY_BOUND`."""
        body = list(block.operations)
        for inner in body[:-1]:
            op = inner.operation
            result = self.fresh("ep")
            rtype = vector_type(width, str(op.results[0].type))
            if op.name == "arith.constant":
                scalar = self.fresh("k")
                self.emit(f"{scalar} = arith.constant {op.attributes['value']}")
                self.emit(f"{result} = vector.broadcast {scalar} : {op.results[0].type} to {rtype}")
            else:
                operands = [names[v] for v in op.operands]
                types = [vector_type(width, str(v.type)) for v in op.operands]
                attrs = ", ".join([f"{op.attributes[i].name} = {op.attributes[i].attr}"
                                   for i in range(len(op.attributes))]
                                  + ([LATENCY_BOUND] if latency_bound and op.name == "arith.divf" else []))
                attrs = f" {{{attrs}}}" if attrs else ""
                self.emit(f'{result} = "{op.name}"({", ".join(operands)}){attrs} : '
                          f'({", ".join(types)}) -> {rtype}')
            names[op.results[0]] = result
        return names[body[-1].operation.operands[0]]

    def declarations(self) -> list[str]:
        """The index constants, in increasing value."""
        return [f"  {name} = arith.constant {value} : index" for value, name in sorted(self.indices.items())]

    def text(self) -> str:
        """The body: the index constants, then the lines."""
        return "\n".join(self.declarations() + self.lines)

    def function(self, name: str, args: list[str], results: list[str], returned: list[str],
                 sections: "list[KernelText] | None" = None) -> str:
        """`func.func private @name(args) -> (results)` around the declarations and the lines of
        `sections` (default: this writer), returning `returned`."""
        lines = self.declarations()
        for part in sections or [self]:
            lines += part.lines
        signature = results[0] if len(results) == 1 else f"({', '.join(results)})"
        return "\n".join([f"func.func private @{name}({', '.join(args)}) -> {signature} {{", *lines,
                          f"  return {', '.join(returned)} : {', '.join(results)}", "}"]) + "\n"


# ------------------------------------------------------------------ into the IR
def parse_function(text: str, context) -> ir.Operation:
    """The one function of `text`, parsed in `context` and detached (to be appended to a module)."""
    holder = ir.Module.parse(text, context)
    fn = holder.body.operations[0].operation
    fn.detach_from_parent()
    return fn


def relocate(op, location) -> None:
    """`op` and every op nested in it at `location`."""
    def visit(inner):
        inner.location = location
        return ir.WalkResult.ADVANCE

    op.walk(visit)


def splice(text: str, values: list, before, location=None) -> list:
    """Parse the function `text` and put its body in front of the op `before`, `values` standing
    for its arguments; every spliced op takes `location` (default: `before`'s, the op the kernel
    replaces, so diagnostics and profiles name the user's line). Returns the values it returns."""
    holder = ir.Module.parse(text, before.context)
    block = holder.body.operations[0].regions[0].blocks[0]
    for arg, value in zip(block.arguments, values):
        arg.replace_all_uses_with(value)
    ops = [o.operation for o in block.operations]
    location = before.location if location is None else location
    for inner in ops[:-1]:
        inner.move_before(before)
        relocate(inner, location)
    return list(ops[-1].operands)


def replace_fused(text: str, arguments: list, op, fused: list, leftovers: list, attributes: dict):
    """Splice the kernel function `text`, called on `arguments`, in place of `op` and the ops fused
    after it (`fused`, in order: the last one's result is what the kernel returns); erase them, and
    each of `leftovers` (None allowed: an init's fill, a folded pad) that lost its last user.
    `attributes` (name -> text) go on the kernel's outer op. Returns the kernel's result."""
    last = fused[-1] if fused else op
    (result,) = splice(text, arguments, as_operation(last), op.location)
    for name, value in attributes.items():
        result.owner.attributes[name] = ir.StringAttr.get(value)
    last.results[0].replace_all_uses_with(result)
    for user in reversed(fused):
        as_operation(user).erase()
    as_operation(op).erase()
    for producer in leftovers:
        if producer is not None and all(len(list(r.uses)) == 0 for r in producer.results):
            as_operation(producer).erase()
    return result


def apply_transform_script(module_op, script: str) -> None:
    """Run the `@__transform_main` named sequence of `script` (a transform-dialect module as text)
    on `module_op` with MLIR's transform interpreter."""
    from torch_mlir.dialects.transform import interpreter

    library = ir.Module.parse(script, module_op.context)
    (entry,) = [op for op in library.body.operations if "sym_name" in op.attributes
                and ir.StringAttr(op.attributes["sym_name"]).value == "__transform_main"]
    interpreter.apply_named_sequence(module_op, entry, library)


def run_upstream(op, pipeline: str, what: str, error) -> None:
    """Run an upstream pass pipeline on `op`; a failure is `error(message)` (the pass's located error)."""
    from torch_mlir.passmanager import PassManager

    try:
        PassManager.parse(pipeline, context=op.context).run(op)
    except Exception as e:  # noqa: BLE001 - MLIR reports through a generic exception
        raise error(f"{what} failed: {e}") from None
