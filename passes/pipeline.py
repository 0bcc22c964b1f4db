"""Pass pipelines: MLIR's textual pipeline syntax over etc's Python passes and MLIR's own.

    run_pipeline(module, "builtin.module(func.func(etc-dce, canonicalize), etc-memory-planning{alignment=64}, cse)")

The text is parsed here (MLIR's parser knows nothing of Python passes): an
element is a pass `name` with optional `{options}`, or an op anchor
`op.name(...)` nesting a list of elements. A pipeline that is not wrapped in
one anchor is anchored on `builtin.module`.

Execution goes in pipeline order. A Python pass runs on every op its nesting
anchors (`func.func(etc-dce)` runs `etc-dce` on each function of the module).
Consecutive upstream passes go to one `torch_mlir.passmanager.PassManager`,
keeping their nesting; a small Python pass added after each of them (with
`PassManager.add(callable)`) verifies and prints the IR, so that a failure
names the pass at fault. After every pass the verifier runs (`verify=True`):
invalid IR is a VerificationError naming the pass. `print_ir_after_all` prints
the module after each pass under `// -----// IR Dump After <pass> //----- //`
as mlir-opt does.

MLIR's context must not run multithreaded while Python code runs inside its
pass manager: `run` turns multithreading off on the module's context.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, TextIO

from etc.errors import EtcError, PassError, VerificationError
from etc.passes.option_text import scan_value
from etc.passes.registry import close_names, lookup_pass, all_passes

PIPELINE_SOURCE = "<pass-pipeline>"

# Upstream MLIR passes offered as suggestions for a misspelt pass name (MLIR's
# Python API cannot list its registry). Any registered upstream pass may be used.
KNOWN_UPSTREAM_PASSES = (
    "canonicalize", "cse", "symbol-dce", "symbol-privatize", "inline", "sccp", "trivial-dce",
    "remove-dead-values", "loop-invariant-code-motion", "control-flow-sink", "strip-debuginfo",
    "mem2reg", "sroa", "topological-sort", "print-ir", "print-op-stats", "snapshot-op-locations",
    "convert-scf-to-cf", "convert-func-to-llvm", "convert-arith-to-llvm", "convert-cf-to-llvm",
    "finalize-memref-to-llvm", "reconcile-unrealized-casts", "one-shot-bufferize",
    "convert-linalg-to-loops", "linalg-fuse-elementwise-ops", "convert-tensor-to-linalg",
    "convert-elementwise-to-linalg", "expand-strided-metadata", "lower-affine", "convert-math-to-llvm",
    "arith-expand", "buffer-deallocation-pipeline", "convert-to-llvm",
)


# ------------------------------------------------------------------ syntax
@dataclasses.dataclass
class PassElement:
    """`name{options}` at column `col` (1-based) of the pipeline text."""

    name: str
    options: str | None
    col: int

    def text(self) -> str:
        return self.name if self.options is None else f"{self.name}{{{self.options}}}"


@dataclasses.dataclass
class NestedElement:
    """`anchor(elements...)`: the elements run on each `anchor` op nested in the enclosing one."""

    anchor: str
    elements: list
    col: int

    def text(self) -> str:
        return f"{self.anchor}({', '.join(e.text() for e in self.elements)})"


def _error(message: str, text: str, pos: int) -> PassError:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return PassError(message, location=f"{PIPELINE_SOURCE}:{line}:{col}")


_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def parse_pipeline(text: str) -> NestedElement:
    """Parse a textual pipeline; errors are PassErrors at `<pass-pipeline>:1:<col>`."""
    pos = 0
    n = len(text)

    def skip() -> None:
        nonlocal pos
        while pos < n and text[pos].isspace():
            pos += 1

    def parse_list(closing: str | None, opened_at: int) -> list:
        nonlocal pos
        elements: list = []
        skip()
        if closing and pos < n and text[pos] == closing:
            pos += 1
            return elements
        while True:
            skip()
            start = pos
            while pos < n and text[pos] in _NAME_CHARS:
                pos += 1
            name = text[start:pos]
            if not name:
                if pos >= n:
                    raise _error("expected a pass or op name, found the end of the pipeline", text, pos)
                raise _error(f"expected a pass or op name, found '{text[pos]}'", text, pos)
            skip()
            if pos < n and text[pos] == "{":
                brace = pos
                pos = scan_value(text, brace + 1, "}")[0]
                if pos >= n:
                    raise _error(f"unbalanced '{{' in the options of '{name}'", text, brace)
                elements.append(PassElement(name, text[brace + 1:pos].strip(), start + 1))
                pos += 1
            elif pos < n and text[pos] == "(":
                paren = pos
                pos += 1
                elements.append(NestedElement(name, parse_list(")", paren), start + 1))
            else:
                elements.append(PassElement(name, None, start + 1))
            skip()
            if pos < n and text[pos] == ",":
                pos += 1
                continue
            if closing is not None:
                if pos < n and text[pos] == closing:
                    pos += 1
                    return elements
                if pos >= n:
                    raise _error(f"expected ')' to close '(' at column {opened_at + 1}", text, pos)
                raise _error(f"expected ',' or ')', found '{text[pos]}'", text, pos)
            if pos >= n:
                return elements
            raise _error(f"expected ',' or the end of the pipeline, found '{text[pos]}'", text, pos)

    if not text.strip():
        return NestedElement("builtin.module", [], 1)
    elements = parse_list(None, 0)
    if len(elements) == 1 and isinstance(elements[0], NestedElement) and \
            elements[0].anchor in ("builtin.module", "any"):
        return elements[0]
    if any(isinstance(e, NestedElement) and e.anchor == "builtin.module" for e in elements):
        raise PassError("'builtin.module(...)' must be the whole pipeline, not one element of it",
                        location=f"{PIPELINE_SOURCE}:1:1")
    return NestedElement("builtin.module", elements, 1)


# ------------------------------------------------------------------ steps
@dataclasses.dataclass
class Step:
    """One pass of the flattened pipeline: its anchor path below the root, and how it runs."""

    element: PassElement
    path: tuple  # anchors below the root: ("func.func",)
    python_pass: Any = None  # a Pass instance, or None for an upstream pass

    @property
    def label(self) -> str:
        where = f" ('{self.path[-1]}' operation)" if self.path else ""
        return f"{self.element.name}{where}"

    def nested_text(self) -> str:
        text = self.element.text()
        for anchor in reversed(self.path):
            text = f"{anchor}({text})"
        return text


def _mlir_message(exc) -> tuple[str, str | None, list[str]]:
    """(message, location, notes) of an MLIRError's first error diagnostic."""
    from etc.ir.locations import format_location

    diagnostics = list(getattr(exc, "error_diagnostics", []) or [])
    if not diagnostics:
        return str(exc), None, []
    first = diagnostics[0]
    notes = [n.message for n in first.notes if not n.message.startswith("see current operation")]
    return first.message, format_location(first.location), notes


class Pipeline:
    """A parsed, resolved pipeline; `run(module)` applies it in place."""

    def __init__(self, text: str, context=None):
        from torch_mlir import ir

        self.text = text
        self.root = parse_pipeline(text)
        self.context = context or ir.Context.current
        self.steps: list[Step] = []
        self._resolve(self.root, ())

    def __str__(self) -> str:
        """The pipeline with every option of etc's passes spelled out (their defaults included)."""
        instances = {id(step.element): step.python_pass for step in self.steps if step.python_pass is not None}

        def text(element) -> str:
            if isinstance(element, NestedElement):
                return f"{element.anchor}({', '.join(text(e) for e in element.elements)})"
            instance = instances.get(id(element))
            return str(instance) if instance is not None else element.text()

        return text(self.root)

    def _resolve(self, nested: NestedElement, path: tuple) -> None:
        for element in nested.elements:
            if isinstance(element, NestedElement):
                self._resolve(element, path + (element.anchor,))
                continue
            cls = lookup_pass(element.name)
            if cls is not None:
                try:
                    instance = cls(element.options)
                except PassError as exc:
                    exc.location = exc.location or f"{PIPELINE_SOURCE}:1:{element.col}"
                    raise
                self.steps.append(Step(element, path, instance))
            else:
                step = Step(element, path)
                self._check_upstream(step)
                self.steps.append(step)

    def _check_upstream(self, step: Step) -> None:
        from torch_mlir import ir, passmanager

        text = f"{self.root.anchor}({step.nested_text()})"
        try:
            passmanager.PassManager.parse(text, context=self.context)
        except (ValueError, ir.MLIRError) as exc:
            message = str(exc)
            where = f"{PIPELINE_SOURCE}:1:{step.element.col}"
            if "does not refer to a registered pass" in message or "unknown pass" in message.lower():
                candidates = list(all_passes()) + list(KNOWN_UPSTREAM_PASSES)
                close = close_names(step.element.name, candidates)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else \
                    "; `etc-opt --list-passes` lists etc's passes"
                raise PassError(f"'{step.element.name}' does not refer to a registered pass{hint}",
                                location=where) from None
            detail = message.split("\n")
            detail = " ".join(line.strip() for line in detail if line.strip() and
                              not line.startswith("Failed to parse pass pipeline"))
            raise PassError(f"invalid upstream pass '{step.element.text()}': {detail}", location=where) from None

    # ------------------------------------------------------------ running
    def run(self, module, *, verify: bool = True, print_ir_after_all: bool = False,
            print_stream: TextIO | None = None, print_options: dict | None = None) -> None:
        """Run every pass on `module` (an ir.Module or an op) in place."""
        op = module.operation
        if self.root.anchor not in ("any", op.name):
            raise PassError(f"pipeline anchored on '{self.root.anchor}' cannot run on a '{op.name}'",
                            location=f"{PIPELINE_SOURCE}:1:{self.root.col}")
        op.context.enable_multithreading(False)
        if verify and self.steps:
            # So that invalid input is not blamed on the first pass.
            from torch_mlir import ir

            try:
                op.verify()
            except ir.MLIRError as exc:
                message, location, notes = _mlir_message(exc)
                raise VerificationError(f"{message} (the IR is invalid before the pipeline runs)",
                                        location=location, notes=notes) from None
        self._verify, self._print = verify, print_ir_after_all
        self._stream = print_stream if print_stream is not None else sys.stderr
        self._print_options = dict(print_options or {})
        self._seconds = [0.0] * len(self.steps)
        self._verifier_seconds = 0.0
        i = 0
        while i < len(self.steps):
            if self.steps[i].python_pass is not None:
                self._run_python(op, i)
                i += 1
                continue
            j = i
            while j < len(self.steps) and self.steps[j].python_pass is None:
                j += 1
            self._run_upstream(op, i, j)
            i = j

    def timings(self) -> list[tuple[str, float]]:
        """(pass label, wall seconds) of every pass of the last run, in pipeline order, then
        ("(verifier)", seconds) for the verification and printing between passes. Upstream passes
        that run back to back in one pass manager are told apart by the markers between them."""
        seconds = getattr(self, "_seconds", None)
        if seconds is None:
            return []
        return [(step.label, t) for step, t in zip(self.steps, seconds)] + [("(verifier)", self._verifier_seconds)]

    def timing_report(self) -> str:
        """`timings()` as mlir-opt's `--mlir-timing` prints its execution time report."""
        rows = self.timings()
        total = sum(t for _, t in rows)
        rule = "===" + "-" * 73 + "==="
        lines = [rule, "... Execution time report ...".center(79).rstrip(), rule,
                 f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
        for label, t in rows + [("Total", total)]:
            share = 100.0 * t / total if total else 0.0
            lines.append(f"  {t:8.4f} ({share:5.1f}%)  {label}")
        return "\n".join(lines) + "\n"

    def statistics(self) -> list[tuple[str, dict]]:
        """(pass name, statistics) of each Python pass that counted something, in pipeline order."""
        return [(step.element.name, dict(step.python_pass.statistics)) for step in self.steps
                if step.python_pass is not None and step.python_pass.statistics]

    def _anchored(self, op, path: tuple) -> list:
        if not path:
            return [op]
        found = []
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    if path[0] in ("any", child.operation.name):
                        found += self._anchored(child.operation, path[1:])
        return found

    def _run_python(self, op, index: int) -> None:
        from etc.errors import EtcError, InternalError

        step = self.steps[index]
        start = time.perf_counter()
        for target in self._anchored(op, step.path):
            try:
                step.python_pass.run(target)
            except EtcError:
                raise
            except Exception as exc:
                from etc.ir.locations import format_location
                from etc.passes.registry import is_user_pass, user_pass_error

                if is_user_pass(type(step.python_pass)):  # the user's bug, at the user's line
                    raise user_pass_error(step.element.name, exc, format_location(target.location)) from exc
                # a bug in one of etc's passes: say which one, keep the cause
                raise InternalError(
                    f"pass '{step.element.name}' crashed: {type(exc).__name__}: {exc}",
                    location=str(target.location),
                    notes=["this is a bug in etc, not in your program: please report it with the input IR "
                           "(etc-opt --mlir-print-ir-after-all shows the IR each pass received)"]) from exc
        self._seconds[index] += time.perf_counter() - start
        self._after(op, step)

    def _after(self, op, step: Step) -> None:
        start = time.perf_counter()
        try:
            self._verify_and_print(op, step)
        finally:
            self._verifier_seconds += time.perf_counter() - start

    def _verify_and_print(self, op, step: Step) -> None:
        from torch_mlir import ir

        if self._verify:
            try:
                op.verify()
            except ir.MLIRError as exc:
                message, location, notes = _mlir_message(exc)
                raise VerificationError(f"{message} (the IR is invalid after pass '{step.element.name}')",
                                        location=location, notes=notes) from None
        if self._print:
            self._stream.write(f"// -----// IR Dump After {step.label} //----- //\n")
            op.print(file=self._stream, assume_verified=self._verify, **self._print_options)
            self._stream.write("\n")
            self._stream.flush()

    def _run_upstream(self, op, first: int, end: int) -> None:
        """Steps first..end-1 (all upstream) in one pass manager, a marker after each."""
        from torch_mlir import ir, passmanager

        steps = self.steps[first:end]
        pm = passmanager.PassManager(self.root.anchor, context=op.context)
        pm.enable_verifier(False)  # the markers verify, so that a failure names its pass
        done = []
        clock = [time.perf_counter()]  # when the pass after the last marker started
        for step in steps:
            pm.add(step.nested_text())

            def marker(target, _pass=None, step=step):
                self._seconds[first + len(done)] += time.perf_counter() - clock[0]
                done.append(step)
                self._after(target, step)
                clock[0] = time.perf_counter()

            pm.add(marker, f"after-{step.element.name}")
        clock[0] = time.perf_counter()
        try:
            pm.run(op)
        except ir.MLIRError as exc:
            failed = steps[len(done)] if len(done) < len(steps) else steps[-1]
            message, location, notes = _mlir_message(exc)
            raise PassError(f"{message} (pass '{failed.element.name}' failed)", location=location,
                            notes=notes) from None


def run_pipeline(module, text: str, *, verify: bool = True, print_ir_after_all: bool = False,
                 print_stream: TextIO | None = None, print_options: dict | None = None) -> Pipeline:
    """Parse `text` and run it on `module` in place; returns the Pipeline (its passes' statistics).

    Raises PassError for a malformed pipeline, an unknown pass (naming close
    names), a bad option or a failing pass, VerificationError when a pass leaves
    invalid IR, and whatever EtcError a pass raises itself.
    """
    pipeline = Pipeline(text, context=module.operation.context)
    pipeline.run(module, verify=verify, print_ir_after_all=print_ir_after_all,
                 print_stream=print_stream if print_stream is not None else sys.stderr,
                 print_options=print_options)
    return pipeline


__all__ = ["run_pipeline", "parse_pipeline", "Pipeline", "PassElement", "NestedElement", "Step",
           "EtcError"]
