"""etc-opt: mlir-opt for etc's dialects and passes.

    etc-opt input.mlir --etc-canonicalize-aten --etc-dce --cse
    etc-opt input.mlir --etc-memory-planning="alignment=64 algorithm=naive" -o out.mlir
    etc-opt - --pass-pipeline='builtin.module(func.func(etc-dce, canonicalize), cse)'
    etc-opt input.mlir --split-input-file --verify-diagnostics --etc-convert-aten-to-edge
    etc-opt input.mlir --etc-dce --mlir-pass-statistics      # what each pass counted
    etc-opt input.mlir --etc-dce --mlir-timing               # where the time went, pass by pass
    etc-opt --list-passes
    etc-opt input.mlir --load-pass-plugin=my_passes.py --my-pass   # a user's passes

Input is a file or `-` (stdin), parsed in a context with the aten, edge and
backend dialects (`etc.dialects.make_context`). Passes come either from one
flag per pass, in command-line order (`--<pass>` or `--<pass>=<options>`;
etc's passes and any upstream MLIR pass), or from `--pass-pipeline`
(`etc.passes.pipeline` syntax). The verifier runs after every pass.
`--load-pass-plugin=PATH_OR_MODULE` (any number of times) first imports a
user's module (a `.py` file or a dotted module name): its `@register_pass`
passes are then listed, given as flags and run like etc's own.

Errors in the input, the pipeline or a pass print as MLIR diagnostics
(`file:line:col: error: ...`) and exit with status 1. `--verify-diagnostics`
instead checks the diagnostics against `// expected-error {{...}}` comments
(`expected-warning`, `expected-note`, `expected-remark`; `@below`, `@above`,
`@+N`, `@-N`, `@unknown`; `-re` for a regular expression), and exits 1 only if
they disagree.
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import sys
from dataclasses import dataclass, field

from etc.errors import EtcError

SPLIT_MARKER = "// -----"
_LOCATION_RE = re.compile(r"^(?P<file>.*):(?P<line>\d+):(?P<col>\d+)$")

_OWN_FLAGS = ("o", "pass-pipeline", "split-input-file", "mlir-print-ir-after-all", "list-passes",
              "verify-diagnostics", "mlir-print-debuginfo", "allow-unregistered-dialect",
              "mlir-print-op-generic", "mlir-pass-statistics", "mlir-timing", "dump-pass-pipeline", "verify-each",
              "help", "h", "load-pass-plugin")


# ------------------------------------------------------------- diagnostics
@dataclass
class Diag:
    severity: str  # error | warning | note | remark
    message: str
    location: str | None  # file:line:col, a name, or None
    notes: list = field(default_factory=list)  # of Diag

    def position(self):
        """(file, line, col) or None."""
        if self.location is None:
            return None
        match = _LOCATION_RE.match(self.location)
        if not match:
            return None
        return match["file"], int(match["line"]), int(match["col"])

    def render(self) -> str:
        head = f"{self.location}: " if self.location else ""
        lines = [f"{head}{self.severity}: {self.message}"]
        for note in self.notes:
            lines.append(note.render())
        return "\n".join(lines)


_SEVERITY = {"ERROR": "error", "WARNING": "warning", "NOTE": "note", "REMARK": "remark"}


def _from_mlir(diagnostic) -> Diag:
    from etc.ir.locations import format_location

    severity = _SEVERITY.get(str(diagnostic.severity).rsplit(".", 1)[-1], "error")
    notes = [_from_mlir(n) for n in diagnostic.notes if not n.message.startswith("see current operation")]
    return Diag(severity, diagnostic.message, format_location(diagnostic.location), notes)


def _from_exception(exc: EtcError) -> Diag:
    # An EtcError's notes carry no position of their own: like MLIR's, they are at the error's.
    return Diag("error", exc.message, exc.location, [Diag("note", n, exc.location) for n in exc.notes])


# ------------------------------------------------------------------ input
def split_input(text: str, split: bool) -> list[str]:
    """The input buffers; each is padded with newlines so that line numbers stay those of the file."""
    if not split:
        return [text]
    chunks, current, start = [], [], 0
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if line.strip().startswith(SPLIT_MARKER):
            chunks.append("\n" * start + "\n".join(current))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append("\n" * start + "\n".join(current))
    return chunks


def _first_op_line(lines: list[str]) -> int | None:
    """Index of the first line that starts an op (not blank, a comment or an alias definition)."""
    depth = 0
    for index, line in enumerate(lines):
        stripped = line.strip()
        if depth > 0:
            depth += stripped.count("<") + stripped.count("(") - stripped.count(">") - stripped.count(")")
            continue
        if not stripped or stripped.startswith("//"):
            continue
        if stripped[0] in "#!" and "=" in stripped:
            depth = stripped.count("<") + stripped.count("(") - stripped.count(">") - stripped.count(")")
            continue
        return index
    return None


def wrap_in_module(text: str) -> str:
    """The text inside `module { ... }`, keeping every op's line (and, mostly, column):
    `module {` replaces the comment or blank line before the first op when there is one."""
    lines = text.split("\n")
    first = _first_op_line(lines)
    if first is None:
        return text
    before = lines[first - 1].strip() if first > 0 else None
    if before is not None and (not before or before.startswith("//")) and \
            _first_op_line(lines[:first]) is None:
        lines[first - 1] = "module {"
    else:
        lines[first] = "module {" + lines[first]
    # Close the module after the last op, before trailing alias definitions (`#loc = loc(...)`).
    last = len(lines) - 1
    while last > first:
        stripped = lines[last].strip()
        if stripped and not stripped.startswith("//") and not (stripped[0] in "#!" and "=" in stripped):
            break
        last -= 1
    if "//" in lines[last]:
        lines.insert(last + 1, "}")
    else:
        lines[last] += " }"
    return "\n".join(lines)


def parse_input(text: str, source_name: str, context):
    """Parse a buffer as mlir-opt does: a single top-level builtin.module is the module; other
    top-level ops are wrapped in one. Returns the module op (raises ir.MLIRError)."""
    from torch_mlir import ir

    try:
        op = ir.Operation.parse(text, source_name=source_name, context=context)
    except ir.MLIRError as exc:
        count = re.search(r"source must contain a single top-level operation, found: (\d+)", str(exc))
        if count is None:
            raise
        if count.group(1) == "0":
            with context, ir.Location.unknown():
                return ir.Module.create().operation
        op = ir.Operation.parse(wrap_in_module(text), source_name=source_name, context=context)
    if op.operation.name == "builtin.module":
        return op.operation
    with context, ir.Location.unknown():
        module = ir.Module.create()
        module.body.append(op.operation)
        return module.operation


# ----------------------------------------------------------- expectations
_EXPECT_RE = re.compile(r"expected-(?P<kind>error|warning|note|remark)(?P<re>-re)?\s*"
                        r"(?:@(?P<where>[+-]\d+|above|below|unknown))?\s*\{\{(?P<text>.*)\}\}")


def _mlir_regex(text: str) -> str:
    """An `expected-*-re` text as a Python regex: literal except inside `{{...}}`."""
    parts, pos = [], 0
    while True:
        start = text.find("{{", pos)
        if start < 0:
            parts.append(re.escape(text[pos:]))
            return "".join(parts)
        end = text.find("}}", start + 2)
        if end < 0:
            parts.append(re.escape(text[pos:]))
            return "".join(parts)
        parts.append(re.escape(text[pos:start]))
        parts.append("(?:" + text[start + 2:end] + ")")
        pos = end + 2


@dataclass
class Expectation:
    severity: str
    text: str
    regex: bool
    line: int | None  # None: @unknown
    comment_line: int
    comment_col: int = 1
    matched: bool = False

    def matches(self, diag: Diag, source_name: str) -> bool:
        if diag.severity != self.severity:
            return False
        position = diag.position()
        if self.line is None:
            if position is not None and position[0] == source_name:
                return False
        elif position is None or position[0] != source_name or position[1] != self.line:
            return False
        if self.regex:
            return re.search(_mlir_regex(self.text), diag.message) is not None
        return self.text in diag.message


def parse_expectations(text: str) -> list[Expectation]:
    lines = text.split("\n")
    found = []
    for index, line in enumerate(lines):
        for match in _EXPECT_RE.finditer(line):
            where = match["where"]
            number = index + 1
            if where is None:
                target = number
            elif where == "unknown":
                target = None
            elif where == "below":
                target = next((i + 1 for i in range(index + 1, len(lines)) if "expected-" not in lines[i]),
                              number + 1)
            elif where == "above":
                target = next((i + 1 for i in range(index - 1, -1, -1) if "expected-" not in lines[i]),
                              number - 1)
            else:
                target = number + int(where)
            found.append(Expectation(match["kind"], match["text"], bool(match["re"]), target, number,
                                     match.start() + 1))
    return found


def check_expectations(diags: list[Diag], expectations: list[Expectation], source_name: str) -> list[Diag]:
    """Problems (as error Diags) between emitted diagnostics (notes included) and expectations."""
    problems = []
    flat = []
    for diag in diags:
        flat.append(diag)
        flat.extend(diag.notes)
    for diag in flat:
        expectation = next((e for e in expectations if not e.matched and e.matches(diag, source_name)), None)
        if expectation is None:
            problems.append(Diag("error", f"unexpected {diag.severity}: {diag.message}",
                                 diag.location if diag.position() else None))
        else:
            expectation.matched = True
    for e in expectations:
        if not e.matched:
            where = f"{source_name}:{e.comment_line}:{e.comment_col}"
            problems.append(Diag("error", f"expected {e.severity} \"{e.text}\" was not produced", where))
    return problems


# ------------------------------------------------------------ command line
def _parser(pass_classes) -> argparse.ArgumentParser:
    from etc.passes.pass_api import options_help

    parser = argparse.ArgumentParser(
        prog="etc-opt", description="mlir-opt for etc's dialects and passes",
        epilog="Any upstream MLIR pass can be given as a flag too (--cse, --canonicalize, ...).")
    parser.add_argument("input", nargs="?", default="-", help="input file ('-' for stdin, the default)")
    parser.add_argument("-o", dest="output", default="-", help="output file ('-' for stdout, the default)")
    parser.add_argument("--pass-pipeline", help="a textual pass pipeline, e.g. 'builtin.module(etc-dce, cse)'")
    parser.add_argument("--split-input-file", action="store_true",
                        help=f"process each '{SPLIT_MARKER}'-separated chunk of the input on its own")
    parser.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after every pass")
    parser.add_argument("--list-passes", action="store_true", help="list etc's passes and their options")
    parser.add_argument("--load-pass-plugin", action="append", default=[], metavar="PATH_OR_MODULE",
                        help="import a .py file or a dotted module whose passes then register (repeatable)")
    parser.add_argument("--verify-diagnostics", action="store_true",
                        help="check diagnostics against expected-* comments in the input")
    parser.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    parser.add_argument("--mlir-print-op-generic", action="store_true", help="print ops in generic form")
    parser.add_argument("--dump-pass-pipeline", action="store_true",
                        help="print the pipeline, with every option of etc's passes, to stderr")
    parser.add_argument("--mlir-pass-statistics", action="store_true",
                        help="print what each etc pass counted (to stderr)")
    parser.add_argument("--mlir-timing", action="store_true",
                        help="print each pass's wall time and the verifier's after the run (to stderr)")
    parser.add_argument("--allow-unregistered-dialect", action="store_true",
                        help="accept ops of dialects that are not registered")
    parser.add_argument("--verify-each", default="true", choices=("true", "false", "1", "0"),
                        help="run the verifier after each pass (default true)")
    group = parser.add_argument_group("etc passes")
    for name, cls in pass_classes.items():
        options = options_help(cls.Options)
        # Shown by --help only: pass flags are taken out of argv before argparse sees it.
        if options:
            metavar = '"' + " ".join(f"{o}=<{t}>" for o, t, _ in options) + '"'
            group.add_argument(f"--{name}", nargs="?", metavar=metavar, help=cls.summary)
        else:
            group.add_argument(f"--{name}", action="store_true", help=cls.summary)
    return parser


def _split_pass_flags(argv: list[str], pass_names, context) -> tuple[list[str], list[tuple[str, str | None]],
                                                                      list[str]]:
    """Separate pass flags (in order) from etc-opt's own arguments; unknown flags are returned too."""
    from torch_mlir import ir, passmanager

    rest, passes, unknown = [], [], []
    takes_value = {"-o", "--pass-pipeline", "--verify-each", "--load-pass-plugin", "-load-pass-plugin"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in takes_value:
            rest += argv[i:i + 2]
            i += 2
            continue
        if arg == "-" or not arg.startswith("-") or arg == "--":
            rest.append(arg)
            i += 1
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in _OWN_FLAGS:
            if len(name) > 1 and not arg.startswith("--"):
                arg = "-" + arg  # mlir-opt spells long options with one dash too: -split-input-file
            if name in ("pass-pipeline", "verify-each", "load-pass-plugin") and not eq:
                rest += [arg] + argv[i + 1:i + 2]
                i += 2
                continue
            rest.append(arg)
        elif name in pass_names:
            passes.append((name, value if eq else None))
        else:
            try:
                passmanager.PassManager.parse(f"builtin.module({name})", context=context)
                passes.append((name, value if eq else None))
            except (ValueError, ir.MLIRError):
                unknown.append(arg)
        i += 1
    return rest, passes, unknown


def list_passes(pass_classes, out) -> None:
    from etc.passes.pass_api import options_help

    out.write("etc passes (any upstream MLIR pass can be used too):\n")
    for name, cls in pass_classes.items():
        out.write(f"  {name}\n      {cls.summary}\n")
        for option_name, kind, text in options_help(cls.Options):
            out.write(f"      {option_name}=<{kind}>  {text}\n")


class _Run:
    """One invocation: context, diagnostics of the current buffer, output."""

    def __init__(self, args, pipeline_text: str, context):
        self.args = args
        self.pipeline_text = pipeline_text
        self.context = context
        self.context.allow_unregistered_dialects = bool(args.allow_unregistered_dialect)
        self.diags: list[Diag] = []
        self._handler = self.context.attach_diagnostic_handler(self._on_mlir_diagnostic)

    def _on_mlir_diagnostic(self, diagnostic) -> bool:
        self.diags.append(_from_mlir(diagnostic))
        return True

    def _add(self, diag: Diag) -> None:
        key = (diag.severity, diag.message, diag.location)
        if all((d.severity, d.message, d.location) != key for d in self.diags):
            self.diags.append(diag)

    def process(self, text: str, source_name: str, out) -> bool:
        """Parse, transform and print one buffer; returns success (diagnostics in self.diags)."""
        from torch_mlir import ir

        from etc.passes.pass_api import collect_diagnostics
        from etc.passes.pipeline import run_pipeline

        args = self.args
        print_options = {"enable_debug_info": bool(args.mlir_print_debuginfo),
                         "print_generic_op_form": bool(args.mlir_print_op_generic)}
        try:
            with self.context:
                module = parse_input(text, source_name, self.context)
                with collect_diagnostics(lambda d: self._add(Diag(d.severity, d.message, d.location))):
                    pipeline = run_pipeline(module, self.pipeline_text, verify=args.verify_each in ("true", "1"),
                                            print_ir_after_all=args.mlir_print_ir_after_all,
                                            print_stream=sys.stderr, print_options=print_options)
                if args.mlir_pass_statistics:
                    for name, counts in pipeline.statistics():
                        items = ", ".join(f"{key} = {value}" for key, value in counts.items())
                        sys.stderr.write(f"// pass statistics: {name}: {items}\n")
                if args.mlir_timing:
                    sys.stderr.write(pipeline.timing_report())
                buffer = io.StringIO()
                module.print(file=buffer, assume_verified=True, **print_options)
        except ir.MLIRError as exc:
            for diagnostic in exc.error_diagnostics:
                self._add(_from_mlir(diagnostic))
            if not exc.error_diagnostics:
                self._add(Diag("error", str(exc), None))
            return False
        except EtcError as exc:
            self._add(_from_exception(exc))
            return False
        out.write(buffer.getvalue())
        if not buffer.getvalue().endswith("\n"):
            out.write("\n")
        return True


def _plugin_specs(argv: list[str]) -> list[str]:
    """The values of every `--load-pass-plugin` (`=X` or ` X`), in order: loaded before the
    pass flags are told from unknown ones."""
    specs = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name == "load-pass-plugin":
            if eq:
                specs.append(value)
            elif i + 1 < len(argv):
                specs.append(argv[i + 1])
    return specs


def main(argv: list[str] | None = None) -> int:
    from torch_mlir import ir

    from etc.dialects import make_context
    from etc.passes.registry import all_passes, load_pass_plugin, pass_names

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        for plugin in _plugin_specs(argv):
            load_pass_plugin(plugin)
    except EtcError as exc:
        print(_from_exception(exc).render(), file=sys.stderr)
        return 1
    names = set(pass_names())  # a pass module is imported when its pass runs, not to read the flags
    context = make_context()
    rest, flag_passes, unknown = _split_pass_flags(argv, names, context)
    # the passes' classes (summaries, options) only for --help and --list-passes
    pass_classes = all_passes() if {"-h", "--help", "--list-passes", "-list-passes"} & set(rest) else {}
    parser = _parser(pass_classes)
    if unknown:
        candidates = [f"--{n}" for n in list(_OWN_FLAGS) + sorted(names)]
        for arg in unknown:
            flag = arg.split("=", 1)[0]
            close = difflib.get_close_matches("--" + flag.lstrip("-"), candidates, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else \
                "; see etc-opt --help and --list-passes"
            print(f"error: unknown pass or option '{flag}'{hint}", file=sys.stderr)
        return 1
    args = parser.parse_args(rest)
    if args.list_passes:
        list_passes(pass_classes, sys.stdout)
        return 0
    if args.pass_pipeline is not None and flag_passes:
        print("error: --pass-pipeline cannot be combined with pass flags "
              f"({', '.join('--' + n for n, _ in flag_passes)})", file=sys.stderr)
        return 1
    if args.pass_pipeline is not None:
        pipeline_text = args.pass_pipeline
    else:
        pipeline_text = "builtin.module(" + ", ".join(
            name if value is None else f"{name}{{{value}}}" for name, value in flag_passes) + ")"

    source_name = "<stdin>" if args.input == "-" else args.input
    try:
        text = sys.stdin.read() if args.input == "-" else open(args.input, encoding="utf-8").read()
    except OSError as exc:
        print(f"error: could not open input file '{args.input}': {exc.strerror}", file=sys.stderr)
        return 1
    try:
        out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    except OSError as exc:
        print(f"error: could not open output file '{args.output}': {exc.strerror}", file=sys.stderr)
        return 1

    run = _Run(args, pipeline_text, context)
    # A malformed pipeline or an unknown pass is reported once, before any input is processed.
    from etc.passes.pipeline import Pipeline

    try:
        with run.context:
            pipeline = Pipeline(pipeline_text, context=run.context)
        if args.dump_pass_pipeline:
            print(pipeline, file=sys.stderr)
    except EtcError as exc:
        if args.pass_pipeline is None and (exc.location or "").startswith("<pass-pipeline>"):
            exc.location = None  # the pipeline was built from flags: its columns mean nothing
        print(_from_exception(exc).render(), file=sys.stderr)
        return 1
    except ir.MLIRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    ok = True
    chunks = split_input(text, args.split_input_file)
    for index, chunk in enumerate(chunks):
        if index:
            out.write(SPLIT_MARKER + "\n")
        run.diags = []
        success = run.process(chunk, source_name, out)
        if args.verify_diagnostics:
            problems = check_expectations(run.diags, parse_expectations(chunk), source_name)
            for problem in problems:
                print(problem.render(), file=sys.stderr)
            ok = ok and not problems
        else:
            for diag in run.diags:
                print(diag.render(), file=sys.stderr)
            ok = ok and success
    out.flush()
    if out is not sys.stdout:
        out.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
