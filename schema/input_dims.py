"""The `torch.export.Dim` constraints of a method's inputs, carried in the program.

Why: a `.pte` tensor records only its upper-bound sizes, so a runtime can check
`size <= max` and nothing else. An input below its `Dim`'s minimum, or two inputs
that disagree on a dimension they share (`Dim("n")` used twice), were accepted and
computed garbage: the program's size arithmetic reads one of them and trusts the
other. The compiler writes each method's constraints as named data
`etc::input_dims::<method>` (stock ExecuTorch never asks for that key), and the
runtime checks every execute's inputs against them.

Value (UTF-8 JSON): one entry per plan input, null for a non-tensor input, else one
entry per dimension: an int (a static size) or `[expr, min, max, name]` with `expr` the
size as torch.export knows it (`"s0"`, `"2*s0"`, `"s0 + 1"`; max -1: unbounded) and
`name` what the user called it (the `Dim`'s name, else `expr`), for messages.
Dimensions with the same symbol must agree; an expression of symbols is checked
once its symbols are known.
"""

from __future__ import annotations

import ast
import json
import operator

from etc.errors import InputError, ProgramError

KEY_PREFIX = "etc::input_dims::"


def key(method: str) -> str:
    return KEY_PREFIX + method


def encode(inputs: list) -> bytes:
    return json.dumps(inputs, separators=(",", ":")).encode()


def records_of(exported_programs: dict) -> dict[str, bytes]:
    """{named-data key: value} for every method of {name: ExportedProgram} with a dynamic input."""
    import torch
    from torch.export.graph_signature import InputKind

    records = {}
    for name, ep in exported_programs.items():
        user = {spec.arg.name for spec in ep.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT
                and hasattr(spec.arg, "name")}
        inputs, dynamic = [], False
        for node in ep.graph.nodes:
            if node.op != "placeholder" or node.name not in user:
                continue
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                inputs.append(None)
                continue
            dims = []
            for size in value.shape:
                if isinstance(size, int) or size.node.expr.is_number:
                    dims.append(int(size))
                    continue
                dynamic = True
                expr = size.node.expr
                ranges = ep.range_constraints.get(expr) if len(expr.free_symbols) == 1 and expr.is_Symbol else None
                lower = int(ranges.lower) if ranges is not None and ranges.lower.is_finite else 0
                upper = int(ranges.upper) if ranges is not None and ranges.upper.is_finite else -1
                dims.append([str(expr), lower, upper, _user_name(size) or str(expr)])
            inputs.append(dims)
        if dynamic:
            records[key(name)] = encode(inputs)
    return records


def _user_name(size) -> str | None:
    """The `torch.export.Dim` name the user gave a symbolic size, if torch kept it."""
    try:
        env = size.node.shape_env
        for source in env.var_to_sources.get(size.node.expr, []):
            key = source.name if isinstance(source.name, str) else source.name()  # a property in newer torch
            name = env.source_name_to_debug_name.get(key)
            if name:
                return name
    except (AttributeError, TypeError):
        pass
    return None


# ------------------------------------------------------------------ runtime side
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def _evaluate(expr: str, symbols: dict[str, int]) -> int | None:
    """Integer arithmetic over symbols (None if a symbol is not bound yet)."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in symbols:
                raise LookupError
            return symbols[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"unsupported size expression {expr!r}")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except LookupError:
        return None
    except (SyntaxError, ValueError, ZeroDivisionError) as error:
        raise ProgramError(f"input dims record: {error}") from None


class InputDims:
    """The parsed record of one method; `check(shapes)` raises InputError for a violated constraint."""

    def __init__(self, method: str, data: bytes, num_inputs: int):
        self.method = method
        where = f"named data '{key(method)}'"
        try:
            inputs = json.loads(bytes(data).decode())
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ProgramError(f"{where}: not JSON ({error})") from None
        if not isinstance(inputs, list) or len(inputs) != num_inputs:
            raise ProgramError(f"{where}: expected a list of {num_inputs} inputs")
        for i, dims in enumerate(inputs):
            if dims is None:
                continue
            if not isinstance(dims, list):
                raise ProgramError(f"{where}: input {i} is not a list of dimensions")
            for d in dims:
                ok = type(d) is int or (isinstance(d, list) and len(d) == 4 and isinstance(d[0], str)
                                        and type(d[1]) is int and type(d[2]) is int and isinstance(d[3], str))
                if not ok:
                    raise ProgramError(f"{where}: input {i} has a malformed dimension {d!r}")
        self.inputs = inputs

    def check(self, shapes: list) -> None:
        """`shapes[i]`: the shape given for input i (None for non-tensors)."""
        symbols: dict[str, tuple[int, int, int]] = {}  # symbol -> (size, input, dim) that bound it
        derived = []
        for i, (dims, shape) in enumerate(zip(self.inputs, shapes)):
            if dims is None or shape is None or len(dims) != len(shape):
                continue  # rank is checked against the tensor itself
            for d, (want, size) in enumerate(zip(dims, shape)):
                if type(want) is int:
                    continue
                expr, lower, upper, name = want
                if size < lower or (upper >= 0 and size > upper):
                    shown = f"{lower}..{upper}" if upper >= 0 else f">= {lower}"
                    raise self.error(i, f"dimension {d} is {size}, outside its range {shown} (Dim '{name}')")
                if expr.isidentifier():
                    if expr in symbols and symbols[expr][0] != size:
                        bound, j, e = symbols[expr]
                        raise self.error(i, f"dimension {d} is {size}, but input {j} dimension {e} is {bound}: "
                                            f"both are Dim '{name}'")
                    symbols.setdefault(expr, (size, i, d))
                else:
                    derived.append((i, d, expr, size))
        values = {name: size for name, (size, _, _) in symbols.items()}
        for i, d, expr, size in derived:
            expected = _evaluate(expr, values)
            if expected is not None and expected != size:
                raise self.error(i, f"dimension {d} is {size}, but it is {expr} = {expected} for the other inputs' "
                                    "sizes")

    def error(self, position: int, text: str) -> InputError:
        return InputError(f"method '{self.method}' input {position}: {text}", method=self.method)
