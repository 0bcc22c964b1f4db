"""How to write an etc pass.

A pass is a `Pass` subclass registered under its pipeline name:

    from dataclasses import dataclass
    from etc.passes.pass_api import Pass, RewritePatternSet, option, register_pass

    @register_pass
    class MyPass(Pass):
        name = "etc-my-pass"                       # what pipelines and etc-opt call it
        summary = "Forward the operand of aten.alias"   # one line, shown by `etc-opt --list-passes`

        @dataclass
        class Options:                             # optional; every field needs a default
            verbose: bool = option(False, help="say what was done")

        def patterns(self):                        # rewrite patterns for MLIR's greedy driver ...
            patterns = RewritePatternSet()
            patterns.add("aten.alias", self.forward_operand)
            return patterns

        def forward_operand(self, op, rewriter):   # a pattern: returns a truthy value if it does not apply
            rewriter.replace_op(op, [op.operands[0]])
            self.count("forwarded")
            if self.options.verbose:
                self.remark("forwarded an alias", at=op)

    # ... or, instead of patterns(), walk the IR yourself:
    #     def run(self, op): ... self.options.verbose ...

`run(op)` receives the op the pass is anchored on in the pipeline (the module,
or each `func.func` inside `func.func(...)`). The default `run` applies
`patterns()` with MLIR's greedy driver (`greedy_config()` tunes it); `patterns()` is
called inside the IR's context, so `RewritePatternSet()` needs none. A pass
signals failure by raising `self.error(message, at=op)` (a located PassError);
`self.warning(message, at=op)` reports a warning without failing.

Options are a dataclass whose fields are int, float, bool, str, an Enum, a
`typing.Literal`, or a list of those. Pipelines write them in MLIR syntax:
`etc-my-pass{alignment=64 algorithm=naive verbose dims=0,2}` (dashes and
underscores in names are interchangeable, a bare bool option means true).
An unknown or malformed option is a PassError naming the valid ones.

A pass defined outside etc (in the user's code, or a module `etc-opt
--load-pass-plugin=my_passes.py` loads) that raises an exception other than an
EtcError fails with `UserPassError` naming the pass and the user's file:line.

A pass that is one function can be registered with `@function_pass(name,
summary, Options)` instead. Every module of `etc.passes` is imported on the
first registry lookup, so a new pass needs no list to be added to.

The registry (`register_pass`, `get_pass`, `all_passes`) lives in
`etc.passes.registry` and is re-exported here.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing
from contextlib import contextmanager
from typing import Any, Callable, ClassVar

from etc.errors import PassError
from etc.ir.locations import format_location
from etc.passes.option_text import scan_value

__all__ = [
    "Pass", "RewritePatternSet", "option", "NoOptions", "function_pass", "register_pass", "get_pass", "all_passes",
    "parse_options", "format_options", "options_help", "split_option_string",
    "Diagnostic", "collect_diagnostics", "emit_diagnostic", "location_text",
]


# ----------------------------------------------------------------- options
def option(default: Any = dataclasses.MISSING, *, help: str, choices: tuple | None = None) -> Any:
    """A pass option: a dataclass field with a default and a help text.

    A list default (`[1, 2]`) is copied for each instance; a callable default
    (`list`, `lambda: [1, 2]`) is a default factory. `choices` restricts a str (or list of str) option.
    """
    metadata = {"help": help, "choices": tuple(choices) if choices else None}
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=metadata)
    if callable(default) and not isinstance(default, enum.Enum):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if default is dataclasses.MISSING:
        raise TypeError("a pass option needs a default")
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class NoOptions:
    """The options of a pass that has none."""


def _option_name(field_name: str) -> str:
    return field_name.replace("_", "-")


def _fields(options_cls) -> list[tuple[dataclasses.Field, Any]]:
    try:
        hints = typing.get_type_hints(options_cls)
    except NameError as exc:
        raise TypeError(f"options of a pass: cannot resolve the annotations of {options_cls.__qualname__} "
                        f"({exc}); define the types they name at module level") from None
    return [(f, hints.get(f.name, str)) for f in dataclasses.fields(options_cls)]


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        (inner,) = typing.get_args(tp) or (str,)
        return f"list of {_type_name(inner)}"
    if origin is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "|".join(m.name for m in tp)
    return getattr(tp, "__name__", str(tp))


def _convert(pass_name: str, key: str, tp, text: str, choices) -> Any:
    """One option value from its text."""
    def bad(expected: str) -> PassError:
        return PassError(f"option '{key}' of {pass_name} expects {expected}, got '{text}'")

    origin = typing.get_origin(tp)
    if origin is list:
        (inner,) = typing.get_args(tp) or (str,)
        body = text.strip()
        if body.startswith("{") and body.endswith("}"):
            body = body[1:-1]
        items = [item.strip() for item in body.split(",")] if body.strip() else []
        return [_convert(pass_name, key, inner, _unquote(item), choices) for item in items]
    if tp is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "on", "yes"):
            return True
        if lowered in ("0", "false", "off", "no"):
            return False
        raise bad("true or false")
    if tp is int:
        try:
            return int(text, 0)
        except ValueError:
            raise bad("an integer") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise bad("a number") from None
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        for value in allowed:
            if str(value) == text:
                return value
        raise bad("one of " + ", ".join(str(a) for a in allowed))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if text in (member.name, member.name.lower(), str(member.value)):
                return member
        raise bad("one of " + ", ".join(m.name for m in tp))
    if choices and text not in choices:
        raise bad("one of " + ", ".join(choices))
    return text


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def split_option_string(text: str, pass_name: str = "pass") -> list[tuple[str, str | None]]:
    """`a=1 b="x y" c={1,2} flag` -> [("a", "1"), ("b", "x y"), ("c", "{1,2}"), ("flag", None)].

    Items are separated by spaces; a value may be quoted or braced (nested braces
    balance). The surrounding `{}` of a pipeline's option block may be included.
    """
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    items: list[tuple[str, str | None]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n,":
            i += 1
        if i >= n:
            break
        start = i
        while i < n and text[i] not in " \t\n=":
            i += 1
        key = text[start:i]
        if not key:
            raise PassError(f"malformed options for {pass_name}: '{text}' (expected key=value)")
        if i >= n or text[i] != "=":
            items.append((key, None))
            continue
        start = i + 1
        i, quote, depth = scan_value(text, start, " \t\n")
        if quote or depth:
            raise PassError(f"malformed options for {pass_name}: unbalanced {'quote' if quote else 'braces'} "
                            f"in '{text}'")
        items.append((key, _unquote(text[start:i])))
    return items


def parse_options(options_cls, text: str | dict | None, pass_name: str = "pass"):
    """An `options_cls` instance from MLIR option text (`{alignment=16 algorithm=greedy}`)
    or a dict of strings/values; defaults for everything not given."""
    fields = {_option_name(f.name): (f, tp) for f, tp in _fields(options_cls)}
    if text is None:
        items = []
    elif isinstance(text, dict):
        items = list(text.items())
    else:
        items = split_option_string(text, pass_name)
    values = {}
    for key, value in items:
        name = key.replace("_", "-")
        if name not in fields:
            valid = ", ".join(fields) or "none"
            raise PassError(f"unknown option '{key}' of {pass_name}; valid options: {valid}")
        f, tp = fields[name]
        if value is None:
            if tp is not bool:
                raise PassError(f"option '{key}' of {pass_name} needs a value ({_type_name(tp)})")
            value = True
        elif isinstance(value, str):
            value = _convert(pass_name, key, tp, value, f.metadata.get("choices"))
        values[f.name] = value
    return options_cls(**values)


def _format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return ",".join(_format_value(v) for v in value)
    text = str(value)
    return f'"{text}"' if (" " in text or not text) else text


def format_options(options) -> str:
    """`alignment=16 algorithm=greedy`: every option (the text `parse_options` reads back)."""
    return " ".join(f"{_option_name(f.name)}={_format_value(getattr(options, f.name))}"
                    for f, _ in _fields(type(options)))


def options_help(options_cls) -> list[tuple[str, str, str]]:
    """(name, type, help with default) per option, for --list-passes and --help."""
    rows = []
    for f, tp in _fields(options_cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        choices = f.metadata.get("choices")
        kind = "|".join(choices) if choices else _type_name(tp)
        rows.append((_option_name(f.name), kind, f"{f.metadata.get('help', '')} (default: {_format_value(default)})"))
    return rows


# ------------------------------------------------------------- diagnostics
@dataclasses.dataclass
class Diagnostic:
    """A warning or remark a pass reports without failing. `location` is `file:line:col` or None."""

    severity: str  # "warning" | "remark" | "note" | "error"
    message: str
    location: str | None = None

    def __str__(self) -> str:
        return f"{self.location}: {self.severity}: {self.message}" if self.location else \
            f"{self.severity}: {self.message}"


_HANDLERS: list[Callable[[Diagnostic], None]] = []


@contextmanager
def collect_diagnostics(handler: Callable[[Diagnostic], None] | None = None):
    """Route pass warnings to `handler` (default: a list yielded by the context manager)."""
    collected: list[Diagnostic] = []
    _HANDLERS.append(handler or collected.append)
    try:
        yield collected
    finally:
        _HANDLERS.pop()


def emit_diagnostic(diagnostic: Diagnostic) -> None:
    """Hand `diagnostic` to the innermost `collect_diagnostics` handler (stderr if none)."""
    if _HANDLERS:
        _HANDLERS[-1](diagnostic)
    else:
        print(diagnostic, file=sys.stderr)


# `location_text` is `etc.ir.locations.format_location` (one formatter; this name is kept for passes
# written against it).
location_text = format_location


def _where(at) -> str | None:
    """`file:line:col` of an op, a value's defining op, or a location (None if unknown)."""
    if at is None or isinstance(at, str):
        return at
    from torch_mlir import ir

    if isinstance(at, ir.Location):
        return location_text(at)
    location = getattr(at, "location", None)
    return location_text(location) if location is not None else None


# -------------------------------------------------------------------- pass
class Pass:
    """Base class of etc's Python passes (see the module docstring)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions

    def __init__(self, options=None, **kwargs):
        if options is None or isinstance(options, (str, dict)):
            options = parse_options(self.Options, options, self.name)
        if kwargs:
            options = dataclasses.replace(options, **kwargs)
        self.options = options
        self.statistics: dict[str, int] = {}

    @classmethod
    def description(cls) -> str:
        """The class docstring (longer than `summary`)."""
        return (cls.__doc__ or "").strip()

    def __str__(self) -> str:
        text = format_options(self.options)
        return f"{self.name}{{{text}}}" if text else self.name

    def __call__(self, op, _pass=None) -> None:
        """So that an instance can go into an upstream pass manager: `pm.add(MyPass(), MyPass.name)`."""
        self.run(op)

    # -- the body: override run, or patterns
    def run(self, op) -> None:
        """Transform `op` in place. The default applies `patterns()` greedily."""
        from torch_mlir import ir, rewrite

        with op.context:  # so that patterns() may build RewritePatternSet() without naming one
            patterns = self.patterns()
            if patterns is None:
                raise PassError(f"pass {self.name} defines neither run() nor patterns()", location=_where(op),
                                notes=[f"{type(self).__name__} must override run(self, op), or patterns(self) "
                                       "returning a RewritePatternSet"])
            try:
                rewrite.apply_patterns_and_fold_greedily(op, patterns.freeze(), self.greedy_config())
            except (ir.MLIRError, RuntimeError) as exc:  # e.g. the driver did not converge
                raise PassError(f"{self.name}: the greedy rewrite driver failed: {exc}",
                                location=_where(op)) from None

    def patterns(self):
        """A `torch_mlir.rewrite.RewritePatternSet` (patterns `fn(op, rewriter)` return a truthy
        value when they do not match), or None if the pass overrides `run`."""
        return None

    def greedy_config(self):
        """A `rewrite.GreedyRewriteConfig` for the pattern driver (None: MLIR's defaults)."""
        return None

    # -- helpers for pass bodies
    def error(self, message: str, at=None, notes: list[str] | None = None) -> PassError:
        """A PassError located at `at` (op, value or location); `raise self.error(...)`."""
        return PassError(message, location=_where(at), notes=notes)

    def warning(self, message: str, at=None) -> None:
        emit_diagnostic(Diagnostic("warning", message, _where(at)))

    def remark(self, message: str, at=None) -> None:
        emit_diagnostic(Diagnostic("remark", message, _where(at)))

    def count(self, statistic: str, n: int = 1) -> None:
        self.statistics[statistic] = self.statistics.get(statistic, 0) + n


def function_pass(name: str, summary: str, options: type = NoOptions) -> Callable:
    """Register a plain function `fn(op, options)` as a pass (for passes that are one function):

        @function_pass("etc-fold-things", "Fold the things", FoldOptions)
        def fold_things(op, options): ...

    The function itself is returned unchanged; the pass class is `fn.pass_class`.
    """
    def wrap(fn: Callable) -> Callable:
        def run(self, op) -> None:
            result = fn(op, self.options)
            if isinstance(result, int) and not isinstance(result, bool):
                self.count("changed", result)

        cls = type(fn.__name__, (Pass,), {"name": name, "summary": summary, "Options": options, "run": run,
                                          "__doc__": fn.__doc__, "__module__": fn.__module__,
                                          "__qualname__": fn.__qualname__})
        register_pass(cls)
        fn.pass_class = cls
        return fn

    return wrap


from etc.passes.registry import all_passes, get_pass, register_pass  # noqa: E402  (re-exported)


def __getattr__(name: str):
    # `RewritePatternSet` is MLIR's (torch_mlir.rewrite), imported only when a pass asks for it.
    if name == "RewritePatternSet":
        from torch_mlir.rewrite import RewritePatternSet

        return RewritePatternSet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
